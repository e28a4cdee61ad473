//! Static memory plan: assigns every runtime buffer an offset in one arena so that
//! buffers whose lifetimes overlap never share bytes.
//!
//! A buffer lives over the closed node-index interval `[first, last]` (its producer to
//! its last reader). Buffers are placed largest first at the lowest offset that does not
//! collide with an already placed, lifetime-overlapping buffer. Offsets are multiples of
//! [`ALIGN`] bytes.

/// Alignment of every buffer in the arena, in bytes (one cache line).
pub const ALIGN: usize = 64;

/// Lifetimes (in node steps) above this are kept in one list rather than per step.
const LONG_LIVED: usize = 64;

/// One buffer to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    /// Size in bytes.
    pub size: usize,
    /// First node index at which the buffer is live.
    pub first: usize,
    /// Last node index at which the buffer is live (inclusive).
    pub last: usize,
}

impl Buffer {
    fn overlaps_in_time(&self, o: &Buffer) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

/// Places `bufs`; returns each buffer's byte offset and the arena size.
pub fn assign(bufs: &[Buffer]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by(|&a, &b| bufs[b].size.cmp(&bufs[a].size).then(a.cmp(&b)));
    let mut offsets = vec![0usize; bufs.len()];
    let mut placed: Vec<usize> = Vec::new();
    // Placed short-lived buffers indexed by the node steps they live at, long-lived ones
    // (graph inputs/outputs, long skips) in one list, so a buffer finds its
    // time-overlapping neighbours without scanning every placed buffer; when the steps
    // hold more entries than there are placed buffers, the plain scan is used instead.
    let horizon = bufs
        .iter()
        .flat_map(|b| [b.first, if b.last == usize::MAX { 0 } else { b.last }])
        .max()
        .unwrap_or(0);
    let span = |b: &Buffer| b.first.min(horizon)..=b.last.min(horizon);
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); horizon + 1];
    let mut long: Vec<usize> = Vec::new();
    let is_long = |b: &Buffer| b.last.min(horizon) - b.first.min(horizon) > LONG_LIVED;
    let mut seen = vec![usize::MAX; bufs.len()];
    let mut total = 0;
    for &i in &order {
        let size = bufs[i].size.div_ceil(ALIGN) * ALIGN;
        let entries: usize = span(&bufs[i]).map(|t| live_at[t].len()).sum();
        let mut near: Vec<usize> = long.clone();
        if entries + long.len() <= placed.len() {
            for t in span(&bufs[i]) {
                for &j in &live_at[t] {
                    if std::mem::replace(&mut seen[j], i) != i {
                        near.push(j);
                    }
                }
            }
        } else {
            near.clone_from(&placed);
        }
        // Collect the occupied ranges of time-overlapping buffers, sorted by offset.
        let mut busy: Vec<(usize, usize)> = near
            .iter()
            .filter(|&&j| bufs[j].overlaps_in_time(&bufs[i]))
            .map(|&j| {
                (
                    offsets[j],
                    offsets[j] + bufs[j].size.div_ceil(ALIGN) * ALIGN,
                )
            })
            .collect();
        busy.sort_unstable();
        let mut off = 0;
        for (lo, hi) in busy {
            if off + size <= lo {
                break;
            }
            off = off.max(hi);
        }
        offsets[i] = off;
        total = total.max(off + size);
        placed.push(i);
        if is_long(&bufs[i]) {
            long.push(i);
        } else {
            for t in span(&bufs[i]) {
                live_at[t].push(i);
            }
        }
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_lifetimes_never_share_bytes() {
        let mut seed = 7u64;
        let mut bufs = Vec::new();
        for _ in 0..200 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let first = (seed >> 33) as usize % 50;
            let len = (seed >> 20) as usize % 10;
            let size = 1 + (seed >> 45) as usize % 5000;
            bufs.push(Buffer {
                size,
                first,
                last: first + len,
            });
        }
        let (off, total) = assign(&bufs);
        for i in 0..bufs.len() {
            assert_eq!(off[i] % ALIGN, 0);
            assert!(off[i] + bufs[i].size <= total);
            for j in 0..i {
                if bufs[i].overlaps_in_time(&bufs[j]) {
                    let (a0, a1) = (off[i], off[i] + bufs[i].size);
                    let (b0, b1) = (off[j], off[j] + bufs[j].size);
                    assert!(a1 <= b0 || b1 <= a0, "buffers {i} and {j} collide");
                }
            }
        }
        let sum: usize = bufs.iter().map(|b| b.size).sum();
        assert!(
            total < sum,
            "reuse must make the arena smaller than the sum"
        );
    }

    #[test]
    fn chain_reuses_two_slots() {
        // a -> b -> c -> d: each buffer dies when the next one is produced.
        let bufs: Vec<Buffer> = (0..4)
            .map(|i| Buffer {
                size: 128,
                first: i,
                last: i + 1,
            })
            .collect();
        let (_, total) = assign(&bufs);
        assert_eq!(total, 256);
    }
}

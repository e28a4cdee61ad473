//! N-dimensional iteration and data movement over raw element bytes.
//!
//! Layout ops (Transpose, Slice, Expand, Tile, Concat, Split, DepthToSpace, Reshape
//! copies) are all one [`StridedCopy`]: a box of `dims` read with signed source strides
//! and written with destination strides. Pad (every mode) and nearest Resize are an
//! [`IndexMapCopy`]: the output box is contiguous and each output coordinate maps to a
//! source offset per dimension (or to "fill").
//!
//! Invariants: dims are coalesced at plan time to at most [`MAX_RANK`] and at least two
//! dimensions; tiles split the outermost dimension.

/// Largest rank the iterators handle after coalescing.
pub const MAX_RANK: usize = 8;

/// Merges adjacent dimensions that are contiguous for every operand, drops unit
/// dimensions, and left-pads to rank 2. `strides[o][d]` is operand `o`'s stride of dim `d`.
pub fn coalesce(dims: &[usize], strides: &[Vec<isize>]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        if let Some(&last) = d.last() {
            let mergeable = strides
                .iter()
                .zip(&s)
                .all(|(st, cur)| cur[cur.len() - 1] == st[i] * dims[i] as isize);
            if mergeable {
                let n = d.len();
                d[n - 1] = last * dims[i];
                for (cur, st) in s.iter_mut().zip(strides) {
                    let m = cur.len();
                    cur[m - 1] = st[i];
                }
                continue;
            }
        }
        d.push(dims[i]);
        for (cur, st) in s.iter_mut().zip(strides) {
            cur.push(st[i]);
        }
    }
    while d.len() < 2 {
        d.insert(0, 1);
        for cur in s.iter_mut() {
            cur.insert(0, 0);
        }
    }
    (d, s)
}

/// Row-major contiguous strides of `dims`.
pub fn contiguous_strides(dims: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; dims.len()];
    let mut acc = 1isize;
    for i in (0..dims.len()).rev() {
        s[i] = acc;
        acc *= dims[i] as isize;
    }
    s
}

/// Calls `f(offsets, len)` for every row (all dims but the last) of the box `dims`
/// whose outermost coordinate lies in `[lo, hi)`; `offsets[o]` is operand `o`'s element
/// offset of the row start (from `base[o]`), `len` the length of the last dim.
pub fn for_rows<const N: usize>(
    dims: &[usize],
    strides: [&[isize]; N],
    base: [isize; N],
    lo: usize,
    hi: usize,
    mut f: impl FnMut([isize; N], usize),
) {
    let r = dims.len();
    debug_assert!((2..=MAX_RANK).contains(&r));
    let inner = dims[r - 1];
    let mut idx = [0usize; MAX_RANK];
    for i0 in lo..hi {
        let mut off = base;
        for o in 0..N {
            off[o] += i0 as isize * strides[o][0];
        }
        idx[1..r - 1].fill(0);
        'rows: loop {
            f(off, inner);
            // Advance the odometer over dims 1..r-1.
            let mut d = r - 2;
            loop {
                if d == 0 {
                    break 'rows;
                }
                idx[d] += 1;
                for o in 0..N {
                    off[o] += strides[o][d];
                }
                if idx[d] < dims[d] {
                    break;
                }
                for o in 0..N {
                    off[o] -= strides[o][d] * dims[d] as isize;
                }
                idx[d] = 0;
                d -= 1;
            }
        }
    }
}

/// A strided box copy between two byte buffers of elements of `elem` bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct StridedCopy {
    /// Element size in bytes.
    pub elem: usize,
    /// Coalesced box dims (rank ≥ 2).
    pub dims: Vec<usize>,
    /// Source strides in elements (may be 0 or negative).
    pub src_strides: Vec<isize>,
    /// Source offset of the box origin, in elements.
    pub src_off: isize,
    /// Destination strides in elements.
    pub dst_strides: Vec<isize>,
    /// Destination offset of the box origin, in elements.
    pub dst_off: isize,
}

impl StridedCopy {
    /// A copy of the box `dims` with the given (uncoalesced) strides.
    pub fn new(
        elem: usize,
        dims: &[usize],
        src_strides: &[isize],
        src_off: isize,
        dst_strides: &[isize],
        dst_off: isize,
    ) -> StridedCopy {
        let (dims, s) = coalesce(dims, &[src_strides.to_vec(), dst_strides.to_vec()]);
        StridedCopy {
            elem,
            dims,
            src_strides: s[0].clone(),
            src_off,
            dst_strides: s[1].clone(),
            dst_off,
        }
    }

    /// Length of the outermost (tileable) dimension.
    pub fn outer(&self) -> usize {
        self.dims[0]
    }

    /// True when every coalesced dimension fits the iterators.
    pub fn rank_ok(&self) -> bool {
        self.dims.len() <= MAX_RANK
    }

    /// Copies the part of the box whose outermost coordinate is in `[lo, hi)`.
    pub fn run(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        let e = self.elem;
        let r = self.dims.len();
        let (ss, ds) = (self.src_strides[r - 1], self.dst_strides[r - 1]);
        for_rows(
            &self.dims,
            [&self.src_strides, &self.dst_strides],
            [self.src_off, self.dst_off],
            lo,
            hi,
            |[so, dof], len| {
                let (so, dof) = (so as usize * e, dof as usize * e);
                if ss == 1 && ds == 1 {
                    dst[dof..dof + len * e].copy_from_slice(&src[so..so + len * e]);
                    return;
                }
                let (ss, ds) = (ss * e as isize, ds * e as isize);
                for i in 0..len as isize {
                    let s = (so as isize + i * ss) as usize;
                    let d = (dof as isize + i * ds) as usize;
                    copy_elem(e, &src[s..s + e], &mut dst[d..d + e]);
                }
            },
        );
    }
}

#[inline(always)]
fn copy_elem(e: usize, s: &[u8], d: &mut [u8]) {
    match e {
        4 => d[..4].copy_from_slice(&s[..4]),
        8 => d[..8].copy_from_slice(&s[..8]),
        1 => d[0] = s[0],
        _ => d.copy_from_slice(s),
    }
}

/// Fill marker in an [`IndexMapCopy`] map.
pub const FILL: isize = isize::MIN;

/// Gather copy into a contiguous output: output element at coordinates `(i_0..i_r)`
/// reads source element `sum_d maps[d][i_d]`, or `fill` when any map entry is [`FILL`].
#[derive(Debug, Clone, PartialEq)]
pub struct IndexMapCopy {
    /// Element size in bytes.
    pub elem: usize,
    /// Output dims.
    pub dims: Vec<usize>,
    /// Per dim, per output coordinate: source element offset contribution, or FILL.
    pub maps: Vec<Vec<isize>>,
    /// Bytes of the fill element (`elem` long).
    pub fill: Vec<u8>,
}

impl IndexMapCopy {
    /// Copies output rows whose first coordinate lies in `[lo, hi)`.
    pub fn run(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        let e = self.elem;
        let r = self.dims.len();
        let inner = self.dims[r - 1];
        let row_count: usize = self.dims[1..r - 1].iter().product();
        let mut idx = [0usize; MAX_RANK];
        let last = &self.maps[r - 1];
        for i0 in lo..hi {
            idx[..r].fill(0);
            idx[0] = i0;
            for row in 0..row_count {
                let mut base = 0isize;
                let mut fill_row = false;
                for d in 0..r - 1 {
                    let m = self.maps[d][idx[d]];
                    if m == FILL {
                        fill_row = true;
                    }
                    base = base.wrapping_add(m);
                }
                let out_row = (i0 * row_count + row) * inner;
                for (j, &m) in last.iter().enumerate() {
                    let d = (out_row + j) * e;
                    if fill_row || m == FILL {
                        dst[d..d + e].copy_from_slice(&self.fill);
                    } else {
                        let s = (base + m) as usize * e;
                        copy_elem(e, &src[s..s + e], &mut dst[d..d + e]);
                    }
                }
                // Advance dims 1..r-1.
                let mut d = r - 2;
                while d >= 1 {
                    idx[d] += 1;
                    if idx[d] < self.dims[d] {
                        break;
                    }
                    idx[d] = 0;
                    d -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }
    fn ints(b: &[u8]) -> Vec<i32> {
        b.chunks(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn transpose_via_strided_copy() {
        // x: [2,3,4] -> perm (2,0,1): y[k,i,j] = x[i,j,k]
        let x: Vec<i32> = (0..24).collect();
        let dims = [4usize, 2, 3];
        let src_strides = [1isize, 12, 4];
        let c = StridedCopy::new(4, &dims, &src_strides, 0, &contiguous_strides(&dims), 0);
        let mut out = vec![0u8; 96];
        c.run(&bytes(&x), &mut out, 0, c.outer());
        let y = ints(&out);
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    assert_eq!(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
                }
            }
        }
    }

    #[test]
    fn coalesce_merges_contiguous_dims() {
        let dims = [2usize, 1, 3, 4];
        let s = contiguous_strides(&dims);
        let (d, st) = coalesce(&dims, &[s.clone(), s]);
        assert_eq!(d, vec![1, 24]);
        assert_eq!(st[0], vec![0, 1]);
    }

    #[test]
    fn negative_strides_reverse() {
        let x: Vec<i32> = (0..10).collect();
        let c = StridedCopy::new(4, &[5], &[-2], 9, &[1], 0);
        let mut out = vec![0u8; 20];
        c.run(&bytes(&x), &mut out, 0, c.outer());
        assert_eq!(ints(&out), vec![9, 7, 5, 3, 1]);
    }

    #[test]
    fn index_map_with_fill() {
        let x: Vec<i32> = (0..4).collect(); // [2,2]
        let m = IndexMapCopy {
            elem: 4,
            dims: vec![3, 3],
            maps: vec![vec![FILL, 0, 2], vec![1, 0, FILL]],
            fill: 7i32.to_ne_bytes().to_vec(),
        };
        let mut out = vec![0u8; 36];
        m.run(&bytes(&x), &mut out, 0, 3);
        assert_eq!(ints(&out), vec![7, 7, 7, 1, 0, 7, 3, 2, 7]);
    }
}

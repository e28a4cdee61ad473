//! Segment time estimates: a moving average of measured times per estimator key
//! (model id, segment index), the compiler's estimate until a measurement exists.
//!
//! Invariant: the first measurement replaces the compiler's estimate; each later one moves
//! the average by `1/EMA_WEIGHT` of the difference (an exponential moving average), so
//! one outlier cannot swing an insertion decision far.

use std::collections::HashMap;

use super::task::{SegmentInfo, SegmentKind};

/// Weight of the history in the moving average (new = old + (x - old) / EMA_WEIGHT).
const EMA_WEIGHT: i64 = 4;

/// Measured segment times, keyed by `SegmentInfo::estimator_key`.
#[derive(Debug, Default)]
pub(crate) struct Estimator {
    measured: HashMap<(u64, usize), u64>,
}

impl Estimator {
    /// The compiler's estimate of a segment: the sum of its FC estimates (BPU) or its one
    /// entry (CPU).
    pub(crate) fn compiled_us(info: &SegmentInfo) -> u64 {
        info.fc_est_us
            .iter()
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The current estimate of a segment in microseconds.
    pub(crate) fn estimate_us(&self, info: &SegmentInfo) -> u64 {
        self.measured
            .get(&info.estimator_key)
            .copied()
            .unwrap_or_else(|| Self::compiled_us(info))
    }

    /// Records one measured run of a segment (for a BPU segment: the sum of its FC run
    /// times, not the time spent waiting in queues).
    pub(crate) fn record(&mut self, info: &SegmentInfo, measured_us: u64) {
        let measured = i64::try_from(measured_us).unwrap_or(i64::MAX);
        self.measured
            .entry(info.estimator_key)
            .and_modify(|old| {
                let o = i64::try_from(*old).unwrap_or(i64::MAX);
                let next = o.saturating_add((measured - o) / EMA_WEIGHT);
                *old = u64::try_from(next.max(0)).unwrap_or(0);
            })
            .or_insert(measured_us);
    }

    /// The estimated BPU time of a whole task (all its BPU segments).
    pub(crate) fn bpu_total_us(&self, segs: &[SegmentInfo]) -> u64 {
        segs.iter()
            .filter(|s| s.kind == SegmentKind::Bpu)
            .fold(0u64, |a, s| a.saturating_add(self.estimate_us(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(kind: SegmentKind, fcs: &[u64], key: (u64, usize)) -> SegmentInfo {
        SegmentInfo {
            kind,
            fc_est_us: fcs.to_vec(),
            estimator_key: key,
        }
    }

    #[test]
    fn compiler_estimate_until_measured_then_moving_average() {
        let mut e = Estimator::default();
        let s = seg(SegmentKind::Bpu, &[100, 200, 300], (1, 0));
        assert_eq!(e.estimate_us(&s), 600);
        e.record(&s, 1000);
        assert_eq!(e.estimate_us(&s), 1000);
        e.record(&s, 2000);
        assert_eq!(e.estimate_us(&s), 1250);
        e.record(&s, 250);
        assert_eq!(e.estimate_us(&s), 1000);
    }

    #[test]
    fn keys_are_independent_and_totals_count_bpu_only() {
        let mut e = Estimator::default();
        let a = seg(SegmentKind::Bpu, &[10], (1, 0));
        let c = seg(SegmentKind::Cpu, &[50], (1, 1));
        let b = seg(SegmentKind::Bpu, &[20, 20], (1, 2));
        e.record(&b, 7);
        assert_eq!(e.estimate_us(&a), 10);
        assert_eq!(e.estimate_us(&c), 50);
        assert_eq!(e.bpu_total_us(&[a, c, b]), 17);
    }
}

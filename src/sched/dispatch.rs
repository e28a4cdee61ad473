//! Dispatch (protocol step 2): hands free cores to queued tasks in queue order, and
//! inserts a queued task on a core whose holder is in a middle CPU segment when one of the
//! three insertion conditions holds.
//!
//! Invariant: a task never takes a core that a task ahead of it in the queue may also use
//! (free cores go in queue order; an insertable core is claimed by the first task whose
//! mask allows it, whether or not that task may be inserted).

use std::sync::Arc;

use super::config::SchedConfig;
use super::task::{SegmentKind, TaskShared};
use super::{CoreSlot, Done, SchedInner, State, TraceKind};

/// Which insertion condition allowed a task to run during its core holder's middle CPU
/// segment (the `status` of an `Insert` trace event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum InsertReason {
    /// `(bpu(B) - cpu(A)) / next_bpu(A) * 100 < HB_DNN_BPU_SCHEDULE_THRESHOLD`.
    Threshold = 1,
    /// `bpu(B) < HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME`.
    FcMaxTime = 2,
    /// `cpu(A) > HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME`.
    WaitDispatch = 3,
}

impl InsertReason {
    /// The reason for a trace event's `status`, if it is one.
    pub fn from_code(code: i32) -> Option<InsertReason> {
        match code {
            1 => Some(InsertReason::Threshold),
            2 => Some(InsertReason::FcMaxTime),
            3 => Some(InsertReason::WaitDispatch),
            _ => None,
        }
    }
}

/// Whether task B (estimated BPU time `bpu_b_us`) may be inserted while the holder A runs
/// a middle CPU segment estimated at `cpu_a_us`, followed by a BPU segment estimated at
/// `next_bpu_a_us`; the first condition that holds, in the documented order.
pub fn insert_reason(
    cfg: &SchedConfig,
    bpu_b_us: u64,
    cpu_a_us: u64,
    next_bpu_a_us: u64,
) -> Option<InsertReason> {
    // delay / next_bpu * 100 < threshold, without a division (next_bpu may be 0).
    let delay = i128::from(bpu_b_us) - i128::from(cpu_a_us);
    if delay * 100 < i128::from(cfg.bpu_schedule_threshold_pct) * i128::from(next_bpu_a_us) {
        return Some(InsertReason::Threshold);
    }
    if u128::from(bpu_b_us) < u128::from(cfg.insert_fc_max_time_ms) * 1000 {
        return Some(InsertReason::FcMaxTime);
    }
    if u128::from(cpu_a_us) > u128::from(cfg.wait_dispatch_time_ms) * 1000 {
        return Some(InsertReason::WaitDispatch);
    }
    None
}

impl SchedInner {
    /// Protocol step 2: gives free and insertable cores to queued tasks.
    pub(super) fn dispatch(&self, st: &mut State, done: &mut Done) {
        loop {
            if st.queue.is_empty() {
                return;
            }
            let mut free = 0u32;
            let mut insertable = 0u32;
            for (k, c) in st.cores.iter().enumerate() {
                match (c.holder, c.inserted) {
                    (None, None) => free |= 1 << k,
                    (Some(h), None)
                        if c.fcs.is_idle() && st.tasks.get(&h).is_some_and(|e| e.middle_cpu) =>
                    {
                        insertable |= 1 << k;
                    }
                    _ => {}
                }
            }
            if free | insertable == 0 {
                return;
            }
            let mut picks: Vec<(Arc<TaskShared>, usize, Option<InsertReason>)> = Vec::new();
            for t in st.queue.iter() {
                let allowed = self.allowed(t.ctrl.core_mask);
                if allowed & free != 0 {
                    let c = (allowed & free).trailing_zeros() as usize;
                    free &= !(1 << c);
                    picks.push((t.clone(), c, None));
                } else {
                    let mut ins = allowed & insertable;
                    while ins != 0 {
                        let c = ins.trailing_zeros() as usize;
                        ins &= !(1 << c);
                        insertable &= !(1 << c);
                        if let Some(r) = self.insertion_check(st, c, t) {
                            picks.push((t.clone(), c, Some(r)));
                            break;
                        }
                    }
                }
                if free | insertable == 0 {
                    break;
                }
            }
            if picks.is_empty() {
                return;
            }
            for (t, c, reason) in picks {
                if st.queue.remove(&t).is_some() {
                    self.take_core(st, &t, c, reason, done);
                }
            }
        }
    }

    /// The insertion conditions for queued task `b` on core `c`, whose holder is in a
    /// middle CPU segment.
    fn insertion_check(&self, st: &State, c: usize, b: &TaskShared) -> Option<InsertReason> {
        let holder = st.cores[c].holder?;
        let a = st.tasks.get(&holder)?;
        let segs = a.shared.body.segments();
        let mut cpu_a = 0u64;
        let mut next_bpu = 0u64;
        for s in segs.iter().skip(a.seg) {
            match s.kind {
                SegmentKind::Cpu => cpu_a = cpu_a.saturating_add(st.est.estimate_us(s)),
                SegmentKind::Bpu => {
                    next_bpu = st.est.estimate_us(s);
                    break;
                }
            }
        }
        let from = st.tasks.get(&b.id).map_or(0, |e| e.seg);
        let bpu_b = st
            .est
            .bpu_total_us(&b.body.segments()[from.min(b.body.segments().len())..]);
        insert_reason(&self.cfg, bpu_b, cpu_a, next_bpu)
    }

    /// Protocol step 3: dequeued task `t` takes core `c` (as its holder, or inserted for
    /// `reason`) and starts its BPU segment there.
    fn take_core(
        &self,
        st: &mut State,
        t: &Arc<TaskShared>,
        c: usize,
        reason: Option<InsertReason>,
        done: &mut Done,
    ) {
        match reason {
            Some(r) => {
                st.cores[c].inserted = Some(t.id);
                self.trace(TraceKind::Insert, t, Some(c), 0, 0, r as i32);
            }
            None => st.cores[c].holder = Some(t.id),
        }
        self.trace(TraceKind::Dequeue, t, Some(c), 0, 0, 0);
        if let Some(e) = st.tasks.get_mut(&t.id) {
            e.core = Some(c);
        }
        self.advance(st, t.id, done);
    }

    /// The allowed core where a high FC pushed now would start soonest (lowest index on
    /// ties).
    pub(super) fn soonest_core(&self, cores: &[CoreSlot], mask: u32) -> usize {
        let allowed = self.allowed(mask);
        (0..cores.len())
            .filter(|k| allowed & (1 << k) != 0)
            .min_by_key(|&k| (cores[k].fcs.high_start_estimate_us(), k))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(threshold: u64, fc_max_ms: u64, wait_ms: u64) -> SchedConfig {
        SchedConfig {
            bpu_schedule_threshold_pct: threshold,
            insert_fc_max_time_ms: fc_max_ms,
            wait_dispatch_time_ms: wait_ms,
            ..SchedConfig::default()
        }
    }

    #[test]
    fn insertion_conditions_each_on_and_off() {
        let only_threshold = cfg(10, 0, u64::MAX / 1000);
        // (14000 - 5000) / 100000 = 9 % < 10 %
        assert_eq!(
            insert_reason(&only_threshold, 14_000, 5_000, 100_000),
            Some(InsertReason::Threshold)
        );
        assert_eq!(insert_reason(&only_threshold, 15_000, 5_000, 100_000), None);
        // B shorter than A's CPU segment: no delay at all, even with a zero next segment.
        assert_eq!(
            insert_reason(&only_threshold, 10, 5_000, 0),
            Some(InsertReason::Threshold)
        );
        let only_fc_max = cfg(0, 1, u64::MAX / 1000);
        assert_eq!(
            insert_reason(&only_fc_max, 999, 100, 1_000),
            Some(InsertReason::FcMaxTime)
        );
        assert_eq!(insert_reason(&only_fc_max, 1_000, 100, 1_000), None);
        let only_wait = cfg(0, 0, 1);
        assert_eq!(
            insert_reason(&only_wait, 5_000, 1_001, 1_000),
            Some(InsertReason::WaitDispatch)
        );
        assert_eq!(insert_reason(&only_wait, 5_000, 1_000, 1_000), None);
        // Defaults: a BPU time under 1 s is always insertable.
        assert!(insert_reason(&SchedConfig::default(), 500_000, 0, 1).is_some());
    }

    #[test]
    fn insert_reason_codes_round_trip() {
        for r in [
            InsertReason::Threshold,
            InsertReason::FcMaxTime,
            InsertReason::WaitDispatch,
        ] {
            assert_eq!(InsertReason::from_code(r as i32), Some(r));
        }
        assert_eq!(InsertReason::from_code(0), None);
    }
}

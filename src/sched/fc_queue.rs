//! The FC queues of one virtual NPU core ("system software"): the high and normal FC
//! queues and the window of committed FCs that `BPLAT_CORELIMIT` bounds.
//!
//! Protocol (all under the scheduler lock):
//! 1. A BPU segment arrives as all of its FCs at once: priority-255 tasks' FCs go to the
//!    back of `high`, all others to the back of `normal` (FIFO whatever the priority).
//! 2. `refill` moves FCs into `committed` while it holds fewer than `limit` FCs (the
//!    running one included; `limit = core_limit`, or unbounded when `core_limit == 0`),
//!    taking the front of `high` first, else the front of `normal`.
//! 3. The core thread runs the front of `committed`; when it ends, `finish` pops it and
//!    refills. Just before, when nothing else is committed and no high FC waits here, the
//!    scheduler may move here the high FCs of one task waiting on another core none of
//!    whose FCs is committed there (`take_waiting_high`, `push_high`).
//!
//! Invariants: an FC in `committed` is never overtaken; a high FC overtakes every normal FC
//! still in `normal`, so it waits for at most `core_limit` normal FCs (the running one
//! included); high FCs keep their arrival order among themselves, and so do normal ones.
//! With `core_limit == 0` every FC is committed on arrival, so FCs run in arrival order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::task::TaskShared;

/// One FC waiting for or running on a core.
pub(crate) struct FcItem {
    pub(crate) task: Arc<TaskShared>,
    pub(crate) seg: usize,
    pub(crate) fc: usize,
    /// Whether this is the last FC of its segment.
    pub(crate) last: bool,
    pub(crate) high: bool,
    pub(crate) est_us: u64,
}

/// The FCs of BPU segment `seg` of task `t`, in order, for [`FcQueue::push_segment`].
pub(crate) fn segment_fcs(t: &Arc<TaskShared>, seg: usize) -> impl Iterator<Item = FcItem> + '_ {
    let high = t.ctrl.priority == super::task::PRIORITY_HIGH;
    let est = t
        .body
        .segments()
        .get(seg)
        .map_or(&[][..], |s| &s.fc_est_us[..]);
    let n = est.len();
    est.iter().enumerate().map(move |(fc, &est_us)| FcItem {
        task: t.clone(),
        seg,
        fc,
        last: fc + 1 == n,
        high,
        est_us,
    })
}

/// The FC queues of one core.
pub(crate) struct FcQueue {
    limit: usize,
    committed: VecDeque<FcItem>,
    high: VecDeque<FcItem>,
    normal: VecDeque<FcItem>,
    /// When the running FC started (None = none runs).
    running: Option<Instant>,
}

impl FcQueue {
    /// Empty queues for `core_limit` (0 = no preemption).
    pub(crate) fn new(core_limit: usize) -> FcQueue {
        FcQueue {
            limit: if core_limit == 0 {
                usize::MAX
            } else {
                core_limit
            },
            committed: VecDeque::new(),
            high: VecDeque::new(),
            normal: VecDeque::new(),
            running: None,
        }
    }

    /// Appends the FCs of one segment (step 1) and refills (step 2).
    pub(crate) fn push_segment(&mut self, items: impl IntoIterator<Item = FcItem>) {
        for it in items {
            if it.high {
                self.high.push_back(it);
            } else {
                self.normal.push_back(it);
            }
        }
        self.refill();
    }

    fn refill(&mut self) {
        while self.committed.len() < self.limit {
            if let Some(h) = self.high.pop_front() {
                self.committed.push_back(h);
            } else if let Some(n) = self.normal.pop_front() {
                self.committed.push_back(n);
            } else {
                break;
            }
        }
    }

    /// The FC that [`take_next`](Self::take_next) would return, without marking it.
    pub(crate) fn peek_next(&self) -> Option<&FcItem> {
        if self.running.is_some() {
            return None;
        }
        self.committed.front()
    }

    /// Whether an FC is running.
    pub(crate) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// The FC to run next, marking it running; None when empty or one is already running.
    pub(crate) fn take_next(&mut self) -> Option<&FcItem> {
        self.take_next_at(Instant::now())
    }

    /// [`take_next`](Self::take_next) with the FC's start time given.
    fn take_next_at(&mut self, now: Instant) -> Option<&FcItem> {
        if self.running.is_some() {
            return None;
        }
        let front = self.committed.front()?;
        self.running = Some(now);
        Some(front)
    }

    /// Ends the running FC (step 3) and returns it.
    pub(crate) fn finish(&mut self) -> Option<FcItem> {
        self.running?;
        self.running = None;
        let done = self.committed.pop_front();
        self.refill();
        done
    }

    /// Whether a high FC waits (not yet committed).
    pub(crate) fn has_high_waiting(&self) -> bool {
        !self.high.is_empty()
    }

    /// Whether the window holds nothing besides the running FC: a high FC pushed now
    /// would be the next to run once it ends.
    pub(crate) fn only_running(&self) -> bool {
        self.running.is_some() && self.committed.len() == 1
    }

    /// Removes from `high` the FCs of the first task there that `movable` accepts and
    /// none of whose FCs is committed (so none runs here or is bound to), in order.
    pub(crate) fn take_waiting_high(
        &mut self,
        movable: impl Fn(&TaskShared) -> bool,
    ) -> Option<Vec<FcItem>> {
        let id = self
            .high
            .iter()
            .find(|it| {
                movable(&it.task) && !self.committed.iter().any(|c| c.task.id == it.task.id)
            })?
            .task
            .id;
        let (moved, kept): (VecDeque<FcItem>, _) = std::mem::take(&mut self.high)
            .into_iter()
            .partition(|it| it.task.id == id);
        self.high = kept;
        Some(moved.into())
    }

    /// Appends FCs taken from another core's `high` (step 1 for them) and refills.
    pub(crate) fn push_high(&mut self, items: Vec<FcItem>) {
        self.high.extend(items);
        self.refill();
    }

    /// Drops every queued (not running) FC of task `id`.
    pub(crate) fn remove_task(&mut self, id: u64) {
        let running = self.running.is_some();
        let mut i = 0usize;
        self.committed.retain(|it| {
            let keep = (running && i == 0) || it.task.id != id;
            i += 1;
            keep
        });
        self.high.retain(|it| it.task.id != id);
        self.normal.retain(|it| it.task.id != id);
        self.refill();
    }

    /// Whether nothing is queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        self.running.is_none() && self.committed.is_empty()
    }

    /// Estimated µs before a high FC pushed now would start: the committed FCs (of the
    /// running one, what its estimate leaves after the time it has run, at least 1) and
    /// the high FCs already waiting.
    pub(crate) fn high_start_estimate_us(&self) -> u64 {
        self.high_start_estimate_us_at(Instant::now())
    }

    /// [`high_start_estimate_us`](Self::high_start_estimate_us) at time `now`.
    fn high_start_estimate_us_at(&self, now: Instant) -> u64 {
        let ran = self.running.map_or(0, |t| {
            u64::try_from(now.saturating_duration_since(t).as_micros()).unwrap_or(u64::MAX)
        });
        self.committed
            .iter()
            .chain(self.high.iter())
            .enumerate()
            .fold(0u64, |a, (i, it)| {
                // A running FC past its estimate still counts 1 µs: a busy core never
                // looks as free as an idle one.
                let left = if i == 0 && self.running.is_some() {
                    it.est_us.saturating_sub(ran).max(1)
                } else {
                    it.est_us
                };
                a.saturating_add(left)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::task::{SegmentInfo, SegmentKind, TaskBody, TaskCtrl};
    use std::time::Duration;

    struct Nop(Vec<SegmentInfo>);
    impl TaskBody for Nop {
        fn segments(&self) -> &[SegmentInfo] {
            &self.0
        }
        fn run_cpu_segment(&self, _: usize) -> crate::Result<()> {
            Ok(())
        }
        fn run_fc(&self, _: usize, _: usize) -> crate::Result<()> {
            Ok(())
        }
        fn label(&self) -> &str {
            "nop"
        }
    }

    fn task(id: u64) -> Arc<TaskShared> {
        Arc::new(TaskShared::new(
            id,
            Arc::new(Nop(vec![SegmentInfo {
                kind: SegmentKind::Bpu,
                fc_est_us: vec![1],
                estimator_key: (0, 0),
            }])),
            TaskCtrl::default(),
            None,
        ))
    }

    fn seg(t: &Arc<TaskShared>, n: usize, high: bool) -> Vec<FcItem> {
        (0..n)
            .map(|fc| FcItem {
                task: t.clone(),
                seg: 0,
                fc,
                last: fc + 1 == n,
                high,
                est_us: 10,
            })
            .collect()
    }

    /// Runs the queue to empty, pushing `late` (high) after `after` FCs have finished.
    fn order(limit: usize, normal: usize, after: usize) -> Vec<(u64, usize)> {
        let (a, h) = (task(1), task(2));
        let mut q = FcQueue::new(limit);
        q.push_segment(seg(&a, normal, false));
        let mut out = Vec::new();
        let mut late = Some(seg(&h, 2, true));
        while let Some(next) = q.take_next().map(|it| (it.task.id, it.fc)) {
            out.push(next);
            if out.len() == after + 1 {
                if let Some(l) = late.take() {
                    q.push_segment(l);
                }
            }
            q.finish();
        }
        out
    }

    #[test]
    fn corelimit_zero_runs_in_arrival_order() {
        assert_eq!(order(0, 3, 0), vec![(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]);
    }

    #[test]
    fn corelimit_n_bounds_the_wait_of_a_high_fc() {
        // The high segment arrives while normal FC 0 runs.
        assert_eq!(order(1, 4, 0)[..3], [(1, 0), (2, 0), (2, 1)]);
        assert_eq!(order(2, 4, 0)[..4], [(1, 0), (1, 1), (2, 0), (2, 1)]);
        assert_eq!(
            order(3, 4, 0)[..5],
            [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
        );
        // Arriving while normal FC 1 runs, with limit 2: FC 2 is already committed.
        assert_eq!(
            order(2, 4, 1)[..5],
            [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
        );
    }

    #[test]
    fn high_fcs_never_overtake_each_other() {
        let (a, b, n) = (task(1), task(2), task(3));
        let mut q = FcQueue::new(1);
        q.push_segment(seg(&a, 2, true));
        q.take_next();
        q.push_segment(seg(&n, 1, false));
        q.push_segment(seg(&b, 1, true));
        let mut out = Vec::new();
        q.finish();
        while let Some(it) = q.take_next() {
            out.push((it.task.id, it.fc));
            q.finish();
        }
        assert_eq!(out, vec![(1, 1), (2, 0), (3, 0)]);
    }

    #[test]
    fn a_running_fc_counts_only_what_its_estimate_leaves() {
        let (a, h) = (task(1), task(2));
        let mut q = FcQueue::new(1);
        let mut items = seg(&a, 2, false);
        items[0].est_us = 1000;
        q.push_segment(items);
        let t0 = Instant::now();
        assert_eq!(q.high_start_estimate_us_at(t0), 1000, "not started");
        q.take_next_at(t0);
        let at = |us| t0 + Duration::from_micros(us);
        assert_eq!(q.high_start_estimate_us_at(at(0)), 1000);
        assert_eq!(q.high_start_estimate_us_at(at(300)), 700);
        assert_eq!(
            q.high_start_estimate_us_at(at(5000)),
            1,
            "overran, but busy"
        );
        // A high FC already waiting counts whole.
        q.push_segment(seg(&h, 1, true));
        assert_eq!(q.high_start_estimate_us_at(at(300)), 710);
    }

    #[test]
    fn remove_task_keeps_the_running_fc() {
        let a = task(1);
        let mut q = FcQueue::new(0);
        q.push_segment(seg(&a, 3, false));
        assert!(q.take_next().is_some());
        q.remove_task(1);
        assert!(!q.is_idle());
        assert_eq!(q.finish().map(|i| i.fc), Some(0));
        assert!(q.is_idle());
        assert_eq!(q.high_start_estimate_us(), 0);
    }
}

//! The task life cycle (protocol steps 1, 3-5 and 7): submit and slot reservation, the
//! walk through a task's segments, leaving the core before a trailing CPU segment, the
//! end of a task and release.
//!
//! Invariants: `State::live` counts submitted tasks not yet freed plus reserved slots, and
//! never exceeds `max_tasks`; a task is in `State::tasks` from submission to its end and
//! in the queue only while it waits for a core; its status is traced exactly once
//! (`Done` or `Cancel`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fc_queue::segment_fcs;
use super::task::{
    DoneCallback, SegmentKind, SegmentTiming, TaskBody, TaskCtrl, TaskHandle, TaskShared,
    PHASE_ENDED, PHASE_QUEUED, PHASE_RUNNING, PRIORITY_HIGH,
};
use super::{callbacks, status_of, Done, RunEntry, SchedInner, State, TraceKind};
use crate::error::{Error, Result};

/// A slot under `max_tasks` reserved for a task still being assembled (`more = 1`).
/// Dropping it returns the slot; [`Scheduler::submit_reserved`](super::Scheduler::submit_reserved)
/// consumes it.
pub struct TaskSlot {
    sched: Option<Arc<SchedInner>>,
}

impl std::fmt::Debug for TaskSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSlot")
            .field("held", &self.sched.is_some())
            .finish()
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        if let Some(s) = self.sched.take() {
            let mut st = s.state.lock();
            st.live = st.live.saturating_sub(1);
        }
    }
}

pub(crate) fn shutdown_error() -> Error {
    Error::ApiUse("the scheduler shut down before the task ended".into())
}

/// The error that ends a released running task instead of its next FC or segment.
pub(super) fn stopped_if_released(t: &TaskShared) -> Option<Error> {
    t.released
        .load(Ordering::Acquire)
        .then(|| Error::Cancelled {
            model: t.body.label().to_owned(),
            ran: true,
        })
}

/// Reserves a slot under `max_tasks`.
pub(super) fn reserve(inner: &Arc<SchedInner>) -> Result<TaskSlot> {
    let mut st = inner.state.lock();
    if st.shutdown {
        return Err(shutdown_error());
    }
    if st.live >= inner.cfg.max_tasks {
        return Err(Error::TaskLimit {
            limit: inner.cfg.max_tasks,
        });
    }
    st.live += 1;
    Ok(TaskSlot {
        sched: Some(inner.clone()),
    })
}

/// Submits into a reserved slot; on failure the slot comes back with the error.
pub(super) fn submit_reserved(
    inner: &Arc<SchedInner>,
    body: Arc<dyn TaskBody>,
    ctrl: TaskCtrl,
    mut slot: TaskSlot,
    callback: Option<DoneCallback>,
) -> std::result::Result<TaskHandle, (Error, TaskSlot)> {
    if !slot.sched.as_ref().is_some_and(|s| Arc::ptr_eq(s, inner)) {
        return Err((
            Error::ApiUse("the task slot belongs to another scheduler".into()),
            slot,
        ));
    }
    match inner.submit(body, ctrl, Some(()), callback) {
        Ok(h) => {
            // The slot now counts the task: forget it without returning it.
            slot.sched = None;
            Ok(h)
        }
        Err(e) => Err((e, slot)),
    }
}

impl SchedInner {
    /// Protocol step 1. `reserved` is set when the task's slot was reserved already.
    pub(super) fn submit(
        self: &Arc<Self>,
        body: Arc<dyn TaskBody>,
        ctrl: TaskCtrl,
        reserved: Option<()>,
        callback: Option<DoneCallback>,
    ) -> Result<TaskHandle> {
        if ctrl.core_mask & !self.all_cores != 0 {
            return Err(Error::InvalidArgument {
                name: "bpuCoreId".into(),
                reason: format!(
                    "core mask {:#x} names a core beyond the {} configured",
                    ctrl.core_mask, self.cfg.cores
                ),
            });
        }
        if let Some(i) = body
            .segments()
            .iter()
            .position(|s| s.kind == SegmentKind::Bpu && s.fc_est_us.is_empty())
        {
            return Err(Error::InvalidArgument {
                name: "task".into(),
                reason: format!("BPU segment {i} of '{}' has no FC", body.label()),
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(TaskShared::new(id, body, ctrl, callback));
        let handle = TaskHandle {
            shared: shared.clone(),
            sched: self.clone(),
        };
        let mut done: Done = Vec::new();
        {
            let mut st = self.state.lock();
            if st.shutdown {
                return Err(shutdown_error());
            }
            if reserved.is_none() {
                if st.live >= self.cfg.max_tasks {
                    return Err(Error::TaskLimit {
                        limit: self.cfg.max_tasks,
                    });
                }
                st.live += 1;
            }
            let label = self.tracer.intern(shared.body.label());
            shared.label_id.store(label, Ordering::Relaxed);
            self.trace(TraceKind::Submit, &shared, None, 0, 0, 0);
            if ctrl.priority == PRIORITY_HIGH || shared.bpu_span.is_none() {
                self.trace(TraceKind::Dequeue, &shared, None, 0, 0, 0);
            }
            st.tasks.insert(
                id,
                RunEntry {
                    shared,
                    core: None,
                    seg: 0,
                    seg_start: Instant::now(),
                    seg_busy: Duration::ZERO,
                    middle_cpu: false,
                },
            );
            self.advance(&mut st, id, &mut done);
            self.dispatch(&mut st, &mut done);
        }
        self.complete_all(done);
        Ok(handle)
    }

    /// Protocol step 4: starts the current segment of task `id` (queueing it for a core
    /// when that segment is a BPU segment and it holds none), or ends the task.
    pub(super) fn advance(&self, st: &mut State, id: u64, done: &mut Done) {
        let (t, seg, held) = match st.tasks.get(&id) {
            Some(e) => (e.shared.clone(), e.seg, e.core),
            None => return,
        };
        let Some(info) = t.body.segments().get(seg) else {
            self.finish_task(st, id, Ok(()), done);
            return;
        };
        let core = match (info.kind, held) {
            (SegmentKind::Cpu, _) => None,
            (SegmentKind::Bpu, Some(c)) => Some(c),
            (SegmentKind::Bpu, None) if t.ctrl.priority == PRIORITY_HIGH => {
                Some(self.soonest_core(&st.cores, t.ctrl.core_mask))
            }
            (SegmentKind::Bpu, None) => {
                // Wait in the library queue for a core (step 2).
                st.queue.push(t);
                return;
            }
        };
        let now = Instant::now();
        if t.phase.load(Ordering::Acquire) == PHASE_QUEUED {
            t.timings.lock().dequeued = Some(now);
            t.phase.store(PHASE_RUNNING, Ordering::Release);
        }
        if let Some(e) = st.tasks.get_mut(&id) {
            e.seg_start = now;
            e.seg_busy = Duration::ZERO;
            e.middle_cpu = core.is_none() && held.is_some() && t.is_middle(seg);
        }
        match core {
            None => {
                if self.cpu.send(t.clone(), seg).is_err() {
                    self.finish_task(st, id, Err(shutdown_error()), done);
                }
            }
            Some(core) => {
                self.trace(TraceKind::SegmentStart, &t, Some(core), seg, 0, 0);
                st.cores[core].fcs.push_segment(segment_fcs(&t, seg));
                self.wake_core(st, core);
            }
        }
    }

    /// Leaves the core slot(s) task `id` holds (step 3, before a trailing CPU segment, and
    /// step 5).
    fn leave_core(&self, st: &mut State, id: u64) {
        for c in st.cores.iter_mut() {
            if c.holder == Some(id) {
                c.holder = None;
            }
            if c.inserted == Some(id) {
                c.inserted = None;
            }
        }
    }

    /// Protocol step 5 (locked part).
    pub(super) fn finish_task(&self, st: &mut State, id: u64, result: Result<()>, done: &mut Done) {
        let Some(e) = st.tasks.remove(&id) else {
            return;
        };
        self.hold_priority(st, e.shared.ctrl.priority);
        st.queue.remove(&e.shared);
        self.leave_core(st, id);
        if result.is_err() {
            for k in 0..st.cores.len() {
                // Dropping its FCs may let others into the committed window.
                st.cores[k].fcs.remove_task(id);
                self.wake_core(st, k);
            }
        }
        let t = e.shared;
        t.timings.lock().ended = Some(Instant::now());
        t.phase.store(PHASE_ENDED, Ordering::Release);
        self.trace(TraceKind::Done, &t, e.core, 0, 0, status_of(&result));
        if t.released.load(Ordering::Acquire) {
            st.live = st.live.saturating_sub(1);
        }
        done.push((t, result));
    }

    /// Records the end of the current segment of task `id` (its core, if a BPU segment, and
    /// its busy time), leaves the core after the last BPU segment when CPU work follows,
    /// and starts the next segment.
    pub(super) fn end_segment(
        &self,
        st: &mut State,
        id: u64,
        core: Option<usize>,
        busy: Duration,
        done: &mut Done,
    ) {
        let Some(e) = st.tasks.get_mut(&id) else {
            return;
        };
        let t = e.shared.clone();
        let seg = e.seg;
        let segs = t.body.segments();
        let Some(info) = segs.get(seg) else {
            return;
        };
        let wall = e.seg_start.elapsed();
        let start = e.seg_start;
        e.seg += 1;
        e.middle_cpu = false;
        let leave = match (e.core, t.bpu_span) {
            (Some(c), Some((_, last))) if seg == last && seg + 1 < segs.len() => {
                e.core = None;
                Some(c)
            }
            _ => None,
        };
        st.est
            .record(info, u64::try_from(busy.as_micros()).unwrap_or(u64::MAX));
        {
            let mut tm = t.timings.lock();
            let base = tm.dequeued.unwrap_or(start);
            tm.segments.push(SegmentTiming {
                kind: info.kind,
                start: start.saturating_duration_since(base),
                wall,
                busy,
            });
        }
        self.trace(TraceKind::SegmentEnd, &t, core, seg, 0, 0);
        if let Some(c) = leave {
            self.leave_core(st, id);
            self.trace(TraceKind::Leave, &t, Some(c), seg, 0, 0);
        }
        self.advance(st, id, done);
    }

    /// Protocol step 7.
    pub(super) fn release(&self, t: &Arc<TaskShared>) -> Result<()> {
        let mut done: Done = Vec::new();
        {
            let mut st = self.state.lock();
            if t.released.swap(true, Ordering::AcqRel) {
                return Err(Error::InvalidTaskHandle(format!(
                    "task {} ('{}') was already released",
                    t.id,
                    t.body.label()
                )));
            }
            if st.queue.remove(t).is_some() {
                if t.phase.load(Ordering::Acquire) == PHASE_QUEUED {
                    st.tasks.remove(&t.id);
                    st.live = st.live.saturating_sub(1);
                    t.phase.store(PHASE_ENDED, Ordering::Release);
                    self.trace(TraceKind::Cancel, t, None, 0, 0, 0);
                    done.push((
                        t.clone(),
                        Err(Error::Cancelled {
                            model: t.body.label().to_owned(),
                            ran: false,
                        }),
                    ));
                } else {
                    // Queued between segments (after a leading CPU segment): nothing is in
                    // flight, so it ends now.
                    let err = stopped_if_released(t).unwrap_or_else(shutdown_error);
                    self.finish_task(&mut st, t.id, Err(err), &mut done);
                }
                // A cancelled task may have been the one claiming an insertable core.
                self.dispatch(&mut st, &mut done);
            } else if !st.tasks.contains_key(&t.id) {
                st.live = st.live.saturating_sub(1);
            }
        }
        self.complete_all(done);
        // A running task stops at its next FC or segment boundary; wait for that and for
        // its done callback, so that the caller may free the task's memory and the
        // callback's data once release returns. Not from inside that callback.
        if !callbacks::in_callback_of(t) {
            callbacks::block_in_place(|| t.wait_published());
        }
        Ok(())
    }

    /// The estimate of the segments task `t` has not finished (µs).
    pub(super) fn estimate_remaining_us(&self, t: &TaskShared) -> u64 {
        let st = self.state.lock();
        let from = match t.phase.load(Ordering::Acquire) {
            PHASE_ENDED => return 0,
            _ => st.tasks.get(&t.id).map_or(0, |e| e.seg),
        };
        t.body
            .segments()
            .iter()
            .skip(from)
            .fold(0u64, |a, s| a.saturating_add(st.est.estimate_us(s)))
    }
}

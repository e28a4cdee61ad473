//! The core threads (protocol step 10): each virtual NPU core runs the front of its
//! committed FC window, one FC at a time and never interrupted, unlocked; a panic in an FC
//! is caught and fails only its task.
//!
//! Host priority classes ([`HostPriority`]): unless it is `Off`, a core has two threads
//! of fixed OS priority, *top* and *low*. The FC at the front is run by the thread of its
//! class: top when its task's priority equals the highest priority of the live tasks
//! and of the tasks that ended within `priority_hold_ms`, else low (decided when it starts, under the lock; `FcStart` records the class in its
//! `status`). Whichever thread finds the front belongs to the other class wakes that one
//! and sleeps, so both threads share the one FC queue and its order, and at most one FC
//! of a core runs at a time.
//!
//! Intra-op parallelism: an FC runs inside a [`pool::enter`] scope of its class, so a
//! top-class FC may hand chunks of its large nodes to the helper pool while other CPUs run
//! only low-class work (`crate::exec::pool`), and a low-class FC never does; the chunks it
//! ran are traced (`IntraOp`, before its `FcEnd`).
//!
//! Invariant: a core thread never runs user callbacks (they go to the callback runner), so
//! no callback can block a core.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::MutexGuard;

use super::config::HostPriority;
use super::fc_queue::FcItem;
use super::lifecycle::stopped_if_released;
use super::task::TaskShared;
use super::{os, status_of, Done, SchedInner, State, TraceKind};
use crate::error::{Error, Result};
use crate::exec::pool::{self, HostClass};

/// Host priority classes a core may have threads for.
pub(super) const HOST_CLASSES: usize = 2;
/// The class of FCs of the highest live priority (the core's OS priority, `core_nice`).
pub(super) const TOP: usize = 0;
/// The class of every other FC (`SCHED_IDLE` or nice 19).
pub(super) const LOW: usize = 1;

pub(super) fn core_main(inner: Arc<SchedInner>, k: usize, class: usize) {
    let cfg = &inner.cfg;
    match class {
        TOP => os::place_core_thread(k, cfg.pin_cores, cfg.rt_priority, cfg.core_nice),
        _ => os::place_low_thread(k, cfg.pin_cores, cfg.host_priority == HostPriority::Idle),
    }
    let me = k * HOST_CLASSES + class;
    let mut done: Done = Vec::new();
    let spin = Duration::from_micros(inner.cfg.spin_us);
    let mut spun = false;
    let mut st = inner.state.lock();
    loop {
        if st.shutdown {
            return;
        }
        let next = st.cores[k]
            .fcs
            .peek_next()
            .map(|it| inner.class_of(&st, it));
        match next {
            Some(c) if c == class => {}
            Some(other) => {
                // The front belongs to the core's other thread: hand over and sleep.
                inner.core_cv[k * HOST_CLASSES + other].notify_one();
                inner.core_cv[me].wait(&mut st);
                continue;
            }
            None => {
                if class != TOP || spun || spin.is_zero() || st.cores[k].fcs.is_running() {
                    inner.core_cv[me].wait(&mut st);
                    spun = false;
                } else {
                    // Poll for new work unlocked for a moment before sleeping: a futex
                    // wake-up costs more than a short FC.
                    let seen = inner.core_work[k].load(Ordering::Acquire);
                    MutexGuard::unlocked(&mut st, || {
                        spin_until(spin, || inner.core_work[k].load(Ordering::Acquire) != seen)
                    });
                    spun = true;
                }
                continue;
            }
        }
        spun = false;
        let Some(item) = st.cores[k].fcs.take_next() else {
            continue;
        };
        let (t, seg, fc) = (item.task.clone(), item.seg, item.fc);
        inner.trace(TraceKind::FcStart, &t, Some(k), seg, fc, class as i32);
        let host = if class == TOP {
            HostClass::Top
        } else {
            HostClass::Low
        };
        let (result, elapsed, chunks) = MutexGuard::unlocked(&mut st, || {
            let start = Instant::now();
            let scope = pool::enter(host);
            let r = match stopped_if_released(&t) {
                Some(e) => Err(e),
                None => run_guarded(|| t.body.run_fc(seg, fc)),
            };
            let chunks = scope.finish();
            (r, start.elapsed(), chunks)
        });
        inner.trace_intra_op(&t, Some(k), seg, fc, chunks);
        inner.on_fc_end(&mut st, k, result, elapsed, &mut done);
        if !done.is_empty() {
            MutexGuard::unlocked(&mut st, || inner.complete_all(std::mem::take(&mut done)));
        }
    }
}

/// Polls `done` until it holds or `limit` passes; true when it held.
///
/// It never yields the CPU: under Linux's EEVDF scheduler a `sched_yield` may hand the
/// rest of a slice (up to a 4 ms tick) to a `SCHED_IDLE` low-class FC on the same CPU,
/// and the yielded thread, runnable rather than asleep, gets no wake-up when `done`
/// comes true (traced with `perf sched`: a top-class core thread waited 2.4 ms that way).
/// A thread that shares this CPU waits at most `limit` for it.
pub(crate) fn spin_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    if limit.is_zero() {
        return done();
    }
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= limit {
            return done();
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Runs an FC or a CPU segment, turning a panic into [`Error::Panic`].
pub(super) fn run_guarded(f: impl FnOnce() -> Result<()>) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Error::Panic(panic_message(&*p))),
    }
}

impl SchedInner {
    /// The host priority class FC `it` runs in now (see the module doc).
    pub(super) fn class_of(&self, st: &State, it: &FcItem) -> usize {
        if self.cfg.host_priority == HostPriority::Off {
            return TOP;
        }
        let live = st.tasks.values().map(|e| e.shared.ctrl.priority).max();
        let held = st
            .held
            .filter(|&(_, until)| Instant::now() < until)
            .map(|(p, _)| p);
        let top = live.max(held).unwrap_or(0);
        if it.task.ctrl.priority >= top {
            TOP
        } else {
            LOW
        }
    }

    /// A task of priority `p` ended: `p` counts as live for `priority_hold_ms` more,
    /// unless a higher priority's hold is still running.
    pub(super) fn hold_priority(&self, st: &mut State, p: u8) {
        let hold = Duration::from_millis(self.cfg.priority_hold_ms);
        if hold.is_zero() || self.cfg.host_priority == HostPriority::Off {
            return;
        }
        let now = Instant::now();
        let keep = st.held.is_some_and(|(q, until)| q > p && now < until);
        if !keep {
            st.held = Some((p, now + hold));
        }
    }

    /// Tells core `k` that its FC queue changed: bumps its work counter (an idle top
    /// thread polls it) and wakes the thread of the class of its next FC.
    pub(super) fn wake_core(&self, st: &State, k: usize) {
        self.core_work[k].fetch_add(1, Ordering::Release);
        let class = st.cores[k]
            .fcs
            .peek_next()
            .map_or(TOP, |it| self.class_of(st, it));
        self.core_cv[k * HOST_CLASSES + class].notify_one();
    }

    /// Core `k`'s running FC is ending and nothing else is in its window: the first
    /// priority-255 segment waiting on another core that may run here and has no FC
    /// committed there moves here, where it starts now (step 4's soonest core, decided
    /// again at each FC end: the core it was pushed to may still run a lower-priority FC
    /// long past its estimate, e.g. while the host keeps that thread off its CPU).
    fn pull_high(&self, st: &mut State, k: usize) {
        let here = &st.cores[k].fcs;
        if here.has_high_waiting() || !here.only_running() {
            return;
        }
        let bit = 1u32 << k;
        let movable = |t: &TaskShared| self.allowed(t.ctrl.core_mask) & bit != 0;
        for j in (0..st.cores.len()).filter(|&j| j != k) {
            if let Some(items) = st.cores[j].fcs.take_waiting_high(movable) {
                if let Some(first) = items.first() {
                    let from = i32::try_from(j).unwrap_or(i32::MAX);
                    self.trace(TraceKind::Move, &first.task, Some(k), first.seg, 0, from);
                }
                st.cores[k].fcs.push_high(items);
                return;
            }
        }
    }

    /// The FC running on core `k` ended (steps 4 and 10).
    fn on_fc_end(
        &self,
        st: &mut State,
        k: usize,
        result: Result<()>,
        elapsed: Duration,
        done: &mut Done,
    ) {
        self.pull_high(st, k);
        let Some(item) = st.cores[k].fcs.finish() else {
            return;
        };
        let t = &item.task;
        self.trace(
            TraceKind::FcEnd,
            t,
            Some(k),
            item.seg,
            item.fc,
            status_of(&result),
        );
        if let Some(e) = st.tasks.get_mut(&t.id) {
            e.seg_busy += elapsed;
            let busy = e.seg_busy;
            match result {
                Err(err) => self.finish_task(st, t.id, Err(err), done),
                Ok(()) if item.last => self.end_segment(st, t.id, Some(k), busy, done),
                Ok(()) => {}
            }
        }
        self.dispatch(st, done);
    }
}

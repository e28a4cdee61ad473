//! Tasks as the scheduler sees them: abstract work ([`TaskBody`]) described by its
//! segments, its control parameters ([`TaskCtrl`]) and the caller's [`TaskHandle`].
//!
//! Invariants: a task's status moves `Queued -> Running -> Done | Failed` or
//! `Queued -> Cancelled`, never back; its result is published exactly once, after its done
//! callback (if any) has returned, so `wait` returning implies the callback ran; a task's
//! done callback fires at most once.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use super::callbacks::{self, run_callback, Callbacks, Job};
use super::SchedInner;
use crate::error::{Error, Result};

/// Where a segment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// On the CPU pool.
    Cpu,
    /// On a virtual NPU core, as FCs.
    Bpu,
}

/// What the scheduler knows of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Where it runs.
    pub kind: SegmentKind,
    /// BPU: the compiler's estimate of each FC (µs); CPU: one entry, the segment's estimate.
    pub fc_est_us: Vec<u64>,
    /// The key of its measured moving average: (model id, segment index in the model).
    pub estimator_key: (u64, usize),
}

/// The work of a task, supplied by the runtime (the scheduler never looks inside).
pub trait TaskBody: Send + Sync + 'static {
    /// All segments in order (for a multi-model task: every model's segments in order).
    fn segments(&self) -> &[SegmentInfo];
    /// Runs CPU segment `seg`; called on a CPU-pool thread.
    fn run_cpu_segment(&self, seg: usize) -> Result<()>;
    /// Runs FC `fc` of BPU segment `seg`; called on a core thread. FCs of one task never
    /// run concurrently, and they run in order.
    fn run_fc(&self, seg: usize, fc: usize) -> Result<()>;
    /// Model name(s) for the trace.
    fn label(&self) -> &str;
}

/// Control parameters of a task (the scheduling part of `hbDNNInferCtrlParam`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskCtrl {
    /// Allowed cores: bit k = core k; 0 = any core.
    pub core_mask: u32,
    /// 0..=255, higher first; 255 = preemptive (high FC queue, skips the library queue).
    pub priority: u8,
    /// Tie-break among equal priorities: smaller first.
    pub custom_id: i64,
}

/// The preemptive priority.
pub const PRIORITY_HIGH: u8 = 255;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Waiting in the library queue.
    Queued,
    /// Dequeued, running segments.
    Running,
    /// Ended successfully.
    Done,
    /// Ended with this error code.
    Failed(i32),
    /// Released while queued; never ran.
    Cancelled,
}

/// Measured times of one segment of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentTiming {
    /// Where it ran.
    pub kind: SegmentKind,
    /// From the task's dequeue to the segment's start.
    pub start: Duration,
    /// From its start to its end, waiting between FCs included.
    pub wall: Duration,
    /// Time spent executing (the sum of its FC run times for a BPU segment).
    pub busy: Duration,
}

/// Measured times of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTimings {
    /// From submission to dequeue (to now while queued).
    pub pending: Duration,
    /// From dequeue to end (to now while running).
    pub running: Duration,
    /// The segments that started, in order.
    pub segments: Vec<SegmentTiming>,
}

#[derive(Debug)]
pub(crate) struct TimingState {
    pub(crate) submitted: Instant,
    pub(crate) dequeued: Option<Instant>,
    pub(crate) ended: Option<Instant>,
    pub(crate) segments: Vec<SegmentTiming>,
}

/// The done callback: called once with the task's status code (0 on success).
pub type DoneCallback = Box<dyn FnOnce(i32) + Send>;

/// A done signal: called once with the task's status code just before its result is
/// published, on the publishing thread (a core or CPU-pool thread, or the callback runner).
/// It must not block (service mode stores a word and wakes a futex).
pub type DoneSignal = Box<dyn FnOnce(i32) + Send>;

pub(crate) struct DoneState {
    /// The published result (set after the callback returned).
    pub(crate) result: Option<std::result::Result<(), Error>>,
    /// The final result, set when the task ends (before its callback runs).
    pub(crate) outcome: Option<std::result::Result<(), Error>>,
    pub(crate) finishing: bool,
    /// The status code, valid once `finishing`.
    pub(crate) code: i32,
    pub(crate) callback: Option<DoneCallback>,
    /// A callback was taken to run (it fires at most once).
    pub(crate) callback_used: bool,
    /// Called before the result is published ([`TaskHandle::set_done_signal`]).
    pub(crate) signal: Option<DoneSignal>,
}

pub(crate) const PHASE_QUEUED: u8 = 0;
pub(crate) const PHASE_RUNNING: u8 = 1;
pub(crate) const PHASE_ENDED: u8 = 2;

/// The part of a task shared by the scheduler and every handle clone.
pub(crate) struct TaskShared {
    pub(crate) id: u64,
    pub(crate) body: Arc<dyn TaskBody>,
    pub(crate) ctrl: TaskCtrl,
    /// Index of the first and last BPU segment (None when there is none).
    pub(crate) bpu_span: Option<(usize, usize)>,
    pub(crate) phase: AtomicU8,
    pub(crate) released: AtomicBool,
    /// Set once `done.result` is set (lets `wait` poll without the lock).
    pub(crate) published: AtomicBool,
    /// The tracer's interned label id (0 = submitted while tracing was off).
    pub(crate) label_id: AtomicU32,
    pub(crate) done: Mutex<DoneState>,
    pub(crate) done_cv: Condvar,
    pub(crate) timings: Mutex<TimingState>,
    /// When the task would end if it ran at once at its compile-time estimates (its
    /// submission plus the sum of its segments' estimates): a waiter spins only near it.
    pub(crate) est_end: Instant,
}

impl TaskShared {
    pub(crate) fn new(
        id: u64,
        body: Arc<dyn TaskBody>,
        ctrl: TaskCtrl,
        callback: Option<DoneCallback>,
    ) -> TaskShared {
        let segs = body.segments();
        let first = segs.iter().position(|s| s.kind == SegmentKind::Bpu);
        let last = segs.iter().rposition(|s| s.kind == SegmentKind::Bpu);
        let n = segs.len();
        let est_us: u64 = segs.iter().flat_map(|s| s.fc_est_us.iter()).sum();
        let now = Instant::now();
        TaskShared {
            id,
            ctrl,
            bpu_span: first.zip(last),
            phase: AtomicU8::new(PHASE_QUEUED),
            released: AtomicBool::new(false),
            published: AtomicBool::new(false),
            label_id: AtomicU32::new(0),
            done: Mutex::new(DoneState {
                result: None,
                outcome: None,
                finishing: false,
                code: 0,
                callback,
                callback_used: false,
                signal: None,
            }),
            done_cv: Condvar::new(),
            est_end: now + Duration::from_micros(est_us),
            timings: Mutex::new(TimingState {
                submitted: now,
                dequeued: None,
                ended: None,
                segments: Vec::with_capacity(n),
            }),
            body,
        }
    }

    /// Whether CPU segment `seg` lies between two BPU segments.
    pub(crate) fn is_middle(&self, seg: usize) -> bool {
        matches!(self.bpu_span, Some((f, l)) if f < seg && seg < l)
    }

    /// Ends the task (protocol step 5, unlocked): hands the callback to the runner, or
    /// publishes the result at once when there is none.
    pub(crate) fn complete(
        self: &Arc<Self>,
        result: std::result::Result<(), Error>,
        runner: &Callbacks,
    ) {
        let code = match &result {
            Ok(()) => 0,
            Err(e) => e.code(),
        };
        let (cb, signal) = {
            let mut d = self.done.lock();
            d.finishing = true;
            d.code = code;
            d.outcome = Some(result.clone());
            let cb = d.callback.take();
            let signal = if cb.is_some() {
                d.callback_used = true;
                None
            } else {
                let s = d.signal.take();
                if s.is_none() {
                    d.result = Some(result.clone());
                }
                s
            };
            (cb, signal)
        };
        match cb {
            Some(cb) => runner.push(Job {
                task: self.clone(),
                cb,
                code,
                result,
            }),
            None => {
                if let Some(s) = signal {
                    s(code);
                    self.done.lock().result = Some(result);
                }
                self.published.store(true, Ordering::Release);
                self.done_cv.notify_all();
            }
        }
    }

    /// Publishes the result to waiters (after the callback returned).
    pub(crate) fn publish(&self, result: std::result::Result<(), Error>) {
        let signal = self.done.lock().signal.take();
        if let Some(s) = signal {
            s(match &result {
                Ok(()) => 0,
                Err(e) => e.code(),
            });
        }
        self.done.lock().result = Some(result);
        self.published.store(true, Ordering::Release);
        self.done_cv.notify_all();
    }

    /// Blocks until the result is published.
    pub(crate) fn wait_published(&self) {
        let mut d = self.done.lock();
        while d.result.is_none() {
            self.done_cv.wait(&mut d);
        }
    }
}

/// The caller's handle of a submitted task; clones refer to the same task.
#[derive(Clone)]
pub struct TaskHandle {
    pub(crate) shared: Arc<TaskShared>,
    pub(crate) sched: Arc<SchedInner>,
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.shared.id)
            .field("label", &self.shared.body.label())
            .field("status", &self.status())
            .finish()
    }
}

impl TaskHandle {
    /// The task id used in trace events.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Blocks until the task ends (`None` = no limit). On timeout returns
    /// [`Error::Timeout`] and leaves the task intact; a failed task returns its error.
    /// From inside the task's own done callback it returns the final status at once; from
    /// another callback it lets the other callbacks go on while it blocks.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        if callbacks::in_callback_of(&self.shared) {
            if let Some(r) = &self.shared.done.lock().outcome {
                return r.clone();
            }
        }
        if self.shared.published.load(Ordering::Acquire) {
            if let Some(r) = &self.shared.done.lock().result {
                return r.clone();
            }
        }
        callbacks::block_in_place(|| self.wait_blocking(timeout))
    }

    fn wait_blocking(&self, timeout: Option<Duration>) -> Result<()> {
        let spin = Duration::from_micros(self.sched.spin_us());
        let spin = timeout.map_or(spin, |t| t.min(spin));
        let spin = wait_spin(self.shared.est_end, Instant::now(), spin);
        super::core::spin_until(spin, || self.shared.published.load(Ordering::Acquire));
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut d = self.shared.done.lock();
        loop {
            if let Some(r) = &d.result {
                return r.clone();
            }
            match deadline {
                None => self.shared.done_cv.wait(&mut d),
                Some(dl) => {
                    if self.shared.done_cv.wait_until(&mut d, dl).timed_out() {
                        if let Some(r) = &d.result {
                            return r.clone();
                        }
                        let ms = timeout.map_or(0, |t| t.as_millis());
                        return Err(Error::Timeout {
                            ms: u64::try_from(ms).unwrap_or(u64::MAX),
                        });
                    }
                }
            }
        }
    }

    /// Registers the callback run once when the task ends, with its status code (0 on
    /// success), before `wait` returns. It runs on the scheduler's callback thread, or at
    /// once on this thread when the task has already ended. A second call replaces an
    /// unrun callback; a task's callback fires at most once, so a call after one fired
    /// drops `cb` and returns false.
    pub fn set_done_callback(&self, cb: DoneCallback) -> bool {
        let run_now = {
            let mut d = self.shared.done.lock();
            if d.callback_used {
                return false;
            }
            if d.finishing {
                d.callback_used = true;
                Some((cb, d.code))
            } else {
                d.callback = Some(cb);
                None
            }
        };
        if let Some((cb, code)) = run_now {
            run_callback(cb, code);
        }
        true
    }

    /// Registers `signal`, called once with the status code just before the result is
    /// published (so a `wait` or `release` that returned implies it ran), on the publishing
    /// thread; at once on this thread when the result is already published.
    pub fn set_done_signal(&self, signal: DoneSignal) {
        let code = {
            let mut d = self.shared.done.lock();
            if d.result.is_none() {
                d.signal = Some(signal);
                return;
            }
            d.code
        };
        signal(code);
    }

    /// Releases the task: a queued task is cancelled (its waiters get
    /// [`Error::Cancelled`]); a running one is stopped at its next FC or segment boundary
    /// (the FC in flight finishes). This call waits for that and for a running done
    /// callback of the task, so that the task's memory and the callback's data may be
    /// freed on return (from inside the task's own callback it does not wait). Its slot
    /// under the task limit is returned then.
    /// Releasing twice is [`Error::InvalidTaskHandle`].
    pub fn release(&self) -> Result<()> {
        self.sched.release(&self.shared)
    }

    /// Whether [`release`](Self::release) was called (it may still be stopping).
    pub fn is_released(&self) -> bool {
        self.shared.released.load(Ordering::Acquire)
    }

    /// Where the task is in its life.
    pub fn status(&self) -> TaskStatus {
        match self.shared.phase.load(Ordering::Acquire) {
            PHASE_QUEUED => TaskStatus::Queued,
            PHASE_RUNNING => TaskStatus::Running,
            _ => match &self.shared.done.lock().result {
                Some(Ok(())) => TaskStatus::Done,
                Some(Err(Error::Cancelled { ran: false, .. })) => TaskStatus::Cancelled,
                Some(Err(e)) => TaskStatus::Failed(e.code()),
                None => TaskStatus::Running,
            },
        }
    }

    /// Pending time, running time and per-segment times measured so far.
    pub fn timings(&self) -> TaskTimings {
        let t = self.shared.timings.lock();
        let now = Instant::now();
        let pending = t.dequeued.unwrap_or(now) - t.submitted;
        let running = match t.dequeued {
            Some(d) => t.ended.unwrap_or(now) - d,
            None => Duration::ZERO,
        };
        TaskTimings {
            pending,
            running,
            segments: t.segments.clone(),
        }
    }

    /// Estimated time of the segments not yet finished, in microseconds (measured moving
    /// averages, the compiler's estimates until measured).
    pub fn estimate_time_us(&self) -> u64 {
        self.sched.estimate_remaining_us(&self.shared)
    }
}

/// How long a waiter spins before it sleeps: `spin`, unless the task is estimated to end
/// more than two spins after `now` (`est_end`), then not at all. Spinning pays only where
/// the task may end within the spin; a waiter that spins at the start of a long task may
/// hold the very CPU its first FC's thread was woken on, and the OS lets the spinner run
/// on first (priority bench, foreground on a core of its own: submit to first FC p50
/// 0.07 ms with the spin, 0.02 without).
pub(crate) fn wait_spin(est_end: Instant, now: Instant, spin: Duration) -> Duration {
    if est_end.saturating_duration_since(now) > 2 * spin {
        Duration::ZERO
    } else {
        spin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_spins_only_near_the_estimated_end() {
        let now = Instant::now();
        let spin = Duration::from_micros(50);
        // A 5 ms task just submitted: sleep at once.
        let long = now + Duration::from_millis(5);
        assert_eq!(wait_spin(long, now, spin), Duration::ZERO);
        // The same task 4.95 ms later, or a task of 60 µs: spin.
        assert_eq!(
            wait_spin(long, now + Duration::from_micros(4950), spin),
            spin
        );
        assert_eq!(wait_spin(now + Duration::from_micros(60), now, spin), spin);
        // Past its estimate (it waited in the queue, or runs slower): spin.
        assert_eq!(wait_spin(now, now + Duration::from_millis(1), spin), spin);
    }
}

//! The scheduler: places tasks of many models by priority onto N virtual NPU cores with
//! FC-level preemption, and runs their CPU segments on a CPU pool. It schedules abstract
//! work ([`TaskBody`]); it knows nothing of models, kernels or tensors.
//!
//! One file per role, all under the protocol below: the library task queue
//! (`queue.rs`), dispatch and insertion (`dispatch.rs`), the task life cycle from submit
//! to release (`lifecycle.rs`), the core threads (`core.rs`) with their FC queues
//! (`fc_queue.rs`), the CPU pool (`cpu_pool.rs`) and the done-callback runner
//! (`callbacks.rs`).
//!
//! # Protocol
//!
//! Every step below runs under the one scheduler lock (`SchedInner::state`), except
//! running an FC or a CPU segment and running done callbacks, which run unlocked.
//!
//! 1. **Submit.** The task is validated (core mask within the cores, no empty BPU
//!    segment), counted against `max_tasks` (live = submitted, or reserved by a task
//!    being assembled, and not yet freed by [`TaskHandle::release`]) and traced. It starts
//!    at once (step 4) with its first segment: a *leading* CPU segment runs on the CPU
//!    pool without holding a core; a priority-255 task, or one with no BPU segment, never
//!    needs a core (`Dequeue` traced at submission). Then dispatch (step 2).
//! 2. **Queue and dispatch.** A task whose next segment is a BPU segment and that holds no
//!    core (not priority 255) enters the library queue, ordered by priority (higher
//!    first), `custom_id` (smaller first), then submission order. A core is *free* when
//!    no task holds it, *insertable* when its holder is in a middle CPU segment, nothing
//!    was inserted yet and its FC queues are empty. Walk the queue in order; each task
//!    takes the lowest free core its mask allows; else, for each insertable core its mask
//!    allows (in index order), the core is *claimed* by this task (no task behind it may be
//!    inserted there) and the task is inserted if one of the three conditions
//!    ([`insert_reason`]) holds, with `cpu(A)` = the estimate of the holder's CPU segments
//!    up to its next BPU segment and `bpu(B)` = all BPU segments of the candidate. So a
//!    task never takes a core that a task ahead of it in the queue may also use. One task
//!    is inserted at a time; when it ends while the holder is still in its CPU segment,
//!    the next one may be. Dispatch runs after every event.
//! 3. **Hold.** A dequeued task holds its core (`holder`, or `inserted` for an insertion)
//!    from the first FC of its first BPU segment to the end of its last BPU segment; only
//!    a middle CPU segment (between two BPU segments) lends the core to an inserted task.
//!    When its last BPU segment ends and a trailing CPU segment follows, the task leaves
//!    the core (`Leave`) and dispatch may give the core to the next task at once.
//! 4. **Segments.** A CPU segment goes to the CPU pool. A BPU segment goes to its core as
//!    all of its FCs at once (steps 8-10): the held core, or for a coreless priority-255
//!    task the allowed core where a high FC starts soonest. Until one of its FCs is
//!    committed there, such a segment moves to another allowed core whose running FC
//!    ends with nothing else in its window (the first one that does, at its FC's end):
//!    the core it went to may run a lower-priority FC long past its estimate (a core
//!    thread the host keeps off its CPU). When the last FC of the
//!    segment (or the CPU segment) ends, its measured time updates the estimator and the
//!    next segment starts (a BPU segment of a task without a core: step 2); after the last
//!    one the task ends.
//! 5. **End.** The task leaves its core slot, its remaining FCs are dropped (on failure),
//!    its status is traced; then, unlocked, its result goes to the done-callback runner
//!    (`callbacks.rs`) when a callback is registered, else is published to waiters at once.
//!    An FC or CPU segment that returns `Err` or panics (caught) fails only its task; the
//!    core or pool thread goes on.
//! 6. **Callbacks.** Done callbacks run on the runner's threads, never on a core or pool
//!    thread, one at a time in completion order; a callback that blocks (waits on or
//!    releases another task) hands the runner on to another thread first, so callbacks
//!    may submit and wait. A task's result is published after its callback returned;
//!    waiting on a task from its own callback returns its final status at once.
//! 7. **Release.** A queued task that never ran is removed and cancelled (`Cancel` event,
//!    [`Error::Cancelled`] for its waiters); one queued between segments is ended the same
//!    way; a running one is marked, stops at its next FC or segment boundary and is freed
//!    at step 5; an ended one is freed now. Release then waits until the task's result is
//!    published (its callback returned), except from inside that callback.
//!
//! Core level ("system software", one `FcQueue` per core, in `fc_queue.rs`):
//!
//! 8. FCs of priority-255 tasks join the back of the core's *high* queue, all others the
//!    back of its *normal* queue (FIFO whatever the priority).
//! 9. The core's *committed* window holds at most `core_limit` FCs (the running one
//!    included; unbounded when `core_limit == 0`); whenever it has room it takes the front
//!    of *high* first, else the front of *normal*. A committed FC is never overtaken.
//! 10. The core thread runs the front of the window, one FC at a time, never interrupting
//!     one; when it ends, the window refills (step 9) and the next FC runs.
//!
//! # Invariants
//!
//! - A core has at most one holder and at most one inserted task; it is free only when it
//!   has neither. No task holds a core during its leading or trailing CPU segments.
//! - Tasks that hold a core left the queue in queue order among those whose masks allow
//!   that core: a lower-priority task never takes a free core a waiting higher-priority
//!   task may also use.
//! - A task runs on no core outside its mask; its FCs run one at a time and in order.
//! - Priority-255 tasks never wait in the library queue and never hold a core; their FCs
//!   go to the high FC queue and wait for at most `core_limit` normal FCs
//!   (all FCs queued before them when `core_limit == 0`).
//! - Tasks being assembled (reserved slots) count against `max_tasks` like live tasks.
//! - Trace events recorded under the lock are in the order of the state changes.

#![warn(missing_docs)]

mod callbacks;
mod config;
mod core;
mod cpu_pool;
mod dispatch;
mod estimator;
mod fc_queue;
mod lifecycle;
mod os;
mod queue;
mod task;
mod trace;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

pub use self::config::{pin_by_default, HostPriority, SchedConfig, MAX_CORES};
pub use self::dispatch::{insert_reason, InsertReason};
pub use self::lifecycle::TaskSlot;
pub use self::task::{
    DoneCallback, DoneSignal, SegmentInfo, SegmentKind, SegmentTiming, TaskBody, TaskCtrl,
    TaskHandle, TaskStatus, TaskTimings, PRIORITY_HIGH,
};
pub use self::trace::{TraceEvent, TraceKind};

use self::callbacks::Callbacks;
use self::cpu_pool::CpuPool;
use self::estimator::Estimator;
use self::fc_queue::FcQueue;
use self::queue::TaskQueue;
use self::task::TaskShared;
use self::trace::Tracer;
use crate::error::{Error, Result};

/// The task slots of one core.
struct CoreSlot {
    holder: Option<u64>,
    inserted: Option<u64>,
    fcs: FcQueue,
}

/// A submitted task that has not ended.
struct RunEntry {
    shared: Arc<TaskShared>,
    /// The core the task holds (None for priority-255 and CPU-only tasks, and outside its
    /// first..last BPU segments).
    core: Option<usize>,
    /// The current segment.
    seg: usize,
    seg_start: Instant,
    seg_busy: Duration,
    /// In a middle CPU segment while holding a core (its core may take an insertion).
    middle_cpu: bool,
}

struct State {
    queue: TaskQueue,
    /// Every submitted task that has not ended, queued or running.
    tasks: HashMap<u64, RunEntry>,
    cores: Vec<CoreSlot>,
    /// Live tasks and reserved slots (counted against `max_tasks`).
    live: usize,
    /// The highest priority of the tasks that ended within `priority_hold_ms`, and when
    /// that hold ends (see [`HostPriority`]).
    held: Option<(u8, Instant)>,
    est: Estimator,
    shutdown: bool,
}

type Done = Vec<(Arc<TaskShared>, std::result::Result<(), Error>)>;

/// The state shared by the scheduler, its threads and task handles.
pub(crate) struct SchedInner {
    cfg: SchedConfig,
    all_cores: u32,
    state: Mutex<State>,
    /// One condition variable per core thread: index `k * HOST_CLASSES + class`.
    core_cv: Vec<Condvar>,
    /// Bumped (under the lock) whenever FCs are pushed to core k: an idle core polls it.
    core_work: Vec<AtomicU64>,
    cpu: CpuPool,
    callbacks: Arc<Callbacks>,
    tracer: Tracer,
    next_id: AtomicU64,
}

/// The scheduler: a library task queue, `cores` core threads and a CPU pool.
pub struct Scheduler {
    inner: Arc<SchedInner>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.inner.cfg)
            .finish()
    }
}

impl Scheduler {
    /// Starts the core threads, the CPU pool and the callback runner; starts tracing when
    /// `cfg.trace_path` is set.
    pub fn new(cfg: SchedConfig) -> Result<Arc<Scheduler>> {
        cfg.validate()?;
        let all_cores = if cfg.cores >= 32 {
            u32::MAX
        } else {
            (1u32 << cfg.cores) - 1
        };
        let (cpu, cpu_rx) = CpuPool::channel();
        let inner = Arc::new(SchedInner {
            all_cores,
            state: Mutex::new(State {
                queue: TaskQueue::default(),
                tasks: HashMap::new(),
                cores: (0..cfg.cores)
                    .map(|_| CoreSlot {
                        holder: None,
                        inserted: None,
                        fcs: FcQueue::new(cfg.core_limit),
                    })
                    .collect(),
                live: 0,
                held: None,
                est: Estimator::default(),
                shutdown: false,
            }),
            core_cv: (0..cfg.cores * core::HOST_CLASSES)
                .map(|_| Condvar::new())
                .collect(),
            core_work: (0..cfg.cores).map(|_| AtomicU64::new(0)).collect(),
            cpu,
            callbacks: Callbacks::new(),
            tracer: Tracer::new(cfg.trace_capacity),
            next_id: AtomicU64::new(1),
            cfg,
        });
        if inner.cfg.trace_path.is_some() {
            inner.tracer.start();
        }
        let mut sched = Scheduler {
            inner: inner.clone(),
            threads: Vec::new(),
        };
        let mut spawned = Vec::new();
        let classes = if inner.cfg.host_priority == HostPriority::Off {
            1
        } else {
            core::HOST_CLASSES
        };
        for k in 0..inner.cfg.cores {
            for class in 0..classes {
                let inner = inner.clone();
                let name = match class {
                    core::TOP => format!("vnpu-core{k}"),
                    _ => format!("vnpu-core{k}-low"),
                };
                spawned.push(
                    std::thread::Builder::new()
                        .name(name)
                        .spawn(move || core::core_main(inner, k, class)),
                );
            }
        }
        for i in 0..inner.cfg.cpu_threads {
            let (inner, rx) = (inner.clone(), cpu_rx.clone());
            spawned.push(
                std::thread::Builder::new()
                    .name(format!("vnpu-cpu{i}"))
                    .spawn(move || cpu_pool::cpu_main(inner, rx)),
            );
        }
        let mut failure = inner.callbacks.start().err();
        for s in spawned {
            match s {
                Ok(h) => sched.threads.push(h),
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            // Dropping `sched` stops the threads that did start.
            return Err(Error::OutOfMemory(format!(
                "cannot start a scheduler thread: {e}"
            )));
        }
        Ok(Arc::new(sched))
    }

    /// The configuration in use.
    pub fn config(&self) -> &SchedConfig {
        &self.inner.cfg
    }

    /// Submits a task (protocol step 1).
    pub fn submit(&self, body: Arc<dyn TaskBody>, ctrl: TaskCtrl) -> Result<TaskHandle> {
        self.inner.submit(body, ctrl, None, None)
    }

    /// Submits a task into a slot reserved with [`reserve`](Self::reserve), with its done
    /// callback registered before it can start (so the callback always runs on the
    /// callback runner). On failure the slot is returned with the error.
    pub fn submit_reserved(
        &self,
        body: Arc<dyn TaskBody>,
        ctrl: TaskCtrl,
        slot: TaskSlot,
        callback: Option<DoneCallback>,
    ) -> std::result::Result<TaskHandle, (Error, TaskSlot)> {
        lifecycle::submit_reserved(&self.inner, body, ctrl, slot, callback)
    }

    /// Reserves a slot under `max_tasks` for a task still being assembled; dropping the
    /// slot returns it.
    pub fn reserve(&self) -> Result<TaskSlot> {
        lifecycle::reserve(&self.inner)
    }

    /// Tasks submitted and not yet freed, plus reserved slots (counted against
    /// `max_tasks`).
    pub fn live_tasks(&self) -> usize {
        self.inner.state.lock().live
    }

    /// The current estimate of a segment (µs): its measured moving average, or the
    /// compiler's estimate until one exists.
    pub fn segment_estimate_us(&self, info: &SegmentInfo) -> u64 {
        self.inner.state.lock().est.estimate_us(info)
    }

    /// Starts recording trace events (keeps earlier ones).
    pub fn trace_start(&self) {
        self.inner.tracer.start();
    }

    /// Stops recording trace events.
    pub fn trace_stop(&self) {
        self.inner.tracer.stop();
    }

    /// Forgets the recorded trace events.
    pub fn trace_clear(&self) {
        self.inner.tracer.clear();
    }

    /// The recorded trace events, oldest first.
    pub fn trace_events(&self) -> Vec<TraceEvent> {
        self.inner.tracer.events()
    }

    /// The recorded events as a Chrome / Perfetto trace (`{"traceEvents": [...]}`).
    pub fn trace_json(&self) -> serde_json::Value {
        self.inner.tracer.chrome_json(self.inner.cfg.cores)
    }

    /// Writes the Chrome / Perfetto trace JSON to `path`.
    pub fn dump_trace_to(&self, path: &Path) -> Result<()> {
        self.inner.tracer.dump(path, self.inner.cfg.cores)
    }

    /// Writes the trace to the configured `VNPU_TRACE` path.
    pub fn dump_trace(&self) -> Result<()> {
        match &self.inner.cfg.trace_path {
            Some(p) => self.dump_trace_to(p),
            None => Err(Error::ApiUse(
                "no trace path configured (set VNPU_TRACE or SchedConfig::trace_path)".into(),
            )),
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        {
            let mut st = self.inner.state.lock();
            st.shutdown = true;
            for w in &self.inner.core_work {
                w.fetch_add(1, Ordering::Release);
            }
        }
        for cv in &self.inner.core_cv {
            cv.notify_all();
        }
        self.inner.cpu.stop(self.inner.cfg.cpu_threads);
        let me = std::thread::current().id();
        for h in self.threads.drain(..) {
            if h.thread().id() != me && h.join().is_err() {
                eprintln!("vnpu: warning: a scheduler thread panicked");
            }
        }
        let mut done: Done = Vec::new();
        {
            let mut st = self.inner.state.lock();
            let ids: Vec<u64> = st.tasks.keys().copied().collect();
            for id in ids {
                self.inner
                    .finish_task(&mut st, id, Err(lifecycle::shutdown_error()), &mut done);
            }
        }
        self.inner.complete_all(done);
        self.inner.callbacks.stop();
        if let Some(p) = &self.inner.cfg.trace_path {
            if let Err(e) = self.inner.tracer.dump(p, self.inner.cfg.cores) {
                eprintln!("vnpu: warning: cannot write the trace: {e}");
            }
        }
    }
}

fn status_of(r: &Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.code(),
    }
}

impl SchedInner {
    fn trace(
        &self,
        kind: TraceKind,
        t: &TaskShared,
        core: Option<usize>,
        seg: usize,
        fc: usize,
        status: i32,
    ) {
        self.tracer.record(
            kind,
            t.id,
            core,
            seg,
            fc,
            t.ctrl.priority,
            status,
            t.label_id.load(Ordering::Relaxed),
        );
    }

    /// Records the intra-op chunks an FC (`core` = Some) or CPU segment ran, if any
    /// (`IntraOp`), and its threads' time off their CPUs, where measured (`OffCpu`), just
    /// before its end event.
    fn trace_intra_op(
        &self,
        t: &TaskShared,
        core: Option<usize>,
        seg: usize,
        fc: usize,
        c: crate::exec::pool::ChunkCounts,
    ) {
        let label = t.label_id.load(Ordering::Relaxed);
        let p = t.ctrl.priority;
        if c.chunks > 0 {
            self.tracer.record_count(
                TraceKind::IntraOp,
                t.id,
                core,
                seg,
                fc,
                p,
                c.on_helpers as i32,
                label,
                c.chunks,
            );
        }
        if let Some(off) = c.off_cpu {
            let helpers = i32::try_from(off.helpers_us).unwrap_or(i32::MAX);
            self.tracer.record_count(
                TraceKind::OffCpu,
                t.id,
                core,
                seg,
                fc,
                p,
                helpers,
                label,
                off.own_us,
            );
            if off.slept_us > 0 {
                self.tracer.record_count(
                    TraceKind::Slept,
                    t.id,
                    core,
                    seg,
                    fc,
                    p,
                    0,
                    label,
                    off.slept_us,
                );
            }
        }
    }

    /// The cores task mask `mask` allows (0 = all).
    fn allowed(&self, mask: u32) -> u32 {
        match mask {
            0 => self.all_cores,
            m => m & self.all_cores,
        }
    }

    /// Hands ended tasks to publication (unlocked; protocol step 5).
    fn complete_all(&self, done: Done) {
        for (t, r) in done {
            t.complete(r, &self.callbacks);
        }
    }

    pub(crate) fn spin_us(&self) -> u64 {
        self.cfg.spin_us
    }
}

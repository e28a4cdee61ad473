//! The scheduler: places tasks of many models by priority onto N virtual NPU cores with
//! FC-level preemption, and runs their CPU segments on a CPU pool. It schedules abstract
//! work ([`TaskBody`]); it knows nothing of models, kernels or tensors.
//!
//! # Protocol
//!
//! Every step below runs under the one scheduler lock (`SchedInner::state`), except
//! running an FC or a CPU segment and running done callbacks, which run unlocked.
//!
//! 1. **Submit.** The task is validated (core mask within the cores, no empty BPU
//!    segment), counted against `max_tasks` (live = submitted and not yet freed by
//!    [`TaskHandle::release`]) and traced. A priority-255 task, or one with no BPU segment,
//!    starts at once without holding a core (step 3); any other task enters the library
//!    queue, ordered by priority (higher first), `custom_id` (smaller first), then
//!    submission order. Then dispatch (step 2).
//! 2. **Dispatch.** A core is *free* when no task holds it, *insertable* when its holder is
//!    in a middle CPU segment, nothing was inserted yet and its FC queues are empty. Walk
//!    the queue in order; each task takes the lowest free core its mask allows; else, for
//!    each insertable core its mask allows (in index order), the core is *claimed* by this
//!    task (no task behind it may be inserted there) and the task is inserted if one of the
//!    three conditions ([`insert_reason`]) holds, with `cpu(A)` = the estimate of the
//!    holder's CPU segments up to its next BPU segment and `bpu(B)` = all BPU segments of
//!    the candidate. So a task never takes a core that a task ahead of it in the queue may
//!    also use. One task is inserted at a time; when it ends while the holder is still in
//!    its CPU segment, the next one may be. Dispatch runs after every event.
//! 3. **Start.** A dequeued task holds its core (`holder`, or `inserted` for an insertion)
//!    until it ends — through its leading and trailing CPU segments too; only a middle CPU
//!    segment lends the core to an inserted task — and runs its segments in order (step 4).
//! 4. **Segments.** A CPU segment goes to the CPU pool. A BPU segment goes to its core as
//!    all of its FCs at once (steps 7-9): the held core, or for a coreless priority-255
//!    task the allowed core where a high FC starts soonest.
//!    When the last FC of the segment (or the CPU segment) ends, its measured time updates
//!    the estimator and the next segment starts; after the last one the task ends.
//! 5. **End.** The task leaves its core (holder/inserted slot), its remaining FCs are
//!    dropped (on failure), its status is traced; then, unlocked, its done callback runs and
//!    its result is published to waiters. An FC or CPU segment that returns `Err` or panics
//!    (caught) fails only its task; the core or pool thread goes on.
//! 6. **Release.** A queued task is removed and cancelled (`Cancel` event, an error for its
//!    waiters); a running one is marked and freed at step 5; an ended one is freed now.
//!
//! Core level ("system software", one `FcQueue` per core, in `sched/core.rs`):
//!
//! 7. FCs of priority-255 tasks join the back of the core's *high* queue, all others the
//!    back of its *normal* queue (FIFO whatever the priority).
//! 8. The core's *committed* window holds at most `core_limit` FCs (the running one
//!    included; unbounded when `core_limit == 0`); whenever it has room it takes the front
//!    of *high* first, else the front of *normal*. A committed FC is never overtaken.
//! 9. The core thread runs the front of the window, one FC at a time, never interrupting
//!    one; when it ends, the window refills (step 8) and the next FC runs.
//!
//! # Invariants
//!
//! - A core has at most one holder and at most one inserted task; it is free only when it
//!   has neither.
//! - Tasks that hold a core left the queue in queue order among those whose masks allow
//!   that core: a lower-priority task never takes a free core a waiting higher-priority
//!   task may also use.
//! - A task runs on no core outside its mask; its FCs run one at a time and in order.
//! - Priority-255 tasks never wait in the library queue and never hold a core; their FCs
//!   go to the high FC queue and wait for at most `core_limit` normal FCs
//!   (all FCs queued before them when `core_limit == 0`).
//! - Trace events recorded under the lock are in the order of the state changes.

#![warn(missing_docs)]

mod config;
mod core;
mod estimator;
mod os;
mod task;
mod trace;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};

pub use self::config::{SchedConfig, MAX_CORES};
pub use self::task::{
    DoneCallback, SegmentInfo, SegmentKind, SegmentTiming, TaskBody, TaskCtrl, TaskHandle,
    TaskStatus, TaskTimings, PRIORITY_HIGH,
};
pub use self::trace::{TraceEvent, TraceKind};

use self::core::{FcItem, FcQueue};
use self::estimator::Estimator;
use self::task::{TaskShared, PHASE_ENDED, PHASE_RUNNING};
use self::trace::Tracer;
use crate::error::{Error, Result};

/// The reason recorded for a task cancelled by release while queued.
pub(crate) const CANCELLED_REASON: &str = "cancelled: released before it ran";

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct QueueKey {
    priority: Reverse<u8>,
    custom_id: i64,
    seq: u64,
}

struct CoreSlot {
    holder: Option<u64>,
    inserted: Option<u64>,
    fcs: FcQueue,
}

struct RunEntry {
    shared: Arc<TaskShared>,
    /// The core the task holds (None for priority-255 and CPU-only tasks).
    core: Option<usize>,
    /// The current segment.
    seg: usize,
    seg_start: Instant,
    seg_busy: Duration,
    /// In a middle CPU segment while holding a core (its core may take an insertion).
    middle_cpu: bool,
}

struct State {
    queue: BTreeMap<QueueKey, Arc<TaskShared>>,
    running: HashMap<u64, RunEntry>,
    cores: Vec<CoreSlot>,
    live: usize,
    est: Estimator,
    shutdown: bool,
}

enum CpuMsg {
    Run(Arc<TaskShared>, usize),
    Exit,
}

type Done = Vec<(Arc<TaskShared>, std::result::Result<(), Error>)>;

/// The state shared by the scheduler, its threads and task handles.
pub(crate) struct SchedInner {
    cfg: SchedConfig,
    all_cores: u32,
    state: Mutex<State>,
    core_cv: Vec<Condvar>,
    /// Bumped (under the lock) whenever FCs are pushed to core k: an idle core polls it.
    core_work: Vec<AtomicU64>,
    cpu_tx: Sender<CpuMsg>,
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
    /// Starts the core threads and the CPU pool; starts tracing when `cfg.trace_path` is set.
    pub fn new(cfg: SchedConfig) -> Result<Arc<Scheduler>> {
        cfg.validate()?;
        let (cpu_tx, cpu_rx) = unbounded();
        let all_cores = if cfg.cores >= 32 {
            u32::MAX
        } else {
            (1u32 << cfg.cores) - 1
        };
        let inner = Arc::new(SchedInner {
            all_cores,
            state: Mutex::new(State {
                queue: BTreeMap::new(),
                running: HashMap::new(),
                cores: (0..cfg.cores)
                    .map(|_| CoreSlot {
                        holder: None,
                        inserted: None,
                        fcs: FcQueue::new(cfg.core_limit),
                    })
                    .collect(),
                live: 0,
                est: Estimator::default(),
                shutdown: false,
            }),
            core_cv: (0..cfg.cores).map(|_| Condvar::new()).collect(),
            core_work: (0..cfg.cores).map(|_| AtomicU64::new(0)).collect(),
            cpu_tx,
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
        for k in 0..inner.cfg.cores {
            let inner = inner.clone();
            spawned.push(
                std::thread::Builder::new()
                    .name(format!("vnpu-core{k}"))
                    .spawn(move || core_main(inner, k)),
            );
        }
        for i in 0..inner.cfg.cpu_threads {
            let (inner, rx) = (inner.clone(), cpu_rx.clone());
            spawned.push(
                std::thread::Builder::new()
                    .name(format!("vnpu-cpu{i}"))
                    .spawn(move || cpu_main(inner, rx)),
            );
        }
        let mut failure = None;
        for s in spawned {
            match s {
                Ok(h) => {
                    sched.threads.push(h);
                }
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
        self.inner.submit(body, ctrl)
    }

    /// Tasks submitted and not yet freed (counted against `max_tasks`).
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
        for _ in 0..self.inner.cfg.cpu_threads {
            // The receivers live as long as the pool threads; a send can only fail when
            // they are all gone already.
            let _ = self.inner.cpu_tx.send(CpuMsg::Exit);
        }
        let me = std::thread::current().id();
        for h in self.threads.drain(..) {
            if h.thread().id() != me && h.join().is_err() {
                eprintln!("vnpu: warning: a scheduler thread panicked");
            }
        }
        let mut done: Done = Vec::new();
        {
            let mut st = self.inner.state.lock();
            let queued: Vec<_> = std::mem::take(&mut st.queue).into_values().collect();
            for t in queued {
                t.phase.store(PHASE_ENDED, Ordering::Release);
                done.push((t, Err(shutdown_error())));
            }
            let ids: Vec<u64> = st.running.keys().copied().collect();
            for id in ids {
                self.inner
                    .finish_task(&mut st, id, Err(shutdown_error()), &mut done);
            }
        }
        complete_all(done);
        if let Some(p) = &self.inner.cfg.trace_path {
            if let Err(e) = self.inner.tracer.dump(p, self.inner.cfg.cores) {
                eprintln!("vnpu: warning: cannot write the trace: {e}");
            }
        }
    }
}

fn shutdown_error() -> Error {
    Error::ApiUse("the scheduler shut down before the task ended".into())
}

fn complete_all(done: Done) {
    for (t, r) in done {
        t.complete(r);
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

fn run_guarded(f: impl FnOnce() -> Result<()>) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Error::Panic(panic_message(&*p))),
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

    fn submit(self: &Arc<Self>, body: Arc<dyn TaskBody>, ctrl: TaskCtrl) -> Result<TaskHandle> {
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
        let shared = Arc::new(TaskShared::new(id, body, ctrl));
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
            if st.live >= self.cfg.max_tasks {
                return Err(Error::TaskLimit {
                    limit: self.cfg.max_tasks,
                });
            }
            st.live += 1;
            let label = self.tracer.intern(shared.body.label());
            shared.label_id.store(label, Ordering::Relaxed);
            self.trace(TraceKind::Submit, &shared, None, 0, 0, 0);
            if ctrl.priority == PRIORITY_HIGH || shared.bpu_span.is_none() {
                self.start_task(&mut st, shared, None, None, &mut done);
            } else {
                let key = QueueKey {
                    priority: Reverse(ctrl.priority),
                    custom_id: ctrl.custom_id,
                    seq: id,
                };
                st.queue.insert(key, shared);
            }
            self.dispatch(&mut st, &mut done);
        }
        complete_all(done);
        Ok(handle)
    }

    /// Protocol step 2.
    fn dispatch(&self, st: &mut State, done: &mut Done) {
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
                        if c.fcs.is_idle() && st.running.get(&h).is_some_and(|e| e.middle_cpu) =>
                    {
                        insertable |= 1 << k;
                    }
                    _ => {}
                }
            }
            if free | insertable == 0 {
                return;
            }
            let mut picks: Vec<(QueueKey, usize, Option<InsertReason>)> = Vec::new();
            for (key, t) in st.queue.iter() {
                let allowed = match t.ctrl.core_mask {
                    0 => self.all_cores,
                    m => m & self.all_cores,
                };
                if allowed & free != 0 {
                    let c = (allowed & free).trailing_zeros() as usize;
                    free &= !(1 << c);
                    picks.push((*key, c, None));
                } else {
                    let mut ins = allowed & insertable;
                    while ins != 0 {
                        let c = ins.trailing_zeros() as usize;
                        ins &= !(1 << c);
                        insertable &= !(1 << c);
                        if let Some(r) = self.insertion_check(st, c, t) {
                            picks.push((*key, c, Some(r)));
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
            for (key, c, reason) in picks {
                if let Some(t) = st.queue.remove(&key) {
                    self.start_task(st, t, Some(c), reason, done);
                }
            }
        }
    }

    /// The insertion conditions for queued task `b` on core `c`, whose holder is in a
    /// middle CPU segment.
    fn insertion_check(&self, st: &State, c: usize, b: &TaskShared) -> Option<InsertReason> {
        let holder = st.cores[c].holder?;
        let a = st.running.get(&holder)?;
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
        let bpu_b = st.est.bpu_total_us(b.body.segments());
        insert_reason(&self.cfg, bpu_b, cpu_a, next_bpu)
    }

    /// Protocol step 3.
    fn start_task(
        &self,
        st: &mut State,
        t: Arc<TaskShared>,
        core: Option<usize>,
        reason: Option<InsertReason>,
        done: &mut Done,
    ) {
        let id = t.id;
        if let Some(c) = core {
            match reason {
                Some(r) => {
                    st.cores[c].inserted = Some(id);
                    self.trace(TraceKind::Insert, &t, Some(c), 0, 0, r as i32);
                }
                None => st.cores[c].holder = Some(id),
            }
        }
        self.trace(TraceKind::Dequeue, &t, core, 0, 0, 0);
        let now = Instant::now();
        t.timings.lock().dequeued = Some(now);
        t.phase.store(PHASE_RUNNING, Ordering::Release);
        st.running.insert(
            id,
            RunEntry {
                shared: t,
                core,
                seg: 0,
                seg_start: now,
                seg_busy: Duration::ZERO,
                middle_cpu: false,
            },
        );
        self.advance(st, id, done);
    }

    /// Protocol step 4: starts the current segment of task `id`, or ends the task.
    fn advance(&self, st: &mut State, id: u64, done: &mut Done) {
        let (t, seg, held) = match st.running.get(&id) {
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
            (SegmentKind::Bpu, None) => Some(self.soonest_core(&st.cores, t.ctrl.core_mask)),
        };
        if let Some(e) = st.running.get_mut(&id) {
            e.seg_start = Instant::now();
            e.seg_busy = Duration::ZERO;
            e.middle_cpu = core.is_none() && held.is_some() && t.is_middle(seg);
        }
        match core {
            None => {
                if self.cpu_tx.send(CpuMsg::Run(t.clone(), seg)).is_err() {
                    self.finish_task(st, id, Err(shutdown_error()), done);
                }
            }
            Some(core) => {
                let high = t.ctrl.priority == PRIORITY_HIGH;
                self.trace(TraceKind::SegmentStart, &t, Some(core), seg, 0, 0);
                let n = info.fc_est_us.len();
                st.cores[core]
                    .fcs
                    .push_segment(info.fc_est_us.iter().enumerate().map(|(fc, &est)| FcItem {
                        task: t.clone(),
                        seg,
                        fc,
                        last: fc + 1 == n,
                        high,
                        est_us: est,
                    }));
                self.core_work[core].fetch_add(1, Ordering::Release);
                self.core_cv[core].notify_one();
            }
        }
    }

    /// The allowed core where a high FC pushed now would start soonest (lowest index on ties).
    fn soonest_core(&self, cores: &[CoreSlot], mask: u32) -> usize {
        let allowed = match mask {
            0 => self.all_cores,
            m => m & self.all_cores,
        };
        (0..cores.len())
            .filter(|k| allowed & (1 << k) != 0)
            .min_by_key(|&k| (cores[k].fcs.high_start_estimate_us(), k))
            .unwrap_or(0)
    }

    /// Protocol step 5 (locked part).
    fn finish_task(&self, st: &mut State, id: u64, result: Result<()>, done: &mut Done) {
        let Some(e) = st.running.remove(&id) else {
            return;
        };
        for (k, c) in st.cores.iter_mut().enumerate() {
            if c.holder == Some(id) {
                c.holder = None;
            }
            if c.inserted == Some(id) {
                c.inserted = None;
            }
            if result.is_err() {
                // Dropping its FCs may let others into the committed window.
                c.fcs.remove_task(id);
                self.core_work[k].fetch_add(1, Ordering::Release);
                self.core_cv[k].notify_one();
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
    /// its busy time) and starts the next one.
    fn end_segment(
        &self,
        st: &mut State,
        id: u64,
        core: Option<usize>,
        busy: Duration,
        done: &mut Done,
    ) {
        let Some(e) = st.running.get_mut(&id) else {
            return;
        };
        let t = e.shared.clone();
        let seg = e.seg;
        let Some(info) = t.body.segments().get(seg) else {
            return;
        };
        let wall = e.seg_start.elapsed();
        let start = e.seg_start;
        e.seg += 1;
        e.middle_cpu = false;
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
        self.advance(st, id, done);
    }

    fn on_fc_end(
        &self,
        st: &mut State,
        k: usize,
        result: Result<()>,
        elapsed: Duration,
        done: &mut Done,
    ) {
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
        if let Some(e) = st.running.get_mut(&t.id) {
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

    fn on_cpu_end(
        &self,
        st: &mut State,
        t: &TaskShared,
        result: Result<()>,
        elapsed: Duration,
        done: &mut Done,
    ) {
        match result {
            Err(err) => {
                if let Some(e) = st.running.get(&t.id) {
                    self.trace(TraceKind::SegmentEnd, t, None, e.seg, 0, err.code());
                }
                self.finish_task(st, t.id, Err(err), done);
            }
            Ok(()) => self.end_segment(st, t.id, None, elapsed, done),
        }
        self.dispatch(st, done);
    }

    /// Protocol step 6.
    fn release(&self, t: &Arc<TaskShared>) -> Result<()> {
        let mut done: Done = Vec::new();
        let running;
        {
            let mut st = self.state.lock();
            if t.released.swap(true, Ordering::AcqRel) {
                return Err(Error::InvalidTaskHandle(format!(
                    "task {} ('{}') was already released",
                    t.id,
                    t.body.label()
                )));
            }
            let key = st.queue.iter().find(|(_, q)| q.id == t.id).map(|(k, _)| *k);
            if let Some(key) = key {
                st.queue.remove(&key);
                st.live = st.live.saturating_sub(1);
                t.phase.store(PHASE_ENDED, Ordering::Release);
                self.trace(TraceKind::Cancel, t, None, 0, 0, 0);
                done.push((
                    t.clone(),
                    Err(Error::RunFailed {
                        model: t.body.label().to_owned(),
                        reason: CANCELLED_REASON.into(),
                    }),
                ));
                // A cancelled task may have been the one claiming an insertable core.
                self.dispatch(&mut st, &mut done);
            } else if !st.running.contains_key(&t.id) {
                st.live = st.live.saturating_sub(1);
            }
            running = st.running.contains_key(&t.id);
        }
        complete_all(done);
        // A running task stops at its next FC or segment boundary; wait for that, so
        // that the caller may free the task's memory once release returns. Not on a
        // scheduler thread (a done callback), where waiting could block the very core
        // the task needs.
        if running && !ON_SCHED_THREAD.with(|f| f.get()) {
            let mut d = t.done.lock();
            while d.result.is_none() && !d.finishing {
                t.done_cv.wait(&mut d);
            }
        }
        Ok(())
    }

    pub(crate) fn spin_us(&self) -> u64 {
        self.cfg.spin_us
    }

    fn estimate_remaining_us(&self, t: &TaskShared) -> u64 {
        let st = self.state.lock();
        let from = match t.phase.load(Ordering::Acquire) {
            PHASE_ENDED => return 0,
            _ => st.running.get(&t.id).map_or(0, |e| e.seg),
        };
        t.body
            .segments()
            .iter()
            .skip(from)
            .fold(0u64, |a, s| a.saturating_add(st.est.estimate_us(s)))
    }
}

thread_local! {
    /// Set on the scheduler's own threads (cores, CPU pool): done callbacks run there,
    /// and a release called from one must not wait for the scheduler.
    static ON_SCHED_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Why a released task stops at its next FC or segment boundary (the safe point).
pub(crate) const STOPPED_REASON: &str = "stopped: released while running";

/// The error that ends a released running task instead of its next FC or segment.
fn stopped_if_released(t: &TaskShared) -> Option<Error> {
    t.released
        .load(Ordering::Acquire)
        .then(|| Error::RunFailed {
            model: t.body.label().to_owned(),
            reason: STOPPED_REASON.into(),
        })
}

fn core_main(inner: Arc<SchedInner>, k: usize) {
    ON_SCHED_THREAD.with(|f| f.set(true));
    os::place_core_thread(
        k,
        inner.cfg.pin_cores,
        inner.cfg.rt_priority,
        inner.cfg.core_nice,
    );
    let mut done: Done = Vec::new();
    let spin = Duration::from_micros(inner.cfg.spin_us);
    let mut spun = false;
    let mut st = inner.state.lock();
    loop {
        if st.shutdown {
            return;
        }
        let Some(item) = st.cores[k].fcs.take_next() else {
            if spun || spin.is_zero() {
                inner.core_cv[k].wait(&mut st);
                spun = false;
            } else {
                // Poll for new work unlocked for a moment before sleeping: a futex wake-up
                // costs more than a short FC.
                let seen = inner.core_work[k].load(Ordering::Acquire);
                MutexGuard::unlocked(&mut st, || {
                    spin_until(spin, || inner.core_work[k].load(Ordering::Acquire) != seen)
                });
                spun = true;
            }
            continue;
        };
        spun = false;
        let (t, seg, fc) = (item.task.clone(), item.seg, item.fc);
        inner.trace(TraceKind::FcStart, &t, Some(k), seg, fc, 0);
        let (result, elapsed) = MutexGuard::unlocked(&mut st, || {
            let start = Instant::now();
            let r = match stopped_if_released(&t) {
                Some(e) => Err(e),
                None => run_guarded(|| t.body.run_fc(seg, fc)),
            };
            (r, start.elapsed())
        });
        inner.on_fc_end(&mut st, k, result, elapsed, &mut done);
        if !done.is_empty() {
            MutexGuard::unlocked(&mut st, || complete_all(std::mem::take(&mut done)));
        }
    }
}

/// Polls `done` until it holds or `limit` passes; true when it held.
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
        // Let a thread that shares this CPU (e.g. the one that will publish) run.
        std::thread::yield_now();
    }
}

fn cpu_main(inner: Arc<SchedInner>, rx: Receiver<CpuMsg>) {
    ON_SCHED_THREAD.with(|f| f.set(true));
    let mut done: Done = Vec::new();
    while let Ok(CpuMsg::Run(t, seg)) = rx.recv() {
        inner.trace(TraceKind::SegmentStart, &t, None, seg, 0, 0);
        let start = Instant::now();
        let result = match stopped_if_released(&t) {
            Some(e) => Err(e),
            None => run_guarded(|| t.body.run_cpu_segment(seg)),
        };
        let elapsed = start.elapsed();
        {
            let mut st = inner.state.lock();
            inner.on_cpu_end(&mut st, &t, result, elapsed, &mut done);
        }
        complete_all(std::mem::take(&mut done));
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

    #[test]
    fn queue_key_orders_priority_then_custom_id_then_submission() {
        let k = |p: u8, c: i64, s: u64| QueueKey {
            priority: Reverse(p),
            custom_id: c,
            seq: s,
        };
        let mut keys = vec![k(1, 0, 1), k(5, 9, 2), k(5, 3, 3), k(5, 3, 0), k(0, -1, 4)];
        keys.sort();
        assert_eq!(
            keys,
            vec![k(5, 3, 0), k(5, 3, 3), k(5, 9, 2), k(1, 0, 1), k(0, -1, 4)]
        );
    }
}

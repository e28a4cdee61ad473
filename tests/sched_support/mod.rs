//! Shared support of the scheduler integration tests: a [`TaskBody`] whose steps (FCs and
//! CPU segments) can be held at a gate the test opens, and helpers over the trace.
//!
//! Tests built on it assert on the order of recorded events, never on wall time; a gate
//! wait that lasts over a minute panics as a deadlock diagnostic, not as a timing check.
#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use vnpu::sched::{
    SchedConfig, Scheduler, SegmentInfo, SegmentKind, TaskBody, TaskCtrl, TaskHandle, TraceEvent,
    TraceKind,
};
use vnpu::{Error, Result};

/// One step of a task: (label, segment, FC; 0 for a CPU segment).
pub type Step = (String, usize, usize);

const DEADLOCK_LIMIT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct GateState {
    gated: HashSet<Step>,
    open: HashSet<Step>,
    started: Vec<Step>,
}

/// Gates that hold chosen steps until the test opens them.
#[derive(Default)]
pub struct Gates {
    state: Mutex<GateState>,
    cv: Condvar,
}

impl Gates {
    pub fn new() -> Arc<Gates> {
        Arc::new(Gates::default())
    }

    /// Holds step (label, seg, fc) when it starts, until `open`.
    pub fn gate(&self, label: &str, seg: usize, fc: usize) {
        self.state.lock().gated.insert((label.into(), seg, fc));
    }

    /// Lets a gated step go on.
    pub fn open(&self, label: &str, seg: usize, fc: usize) {
        self.state.lock().open.insert((label.into(), seg, fc));
        self.cv.notify_all();
    }

    /// Blocks until step (label, seg, fc) has started.
    pub fn wait_started(&self, label: &str, seg: usize, fc: usize) {
        let step: Step = (label.into(), seg, fc);
        let deadline = Instant::now() + DEADLOCK_LIMIT;
        let mut st = self.state.lock();
        while !st.started.contains(&step) {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                panic!(
                    "deadlock: step {step:?} never started (started: {:?})",
                    st.started
                );
            }
        }
    }

    /// Every step started so far, in order.
    pub fn started(&self) -> Vec<Step> {
        self.state.lock().started.clone()
    }

    /// Records that step (label, seg, fc) started and holds it there while it is gated
    /// (for bodies of other tests that want the gates at points of their own).
    pub fn gate_point(&self, label: &str, seg: usize, fc: usize) {
        self.arrive((label.into(), seg, fc));
    }

    fn arrive(&self, step: Step) {
        let deadline = Instant::now() + DEADLOCK_LIMIT;
        let mut st = self.state.lock();
        st.started.push(step.clone());
        self.cv.notify_all();
        while st.gated.contains(&step) && !st.open.contains(&step) {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                panic!("deadlock: gate {step:?} never opened");
            }
        }
    }
}

/// How a step fails.
#[derive(Clone, Copy, Debug)]
pub enum Fail {
    Panic,
    Err,
}

/// A test task: segments with compiler estimates; steps report to (and wait at) the gates.
pub struct TestBody {
    pub label: String,
    pub segs: Vec<SegmentInfo>,
    pub gates: Arc<Gates>,
    pub fail: Option<(usize, usize, Fail)>,
}

impl TestBody {
    fn step(&self, seg: usize, fc: usize) -> Result<()> {
        self.gates.arrive((self.label.clone(), seg, fc));
        match self.fail {
            Some((s, f, Fail::Panic)) if (s, f) == (seg, fc) => {
                panic!("injected panic in {} s{seg} fc{fc}", self.label)
            }
            Some((s, f, Fail::Err)) if (s, f) == (seg, fc) => Err(Error::InvalidArgument {
                name: self.label.clone(),
                reason: format!("injected error at s{seg} fc{fc}"),
            }),
            _ => Ok(()),
        }
    }
}

impl TaskBody for TestBody {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segs
    }
    fn run_cpu_segment(&self, seg: usize) -> Result<()> {
        self.step(seg, 0)
    }
    fn run_fc(&self, seg: usize, fc: usize) -> Result<()> {
        self.step(seg, fc)
    }
    fn label(&self) -> &str {
        &self.label
    }
}

static MODEL_IDS: AtomicU64 = AtomicU64::new(1);

/// Segment description for [`body`]: `B(&[fc estimates])` or `C(estimate)`.
pub enum S<'a> {
    B(&'a [u64]),
    C(u64),
}

/// Segments of one fresh model (its own estimator keys).
pub fn segs(spec: &[S]) -> Vec<SegmentInfo> {
    let model = MODEL_IDS.fetch_add(1, Ordering::Relaxed);
    spec.iter()
        .enumerate()
        .map(|(i, s)| match s {
            S::B(fcs) => SegmentInfo {
                kind: SegmentKind::Bpu,
                fc_est_us: fcs.to_vec(),
                estimator_key: (model, i),
            },
            S::C(est) => SegmentInfo {
                kind: SegmentKind::Cpu,
                fc_est_us: vec![*est],
                estimator_key: (model, i),
            },
        })
        .collect()
}

pub fn body(label: &str, gates: &Arc<Gates>, spec: &[S]) -> Arc<TestBody> {
    Arc::new(TestBody {
        label: label.into(),
        segs: segs(spec),
        gates: gates.clone(),
        fail: None,
    })
}

pub fn ctrl(priority: u8, custom_id: i64, core_mask: u32) -> TaskCtrl {
    TaskCtrl {
        core_mask,
        priority,
        custom_id,
    }
}

/// A scheduler with tracing on, `cores` cores, corelimit `limit`, 4 CPU threads and
/// insertion turned off unless `cfg` changes it.
pub fn sched_with(cores: usize, limit: usize, f: impl FnOnce(&mut SchedConfig)) -> Arc<Scheduler> {
    let mut cfg = SchedConfig {
        cores,
        cpu_threads: 4,
        core_limit: limit,
        ..SchedConfig::default()
    };
    no_insertion(&mut cfg);
    f(&mut cfg);
    let s = Scheduler::new(cfg).expect("scheduler");
    s.trace_start();
    s
}

/// Sets the three insertion conditions so none can hold for B longer than A's CPU segment.
pub fn no_insertion(cfg: &mut SchedConfig) {
    cfg.bpu_schedule_threshold_pct = 0;
    cfg.insert_fc_max_time_ms = 0;
    cfg.wait_dispatch_time_ms = u64::MAX / 1000;
}

pub fn submit(s: &Scheduler, b: &Arc<TestBody>, c: TaskCtrl) -> TaskHandle {
    s.submit(b.clone(), c).expect("submit")
}

/// The recorded events of `kind`, as (task id, core, seg, fc).
pub fn of_kind(ev: &[TraceEvent], kind: TraceKind) -> Vec<(u64, Option<usize>, u32, u32)> {
    ev.iter()
        .filter(|e| e.kind == kind)
        .map(|e| (e.task, e.core, e.seg, e.fc))
        .collect()
}

/// The index of the first event matching.
pub fn pos(ev: &[TraceEvent], kind: TraceKind, task: u64) -> usize {
    ev.iter()
        .position(|e| e.kind == kind && e.task == task)
        .unwrap_or_else(|| panic!("no {kind:?} event for task {task}"))
}

//! Intra-op parallelism under host priority classes (issue 13 item 3), on recorded events:
//! a top-class FC hands chunks of its large nodes to a free helper when the only other work
//! is low-class; a low-class FC, and a top-class one while the CPUs are busy with top-class
//! work, run every chunk themselves. The trace says how many chunks each FC ran and how
//! many of those ran on helpers. No assertion depends on time.

mod sched_support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sched_support::{ctrl, sched_with, segs, Gates, S};
use vnpu::exec::pool::Pool;
use vnpu::sched::{HostPriority, SegmentInfo, TaskBody, TraceKind};
use vnpu::Result;

/// The pool's gauge of busy top-class threads is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// An FC that waits at its gate, runs two chunks on `pool` (which must run side by side
/// when `meet`), then waits at gate (label, seg, fc + 100).
struct Chunky {
    label: String,
    segs: Vec<SegmentInfo>,
    gates: Arc<Gates>,
    pool: Arc<Pool>,
    meet: bool,
}

fn await_count(flag: &AtomicU32, want: u32) {
    let start = Instant::now();
    while flag.load(Ordering::Acquire) < want {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "deadlock: two chunks that must run side by side never met"
        );
        std::thread::yield_now();
    }
}

impl TaskBody for Chunky {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segs
    }
    fn run_cpu_segment(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn run_fc(&self, seg: usize, fc: usize) -> Result<()> {
        self.gates.gate_point(&self.label, seg, fc);
        let met = AtomicU32::new(0);
        let mut parts = [(), ()];
        self.pool.run(&mut parts, &|_, _| {
            if self.meet {
                met.fetch_add(1, Ordering::AcqRel);
                await_count(&met, 2);
            }
        });
        self.gates.gate_point(&self.label, seg, fc + 100);
        Ok(())
    }
    fn label(&self) -> &str {
        &self.label
    }
}

fn chunky(
    label: &str,
    fcs: usize,
    gates: &Arc<Gates>,
    pool: &Arc<Pool>,
    meet: bool,
) -> Arc<Chunky> {
    Arc::new(Chunky {
        label: label.into(),
        segs: segs(&[S::B(&vec![100; fcs])]),
        gates: gates.clone(),
        pool: pool.clone(),
        meet,
    })
}

#[test]
fn a_top_class_fc_uses_a_helper_while_only_low_class_work_runs_beside_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A two-CPU host for the gauge, one helper.
    let pool = Arc::new(Pool::new(1, 2));
    let s = sched_with(2, 0, |c| c.host_priority = HostPriority::Idle);
    let gates = Gates::new();
    let bg = chunky("bg", 2, &gates, &pool, false);
    let fg = chunky("fg", 1, &gates, &pool, true);
    gates.gate("bg", 0, 0);
    gates.gate("fg", 0, 0);
    gates.gate("bg", 0, 101);
    let hb = s.submit(bg, ctrl(0, 0, 0)).expect("submit bg");
    gates.wait_started("bg", 0, 0);
    // bg's FC 0 started alone (top class); the priority-255 fg waits at its gate on the
    // other core, counted as busy top-class work.
    let hf = s.submit(fg, ctrl(255, 0, 0)).expect("submit fg");
    gates.wait_started("fg", 0, 0);
    // bg FC 0 runs its chunks while two top-class threads fill both CPUs: no helper.
    gates.open("bg", 0, 0);
    // bg FC 1 starts low class (a higher priority is live), runs its chunks itself, holds.
    gates.wait_started("bg", 0, 101);
    // fg's chunks must run side by side: only a helper can take the second one.
    gates.open("fg", 0, 0);
    hf.wait(None).expect("fg");
    gates.open("bg", 0, 101);
    hb.wait(None).expect("bg");

    let ev = s.trace_events();
    let class = |task: u64, fc: u32| {
        ev.iter()
            .find(|e| e.kind == TraceKind::FcStart && e.task == task && e.fc == fc)
            .map(|e| e.status)
    };
    assert_eq!(class(hb.id(), 0), Some(0), "bg FC 0 started top class");
    assert_eq!(class(hb.id(), 1), Some(1), "bg FC 1 started low class");
    assert_eq!(class(hf.id(), 0), Some(0), "fg FC 0 is top class");
    let intra: Vec<(u64, u32, u32, i32)> = ev
        .iter()
        .filter(|e| e.kind == TraceKind::IntraOp)
        .map(|e| (e.task, e.fc, e.count, e.status))
        .collect();
    assert!(intra.contains(&(hb.id(), 0, 2, 0)), "{intra:?}");
    assert!(intra.contains(&(hb.id(), 1, 2, 0)), "{intra:?}");
    assert!(intra.contains(&(hf.id(), 0, 2, 1)), "{intra:?}");
    // Each IntraOp comes just before its FC's end, with the FC's time off the CPUs
    // (measured while tracing) in between.
    for (i, e) in ev
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == TraceKind::IntraOp)
    {
        let (off, end) = (&ev[i + 1], &ev[i + 2]);
        assert_eq!(
            (off.kind, off.task, off.fc),
            (TraceKind::OffCpu, e.task, e.fc)
        );
        assert_eq!(
            (end.kind, end.task, end.fc),
            (TraceKind::FcEnd, e.task, e.fc)
        );
    }
    // The Chrome trace shows it on the FC's slice.
    let json = s.trace_json();
    let fg_slice = json["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["cat"] == "fc" && e["args"]["task"] == hf.id())
        .expect("fg's FC slice")
        .clone();
    assert_eq!(fg_slice["args"]["intra_op_chunks"], 2);
    assert_eq!(fg_slice["args"]["chunks_on_helpers"], 1);
    assert!(fg_slice["args"]["off_cpu"]["own_us"].is_u64(), "{fg_slice}");
    assert!(
        fg_slice["args"]["off_cpu"]["helpers_us"].is_u64(),
        "{fg_slice}"
    );
}

#[test]
fn with_host_priority_off_every_fc_is_top_class_and_may_use_a_helper() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pool = Arc::new(Pool::new(1, 2));
    let s = sched_with(1, 0, |c| c.host_priority = HostPriority::Off);
    let gates = Gates::new();
    let t = chunky("solo", 3, &gates, &pool, true);
    let h = s.submit(t, ctrl(0, 0, 0)).expect("submit");
    h.wait(None).expect("solo");
    let ev = s.trace_events();
    let intra: Vec<(u32, u32, i32)> = ev
        .iter()
        .filter(|e| e.kind == TraceKind::IntraOp && e.task == h.id())
        .map(|e| (e.fc, e.count, e.status))
        .collect();
    assert_eq!(intra, vec![(0, 2, 1), (1, 2, 1), (2, 2, 1)]);
}

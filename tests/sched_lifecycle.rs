//! Task life cycle through the scheduler: release of a queued task, wait timeout then
//! success, done callbacks, the task limit, failure isolation (panic and Err in FCs and
//! CPU segments), timings/estimates and the Chrome trace dump. Order only, never wall time.

mod sched_support;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sched_support::*;
use vnpu::error::codes;
use vnpu::sched::{SchedConfig, Scheduler, TaskStatus, TraceKind};
use vnpu::Error;

#[test]
fn releasing_a_queued_task_cancels_it_and_frees_its_slot() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10, 10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let q = submit(&s, &body("Q", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let codes_seen = Arc::new(Mutex::new(Vec::new()));
    let cs = codes_seen.clone();
    q.set_done_callback(Box::new(move |c| cs.lock().push(c)));
    assert_eq!(s.live_tasks(), 2);
    q.release().unwrap();
    assert_eq!(s.live_tasks(), 1);
    assert_eq!(q.status(), TaskStatus::Cancelled);
    let err = q.wait(None).unwrap_err();
    assert_eq!(err.code(), codes::HB_DNN_RUN_TASK_FAILED);
    assert_eq!(*codes_seen.lock(), vec![codes::HB_DNN_RUN_TASK_FAILED]);
    assert!(matches!(q.release(), Err(Error::InvalidTaskHandle(_))));
    // Releasing a running task stops it at its next FC boundary: the FC in flight ends,
    // the next never starts, and release returns only then (so that the caller may
    // free the task's memory).
    std::thread::scope(|sc| {
        let releaser = sc.spawn(|| x.release());
        while !x.is_released() {
            std::thread::yield_now();
        }
        g.open("X", 0, 0);
        releaser.join().unwrap().unwrap();
    });
    assert_eq!(s.live_tasks(), 0);
    let err = x.wait(None).unwrap_err();
    assert_eq!(err.code(), codes::HB_DNN_RUN_TASK_FAILED);
    assert!(err.to_string().contains("released while running"), "{err}");
    let ev = s.trace_events();
    assert!(ev
        .iter()
        .any(|e| e.kind == TraceKind::Cancel && e.task == q.id()));
    assert!(!ev
        .iter()
        .any(|e| e.kind == TraceKind::FcStart && e.task == q.id()));
    assert!(!g.started().iter().any(|s| s.0 == "Q"));
    assert!(!g.started().iter().any(|s| s.0 == "X" && s.2 == 1));
}

#[test]
fn wait_times_out_without_harming_the_task_then_succeeds() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 1);
    let x = submit(&s, &body("X", &g, &[S::B(&[10, 10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 1);
    // The gated FC cannot end before the gate opens, so the wait must time out.
    let err = x.wait(Some(Duration::from_millis(5))).unwrap_err();
    assert!(matches!(err, Error::Timeout { ms: 5 }), "{err:?}");
    assert_eq!(err.code(), codes::HB_DNN_TIMEOUT);
    assert_eq!(x.status(), TaskStatus::Running);
    g.open("X", 0, 1);
    x.wait(None).unwrap();
    x.wait(Some(Duration::from_millis(1))).unwrap();
    assert_eq!(x.status(), TaskStatus::Done);
    x.release().unwrap();
    assert_eq!(s.live_tasks(), 0);
}

#[test]
fn done_callbacks_run_in_completion_order_before_wait_returns() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    let log = Arc::new(Mutex::new(Vec::<(String, i32)>::new()));
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let mut hs = vec![x.clone()];
    for (l, p) in [("A", 1u8), ("B", 3), ("C", 2)] {
        hs.push(submit(&s, &body(l, &g, &[S::B(&[10])]), ctrl(p, 0, 0)));
    }
    for (h, l) in hs.iter().zip(["X", "A", "B", "C"]) {
        let log = log.clone();
        h.set_done_callback(Box::new(move |code| log.lock().push((l.into(), code))));
    }
    g.open("X", 0, 0);
    hs[2].wait(None).unwrap();
    // B's callback has run once wait on B returns.
    assert!(log.lock().iter().any(|e| e.0 == "B"));
    for h in &hs {
        h.wait(None).unwrap();
    }
    let names: Vec<String> = log.lock().iter().map(|e| e.0.clone()).collect();
    assert_eq!(names, vec!["X", "B", "C", "A"]);
    assert!(log.lock().iter().all(|e| e.1 == 0));
    // A task's callback fires once: a registration after it fired is refused.
    let late = Arc::new(Mutex::new(None));
    let l2 = late.clone();
    assert!(!hs[1].set_done_callback(Box::new(move |c| *l2.lock() = Some(c))));
    assert_eq!(*late.lock(), None);
}

#[test]
fn task_limit_counts_live_tasks() {
    let g = Gates::new();
    let s = sched_with(1, 0, |c| c.max_tasks = 2);
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let y = submit(&s, &body("Y", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let err = s
        .submit(body("Z", &g, &[S::B(&[10])]), ctrl(255, 0, 0))
        .unwrap_err();
    assert!(matches!(err, Error::TaskLimit { limit: 2 }), "{err:?}");
    assert_eq!(err.code(), codes::HB_DNN_TASK_NUM_EXCEED_LIMIT);
    y.release().unwrap();
    let z = submit(&s, &body("Z", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.open("X", 0, 0);
    x.wait(None).unwrap();
    z.wait(None).unwrap();
    // Ended but unreleased tasks still count.
    assert!(s
        .submit(body("W", &g, &[S::B(&[10])]), ctrl(0, 0, 0))
        .is_err());
    x.release().unwrap();
    z.release().unwrap();
    assert_eq!(s.live_tasks(), 0);
}

fn failing(
    label: &str,
    g: &Arc<Gates>,
    spec: &[S],
    at: (usize, usize),
    how: Fail,
) -> Arc<TestBody> {
    Arc::new(TestBody {
        label: label.into(),
        segs: segs(spec),
        gates: g.clone(),
        fail: Some((at.0, at.1, how)),
    })
}

#[test]
fn a_failing_task_fails_alone_and_the_core_keeps_serving() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    let cases = [
        ("fc-panic", vec![S::B(&[10, 10, 10])], (0, 1), Fail::Panic),
        ("fc-err", vec![S::B(&[10, 10, 10])], (0, 1), Fail::Err),
        (
            "cpu-panic",
            vec![S::B(&[10]), S::C(10), S::B(&[10])],
            (1, 0),
            Fail::Panic,
        ),
        ("cpu-err", vec![S::C(10), S::B(&[10])], (0, 0), Fail::Err),
    ];
    for (label, spec, at, how) in cases {
        let bad = s
            .submit(failing(label, &g, &spec, at, how), ctrl(0, 0, 0))
            .unwrap();
        let ok_label = format!("after-{label}");
        let ok = submit(&s, &body(&ok_label, &g, &[S::B(&[10, 10])]), ctrl(0, 0, 0));
        let err = bad.wait(None).unwrap_err();
        match how {
            Fail::Panic => {
                assert!(
                    matches!(err, Error::Panic(ref m) if m.contains("injected")),
                    "{err:?}"
                );
                assert_eq!(err.code(), codes::HB_DNN_RUN_TASK_FAILED);
            }
            Fail::Err => assert_eq!(err.code(), codes::HB_DNN_INVALID_ARGUMENT),
        }
        assert_eq!(bad.status(), TaskStatus::Failed(err.code()));
        // A callback set after the end gets the failure code at once.
        let late = Arc::new(Mutex::new(None));
        let l2 = late.clone();
        bad.set_done_callback(Box::new(move |c| *l2.lock() = Some(c)));
        assert_eq!(*late.lock(), Some(err.code()));
        ok.wait(None).unwrap();
        // Nothing of the failed task ran after the failing step.
        let steps: Vec<(usize, usize)> = g
            .started()
            .iter()
            .filter(|s| s.0 == label)
            .map(|s| (s.1, s.2))
            .collect();
        assert_eq!(steps.last(), Some(&at), "{label}: {steps:?}");
        let ev = s.trace_events();
        let done = &ev[pos(&ev, TraceKind::Done, bad.id())];
        assert_eq!(done.status, err.code());
        if matches!(spec[0], S::B(_)) {
            assert!(pos(&ev, TraceKind::Done, bad.id()) < pos(&ev, TraceKind::Dequeue, ok.id()));
        }
    }
}

#[test]
fn timings_and_estimates_follow_the_segments() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    let b = body("E", &g, &[S::C(40), S::B(&[100, 200]), S::C(60)]);
    let segs = b.segs.clone();
    assert_eq!(s.segment_estimate_us(&segs[1]), 300);
    g.gate("E", 0, 0);
    let t = submit(&s, &b, ctrl(0, 0, 0));
    g.wait_started("E", 0, 0);
    assert_eq!(t.estimate_time_us(), 400);
    g.open("E", 0, 0);
    t.wait(None).unwrap();
    assert_eq!(t.estimate_time_us(), 0);
    let tm = t.timings();
    let kinds: Vec<_> = tm.segments.iter().map(|s| s.kind).collect();
    use vnpu::sched::SegmentKind::{Bpu, Cpu};
    assert_eq!(kinds, vec![Cpu, Bpu, Cpu]);
    assert!(tm.segments.iter().all(|s| s.busy <= s.wall));
    // After one run the estimates are the measured times, not the compiler's.
    let measured = s.segment_estimate_us(&segs[1]);
    assert_eq!(
        measured,
        u64::try_from(tm.segments[1].busy.as_micros()).unwrap()
    );
}

#[test]
fn tasks_without_bpu_segments_and_empty_tasks_need_no_core() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let cpu_only = submit(&s, &body("cpu", &g, &[S::C(10)]), ctrl(0, 0, 0));
    cpu_only.wait(None).unwrap();
    let empty = submit(&s, &body("empty", &g, &[]), ctrl(0, 0, 0));
    empty.wait(None).unwrap();
    let bad = s.submit(body("nofc", &g, &[S::B(&[])]), ctrl(0, 0, 0));
    assert!(matches!(bad, Err(Error::InvalidArgument { .. })));
    g.open("X", 0, 0);
    x.wait(None).unwrap();
}

#[test]
fn trace_dumps_chrome_json_on_request_and_on_drop() {
    let dir = std::env::temp_dir().join(format!("vnpu-sched-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let g = Gates::new();
    let cfg = SchedConfig {
        cores: 2,
        cpu_threads: 2,
        trace_path: Some(path.clone()),
        ..SchedConfig::default()
    };
    let s = Scheduler::new(cfg).unwrap();
    let a = submit(
        &s,
        &body("alpha", &g, &[S::C(5), S::B(&[10, 10])]),
        ctrl(0, 0, 1),
    );
    let b = submit(&s, &body("beta", &g, &[S::B(&[10])]), ctrl(255, 0, 2));
    a.wait(None).unwrap();
    b.wait(None).unwrap();
    s.dump_trace().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let fcs: Vec<_> = evs.iter().filter(|e| e["cat"] == "fc").collect();
    assert_eq!(fcs.len(), 3);
    assert!(fcs
        .iter()
        .any(|e| e["tid"] == 2 && e["args"]["model"] == "alpha"));
    assert!(fcs
        .iter()
        .any(|e| e["tid"] == 3 && e["args"]["priority"] == 255));
    assert!(evs.iter().any(|e| e["cat"] == "cpu" && e["tid"] == 1));
    std::fs::remove_file(&path).unwrap();
    drop(s);
    assert!(path.exists(), "dropping the scheduler dumps the trace");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tracing_can_be_stopped_and_cleared() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    s.trace_stop();
    submit(&s, &body("quiet", &g, &[S::B(&[10])]), ctrl(0, 0, 0))
        .wait(None)
        .unwrap();
    assert!(s.trace_events().is_empty());
    s.trace_start();
    let t = submit(&s, &body("loud", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    t.wait(None).unwrap();
    let kinds: Vec<TraceKind> = s.trace_events().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            TraceKind::Submit,
            TraceKind::Dequeue,
            TraceKind::SegmentStart,
            TraceKind::FcStart,
            TraceKind::OffCpu,
            TraceKind::FcEnd,
            TraceKind::SegmentEnd,
            TraceKind::Done
        ]
    );
    s.trace_clear();
    assert!(s.trace_events().is_empty());
}

#[test]
fn the_trace_counts_an_fcs_time_off_its_cpu() {
    // The FC's thread sleeps at its gate for at least 5 ms (held there by this thread):
    // all of it off its CPU, recorded just before the FC's end.
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("nap", 0, 0);
    let t = submit(&s, &body("nap", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("nap", 0, 0);
    std::thread::sleep(Duration::from_millis(5));
    g.open("nap", 0, 0);
    t.wait(None).unwrap();
    let ev = s.trace_events();
    let i = ev
        .iter()
        .position(|e| e.kind == TraceKind::OffCpu && e.task == t.id())
        .expect("an OffCpu event while tracing");
    assert!(ev[i].count >= 4_500, "own {} us", ev[i].count);
    assert_eq!(ev[i].status, 0, "no helper ran its chunks");
    assert_eq!((ev[i + 1].kind, ev[i + 1].task), (TraceKind::FcEnd, t.id()));
}

#[test]
fn dropping_the_scheduler_ends_every_task() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(
        &s,
        &body("X", &g, &[S::B(&[10]), S::B(&[10])]),
        ctrl(0, 0, 0),
    );
    g.wait_started("X", 0, 0);
    let q = submit(&s, &body("Q", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    // The core finishes its running FC whether shutdown began before or after the gate
    // opens; either way no task may be left waiting.
    let opener = {
        let g = g.clone();
        std::thread::spawn(move || g.open("X", 0, 0))
    };
    drop(s);
    opener.join().unwrap();
    for t in [&x, &q] {
        match t.wait(None) {
            Ok(()) => assert_eq!(t.status(), TaskStatus::Done),
            Err(e) => {
                assert!(matches!(e, Error::ApiUse(_)), "{e:?}");
                assert_eq!(t.status(), TaskStatus::Failed(e.code()));
            }
        }
    }
}

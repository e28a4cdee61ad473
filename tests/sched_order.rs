//! Scheduling order, asserted on the recorded trace: priority, customId, FIFO, core masks,
//! BPLAT_CORELIMIT preemption, priority-255 rules, insertion in middle CPU segments,
//! CPU segments at start/middle/end and multi-model tasks.

mod sched_support;

use sched_support::*;
use vnpu::sched::{InsertReason, SchedConfig, TaskStatus, TraceKind};
use vnpu::Error;

#[test]
fn queue_orders_by_priority_then_custom_id_then_submission() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let specs: [(&str, u8, i64); 6] = [
        ("L", 1, 0),
        ("H", 5, 0),
        ("M9", 3, 9),
        ("M1a", 3, 1),
        ("M1b", 3, 1),
        ("Z", 0, -5),
    ];
    let hs: Vec<_> = specs
        .iter()
        .map(|(l, p, c)| submit(&s, &body(l, &g, &[S::B(&[10, 10])]), ctrl(*p, *c, 0)))
        .collect();
    for h in &hs {
        assert_eq!(h.status(), TaskStatus::Queued);
    }
    g.open("X", 0, 0);
    x.wait(None).unwrap();
    for h in &hs {
        h.wait(None).unwrap();
    }
    let ev = s.trace_events();
    let id = |l: &str| hs[specs.iter().position(|s| s.0 == l).unwrap()].id();
    let dq: Vec<u64> = of_kind(&ev, TraceKind::Dequeue)
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        dq,
        vec![
            x.id(),
            id("H"),
            id("M1a"),
            id("M1b"),
            id("M9"),
            id("L"),
            id("Z")
        ]
    );
    // A task holds its core until it ends: FCs of different tasks never interleave.
    let fcs: Vec<u64> = of_kind(&ev, TraceKind::FcStart)
        .iter()
        .map(|e| e.0)
        .collect();
    let mut expect = vec![x.id()];
    for l in ["H", "M1a", "M1b", "M9", "L", "Z"] {
        expect.extend([id(l), id(l)]);
    }
    assert_eq!(fcs, expect);
    // The trace labels are the model names.
    let json = s.trace_json();
    assert!(json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["args"]["model"] == "M1a"));
}

#[test]
fn core_masks_bind_tasks_and_do_not_block_others() {
    let g = Gates::new();
    let s = sched_with(2, 0, |_| {});
    g.gate("X1", 0, 0);
    // X1 holds core 1.
    let x1 = submit(&s, &body("X1", &g, &[S::B(&[10])]), ctrl(0, 0, 0b10));
    g.wait_started("X1", 0, 0);
    // T is bound to core 1: it waits although core 0 is free.
    let t = submit(&s, &body("T", &g, &[S::B(&[10, 10])]), ctrl(9, 0, 0b10));
    assert_eq!(t.status(), TaskStatus::Queued);
    // U (lower priority, any core) may take core 0: T cannot use it.
    g.gate("U", 0, 0);
    let u = submit(&s, &body("U", &g, &[S::B(&[10])]), ctrl(1, 0, 0));
    assert_eq!(u.status(), TaskStatus::Running);
    g.wait_started("U", 0, 0);
    // More core-1 tasks and any-core tasks.
    let mut bound = vec![t.clone()];
    let mut any = vec![];
    for i in 0..4 {
        bound.push(submit(
            &s,
            &body(&format!("b{i}"), &g, &[S::B(&[10, 10])]),
            ctrl(3, 0, 0b10),
        ));
        any.push(submit(
            &s,
            &body(&format!("a{i}"), &g, &[S::B(&[10])]),
            ctrl(3, 0, 0),
        ));
    }
    g.open("X1", 0, 0);
    g.open("U", 0, 0);
    for h in bound.iter().chain(any.iter()).chain([&x1, &u]) {
        h.wait(None).unwrap();
    }
    let ev = s.trace_events();
    for h in bound.iter().chain([&x1]) {
        for e in ev
            .iter()
            .filter(|e| e.task == h.id() && e.kind == TraceKind::FcStart)
        {
            assert_eq!(e.core, Some(1), "task {} ran on core {:?}", h.id(), e.core);
        }
    }
    assert_eq!(
        ev.iter()
            .find(|e| e.task == u.id() && e.kind == TraceKind::FcStart)
            .and_then(|e| e.core),
        Some(0)
    );
    // A mask naming a core that does not exist is rejected.
    let err = s
        .submit(body("bad", &g, &[S::B(&[1])]), ctrl(0, 0, 0b100))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

/// One core, corelimit `limit`: a normal task N with 4 gated FCs runs; a priority-255 task
/// H (2 FCs) arrives while N's FC 0 runs. Returns the number of N's FCs before H's first.
fn normal_fcs_before_high(limit: usize) -> usize {
    let g = Gates::new();
    let s = sched_with(1, limit, |_| {});
    for fc in 0..4 {
        g.gate("N", 0, fc);
    }
    let n = submit(&s, &body("N", &g, &[S::B(&[1000; 4])]), ctrl(0, 0, 0));
    g.wait_started("N", 0, 0);
    let h = submit(&s, &body("H", &g, &[S::B(&[1000, 1000])]), ctrl(255, 0, 0));
    assert_eq!(
        h.status(),
        TaskStatus::Running,
        "255 tasks skip the library queue"
    );
    for fc in 0..4 {
        g.open("N", 0, fc);
        if fc < 3 {
            g.wait_started("N", 0, fc + 1);
        }
    }
    h.wait(None).unwrap();
    n.wait(None).unwrap();
    let ev = s.trace_events();
    let order: Vec<(u64, u32)> = of_kind(&ev, TraceKind::FcStart)
        .iter()
        .map(|e| (e.0, e.3))
        .collect();
    let first_h = order.iter().position(|e| e.0 == h.id()).unwrap();
    // H's FCs are consecutive: nothing overtakes a high FC once it is next.
    assert_eq!(order[first_h + 1], (h.id(), 1));
    order[..first_h].iter().filter(|e| e.0 == n.id()).count()
}

#[test]
fn corelimit_bounds_how_many_normal_fcs_a_high_task_waits_for() {
    assert_eq!(normal_fcs_before_high(0), 4, "corelimit 0: no preemption");
    assert_eq!(normal_fcs_before_high(1), 1);
    assert_eq!(normal_fcs_before_high(2), 2);
    assert_eq!(normal_fcs_before_high(3), 3);
}

#[test]
fn high_priority_tasks_never_preempt_each_other() {
    let g = Gates::new();
    let s = sched_with(1, 1, |_| {});
    g.gate("H1", 0, 0);
    let h1 = submit(
        &s,
        &body("H1", &g, &[S::B(&[10, 10, 10])]),
        ctrl(255, 50, 0),
    );
    g.wait_started("H1", 0, 0);
    let n = submit(&s, &body("N", &g, &[S::B(&[10])]), ctrl(254, 0, 0));
    let h2 = submit(&s, &body("H2", &g, &[S::B(&[10])]), ctrl(255, -50, 0));
    g.open("H1", 0, 0);
    for h in [&h1, &h2, &n] {
        h.wait(None).unwrap();
    }
    let ev = s.trace_events();
    let order: Vec<(u64, u32)> = of_kind(&ev, TraceKind::FcStart)
        .iter()
        .map(|e| (e.0, e.3))
        .collect();
    assert_eq!(
        order,
        vec![
            (h1.id(), 0),
            (h1.id(), 1),
            (h1.id(), 2),
            (h2.id(), 0),
            (n.id(), 0)
        ]
    );
}

#[test]
fn high_priority_task_skips_the_queue_and_picks_the_soonest_core() {
    let g = Gates::new();
    let s = sched_with(2, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[5000])]), ctrl(0, 0, 0b01));
    g.wait_started("X", 0, 0);
    // Any core: core 1 is idle, so it starts there.
    let h = submit(&s, &body("H", &g, &[S::B(&[10])]), ctrl(255, 0, 0));
    h.wait(None).unwrap();
    // Bound to busy core 0 while a normal task waits in the queue for it: the 255 task
    // does not wait in the library queue, its FC runs right after X's.
    let q = submit(&s, &body("Q", &g, &[S::B(&[10])]), ctrl(200, 0, 0b01));
    let h0 = submit(&s, &body("H0", &g, &[S::B(&[10])]), ctrl(255, 0, 0b01));
    assert_eq!(q.status(), TaskStatus::Queued);
    g.open("X", 0, 0);
    for t in [&x, &q, &h0] {
        t.wait(None).unwrap();
    }
    let ev = s.trace_events();
    let core_of = |id: u64| {
        ev.iter()
            .find(|e| e.task == id && e.kind == TraceKind::FcStart)
            .and_then(|e| e.core)
    };
    assert_eq!(core_of(h.id()), Some(1));
    assert_eq!(core_of(h0.id()), Some(0));
    assert!(pos(&ev, TraceKind::FcStart, h0.id()) < pos(&ev, TraceKind::FcStart, q.id()));
    assert!(pos(&ev, TraceKind::Dequeue, h0.id()) < pos(&ev, TraceKind::Dequeue, q.id()));
}

#[test]
fn a_high_segment_waiting_on_a_busy_core_moves_to_the_core_whose_fc_ends_first() {
    let g = Gates::new();
    let s = sched_with(2, 1, |_| {});
    // X on core 0 is past its 10 us estimate (it looks about to end); Y's first FC on
    // core 1 has 5000 us of estimate left: the 255 task goes to core 0.
    g.gate("X", 0, 0);
    g.gate("Y", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0b01));
    let y = submit(&s, &body("Y", &g, &[S::B(&[5000, 5000])]), ctrl(0, 0, 0b10));
    g.wait_started("X", 0, 0);
    g.wait_started("Y", 0, 0);
    let h = submit(&s, &body("H", &g, &[S::B(&[10, 10])]), ctrl(255, 0, 0));
    // X keeps core 0 (as a core thread the host does not run would); Y's FC ends on
    // core 1, which takes H's segment before Y's next FC.
    g.open("Y", 0, 0);
    y.wait(None).unwrap();
    assert_eq!(h.status(), TaskStatus::Done, "H waited for X's core");
    g.open("X", 0, 0);
    for t in [&x, &h] {
        t.wait(None).unwrap();
    }
    let ev = s.trace_events();
    let starts: Vec<_> = of_kind(&ev, TraceKind::FcStart)
        .into_iter()
        .filter(|e| e.1 == Some(1))
        .map(|(id, _, _, fc)| (id, fc))
        .collect();
    assert_eq!(
        starts,
        [(y.id(), 0), (h.id(), 0), (h.id(), 1), (y.id(), 1)],
        "core 1's FCs in order"
    );
    let moves: Vec<_> = ev
        .iter()
        .filter(|e| e.kind == TraceKind::Move)
        .map(|e| (e.task, e.core, e.status))
        .collect();
    assert_eq!(
        moves,
        [(h.id(), Some(1), 0)],
        "H's segment moved from core 0 to 1"
    );
}

/// One core. A = [BPU, CPU (gated), BPU]; B = [BPU] submitted during A's middle CPU
/// segment. Returns the insertion reason if B was inserted.
fn insertion_case(
    f: impl FnOnce(&mut SchedConfig),
    cpu_a: u64,
    next_bpu_a: u64,
    bpu_b: u64,
) -> Option<InsertReason> {
    let g = Gates::new();
    let s = sched_with(1, 0, f);
    g.gate("A", 1, 0);
    let a = submit(
        &s,
        &body("A", &g, &[S::B(&[100]), S::C(cpu_a), S::B(&[next_bpu_a])]),
        ctrl(0, 0, 0),
    );
    g.wait_started("A", 1, 0);
    let b = submit(&s, &body("B", &g, &[S::B(&[bpu_b])]), ctrl(0, 0, 0));
    let inserted = b.status() != TaskStatus::Queued;
    if inserted {
        // B runs to its end while A is still in its CPU segment.
        b.wait(None).unwrap();
    }
    g.open("A", 1, 0);
    a.wait(None).unwrap();
    b.wait(None).unwrap();
    let ev = s.trace_events();
    let a_cpu_end = ev
        .iter()
        .position(|e| e.task == a.id() && e.kind == TraceKind::SegmentEnd && e.seg == 1)
        .unwrap();
    if inserted {
        assert!(pos(&ev, TraceKind::Done, b.id()) < a_cpu_end);
        let ins = &ev[pos(&ev, TraceKind::Insert, b.id())];
        assert_eq!(ins.core, Some(0));
        InsertReason::from_code(ins.status)
    } else {
        assert!(!ev.iter().any(|e| e.kind == TraceKind::Insert));
        assert!(pos(&ev, TraceKind::Done, a.id()) < pos(&ev, TraceKind::Dequeue, b.id()));
        None
    }
}

#[test]
fn insertion_by_schedule_threshold() {
    let on = |c: &mut SchedConfig| c.bpu_schedule_threshold_pct = 10;
    // (14 ms - 5 ms) / 100 ms = 9 % < 10 %.
    assert_eq!(
        insertion_case(on, 5_000, 100_000, 14_000),
        Some(InsertReason::Threshold)
    );
    // 15 % is not.
    assert_eq!(insertion_case(on, 5_000, 100_000, 20_000), None);
    assert_eq!(insertion_case(|_| {}, 5_000, 100_000, 14_000), None);
}

#[test]
fn insertion_by_insert_fc_max_time() {
    let on = |c: &mut SchedConfig| c.insert_fc_max_time_ms = 2;
    assert_eq!(
        insertion_case(on, 100, 1_000, 1_999),
        Some(InsertReason::FcMaxTime)
    );
    assert_eq!(insertion_case(on, 100, 1_000, 2_000), None);
    assert_eq!(insertion_case(|_| {}, 100, 1_000, 1_999), None);
}

#[test]
fn insertion_by_wait_dispatch_time() {
    let on = |c: &mut SchedConfig| c.wait_dispatch_time_ms = 1;
    assert_eq!(
        insertion_case(on, 1_001, 1_000, 50_000),
        Some(InsertReason::WaitDispatch)
    );
    assert_eq!(insertion_case(on, 1_000, 1_000, 50_000), None);
    assert_eq!(insertion_case(|_| {}, 1_001, 1_000, 50_000), None);
}

#[test]
fn insertion_with_default_settings_admits_a_short_task() {
    assert_eq!(
        insertion_case(
            |c| *c = SchedConfig {
                cores: 1,
                cpu_threads: 4,
                ..SchedConfig::default()
            },
            100,
            1_000,
            50_000
        ),
        Some(InsertReason::FcMaxTime)
    );
}

#[test]
fn queued_tasks_are_inserted_in_queue_order_one_at_a_time_when_the_holder_enters_its_middle_cpu_segment(
) {
    let g = Gates::new();
    let s = sched_with(1, 0, |c| c.insert_fc_max_time_ms = 1000);
    g.gate("A", 0, 0);
    g.gate("A", 1, 0);
    g.gate("C", 0, 0);
    let a = submit(
        &s,
        &body("A", &g, &[S::B(&[100]), S::C(100), S::B(&[100])]),
        ctrl(0, 0, 0),
    );
    g.wait_started("A", 0, 0);
    let b = submit(&s, &body("B", &g, &[S::B(&[100])]), ctrl(0, 0, 0));
    let c = submit(&s, &body("C", &g, &[S::B(&[100])]), ctrl(7, 0, 0));
    assert_eq!(b.status(), TaskStatus::Queued);
    // A's FC ends and A enters its middle CPU segment: C (priority 7, ahead of B) is
    // inserted; B waits while C runs, then is inserted in turn.
    g.open("A", 0, 0);
    g.wait_started("C", 0, 0);
    assert_eq!(b.status(), TaskStatus::Queued);
    g.open("C", 0, 0);
    b.wait(None).unwrap();
    g.open("A", 1, 0);
    a.wait(None).unwrap();
    c.wait(None).unwrap();
    let ev = s.trace_events();
    let a_cpu_end = ev
        .iter()
        .position(|e| e.task == a.id() && e.kind == TraceKind::SegmentEnd && e.seg == 1)
        .unwrap();
    assert!(pos(&ev, TraceKind::Insert, c.id()) < pos(&ev, TraceKind::Done, c.id()));
    assert!(pos(&ev, TraceKind::Done, c.id()) < pos(&ev, TraceKind::Insert, b.id()));
    assert!(pos(&ev, TraceKind::Done, b.id()) < a_cpu_end);
}

#[test]
fn a_waiting_task_that_fails_the_insertion_conditions_blocks_insertion_of_lower_ones() {
    let g = Gates::new();
    let s = sched_with(1, 0, |c| c.insert_fc_max_time_ms = 2);
    g.gate("A", 1, 0);
    let a = submit(
        &s,
        &body("A", &g, &[S::B(&[100]), S::C(100), S::B(&[100])]),
        ctrl(0, 0, 0),
    );
    g.wait_started("A", 1, 0);
    // H is next for the core but too long to insert (5 ms >= 2 ms); L would qualify but
    // must not jump ahead of H.
    let h = submit(&s, &body("H", &g, &[S::B(&[5_000])]), ctrl(9, 0, 0));
    let l = submit(&s, &body("L", &g, &[S::B(&[100])]), ctrl(1, 0, 0));
    assert_eq!(h.status(), TaskStatus::Queued);
    assert_eq!(l.status(), TaskStatus::Queued);
    g.open("A", 1, 0);
    for t in [&a, &h, &l] {
        t.wait(None).unwrap();
    }
    let ev = s.trace_events();
    assert!(!ev.iter().any(|e| e.kind == TraceKind::Insert));
    assert!(pos(&ev, TraceKind::Done, a.id()) < pos(&ev, TraceKind::Dequeue, h.id()));
    assert!(pos(&ev, TraceKind::Dequeue, h.id()) < pos(&ev, TraceKind::Dequeue, l.id()));
}

#[test]
fn only_middle_cpu_segments_hold_the_core_leading_and_trailing_ones_run_without_it() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    for step in [0, 2, 4] {
        g.gate("A", step, 0);
    }
    let a = submit(
        &s,
        &body(
            "A",
            &g,
            &[S::C(10), S::B(&[10, 10]), S::C(10), S::B(&[10]), S::C(10)],
        ),
        ctrl(0, 0, 0),
    );
    // Leading CPU segment: A holds no core, so a later pure-BPU task runs all its FCs.
    g.wait_started("A", 0, 0);
    let b1 = submit(&s, &body("B1", &g, &[S::B(&[10, 10])]), ctrl(0, 0, 0));
    b1.wait(None).unwrap();
    assert_eq!(a.status(), TaskStatus::Running);
    g.open("A", 0, 0);
    // Middle CPU segment: A keeps the core (insertion is off here).
    g.wait_started("A", 2, 0);
    let b2 = submit(&s, &body("B2", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    assert_eq!(
        b2.status(),
        TaskStatus::Queued,
        "A holds the core in its middle CPU segment"
    );
    g.open("A", 2, 0);
    // Trailing CPU segment: A left the core after its last FC; B2 runs meanwhile.
    g.wait_started("A", 4, 0);
    b2.wait(None).unwrap();
    assert_eq!(a.status(), TaskStatus::Running);
    g.open("A", 4, 0);
    a.wait(None).unwrap();
    let ev = s.trace_events();
    let segs: Vec<(TraceKind, u32, Option<usize>)> = ev
        .iter()
        .filter(|e| {
            e.task == a.id() && matches!(e.kind, TraceKind::SegmentStart | TraceKind::SegmentEnd)
        })
        .map(|e| (e.kind, e.seg, e.core))
        .collect();
    use TraceKind::{SegmentEnd as E, SegmentStart as St};
    assert_eq!(
        segs,
        vec![
            (St, 0, None),
            (E, 0, None),
            (St, 1, Some(0)),
            (E, 1, Some(0)),
            (St, 2, None),
            (E, 2, None),
            (St, 3, Some(0)),
            (E, 3, Some(0)),
            (St, 4, None),
            (E, 4, None),
        ]
    );
    let at = |kind: TraceKind, task: u64, seg: u32| {
        ev.iter()
            .position(|e| e.kind == kind && e.task == task && e.seg == seg)
            .unwrap_or_else(|| panic!("no {kind:?} s{seg} of task {task}"))
    };
    // B1 ran entirely inside A's leading CPU segment; A took the core only after it.
    assert!(at(TraceKind::SegmentStart, a.id(), 0) < pos(&ev, TraceKind::Dequeue, b1.id()));
    assert!(pos(&ev, TraceKind::Done, b1.id()) < at(TraceKind::SegmentEnd, a.id(), 0));
    let a_dequeue = pos(&ev, TraceKind::Dequeue, a.id());
    assert!(at(TraceKind::SegmentEnd, a.id(), 0) < a_dequeue);
    assert_eq!(ev[a_dequeue].core, Some(0));
    // A left the core at the end of its last BPU segment; B2 took it then and ended
    // inside A's trailing CPU segment.
    let leave = pos(&ev, TraceKind::Leave, a.id());
    assert_eq!(ev[leave].core, Some(0));
    assert!(at(TraceKind::SegmentEnd, a.id(), 3) < leave);
    assert!(leave < pos(&ev, TraceKind::Dequeue, b2.id()));
    assert!(pos(&ev, TraceKind::Done, b2.id()) < at(TraceKind::SegmentEnd, a.id(), 4));
    assert!(!ev.iter().any(|e| e.kind == TraceKind::Insert));
    assert_eq!(a.timings().segments.len(), 5);
    assert_eq!(a.status(), TaskStatus::Done);
}

#[test]
fn a_task_queued_after_its_leading_cpu_segment_keeps_its_queue_order() {
    // One core busy with X; A (priority 5, leading CPU) and L (priority 1) wait for it:
    // A joins the queue when its CPU segment ends and still goes before L.
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    g.wait_started("X", 0, 0);
    let l = submit(&s, &body("L", &g, &[S::B(&[10])]), ctrl(1, 0, 0));
    let a = submit(&s, &body("A", &g, &[S::C(10), S::B(&[10])]), ctrl(5, 0, 0));
    let ev_a_cpu_done = || {
        s.trace_events()
            .iter()
            .any(|e| e.kind == TraceKind::SegmentEnd && e.task == a.id())
    };
    g.wait_started("A", 0, 0);
    while !ev_a_cpu_done() {
        std::thread::yield_now();
    }
    g.open("X", 0, 0);
    for h in [&x, &l, &a] {
        h.wait(None).unwrap();
    }
    let ev = s.trace_events();
    assert!(pos(&ev, TraceKind::Dequeue, a.id()) < pos(&ev, TraceKind::Dequeue, l.id()));
}

#[test]
fn multi_model_task_runs_all_segments_in_order_and_its_inner_cpu_segments_are_middle() {
    let g = Gates::new();
    let s = sched_with(1, 0, |c| c.insert_fc_max_time_ms = 1000);
    let mut segs_all = segs(&[S::B(&[10, 10]), S::C(10)]);
    segs_all.extend(segs(&[S::C(10), S::B(&[10])]));
    let m = std::sync::Arc::new(TestBody {
        label: "m1+m2".into(),
        segs: segs_all,
        gates: g.clone(),
        fail: None,
    });
    g.gate("m1+m2", 2, 0);
    let t = submit(&s, &m, ctrl(0, 0, 0));
    // Segment 2 is the second model's leading CPU segment: inside the task, a middle one.
    g.wait_started("m1+m2", 2, 0);
    let b = submit(&s, &body("B", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    b.wait(None).unwrap();
    g.open("m1+m2", 2, 0);
    t.wait(None).unwrap();
    let ev = s.trace_events();
    let starts: Vec<u32> = ev
        .iter()
        .filter(|e| e.task == t.id() && e.kind == TraceKind::SegmentStart)
        .map(|e| e.seg)
        .collect();
    assert_eq!(starts, vec![0, 1, 2, 3]);
    assert!(ev
        .iter()
        .any(|e| e.kind == TraceKind::Insert && e.task == b.id()));
    let steps = g.started();
    let mine: Vec<(usize, usize)> = steps
        .iter()
        .filter(|s| s.0 == "m1+m2")
        .map(|s| (s.1, s.2))
        .collect();
    assert_eq!(mine, vec![(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]);
}

/// Host priority classes (issue 13 item 3): an FC runs on its core's low-class thread
/// exactly when a task of higher priority is live at its start, and FC order is unchanged.
#[test]
fn fcs_below_the_highest_live_priority_run_in_the_low_host_class() {
    use vnpu::sched::HostPriority;
    for mode in [HostPriority::Idle, HostPriority::Nice, HostPriority::Off] {
        let g = Gates::new();
        let s = sched_with(2, 1, |c| {
            c.host_priority = mode;
            c.priority_hold_ms = 0;
        });
        g.gate("L", 0, 0);
        g.gate("L", 0, 1);
        g.gate("H", 0, 0);
        let l = submit(
            &s,
            &body("L", &g, &[S::B(&[10, 10, 10, 10])]),
            ctrl(0, 0, 1),
        );
        g.wait_started("L", 0, 0);
        let h = submit(&s, &body("H", &g, &[S::B(&[10, 10])]), ctrl(200, 0, 2));
        g.wait_started("H", 0, 0);
        g.open("L", 0, 0);
        // L's second FC starts while H (priority 200) is live: the low class.
        g.wait_started("L", 0, 1);
        g.open("H", 0, 0);
        g.open("L", 0, 1);
        l.wait(None).unwrap();
        h.wait(None).unwrap();
        let ev = s.trace_events();
        let (h_in, h_out) = (
            pos(&ev, TraceKind::Submit, h.id()),
            pos(&ev, TraceKind::Done, h.id()),
        );
        let class = |task: u64, fc: u32| {
            ev.iter()
                .find(|e| e.kind == TraceKind::FcStart && e.task == task && e.fc == fc)
                .map(|e| e.status)
                .expect("FcStart recorded")
        };
        let off = mode == HostPriority::Off;
        assert_eq!(
            class(l.id(), 0),
            0,
            "{mode:?}: L fc0 started before H existed"
        );
        assert_eq!(class(l.id(), 1), if off { 0 } else { 1 }, "{mode:?}");
        for (i, e) in ev.iter().enumerate() {
            if e.kind != TraceKind::FcStart {
                continue;
            }
            let h_live = i > h_in && i < h_out;
            let want = if e.task == l.id() && h_live && !off {
                1
            } else {
                0
            };
            assert_eq!(
                e.status, want,
                "{mode:?}: FcStart of task {} fc {}",
                e.task, e.fc
            );
        }
        // The FCs of each task still run in order, one core each.
        let l_fcs: Vec<u32> = of_kind(&ev, TraceKind::FcStart)
            .iter()
            .filter(|e| e.0 == l.id())
            .map(|e| e.3)
            .collect();
        assert_eq!(l_fcs, vec![0, 1, 2, 3]);
    }
}

#[test]
fn a_priority_keeps_the_top_class_for_the_hold_after_its_last_task_ended() {
    // hold (ms) -> the class of a priority-0 task's FCs after a priority-200 task ended.
    // 600 s cannot run out during the test; 0 = only while the higher task is live.
    for (hold, want_low) in [(600_000u64, 1), (0, 0)] {
        let g = Gates::new();
        let s = sched_with(2, 1, |c| c.priority_hold_ms = hold);
        let h = submit(&s, &body("H", &g, &[S::B(&[10, 10])]), ctrl(200, 0, 1));
        h.wait(None).unwrap();
        let l = submit(&s, &body("L", &g, &[S::B(&[10, 10, 10])]), ctrl(0, 0, 2));
        l.wait(None).unwrap();
        // A task of the held priority (or higher) is top whatever the hold.
        let h2 = submit(&s, &body("H2", &g, &[S::B(&[10])]), ctrl(200, 0, 3));
        h2.wait(None).unwrap();
        let ev = s.trace_events();
        let classes = |task: u64| -> Vec<i32> {
            ev.iter()
                .filter(|e| e.kind == TraceKind::FcStart && e.task == task)
                .map(|e| e.status)
                .collect()
        };
        assert_eq!(classes(h.id()), vec![0, 0], "hold {hold}");
        assert_eq!(classes(l.id()), vec![want_low; 3], "hold {hold}");
        assert_eq!(classes(h2.id()), vec![0], "hold {hold}");
    }
}

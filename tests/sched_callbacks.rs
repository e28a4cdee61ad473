//! Done callbacks through the scheduler (protocol step 6) and the task limit with reserved
//! slots: waiting on the callback's own task, submitting and waiting from a callback,
//! release against a running callback, a callback firing once, and slots of tasks being
//! assembled. Order only, never wall time; a wait over a minute is a deadlock diagnostic.

mod sched_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use sched_support::*;
use vnpu::error::codes;
use vnpu::sched::{TaskHandle, TaskStatus, TraceKind};
use vnpu::Error;

const DEADLOCK: Option<Duration> = Some(Duration::from_secs(60));

/// A one-shot flag a test can wait on.
#[derive(Default)]
struct Flag(Mutex<bool>, Condvar);

impl Flag {
    fn set(&self) {
        *self.0.lock() = true;
        self.1.notify_all();
    }
    fn wait(&self) {
        let mut g = self.0.lock();
        while !*g {
            assert!(
                !self.1.wait_for(&mut g, DEADLOCK.unwrap()).timed_out(),
                "deadlock: flag never set"
            );
        }
    }
}

#[test]
fn waiting_on_its_own_task_inside_the_callback_returns_the_final_status_at_once() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    g.gate("ok", 0, 0);
    let ok = submit(&s, &body("ok", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let bad = s
        .submit(
            Arc::new(TestBody {
                label: "bad".into(),
                segs: segs(&[S::B(&[10])]),
                gates: g.clone(),
                fail: Some((0, 0, Fail::Err)),
            }),
            ctrl(0, 0, 0),
        )
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for h in [&ok, &bad] {
        let (me, seen) = (h.clone(), seen.clone());
        h.set_done_callback(Box::new(move |code| {
            let r = me.wait(None).map_err(|e| e.code());
            seen.lock().push((me.id(), code, r));
        }));
    }
    g.open("ok", 0, 0);
    ok.wait(DEADLOCK).unwrap();
    let err = bad.wait(DEADLOCK).unwrap_err();
    let seen = seen.lock();
    assert!(seen.contains(&(ok.id(), 0, Ok(()))), "{seen:?}");
    assert!(
        seen.contains(&(bad.id(), err.code(), Err(err.code()))),
        "{seen:?}"
    );
}

fn callback_submits_and_waits(priority: u8) {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    // X cannot end before its callback is registered.
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let inner: Arc<Mutex<Option<TaskHandle>>> = Arc::default();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (s2, g2, inner2, log2) = (s.clone(), g.clone(), inner.clone(), log.clone());
    x.set_done_callback(Box::new(move |_| {
        let y = s2
            .submit(body("Y", &g2, &[S::B(&[10, 10])]), ctrl(priority, 0, 0))
            .expect("submit from a callback");
        // Y has a callback of its own: it must run although X's callback still waits.
        let l3 = log2.clone();
        y.set_done_callback(Box::new(move |_| l3.lock().push("Y callback".into())));
        y.wait(DEADLOCK).expect("Y runs while X's callback waits");
        log2.lock().push("X callback saw Y done".into());
        *inner2.lock() = Some(y);
    }));
    g.open("X", 0, 0);
    x.wait(DEADLOCK).unwrap();
    assert_eq!(
        *log.lock(),
        vec!["Y callback".to_string(), "X callback saw Y done".into()]
    );
    let y = inner.lock().take().expect("Y submitted");
    assert_eq!(y.status(), TaskStatus::Done);
    let ev = s.trace_events();
    assert!(pos(&ev, TraceKind::Done, x.id()) < pos(&ev, TraceKind::Submit, y.id()));
    assert_eq!(
        of_kind(&ev, TraceKind::FcEnd)
            .iter()
            .filter(|e| e.0 == y.id())
            .count(),
        2
    );
}

#[test]
fn a_callback_may_submit_a_task_and_wait_for_it() {
    callback_submits_and_waits(0);
    callback_submits_and_waits(255);
}

#[test]
fn release_from_another_thread_waits_for_a_running_callback() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    // X cannot end before its callback is registered.
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let entered = Arc::new(Flag::default());
    let proceed = Arc::new(Flag::default());
    let log = Arc::new(Mutex::new(Vec::<&str>::new()));
    let (e2, p2, l2) = (entered.clone(), proceed.clone(), log.clone());
    x.set_done_callback(Box::new(move |_| {
        l2.lock().push("callback entered");
        e2.set();
        p2.wait();
        l2.lock().push("callback returned");
    }));
    g.open("X", 0, 0);
    entered.wait();
    std::thread::scope(|sc| {
        let releaser = sc.spawn(|| {
            x.release().unwrap();
            log.lock().push("release returned");
        });
        while !x.is_released() {
            std::thread::yield_now();
        }
        proceed.set();
        releaser.join().unwrap();
    });
    assert_eq!(
        *log.lock(),
        vec!["callback entered", "callback returned", "release returned"]
    );
    assert_eq!(s.live_tasks(), 0);
}

#[test]
fn release_from_inside_its_own_callback_returns_at_once() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    // X cannot end before its callback is registered.
    g.gate("X", 0, 0);
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    let released = Arc::new(Mutex::new(None));
    let (me, r2) = (x.clone(), released.clone());
    x.set_done_callback(Box::new(move |_| {
        *r2.lock() = Some(me.release().map_err(|e| e.code()));
    }));
    g.open("X", 0, 0);
    x.wait(DEADLOCK).unwrap();
    assert_eq!(*released.lock(), Some(Ok(())));
    assert_eq!(s.live_tasks(), 0);
    assert!(matches!(x.release(), Err(Error::InvalidTaskHandle(_))));
}

#[test]
fn a_callback_registered_after_completion_fires_once() {
    let g = Gates::new();
    let s = sched_with(1, 0, |_| {});
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    x.wait(DEADLOCK).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    for expect in [true, false, false] {
        let f = fired.clone();
        let registered = x.set_done_callback(Box::new(move |code| {
            assert_eq!(code, 0);
            f.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(registered, expect);
    }
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn reserved_slots_count_against_the_task_limit() {
    let g = Gates::new();
    let s = sched_with(1, 0, |c| c.max_tasks = 2);
    let slot = s.reserve().unwrap();
    let x = submit(&s, &body("X", &g, &[S::B(&[10])]), ctrl(0, 0, 0));
    assert_eq!(s.live_tasks(), 2);
    let err = s
        .submit(body("Y", &g, &[S::B(&[10])]), ctrl(0, 0, 0))
        .unwrap_err();
    assert_eq!(err.code(), codes::HB_DNN_TASK_NUM_EXCEED_LIMIT);
    assert!(matches!(s.reserve(), Err(Error::TaskLimit { limit: 2 })));
    // Submitting into the slot uses it; the task then counts until released.
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let y = s
        .submit_reserved(
            body("Y", &g, &[S::B(&[10])]),
            ctrl(0, 0, 0),
            slot,
            Some(Box::new(move |_| {
                f.fetch_add(1, Ordering::SeqCst);
            })),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(s.live_tasks(), 2);
    y.wait(DEADLOCK).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    x.wait(DEADLOCK).unwrap();
    x.release().unwrap();
    y.release().unwrap();
    assert_eq!(s.live_tasks(), 0);
    // A dropped slot is returned.
    let slot = s.reserve().unwrap();
    assert_eq!(s.live_tasks(), 1);
    drop(slot);
    assert_eq!(s.live_tasks(), 0);
    // A failed submission hands the slot back, still counted.
    let slot = s.reserve().unwrap();
    let (err, slot) = s
        .submit_reserved(body("Z", &g, &[S::B(&[])]), ctrl(0, 0, 0), slot, None)
        .unwrap_err();
    assert_eq!(err.code(), codes::HB_DNN_INVALID_ARGUMENT);
    assert_eq!(s.live_tasks(), 1);
    drop(slot);
    assert_eq!(s.live_tasks(), 0);
}

//! Many tasks from several threads with mixed priorities, masks and segment shapes:
//! checks the scheduling invariants on the recorded trace (order only, never time).

mod sched_support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sched_support::*;
use vnpu::sched::{SegmentInfo, TaskBody, TaskCtrl, TraceKind};

/// A body that checks its own FCs never overlap and run in order.
struct Checked {
    label: String,
    segs: Vec<SegmentInfo>,
    busy: AtomicBool,
    next: Mutex<(usize, usize)>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Checked {
    fn enter(&self, seg: usize, fc: usize) {
        if self.busy.swap(true, Ordering::AcqRel) {
            self.violations
                .lock()
                .push(format!("{}: concurrent step at s{seg} fc{fc}", self.label));
        }
        let mut n = self.next.lock();
        if *n != (seg, fc) {
            self.violations.lock().push(format!(
                "{}: ran s{seg} fc{fc}, expected {:?}",
                self.label, *n
            ));
        }
        let nfc = self.segs[seg].fc_est_us.len();
        *n = if fc + 1 < nfc {
            (seg, fc + 1)
        } else {
            (seg + 1, 0)
        };
        for _ in 0..200 {
            std::hint::spin_loop();
        }
        self.busy.store(false, Ordering::Release);
    }
}

impl TaskBody for Checked {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segs
    }
    fn run_cpu_segment(&self, seg: usize) -> vnpu::Result<()> {
        self.enter(seg, 0);
        Ok(())
    }
    fn run_fc(&self, seg: usize, fc: usize) -> vnpu::Result<()> {
        self.enter(seg, fc);
        Ok(())
    }
    fn label(&self) -> &str {
        &self.label
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn concurrent_mixed_load_keeps_every_invariant() {
    // (corelimit, insertion allowed)
    for (limit, insertion) in [(0usize, false), (1, false), (2, false), (1, true)] {
        let s = sched_with(3, limit, |c| {
            c.max_tasks = 64;
            if insertion {
                c.insert_fc_max_time_ms = 1000;
            }
        });
        let violations = Arc::new(Mutex::new(Vec::new()));
        let masks: Arc<Mutex<HashMap<u64, (u32, u8)>>> = Arc::new(Mutex::new(HashMap::new()));
        std::thread::scope(|scope| {
            for th in 0..4u64 {
                let (s, violations, masks) = (&s, violations.clone(), masks.clone());
                scope.spawn(move || {
                    let mut rng = Lcg(th * 7919 + limit as u64);
                    let mut handles = Vec::new();
                    for i in 0..60 {
                        let shape = match rng.next(4) {
                            0 => vec![S::B(&[5, 5, 5])],
                            1 => vec![S::C(5), S::B(&[5, 5])],
                            2 => vec![S::B(&[5]), S::C(5), S::B(&[5, 5]), S::C(5)],
                            _ => vec![S::B(&[5]), S::B(&[5, 5])],
                        };
                        let priority = match rng.next(5) {
                            0 => 255,
                            p => (p * 50) as u8,
                        };
                        let core_mask = [0u32, 1, 2, 4, 6][rng.next(5) as usize];
                        let b = Arc::new(Checked {
                            label: format!("t{th}-{i}"),
                            segs: segs(&shape),
                            busy: AtomicBool::new(false),
                            next: Mutex::new((0, 0)),
                            violations: violations.clone(),
                        });
                        let h = s
                            .submit(
                                b,
                                TaskCtrl {
                                    core_mask,
                                    priority,
                                    custom_id: rng.next(3) as i64,
                                },
                            )
                            .expect("submit");
                        masks.lock().insert(h.id(), (core_mask, priority));
                        handles.push(h);
                        if handles.len() >= 8 {
                            let h = handles.remove(0);
                            h.wait(None).expect("task");
                            h.release().expect("release");
                        }
                    }
                    for h in handles {
                        h.wait(None).expect("task");
                        h.release().expect("release");
                    }
                });
            }
        });
        assert!(violations.lock().is_empty(), "{:?}", violations.lock());
        assert_eq!(s.live_tasks(), 0);
        let ev = s.trace_events();
        let masks = masks.lock();
        assert_eq!(ev.iter().filter(|e| e.kind == TraceKind::Done).count(), 240);
        let inserted = ev.iter().filter(|e| e.kind == TraceKind::Insert).count();
        if !insertion {
            assert_eq!(inserted, 0);
        }
        // FCs of one core never overlap; cores respect masks.
        let mut running: HashMap<usize, u64> = HashMap::new();
        // Normal tasks hold their core: their FCs on a core come in contiguous groups.
        let mut last_normal: HashMap<usize, u64> = HashMap::new();
        let mut finished_on: HashMap<usize, Vec<u64>> = HashMap::new();
        for e in &ev {
            match e.kind {
                TraceKind::FcStart => {
                    let core = e.core.expect("an FC has a core");
                    assert!(
                        running.insert(core, e.task).is_none(),
                        "overlap on core {core}"
                    );
                    let (mask, prio) = masks[&e.task];
                    assert!(
                        mask == 0 || mask & (1 << core) != 0,
                        "task outside its mask"
                    );
                    if prio != 255 && !insertion {
                        if let Some(prev) = last_normal.insert(core, e.task) {
                            if prev != e.task {
                                assert!(
                                    finished_on.get(&core).is_some_and(|v| v.contains(&prev)),
                                    "normal task {} interleaved with {prev} on core {core} (limit {limit})",
                                    e.task
                                );
                            }
                        }
                    }
                }
                TraceKind::FcEnd => {
                    let core = e.core.expect("an FC has a core");
                    assert_eq!(running.remove(&core), Some(e.task));
                }
                // A task frees its core when it ends, or before a trailing CPU segment.
                TraceKind::Done | TraceKind::Leave => {
                    if let Some(c) = e.core {
                        finished_on.entry(c).or_default().push(e.task);
                    }
                }
                _ => {}
            }
        }
    }
}

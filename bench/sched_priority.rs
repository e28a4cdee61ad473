//! Priority under load at the scheduler level (DESIGN §6.2 with synthetic work): a
//! background task of 40 FCs × 1000 µs (priority 0, resubmitted flat out) keeps one core
//! busy while a priority-255 task of 8 FCs × 1000 µs is requested every 30 ms, open loop
//! (latency counted from the scheduled time). Prints foreground p50/p99/max and background
//! throughput for BPLAT_CORELIMIT 0 and 1. FCs busy-wait, so run it on a quiet machine.
//! Run: `cargo bench --bench sched_priority` (add `-- --quick` for a short run).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::sched::{
    SchedConfig, Scheduler, SegmentInfo, SegmentKind, TaskBody, TaskCtrl, TraceEvent, TraceKind,
};

struct Spin {
    segs: Vec<SegmentInfo>,
    fc_us: u64,
    label: &'static str,
}

impl Spin {
    fn new(label: &'static str, model: u64, fcs: usize, fc_us: u64) -> Arc<Spin> {
        Arc::new(Spin {
            segs: vec![SegmentInfo {
                kind: SegmentKind::Bpu,
                fc_est_us: vec![fc_us; fcs],
                estimator_key: (model, 0),
            }],
            fc_us,
            label,
        })
    }
}

impl TaskBody for Spin {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segs
    }
    fn run_cpu_segment(&self, _: usize) -> vnpu::Result<()> {
        Ok(())
    }
    fn run_fc(&self, _: usize, _: usize) -> vnpu::Result<()> {
        let end = Instant::now() + Duration::from_micros(self.fc_us);
        while Instant::now() < end {
            std::hint::spin_loop();
        }
        Ok(())
    }
    fn label(&self) -> &str {
        self.label
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// For each foreground task: the normal FCs that started after its submission and before
/// its first FC (the FC running at submission is not counted). Returns the largest.
fn most_normal_fcs_ahead(ev: &[TraceEvent]) -> usize {
    let mut worst = 0;
    let mut waiting: Vec<(u64, usize)> = Vec::new();
    for e in ev {
        match e.kind {
            TraceKind::Submit if e.priority == 255 => waiting.push((e.task, 0)),
            TraceKind::FcStart if e.priority == 255 => {
                if let Some(i) = waiting.iter().position(|w| w.0 == e.task) {
                    worst = worst.max(waiting.remove(i).1);
                }
            }
            TraceKind::FcStart => {
                for w in waiting.iter_mut() {
                    w.1 += 1;
                }
            }
            _ => {}
        }
    }
    worst
}

struct Outcome {
    lat: Vec<Duration>,
    waits: Vec<Duration>,
    bg_per_s: f64,
    ahead: usize,
}

fn scenario(core_limit: usize, requests: usize) -> Outcome {
    let cfg = SchedConfig {
        cores: 1,
        cpu_threads: 1,
        core_limit,
        ..SchedConfig::default()
    };
    let sched = Scheduler::new(cfg).expect("scheduler");
    sched.trace_start();
    let stop = Arc::new(AtomicBool::new(false));
    let bg_done = Arc::new(AtomicUsize::new(0));
    let bg_body = Spin::new("background", 1, 40, 1000);
    let fg_body = Spin::new("foreground", 2, 8, 1000);
    let start = Instant::now();
    let mut lat = Vec::with_capacity(requests);
    let mut waits = Vec::with_capacity(requests);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (sched, stop, bg_done, body) = (&sched, &stop, &bg_done, bg_body.clone());
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let t = sched
                        .submit(body.clone(), TaskCtrl::default())
                        .expect("submit");
                    t.wait(None).expect("background");
                    t.release().expect("release");
                    bg_done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        for k in 0..requests {
            let due = t0 + Duration::from_millis(30 * k as u64);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            let ctrl = TaskCtrl {
                priority: 255,
                ..TaskCtrl::default()
            };
            let t = sched.submit(fg_body.clone(), ctrl).expect("submit");
            t.wait(None).expect("foreground");
            lat.push(due.elapsed());
            let seg = t.timings().segments[0];
            waits.push(seg.wall.saturating_sub(seg.busy));
            t.release().expect("release");
        }
        stop.store(true, Ordering::Relaxed);
    });
    let secs = start.elapsed().as_secs_f64();
    lat.sort();
    waits.sort();
    Outcome {
        lat,
        waits,
        bg_per_s: bg_done.load(Ordering::Relaxed) as f64 / secs,
        ahead: most_normal_fcs_ahead(&sched.trace_events()),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let requests = if quick { 30 } else { 150 };
    println!("priority under load: fg 8×1 ms FCs (prio 255) every 30 ms vs bg 40×1 ms FCs flat out, 1 core");
    println!(
        "(fg wait = time its FCs spent queued on the core; latency also counts thread wake-ups)"
    );
    println!("(normal FCs ahead = bg FCs started after a fg submission, before its first FC; bound = corelimit)");
    println!("| corelimit | fg p50 ms | fg p99 ms | fg max ms | fg wait p99 ms | normal FCs ahead (max) | bg tasks/s |");
    println!("|-----------|-----------|-----------|-----------|----------------|------------------------|------------|");
    for limit in [0usize, 1, 2] {
        let o = scenario(limit, requests);
        let p = |v: &[Duration], q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
        println!(
            "| {limit:>9} | {:>9.2} | {:>9.2} | {:>9.2} | {:>14.2} | {:>22} | {:>10.2} |",
            p(&o.lat, 0.5),
            p(&o.lat, 0.99),
            ms(o.lat[o.lat.len() - 1]),
            p(&o.waits, 0.99),
            o.ahead,
            o.bg_per_s
        );
    }
}

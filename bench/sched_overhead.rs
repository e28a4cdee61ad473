//! Scheduler overhead: round trip submit + wait of a trivial one-FC task (DESIGN §6.4).
//!
//! Prints the p50/p99 round trip in µs and the tasks per second of one submitting thread,
//! and the throughput with several tasks in flight. Goals: p50 ≤ 10 µs, ≥ 200k tasks/s.
//! Run: `cargo bench --bench sched_overhead` (add `-- --quick` for a short run).

use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::sched::{SchedConfig, Scheduler, SegmentInfo, SegmentKind, TaskBody, TaskCtrl};

struct Trivial(Vec<SegmentInfo>);

impl TaskBody for Trivial {
    fn segments(&self) -> &[SegmentInfo] {
        &self.0
    }
    fn run_cpu_segment(&self, _: usize) -> vnpu::Result<()> {
        Ok(())
    }
    fn run_fc(&self, _: usize, _: usize) -> vnpu::Result<()> {
        Ok(())
    }
    fn label(&self) -> &str {
        "trivial"
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: usize = if quick { 20_000 } else { 200_000 };
    let cfg = SchedConfig {
        cores: 2,
        cpu_threads: 1,
        max_tasks: 64,
        ..SchedConfig::from_env().expect("configuration")
    };
    let sched = Scheduler::new(cfg).expect("scheduler");
    let body: Arc<dyn TaskBody> = Arc::new(Trivial(vec![SegmentInfo {
        kind: SegmentKind::Bpu,
        fc_est_us: vec![1],
        estimator_key: (1, 0),
    }]));
    let ctrl = TaskCtrl::default();
    let run_one = || {
        let t = sched.submit(body.clone(), ctrl).expect("submit");
        t.wait(None).expect("wait");
        t.release().expect("release");
    };
    for _ in 0..n / 10 {
        run_one();
    }
    // 1. Round trip latency, one task at a time.
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        run_one();
        lat.push(t0.elapsed());
    }
    let total = start.elapsed();
    lat.sort();
    let serial_rate = n as f64 / total.as_secs_f64();
    // 2. Throughput with up to 32 tasks in flight.
    let window = 32usize;
    let start = Instant::now();
    let mut inflight = std::collections::VecDeque::with_capacity(window);
    for _ in 0..n {
        if inflight.len() == window {
            let t: vnpu::sched::TaskHandle = inflight.pop_front().expect("in flight");
            t.wait(None).expect("wait");
            t.release().expect("release");
        }
        inflight.push_back(sched.submit(body.clone(), ctrl).expect("submit"));
    }
    for t in inflight {
        t.wait(None).expect("wait");
        t.release().expect("release");
    }
    let pipelined_rate = n as f64 / start.elapsed().as_secs_f64();
    println!("scheduler overhead: trivial 1-FC task, {n} tasks, 2 cores");
    println!("| metric                         | value      | goal      |");
    println!("|--------------------------------|------------|-----------|");
    println!(
        "| round trip p50 (µs)            | {:>10.2} | ≤ 10      |",
        percentile(&lat, 0.50)
    );
    println!(
        "| round trip p99 (µs)            | {:>10.2} |           |",
        percentile(&lat, 0.99)
    );
    println!(
        "| tasks/s, one at a time         | {:>10.0} |           |",
        serial_rate
    );
    println!(
        "| tasks/s, {window} in flight          | {:>10.0} | ≥ 200000  |",
        pipelined_rate
    );
}

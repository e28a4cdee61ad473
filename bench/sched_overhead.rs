//! Scheduler overhead: round trip submit + wait of a trivial one-FC task (DESIGN §6.4).
//!
//! Prints the p50/p99 round trip in µs and the tasks per second of one submitting thread,
//! and the throughput with several tasks in flight. Goals: p50 ≤ 10 µs, ≥ 200k tasks/s.
//! Then the three wake-up paths of issue 13 item 4, each from timestamps taken inside the
//! FCs and by the waiter, for a 2-FC task: submit -> first FC starts, FC 0 ends -> FC 1
//! starts, last FC ends -> the waiter returns; back to back ("hot": threads still
//! polling) and with 2 ms idle between tasks ("cold": every thread asleep).
//! Run: `cargo bench --bench sched_overhead` (add `-- --quick` for a short run).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

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

/// A 2-FC task that records when each FC starts and ends.
struct Stamped {
    segs: Vec<SegmentInfo>,
    /// FC 0 start, FC 0 end, FC 1 start, FC 1 end.
    at: Mutex<[Option<Instant>; 4]>,
}

impl TaskBody for Stamped {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segs
    }
    fn run_cpu_segment(&self, _: usize) -> vnpu::Result<()> {
        Ok(())
    }
    fn run_fc(&self, _: usize, fc: usize) -> vnpu::Result<()> {
        let mut at = self.at.lock();
        at[2 * fc] = Some(Instant::now());
        // A few µs of work, like a tiny FC.
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(5) {
            std::hint::spin_loop();
        }
        at[2 * fc + 1] = Some(Instant::now());
        Ok(())
    }
    fn label(&self) -> &str {
        "stamped"
    }
}

/// Per task: (submit -> FC 0 start, FC 0 end -> FC 1 start, FC 1 end -> waiter woken).
fn wake_paths(sched: &Scheduler, n: usize, idle: Duration) -> [Vec<Duration>; 3] {
    let body = Arc::new(Stamped {
        segs: vec![SegmentInfo {
            kind: SegmentKind::Bpu,
            fc_est_us: vec![5, 5],
            estimator_key: (2, 0),
        }],
        at: Mutex::new([None; 4]),
    });
    let mut out: [Vec<Duration>; 3] = Default::default();
    for _ in 0..n {
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        *body.at.lock() = [None; 4];
        let t0 = Instant::now();
        let t = sched
            .submit(body.clone(), TaskCtrl::default())
            .expect("submit");
        t.wait(None).expect("wait");
        let woke = Instant::now();
        t.release().expect("release");
        let at = *body.at.lock();
        let [Some(s0), Some(e0), Some(s1), Some(e1)] = at else {
            continue;
        };
        out[0].push(s0.saturating_duration_since(t0));
        out[1].push(s1.saturating_duration_since(e0));
        out[2].push(woke.saturating_duration_since(e1));
    }
    for v in &mut out {
        v.sort();
    }
    out
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
    // 3. Round trip with tracing on (7 events per task).
    sched.trace_start();
    let mut traced = Vec::with_capacity(n / 4);
    for _ in 0..n / 4 {
        let t0 = Instant::now();
        run_one();
        traced.push(t0.elapsed());
    }
    sched.trace_stop();
    traced.sort();
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
        "| round trip p50, tracing on (µs)| {:>10.2} |           |",
        percentile(&traced, 0.50)
    );
    println!(
        "| tasks/s, one at a time         | {:>10.0} |           |",
        serial_rate
    );
    println!(
        "| tasks/s, {window} in flight          | {:>10.0} | ≥ 200000  |",
        pipelined_rate
    );
    println!(
        "\nwake-up paths of a 2-FC task (µs; VNPU_SPIN_US = {}, VNPU_HOST_PRIORITY = {:?})",
        sched.config().spin_us,
        sched.config().host_priority
    );
    println!(
        "| {:<6} | {:>16} | {:>16} | {:>16} | {:>16} | {:>16} | {:>16} |",
        "mode",
        "submit->FC p50",
        "submit->FC p99",
        "FC->FC p50",
        "FC->FC p99",
        "end->wake p50",
        "end->wake p99"
    );
    for (mode, count, idle) in [
        ("hot", n / 10, Duration::ZERO),
        (
            "cold",
            if quick { 200 } else { 1000 },
            Duration::from_millis(2),
        ),
    ] {
        let p = wake_paths(&sched, count, idle);
        println!(
            "| {mode:<6} | {:>16.1} | {:>16.1} | {:>16.1} | {:>16.1} | {:>16.1} | {:>16.1} |",
            percentile(&p[0], 0.5),
            percentile(&p[0], 0.99),
            percentile(&p[1], 0.5),
            percentile(&p[1], 0.99),
            percentile(&p[2], 0.5),
            percentile(&p[2], 0.99),
        );
    }
}

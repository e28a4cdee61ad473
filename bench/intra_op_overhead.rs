//! Intra-op helper pool overhead (issue 13 item 3): what one [`Pool::run`] of two chunks
//! costs beyond its work, from timestamps taken inside the chunks.
//!
//! For chunks of `W` µs of busy work each, run two at a time on a one-helper pool of a
//! 2-CPU host: the wall time of the run (ideal: `W` when the helper takes one chunk, `2W`
//! when it does not), how often the helper took a chunk, the offer -> helper's chunk start
//! latency ("attach") and the last chunk end -> run returns latency ("join"). Back to back
//! ("hot": the helper still polling) and with 1 ms idle between runs ("cold": the helper
//! asleep). The smallest chunk worth offering is where `wall < 2W` by a margin.
//! Run: `cargo bench --bench intra_op_overhead` (add `-- --quick` for a short run).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use vnpu::exec::pool::Pool;

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per run: (wall µs, helper took a chunk, attach µs, join µs).
fn runs(pool: &Pool, work: Duration, n: usize, idle: Duration) -> Vec<(f64, bool, f64, f64)> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        let stamps: Mutex<[(Option<Instant>, Option<Instant>); 2]> = Mutex::new([(None, None); 2]);
        let mut parts = [(), ()];
        let t0 = Instant::now();
        let mask = pool.run(&mut parts, &|i, _| {
            let s = Instant::now();
            spin(work);
            let e = Instant::now();
            stamps.lock().expect("stamps")[i] = (Some(s), Some(e));
        });
        let t1 = Instant::now();
        let st = *stamps.lock().expect("stamps");
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let attach = (0..2)
            .filter(|i| mask & (1 << i) != 0)
            .filter_map(|i| st[i].0)
            .map(|s| us(s.saturating_duration_since(t0)))
            .fold(f64::NAN, f64::min);
        let last_end = st.iter().filter_map(|x| x.1).max().unwrap_or(t1);
        out.push((
            us(t1 - t0),
            mask != 0,
            attach,
            us(t1.saturating_duration_since(last_end)),
        ));
    }
    out
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let pool = Pool::new(1, 2);
    println!("intra-op pool: 2 chunks of W µs busy work, 1 helper, 2-CPU gauge");
    println!(
        "| {:<5} | {:>5} | {:>9} | {:>9} | {:>9} | {:>7} | {:>10} | {:>10} | {:>9} |",
        "mode",
        "W µs",
        "wall p50",
        "wall p90",
        "wall p99",
        "helper",
        "attach p50",
        "attach p90",
        "join p50"
    );
    for (mode, idle) in [("hot", Duration::ZERO), ("cold", Duration::from_millis(1))] {
        for w in [0u64, 10, 25, 50, 100, 200] {
            let n = match (quick, idle.is_zero()) {
                (true, true) => 2000,
                (true, false) => 200,
                (false, true) => 20000,
                (false, false) => 1000,
            };
            let r = runs(&pool, Duration::from_micros(w), n, idle);
            let mut wall: Vec<f64> = r.iter().map(|x| x.0).collect();
            let mut attach: Vec<f64> = r.iter().map(|x| x.2).filter(|x| !x.is_nan()).collect();
            let mut join: Vec<f64> = r.iter().map(|x| x.3).collect();
            let took = r.iter().filter(|x| x.1).count() as f64 / r.len() as f64;
            for v in [&mut wall, &mut attach, &mut join] {
                v.sort_by(f64::total_cmp);
            }
            println!(
                "| {mode:<5} | {w:>5} | {:>9.1} | {:>9.1} | {:>9.1} | {:>6.0}% | {:>10.1} | {:>10.1} | {:>9.1} |",
                percentile(&wall, 0.5),
                percentile(&wall, 0.9),
                percentile(&wall, 0.99),
                took * 100.0,
                percentile(&attach, 0.5),
                percentile(&attach, 0.9),
                percentile(&join, 0.5),
            );
        }
    }
}

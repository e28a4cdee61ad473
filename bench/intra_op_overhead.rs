//! Intra-op helper pool overhead (issue 13 item 3): what one [`Pool::run`] of two chunks
//! costs beyond its work, from timestamps taken inside the chunks.
//!
//! For chunks of `W` µs of busy work each, run two at a time on a one-helper pool of a
//! 2-CPU host: the wall time of the run (ideal: `W` when the helper takes one chunk, `2W`
//! when it does not), how often the helper took a chunk, the offer -> helper's chunk start
//! latency ("attach") and the last chunk end -> run returns latency ("join"). Back to back
//! ("hot": the helper still polling) and with 1 ms idle between runs ("cold": the helper
//! asleep). The smallest chunk worth offering is where `wall < 2W` by a margin.
//!
//! With `--models` (`-- --models [--frames N] [--rounds R]`): whole-model latency of the
//! bench models mobilenetv2 and resnet18 (`$VNPU_BENCH_MODELS`, default
//! `build/bench-models`) on the calling thread with 1 and 2 intra-op threads, rounds
//! interleaved in one process (p50 and best per frame), then the time per op class
//! (depthwise convs apart) of each.
//! Run: `cargo bench --bench intra_op_overhead` (add `-- --quick` for a short run).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use vnpu::compile::{compile_onnx_file, CompileOptions};
use vnpu::exec::pool::Pool;
use vnpu::exec::{ModelPlan, PlanOptions};
use vnpu::ir::Op;

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

/// Frame latency of each bench model with 1 and 2 intra-op threads (see the module doc).
fn models(frames: usize, rounds: usize) {
    let dir = std::env::var("VNPU_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("build/bench-models"));
    for name in ["mobilenetv2", "resnet18"] {
        let path = dir.join(format!("{name}.onnx"));
        let opts = CompileOptions {
            max_time_per_fc: 0,
            ..Default::default()
        };
        let cm = match compile_onnx_file(&path, &opts) {
            Ok(c) => c,
            Err(e) => {
                println!("{name}: cannot compile {}: {e}", path.display());
                continue;
            }
        };
        let graph = Arc::new(cm.graph);
        let plans: Vec<(usize, ModelPlan, ModelPlan)> = [1usize, 2]
            .iter()
            .map(|&t| {
                let plan = |profile| {
                    let o = PlanOptions {
                        intra_op_threads: t,
                        profile,
                        ..Default::default()
                    };
                    ModelPlan::new(graph.clone(), &o).expect("plan")
                };
                (t, plan(false), plan(true))
            })
            .collect();
        let mut states: Vec<_> = plans
            .iter()
            .map(|(_, p, q)| {
                let mut s = (p.new_state(), q.new_state());
                for i in 0..graph.inputs.len() {
                    let x: Vec<f32> = (0..p.input_len(i) / 4)
                        .map(|j| ((j * 7919) % 1000) as f32 / 1000.0 - 0.5)
                        .collect();
                    p.set_input(&mut s.0, i, bytemuck::cast_slice(&x))
                        .expect("input");
                    q.set_input(&mut s.1, i, bytemuck::cast_slice(&x))
                        .expect("input");
                }
                s
            })
            .collect();
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); plans.len()];
        for _ in 0..rounds {
            for (k, (_, p, _)) in plans.iter().enumerate() {
                p.run_all(&mut states[k].0).expect("run");
                for _ in 0..frames {
                    let t0 = Instant::now();
                    p.run_all(&mut states[k].0).expect("run");
                    lat[k].push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (k, (t, _, q)) in plans.iter().enumerate() {
            let l = &mut lat[k];
            l.sort_by(f64::total_cmp);
            // Per op class, from a profiled pass.
            q.reset_profile(&mut states[k].1);
            for _ in 0..frames.min(20) {
                q.run_all(&mut states[k].1).expect("run");
            }
            let mut class: BTreeMap<String, f64> = BTreeMap::new();
            for nt in q.profile(&states[k].1) {
                let op = match &graph.nodes[nt.node].op {
                    Op::Conv { group, .. } if *group > 1 => "Conv(dw)".to_string(),
                    _ => nt.op.to_string(),
                };
                *class.entry(op).or_default() += nt.micros / frames.min(20) as f64 / 1e3;
            }
            let classes: Vec<String> = class
                .iter()
                .filter(|(_, v)| **v >= 0.05)
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect();
            println!(
                "{name:<12} intra-op threads {t}: p50 {:>6.2} ms, best {:>6.2} ms ({} frames) | {}",
                percentile(l, 0.5),
                l[0],
                l.len(),
                classes.join(", ")
            );
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--models") {
        let num = |flag: &str, default: usize| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        models(num("--frames", 20), num("--rounds", 5));
        return;
    }
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

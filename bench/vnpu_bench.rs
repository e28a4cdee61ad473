//! vnpu benchmarks, side by side with onnxruntime measured in the same run (DESIGN §6).
//!
//! ```text
//! cargo bench --bench vnpu -- [latency] [priority] [split] [load] [--seconds S] [--runs N] [--rounds R]
//! ```
//! With no mode, runs all. Models come from `$VNPU_BENCH_MODELS` (default
//! `build/models`, generated with `scripts/gen_models.py` through the venv when
//! missing); onnxruntime numbers come from `bench/ort_bench.py` run through
//! `scripts/venv.sh`. Prints tables with vnpu/onnxruntime ratios; never asserts on time.

#[path = "../src/bin/vnpu/perf.rs"]
#[allow(dead_code)]
mod perf;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use perf::{percentile, Load};
use vnpu::compile::{compile_onnx_file, CompileOptions, CompiledModel};
use vnpu::exec::Tile;
use vnpu::runtime::{Model, PackedModel, Runtime};
use vnpu::sched::{SchedConfig, TraceEvent, TraceKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn models_dir() -> PathBuf {
    let dir = std::env::var("VNPU_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("build/models"));
    if !dir.join("resnet18.onnx").exists() {
        eprintln!("generating benchmark models into {} ...", dir.display());
        let ok = Command::new(repo().join("scripts/venv.sh"))
            .args(["python", "scripts/gen_models.py"])
            .arg(&dir)
            .current_dir(repo())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "could not generate models (scripts/gen_models.py)");
    }
    dir
}

/// Runs bench/ort_bench.py and returns its JSON lines.
fn ort(args: &[String]) -> Vec<serde_json::Value> {
    let out = Command::new(repo().join("scripts/venv.sh"))
        .args(["python", "bench/ort_bench.py"])
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run bench/ort_bench.py");
    if !out.status.success() {
        eprintln!(
            "onnxruntime bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return vec![];
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn compile(path: &Path, limit: u64) -> CompiledModel {
    compile_onnx_file(
        path,
        &CompileOptions {
            max_time_per_fc: limit,
            ..Default::default()
        },
    )
    .expect("compile")
}

fn model_of(c: CompiledModel) -> Arc<Model> {
    PackedModel::from_compiled(vec![c], vec![vnpu::runtime::LoadSource::Compiled])
        .expect("load")
        .models[0]
        .clone()
}

/// Runs the whole model on this thread (one virtual core's work), `runs` times; returns
/// per-run milliseconds.
fn run_direct(m: &Model, runs: usize) -> Vec<f64> {
    let inputs = perf::pattern_inputs(m);
    let mut st = m.take_state();
    let mut times = Vec::with_capacity(runs);
    for r in 0..runs + 3 {
        let t0 = Instant::now();
        for (i, b) in inputs.iter().enumerate() {
            m.plan.set_input(&mut st, i, b).expect("input");
        }
        for seg in &m.compiled.segments {
            for fc in &seg.fcs {
                for s in &fc.steps {
                    m.plan
                        .run_node(
                            &mut st,
                            s.node,
                            Tile {
                                index: s.tile as usize,
                                count: s.tiles as usize,
                            },
                        )
                        .expect("run");
                }
            }
        }
        if r >= 3 {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    times
}

/// Latency of each model, vnpu vs onnxruntime. The machine's speed drifts (shared
/// host, frequency), so the two sides alternate for `rounds` rounds and each side
/// reports its best round's median.
fn bench_latency(dir: &Path, runs: usize, rounds: usize) {
    let names = ["resnet18", "mobilenetv2", "unet_fpn", "detector"];
    let paths: Vec<PathBuf> = names
        .iter()
        .map(|n| dir.join(format!("{n}.onnx")))
        .filter(|p| p.exists())
        .collect();
    let models: Vec<Arc<Model>> = paths.iter().map(|p| model_of(compile(p, 0))).collect();
    let mut ours = vec![f64::INFINITY; paths.len()];
    let mut theirs = vec![f64::INFINITY; paths.len()];
    for _ in 0..rounds.max(1) {
        let ort_res = ort(&paths
            .iter()
            .map(|p| p.display().to_string())
            .chain(["--runs".into(), runs.max(50).to_string()])
            .collect::<Vec<_>>());
        for (i, p) in paths.iter().enumerate() {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            if let Some(o) = ort_res
                .iter()
                .find(|j| j["model"] == name.as_str())
                .and_then(|j| j["median_ms"].as_f64())
            {
                theirs[i] = theirs[i].min(o);
            }
            ours[i] = ours[i].min(percentile(&run_direct(&models[i], runs), 50.0));
        }
    }
    println!(
        "\n## 1. single-model latency, 1 thread (median of {runs} runs, best of {rounds} alternating rounds)"
    );
    println!(
        "{:<14} {:>12} {:>12} {:>10}",
        "model", "vnpu ms", "ORT ms", "ratio"
    );
    for (i, p) in paths.iter().enumerate() {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let (t, o) = (ours[i], theirs[i]);
        if o.is_finite() {
            println!("{name:<14} {t:>12.2} {o:>12.2} {:>10.2}", t / o);
        } else {
            println!("{name:<14} {t:>12.2} {:>12} {:>10}", "n/a", "n/a");
        }
    }
}

fn bench_split(dir: &Path, runs: usize) {
    println!("\n## 3. FC split overhead (ResNet-18, median of {runs} runs, FCs run back to back)");
    let p = dir.join("resnet18.onnx");
    let whole = model_of(compile(&p, 0));
    let split = model_of(compile(&p, 1000));
    let fcs: usize = split.compiled.segments.iter().map(|s| s.fcs.len()).sum();
    // Interleave to share machine noise.
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..5 {
        a.extend(run_direct(&whole, runs / 5 + 1));
        b.extend(run_direct(&split, runs / 5 + 1));
    }
    let (ta, tb) = (percentile(&a, 50.0), percentile(&b, 50.0));
    println!("unsplit: {ta:.2} ms (1 FC); max_time_per_fc 1000: {tb:.2} ms ({fcs} FCs); overhead {:+.2} %", (tb / ta - 1.0) * 100.0);
}

/// The host's own scheduling noise, for reading the priority tails: one busy thread
/// per CPU does fixed ~0.5 ms chunks of arithmetic for `secs` seconds; returns (chunks
/// that took more than 3 ms, the longest chunk in ms). On a quiet dedicated machine both
/// are small; a shared VM shows stalls that no scheduler inside the process can avoid.
fn host_stalls(secs: f64) -> (usize, f64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let handles: Vec<_> = (0..cpus)
        .map(|_| {
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let (mut stalls, mut worst) = (0usize, 0f64);
                let mut x = 1.0f64;
                while t0.elapsed().as_secs_f64() < secs {
                    let a = Instant::now();
                    for i in 0..150_000 {
                        x = std::hint::black_box(x + i as f64 * 0.5);
                    }
                    let ms = a.elapsed().as_secs_f64() * 1e3;
                    worst = worst.max(ms);
                    stalls += usize::from(ms > 3.0);
                }
                (stalls, worst)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or((0, 0.0)))
        .fold((0, 0.0), |a, b| (a.0 + b.0, a.1.max(b.1)))
}

/// Per priority-255 task: the wait before its first FC and the stretch of its run
/// beyond its FCs' typical durations; plus every normal FC's duration.
struct ScheduleSplit {
    wait_ms: Vec<f64>,
    stretch_ms: Vec<f64>,
    bg_fc_ms: Vec<f64>,
}

fn schedule_split(events: &[TraceEvent]) -> ScheduleSplit {
    use std::collections::HashMap;
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut submit = HashMap::new();
    let mut first_fc = HashMap::new();
    let mut fc_start = HashMap::new();
    let mut fc_ms: HashMap<(u32, u32), Vec<f64>> = HashMap::new();
    let mut fg_fcs: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
    let mut done = HashMap::new();
    let mut bg_fc_ms = Vec::new();
    for e in events {
        match e.kind {
            TraceKind::Submit => {
                submit.insert(e.task, e.ts_ns);
            }
            TraceKind::FcStart => {
                fc_start.insert((e.task, e.seg, e.fc), e.ts_ns);
                if e.priority == 255 {
                    first_fc.entry(e.task).or_insert(e.ts_ns);
                }
            }
            TraceKind::FcEnd => {
                if let Some(t0) = fc_start.remove(&(e.task, e.seg, e.fc)) {
                    let d = ms(e.ts_ns - t0);
                    if e.priority == 255 {
                        fc_ms.entry((e.seg, e.fc)).or_default().push(d);
                        fg_fcs.entry(e.task).or_default().push((e.seg, e.fc));
                    } else {
                        bg_fc_ms.push(d);
                    }
                }
            }
            TraceKind::Done if e.priority == 255 => {
                done.insert(e.task, e.ts_ns);
            }
            _ => {}
        }
    }
    let typical: HashMap<(u32, u32), f64> = fc_ms
        .iter()
        .map(|(k, v)| (*k, percentile(v, 50.0)))
        .collect();
    let (mut wait_ms, mut stretch_ms) = (Vec::new(), Vec::new());
    for (task, &t_first) in &first_fc {
        let (Some(&t_sub), Some(&t_done)) = (submit.get(task), done.get(task)) else {
            continue;
        };
        let wait = ms(t_first.saturating_sub(t_sub));
        let own: f64 = fg_fcs
            .get(task)
            .map_or(0.0, |v| v.iter().map(|k| typical[k]).sum());
        wait_ms.push(wait);
        stretch_ms.push(ms(t_done.saturating_sub(t_sub)) - wait - own);
    }
    ScheduleSplit {
        wait_ms,
        stretch_ms,
        bg_fc_ms,
    }
}

fn bench_priority(dir: &Path, secs: f64) {
    println!("\n## 2. priority under load: MobileNetV2 (priority 255, 30 req/s, open loop) vs ResNet-18 (priority 0, flat out)");
    let small = dir.join("mobilenetv2.onnx");
    let big = dir.join("resnet18.onnx");
    let s = model_of(compile(&small, 1000));
    let b = model_of(compile(&big, 1000));
    let base = SchedConfig::from_env().expect("config");
    let fg = Load {
        model: s.clone(),
        priority: 255,
        custom_id: 0,
        core_mask: 0,
        fps: 30.0,
        threads: 1,
        frames: 0,
        inputs: None,
    };
    let bg = Load {
        model: b.clone(),
        priority: 0,
        custom_id: 0,
        core_mask: 0,
        fps: 0.0,
        threads: base.cores + 1,
        frames: 0,
        inputs: None,
    };
    let iso = percentile(&run_direct(&s, 50), 50.0);
    println!(
        "MobileNetV2 isolated p50: {iso:.2} ms; cores: {}",
        base.cores
    );
    let (stalls, worst) = host_stalls(secs.min(5.0));
    println!(
        "host noise: {stalls} stalls > 3 ms in {:.0} s of busy chunks on every CPU, longest chunk {worst:.1} ms",
        secs.min(5.0)
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>12}",
        "setting", "fg p50", "fg p99", "fg max", "bg runs/s"
    );
    let mut waits = Vec::new();
    for limit in [0usize, 1] {
        let mut cfg = base.clone();
        cfg.core_limit = limit;
        cfg.trace_capacity = 1 << 20;
        let rt = Runtime::with_config(cfg).expect("runtime");
        rt.scheduler().trace_start();
        let r = perf::run_loads(
            &rt,
            &[fg.clone(), bg.clone()],
            Duration::from_secs_f64(secs),
            |_| {},
        );
        println!(
            "{:<34} {:>9.2} {:>9.2} {:>9.2} {:>12.1}",
            format!("vnpu BPLAT_CORELIMIT={limit}"),
            percentile(&r[0].latency_us, 50.0) / 1e3,
            percentile(&r[0].latency_us, 99.0) / 1e3,
            percentile(&r[0].latency_us, 100.0) / 1e3,
            r[1].fps()
        );
        rt.scheduler().trace_stop();
        waits.push((limit, schedule_split(&rt.scheduler().trace_events())));
    }
    for (label, extra) in [
        ("onnxruntime 2 threads", vec![]),
        (
            "onnxruntime bg nice 19, no spin",
            vec!["--big-nice", "19", "--no-spin"],
        ),
    ] {
        let mut args: Vec<String> = vec![
            "--priority-scenario".into(),
            small.display().to_string(),
            big.display().to_string(),
        ];
        args.extend([
            "--fps".into(),
            "30".into(),
            "--seconds".into(),
            secs.to_string(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        if let Some(j) = ort(&args).first() {
            println!(
                "{label:<34} {:>9.2} {:>9.2} {:>9.2} {:>12.1}",
                j["small_p50_ms"].as_f64().unwrap_or(f64::NAN),
                j["small_p99_ms"].as_f64().unwrap_or(f64::NAN),
                j["small_max_ms"].as_f64().unwrap_or(f64::NAN),
                j["big_per_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    println!(
        "\nwhere the foreground's time went (from the scheduler trace, ms): wait = submit to its first FC;\n\
         stretch = end-to-end minus wait minus its FCs' median durations in this run"
    );
    println!(
        "{:<24} {:>9} {:>9} {:>9} {:>11} {:>11} {:>13}",
        "setting", "wait p50", "wait p99", "wait max", "stretch p99", "bg FC p99", "bg FC max"
    );
    for (limit, w) in &waits {
        println!(
            "{:<24} {:>9.2} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>13.2}",
            format!("BPLAT_CORELIMIT={limit}"),
            percentile(&w.wait_ms, 50.0),
            percentile(&w.wait_ms, 99.0),
            percentile(&w.wait_ms, 100.0),
            percentile(&w.stretch_ms, 99.0),
            percentile(&w.bg_fc_ms, 99.0),
            percentile(&w.bg_fc_ms, 100.0),
        );
    }
}

fn bench_load(dir: &Path) {
    println!("\n## 5. load time: compile on load (first ever) vs cached (first inference)");
    let p = dir.join("resnet18.onnx");
    let cache = std::env::temp_dir().join(format!("vnpu-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    vnpu::config::set("VNPU_CACHE_DIR", cache.to_str()).expect("cache dir");
    let first_infer = |label: &str| {
        let t0 = Instant::now();
        let pack = PackedModel::load_files(std::slice::from_ref(&p)).expect("load");
        let t_load = t0.elapsed().as_secs_f64() * 1e3;
        let t = run_direct(&pack.models[0], 1)[0];
        println!(
            "{label:<28} load {t_load:>9.1} ms, + first inference {t:>7.1} ms ({:?})",
            pack.sources[0]
        );
    };
    first_infer("first ever (compile+store)");
    first_infer("cached");
    let _ = std::fs::remove_dir_all(&cache);
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut modes: Vec<&str> = args
        .iter()
        .map(|s| s.as_str())
        .filter(|a| ["latency", "priority", "split", "load"].contains(a))
        .collect();
    if modes.is_empty() {
        modes = vec!["latency", "priority", "split", "load"];
    }
    let num = |flag: &str, default: f64| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    // `cargo test --all-targets` runs this binary without `--bench`: a short smoke run
    // that exercises every section (the numbers then mean nothing).
    let smoke = !std::env::args().any(|a| a == "--bench");
    let secs = num("--seconds", if smoke { 1.0 } else { 10.0 });
    let runs = num("--runs", if smoke { 3.0 } else { 50.0 }) as usize;
    let rounds = num("--rounds", if smoke { 1.0 } else { 3.0 }) as usize;
    let dir = models_dir();
    println!(
        "vnpu benchmarks (host: {} CPUs)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    for m in modes {
        match m {
            "latency" => bench_latency(&dir, runs, rounds),
            "priority" => bench_priority(&dir, secs),
            "split" => bench_split(&dir, runs),
            "load" => bench_load(&dir),
            _ => {}
        }
    }
}

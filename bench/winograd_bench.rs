//! Per-conv time of the Winograd F(4x4, 3x3) path against the im2col GEMM path on
//! 3x3 stride-1 convs (ResNet-18 stages and a few detector shapes), single thread,
//! bias + ReLU fused, rounds interleaved, best of each. Prints ms and the ratio.
//!
//! Then, with `-- models DIR`, the whole-model time of every `DIR/*.onnx` (compiled
//! unsplit, every node run whole on this thread, thread CPU time, best of the rounds).
//!
//! Run: `cargo bench --bench winograd_bench` (optionally `-- quick`, `-- models DIR`).
//! Run by `cargo test` (no `--bench` argument) it is a one-round smoke run of two shapes.

use std::time::Instant;
use vnpu::ir::UnaryOp;
use vnpu::kernels::conv::{conv2d, ConvShape, ConvWeights, WinogradPlan};
use vnpu::kernels::gemm::Epilogue;
use vnpu::kernels::isa;
use vnpu::kernels::unary::PostOpRt;

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}

/// CPU time of this thread in ms: on a loaded machine it leaves out the time the thread
/// waited for a core (wall time is printed too).
fn thread_ms() -> f64 {
    vnpu::compile::cost::thread_cpu_us() / 1e3
}

/// (thread CPU ms, wall ms) of one call of `f`.
fn time(f: &mut impl FnMut()) -> (f64, f64) {
    let (c, t) = (thread_ms(), Instant::now());
    f();
    (thread_ms() - c, t.elapsed().as_secs_f64() * 1e3)
}

/// Best thread-CPU and wall ms of running every node of each model in `dir` whole.
fn bench_models(dir: &str, rounds: usize) {
    use vnpu::compile::{compile_onnx_file, CompileOptions};
    use vnpu::exec::Tile;
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("models folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    paths.sort();
    println!("\nwhole model, 1 thread, nodes run whole (best of {rounds})");
    println!("{:<20} {:>10} {:>10}", "model", "cpu ms", "wall ms");
    for p in paths {
        let opts = CompileOptions {
            max_time_per_fc: 0,
            ..Default::default()
        };
        let c = match compile_onnx_file(&p, &opts) {
            Ok(c) => c,
            Err(e) => {
                println!("{:<20} compile failed: {e}", p.display());
                continue;
            }
        };
        let popts = vnpu::exec::PlanOptions {
            intra_op_threads: 1,
            profile: false,
            ..Default::default()
        };
        let plan = &vnpu::exec::ModelPlan::new(std::sync::Arc::new(c.graph), &popts).expect("plan");
        let mut st = plan.new_state();
        let inputs: Vec<Vec<u8>> = (0..plan.graph().inputs.len())
            .map(|i| (0..plan.input_len(i)).map(|k| (k % 7) as u8 * 8).collect())
            .collect();
        let nodes = plan.graph().nodes.len();
        let mut run = || {
            for (i, b) in inputs.iter().enumerate() {
                plan.set_input(&mut st, i, b).expect("input");
            }
            for n in 0..nodes {
                plan.run_node(&mut st, n, Tile::WHOLE).expect("run");
            }
        };
        run();
        let mut best = (f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds {
            let t = time(&mut run);
            best = (best.0.min(t.0), best.1.min(t.1));
        }
        let name = p.file_stem().map(|s| s.to_string_lossy().into_owned());
        println!(
            "{:<20} {:>10.2} {:>10.2}",
            name.unwrap_or_default(),
            best.0,
            best.1
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "models") {
        let dir = args.get(i + 1).map_or("build/bench-models", |s| s.as_str());
        bench_models(dir, 10);
        return;
    }
    let smoke = !args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "quick");
    let rounds = if smoke {
        1
    } else if quick {
        3
    } else {
        15
    };
    // `nt N`: tiles per block for every Winograd plan (blocking sweeps).
    let nt: Option<usize> = args
        .iter()
        .position(|a| a == "nt")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok());
    let isa = isa::best_isa();
    println!(
        "3x3 stride-1 conv, pad 1, bias + ReLU, 1 thread, table {}, thread CPU ms (best of {rounds})",
        isa.table().name
    );
    println!(
        "{:>5} {:>5} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>6}",
        "Cin",
        "Cout",
        "HxW",
        "im2col",
        "F(4,3)",
        "F(2,3)",
        "in-tf",
        "picked",
        "ratio",
        "GFLOPS",
        "max err",
        "pick"
    );
    let shapes: &[(usize, usize, usize, usize)] = &[
        (64, 64, 56, 56),
        (128, 128, 28, 28),
        (256, 256, 14, 14),
        (512, 512, 7, 7),
        (32, 32, 112, 112),
        (64, 64, 80, 80),
        (96, 96, 40, 40),
        (16, 16, 160, 160),
        (16, 32, 80, 80),
        (32, 64, 40, 40),
        (24, 24, 160, 160),
        (32, 32, 160, 160),
        // YOLOX-tiny at 416: the small-plane stages and head.
        (192, 192, 13, 13),
        (96, 96, 13, 13),
        (96, 96, 26, 26),
        (16, 16, 16, 16),
        (16, 16, 56, 56),
        // Shallow stems: YOLOX-tiny's 12->24 at 208x208, an 8->16 at 224x224.
        (12, 24, 208, 208),
        (8, 16, 224, 224),
        // A CRNN's late stages: planes 4 and 8 rows high, 80 wide.
        (256, 256, 4, 80),
        (256, 256, 8, 80),
        (128, 256, 8, 80),
    ];
    for &(ci, co, hh, ww) in if smoke { &shapes[..2] } else { shapes } {
        let s = ConvShape {
            n: 1,
            c_in: ci,
            h: hh,
            w: ww,
            c_out: co,
            oh: hh,
            ow: ww,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            ph: 1,
            pw: 1,
            group: 1,
        };
        let x = rand(ci * hh * ww, 1);
        let w = rand(co * ci * 9, 2);
        let bias = rand(co, 3);
        let post = [PostOpRt::Unary(UnaryOp::Relu)];
        let epi = Epilogue {
            bias: Some(&bias),
            post: &post,
            ..Epilogue::NONE
        };
        let ohw = hh * ww;
        let wts = ConvWeights::pack(&s, &w);
        let mut s1 = vec![0.0; s.scratch_len()];
        let mut y1 = vec![0.0; co * ohw];
        let picked = WinogradPlan::tile_for(&s);
        let mut plans = [4, 2].map(|t| WinogradPlan::with_tile(&s, &w, t));
        if let Some(nt) = nt {
            for p in &mut plans {
                p.set_block_tiles(nt);
            }
        }
        let mut ys = [vec![0.0; co * ohw], vec![0.0; co * ohw]];
        let mut direct = || {
            conv2d(
                isa,
                &s,
                &wts,
                &x,
                &mut y1,
                0,
                co,
                (0, ohw),
                None,
                &epi,
                &mut s1,
            )
        };
        let inf = (f64::INFINITY, f64::INFINITY);
        let (mut a, mut b, mut tin) = (inf, [inf, inf], inf);
        let min = |u: (f64, f64), v: (f64, f64)| (u.0.min(v.0), u.1.min(v.1));
        let pick = usize::from(picked == 2);
        let mut v = vec![0.0; plans[pick].input_len()];
        for _ in 0..rounds {
            a = min(a, time(&mut direct));
            for (k, (p, y)) in plans.iter().zip(ys.iter_mut()).enumerate() {
                let mut s2 = vec![0.0; p.scratch_len()];
                let th = p.tile_rows();
                let mut wino = || p.run(isa, &x, y, (0, co), (0, th), None, &epi, &mut s2);
                b[k] = min(b[k], time(&mut wino));
            }
            tin = min(tin, time(&mut || plans[pick].transform_input(&x, &mut v)));
        }
        let err = ys
            .iter()
            .flat_map(|y| y1.iter().zip(y))
            .map(|(u, v)| (u - v).abs())
            .fold(0.0f32, f32::max);
        let wino_wins = vnpu::compile::cost::winograd_wins(&s);
        let best = if wino_wins { b[pick].0 } else { a.0 };
        println!(
            "{ci:>5} {co:>5} {:>5} {:>9.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>6.2} {:>7.1} {err:>7.1e} {:>6}",
            if hh == ww {
                format!("{hh}²")
            } else {
                format!("{hh}x{ww}")
            },
            a.0,
            b[0].0,
            b[1].0,
            tin.0,
            b[pick].0,
            b[pick].0 / a.0,
            2.0 * s.macs() as f64 / best / 1e6,
            if wino_wins {
                format!("F({picked},3)")
            } else {
                "im2col".to_string()
            }
        );
    }
}

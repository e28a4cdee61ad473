//! Int8 kernels against our f32 kernels, single thread, on ResNet / MobileNet-like
//! layers: conv (`kernels::quant::qconv_u8` with the fused requantisation vs
//! `kernels::conv::conv2d`) and GEMM (`qgemm_u8` vs `gemm_packed`), best-of-N times and
//! the ratio int8 / f32 (goal for whole networks: <= 0.5). Times on a loaded machine are
//! indicative only; read the ratios.
//!
//! Whole networks (`-- networks`): the QDQ ResNet-18 / MobileNetV2 / detector of
//! `scripts/gen_quant_models.py` (`$VNPU_QUANT_DIR/<name>/model.onnx`) run by vnpu
//! (int8), the f32 originals (`$VNPU_TEST_MODELS/<name>.onnx`) by vnpu, and the same
//! QDQ models by onnxruntime (1 thread, optimisations on) through `bench/peers.py
//! --serve` (Python: `$VNPU_BENCH_PYTHON`, default `build/bench-venv/bin/python`),
//! rounds interleaved, best of each; ratios int8 / ORT (goal <= 1.0) and int8 / f32
//! (goal <= 0.5).
//!
//! Run: `cargo bench --bench quant_bench` (`-- quick` for fewer repetitions, `--
//! networks` for the whole networks only). Without `--bench` (as `cargo test
//! --all-targets` runs it) it does one short smoke round.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;
use vnpu::compile::{self, CompileOptions};
use vnpu::exec::{ModelPlan, PlanOptions};
use vnpu::kernels::conv::{conv2d, ConvShape, ConvWeights};
use vnpu::kernels::quant::{self, QConvWeights, QGemmB, QScratch, Requant};
use vnpu::kernels::{gemm, isa};

fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    rand_u8(n, seed)
        .into_iter()
        .map(|v| (v as f32 - 128.0) / 640.0)
        .collect()
}

fn rand_u8(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// Best-of-`reps` seconds of `f`.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

type Layer = (&'static str, usize, usize, usize, usize, usize, usize);

fn bench_conv(reps: usize, layers: &[Layer]) {
    println!("Conv layers (f32 conv2d on the best table; int8 qconv_u8 per table)");
    let isas = isa::available_isas();
    print!("{:<34} {:>10}", "layer", "f32 us");
    for i in &isas {
        print!(" {:>14}", format!("int8 {} us", i.table().quant.name));
    }
    println!(" {:>10}", "int8/f32");
    for &(name, ci, hw, co, k, st, group) in layers {
        let s = ConvShape::square(ci, hw, co, k, st, group);
        let o = s.oh;
        let klen = co * ci / group * k * k;
        let wf = ConvWeights::pack(&s, &rand_f32(klen, 3));
        let xf = rand_f32(ci * hw * hw, 4);
        let mut yf = vec![0.0; co * o * o];
        let mut scratch = vec![0.0; s.scratch_len()];
        let best_isa = isa::best_isa();
        let none = gemm::Epilogue::NONE;
        let tf = best(reps, || {
            conv2d(
                best_isa,
                &s,
                &wf,
                &xf,
                &mut yf,
                0,
                co,
                (0, o * o),
                None,
                &none,
                &mut scratch,
            )
        });
        let w8: Vec<i8> = rand_u8(klen, 5).into_iter().map(|v| v as i8).collect();
        let x8 = rand_u8(ci * hw * hw, 6);
        let mult = vec![1.0 / 4096.0; co];
        let mut y8 = vec![0u8; co * o * o];
        print!("{name:<34} {:>10.1}", tf * 1e6);
        let mut t_best = f64::INFINITY;
        for &i in &isas {
            // Weights packed in the layout of the table that runs them, as a plan does.
            let lay = i.table().quant.layout;
            let wq = QConvWeights::pack(lay, &w8, co, ci / group, k, k, group);
            let bias = wq.fold_bias(None, 128);
            let rq = Requant {
                mult: &mult,
                bias: &bias,
                y_zp: 0,
                lo: 0,
                hi: 255,
            };
            let mut qs = QScratch::new();
            qs.reserve_conv(&s, lay);
            let t8 = best(reps, || {
                quant::qconv_u8(i, &s, &x8, 128, &wq, &rq, &mut y8, (0, co), &mut qs)
            });
            print!(" {:>14.1}", t8 * 1e6);
            t_best = t_best.min(t8);
        }
        println!(" {:>10.2}", t_best / tf);
    }
}

fn bench_gemm(reps: usize, shapes: &[(usize, usize, usize)]) {
    println!("GEMM M x N x K (f32 gemm_packed on the best table; int8 qgemm_u8 per table)");
    let isas = isa::available_isas();
    print!("{:<20} {:>10}", "shape", "f32 us");
    for i in &isas {
        print!(" {:>14}", format!("int8 {} us", i.table().quant.name));
    }
    println!(" {:>10}", "int8/f32");
    for &(m, n, k) in shapes {
        let a = rand_f32(m * k, 1);
        let b = rand_f32(k * n, 2);
        let mut pa = vec![0.0; gemm::packed_a_len(m, k)];
        let mut pb = vec![0.0; gemm::packed_b_len(k, n)];
        let mut c = vec![0.0; m * n];
        let best_isa = isa::best_isa();
        // Like a model's GEMM: B (weights) packed once, A (activations) packed per run.
        gemm::pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let tf = best(reps, || {
            gemm::pack_a(&a, k, 1, m, (k, gemm::k_depth(k, n)), 1.0, &mut pa);
            gemm::gemm_packed(
                best_isa,
                m,
                n,
                (k, gemm::k_depth(k, n)),
                &pa,
                gemm::BSource::Packed(&pb),
                &mut [],
                &mut c,
                n,
                (0, m),
                (0, n),
                &gemm::Epilogue::NONE,
            )
        });
        let a8 = rand_u8(m * k, 3);
        let b8: Vec<i8> = rand_u8(k * n, 4).into_iter().map(|v| v as i8).collect();
        let mult = vec![1.0 / 4096.0; n];
        let mut c8 = vec![0u8; m * n];
        print!("{:<20} {:>10.1}", format!("{m}x{n}x{k}"), tf * 1e6);
        let mut t_best = f64::INFINITY;
        for &i in &isas {
            let lay = i.table().quant.layout;
            let qb = QGemmB::pack(lay, &b8, k, n);
            let bias = qb.fold_bias(None, 128);
            let rq = Requant {
                mult: &mult,
                bias: &bias,
                y_zp: 0,
                lo: 0,
                hi: 255,
            };
            let mut qs = QScratch::new();
            qs.reserve_gemm(m, k, n, lay);
            let t8 = best(reps, || {
                quant::qgemm_u8(i, &a8, k, m, &qb, &rq, &mut c8, n, &mut qs)
            });
            print!(" {:>14.1}", t8 * 1e6);
            t_best = t_best.min(t8);
        }
        println!(" {:>10.2}", t_best / tf);
    }
}

/// A compiled model ready to run on one thread, all nodes in order.
struct Net {
    graph: Arc<vnpu::ir::Graph>,
    plan: ModelPlan,
    st: vnpu::exec::ExecState,
}

impl Net {
    fn load(path: &Path) -> Result<Net, String> {
        let m = compile::compile_onnx_file(path, &CompileOptions::default())
            .map_err(|e| format!("compile {}: {e}", path.display()))?;
        let graph = Arc::new(m.graph.clone());
        let plan = ModelPlan::new(graph.clone(), &PlanOptions::default())
            .map_err(|e| format!("plan: {e}"))?;
        let st = plan.new_state();
        Ok(Net { graph, plan, st })
    }

    /// Best-of-`runs` time per op name, ms, largest first.
    fn per_op(&mut self, runs: usize) -> Vec<(String, f64, usize)> {
        let n = self.graph.nodes.len();
        let mut best = vec![f64::INFINITY; n];
        for _ in 0..runs {
            for (i, b) in best.iter_mut().enumerate() {
                let t = Instant::now();
                self.plan
                    .run_node(&mut self.st, i, vnpu::exec::Tile::WHOLE)
                    .expect("run");
                *b = b.min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        if std::env::var_os("QB_NODES").is_some() {
            for (node, t) in self.graph.nodes.iter().zip(&best) {
                let shape = |v: usize| self.graph.values[v].shape.clone().unwrap_or_default();
                println!(
                    "    {:<40} {:<10} {:>8.3} ms {:?} -> {:?}",
                    node.name.chars().take(40).collect::<String>(),
                    node.op.name(),
                    t,
                    node.inputs.first().copied().flatten().map(shape),
                    shape(node.outputs[0])
                );
            }
        }
        let mut by: Vec<(String, f64, usize)> = Vec::new();
        for (node, t) in self.graph.nodes.iter().zip(best) {
            let mut name = node.op.name().to_string();
            if let vnpu::ir::Op::QConv { group, .. } = &node.op {
                if *group > 1 {
                    name = "QConv(depthwise/grouped)".into();
                }
            }
            match by.iter_mut().find(|e| e.0 == name) {
                Some(e) => {
                    e.1 += t;
                    e.2 += 1;
                }
                None => by.push((name, t, 1)),
            }
        }
        by.sort_by(|a, b| b.1.total_cmp(&a.1));
        by
    }

    /// Best of `runs` runs, ms.
    fn best_ms(&mut self, runs: usize) -> f64 {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                self.plan.run_all(&mut self.st).expect("run");
                t.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// onnxruntime behind `bench/peers.py --serve`.
struct Peer {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    fn start() -> Result<Peer, String> {
        let py = std::env::var("VNPU_BENCH_PYTHON")
            .unwrap_or_else(|_| "build/bench-venv/bin/python".to_string());
        let mut child = Command::new(&py)
            .args(["bench/peers.py", "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{py}: {e}"))?;
        let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut hello = String::new();
        out.read_line(&mut hello).map_err(|e| e.to_string())?;
        if !hello.contains("onnxruntime") {
            return Err(format!("peers.py: {hello}"));
        }
        Ok(Peer { child, out })
    }

    /// onnxruntime's best of `runs`, ms.
    fn best_ms(&mut self, model: &Path, runs: usize) -> Result<f64, String> {
        let abs = std::fs::canonicalize(model).map_err(|e| e.to_string())?;
        let req = serde_json::json!({"op": "time", "runtime": "onnxruntime",
            "model": abs, "runs": runs, "warmup": 1});
        let stdin = self.child.stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "{req}").map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.out.read_line(&mut line).map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
        v["min_ms"]
            .as_f64()
            .ok_or_else(|| format!("onnxruntime: {line}"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Whole networks: vnpu int8 vs onnxruntime on the same QDQ model and vs vnpu f32.
fn bench_networks(rounds: usize, runs: usize) {
    let (Ok(qdir), Ok(fdir)) = (
        std::env::var("VNPU_QUANT_DIR"),
        std::env::var("VNPU_TEST_MODELS"),
    ) else {
        println!("networks: set VNPU_QUANT_DIR and VNPU_TEST_MODELS");
        return;
    };
    let mut peer = match Peer::start() {
        Ok(p) => Some(p),
        Err(e) => {
            println!("networks: onnxruntime unavailable ({e})");
            None
        }
    };
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "network", "int8 ms", "f32 ms", "ORT ms", "int8/ORT", "int8/f32"
    );
    for name in ["resnet18", "mobilenetv2", "detector"] {
        let q = PathBuf::from(&qdir).join(name).join("model.onnx");
        let f = PathBuf::from(&fdir).join(format!("{name}.onnx"));
        let (mut nq, mut nf) = match (Net::load(&q), Net::load(&f)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                println!("{name:<12} {e}");
                continue;
            }
        };
        let (mut tq, mut tf, mut to) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds {
            tq = tq.min(nq.best_ms(runs));
            tf = tf.min(nf.best_ms(runs));
            if let Some(p) = peer.as_mut() {
                match p.best_ms(&q, runs) {
                    Ok(t) => to = to.min(t),
                    Err(e) => eprintln!("{name}: {e}"),
                }
            }
        }
        println!(
            "{name:<12} {tq:>10.2} {tf:>10.2} {to:>10.2} {:>10.3} {:>10.3}",
            tq / to,
            tq / tf
        );
    }
}

/// Per-op times of each network, int8 and f32 (`-- profile`).
fn profile_networks(runs: usize) {
    let (Ok(qdir), Ok(fdir)) = (
        std::env::var("VNPU_QUANT_DIR"),
        std::env::var("VNPU_TEST_MODELS"),
    ) else {
        println!("profile: set VNPU_QUANT_DIR and VNPU_TEST_MODELS");
        return;
    };
    for name in ["resnet18", "mobilenetv2", "detector"] {
        let q = PathBuf::from(&qdir).join(name).join("model.onnx");
        let f = PathBuf::from(&fdir).join(format!("{name}.onnx"));
        for (kind, path) in [("int8", q), ("f32", f)] {
            let mut net = match Net::load(&path) {
                Ok(n) => n,
                Err(e) => {
                    println!("{name} {kind}: {e}");
                    continue;
                }
            };
            let ops = net.per_op(runs);
            let total: f64 = ops.iter().map(|o| o.1).sum();
            println!("{name} {kind}: {total:.2} ms");
            for (op, t, count) in ops.iter().take(8) {
                println!("  {op:<28} {t:>8.2} ms  x{count}");
            }
        }
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = !bench || std::env::args().any(|a| a == "quick");
    let reps = if !bench {
        1
    } else if quick {
        3
    } else {
        10
    };
    println!("kernel table: {}", vnpu::kernels::table().name);
    let layers: [Layer; 8] = [
        ("3x3 64->64 @56 (ResNet)", 64, 56, 64, 3, 1, 1),
        ("1x1 256->64 @56 (ResNet-50)", 256, 56, 64, 1, 1, 1),
        ("3x3 128->128 @28 (ResNet)", 128, 28, 128, 3, 1, 1),
        ("3x3 256->256 @14 (ResNet)", 256, 14, 256, 3, 1, 1),
        ("7x7/2 3->64 @224 (ResNet stem)", 3, 224, 64, 7, 2, 1),
        ("1x1 96->24 @56 (MobileNetV2)", 96, 56, 24, 1, 1, 1),
        ("dw3x3 192 @28 (MobileNetV2)", 192, 28, 192, 3, 1, 192),
        ("dw3x3/2 96 @112 (MobileNetV2)", 96, 112, 96, 3, 2, 96),
    ];
    let shapes = [
        (3136, 64, 256),
        (196, 256, 2304),
        (1, 1000, 512),
        (256, 256, 256),
    ];
    if std::env::args().any(|a| a == "profile") {
        profile_networks(if quick { 3 } else { 10 });
    } else if std::env::args().any(|a| a == "networks") {
        bench_networks(if quick { 2 } else { 5 }, if quick { 3 } else { 5 });
    } else if bench {
        bench_conv(reps, &layers);
        println!();
        bench_gemm(reps, &shapes);
    } else {
        bench_conv(reps, &layers[5..6]);
        bench_gemm(reps, &shapes[2..3]);
    }
}

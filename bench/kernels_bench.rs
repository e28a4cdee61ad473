//! Kernel and whole-network benchmark of the execution engine (single thread).
//!
//! Prints GEMM and conv GFLOP/s for representative shapes, then the latency of
//! ResNet-18 and MobileNetV2 (224x224, batch 1, random weights, BatchNorm folded into
//! conv bias, ReLU / ReLU6 and residual adds fused) built by hand, plus the time
//! `ModelPlan::new` takes (weight packing). Reference on this class of machine:
//! onnxruntime 1 thread ≈ 44 ms (ResNet-18) / 9 ms (MobileNetV2).
//!
//! Then a bidirectional LSTM (T=40, batch 1, input 512, hidden 256) three ways in
//! interleaved rounds: the scalar per-gate formulation (one dot product per gate and
//! step, kept here as the baseline), `kernels::rnn` (one GEMM for the input projection,
//! SIMD GEMV and gate math per step), and onnxruntime 1 thread on the same layer as an
//! ONNX model (`bench/ort_bench.py` through `scripts/venv.sh`), printing medians and
//! ratios.
//!
//! Run: `cargo bench --bench kernels_bench` (optionally `-- quick`, `-- rnn` for the
//! LSTM part alone, `-- conv` for the per-class conv table, `-- inplace` for the 1x1
//! convs with A in place; `--reps N` sets the timed runs per entry).

use std::sync::Arc;
use std::time::Instant;
use vnpu::exec::{ModelPlan, PlanOptions, Tile};
use vnpu::ir::{ConvGeom, DType, Graph, Node, Op, Placement, PostOp, Tensor, UnaryOp, Value};
use vnpu::kernels::rnn::{self, Cell, RnnOutputs, RnnParams, RnnShape, RnnWeights};
use vnpu::kernels::unary::PostOpRt;
use vnpu::kernels::{gemm, isa};

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

/// CPU time of this thread in seconds: on a loaded machine it leaves out the time the
/// thread waited for a core.
fn thread_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Best-of-`reps` thread CPU seconds of `f`.
fn best_cpu(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = thread_secs();
            f();
            thread_secs() - t
        })
        .fold(f64::INFINITY, f64::min)
}

fn bench_gemm(reps: usize) {
    println!("GEMM (packed A and B, 6x16 micro-kernel)");
    println!(
        "{:>6} {:>6} {:>6} {:>10} {:>10}",
        "M", "N", "K", "isa", "GFLOP/s"
    );
    for &(m, n, k) in &[
        (256, 256, 256),
        (64, 3136, 576),
        (128, 784, 1152),
        (512, 49, 4608),
        (1, 1000, 512),
    ] {
        let a = rand(m * k, 1);
        let b = rand(k * n, 2);
        let mut pa = vec![0.0; gemm::packed_a_len(m, k)];
        let mut pb = vec![0.0; gemm::packed_b_len(k, n)];
        gemm::pack_a(&a, k, 1, m, (k, gemm::k_depth(k, n)), 1.0, &mut pa);
        gemm::pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let mut c = vec![0.0; m * n];
        let mut scratch = vec![0.0; gemm::block_scratch_len(k, n)];
        let fill =
            |p: usize, j0: usize, len: usize, _: &mut [f32]| Some(&b[p * n + j0..p * n + j0 + len]);
        for isa in isa::available_isas() {
            let t = best(reps, || {
                let src = gemm::BSource::Packed(&pb);
                gemm::gemm_packed(
                    isa,
                    m,
                    n,
                    (k, gemm::k_depth(k, n)),
                    &pa,
                    src,
                    &mut [],
                    &mut c,
                    n,
                    (0, m),
                    (0, n),
                    &gemm::Epilogue::NONE,
                )
            });
            let t2 = best(reps, || {
                let src = gemm::BSource::Rows(&fill);
                gemm::gemm_packed(
                    isa,
                    m,
                    n,
                    (k, gemm::k_depth(k, n)),
                    &pa,
                    src,
                    &mut scratch,
                    &mut c,
                    n,
                    (0, m),
                    (0, n),
                    &gemm::Epilogue::NONE,
                )
            });
            let gf = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e9;
            println!(
                "{m:>6} {n:>6} {k:>6} {:>10} {:>10.1} {:>12.1}",
                format!("{isa:?}"),
                gf(t),
                gf(t2)
            );
        }
    }
}

/// Channels-last 1x1 convs as the fused MobileNetV2 blocks run them: A (the pixels'
/// channels) read in place, B packed, bias + ReLU6 in the epilogue (`-- inplace`):
/// best thread CPU time of `reps` runs, GFLOP/s, for each table.
fn bench_gemm_in_place(reps: usize) {
    println!("GEMM, A in place, bias + ReLU6 (MobileNetV2's projections and expansions)");
    println!(
        "{:>6} {:>6} {:>6} {:>10} {:>9} {:>8}",
        "M", "N", "K", "isa", "us", "GFLOP/s"
    );
    let post = [PostOpRt::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })];
    for &(m, n, k) in &[
        // A band of the fused blocks' rows (8 rows of 112 pixels, 12 of 56), so that A
        // and C stay in L2 as they do there.
        (896, 16, 32),
        (672, 24, 96),
        (672, 24, 144),
        (784, 32, 144),
        (896, 96, 16),
        (672, 144, 24),
        (784, 192, 32),
        // The K=16 expansion's shape at larger depths: the cost a tile that does not
        // grow with K shows as the gap.
        (896, 96, 64),
        (896, 96, 256),
    ] {
        let a = rand(m * k, 1);
        let b = rand(k * n, 2);
        let bias = rand(n, 3);
        let mut pb = vec![0.0; gemm::packed_b_len(k, n)];
        gemm::pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let mut c = vec![0.0; m * n];
        let epi = gemm::Epilogue {
            bias: Some(&bias),
            channel_is_row: false,
            post: &post,
            ..gemm::Epilogue::NONE
        };
        for isa in isa::available_isas() {
            let t = best_cpu(reps, || {
                gemm::gemm_with(
                    isa,
                    m,
                    n,
                    k,
                    gemm::ASource::InPlace { a: &a, lda: k },
                    gemm::BSource::Packed(&pb),
                    &mut [],
                    &mut c,
                    n,
                    (0, m),
                    (0, n),
                    &epi,
                )
            });
            println!(
                "{m:>6} {n:>6} {k:>6} {:>10} {:>9.1} {:>8.1}",
                format!("{isa:?}"),
                t * 1e6,
                2.0 * (m * n * k) as f64 / t / 1e9
            );
        }
    }
}

/// Single conv layers (best of `reps`), through the kernel API.
fn bench_conv(reps: usize) {
    use vnpu::kernels::conv::{conv2d, ConvShape, ConvWeights};
    println!("Conv layers");
    println!(
        "{:<34} {:>10} {:>10} {:>16}",
        "layer", "us", "GFLOP/s", "us +bias+relu6"
    );
    let layers: [(&str, usize, usize, usize, usize, usize, usize); 9] = [
        ("3x3 64->64 @56 (ResNet)", 64, 56, 64, 3, 1, 1),
        ("3x3 32->16 @224 (U-Net)", 32, 224, 16, 3, 1, 1),
        ("3x3 64->32 @112 (U-Net)", 64, 112, 32, 3, 1, 1),
        ("3x3 256->256 @14 (ResNet)", 256, 14, 256, 3, 1, 1),
        ("7x7/2 3->64 @224 (ResNet stem)", 3, 224, 64, 7, 2, 1),
        ("1x1 16->96 @112 (MobileNetV2)", 16, 112, 96, 1, 1, 1),
        ("1x1 96->24 @56 (MobileNetV2)", 96, 56, 24, 1, 1, 1),
        ("dw3x3 192 @28 (MobileNetV2)", 192, 28, 192, 3, 1, 192),
        ("dw3x3/2 96 @112 (MobileNetV2)", 96, 112, 96, 3, 2, 96),
    ];
    for (name, ci, hw, co, k, st, group) in layers {
        let s = ConvShape::square(ci, hw, co, k, st, group);
        let o = s.oh;
        let w = ConvWeights::pack(&s, &rand(co * ci / group * k * k, 3));
        let x = rand(ci * hw * hw, 4);
        let mut y = vec![0.0; co * o * o];
        let mut scratch = vec![0.0; s.scratch_len()];
        let isa = isa::best_isa();
        let none = gemm::Epilogue::NONE;
        let t = best(reps, || {
            conv2d(
                isa,
                &s,
                &w,
                &x,
                &mut y,
                0,
                co,
                (0, o * o),
                None,
                &none,
                &mut scratch,
            )
        });
        let bias = rand(co, 5);
        let post = [PostOpRt::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })];
        let epi = gemm::Epilogue {
            bias: Some(&bias),
            post: &post,
            ..gemm::Epilogue::NONE
        };
        let t2 = best(reps, || {
            conv2d(
                isa,
                &s,
                &w,
                &x,
                &mut y,
                0,
                co,
                (0, o * o),
                None,
                &epi,
                &mut scratch,
            )
        });
        let gf = 2.0 * s.macs() as f64 / t / 1e9;
        println!(
            "{name:<34} {:>10.1} {:>10.1} {:>16.1}",
            t * 1e6,
            gf,
            t2 * 1e6
        );
    }
}

/// One conv layer of the per-class table: name, Cin, H (= W), Cout, kernel, stride,
/// pad.
type ClassLayer = (&'static str, usize, usize, usize, usize, usize, usize);

/// The dense conv classes of the bench models (YOLOv8n at 640, the U-Net FPN):
/// 1x1, strided 3x3, 3-channel stems and a ConvTranspose, best-of-`reps` thread CPU µs and
/// GFLOP/s (2 * MACs / time) plain and with bias + SiLU fused (`-- conv`).
fn bench_conv_classes(reps: usize) {
    use vnpu::kernels::conv::{conv2d, ConvShape, ConvWeights, DeconvPlan};
    let layers: &[ClassLayer] = &[
        ("1x1 96->64 @80", 96, 80, 64, 1, 1, 0),
        ("1x1 192->128 @40", 192, 40, 128, 1, 1, 0),
        ("1x1 384->128 @40", 384, 40, 128, 1, 1, 0),
        ("1x1 192->64 @80", 192, 80, 64, 1, 1, 0),
        ("1x1 64->64 @80", 64, 80, 64, 1, 1, 0),
        ("1x1 48->32 @160", 48, 160, 32, 1, 1, 0),
        ("1x1 32->32 @160", 32, 160, 32, 1, 1, 0),
        ("1x1 80->80 @80", 80, 80, 80, 1, 1, 0),
        ("1x1 64->32 @112 (U-Net)", 64, 112, 32, 1, 1, 0),
        ("1x1 32->16 @112 (MNv2)", 32, 112, 16, 1, 1, 0),
        ("1x1 16->96 @112 (MNv2)", 16, 112, 96, 1, 1, 0),
        ("1x1 144->24 @56 (MNv2)", 144, 56, 24, 1, 1, 0),
        ("1x1 96->576 @14 (MNv2)", 96, 14, 576, 1, 1, 0),
        ("1x1 576->96 @14 (MNv2)", 576, 14, 96, 1, 1, 0),
        ("1x1 160->960 @7 (MNv2)", 160, 7, 960, 1, 1, 0),
        ("1x1 960->160 @7 (MNv2)", 960, 7, 160, 1, 1, 0),
        ("1x1 96->24 @56 (MNv2)", 96, 56, 24, 1, 1, 0),
        ("1x1 192->32 @28 (MNv2)", 192, 28, 32, 1, 1, 0),
        ("1x1 384->64 @14 (MNv2)", 384, 14, 64, 1, 1, 0),
        ("1x1 960->320 @7 (MNv2)", 960, 7, 320, 1, 1, 0),
        ("3x3/2 16->32 @320", 16, 320, 32, 3, 2, 1),
        ("3x3/2 32->64 @160", 32, 160, 64, 3, 2, 1),
        ("3x3/2 64->128 @80", 64, 80, 128, 3, 2, 1),
        ("3x3/2 128->256 @40", 128, 40, 256, 3, 2, 1),
        ("3x3/2 16->32 @224 (U-Net)", 16, 224, 32, 3, 2, 1),
        ("3x3/2 3->16 @640 (stem)", 3, 640, 16, 3, 2, 1),
        ("3x3/2 3->32 @224 (MNv2 stem)", 3, 224, 32, 3, 2, 1),
        ("3x3 3->16 @224 (U-Net stem)", 3, 224, 16, 3, 1, 1),
        ("3x3 32->16 @224 (U-Net)", 32, 224, 16, 3, 1, 1),
        ("3x3/2 24->48 @208 (YOLOX)", 24, 208, 48, 3, 2, 1),
        ("3x3/2 48->96 @104 (YOLOX)", 48, 104, 96, 3, 2, 1),
        ("3x3/2 192->384 @26 (YOLOX)", 192, 26, 384, 3, 2, 1),
        ("3x3 12->24 @208 (YOLOX stem)", 12, 208, 24, 3, 1, 1),
        ("1x1 48->48 @104 (YOLOX)", 48, 104, 48, 1, 1, 0),
        ("3x3/2 64->128 @56 (ResNet)", 64, 56, 128, 3, 2, 1),
        ("3x3/2 128->256 @28 (ResNet)", 128, 28, 256, 3, 2, 1),
        ("3x3/2 256->512 @14 (ResNet)", 256, 14, 512, 3, 2, 1),
        ("3x3 256->256 @14 (ResNet)", 256, 14, 256, 3, 1, 1),
        ("3x3 512->512 @7 (ResNet)", 512, 7, 512, 3, 1, 1),
    ];
    // `-- conv WORD`: only the layers whose name holds WORD.
    let only = std::env::args()
        .skip_while(|a| a != "conv")
        .nth(1)
        .filter(|a| !a.starts_with("--"));
    println!("Conv classes (1 thread, best of {reps}, thread CPU time)");
    println!(
        "{:<30} {:>9} {:>8} {:>9} {:>8}",
        "layer", "us", "GFLOP/s", "us+silu", "GFLOP/s"
    );
    let isa = isa::best_isa();
    let bias = rand(1024, 5);
    let silu = [PostOpRt::Unary(UnaryOp::Silu)];
    let epi = gemm::Epilogue {
        bias: Some(&bias),
        post: &silu,
        ..gemm::Epilogue::NONE
    };
    for &(name, ci, hw, co, k, st, p) in layers {
        if only.as_ref().is_some_and(|w| !name.contains(w.as_str())) {
            continue;
        }
        let o = (hw + 2 * p - k) / st + 1;
        // Pads given per layer (not always k / 2).
        let s = ConvShape {
            oh: o,
            ow: o,
            ph: p,
            pw: p,
            ..ConvShape::square(ci, hw, co, k, st, 1)
        };
        let w = ConvWeights::pack(&s, &rand(co * ci * k * k, 3));
        let x = rand(ci * hw * hw, 4);
        let mut y = vec![0.0; co * o * o];
        let mut scratch = vec![0.0; s.scratch_len()];
        let mut run = |e: &gemm::Epilogue<'_>| {
            best_cpu(reps, || {
                conv2d(
                    isa,
                    &s,
                    &w,
                    &x,
                    &mut y,
                    0,
                    co,
                    (0, o * o),
                    None,
                    e,
                    &mut scratch,
                )
            })
        };
        let t = run(&gemm::Epilogue::NONE);
        let t2 = run(&epi);
        let gf = |t: f64| 2.0 * s.macs() as f64 / t / 1e9;
        println!(
            "{name:<30} {:>9.1} {:>8.1} {:>9.1} {:>8.1}",
            t * 1e6,
            gf(t),
            t2 * 1e6,
            gf(t2)
        );
    }
    // ConvTranspose k4 s2 p1 32->16 @112 (U-Net) and k2 s2 128->64 @28.
    for &(name, ci, hw, co, k) in &[
        (
            "deconv k4/2 32->16 @112",
            32usize,
            112usize,
            16usize,
            4usize,
        ),
        ("deconv k2/2 128->64 @28", 128, 28, 64, 2),
        ("deconv k2/2 64->64 @160 (DBNet)", 64, 160, 64, 2),
        ("deconv k2/2 64->1 @320 (DBNet)", 64, 320, 1, 2),
    ] {
        if only.as_ref().is_some_and(|w| !name.contains(w.as_str())) {
            continue;
        }
        let p = (k - 2) / 2;
        let o = (hw - 1) * 2 + k - 2 * p;
        let s = ConvShape {
            n: 1,
            c_in: ci,
            h: hw,
            w: hw,
            c_out: co,
            oh: o,
            ow: o,
            kh: k,
            kw: k,
            sh: 2,
            sw: 2,
            dh: 1,
            dw: 1,
            ph: p,
            pw: p,
            group: 1,
        };
        let plan = DeconvPlan::new(s, &rand(ci * co * k * k, 3));
        let x = rand(ci * hw * hw, 4);
        let mut y = vec![0.0; co * o * o];
        let mut scratch = vec![0.0; plan.scratch_len()];
        let epi = gemm::Epilogue {
            bias: Some(&bias[..co]),
            ..gemm::Epilogue::NONE
        };
        let t = best_cpu(reps, || {
            plan.run(isa, &x, &mut y, (0, co), (0, o), &epi, &mut scratch)
        });
        let gf = 2.0 * (ci * hw * hw * co * k * k) as f64 / t / 1e9;
        println!("{name:<30} {:>9.1} {:>8.1}", t * 1e6, gf);
    }
}

/// Single convs as the plan runs them (its algorithm choice, packing and epilogue;
/// bias + ReLU fused): best thread CPU time of `reps` runs of a one-node model (and the
/// median wall time), for ResNet-18's deep convs and the stride-2 convs of the
/// detectors. `-- plan WORD` keeps the layers whose name holds WORD; `-- plan cold`
/// evicts the caches before each run, `-- plan l3` only L2 (8 MB written).
fn bench_plan_convs(reps: usize) {
    let args: Vec<String> = std::env::args().skip_while(|a| a != "plan").collect();
    let cold = args.iter().any(|a| a == "cold");
    let l3 = args.iter().any(|a| a == "l3");
    let only = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--") && *a != "cold" && *a != "l3");
    // `cold`: before each timed run, read a buffer far larger than the caches, so that
    // the weights come from memory as they do inside a network of tens of MB of them.
    // `l3`: a buffer of twice L2 instead, so that the operands come from the L3 (as in
    // a network whose layers' weights and activations evict each other from L2).
    let flush_len = if cold {
        256 << 20
    } else if l3 {
        8 << 20
    } else {
        0
    };
    let mut flush = vec![0u8; flush_len];
    let mut evict = || {
        for (i, b) in flush.iter_mut().step_by(64).enumerate() {
            *b = b.wrapping_add(i as u8);
        }
        std::hint::black_box(&flush);
    };
    // (name, ci, h, co, k, stride, w): w 0 for a square input.
    let layers: &[(&str, usize, usize, usize, usize, usize, usize)] = &[
        ("7x7/2 3->64 @224 (ResNet stem)", 3, 224, 64, 7, 2, 0),
        ("3x3/2 64->128 @56 (ResNet)", 64, 56, 128, 3, 2, 0),
        ("3x3 128->128 @28 (ResNet)", 128, 28, 128, 3, 1, 0),
        ("3x3/2 128->256 @28 (ResNet)", 128, 28, 256, 3, 2, 0),
        ("3x3 256->256 @14 (ResNet)", 256, 14, 256, 3, 1, 0),
        ("3x3/2 256->512 @14 (ResNet)", 256, 14, 512, 3, 2, 0),
        ("3x3 512->512 @7 (ResNet)", 512, 7, 512, 3, 1, 0),
        ("1x1/2 256->512 @14 (ResNet)", 256, 14, 512, 1, 2, 0),
        // Planar 1x1 convs of the YOLO-style necks and CSP blocks.
        ("1x1 24->24 @104 (YOLOX)", 24, 104, 24, 1, 1, 0),
        ("1x1 48->48 @104 (YOLOX)", 48, 104, 48, 1, 1, 0),
        ("1x1 96->48 @52 (YOLOX)", 96, 52, 48, 1, 1, 0),
        ("1x1 192->48 @52 (YOLOX)", 192, 52, 48, 1, 1, 0),
        ("1x1 96->96 @26 (YOLOX)", 96, 26, 96, 1, 1, 0),
        ("1x1 384->192 @13 (YOLOX)", 384, 13, 192, 1, 1, 0),
        ("3x3/2 16->32 @320 (DBNet)", 16, 320, 32, 3, 2, 0),
        ("3x3/2 32->64 @160 (YOLO)", 32, 160, 64, 3, 2, 0),
        ("3x3/2 48->96 @104 (YOLOX)", 48, 104, 96, 3, 2, 0),
        ("3x3/2 64->128 @80 (YOLO)", 64, 80, 128, 3, 2, 0),
        // The 224x224 detector's stride-2 convs past its stem (as much work each).
        ("3x3/2 16->32 @112 (detector)", 16, 112, 32, 3, 2, 0),
        ("3x3/2 64->128 @28 (detector)", 64, 28, 128, 3, 2, 0),
        ("3x3/2 128->256 @14 (detector)", 128, 14, 256, 3, 2, 0),
        ("3x3 16->16 @160 (DBNet)", 16, 160, 16, 3, 1, 0),
        ("3x3 32->32 @112", 32, 112, 32, 3, 1, 0),
        ("3x3 3->64 @112 (CRNN-like stem)", 3, 112, 64, 3, 1, 0),
        ("3x3 3->16 @224 (U-Net stem)", 3, 224, 16, 3, 1, 0),
        ("3x3 12->24 @208 (YOLOX stem)", 12, 208, 24, 3, 1, 0),
        ("3x3 16->16 @56", 16, 56, 16, 3, 1, 0),
        ("3x3 8->16 @224", 8, 224, 16, 3, 1, 0),
        (
            "3x3/2 3->32 @224 (MNv2 stem shape, planar)",
            3,
            224,
            32,
            3,
            2,
            0,
        ),
        ("3x3/2 3->16 @640 (YOLOv8n stem)", 3, 640, 16, 3, 2, 0),
        ("3x3/2 16->32 @224 (U-Net enc2)", 16, 224, 32, 3, 2, 0),
        ("3x3/2 32->64 @112 (U-Net enc3)", 32, 112, 64, 3, 2, 0),
        ("3x3/2 64->128 @56 (U-Net enc4)", 64, 56, 128, 3, 2, 0),
        ("3x3 32->16 @224 (U-Net dec1)", 32, 224, 16, 3, 1, 0),
        ("3x3 64->32 @112 (U-Net dec2)", 64, 112, 32, 3, 1, 0),
        ("3x3 128->64 @56 (U-Net dec3)", 128, 56, 64, 3, 1, 0),
        // A max pool (its column: input GB/s).
        ("maxpool 3x3/2 64 @112 (ResNet)", 64, 112, 64, 3, 2, 0),
        // Kernel side 0: a one-row Gemm (a classifier), ci -> co.
        ("fc 1280->1000 (MNv2)", 1280, 1, 1000, 0, 1, 0),
        ("fc 512->1000 (ResNet)", 512, 1, 1000, 0, 1, 0),
        // Stride 0: a MatMul `[hw, ci] x [ci, co]` (a channels-last 1x1 conv over hw
        // positions, or a sequence head).
        ("mm 112^2 16->96 (MNv2 expand)", 16, 12544, 96, 1, 0, 0),
        ("mm 448 16->96 (4 rows of 112)", 16, 448, 96, 1, 0, 0),
        ("mm 112^2 32->16 (MNv2 project)", 32, 12544, 16, 1, 0, 0),
        ("mm 56^2 96->24 (MNv2 project)", 96, 3136, 24, 1, 0, 0),
        ("mm 56^2 24->144 (MNv2 expand)", 24, 3136, 144, 1, 0, 0),
        ("mm 56^2 144->24 (MNv2 project)", 144, 3136, 24, 1, 0, 0),
        ("mm 28^2 32->192 (MNv2 expand)", 32, 784, 192, 1, 0, 0),
        ("mm 28^2 192->32 (MNv2 project)", 192, 784, 32, 1, 0, 0),
        ("mm 14^2 64->384 (MNv2 expand)", 64, 196, 384, 1, 0, 0),
        ("mm 14^2 96->576 (MNv2 expand)", 96, 196, 576, 1, 0, 0),
        ("mm 14^2 576->96 (MNv2 project)", 576, 196, 96, 1, 0, 0),
        ("mm 7^2 960->320 (MNv2 project)", 960, 49, 320, 1, 0, 0),
        ("mm 7^2 320->1280 (MNv2 last)", 320, 49, 1280, 1, 0, 0),
        ("mm 7^2 160->960 (MNv2 expand)", 160, 49, 960, 1, 0, 0),
        ("mm 80 512->6625 (CRNN head)", 512, 80, 6625, 1, 0, 0),
        // SVTR-T's token MLPs and projections (240 / 480 / 960 tokens).
        ("mm 240 256->1024 (SVTR fc1)", 256, 240, 1024, 1, 0, 0),
        ("mm 240 1024->256 (SVTR fc2)", 1024, 240, 256, 1, 0, 0),
        ("mm 240 256->768 (SVTR qkv)", 256, 240, 768, 1, 0, 0),
        ("mm 480 128->512 (SVTR fc1)", 128, 480, 512, 1, 0, 0),
        ("mm 480 512->128 (SVTR fc2)", 512, 480, 128, 1, 0, 0),
        ("mm 960 64->256 (SVTR fc1)", 64, 960, 256, 1, 0, 0),
        // A CRNN's thin 3x3 stages (height x width).
        ("3x3 128->256 @8x80 (CRNN)", 128, 8, 256, 3, 1, 80),
        ("3x3 256->256 @8x80 (CRNN)", 256, 8, 256, 3, 1, 80),
        ("3x3 256->256 @4x80 (CRNN)", 256, 4, 256, 3, 1, 80),
    ];
    println!("Convs through the plan (1 thread, best of {reps}, thread CPU time, cold: {cold}, L2 evicted: {l3})");
    println!(
        "{:<30} {:>9} {:>8} {:>9}",
        "layer", "us", "GFLOP/s", "wall p50"
    );
    for &(name, ci, hw, co, k, st, wd) in layers {
        let wd = if wd == 0 { hw } else { wd };
        if only.as_ref().is_some_and(|w| !name.contains(w.as_str())) {
            continue;
        }
        let pool = name.starts_with("maxpool");
        let y = if pool {
            let (mut n, x) = Net::with_input(vec![1, ci, hw, hw]);
            let geom = ConvGeom {
                kernel: vec![k, k],
                strides: vec![st, st],
                dilations: vec![1, 1],
                pads: vec![k / 2; 4],
                auto_pad: None,
            };
            let o = (hw + 2 * (k / 2) - k) / st + 1;
            let op = Op::MaxPool {
                geom,
                ceil_mode: false,
            };
            let y = n.node(op, vec![Some(x)], vec![1, ci, o, o]);
            (n, y)
        } else if k == 0 {
            let (mut n, x) = Net::with_input(vec![1, ci]);
            let y = n.fc(x, co);
            (n, y)
        } else if st == 0 {
            let (mut n, x) = Net::with_input(vec![hw, ci]);
            let w = n.konst(vec![ci, co]);
            let op = Op::MatMul { post: vec![] };
            let y = n.node(op, vec![Some(x), Some(w)], vec![hw, co]);
            (n, y)
        } else {
            let (mut n, x) = Net::with_input(vec![1, ci, hw, wd]);
            let y = n.conv(x, co, k, st, 1, Some(UnaryOp::Relu), None);
            (n, y)
        };
        let (mut n, y) = y;
        n.g.outputs.push(y);
        let plan = one_thread_plan(Arc::new(n.g), false);
        let mut state = plan.new_state();
        let in_len = match (k, st) {
            (0, _) => ci,
            (_, 0) => hw * ci,
            _ => ci * hw * wd,
        };
        let input = rand(in_len, 99);
        plan.set_input(&mut state, 0, bytemuck::cast_slice(&input))
            .expect("input");
        let (mut t, mut wall) = (f64::INFINITY, Vec::new());
        for _ in 0..reps {
            evict();
            let (t0, w0) = (thread_secs(), Instant::now());
            plan.run_all(&mut state).expect("run");
            t = t.min(thread_secs() - t0);
            wall.push(w0.elapsed().as_secs_f64());
        }
        wall.sort_by(f64::total_cmp);
        let wall_p50 = wall[wall.len() / 2];
        let positions = match (k, st) {
            (0, _) => 1,
            (_, 0) => hw,
            _ => ((hw + 2 * (k / 2) - k) / st + 1) * ((wd + 2 * (k / 2) - k) / st + 1),
        };
        let gf = if pool {
            (4 * ci * hw * hw) as f64 / t / 1e9
        } else {
            2.0 * (ci * co * k.max(1) * k.max(1) * positions) as f64 / t / 1e9
        };
        println!(
            "{name:<30} {:>9.1} {:>8.1} {:>9.1}",
            t * 1e6,
            gf,
            wall_p50 * 1e6
        );
    }
}

/// The plan of `g` with one thread (per-node profile with `profile`).
fn one_thread_plan(g: Arc<Graph>, profile: bool) -> ModelPlan {
    let opts = PlanOptions {
        intra_op_threads: 1,
        profile,
        ..Default::default()
    };
    ModelPlan::new(g, &opts).expect("plan")
}

/// Hand-built CNN graphs.
struct Net {
    g: Graph,
    seed: u64,
}

impl Net {
    fn new() -> (Net, usize) {
        Net::with_input(vec![1, 3, 224, 224])
    }

    fn with_input(shape: Vec<usize>) -> (Net, usize) {
        let mut g = Graph {
            name: "net".into(),
            ..Graph::default()
        };
        let x = g.add_value(Value {
            name: "input".into(),
            dtype: DType::F32,
            shape: Some(shape),
            declared: None,
            konst: None,
        });
        g.inputs.push(x);
        (Net { g, seed: 10 }, x)
    }

    fn shape(&self, v: usize) -> Vec<usize> {
        self.g.values[v].shape.clone().unwrap_or_default()
    }

    fn konst(&mut self, shape: Vec<usize>) -> usize {
        self.seed += 1;
        let n = shape.iter().product();
        let name = format!("w{}", self.seed);
        self.g
            .add_const(name, Tensor::from_f32(shape, rand(n, self.seed)))
    }

    fn node(&mut self, op: Op, inputs: Vec<Option<usize>>, shape: Vec<usize>) -> usize {
        let name = format!("t{}", self.g.values.len());
        let y = self.g.add_value(Value {
            name: name.clone(),
            dtype: DType::F32,
            shape: Some(shape),
            declared: None,
            konst: None,
        });
        self.g.nodes.push(Node {
            name,
            op,
            inputs,
            outputs: vec![y],
            absorbed: vec![],
            placement: Some(Placement::Bpu),
        });
        y
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        x: usize,
        co: usize,
        k: usize,
        s: usize,
        group: usize,
        act: Option<UnaryOp>,
        residual: Option<usize>,
    ) -> usize {
        let xs = self.shape(x);
        let p = k / 2;
        let (oh, ow) = ((xs[2] + 2 * p - k) / s + 1, (xs[3] + 2 * p - k) / s + 1);
        let w = self.konst(vec![co, xs[1] / group, k, k]);
        let b = self.konst(vec![co]);
        let mut post = Vec::new();
        let mut inputs = vec![Some(x), Some(w), Some(b)];
        if let Some(r) = residual {
            post.push(PostOp::AddInput { input: 3 });
            inputs.push(Some(r));
        }
        if let Some(a) = act {
            post.push(PostOp::Unary(a));
        }
        let geom = ConvGeom {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![p; 4],
            auto_pad: None,
        };
        self.node(Op::Conv { geom, group, post }, inputs, vec![1, co, oh, ow])
    }

    fn head(&mut self, x: usize) {
        let c = self.shape(x)[1];
        let gp = self.node(Op::GlobalAveragePool, vec![Some(x)], vec![1, c, 1, 1]);
        let shape = self
            .g
            .add_const("flat", Tensor::from_i64(vec![2], vec![1, c as i64]));
        let fl = self.node(
            Op::Reshape { allowzero: false },
            vec![Some(gp), Some(shape)],
            vec![1, c],
        );
        let y = self.fc(fl, 1000);
        self.g.outputs.push(y);
    }

    /// `Gemm(x, W^T, b)` of `[1, c]` input `x` to `co` outputs.
    fn fc(&mut self, x: usize, co: usize) -> usize {
        let c = self.shape(x)[1];
        let w = self.konst(vec![co, c]);
        let b = self.konst(vec![co]);
        let op = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
            post: vec![],
        };
        self.node(op, vec![Some(x), Some(w), Some(b)], vec![1, co])
    }
}

fn resnet18() -> Graph {
    let (mut n, x) = Net::new();
    let relu = Some(UnaryOp::Relu);
    let mut y = n.conv(x, 64, 7, 2, 1, relu, None);
    let geom = ConvGeom {
        kernel: vec![3, 3],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pads: vec![1; 4],
        auto_pad: None,
    };
    y = n.node(
        Op::MaxPool {
            geom,
            ceil_mode: false,
        },
        vec![Some(y)],
        vec![1, 64, 56, 56],
    );
    for (stage, &c) in [64usize, 128, 256, 512].iter().enumerate() {
        for block in 0..2 {
            let s = if stage > 0 && block == 0 { 2 } else { 1 };
            let short = if s == 2 {
                n.conv(y, c, 1, 2, 1, None, None)
            } else {
                y
            };
            let h = n.conv(y, c, 3, s, 1, relu, None);
            y = n.conv(h, c, 3, 1, 1, relu, Some(short));
        }
    }
    n.head(y);
    n.g
}

fn mobilenet_v2() -> Graph {
    let (mut n, x) = Net::new();
    let relu6 = Some(UnaryOp::Clip { min: 0.0, max: 6.0 });
    let mut y = n.conv(x, 32, 3, 2, 1, relu6, None);
    let cfg = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    for &(t, c, reps, s) in &cfg {
        for i in 0..reps {
            let stride = if i == 0 { s } else { 1 };
            let cin = n.shape(y)[1];
            let hidden = cin * t;
            let e = if t != 1 {
                n.conv(y, hidden, 1, 1, 1, relu6, None)
            } else {
                y
            };
            let d = n.conv(e, hidden, 3, stride, hidden, relu6, None);
            let res = (stride == 1 && cin == c).then_some(y);
            y = n.conv(d, c, 1, 1, 1, None, res);
        }
    }
    y = n.conv(y, 1280, 1, 1, 1, relu6, None);
    n.head(y);
    n.g
}

fn bench_net(name: &str, g: Graph, reps: usize, ort_ms: f64) {
    let g = Arc::new(g);
    let t = Instant::now();
    let plan = one_thread_plan(g.clone(), false);
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut st = plan.new_state();
    let x = rand(3 * 224 * 224, 99);
    plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
        .expect("input");
    let secs = best(reps, || plan.run_all(&mut st).expect("run"));
    let macs: usize = (0..g.nodes.len()).map(|i| plan.node_macs(i)).sum();
    println!(
        "{name:<12} {:>8.2} ms  {:>6.1} GFLOP/s  (ort ref {ort_ms:.0} ms, ratio {:.2})  plan build {build_ms:.0} ms, arena {:.1} MiB",
        secs * 1e3,
        2.0 * macs as f64 / secs / 1e9,
        secs * 1e3 / ort_ms,
        plan.arena_bytes() as f64 / (1 << 20) as f64,
    );
    // Tile overhead: every node split into up to 8 tiles vs whole, runs interleaved.
    let (mut whole, mut tiled) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        whole = whole.min(best(1, || plan.run_all(&mut st).expect("run")));
        tiled = tiled.min(best(1, || {
            for node in 0..g.nodes.len() {
                let count = plan.tiles_for(node).min(8);
                for index in 0..count {
                    plan.run_node(&mut st, node, Tile { index, count })
                        .expect("tile");
                }
            }
        }));
    }
    println!(
        "{:<12} tiles (<= 8 per node): {:.2} ms vs whole {:.2} ms ({:+.1} %)",
        "",
        tiled * 1e3,
        whole * 1e3,
        (tiled / whole - 1.0) * 100.0
    );
    if std::env::args().any(|a| a == "profile") {
        let pplan = one_thread_plan(g.clone(), true);
        let mut st = pplan.new_state();
        pplan
            .set_input(&mut st, 0, bytemuck::cast_slice(&x))
            .expect("input");
        for _ in 0..reps {
            pplan.run_all(&mut st).expect("run");
        }
        for t in pplan.profile(&st) {
            let macs = pplan.node_macs(t.node);
            let us = t.micros / t.calls.max(1) as f64;
            println!(
                "  {:>3} {:<18} {:>9.1} us {:>7.1} GFLOP/s",
                t.node,
                t.op,
                us,
                2.0 * macs as f64 / us / 1e3
            );
        }
    }
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The scalar LSTM formulation (the baseline): per step, each of the `4H` gates is two
/// dot products (input and recurrent) and the cell update runs element by element.
fn lstm_scalar(s: &RnnShape, x: &[f32], w: &[f32], r: &[f32], b: &[f32], y: &mut [f32]) {
    let (hs, inp) = (s.hidden, s.input);
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let sig = vnpu::kernels::unary::sigmoid;
    let (mut h, mut c, mut hn, mut g) = (
        vec![0.0; hs],
        vec![0.0; hs],
        vec![0.0; hs],
        vec![0.0; 4 * hs],
    );
    for d in 0..s.dirs {
        let w = &w[d * 4 * hs * inp..];
        let r = &r[d * 4 * hs * hs..];
        h.fill(0.0);
        c.fill(0.0);
        for step in 0..s.seq {
            let t = if d == 1 { s.seq - 1 - step } else { step };
            let xt = &x[t * inp..(t + 1) * inp];
            for (k, gv) in g.iter_mut().enumerate() {
                *gv = dot(&w[k * inp..(k + 1) * inp], xt)
                    + dot(&r[k * hs..(k + 1) * hs], &h)
                    + b[d * 8 * hs + k]
                    + b[d * 8 * hs + 4 * hs + k];
            }
            for j in 0..hs {
                let i = sig(g[j]);
                let f = sig(g[2 * hs + j]);
                c[j] = f * c[j] + i * g[3 * hs + j].tanh();
                hn[j] = sig(g[hs + j]) * c[j].tanh();
            }
            h.copy_from_slice(&hn);
            y[(t * 2 + d) * hs..(t * 2 + d + 1) * hs].copy_from_slice(&h);
        }
    }
}

/// Writes the bidirectional LSTM as an ONNX model (through the project's venv) and
/// returns its path, or `None` when Python is unavailable.
fn bilstm_onnx(s: &RnnShape) -> Option<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!("vnpu_bilstm_{}.onnx", std::process::id()));
    let script = r#"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as P
T, I, H, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
f = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=H, direction="bidirectional")
g = helper.make_graph([node], "bilstm", [helper.make_tensor_value_info("X", P.FLOAT, [T, 1, I])],
    [helper.make_tensor_value_info("Y", P.FLOAT, [T, 2, 1, H])],
    [numpy_helper.from_array(f(2, 4 * H, I), "W"), numpy_helper.from_array(f(2, 4 * H, H), "R"),
     numpy_helper.from_array(f(2, 8 * H), "B")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
m.ir_version = 8
onnx.save(m, path)
"#;
    let ok = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/venv.sh"))
        .args(["python", "-c", script])
        .args([s.seq, s.input, s.hidden].map(|v| v.to_string()))
        .arg(&path)
        .status()
        .map(|st| st.success())
        .unwrap_or(false);
    ok.then_some(path)
}

/// Median milliseconds of onnxruntime (1 thread) on `path`, `runs` runs.
fn ort_ms(path: &std::path::Path, runs: usize) -> Option<f64> {
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/venv.sh"))
        .args(["python", "bench/ort_bench.py"])
        .arg(path)
        .args(["--runs", &runs.to_string()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.lines().next()?).ok()?;
    v["median_ms"].as_f64()
}

fn bench_rnn(rounds: usize) {
    let s = RnnShape {
        seq: 40,
        batch: 1,
        input: 512,
        hidden: 256,
        dirs: 2,
        reverse: false,
        batch_major: false,
    };
    let (g, hs) = (4, s.hidden);
    let x = rand(s.seq * s.input, 1);
    let w = rand(2 * g * hs * s.input, 2);
    let r = rand(2 * g * hs * hs, 3);
    let b = rand(2 * 2 * g * hs, 4);
    let wts = RnnWeights::pack(&s, Cell::Lstm, &w);
    let mut scratch = vec![0.0; s.packed_scratch_len(g)];
    let (mut y1, mut y2) = (vec![0.0; s.seq * 2 * hs], vec![0.0; s.seq * 2 * hs]);
    let prm = RnnParams {
        w: &w,
        r: &r,
        b: &b,
        h0: &[],
        c0: &[],
        p: &[],
    };
    let onnx = bilstm_onnx(&s);
    let (mut scalar, mut ours, mut theirs) = (vec![], vec![], vec![]);
    for _ in 0..rounds.max(1) {
        scalar.push(best(1, || lstm_scalar(&s, &x, &w, &r, &b, &mut y1)) * 1e3);
        for _ in 0..5 {
            ours.push(
                best(1, || {
                    let mut o = RnnOutputs {
                        y: &mut y2,
                        yh: &mut [],
                        yc: &mut [],
                    };
                    rnn::run(&s, Cell::Lstm, Some(&wts), &x, &prm, &mut o, &mut scratch)
                }) * 1e3,
            );
        }
        if let Some(ms) = onnx.as_deref().and_then(|p| ort_ms(p, 50)) {
            theirs.push(ms);
        }
    }
    let worst = y1
        .iter()
        .zip(&y2)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let (sc, us) = (median(&mut scalar), median(&mut ours));
    println!(
        "BiLSTM T=40 I=512 H=256 batch 1 (medians of {} rounds)",
        rounds.max(1)
    );
    println!("  scalar formulation {sc:>8.2} ms");
    println!(
        "  kernels::rnn       {us:>8.2} ms   ({:.1}x faster; max |diff| {worst:.1e})",
        sc / us
    );
    if theirs.is_empty() {
        println!("  onnxruntime        unavailable (no venv)");
    } else {
        let th = median(&mut theirs);
        println!(
            "  onnxruntime 1 thr  {th:>8.2} ms   ratios: scalar/ort {:.2}, rnn/ort {:.2}",
            sc / th,
            us / th
        );
    }
    if let Some(p) = onnx {
        let _ = std::fs::remove_file(p);
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    // `--reps N`: timed runs per entry (for a profiler's samples).
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if quick { 3 } else { 10 });
    println!("kernel table: {}", vnpu::kernels::table().name);
    if std::env::args().any(|a| a == "conv") {
        bench_conv_classes(reps);
        return;
    }
    if std::env::args().any(|a| a == "inplace") {
        bench_gemm_in_place(reps * 3);
        return;
    }
    if std::env::args().any(|a| a == "rnn") {
        bench_rnn(reps);
        return;
    }
    if std::env::args().any(|a| a == "plan") {
        bench_plan_convs(reps * 3);
        return;
    }
    bench_gemm(reps);
    println!();
    bench_conv(reps * 3);
    println!();
    bench_net("ResNet-18", resnet18(), reps, 44.0);
    bench_net("MobileNetV2", mobilenet_v2(), reps, 9.0);
    println!();
    bench_rnn(reps);
}

//! bf16 compute at plan level: a ResNet-like stack (7x7/2 stem, 3x3/2, 3x3/1 by f32
//! Winograd F(4x4), 1x1, grouped 3x3, 3x3/2, 3x3/1 by bf16 Winograd F(2x2), MatMul with
//! constant weights) in bf16 stays within a bound of its f32 result, runs by tiles
//! bit-identically to whole, and the default precision is f32.

use super::tests::{geom, B};
use super::*;
use crate::ir::{Op, PostOp, UnaryOp};
use crate::kernels::testutil::rand_vec;

/// Weights scaled like a He initialisation (variance 2 / fan-in), so that activations
/// keep their scale through the stack.
fn he(n: usize, fan_in: usize, seed: u64) -> Vec<f32> {
    let s = (6.0 / fan_in as f32).sqrt();
    rand_vec(n, seed).into_iter().map(|x| x * s).collect()
}

/// The stack; returns the graph and its input.
fn stack() -> (Graph, Vec<f32>) {
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 3, 64, 64]);
    let relu = || vec![PostOp::Unary(UnaryOp::Relu)];
    // (input, cin, cout, k, stride, group, hw_out, seed)
    let conv = |b: &mut B,
                x,
                ci: usize,
                co: usize,
                k: usize,
                st: usize,
                grp: usize,
                o: usize,
                seed: u64| {
        let w = b.kf(
            &[co, ci / grp, k, k],
            he(co * ci / grp * k * k, ci / grp * k * k, seed),
        );
        let bias = b.kf(
            &[co],
            rand_vec(co, seed + 100).iter().map(|v| v * 0.1).collect(),
        );
        let p = k / 2;
        let op = Op::Conv {
            geom: geom(&[k, k], &[st, st], &[p, p, p, p]),
            group: grp,
            post: relu(),
        };
        b.n1(op, &[x, w, bias], DType::F32, &[1, co, o, o])
    };
    let y = conv(&mut b, x, 3, 32, 7, 2, 1, 32, 1);
    let y = conv(&mut b, y, 32, 64, 3, 2, 1, 16, 2);
    let y = conv(&mut b, y, 64, 64, 3, 1, 1, 16, 3);
    let y = conv(&mut b, y, 64, 128, 1, 1, 1, 16, 4);
    let y = conv(&mut b, y, 128, 128, 3, 1, 4, 16, 5);
    let y = conv(&mut b, y, 128, 128, 3, 2, 1, 8, 8);
    // 3x3 stride 1 on an 8x8 plane: Winograd F(2x2, 3x3), point GEMMs in bf16.
    let y = conv(&mut b, y, 128, 128, 3, 1, 1, 8, 9);
    let w = b.kf(&[8, 40], he(8 * 40, 8, 6));
    let y = b.n1(
        Op::MatMul { post: vec![] },
        &[y, w],
        DType::F32,
        &[1, 128, 8, 40],
    );
    b.out(y);
    (b.g, rand_vec(3 * 64 * 64, 7))
}

/// Runs `g` planned with `precision`, every node whole or split into its tiles.
fn run(g: &Arc<Graph>, x: &[f32], precision: Precision, tiled: bool) -> Vec<f32> {
    let opts = PlanOptions {
        precision,
        ..Default::default()
    };
    let plan = ModelPlan::new(g.clone(), &opts).expect("plan");
    let mut st = plan.new_state();
    plan.set_input(&mut st, 0, bytemuck::cast_slice(x))
        .expect("input");
    for n in 0..g.nodes.len() {
        let count = if tiled { plan.tiles_for(n) } else { 1 };
        for index in 0..count {
            plan.run_node(&mut st, n, Tile { index, count })
                .expect("run");
        }
    }
    let mut out = vec![0u8; plan.output_len(0)];
    plan.read_output(&st, 0, &mut out).expect("output");
    out.chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Largest |a - b| over the largest |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// bf16 keeps 8 significant bits: each operand is rounded with a relative error of at most
/// 2^-9, so each product is off by at most ~2^-8 of its size, and a layer's output by at
/// most ~2^-8 of the sum of its terms' sizes; errors of independent roundings mostly
/// cancel in long sums. Eight layers (seven in bf16, one of them by Winograd F(2x2),
/// whose transforms add at most 3 terms each way, a few times a direct layer's error;
/// each layer's error carried through the next) stay well inside 2^-5 of the output's
/// range; the f32 layer in between adds nothing measurable.
#[test]
fn bf16_stack_stays_close_to_f32() {
    if crate::kernels::bf16::native().is_none() {
        eprintln!("skipped: this CPU lacks AVX512_BF16");
        return;
    }
    // The 8x8 3x3/1 conv takes Winograd F(2x2), whose point GEMMs a bf16 plan runs in
    // bf16 (the 16x16 one F(4x4), which stays f32).
    let wino = |c, hw| {
        let s = crate::kernels::conv::ConvShape::square(c, hw, c, 3, 1, 1);
        let p = crate::kernels::conv::WinogradPlan::tile_for(&s);
        crate::compile::cost::winograd_wins(&s).then_some(p)
    };
    assert_eq!((wino(128, 8), wino(64, 16)), (Some(2), Some(4)));
    let (g, x) = stack();
    let g = Arc::new(g);
    let f = run(&g, &x, Precision::F32, false);
    let h = run(&g, &x, Precision::Bf16, false);
    let err = rel_err(&h, &f);
    eprintln!("bf16 vs f32: max error {err:e} of the output's range");
    assert!(err <= 2f32.powi(-5), "bf16 error {err}");
    // The bf16 path ran (else the results would be the f32 bits).
    assert!(err > 0.0, "bf16 gave the f32 bits");
    assert_eq!(
        run(&g, &x, Precision::Bf16, true),
        h,
        "bf16 by tiles differs from whole"
    );
}

/// A one-row product with constant weights (a classifier) runs in bf16 where the bf16
/// GEMM is the wide (AMX) one, which streams half the weight bytes; elsewhere it stays f32.
#[test]
fn one_row_products_run_in_bf16_on_the_wide_gemm() {
    let Some(tab) = crate::kernels::bf16::native() else {
        eprintln!("skipped: this CPU lacks AVX512_BF16");
        return;
    };
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 256]);
    let w = b.kf(&[256, 200], he(256 * 200, 256, 11));
    let y = b.n1(Op::MatMul { post: vec![] }, &[x, w], DType::F32, &[1, 200]);
    b.out(y);
    let g = Arc::new(b.g);
    let x = rand_vec(256, 12);
    let f = run(&g, &x, Precision::F32, false);
    let h = run(&g, &x, Precision::Bf16, false);
    if tab.wide_gemm.is_some() {
        let err = rel_err(&h, &f);
        assert!(err > 0.0 && err <= 2f32.powi(-6), "bf16 error {err}");
    } else {
        assert_eq!(h, f, "a one-row product stays f32 off the wide GEMM");
    }
    assert_eq!(
        run(&g, &x, Precision::Bf16, true),
        h,
        "tiles differ from whole"
    );
}

#[test]
fn default_precision_is_f32() {
    let (g, x) = stack();
    let g = Arc::new(g);
    let opts = PlanOptions::from_lookup(|_| None).expect("defaults");
    assert_eq!(opts.precision, Precision::F32);
    assert_eq!(opts, PlanOptions::default());
    let f = run(&g, &x, Precision::F32, false);
    assert_eq!(run(&g, &x, opts.precision, false), f);
    assert_eq!(run(&g, &x, Precision::F32, true), f);
}

#[test]
fn precision_from_the_environment() {
    let look = |v: &'static str| move |n: &str| (n == "VNPU_PRECISION").then(|| v.to_string());
    for (v, want) in [
        ("f32", Precision::F32),
        ("", Precision::F32),
        (" bf16 ", Precision::Bf16),
    ] {
        assert_eq!(PlanOptions::from_lookup(look(v)).expect(v).precision, want);
    }
    match PlanOptions::from_lookup(look("fp16")) {
        Err(Error::Config { name, .. }) => assert_eq!(name, "VNPU_PRECISION"),
        other => panic!("fp16: {other:?}"),
    }
    // A bf16 plan is refused with a config error exactly where the CPU lacks AVX512_BF16.
    let (g, _) = stack();
    let opts = PlanOptions {
        precision: Precision::Bf16,
        ..Default::default()
    };
    match ModelPlan::new(Arc::new(g), &opts) {
        Ok(_) => assert!(crate::kernels::bf16::native().is_some()),
        Err(Error::Config { name, .. }) => {
            assert_eq!(name, "VNPU_PRECISION");
            assert!(crate::kernels::bf16::native().is_none());
        }
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn a_model_loads_in_the_precision_it_was_timed_in_unless_the_environment_says() {
    let look = |v: &'static str| move |n: &str| (n == "VNPU_PRECISION").then(|| v.to_string());
    let bf16_here = crate::kernels::bf16::native().is_some();
    assert_eq!(Precision::Bf16.available(), bf16_here);
    assert!(Precision::F32.available());
    // Unset: the model's own precision where this CPU has it, else f32.
    let timed_bf16 = PlanOptions::for_model_with(Precision::Bf16, |_| None).expect("unset");
    let want = if bf16_here {
        Precision::Bf16
    } else {
        Precision::F32
    };
    assert_eq!(timed_bf16.precision, want);
    let timed_f32 = PlanOptions::for_model_with(Precision::F32, |_| None).expect("unset");
    assert_eq!(timed_f32.precision, Precision::F32);
    // Set: the environment wins either way, and a bad value is still an error.
    for (timed, v, want) in [
        (Precision::Bf16, "f32", Precision::F32),
        (Precision::F32, "bf16", Precision::Bf16),
    ] {
        let o = PlanOptions::for_model_with(timed, look(v)).expect(v);
        assert_eq!(o.precision, want, "timed {timed:?}, VNPU_PRECISION={v}");
    }
    assert!(matches!(
        PlanOptions::for_model_with(Precision::Bf16, look("half")),
        Err(Error::Config { .. })
    ));
    for p in [Precision::F32, Precision::Bf16] {
        assert_eq!(Precision::parse(p.name()), Some(p));
    }
    assert_eq!(Precision::parse("fp16"), None);
}

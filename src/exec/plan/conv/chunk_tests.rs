//! Intra-op chunks are bit-identical to one thread, for every family that cuts them:
//! depthwise convs (channel ranges), Gemm / MatMul by rows and, for a one-row product, by
//! columns; in bf16, dense convs (im2col and Winograd F(2x2)) by channels and Gemm /
//! MatMul by rows. Each graph runs with 1, 2 and 3 intra-op threads (twice, reusing the helper
//! scratch); the plan must have cut chunks for 2 and 3 threads (helper scratch), and every
//! output must equal the 1-thread output exactly.

use crate::exec::tests::{geom, B};
use crate::exec::{ModelPlan, PlanOptions, Precision};
use crate::ir::{DType, Graph, Op, PostOp, UnaryOp};
use crate::kernels::testutil::rand_vec;
use std::sync::Arc;

/// Runs `g` with 1, 2, 3 threads on `inputs`; asserts 2 and 3 threads cut chunks and give
/// the 1-thread output bit for bit.
fn assert_chunked_identical(g: Graph, inputs: &[Vec<f32>], what: &str) {
    assert_chunked_identical_in(Precision::F32, g, inputs, what)
}

/// [`assert_chunked_identical`] with the plan computing in `precision`.
fn assert_chunked_identical_in(precision: Precision, g: Graph, inputs: &[Vec<f32>], what: &str) {
    let g = Arc::new(g);
    let mut outs = Vec::new();
    for threads in [1, 2, 3] {
        let opts = PlanOptions {
            intra_op_threads: threads,
            profile: false,
            precision,
            ..Default::default()
        };
        let plan = ModelPlan::new(g.clone(), &opts).expect("plan");
        assert_eq!(
            plan.helper_scratch_floats > 0,
            threads > 1,
            "{what}: chunks cut with {threads} threads"
        );
        let mut st = plan.new_state();
        for (i, x) in inputs.iter().enumerate() {
            plan.set_input(&mut st, i, bytemuck::cast_slice(x)).unwrap();
        }
        for _ in 0..2 {
            plan.run_all(&mut st).unwrap();
        }
        let mut out = vec![0u8; plan.output_len(0)];
        plan.read_output(&st, 0, &mut out).unwrap();
        outs.push(out);
    }
    assert!(
        outs[0].iter().any(|&b| b != 0),
        "{what}: output is all zero"
    );
    assert!(outs[1] == outs[0], "{what}: 2 threads differ from 1");
    assert!(outs[2] == outs[0], "{what}: 3 threads differ from 1");
}

/// Depthwise 3x3 convs (stride 1 and 2, channel counts that do and do not divide into
/// the chunk alignment) with a bias, a residual and a clip fused.
#[test]
fn depthwise_chunks_are_bit_identical() {
    for (c, hw, stride) in [(48, 56, 1), (44, 60, 2), (96, 28, 1)] {
        let oh = (hw + 2 - 3) / stride + 1;
        let mut b = B::default();
        let xi = b.input(DType::F32, &[1, c, hw, hw]);
        let ri = b.input(DType::F32, &[1, c, oh, oh]);
        let wi = b.kf(&[c, 1, 3, 3], rand_vec(c * 9, 11));
        let bi = b.kf(&[c], rand_vec(c, 12));
        let post = vec![
            PostOp::AddInput { input: 3 },
            PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        ];
        let y = b.n1(
            Op::Conv {
                geom: geom(&[3, 3], &[stride, stride], &[1, 1, 1, 1]),
                group: c,
                post,
            },
            &[xi, wi, bi, ri],
            DType::F32,
            &[1, c, oh, oh],
        );
        b.out(y);
        let x = rand_vec(c * hw * hw, 13);
        let r = rand_vec(c * oh * oh, 14);
        assert_chunked_identical(b.g, &[x, r], &format!("depthwise {c}x{hw} s{stride}"));
    }
}

/// A Gemm with more rows than columns (row chunks sharing the packed B), transposed B,
/// alpha, a full constant C (addend, beta) and a ReLU.
#[test]
fn gemm_row_chunks_are_bit_identical() {
    let (m, k, n) = (611, 130, 70);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[m, k]);
    let wi = b.kf(&[n, k], rand_vec(n * k, 21));
    let ci = b.kf(&[m, n], rand_vec(m * n, 22));
    let y = b.n1(
        Op::Gemm {
            alpha: 0.75,
            beta: 0.5,
            trans_a: false,
            trans_b: true,
            post: vec![PostOp::Unary(UnaryOp::Relu)],
        },
        &[ai, wi, ci],
        DType::F32,
        &[m, n],
    );
    b.out(y);
    assert_chunked_identical(b.g, &[rand_vec(m * k, 23)], "gemm rows");
}

/// A one-row Gemm (a classifier: column chunks with their own packed B), with a bias,
/// per-channel affine and PRelu post-ops and a residual; in f32, and in bf16 where the
/// CPU has it (on AMX the product runs in bf16, its chunks with their own weight pairs).
#[test]
fn one_row_gemm_column_chunks_are_bit_identical() {
    assert_chunked_identical(one_row_gemm(), &one_row_inputs(), "gemm one row");
    if crate::kernels::bf16::native().is_some() {
        let what = "gemm one row, bf16";
        assert_chunked_identical_in(Precision::Bf16, one_row_gemm(), &one_row_inputs(), what);
    }
}

/// Inputs of [`one_row_gemm`]: A's row and the residual.
fn one_row_inputs() -> [Vec<f32>; 2] {
    [rand_vec(1280, 36), rand_vec(1000, 37)]
}

/// The one-row Gemm of [`one_row_gemm_column_chunks_are_bit_identical`].
fn one_row_gemm() -> Graph {
    let (k, n) = (1280, 1000);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[1, k]);
    let ri = b.input(DType::F32, &[1, n]);
    let wi = b.kf(&[k, n], rand_vec(k * n, 31));
    let ci = b.kf(&[n], rand_vec(n, 32));
    let post = vec![
        PostOp::ChannelAffine {
            scale: rand_vec(n, 33),
            shift: rand_vec(n, 34),
        },
        PostOp::ChannelPRelu {
            slope: rand_vec(n, 35),
        },
        PostOp::AddInput { input: 3 },
    ];
    let y = b.n1(
        Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: false,
            post,
        },
        &[ai, wi, ci, ri],
        DType::F32,
        &[1, n],
    );
    b.out(y);
    b.g
}

/// A batched MatMul by one constant matrix (folded into one product of all rows: row
/// chunks), and a one-row MatMul (column chunks).
#[test]
fn matmul_chunks_are_bit_identical() {
    for (batch, m, k, n) in [(3, 150, 96, 64), (1, 1, 512, 700)] {
        let mut b = B::default();
        let ai = b.input(DType::F32, &[batch, m, k]);
        let wi = b.kf(&[k, n], rand_vec(k * n, 41));
        let y = b.n1(
            Op::MatMul {
                post: vec![PostOp::Unary(UnaryOp::Sigmoid)],
            },
            &[ai, wi],
            DType::F32,
            &[batch, m, n],
        );
        b.out(y);
        let what = format!("matmul {batch}x{m}x{k} . {k}x{n}");
        assert_chunked_identical(b.g, &[rand_vec(batch * m * k, 42)], &what);
    }
}

/// bf16 plans: dense convs (3x3/2 and 1x1 by im2col, 3x3/1 on an 8x8 plane by Winograd
/// F(2x2) with bf16 point GEMMs) cut by output channels with a bias, a residual and a
/// ReLU fused, and a MatMul with a constant B cut by rows.
#[test]
fn bf16_chunks_are_bit_identical() {
    if crate::kernels::bf16::native().is_none() {
        eprintln!("skipped: this CPU lacks AVX512_BF16");
        return;
    }
    // (cin, hw, cout, k, stride, pad)
    for (ci, hw, co, k, st, p) in [
        (64, 28, 130, 3, 2, 1),
        (96, 14, 192, 1, 1, 0),
        (128, 8, 128, 3, 1, 1),
    ] {
        let oh = (hw + 2 * p - k) / st + 1;
        let mut b = B::default();
        let xi = b.input(DType::F32, &[1, ci, hw, hw]);
        let ri = b.input(DType::F32, &[1, co, oh, oh]);
        let wi = b.kf(&[co, ci, k, k], rand_vec(co * ci * k * k, 51));
        let bi = b.kf(&[co], rand_vec(co, 52));
        let post = vec![PostOp::AddInput { input: 3 }, PostOp::Unary(UnaryOp::Relu)];
        let y = b.n1(
            Op::Conv {
                geom: geom(&[k, k], &[st, st], &[p, p, p, p]),
                group: 1,
                post,
            },
            &[xi, wi, bi, ri],
            DType::F32,
            &[1, co, oh, oh],
        );
        b.out(y);
        let x = rand_vec(ci * hw * hw, 53);
        let r = rand_vec(co * oh * oh, 54);
        let what = format!("bf16 conv {ci}->{co} {k}x{k}/{st} @{hw}");
        assert_chunked_identical_in(Precision::Bf16, b.g, &[x, r], &what);
    }
    let (m, k, n) = (611, 130, 70);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[m, k]);
    let wi = b.kf(&[k, n], rand_vec(k * n, 55));
    let y = b.n1(
        Op::MatMul {
            post: vec![PostOp::Unary(UnaryOp::Sigmoid)],
        },
        &[ai, wi],
        DType::F32,
        &[m, n],
    );
    b.out(y);
    let what = "bf16 matmul rows";
    assert_chunked_identical_in(Precision::Bf16, b.g, &[rand_vec(m * k, 56)], what);
}

//! Graph-level tests: hand-built graphs run through `ModelPlan`, whole and tiled, against
//! naive reference implementations written here.

use super::*;
use crate::ir::{
    BinaryOp, ConvGeom, CoordMode, ImageFormat, NearestMode, Node, Op, PadMode, PostOp, ReduceOp,
    ResizeMode, RnnDirection, UnaryOp, Value, ValueId,
};
use crate::kernels::testutil::{assert_close, rand_vec};

/// Minimal graph builder.
#[derive(Default)]
pub(crate) struct B {
    pub g: Graph,
}

impl B {
    pub(crate) fn val(&mut self, dtype: DType, shape: &[usize]) -> ValueId {
        let name = format!("v{}", self.g.values.len());
        self.g.add_value(Value {
            name,
            dtype,
            shape: Some(shape.to_vec()),
            declared: None,
            konst: None,
        })
    }
    pub(crate) fn input(&mut self, dtype: DType, shape: &[usize]) -> ValueId {
        let v = self.val(dtype, shape);
        self.g.inputs.push(v);
        v
    }
    pub(crate) fn k(&mut self, t: Tensor) -> ValueId {
        let name = format!("c{}", self.g.values.len());
        self.g.add_const(name, t)
    }
    pub(crate) fn kf(&mut self, shape: &[usize], v: Vec<f32>) -> ValueId {
        self.k(Tensor::from_f32(shape.to_vec(), v))
    }
    pub(crate) fn ki(&mut self, v: &[i64]) -> ValueId {
        self.k(Tensor::from_i64(vec![v.len()], v.to_vec()))
    }
    pub(crate) fn node(
        &mut self,
        op: Op,
        inputs: &[Option<ValueId>],
        outs: &[(DType, &[usize])],
    ) -> Vec<ValueId> {
        let outputs: Vec<ValueId> = outs.iter().map(|(d, s)| self.val(*d, s)).collect();
        let name = format!("n{}_{}", self.g.nodes.len(), op.name());
        self.g.nodes.push(Node {
            name: name.clone(),
            op,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
            absorbed: vec![name],
            placement: Some(ir::Placement::Bpu),
        });
        outputs
    }
    pub(crate) fn n1(&mut self, op: Op, inputs: &[ValueId], dt: DType, shape: &[usize]) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.node(op, &ins, &[(dt, shape)])[0]
    }
    pub(crate) fn out(&mut self, v: ValueId) {
        self.g.outputs.push(v);
    }
}

/// Runs the graph whole, then again with every node split into its maximum tiles; both
/// results must be identical. Returns the outputs.
fn run(g: Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let g = Arc::new(g);
    let plan = ModelPlan::new(g.clone(), &PlanOptions::default()).expect("plan");
    let mut results = Vec::new();
    for tiled in [false, true] {
        let mut st = plan.new_state();
        for (i, t) in inputs.iter().enumerate() {
            plan.set_input(&mut st, i, const_bytes(t))
                .expect("set_input");
        }
        for n in 0..g.nodes.len() {
            let count = if tiled { plan.tiles_for(n) } else { 1 };
            for index in 0..count {
                plan.run_node(&mut st, n, Tile { index, count })
                    .expect("run_node");
            }
        }
        let outs: Vec<Tensor> = g
            .outputs
            .iter()
            .enumerate()
            .map(|(k, &v)| {
                let mut b = vec![0u8; plan.output_len(k)];
                plan.read_output(&st, k, &mut b).expect("read_output");
                tensor_from_bytes(
                    g.values[v].dtype,
                    g.values[v].shape.clone().unwrap_or_default(),
                    &b,
                )
            })
            .collect();
        results.push(outs);
    }
    assert_eq!(
        results[0], results[1],
        "tiled run differs from the whole run"
    );
    results.swap_remove(0)
}

fn f32s(t: &Tensor) -> &[f32] {
    t.as_f32().expect("f32 output")
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec().expect("int output")
}

pub(crate) fn geom(k: &[usize], s: &[usize], p: &[usize]) -> ConvGeom {
    ConvGeom {
        kernel: k.to_vec(),
        strides: s.to_vec(),
        dilations: vec![],
        pads: p.to_vec(),
        auto_pad: None,
    }
}

/// Naive NCHW conv with groups.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    co: usize,
    k: usize,
    st: usize,
    pad: usize,
    group: usize,
    bias: &[f32],
) -> (Vec<f32>, usize, usize) {
    let [n, ci, h, wd] = xs;
    let oh = (h + 2 * pad - k) / st + 1;
    let ow = (wd + 2 * pad - k) / st + 1;
    let (cig, cog) = (ci / group, co / group);
    let mut y = vec![0.0; n * co * oh * ow];
    for b in 0..n {
        for o in 0..co {
            let g = o / cog;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias[o];
                    for c in 0..cig {
                        for ky in 0..k {
                            for kx in 0..k {
                                let iy = (oy * st + ky) as isize - pad as isize;
                                let ix = (ox * st + kx) as isize - pad as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                                    acc += x[((b * ci + g * cig + c) * h + iy as usize) * wd
                                        + ix as usize]
                                        * w[((o * cig + c) * k + ky) * k + kx];
                                }
                            }
                        }
                    }
                    y[((b * co + o) * oh + oy) * ow + ox] = acc;
                }
            }
        }
    }
    (y, oh, ow)
}

#[test]
fn intra_op_threads_from_the_environment() {
    let look =
        |v: &'static str| move |n: &str| (n == "VNPU_INTRA_OP_THREADS").then(|| v.to_string());
    assert_eq!(
        PlanOptions::from_lookup(|_| None).unwrap().intra_op_threads,
        1
    );
    assert_eq!(
        PlanOptions::from_lookup(look(" 4 "))
            .unwrap()
            .intra_op_threads,
        4
    );
    for bad in ["0", "65", "-1", "two", ""] {
        match PlanOptions::from_lookup(look(bad)) {
            Err(Error::Config { name, .. }) => assert_eq!(name, "VNPU_INTRA_OP_THREADS"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// Intra-op threads split large convs into output-channel chunks on helper threads; the
/// result is bit-identical to one thread (same kernels, same summation order), for the
/// im2col path (many channels), the padded-rows path (few channels) and with a residual.
#[test]
fn intra_op_threads_give_identical_results() {
    for (ci, co, hw, pads) in [(32, 70, 40, [1, 1, 1, 1]), (24, 40, 72, [1, 0, 1, 2])] {
        let xs = [1, ci, hw, hw];
        let x = rand_vec(xs.iter().product(), 5);
        let w = rand_vec(co * ci * 9, 6);
        let (oh, ow) = (hw + pads[0] + pads[2] - 2, hw + pads[1] + pads[3] - 2);
        let res = rand_vec(co * oh * ow, 7);
        let mut b = B::default();
        let xi = b.input(DType::F32, &xs);
        let ri = b.input(DType::F32, &[1, co, oh, ow]);
        let wi = b.kf(&[co, ci, 3, 3], w);
        let bi = b.kf(&[co], rand_vec(co, 8));
        let post = vec![
            PostOp::AddInput { input: 3 },
            PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        ];
        let y = b.n1(
            Op::Conv {
                geom: geom(&[3, 3], &[], &pads),
                group: 1,
                post,
            },
            &[xi, wi, bi, ri],
            DType::F32,
            &[1, co, oh, ow],
        );
        b.out(y);
        let g = Arc::new(b.g);
        let mut outs = Vec::new();
        for threads in [1, 2, 3] {
            let opts = PlanOptions {
                intra_op_threads: threads,
                profile: false,
                ..Default::default()
            };
            let plan = ModelPlan::new(g.clone(), &opts).expect("plan");
            assert_eq!(
                plan.helper_scratch_floats > 0,
                threads > 1,
                "{threads} threads"
            );
            let mut st = plan.new_state();
            plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
                .unwrap();
            plan.set_input(&mut st, 1, bytemuck::cast_slice(&res))
                .unwrap();
            // Twice: helper scratch is reused across runs.
            for _ in 0..2 {
                plan.run_all(&mut st).unwrap();
            }
            let mut out = vec![0u8; plan.output_len(0)];
            plan.read_output(&st, 0, &mut out).unwrap();
            outs.push(out);
        }
        assert!(outs[1] == outs[0] && outs[2] == outs[0], "{ci}->{co} @{hw}");
    }
}

/// Every buffer's offset in the arena is a multiple of a cache line, and so is the
/// arena's (and the scratch's) first byte: buffers start on cache lines in memory.
#[test]
fn arena_and_scratch_start_on_cache_lines() {
    let xs = [1, 3, 10, 10];
    let mut b = B::default();
    let xi = b.input(DType::F32, &xs);
    let wi = b.kf(&[8, 3, 3, 3], rand_vec(8 * 27, 1));
    let y = b.n1(
        Op::Conv {
            geom: geom(&[3, 3], &[1, 1], &[1, 1, 1, 1]),
            group: 1,
            post: vec![],
        },
        &[xi, wi],
        DType::F32,
        &[1, 8, 10, 10],
    );
    b.out(y);
    let plan = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect("plan");
    assert_eq!(super::memplan::ALIGN, 64);
    for _ in 0..4 {
        let st = plan.new_state();
        assert!(!st.arena.is_empty() && !st.scratch.is_empty());
        assert_eq!(st.arena.as_ptr() as usize % super::memplan::ALIGN, 0);
        assert_eq!(st.scratch.as_ptr() as usize % super::memplan::ALIGN, 0);
    }
}

#[test]
fn conv_with_fused_bias_residual_relu() {
    let xs = [2, 5, 9, 8];
    let (co, k) = (14, 3);
    let x = rand_vec(xs.iter().product(), 1);
    let w = rand_vec(co * 5 * k * k, 2);
    let bias = rand_vec(co, 3);
    let (want, oh, ow) = conv_ref(&x, xs, &w, co, k, 2, 1, 1, &bias);
    let res = rand_vec(want.len(), 4);
    let mut b = B::default();
    let xi = b.input(DType::F32, &xs);
    let ri = b.input(DType::F32, &[2, co, oh, ow]);
    let wi = b.kf(&[co, 5, k, k], w);
    let bi = b.kf(&[co], bias);
    let post = vec![PostOp::AddInput { input: 3 }, PostOp::Unary(UnaryOp::Relu)];
    let y = b.n1(
        Op::Conv {
            geom: geom(&[k, k], &[2, 2], &[1, 1, 1, 1]),
            group: 1,
            post,
        },
        &[xi, wi, bi, ri],
        DType::F32,
        &[2, co, oh, ow],
    );
    b.out(y);
    let out = run(
        b.g,
        &[
            Tensor::from_f32(xs.to_vec(), x),
            Tensor::from_f32(vec![2, co, oh, ow], res.clone()),
        ],
    );
    let want: Vec<f32> = want
        .iter()
        .zip(&res)
        .map(|(a, r)| (a + r).max(0.0))
        .collect();
    assert_close(f32s(&out[0]), &want, 1e-4);
}

/// Direct f32 convs cut into FC tiles by output channels (more channels than output
/// positions): the tiles start at whole weight panels (32 channels of the channel tile,
/// 12 of the paired row tiles) and together give the whole conv's bits (`run`).
#[test]
fn direct_convs_cut_by_channels_at_whole_panels() {
    // (input [C, H, W], output channels, tiles expected on AVX-512), 5x5 kernels at
    // stride 1 (strided convs run channels-last, Winograd takes 3x3 ones): a 7x7 output
    // on the channel tile, a 6x60 one on the row tiles (plane rows of 64).
    for (xs, co, panels) in [([40, 7, 7], 64, 2), ([40, 6, 60], 384, 32)] {
        let (st, k) = (1, 5);
        let xs = [1, xs[0], xs[1], xs[2]];
        let ci = xs[1];
        let x = rand_vec(xs.iter().product(), 5);
        let w = rand_vec(co * ci * k * k, 6);
        let bias = rand_vec(co, 7);
        let (want, oh, ow) = conv_ref(&x, xs, &w, co, k, st, 2, 1, &bias);
        let mut b = B::default();
        let xi = b.input(DType::F32, &xs);
        let wi = b.kf(&[co, ci, k, k], w);
        let bi = b.kf(&[co], bias);
        let op = Op::Conv {
            geom: geom(&[k, k], &[st, st], &[2, 2, 2, 2]),
            group: 1,
            post: vec![],
        };
        let y = b.n1(op, &[xi, wi, bi], DType::F32, &[1, co, oh, ow]);
        b.out(y);
        let g = Arc::new(b.g.clone());
        let plan = ModelPlan::new(g, &PlanOptions::default()).expect("plan");
        if crate::kernels::table().conv_tiles.is_some() {
            assert_eq!(plan.tiles_for(0), panels, "{xs:?} -> {co}");
        }
        let out = run(b.g, &[Tensor::from_f32(xs.to_vec(), x)]);
        assert_close(f32s(&out[0]), &want, 1e-4);
    }
}

#[test]
fn depthwise_and_grouped_conv_with_channel_affine_and_clip() {
    for (group, co) in [(6usize, 6usize), (3, 9)] {
        let xs = [1, 6, 10, 7];
        let x = rand_vec(60 * 7, 5);
        let w = rand_vec(co * (6 / group) * 9, 6);
        let bias = rand_vec(co, 7);
        let (want, oh, ow) = conv_ref(&x, xs, &w, co, 3, 1, 1, group, &bias);
        let scale = rand_vec(co, 8);
        let shift = rand_vec(co, 9);
        let mut b = B::default();
        let xi = b.input(DType::F32, &xs);
        let wi = b.kf(&[co, 6 / group, 3, 3], w);
        let bi = b.kf(&[co], bias);
        let post = vec![
            PostOp::ChannelAffine {
                scale: scale.clone(),
                shift: shift.clone(),
            },
            PostOp::Unary(UnaryOp::Clip {
                min: -0.3,
                max: 0.6,
            }),
        ];
        let y = b.n1(
            Op::Conv {
                geom: geom(&[3, 3], &[], &[1, 1, 1, 1]),
                group,
                post,
            },
            &[xi, wi, bi],
            DType::F32,
            &[1, co, oh, ow],
        );
        b.out(y);
        let out = run(b.g, &[Tensor::from_f32(xs.to_vec(), x)]);
        let plane = oh * ow;
        let want: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, v)| (v * scale[i / plane] + shift[i / plane]).clamp(-0.3, 0.6))
            .collect();
        assert_close(f32s(&out[0]), &want, 1e-4);
    }
}

#[test]
fn conv1d_and_conv_transpose() {
    // Conv1D as Conv over [N, C, L].
    let x = rand_vec(3 * 12, 10);
    let w = rand_vec(4 * 3 * 3, 11);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[1, 3, 12]);
    let wi = b.kf(&[4, 3, 3], w.clone());
    let y = b.n1(
        Op::Conv {
            geom: geom(&[3], &[2], &[1, 1]),
            group: 1,
            post: vec![],
        },
        &[xi, wi],
        DType::F32,
        &[1, 4, 6],
    );
    b.out(y);
    let out = run(b.g, &[Tensor::from_f32(vec![1, 3, 12], x.clone())]);
    let w2: Vec<f32> = (0..4 * 3)
        .flat_map(|i| {
            let mut v = vec![0.0; 9];
            v[3..6].copy_from_slice(&w[i * 3..i * 3 + 3]);
            v
        })
        .collect();
    // Embed in 2-D: height 1 padded by 1 on both sides with kernel 3 sees only the middle row.
    let (want, _, _) = conv_ref(&x, [1, 3, 1, 12], &w2, 4, 3, 2, 1, 1, &[0.0; 4]);
    assert_close(f32s(&out[0]), &want, 1e-4);

    // ConvTranspose stride 2, pads 1: y[o, iy*2-1+ky] += x[c, iy] * w[c, o, ky].
    let (ci, co, h) = (2, 3, 4);
    let x = rand_vec(ci * h * h, 12);
    let w = rand_vec(ci * co * 9, 13);
    let oh = (h - 1) * 2 + 3 - 2;
    let mut b = B::default();
    let xi = b.input(DType::F32, &[1, ci, h, h]);
    let wi = b.kf(&[ci, co, 3, 3], w.clone());
    let y = b.n1(
        Op::ConvTranspose {
            geom: geom(&[3, 3], &[2, 2], &[1, 1, 1, 1]),
            group: 1,
            output_padding: vec![],
            output_shape: vec![],
            post: vec![],
        },
        &[xi, wi],
        DType::F32,
        &[1, co, oh, oh],
    );
    b.out(y);
    let out = run(b.g, &[Tensor::from_f32(vec![1, ci, h, h], x.clone())]);
    let mut want = vec![0.0f32; co * oh * oh];
    for c in 0..ci {
        for o in 0..co {
            for iy in 0..h {
                for ix in 0..h {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (oy, ox) = ((iy * 2 + ky) as isize - 1, (ix * 2 + kx) as isize - 1);
                            if oy >= 0 && ox >= 0 && (oy as usize) < oh && (ox as usize) < oh {
                                want[(o * oh + oy as usize) * oh + ox as usize] +=
                                    x[(c * h + iy) * h + ix] * w[((c * co + o) * 3 + ky) * 3 + kx];
                            }
                        }
                    }
                }
            }
        }
    }
    assert_close(f32s(&out[0]), &want, 1e-4);
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

#[test]
fn gemm_variants() {
    let (m, k, n) = (5, 19, 21);
    let a = rand_vec(m * k, 14);
    let bt = rand_vec(n * k, 15); // B^T stored [N, K]
    let c = rand_vec(n, 16);
    let cm = rand_vec(m * n, 17);
    let bmat: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
    let base = matmul_ref(&a, &bmat, m, k, n);
    // Constant B (transposed), bias C of shape [N], alpha/beta, fused Sigmoid.
    let mut b = B::default();
    let ai = b.input(DType::F32, &[m, k]);
    let bi = b.kf(&[n, k], bt.clone());
    let ci = b.kf(&[n], c.clone());
    let op = Op::Gemm {
        alpha: 0.5,
        beta: 2.0,
        trans_a: false,
        trans_b: true,
        post: vec![PostOp::Unary(UnaryOp::Sigmoid)],
    };
    let y = b.n1(op, &[ai, bi, ci], DType::F32, &[m, n]);
    b.out(y);
    let out = run(b.g, &[Tensor::from_f32(vec![m, k], a.clone())]);
    let want: Vec<f32> = (0..m * n)
        .map(|i| crate::kernels::unary::sigmoid(0.5 * base[i] + 2.0 * c[i % n]))
        .collect();
    assert_close(f32s(&out[0]), &want, 1e-5);
    // Dynamic B, transposed A, dynamic full C.
    let at: Vec<f32> = (0..m * k).map(|i| a[(i % m) * k + i / m]).collect();
    let mut b = B::default();
    let ai = b.input(DType::F32, &[k, m]);
    let bi = b.input(DType::F32, &[k, n]);
    let ci = b.input(DType::F32, &[m, n]);
    let op = Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: true,
        trans_b: false,
        post: vec![],
    };
    let y = b.n1(op, &[ai, bi, ci], DType::F32, &[m, n]);
    b.out(y);
    let out = run(
        b.g,
        &[
            Tensor::from_f32(vec![k, m], at),
            Tensor::from_f32(vec![k, n], bmat),
            Tensor::from_f32(vec![m, n], cm.clone()),
        ],
    );
    let want: Vec<f32> = base.iter().zip(&cm).map(|(x, y)| x + y).collect();
    assert_close(f32s(&out[0]), &want, 1e-5);
}

#[test]
fn matmul_batched_broadcast_and_folded_constant() {
    // A [2,1,3,4] x B [5,4,6] -> [2,5,3,6]
    let a = rand_vec(2 * 3 * 4, 18);
    let bv = rand_vec(5 * 4 * 6, 19);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[2, 1, 3, 4]);
    let bi = b.input(DType::F32, &[5, 4, 6]);
    let y = b.n1(
        Op::MatMul { post: vec![] },
        &[ai, bi],
        DType::F32,
        &[2, 5, 3, 6],
    );
    b.out(y);
    let out = run(
        b.g,
        &[
            Tensor::from_f32(vec![2, 1, 3, 4], a.clone()),
            Tensor::from_f32(vec![5, 4, 6], bv.clone()),
        ],
    );
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..5 {
            want.extend(matmul_ref(
                &a[i * 12..(i + 1) * 12],
                &bv[j * 24..(j + 1) * 24],
                3,
                4,
                6,
            ));
        }
    }
    assert_close(f32s(&out[0]), &want, 1e-5);
    // A [2,3,4] x constant B [4,6] with a folded bias (ChannelAffine on the last dim).
    let shift = rand_vec(6, 20);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[2, 3, 4]);
    let bi = b.kf(&[4, 6], bv[..24].to_vec());
    let post = vec![PostOp::ChannelAffine {
        scale: vec![1.0],
        shift: shift.clone(),
    }];
    let y = b.n1(Op::MatMul { post }, &[ai, bi], DType::F32, &[2, 3, 6]);
    b.out(y);
    let out = run(b.g, &[Tensor::from_f32(vec![2, 3, 4], a.clone())]);
    let want: Vec<f32> = matmul_ref(&a, &bv[..24], 6, 4, 6)
        .iter()
        .enumerate()
        .map(|(i, v)| v + shift[i % 6])
        .collect();
    assert_close(f32s(&out[0]), &want, 1e-5);
}

#[test]
fn batchnorm_norms_and_unary() {
    let x = rand_vec(2 * 3 * 5, 21);
    let p: Vec<Vec<f32>> = (0..4).map(|i| rand_vec(3, 22 + i)).collect();
    let var: Vec<f32> = p[3].iter().map(|v| v.abs() + 0.1).collect();
    let mut b = B::default();
    let xi = b.input(DType::F32, &[2, 3, 5]);
    let (s, bb, m, v) = (
        b.kf(&[3], p[0].clone()),
        b.kf(&[3], p[1].clone()),
        b.kf(&[3], p[2].clone()),
        b.kf(&[3], var.clone()),
    );
    let y = b.n1(
        Op::BatchNorm { epsilon: 1e-5 },
        &[xi, s, bb, m, v],
        DType::F32,
        &[2, 3, 5],
    );
    b.out(y);
    let ops = [
        UnaryOp::Tanh,
        UnaryOp::Elu { alpha: 0.7 },
        UnaryOp::Selu {
            alpha: 1.67,
            gamma: 1.05,
        },
        UnaryOp::Gelu { tanh_approx: false },
        UnaryOp::Softplus,
        UnaryOp::Exp,
        UnaryOp::Abs,
        UnaryOp::Floor,
        UnaryOp::Sin,
        UnaryOp::HardSwish,
        UnaryOp::Silu,
    ];
    for op in ops {
        let u = b.n1(Op::Unary(op), &[xi], DType::F32, &[2, 3, 5]);
        b.out(u);
    }
    let out = run(b.g, &[Tensor::from_f32(vec![2, 3, 5], x.clone())]);
    let want: Vec<f32> = (0..30)
        .map(|i| {
            let c = (i / 5) % 3;
            (x[i] - p[2][c]) / (var[c] + 1e-5).sqrt() * p[0][c] + p[1][c]
        })
        .collect();
    assert_close(f32s(&out[0]), &want, 1e-5);
    let refs: [fn(f32) -> f32; 11] = [
        |v| v.tanh(),
        |v| if v < 0.0 { 0.7 * (v.exp() - 1.0) } else { v },
        |v| {
            if v <= 0.0 {
                1.05 * 1.67 * (v.exp() - 1.0)
            } else {
                1.05 * v
            }
        },
        |v| 0.5 * v * (1.0 + crate::kernels::unary::erf(v / 2f32.sqrt())),
        |v| (1.0 + v.exp()).ln(),
        |v| v.exp(),
        |v| v.abs(),
        |v| v.floor(),
        |v| v.sin(),
        |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
        |v| v / (1.0 + (-v).exp()),
    ];
    for (k, f) in refs.iter().enumerate() {
        let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
        assert_close(f32s(&out[k + 1]), &want, 1e-5);
    }
}

#[test]
fn layer_and_instance_norm() {
    let x = rand_vec(2 * 3 * 4, 30);
    let g4 = rand_vec(4, 31);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[2, 3, 4]);
    let s = b.kf(&[4], g4.clone());
    let y = b.n1(
        Op::LayerNorm {
            axis: -1,
            epsilon: 1e-5,
        },
        &[xi, s],
        DType::F32,
        &[2, 3, 4],
    );
    b.out(y);
    let (s3, b3) = (
        b.kf(&[3], vec![1.0, 2.0, 0.5]),
        b.kf(&[3], vec![0.0, 1.0, -1.0]),
    );
    let y2 = b.n1(
        Op::InstanceNorm { epsilon: 1e-5 },
        &[xi, s3, b3],
        DType::F32,
        &[2, 3, 4],
    );
    b.out(y2);
    let out = run(b.g, &[Tensor::from_f32(vec![2, 3, 4], x.clone())]);
    let (sc, bs) = ([1.0f32, 2.0, 0.5], [0.0f32, 1.0, -1.0]);
    for r in 0..6 {
        let xs = &x[r * 4..r * 4 + 4];
        let m = xs.iter().sum::<f32>() / 4.0;
        let v = xs.iter().map(|a| (a - m).powi(2)).sum::<f32>() / 4.0;
        for j in 0..4 {
            let z = (xs[j] - m) / (v + 1e-5).sqrt();
            assert!((f32s(&out[0])[r * 4 + j] - z * g4[j]).abs() < 1e-4);
            assert!((f32s(&out[1])[r * 4 + j] - (z * sc[r % 3] + bs[r % 3])).abs() < 1e-4);
        }
    }
}

#[test]
fn binary_broadcast_compare_where_and_int_math() {
    let a = rand_vec(2 * 3 * 4, 40);
    let c = rand_vec(3, 41);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[2, 3, 4]);
    let ci = b.input(DType::F32, &[3, 1]);
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::PRelu,
    ];
    for op in ops {
        let y = b.n1(Op::Binary(op), &[ai, ci], DType::F32, &[2, 3, 4]);
        b.out(y);
    }
    let lt = b.n1(
        Op::Binary(BinaryOp::Less),
        &[ai, ci],
        DType::Bool,
        &[2, 3, 4],
    );
    b.out(lt);
    let w = b.n1(Op::Where, &[lt, ai, ci], DType::F32, &[2, 3, 4]);
    b.out(w);
    let ii = b.input(DType::I64, &[4]);
    let two = b.k(Tensor::from_i64(vec![], vec![3]));
    let im = b.n1(
        Op::Binary(BinaryOp::Mod { fmod: false }),
        &[ii, two],
        DType::I64,
        &[4],
    );
    b.out(im);
    let id = b.n1(Op::Binary(BinaryOp::Div), &[ii, two], DType::I64, &[4]);
    b.out(id);
    let eq = b.n1(Op::Binary(BinaryOp::Equal), &[ii, two], DType::Bool, &[4]);
    b.out(eq);
    let nt = b.n1(Op::Unary(UnaryOp::Not), &[eq], DType::Bool, &[4]);
    b.out(nt);
    let out = run(
        b.g,
        &[
            Tensor::from_f32(vec![2, 3, 4], a.clone()),
            Tensor::from_f32(vec![3, 1], c.clone()),
            Tensor::from_i64(vec![4], vec![-4, 3, 7, 9]),
        ],
    );
    let fs: [fn(f32, f32) -> f32; 6] = [
        |x, y| x + y,
        |x, y| x - y,
        |x, y| x * y,
        |x, y| x / y,
        f32::max,
        |x, s| if x < 0.0 { x * s } else { x },
    ];
    for (k, f) in fs.iter().enumerate() {
        let want: Vec<f32> = (0..24).map(|i| f(a[i], c[(i / 4) % 3])).collect();
        assert_close(f32s(&out[k]), &want, 1e-6);
    }
    let lt_want: Vec<i64> = (0..24).map(|i| (a[i] < c[(i / 4) % 3]) as i64).collect();
    assert_eq!(i64s(&out[6]), lt_want);
    let w_want: Vec<f32> = (0..24)
        .map(|i| {
            if lt_want[i] == 1 {
                a[i]
            } else {
                c[(i / 4) % 3]
            }
        })
        .collect();
    assert_close(f32s(&out[7]), &w_want, 0.0);
    assert_eq!(i64s(&out[8]), vec![2, 0, 1, 0]);
    assert_eq!(i64s(&out[9]), vec![-1, 1, 2, 3]);
    assert_eq!(i64s(&out[10]), vec![0, 1, 0, 0]);
    assert_eq!(i64s(&out[11]), vec![1, 0, 1, 1]);
}

#[test]
fn channels_last_max_pool_is_the_planar_one_transposed() {
    // Two 9x11 images of 20 channels (a 16-lane block and a tail), 3x3 stride 2 with
    // pads (ResNet's pool) and ceil_mode (a last window past the pads); run whole and
    // in its most tiles (`run`), against MaxPool on the planar tensor.
    for (pads, ceil_mode, (oh, ow)) in [([1, 1, 1, 1], false, (5, 6)), ([0, 0, 0, 0], true, (4, 5))]
    {
        let (n, c, h, w) = (2, 20, 9, 11);
        let x = rand_vec(n * c * h * w, 51);
        let g = geom(&[3, 3], &[2, 2], &pads);
        let mut b = B::default();
        let xi = b.input(DType::F32, &[n, c, h, w]);
        let planar = b.n1(
            Op::MaxPool {
                geom: g.clone(),
                ceil_mode,
            },
            &[xi],
            DType::F32,
            &[n, c, oh, ow],
        );
        b.out(planar);
        let perm = Some(vec![0, 2, 3, 1]);
        let xn = b.n1(Op::Transpose { perm }, &[xi], DType::F32, &[n, h, w, c]);
        let yn = b.n1(
            Op::MaxPoolNhwc { geom: g, ceil_mode },
            &[xn],
            DType::F32,
            &[n, oh, ow, c],
        );
        b.out(yn);
        let out = run(b.g, &[Tensor::from_f32(vec![n, c, h, w], x)]);
        let (want, got) = (f32s(&out[0]), f32s(&out[1]));
        for (i, &v) in want.iter().enumerate() {
            let (img, ch, p) = (i / (c * oh * ow), i / (oh * ow) % c, i % (oh * ow));
            assert_eq!(
                got[(img * oh * ow + p) * c + ch].to_bits(),
                v.to_bits(),
                "{i}"
            );
        }
    }
}

#[test]
fn pools() {
    // 7x7 input, kernel 3 stride 2 pads 0, ceil_mode -> 3x3 output (last window partial).
    let x = rand_vec(2 * 7 * 7, 50);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[1, 2, 7, 7]);
    let g = geom(&[3, 3], &[2, 2], &[0, 0, 0, 0]);
    let mp = b.n1(
        Op::MaxPool {
            geom: g.clone(),
            ceil_mode: true,
        },
        &[xi],
        DType::F32,
        &[1, 2, 4, 4],
    );
    b.out(mp);
    let ap = b.n1(
        Op::AveragePool {
            geom: geom(&[3, 3], &[2, 2], &[1, 1, 1, 1]),
            ceil_mode: false,
            count_include_pad: true,
        },
        &[xi],
        DType::F32,
        &[1, 2, 4, 4],
    );
    b.out(ap);
    let gp = b.n1(Op::GlobalAveragePool, &[xi], DType::F32, &[1, 2, 1, 1]);
    b.out(gp);
    let gm = b.n1(Op::GlobalMaxPool, &[xi], DType::F32, &[1, 2, 1, 1]);
    b.out(gm);
    let out = run(b.g, &[Tensor::from_f32(vec![1, 2, 7, 7], x.clone())]);
    let mut wmax = vec![];
    let mut wavg = vec![];
    for p in 0..2 {
        for oy in 0..4 {
            for ox in 0..4 {
                let mut m = f32::NEG_INFINITY;
                let mut s = 0.0;
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                        if iy < 7 && ix < 7 {
                            m = m.max(x[p * 49 + iy * 7 + ix]);
                        }
                        let (py, px) = ((oy * 2 + ky) as isize - 1, (ox * 2 + kx) as isize - 1);
                        if (0..7).contains(&py) && (0..7).contains(&px) {
                            s += x[p * 49 + py as usize * 7 + px as usize];
                        }
                    }
                }
                wmax.push(m);
                wavg.push(s / 9.0);
            }
        }
    }
    assert_close(f32s(&out[0]), &wmax, 0.0);
    assert_close(f32s(&out[1]), &wavg, 1e-5);
    let means: Vec<f32> = (0..2)
        .map(|p| x[p * 49..(p + 1) * 49].iter().sum::<f32>() / 49.0)
        .collect();
    assert_close(f32s(&out[2]), &means, 1e-5);
    let maxs: Vec<f32> = (0..2)
        .map(|p| {
            x[p * 49..(p + 1) * 49]
                .iter()
                .copied()
                .fold(f32::MIN, f32::max)
        })
        .collect();
    assert_close(f32s(&out[3]), &maxs, 0.0);
}

#[test]
fn layout_ops() {
    let x: Vec<f32> = (0..2 * 8 * 2 * 3).map(|v| v as f32).collect(); // [2,8,2,3]
    let xs = [2usize, 8, 2, 3];
    let at = |n: usize, c: usize, h: usize, w: usize| x[((n * 8 + c) * 2 + h) * 3 + w];
    let mut b = B::default();
    let xi = b.input(DType::F32, &xs);
    let tr = b.n1(
        Op::Transpose {
            perm: Some(vec![3, 0, 2, 1]),
        },
        &[xi],
        DType::F32,
        &[3, 2, 2, 8],
    );
    b.out(tr);
    let (st, en, ax, sp) = (
        b.ki(&[7, -1]),
        b.ki(&[0, -100]),
        b.ki(&[1, 3]),
        b.ki(&[-3, -2]),
    );
    let sl = b.n1(Op::Slice, &[xi, st, en, ax, sp], DType::F32, &[2, 3, 2, 2]);
    b.out(sl);
    let sp_out = b.node(
        Op::Split {
            axis: 1,
            split: None,
            num_outputs: 2,
        },
        &[Some(xi)],
        &[(DType::F32, &[2, 3, 2, 3]), (DType::F32, &[2, 5, 2, 3])],
    );
    let cc = b.n1(
        Op::Concat { axis: 1 },
        &[sp_out[1], sp_out[0]],
        DType::F32,
        &[2, 8, 2, 3],
    );
    b.out(cc);
    let d2s = b.n1(
        Op::DepthToSpace {
            blocksize: 2,
            crd_mode: false,
        },
        &[xi],
        DType::F32,
        &[2, 2, 4, 6],
    );
    b.out(d2s);
    let crd = b.n1(
        Op::DepthToSpace {
            blocksize: 2,
            crd_mode: true,
        },
        &[xi],
        DType::F32,
        &[2, 2, 4, 6],
    );
    b.out(crd);
    let s2d = b.n1(
        Op::SpaceToDepth { blocksize: 2 },
        &[d2s],
        DType::F32,
        &[2, 8, 2, 3],
    );
    b.out(s2d);
    let shp = b.ki(&[2, 1, 8, 6]);
    let rs = b.n1(
        Op::Reshape { allowzero: false },
        &[xi, shp],
        DType::F32,
        &[2, 1, 8, 6],
    );
    let eshape = b.ki(&[2, 3, 8, 6]);
    let ex = b.n1(Op::Expand, &[rs, eshape], DType::F32, &[2, 3, 8, 6]);
    b.out(ex);
    let reps = b.ki(&[1, 1, 2, 1]);
    let tl = b.n1(Op::Tile, &[xi, reps], DType::F32, &[2, 8, 4, 3]);
    b.out(tl);
    let out = run(b.g, &[Tensor::from_f32(xs.to_vec(), x.clone())]);
    // Transpose.
    let mut want = vec![];
    for w in 0..3 {
        for n in 0..2 {
            for h in 0..2 {
                for c in 0..8 {
                    want.push(at(n, c, h, w));
                }
            }
        }
    }
    assert_eq!(f32s(&out[0]), &want[..]);
    // Slice: channels 7,4,1 ; width 2,0.
    let mut want = vec![];
    for n in 0..2 {
        for c in [7, 4, 1] {
            for h in 0..2 {
                for w in [2, 0] {
                    want.push(at(n, c, h, w));
                }
            }
        }
    }
    assert_eq!(f32s(&out[1]), &want[..]);
    // Split then concat swapped: channels 3..8 then 0..3.
    let mut want = vec![];
    for n in 0..2 {
        for c in (3..8).chain(0..3) {
            for h in 0..2 {
                for w in 0..3 {
                    want.push(at(n, c, h, w));
                }
            }
        }
    }
    assert_eq!(f32s(&out[2]), &want[..]);
    // DepthToSpace DCR / CRD per the ONNX definitions.
    let (mut dcr, mut crd) = (vec![], vec![]);
    for n in 0..2 {
        for c in 0..2 {
            for y in 0..4 {
                for xx in 0..6 {
                    let (h, by, w, bx) = (y / 2, y % 2, xx / 2, xx % 2);
                    dcr.push(at(n, (by * 2 + bx) * 2 + c, h, w));
                    crd.push(at(n, c * 4 + by * 2 + bx, h, w));
                }
            }
        }
    }
    assert_eq!(f32s(&out[3]), &dcr[..]);
    assert_eq!(f32s(&out[4]), &crd[..]);
    assert_eq!(
        f32s(&out[5]),
        &x[..],
        "SpaceToDepth inverts DCR DepthToSpace"
    );
    // Expand of [2,1,8,6] to [2,3,8,6].
    let ex = f32s(&out[6]);
    for n in 0..2 {
        for r in 0..3 {
            assert_eq!(
                &ex[(n * 3 + r) * 48..(n * 3 + r + 1) * 48],
                &x[n * 48..(n + 1) * 48]
            );
        }
    }
    // Tile height twice.
    let tl = f32s(&out[7]);
    for n in 0..2 {
        for c in 0..8 {
            for h in 0..4 {
                for w in 0..3 {
                    assert_eq!(tl[((n * 8 + c) * 4 + h) * 3 + w], at(n, c, h % 2, w));
                }
            }
        }
    }
}

#[test]
fn pad_modes() {
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect(); // [3,4]
    let mut b = B::default();
    let xi = b.input(DType::F32, &[3, 4]);
    let pads = b.ki(&[1, 2, 2, -1]);
    let cv = b.k(Tensor::from_f32(vec![], vec![9.5]));
    for mode in [
        PadMode::Constant,
        PadMode::Reflect,
        PadMode::Edge,
        PadMode::Wrap,
    ] {
        let y = b.node(
            Op::Pad { mode },
            &[Some(xi), Some(pads), Some(cv)],
            &[(DType::F32, &[6, 5])],
        )[0];
        b.out(y);
    }
    let out = run(b.g, &[Tensor::from_f32(vec![3, 4], x.clone())]);
    for (k, mode) in [
        PadMode::Constant,
        PadMode::Reflect,
        PadMode::Edge,
        PadMode::Wrap,
    ]
    .iter()
    .enumerate()
    {
        let src = |i: i64, n: i64| -> Option<i64> {
            if (0..n).contains(&i) {
                return Some(i);
            }
            match mode {
                PadMode::Constant => None,
                PadMode::Edge => Some(i.clamp(0, n - 1)),
                PadMode::Wrap => Some(i.rem_euclid(n)),
                PadMode::Reflect => Some(if i < 0 { -i } else { 2 * (n - 1) - i }),
            }
        };
        let mut want = vec![];
        for r in 0..6i64 {
            for c in 0..5i64 {
                want.push(match (src(r - 1, 3), src(c - 2, 4)) {
                    (Some(a), Some(b)) => x[(a * 4 + b) as usize],
                    _ => 9.5,
                });
            }
        }
        assert_eq!(f32s(&out[k]), &want[..], "{mode:?}");
    }
}

#[test]
fn resize_nearest_and_linear() {
    let x = rand_vec(2 * 3 * 4, 60);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[1, 2, 3, 4]);
    let sc = b.kf(&[4], vec![1.0, 1.0, 2.0, 1.5]);
    let cases = [
        (
            ResizeMode::Nearest,
            CoordMode::Asymmetric,
            NearestMode::Floor,
        ),
        (
            ResizeMode::Nearest,
            CoordMode::HalfPixel,
            NearestMode::RoundPreferCeil,
        ),
        (ResizeMode::Linear, CoordMode::HalfPixel, NearestMode::Floor),
        (
            ResizeMode::Linear,
            CoordMode::AlignCorners,
            NearestMode::Floor,
        ),
        (
            ResizeMode::Linear,
            CoordMode::PytorchHalfPixel,
            NearestMode::Floor,
        ),
    ];
    for (mode, coord, nearest) in cases {
        let op = Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            extrapolation_value: 0.0,
        };
        let y = b.node(
            op,
            &[Some(xi), None, Some(sc)],
            &[(DType::F32, &[1, 2, 6, 6])],
        )[0];
        b.out(y);
    }
    let out = run(b.g, &[Tensor::from_f32(vec![1, 2, 3, 4], x.clone())]);
    for (k, (mode, coord, nearest)) in cases.iter().enumerate() {
        let src = |o: usize, scale: f32, n: usize, on: usize| -> f32 {
            let o = o as f32;
            match coord {
                CoordMode::Asymmetric => o / scale,
                CoordMode::AlignCorners => o * (n as f32 - 1.0) / (on as f32 - 1.0),
                _ => (o + 0.5) / scale - 0.5,
            }
        };
        let mut want = vec![];
        for p in 0..2 {
            for oy in 0..6 {
                for ox in 0..6 {
                    let (sy, sx) = (src(oy, 2.0, 3, 6), src(ox, 1.5, 4, 6));
                    let v = if *mode == ResizeMode::Nearest {
                        let r = |v: f32, n: usize| {
                            let i = match nearest {
                                NearestMode::Floor => v.floor(),
                                _ => {
                                    if v - v.floor() == 0.5 {
                                        v.ceil()
                                    } else {
                                        v.round()
                                    }
                                }
                            };
                            (i.max(0.0) as usize).min(n - 1)
                        };
                        x[p * 12 + r(sy, 3) * 4 + r(sx, 4)]
                    } else {
                        let (sy, sx) = (sy.clamp(0.0, 2.0), sx.clamp(0.0, 3.0));
                        let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
                        let (y1, x1) = ((y0 + 1).min(2), (x0 + 1).min(3));
                        let (wy, wx) = (sy - y0 as f32, sx - x0 as f32);
                        let g = |y: usize, xx: usize| x[p * 12 + y * 4 + xx];
                        (1.0 - wy) * ((1.0 - wx) * g(y0, x0) + wx * g(y0, x1))
                            + wy * ((1.0 - wx) * g(y1, x0) + wx * g(y1, x1))
                    };
                    want.push(v);
                }
            }
        }
        assert_close(f32s(&out[k]), &want, 1e-5);
    }
}

#[test]
fn softmax_reduce_arg_topk_cumsum() {
    let x = rand_vec(2 * 3 * 4, 70);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[2, 3, 4]);
    let sm = b.n1(Op::Softmax { axis: 1 }, &[xi], DType::F32, &[2, 3, 4]);
    b.out(sm);
    let ls = b.n1(Op::LogSoftmax { axis: -1 }, &[xi], DType::F32, &[2, 3, 4]);
    b.out(ls);
    let axes = b.ki(&[0, 2]);
    let rm = b.n1(
        Op::Reduce {
            op: ReduceOp::Mean,
            axes: None,
            keepdims: true,
            noop_with_empty_axes: false,
        },
        &[xi, axes],
        DType::F32,
        &[1, 3, 1],
    );
    b.out(rm);
    let rl2 = b.n1(
        Op::Reduce {
            op: ReduceOp::L2,
            axes: Some(vec![1]),
            keepdims: false,
            noop_with_empty_axes: false,
        },
        &[xi],
        DType::F32,
        &[2, 4],
    );
    b.out(rl2);
    let am = b.n1(
        Op::ArgMax {
            axis: 2,
            keepdims: false,
            select_last_index: false,
        },
        &[xi],
        DType::I64,
        &[2, 3],
    );
    b.out(am);
    let k = b.ki(&[2]);
    let tk = b.node(
        Op::TopK {
            axis: -1,
            largest: false,
            sorted: true,
        },
        &[Some(xi), Some(k)],
        &[(DType::F32, &[2, 3, 2]), (DType::I64, &[2, 3, 2])],
    );
    b.out(tk[0]);
    b.out(tk[1]);
    let ax = b.k(Tensor::from_i64(vec![], vec![1]));
    let cs = b.n1(
        Op::CumSum {
            exclusive: false,
            reverse: false,
        },
        &[xi, ax],
        DType::F32,
        &[2, 3, 4],
    );
    b.out(cs);
    let out = run(b.g, &[Tensor::from_f32(vec![2, 3, 4], x.clone())]);
    let at = |n: usize, c: usize, w: usize| x[(n * 3 + c) * 4 + w];
    let (mut sm_w, mut ls_w, mut cs_w) = (vec![0.0; 24], vec![0.0; 24], vec![0.0; 24]);
    for n in 0..2 {
        for c in 0..3 {
            for w in 0..4 {
                let den: f32 = (0..3).map(|cc| at(n, cc, w).exp()).sum();
                sm_w[(n * 3 + c) * 4 + w] = at(n, c, w).exp() / den;
                let den2: f32 = (0..4).map(|ww| at(n, c, ww).exp()).sum();
                ls_w[(n * 3 + c) * 4 + w] = at(n, c, w) - den2.ln();
                cs_w[(n * 3 + c) * 4 + w] = (0..=c).map(|cc| at(n, cc, w)).sum();
            }
        }
    }
    assert_close(f32s(&out[0]), &sm_w, 1e-5);
    assert_close(f32s(&out[1]), &ls_w, 1e-5);
    let rm_w: Vec<f32> = (0..3)
        .map(|c| {
            (0..2)
                .flat_map(|n| (0..4).map(move |w| (n, w)))
                .map(|(n, w)| at(n, c, w))
                .sum::<f32>()
                / 8.0
        })
        .collect();
    assert_close(f32s(&out[2]), &rm_w, 1e-5);
    let l2_w: Vec<f32> = (0..8)
        .map(|i| {
            (0..3)
                .map(|c| at(i / 4, c, i % 4).powi(2))
                .sum::<f32>()
                .sqrt()
        })
        .collect();
    assert_close(f32s(&out[3]), &l2_w, 1e-5);
    let mut am_w = vec![];
    let (mut tv, mut ti) = (vec![], vec![]);
    for n in 0..2 {
        for c in 0..3 {
            let mut row: Vec<(f32, i64)> = (0..4).map(|w| (at(n, c, w), w as i64)).collect();
            am_w.push(
                row.iter()
                    .fold((f32::MIN, 0), |b, &(v, i)| if v > b.0 { (v, i) } else { b })
                    .1,
            );
            row.sort_by(|a, b| a.0.total_cmp(&b.0));
            tv.extend([row[0].0, row[1].0]);
            ti.extend([row[0].1, row[1].1]);
        }
    }
    assert_eq!(i64s(&out[4]), am_w);
    assert_close(f32s(&out[5]), &tv, 0.0);
    assert_eq!(i64s(&out[6]), ti);
    assert_close(f32s(&out[7]), &cs_w, 1e-5);
}

#[test]
fn gather_cast_range_shape_fill() {
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect(); // [3,4]
    let mut b = B::default();
    let xi = b.input(DType::F32, &[3, 4]);
    let idx = b.k(Tensor::from_i64(vec![2, 2], vec![-1, 0, 1, 3]));
    let g1 = b.n1(Op::Gather { axis: 1 }, &[xi, idx], DType::F32, &[3, 2, 2]);
    b.out(g1);
    let eidx = b.k(Tensor::from_i64(vec![2, 4], vec![2, 0, 1, -1, 0, 0, 2, 1]));
    let ge = b.n1(
        Op::GatherElements { axis: 0 },
        &[xi, eidx],
        DType::F32,
        &[2, 4],
    );
    b.out(ge);
    let ci = b.n1(Op::Cast { to: DType::I64 }, &[xi], DType::I64, &[3, 4]);
    b.out(ci);
    let (s, l, d) = (
        b.k(Tensor::from_i64(vec![], vec![10])),
        b.k(Tensor::from_i64(vec![], vec![1])),
        b.k(Tensor::from_i64(vec![], vec![-3])),
    );
    let r = b.n1(Op::Range, &[s, l, d], DType::I64, &[3]);
    b.out(r);
    let sh = b.n1(
        Op::Shape {
            start: 0,
            end: None,
        },
        &[xi],
        DType::I64,
        &[2],
    );
    b.out(sh);
    let fill = b.n1(
        Op::ConstantOfShape {
            value: Tensor::from_f32(vec![1], vec![2.5]),
        },
        &[sh],
        DType::F32,
        &[3, 4],
    );
    b.out(fill);
    let out = run(b.g, &[Tensor::from_f32(vec![3, 4], x.clone())]);
    let mut gw = vec![];
    for r in 0..3 {
        for i in [3, 0, 1, 3] {
            gw.push(x[r * 4 + i]);
        }
    }
    assert_eq!(f32s(&out[0]), &gw[..]);
    let ei = [2, 0, 1, 2, 0, 0, 2, 1];
    let ew: Vec<f32> = (0..8).map(|i| x[ei[i] * 4 + i % 4]).collect();
    assert_eq!(f32s(&out[1]), &ew[..]);
    assert_eq!(i64s(&out[2]), (0..12).collect::<Vec<i64>>());
    assert_eq!(i64s(&out[3]), vec![10, 7, 4]);
    assert_eq!(i64s(&out[4]), vec![3, 4]);
    assert_eq!(f32s(&out[5]), &[2.5; 12][..]);
}

#[test]
fn gather_out_of_range_fails_at_run_time_not_crash() {
    let mut b = B::default();
    let xi = b.input(DType::F32, &[3]);
    let ii = b.input(DType::I64, &[1]);
    let y = b.n1(Op::Gather { axis: 0 }, &[xi, ii], DType::F32, &[1]);
    b.out(y);
    let plan = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect("plan");
    let mut st = plan.new_state();
    plan.set_input(&mut st, 1, bytemuck::cast_slice(&[5i64]))
        .expect("set");
    assert!(matches!(
        plan.run_node(&mut st, 0, Tile::WHOLE),
        Err(Error::RunFailed { .. })
    ));
}

#[test]
fn rnn_bidirectional_layout() {
    let (seq, inp, hs) = (3, 2, 4);
    let x = rand_vec(seq * inp, 80);
    let w = rand_vec(2 * 3 * hs * inp, 81);
    let r = rand_vec(2 * 3 * hs * hs, 82);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[seq, 1, inp]);
    let (wi, ri) = (
        b.kf(&[2, 3 * hs, inp], w.clone()),
        b.kf(&[2, 3 * hs, hs], r.clone()),
    );
    let outs = b.node(
        Op::Gru {
            hidden_size: hs,
            direction: RnnDirection::Bidirectional,
            linear_before_reset: false,
            layout: 0,
        },
        &[Some(xi), Some(wi), Some(ri)],
        &[(DType::F32, &[seq, 2, 1, hs]), (DType::F32, &[2, 1, hs])],
    );
    b.out(outs[0]);
    b.out(outs[1]);
    // The same two directions as separate single-direction layers.
    let single = |dir: RnnDirection, d: usize, b: &mut B| {
        let wi = b.kf(
            &[1, 3 * hs, inp],
            w[d * 3 * hs * inp..(d + 1) * 3 * hs * inp].to_vec(),
        );
        let ri = b.kf(
            &[1, 3 * hs, hs],
            r[d * 3 * hs * hs..(d + 1) * 3 * hs * hs].to_vec(),
        );
        let o = b.node(
            Op::Gru {
                hidden_size: hs,
                direction: dir,
                linear_before_reset: false,
                layout: 0,
            },
            &[Some(xi), Some(wi), Some(ri)],
            &[(DType::F32, &[seq, 1, 1, hs])],
        );
        b.out(o[0]);
    };
    single(RnnDirection::Forward, 0, &mut b);
    single(RnnDirection::Reverse, 1, &mut b);
    let out = run(b.g, &[Tensor::from_f32(vec![seq, 1, inp], x)]);
    let (y, yh, fw, bw) = (f32s(&out[0]), f32s(&out[1]), f32s(&out[2]), f32s(&out[3]));
    for t in 0..seq {
        assert_eq!(
            &y[(t * 2) * hs..(t * 2 + 1) * hs],
            &fw[t * hs..(t + 1) * hs]
        );
        assert_eq!(
            &y[(t * 2 + 1) * hs..(t * 2 + 2) * hs],
            &bw[t * hs..(t + 1) * hs]
        );
    }
    assert_eq!(&yh[..hs], &fw[(seq - 1) * hs..]);
    assert_eq!(&yh[hs..], &bw[..hs]);
}

/// A Preprocess graph (RGB NHWC u8 to BGR NCHW f32, mean 1, scale 0.5), optionally
/// followed by a Spin of its output; returns the graph output and the expected values.
fn preprocess_graph(spin: bool) -> (Vec<Tensor>, Vec<f32>) {
    let mut b = B::default();
    let img = b.input(DType::U8, &[1, 2, 2, 3]);
    let op = Op::Preprocess {
        format: ImageFormat::Rgb,
        nhwc: true,
        mean: vec![1.0],
        scale: vec![0.5],
        to_bgr: true,
    };
    let y = b.n1(op, &[img], DType::F32, &[1, 3, 2, 2]);
    #[cfg(feature = "test-ops")]
    let y = if spin {
        b.n1(Op::Spin { micros: 10 }, &[y], DType::F32, &[1, 3, 2, 2])
    } else {
        y
    };
    #[cfg(not(feature = "test-ops"))]
    assert!(!spin, "Spin needs the test-ops feature");
    b.out(y);
    let px: Vec<u8> = (0..12).map(|v| v as u8 * 10).collect();
    let out = run(
        b.g,
        &[Tensor::new(vec![1, 2, 2, 3], TensorData::U8(px.clone()))],
    );
    let mut want = vec![];
    for c in [2, 1, 0] {
        for p in 0..4 {
            want.push((px[p * 3 + c] as f32 - 1.0) * 0.5);
        }
    }
    (out, want)
}

#[test]
fn preprocess() {
    let (out, want) = preprocess_graph(false);
    assert_eq!(f32s(&out[0]), &want[..]);
}

#[cfg(feature = "test-ops")]
#[test]
fn spin_and_fail() {
    let (out, want) = preprocess_graph(true);
    assert_eq!(f32s(&out[0]), &want[..]);

    for panic in [false, true] {
        let mut b = B::default();
        let x = b.input(DType::F32, &[1]);
        let y = b.n1(Op::Fail { panic }, &[x], DType::F32, &[1]);
        b.out(y);
        let plan = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect("plan");
        let mut st = plan.new_state();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            plan.run_node(&mut st, 0, Tile::WHOLE)
        }));
        match (panic, r) {
            (false, Ok(Err(Error::RunFailed { .. }))) | (true, Err(_)) => {}
            (p, r) => panic!("Fail(panic={p}) gave {:?}", r.map(|x| x.is_ok())),
        }
    }
}

#[test]
fn unsupported_fails_at_plan_time_naming_the_node() {
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 1, 2, 2]);
    let sc = b.kf(&[4], vec![1.0, 1.0, 2.0, 2.0]);
    let op = Op::Resize {
        mode: ResizeMode::Linear,
        coord: CoordMode::TfCropAndResize,
        nearest: NearestMode::Floor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
    };
    let y = b.node(
        op,
        &[Some(x), None, Some(sc)],
        &[(DType::F32, &[1, 1, 4, 4])],
    )[0];
    b.out(y);
    let e = ModelPlan::new(Arc::new(b.g), &PlanOptions::default())
        .expect_err("tf_crop_and_resize is unsupported");
    assert!(e.to_string().contains("n0_Resize"), "{e}");

    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 3, 3]);
    let w = b.input(DType::F32, &[2, 2, 1, 1]);
    let y = b.n1(
        Op::Conv {
            geom: geom(&[1, 1], &[], &[]),
            group: 1,
            post: vec![],
        },
        &[x, w],
        DType::F32,
        &[1, 2, 3, 3],
    );
    b.out(y);
    let e = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect_err("dynamic weights");
    assert!(matches!(e, Error::UnsupportedOp { .. }), "{e}");

    let mut b = B::default();
    let x = b.input(DType::U8, &[4]);
    let y = b.n1(Op::Unary(UnaryOp::Sigmoid), &[x], DType::U8, &[4]);
    b.out(y);
    assert!(ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).is_err());
}

#[test]
fn memory_is_reused_and_profile_records() {
    let mut b = B::default();
    let mut v = b.input(DType::F32, &[1024]);
    for _ in 0..10 {
        v = b.n1(Op::Unary(UnaryOp::Neg), &[v], DType::F32, &[1024]);
    }
    b.out(v);
    let g = Arc::new(b.g);
    let plan = ModelPlan::new(
        g,
        &PlanOptions {
            intra_op_threads: 1,
            profile: true,
            ..Default::default()
        },
    )
    .expect("plan");
    // Input + output pinned, intermediates ping-pong in two slots.
    assert!(
        plan.arena_bytes() <= 4 * 4096,
        "arena {}",
        plan.arena_bytes()
    );
    let mut st = plan.new_state();
    let x = rand_vec(1024, 90);
    plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
        .expect("set");
    assert!(plan.set_input(&mut st, 0, &[0u8; 3]).is_err());
    plan.run_all(&mut st).expect("run");
    let mut o = vec![0u8; 4096];
    plan.read_output(&st, 0, &mut o).expect("read");
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&o), &x[..]);
    let prof = plan.profile(&st);
    assert_eq!(prof.len(), 10);
    assert!(prof
        .iter()
        .all(|p| p.calls == 1 && p.absorbed == vec![p.name.clone()]));
    assert!(
        plan.run_node(&mut st, 0, Tile { index: 0, count: 2 })
            .is_err(),
        "Neg of 1024 has one tile"
    );
}

#[test]
fn eval_node_folds_shape_math_without_graph_shapes() {
    // Shape -> Gather -> Unsqueeze -> Concat -> Reshape, all outputs unshaped.
    let mut g = Graph::default();
    let mk = |g: &mut Graph, name: &str, dt: DType| {
        g.add_value(Value {
            name: name.into(),
            dtype: dt,
            shape: None,
            declared: None,
            konst: None,
        })
    };
    let x = g.add_value(Value {
        name: "x".into(),
        dtype: DType::F32,
        shape: Some(vec![2, 3, 4]),
        declared: None,
        konst: None,
    });
    let s = mk(&mut g, "s", DType::I64);
    let node = |op: Op, ins: Vec<Option<usize>>, outs: Vec<usize>| Node {
        name: op.name().into(),
        op,
        inputs: ins,
        outputs: outs,
        absorbed: vec![],
        placement: None,
    };
    let x_t = Tensor::from_f32(vec![2, 3, 4], (0..24).map(|v| v as f32).collect());
    let shape = eval_node(
        &g,
        &node(
            Op::Shape {
                start: 0,
                end: None,
            },
            vec![Some(x)],
            vec![s],
        ),
        &[Some(&x_t)],
    )
    .expect("shape");
    assert_eq!(shape[0], Tensor::from_i64(vec![3], vec![2, 3, 4]));
    let i = mk(&mut g, "i", DType::I64);
    let gi = mk(&mut g, "gi", DType::I64);
    let idx = Tensor::from_i64(vec![], vec![0]);
    let first = eval_node(
        &g,
        &node(Op::Gather { axis: 0 }, vec![Some(s), Some(i)], vec![gi]),
        &[Some(&shape[0]), Some(&idx)],
    )
    .expect("gather");
    assert_eq!(first[0], Tensor::from_i64(vec![], vec![2]));
    let u = mk(&mut g, "u", DType::I64);
    let un = eval_node(
        &g,
        &node(
            Op::Unsqueeze {
                axes: Some(vec![0]),
            },
            vec![Some(gi)],
            vec![u],
        ),
        &[Some(&first[0])],
    )
    .expect("unsqueeze");
    let minus1 = Tensor::from_i64(vec![1], vec![-1]);
    let c = mk(&mut g, "c", DType::I64);
    let m1 = mk(&mut g, "m1", DType::I64);
    let cat = eval_node(
        &g,
        &node(Op::Concat { axis: 0 }, vec![Some(u), Some(m1)], vec![c]),
        &[Some(&un[0]), Some(&minus1)],
    )
    .expect("concat");
    assert_eq!(cat[0], Tensor::from_i64(vec![2], vec![2, -1]));
    let r = mk(&mut g, "r", DType::F32);
    let re = eval_node(
        &g,
        &node(
            Op::Reshape { allowzero: false },
            vec![Some(x), Some(c)],
            vec![r],
        ),
        &[Some(&x_t), Some(&cat[0])],
    )
    .expect("reshape");
    assert_eq!(re[0].shape, vec![2, 12]);
    assert_eq!(re[0].data, x_t.data);
    // An output shape the rule refuses (axis out of range) is an error, not a panic.
    let y = mk(&mut g, "y", DType::F32);
    assert!(eval_node(
        &g,
        &node(Op::Softmax { axis: 3 }, vec![Some(x)], vec![y]),
        &[Some(&x_t)]
    )
    .is_err());
}

#[test]
fn gemm_row_tiles_with_residual_and_addend() {
    // More rows than columns: tiles split rows of C, residual and C sliced to match.
    let (m, k, n) = (20, 7, 5);
    let a = rand_vec(m * k, 100);
    let bm = rand_vec(k * n, 101);
    let cm = rand_vec(m * n, 102);
    let res = rand_vec(m * n, 103);
    let mut b = B::default();
    let ai = b.input(DType::F32, &[m, k]);
    let ri = b.input(DType::F32, &[m, n]);
    let bi = b.kf(&[k, n], bm.clone());
    let ci = b.kf(&[m, n], cm.clone());
    let op = Op::Gemm {
        alpha: 1.0,
        beta: 0.5,
        trans_a: false,
        trans_b: false,
        post: vec![PostOp::AddInput { input: 3 }],
    };
    let y = b.n1(op, &[ai, bi, ci, ri], DType::F32, &[m, n]);
    b.out(y);
    let plan_tiles = {
        let g = Arc::new(b.g.clone());
        ModelPlan::new(g, &PlanOptions::default())
            .expect("plan")
            .tiles_for(0)
    };
    assert_eq!(plan_tiles, 4, "20 rows in panels of 6");
    let out = run(
        b.g,
        &[
            Tensor::from_f32(vec![m, k], a.clone()),
            Tensor::from_f32(vec![m, n], res.clone()),
        ],
    );
    let base = matmul_ref(&a, &bm, m, k, n);
    let want: Vec<f32> = (0..m * n).map(|i| base[i] + 0.5 * cm[i] + res[i]).collect();
    assert_close(f32s(&out[0]), &want, 1e-5);
}

/// A fresh state of `plan` with `inputs` set, in order.
fn state_with(plan: &ModelPlan, inputs: &[&Tensor]) -> ExecState {
    let mut st = plan.new_state();
    for (i, x) in inputs.iter().enumerate() {
        plan.set_input(&mut st, i, const_bytes(x)).expect("set");
    }
    st
}

/// The bytes of every graph output of `plan` in `st`.
fn outputs_of(plan: &ModelPlan, st: &ExecState) -> Vec<Vec<u8>> {
    (0..plan.graph().outputs.len())
        .map(|k| {
            let mut o = vec![0u8; plan.output_len(k)];
            plan.read_output(st, k, &mut o).expect("read");
            o
        })
        .collect()
}

/// Nodes 0 and 1 of `plan` in thirds, interleaved: the first of node 0, all of node 1,
/// then the rest of node 0.
fn run_interleaved(plan: &ModelPlan, st: &mut ExecState) {
    let t = |index| Tile { index, count: 3 };
    plan.run_node(st, 0, t(0)).expect("tile");
    for i in 0..3 {
        plan.run_node(st, 1, t(i)).expect("tile");
    }
    plan.run_node(st, 0, t(1)).expect("tile");
    plan.run_node(st, 0, t(2)).expect("tile");
}

#[test]
fn gemm_column_tiles_share_packed_a_or_pack_it_again() {
    // Two products wider than A is read in place, of two inputs: the tiles of one run
    // between the other's must pack A again rather than use the other's leftovers.
    let (m, k, n) = (8, 9, 300);
    let mut b = B::default();
    let ins = [b.input(DType::F32, &[m, k]), b.input(DType::F32, &[m, k])];
    for (s, ai) in (0..2u64).zip(ins) {
        let bi = b.kf(&[k, n], rand_vec(k * n, 111 + s));
        let y = b.n1(Op::MatMul { post: vec![] }, &[ai, bi], DType::F32, &[m, n]);
        b.out(y);
    }
    let g = Arc::new(b.g);
    let plan = ModelPlan::new(g, &PlanOptions::default()).expect("plan");
    assert!(plan.tiles_for(0) >= 3, "column tiles");
    let [x0, x1] = [110, 120].map(|seed| Tensor::from_f32(vec![m, k], rand_vec(m * k, seed)));
    let fresh = || state_with(&plan, &[&x0, &x1]);
    let read = |st: &ExecState| outputs_of(&plan, st);
    let mut st = fresh();
    plan.run_all(&mut st).expect("whole");
    let want = read(&st);
    let t = |index| Tile { index, count: 3 };
    // In order, then interleaved with the other product.
    let mut st = fresh();
    for node in 0..2 {
        for i in 0..3 {
            plan.run_node(&mut st, node, t(i)).expect("tile");
        }
    }
    assert_eq!(read(&st), want, "tiles in order");
    let mut st = fresh();
    run_interleaved(&plan, &mut st);
    assert_eq!(read(&st), want, "interleaved tiles");
    // A later tile alone, first of all: packs A itself.
    let mut st = fresh();
    plan.run_node(&mut st, 1, Tile { index: 0, count: 1 })
        .expect("whole");
    for i in [2, 1, 0] {
        plan.run_node(&mut st, 0, t(i)).expect("tile");
    }
    assert_eq!(read(&st), want, "tiles out of order");
}

#[test]
fn plan_is_shareable_and_state_is_sendable() {
    fn shared<T: Send + Sync>() {}
    fn sendable<T: Send>() {}
    shared::<ModelPlan>();
    shared::<Arc<ModelPlan>>();
    sendable::<ExecState>();
}

#[test]
fn mistyped_outputs_fail_at_plan_time() {
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 4, 4]);
    let y = b.n1(Op::GlobalAveragePool, &[x], DType::I64, &[1, 2, 1, 1]);
    b.out(y);
    let e = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect_err("i64 pool output");
    assert!(e.to_string().contains("declared i64"), "{e}");
    let mut b = B::default();
    let x = b.input(DType::I64, &[3]);
    let y = b.n1(Op::Transpose { perm: None }, &[x], DType::F32, &[3]);
    b.out(y);
    assert!(ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).is_err());
}

#[test]
fn eval_node_scalar_and_int_shape_math() {
    let g = Graph::default();
    let node = |op: Op, n_in: usize| Node {
        name: op.name().into(),
        op,
        inputs: (0..n_in).map(|_| Some(usize::MAX)).collect(),
        outputs: vec![usize::MAX],
        absorbed: vec![],
        placement: None,
    };
    let s = |v: i64| Tensor::from_i64(vec![], vec![v]);
    let v = |x: &[i64]| Tensor::from_i64(vec![x.len()], x.to_vec());
    let mul = eval_node(
        &g,
        &node(Op::Binary(BinaryOp::Mul), 2),
        &[Some(&s(6)), Some(&s(7))],
    )
    .expect("mul");
    assert_eq!(mul[0], s(42));
    let eq = eval_node(
        &g,
        &node(Op::Binary(BinaryOp::Equal), 2),
        &[Some(&v(&[1, 2, 3])), Some(&s(2))],
    )
    .expect("eq");
    assert_eq!(eq[0], Tensor::new(vec![3], TensorData::Bool(vec![0, 1, 0])));
    let w = eval_node(
        &g,
        &node(Op::Where, 3),
        &[Some(&eq[0]), Some(&s(-1)), Some(&v(&[4, 5, 6]))],
    )
    .expect("where");
    assert_eq!(w[0], v(&[4, -1, 6]));
    let sl = eval_node(
        &g,
        &node(Op::Slice, 3),
        &[
            Some(&v(&[9, 8, 7, 6])),
            Some(&v(&[1])),
            Some(&v(&[i64::MAX])),
        ],
    )
    .expect("slice");
    assert_eq!(sl[0], v(&[8, 7, 6]));
    let red = Op::Reduce {
        op: ReduceOp::Prod,
        axes: None,
        keepdims: false,
        noop_with_empty_axes: false,
    };
    let p = eval_node(&g, &node(red, 1), &[Some(&v(&[2, 3, 4]))]).expect("prod");
    assert_eq!(p[0], s(24));
    let cast = eval_node(&g, &node(Op::Cast { to: DType::F32 }, 1), &[Some(&p[0])]).expect("cast");
    assert_eq!(cast[0], Tensor::from_f32(vec![], vec![24.0]));
    let rng = eval_node(
        &g,
        &node(Op::Range, 3),
        &[Some(&s(0)), Some(&s(5)), Some(&s(2))],
    )
    .expect("range");
    assert_eq!(rng[0], v(&[0, 2, 4]));
    let cos = Op::ConstantOfShape {
        value: Tensor::from_i64(vec![1], vec![1]),
    };
    let ones = eval_node(&g, &node(cos, 1), &[Some(&v(&[2, 2]))]).expect("constant of shape");
    assert_eq!(ones[0], Tensor::from_i64(vec![2, 2], vec![1; 4]));
}

#[test]
fn malformed_graphs_are_errors_not_panics() {
    // Conv weights of the wrong rank.
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 4, 4]);
    let w = b.kf(&[2], vec![1.0, 2.0]);
    let y = b.n1(
        Op::Conv {
            geom: geom(&[], &[], &[]),
            group: 1,
            post: vec![],
        },
        &[x, w],
        DType::F32,
        &[1, 2, 4, 4],
    );
    b.out(y);
    assert!(ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).is_err());
    // Softmax of a scalar, and an input nobody produces.
    let mut b = B::default();
    let x = b.input(DType::F32, &[]);
    let y = b.n1(Op::Softmax { axis: 0 }, &[x], DType::F32, &[]);
    b.out(y);
    let dangling = b.val(DType::F32, &[3]);
    let z = b.n1(Op::Unary(UnaryOp::Relu), &[dangling], DType::F32, &[3]);
    b.out(z);
    assert!(ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).is_err());
    let mut b = B::default();
    let dangling = b.val(DType::F32, &[3]);
    let z = b.n1(Op::Unary(UnaryOp::Relu), &[dangling], DType::F32, &[3]);
    b.out(z);
    let e = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect_err("dangling input");
    assert!(e.to_string().contains("not produced"), "{e}");
}

#[test]
fn recurrent_tiles_resume_from_the_scratch_or_rebuild_it() {
    // Two bidirectional LSTMs over one input: the second one's tiles run between the
    // first one's, which must then rebuild its state rather than read the second's.
    let (seq, inp, hs) = (5, 3, 4);
    let x = rand_vec(seq * inp, 90);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[seq, 1, inp]);
    let mut outs = Vec::new();
    for k in 0..2u64 {
        let wi = b.kf(&[2, 4 * hs, inp], rand_vec(2 * 4 * hs * inp, 91 + k));
        let ri = b.kf(&[2, 4 * hs, hs], rand_vec(2 * 4 * hs * hs, 93 + k));
        let o = b.node(
            Op::Lstm {
                hidden_size: hs,
                direction: RnnDirection::Bidirectional,
                layout: 0,
            },
            &[Some(xi), Some(wi), Some(ri)],
            &[(DType::F32, &[seq, 2, 1, hs]), (DType::F32, &[2, 1, hs])],
        );
        b.out(o[0]);
        b.out(o[1]);
        outs.push(o);
    }
    let g = Arc::new(b.g);
    let plan = ModelPlan::new(g.clone(), &PlanOptions::default()).expect("plan");
    assert_eq!(
        plan.tiles_for(0),
        2 + 2 * seq,
        "two projections, each direction's steps"
    );
    let read = |st: &ExecState| outputs_of(&plan, st);
    let input = Tensor::from_f32(vec![seq, 1, inp], x);
    let fresh = || state_with(&plan, &[&input]);
    let mut st = fresh();
    plan.run_all(&mut st).expect("whole");
    let want = read(&st);
    // Interleaved: 0 of node 0, all of node 1, then the rest of node 0.
    let mut st = fresh();
    run_interleaved(&plan, &mut st);
    assert_eq!(read(&st), want, "interleaved tiles");
    let t = |index| Tile { index, count: 3 };
    // Out of order: the last tile alone, first of all.
    let mut st = fresh();
    plan.run_node(&mut st, 1, Tile { index: 0, count: 1 })
        .expect("whole");
    plan.run_node(&mut st, 0, t(2)).expect("last tile alone");
    assert_eq!(read(&st), want, "last tile alone");
}

#[test]
fn winograd_channel_tiles_share_the_input_transform_as_units() {
    // A 3x3 conv on a small plane with many output channels: cut finer than its tile
    // panels, its units are the channel panels on each block of plane tiles (several
    // blocks here). Every cut, interleaved with another node, and a last tile run alone
    // must give the whole node's bits.
    let (ci, co, hw) = (64, 64, 24);
    let mut b = B::default();
    let xi = b.input(DType::F32, &[1, ci, hw, hw]);
    // The other conv reads another input, so its transform differs.
    let x2 = b.input(DType::F32, &[1, ci, hw, hw]);
    let conv = |b: &mut B, xi, seed: u64| {
        let wi = b.kf(&[co, ci, 3, 3], rand_vec(co * ci * 9, seed));
        let bi = b.kf(&[co], rand_vec(co, seed + 1));
        let y = b.n1(
            Op::Conv {
                geom: geom(&[3, 3], &[], &[1, 1, 1, 1]),
                group: 1,
                post: vec![PostOp::Unary(UnaryOp::Relu)],
            },
            &[xi, wi, bi],
            DType::F32,
            &[1, co, hw, hw],
        );
        b.out(y);
    };
    conv(&mut b, xi, 100);
    conv(&mut b, x2, 200);
    let g = Arc::new(b.g);
    let plan = ModelPlan::new(g.clone(), &PlanOptions::default()).expect("plan");
    let tiles = plan.tiles_for(0);
    assert!(
        tiles > co.div_ceil(crate::kernels::gemm::MR),
        "a Winograd conv with channel units on several blocks: {tiles} tiles"
    );
    let input = Tensor::from_f32(vec![1, ci, hw, hw], rand_vec(ci * hw * hw, 101));
    let other = Tensor::from_f32(vec![1, ci, hw, hw], rand_vec(ci * hw * hw, 102));
    let fresh = || state_with(&plan, &[&input, &other]);
    let read = |st: &ExecState| outputs_of(&plan, st);
    let mut st = fresh();
    plan.run_all(&mut st).expect("whole");
    let want = read(&st);
    for count in [2, 3, 5, 7, 12, tiles] {
        let mut st = fresh();
        for index in 0..count {
            plan.run_node(&mut st, 0, Tile { index, count })
                .expect("tile");
            // The other conv in between after the first tile.
            if index == 0 {
                plan.run_node(&mut st, 1, Tile::WHOLE).expect("other");
            }
        }
        assert_eq!(read(&st), want, "{count} tiles, interleaved");
        let mut st = fresh();
        plan.run_node(&mut st, 1, Tile::WHOLE).expect("other");
        for index in 0..count {
            plan.run_node(&mut st, 0, Tile { index, count })
                .expect("tile");
        }
        assert_eq!(read(&st), want, "{count} tiles in order");
    }
    // The last tile alone first, then the rest in order (rewriting the same values).
    let mut st = fresh();
    plan.run_node(&mut st, 1, Tile::WHOLE).expect("other");
    plan.run_node(
        &mut st,
        0,
        Tile {
            index: tiles - 1,
            count: tiles,
        },
    )
    .expect("last");
    for index in 0..tiles - 1 {
        plan.run_node(
            &mut st,
            0,
            Tile {
                index,
                count: tiles,
            },
        )
        .expect("tile");
    }
    assert_eq!(read(&st), want, "last tile first");
}

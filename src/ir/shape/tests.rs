//! Unit tests of the shape rules.

use super::layout::slice_len;
use super::*;
use crate::ir::{
    BinaryOp, ConvGeom, CoordMode, ImageFormat, NearestMode, PadMode, ReduceOp, ResizeMode,
    RnnDirection, UnaryOp, Value,
};

enum In {
    V(DType, Vec<usize>),
    C(Tensor),
    Absent,
}

fn f(s: &[usize]) -> In {
    In::V(DType::F32, s.to_vec())
}
fn ci(v: &[i64]) -> In {
    In::C(Tensor::from_i64(vec![v.len()], v.to_vec()))
}
fn cf(v: &[f32]) -> In {
    In::C(Tensor::from_f32(vec![v.len()], v.to_vec()))
}

fn run(op: Op, ins: Vec<In>, nout: usize) -> Result<Vec<TypedShape>> {
    let mut g = Graph::default();
    let inputs = ins
        .into_iter()
        .enumerate()
        .map(|(i, x)| match x {
            In::V(dtype, s) => Some(g.add_value(Value {
                name: format!("in{i}"),
                dtype,
                shape: Some(s),
                declared: None,
                konst: None,
            })),
            In::C(t) => Some(g.add_const(format!("in{i}"), t)),
            In::Absent => None,
        })
        .collect();
    let outputs = (0..nout)
        .map(|i| {
            g.add_value(Value {
                name: format!("out{i}"),
                dtype: DType::F32,
                shape: None,
                declared: None,
                konst: None,
            })
        })
        .collect();
    let node = Node {
        name: "n".into(),
        op,
        inputs,
        outputs,
        absorbed: vec!["n".into()],
        placement: None,
    };
    infer_node(&g, &node)
}

fn shape(op: Op, ins: Vec<In>) -> Vec<usize> {
    let mut o = run(op, ins, 1).expect("infers");
    o.remove(0).1
}

fn geom(k: &[usize], s: &[usize], pads: &[usize], auto: Option<&str>) -> ConvGeom {
    ConvGeom {
        kernel: k.to_vec(),
        strides: s.to_vec(),
        dilations: vec![1; k.len()],
        pads: pads.to_vec(),
        auto_pad: auto.map(str::to_string),
    }
}

fn conv(g: ConvGeom, group: usize) -> Op {
    Op::Conv {
        geom: g,
        group,
        post: vec![],
    }
}

#[test]
fn conv_output_sizes_and_auto_pad() {
    let x = || f(&[1, 4, 7, 7]);
    let w = || f(&[8, 4, 3, 3]);
    assert_eq!(
        shape(
            conv(geom(&[3, 3], &[1, 1], &[1, 1, 1, 1], None), 1),
            vec![x(), w()]
        ),
        [1, 8, 7, 7]
    );
    assert_eq!(
        shape(
            conv(geom(&[3, 3], &[2, 2], &[0; 4], None), 1),
            vec![x(), w()]
        ),
        [1, 8, 3, 3]
    );
    assert_eq!(
        shape(
            conv(geom(&[3, 3], &[2, 2], &[0; 4], Some("SAME_UPPER")), 1),
            vec![x(), w()]
        ),
        [1, 8, 4, 4]
    );
    // Depthwise with bias.
    let dw = conv(geom(&[3, 3], &[1, 1], &[1, 1, 1, 1], None), 4);
    assert_eq!(
        shape(dw, vec![x(), f(&[4, 1, 3, 3]), f(&[4])]),
        [1, 4, 7, 7]
    );
    let mut g = geom(&[3, 3], &[1, 1], &[1, 1, 1, 1], None);
    g.dilations = vec![2, 2];
    assert_eq!(shape(conv(g, 1), vec![x(), w()]), [1, 8, 5, 5]);
    let e = run(
        conv(geom(&[3, 3], &[1, 1], &[0; 4], None), 1),
        vec![x(), f(&[8, 3, 3, 3])],
        1,
    )
    .expect_err("channels");
    assert!(
        matches!(&e, Error::Shape { node, .. } if node == "n"),
        "{e}"
    );
    assert!(e.to_string().contains("channels"), "{e}");
}

#[test]
fn resolve_auto_pad_upper_lower_valid() {
    let mut g = geom(&[3, 3], &[2, 2], &[0; 4], Some("SAME_UPPER"));
    resolve_auto_pad(&mut g, &[8, 7]);
    // out = 4: total = 3*2+3-8 = 1 for H, 3*2+3-7 = 2 for W.
    assert_eq!(
        (g.pads.clone(), g.auto_pad.clone()),
        (vec![0, 1, 1, 1], None)
    );
    let mut g = geom(&[3, 3], &[2, 2], &[0; 4], Some("SAME_LOWER"));
    resolve_auto_pad(&mut g, &[8, 7]);
    assert_eq!(g.pads, vec![1, 1, 0, 1]);
    let mut g = geom(&[2], &[1], &[5, 5], Some("VALID"));
    resolve_auto_pad(&mut g, &[4]);
    assert_eq!(g.pads, vec![0, 0]);
    let mut g = geom(&[2], &[1], &[1, 2], None);
    resolve_auto_pad(&mut g, &[4]);
    assert_eq!(g.pads, vec![1, 2], "explicit pads are kept");
}

#[test]
fn pooling_ceil_mode_and_global() {
    let mp = |k: usize, s: usize, p: usize, ceil_mode: bool| Op::MaxPool {
        geom: geom(&[k, k], &[s, s], &[p; 4], None),
        ceil_mode,
    };
    assert_eq!(
        shape(mp(3, 2, 0, false), vec![f(&[1, 2, 6, 6])]),
        [1, 2, 2, 2]
    );
    assert_eq!(
        shape(mp(3, 2, 0, true), vec![f(&[1, 2, 6, 6])]),
        [1, 2, 3, 3]
    );
    // The last ceil-mode window would start in the right padding: dropped.
    assert_eq!(
        shape(mp(2, 2, 1, true), vec![f(&[1, 2, 3, 3])]),
        [1, 2, 2, 2]
    );
    let ap = Op::AveragePool {
        geom: geom(&[2, 2], &[2, 2], &[0; 4], Some("SAME_LOWER")),
        ceil_mode: false,
        count_include_pad: false,
    };
    assert_eq!(shape(ap, vec![f(&[1, 2, 5, 5])]), [1, 2, 3, 3]);
    assert_eq!(
        shape(Op::GlobalAveragePool, vec![f(&[2, 3, 5, 5])]),
        [2, 3, 1, 1]
    );
    assert!(run(mp(7, 1, 0, false), vec![f(&[1, 1, 3, 3])], 1).is_err());
}

#[test]
fn conv_transpose_sizes_and_pads() {
    let ct = |g: ConvGeom, op: Vec<usize>, os: Vec<usize>| Op::ConvTranspose {
        geom: g,
        group: 1,
        output_padding: op,
        output_shape: os,
        post: vec![],
    };
    let x = || f(&[1, 4, 3, 3]);
    let w = || f(&[4, 2, 3, 3]);
    let g = geom(&[3, 3], &[2, 2], &[0; 4], None);
    assert_eq!(
        shape(ct(g.clone(), vec![0, 0], vec![]), vec![x(), w()]),
        [1, 2, 7, 7]
    );
    assert_eq!(
        shape(ct(g.clone(), vec![1, 1], vec![]), vec![x(), w()]),
        [1, 2, 8, 8]
    );
    assert_eq!(
        shape(ct(g.clone(), vec![0, 0], vec![6, 5]), vec![x(), w()]),
        [1, 2, 6, 5]
    );
    let same = geom(&[3, 3], &[2, 2], &[0; 4], Some("SAME_UPPER"));
    assert_eq!(
        shape(ct(same.clone(), vec![0, 0], vec![]), vec![x(), w()]),
        [1, 2, 6, 6]
    );
    let mut r = same;
    let out =
        resolve_conv_transpose_pads("n", &mut r, &mut [0, 0], &[], &[3, 3]).expect("resolves");
    assert_eq!(
        (out, r.pads, r.auto_pad),
        (vec![6, 6], vec![0, 0, 1, 1], None)
    );
    // Larger than reachable (7): trailing rows through output_padding.
    let mut r = g;
    let mut op = [0, 0];
    let out =
        resolve_conv_transpose_pads("n", &mut r, &mut op, &[9, 6], &[3, 3]).expect("resolves");
    assert_eq!((out, op, r.pads), (vec![9, 6], [2, 0], vec![0, 1, 0, 0]));
    let mut r = geom(&[3, 3], &[1, 1], &[3, 3, 3, 3], None);
    assert!(resolve_conv_transpose_pads("n", &mut r, &mut [0, 0], &[], &[1, 1]).is_err());
}

#[test]
fn gemm_and_matmul_broadcast() {
    let gemm = |ta, tb| Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: ta,
        trans_b: tb,
        post: vec![],
    };
    assert_eq!(
        shape(gemm(false, true), vec![f(&[2, 3]), f(&[5, 3]), f(&[5])]),
        [2, 5]
    );
    assert_eq!(
        shape(gemm(true, false), vec![f(&[3, 2]), f(&[3, 5])]),
        [2, 5]
    );
    assert!(run(gemm(false, false), vec![f(&[2, 3]), f(&[5, 3])], 1).is_err());
    let mm = || Op::MatMul { post: vec![] };
    assert_eq!(
        shape(mm(), vec![f(&[2, 1, 3, 4]), f(&[5, 4, 6])]),
        [2, 5, 3, 6]
    );
    assert_eq!(shape(mm(), vec![f(&[4]), f(&[2, 4, 6])]), [2, 6]);
    assert_eq!(shape(mm(), vec![f(&[3, 4]), f(&[4])]), [3]);
    assert!(run(mm(), vec![f(&[3, 4]), f(&[5, 6])], 1).is_err());
    let fused = Op::MatMul {
        post: vec![PostOp::AddInput { input: 2 }],
    };
    assert_eq!(
        shape(fused.clone(), vec![f(&[3, 4]), f(&[4, 2]), f(&[3, 2])]),
        [3, 2]
    );
    assert!(run(fused, vec![f(&[3, 4]), f(&[4, 2]), f(&[2, 3])], 1).is_err());
}

#[test]
fn elementwise_types_and_broadcasting() {
    let out = run(
        Op::Binary(BinaryOp::Add),
        vec![f(&[2, 1, 4]), f(&[3, 1])],
        1,
    )
    .expect("add");
    assert_eq!(out, vec![(DType::F32, vec![2, 3, 4])]);
    let out = run(Op::Binary(BinaryOp::Less), vec![f(&[4]), f(&[])], 1).expect("less");
    assert_eq!(out, vec![(DType::Bool, vec![4])]);
    assert!(run(Op::Binary(BinaryOp::Mul), vec![f(&[2, 3]), f(&[4])], 1).is_err());
    assert_eq!(
        shape(
            Op::Binary(BinaryOp::PRelu),
            vec![f(&[1, 3, 2, 2]), f(&[3, 1, 1])]
        ),
        [1, 3, 2, 2]
    );
    let w = run(
        Op::Where,
        vec![In::V(DType::Bool, vec![2, 1]), f(&[1, 3]), f(&[])],
        1,
    )
    .expect("where");
    assert_eq!(w, vec![(DType::F32, vec![2, 3])]);
    let not = run(
        Op::Unary(UnaryOp::Not),
        vec![In::V(DType::Bool, vec![5])],
        1,
    )
    .expect("not");
    assert_eq!(not[0].0, DType::Bool);
    let cast = run(Op::Cast { to: DType::I32 }, vec![f(&[2, 2])], 1).expect("cast");
    assert_eq!(cast, vec![(DType::I32, vec![2, 2])]);
    assert_eq!(
        shape(Op::ClipDynamic, vec![f(&[3]), cf(&[0.0]), In::Absent]),
        [3]
    );
    let norm = Op::BatchNorm { epsilon: 1e-5 };
    assert_eq!(
        shape(
            norm,
            vec![f(&[1, 2, 3]), f(&[2]), f(&[2]), f(&[2]), f(&[2])]
        ),
        [1, 2, 3]
    );
    let ln = Op::LayerNorm {
        axis: -1,
        epsilon: 1e-5,
    };
    assert_eq!(shape(ln, vec![f(&[2, 5]), f(&[5])]), [2, 5]);
}

#[test]
fn reshape_flatten_squeeze_unsqueeze_transpose() {
    let rs = |z| Op::Reshape { allowzero: z };
    assert_eq!(shape(rs(false), vec![f(&[2, 3, 4]), ci(&[0, -1])]), [2, 12]);
    assert_eq!(shape(rs(false), vec![f(&[2, 3, 4]), ci(&[-1])]), [24]);
    assert_eq!(shape(rs(true), vec![f(&[0, 3]), ci(&[3, 0])]), [3, 0]);
    assert!(run(rs(false), vec![f(&[2, 3]), ci(&[4, -1])], 1).is_err());
    assert!(run(rs(false), vec![f(&[2, 3]), ci(&[-1, -1])], 1).is_err());
    let e = run(rs(false), vec![f(&[2, 3]), f(&[2])], 1).expect_err("not constant");
    assert!(e.to_string().contains("must be a constant"), "{e}");
    assert_eq!(
        shape(Op::Flatten { axis: 2 }, vec![f(&[2, 3, 4, 5])]),
        [6, 20]
    );
    assert_eq!(shape(Op::Flatten { axis: 0 }, vec![f(&[2, 3])]), [1, 6]);
    assert_eq!(
        shape(Op::Squeeze { axes: None }, vec![f(&[1, 3, 1, 2])]),
        [3, 2]
    );
    assert_eq!(
        shape(Op::Squeeze { axes: None }, vec![f(&[1, 3, 1]), ci(&[-1])]),
        [1, 3]
    );
    assert!(run(
        Op::Squeeze {
            axes: Some(vec![1])
        },
        vec![f(&[1, 3])],
        1
    )
    .is_err());
    assert_eq!(
        shape(
            Op::Unsqueeze {
                axes: Some(vec![0, -1])
            },
            vec![f(&[3, 4])]
        ),
        [1, 3, 4, 1]
    );
    assert_eq!(
        shape(Op::Unsqueeze { axes: None }, vec![f(&[3]), ci(&[1])]),
        [3, 1]
    );
    assert_eq!(
        shape(Op::Transpose { perm: None }, vec![f(&[2, 3, 4])]),
        [4, 3, 2]
    );
    assert_eq!(
        shape(
            Op::Transpose {
                perm: Some(vec![0, 2, 1])
            },
            vec![f(&[2, 3, 4])]
        ),
        [2, 4, 3]
    );
    assert!(run(
        Op::Transpose {
            perm: Some(vec![0, 0, 1])
        },
        vec![f(&[2, 3, 4])],
        1
    )
    .is_err());
}

#[test]
fn slice_clamps_and_negative_steps() {
    let sl = |ins| shape(Op::Slice, ins);
    assert_eq!(sl(vec![f(&[10, 4]), ci(&[2]), ci(&[1000])]), [8, 4]);
    assert_eq!(
        sl(vec![f(&[10, 4]), ci(&[0]), ci(&[-1]), ci(&[0]), ci(&[2])]),
        [5, 4]
    );
    assert_eq!(
        sl(vec![
            f(&[10, 4]),
            ci(&[-1]),
            ci(&[i64::MIN]),
            ci(&[0]),
            ci(&[-1])
        ]),
        [10, 4]
    );
    assert_eq!(
        sl(vec![f(&[10, 4]), ci(&[3]), ci(&[0]), ci(&[1]), ci(&[-2])]),
        [10, 2]
    );
    assert_eq!(sl(vec![f(&[10, 4]), ci(&[5]), ci(&[2])]), [0, 4]);
    assert_eq!(
        sl(vec![
            f(&[10, 4]),
            ci(&[1, 1]),
            ci(&[i64::MAX, 3]),
            ci(&[-1, 0]),
            In::Absent
        ]),
        [2, 3]
    );
    assert!(run(
        Op::Slice,
        vec![f(&[4]), ci(&[0]), ci(&[2]), ci(&[0]), ci(&[0])],
        1
    )
    .is_err());
}

#[test]
fn pad_resize_expand_tile() {
    let pad = || Op::Pad {
        mode: PadMode::Constant,
    };
    assert_eq!(
        shape(pad(), vec![f(&[1, 3, 4]), ci(&[0, 1, 2, 0, 1, -1])]),
        [1, 5, 5]
    );
    assert_eq!(
        shape(
            pad(),
            vec![f(&[1, 3, 4]), ci(&[1, 1]), In::Absent, ci(&[-1])]
        ),
        [1, 3, 6]
    );
    assert!(run(pad(), vec![f(&[2]), ci(&[-2, -1])], 1).is_err());
    let resize = || Op::Resize {
        mode: ResizeMode::Nearest,
        coord: CoordMode::Asymmetric,
        nearest: NearestMode::Floor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
    };
    assert_eq!(
        shape(
            resize(),
            vec![f(&[1, 3, 5, 5]), In::Absent, cf(&[1.0, 1.0, 1.5, 2.0])]
        ),
        [1, 3, 7, 10]
    );
    assert_eq!(
        shape(
            resize(),
            vec![f(&[1, 3, 5, 5]), In::Absent, cf(&[]), ci(&[1, 3, 9, 2])]
        ),
        [1, 3, 9, 2]
    );
    assert!(run(resize(), vec![f(&[1, 3, 5, 5])], 1).is_err());
    assert_eq!(
        shape(Op::Expand, vec![f(&[3, 1]), ci(&[2, 1, 4])]),
        [2, 3, 4]
    );
    assert_eq!(shape(Op::Tile, vec![f(&[2, 3]), ci(&[2, 1])]), [4, 3]);
    assert!(run(Op::Tile, vec![f(&[2, 3]), ci(&[i64::MAX, 2])], 1).is_err());
}

#[test]
fn split_topk_reduce_argmax_gather() {
    let split = |s: Option<Vec<i64>>, n| Op::Split {
        axis: 1,
        split: s,
        num_outputs: n,
    };
    let o = run(split(None, 3), vec![f(&[2, 7])], 3).expect("uneven split");
    assert_eq!(o.iter().map(|x| x.1[1]).collect::<Vec<_>>(), [3, 3, 1]);
    let o = run(split(None, 2), vec![f(&[2, 7]), ci(&[5, 2])], 2).expect("input sizes");
    assert_eq!(o[0].1, [2, 5]);
    assert!(run(split(Some(vec![1, 1]), 2), vec![f(&[2, 7])], 2).is_err());
    let topk = Op::TopK {
        axis: -1,
        largest: true,
        sorted: true,
    };
    let o = run(topk.clone(), vec![f(&[2, 10]), ci(&[3])], 2).expect("topk");
    assert_eq!(o, vec![(DType::F32, vec![2, 3]), (DType::I64, vec![2, 3])]);
    assert!(run(topk, vec![f(&[2, 10]), ci(&[11])], 2).is_err());
    let red = |axes, keepdims, noop| Op::Reduce {
        op: ReduceOp::Mean,
        axes,
        keepdims,
        noop_with_empty_axes: noop,
    };
    assert_eq!(
        shape(red(Some(vec![1, -1]), true, false), vec![f(&[2, 3, 4])]),
        [2, 1, 1]
    );
    assert_eq!(
        shape(red(None, false, false), vec![f(&[2, 3, 4]), ci(&[0])]),
        [3, 4]
    );
    assert_eq!(
        shape(red(None, false, false), vec![f(&[2, 3, 4])]),
        Vec::<usize>::new()
    );
    assert_eq!(shape(red(None, true, true), vec![f(&[2, 3, 4])]), [2, 3, 4]);
    let am = run(
        Op::ArgMax {
            axis: 1,
            keepdims: false,
            select_last_index: false,
        },
        vec![f(&[2, 3, 4])],
        1,
    )
    .expect("argmax");
    assert_eq!(am, vec![(DType::I64, vec![2, 4])]);
    let idx = In::V(DType::I64, vec![5, 6]);
    assert_eq!(
        shape(Op::Gather { axis: 1 }, vec![f(&[2, 3, 4]), idx]),
        [2, 5, 6, 4]
    );
    let scalar = In::C(Tensor::from_i64(vec![], vec![1]));
    assert_eq!(shape(Op::Gather { axis: 0 }, vec![f(&[3, 4]), scalar]), [4]);
    let idx = In::V(DType::I64, vec![2, 2]);
    assert_eq!(
        shape(Op::GatherElements { axis: 0 }, vec![f(&[3, 2]), idx]),
        [2, 2]
    );
    let o = run(Op::Concat { axis: -1 }, vec![f(&[2, 3]), f(&[2, 5])], 1).expect("concat");
    assert_eq!(o[0].1, [2, 8]);
    assert!(run(Op::Concat { axis: 0 }, vec![f(&[2, 3]), f(&[2, 5])], 1).is_err());
}

#[test]
fn shape_range_constant_of_shape() {
    let s = |start, end| run(Op::Shape { start, end }, vec![f(&[2, 3, 4, 5])], 1).expect("shape");
    assert_eq!(s(0, None), vec![(DType::I64, vec![4])]);
    assert_eq!(s(1, Some(-1))[0].1, [2]);
    assert_eq!(s(-10, Some(10))[0].1, [4]);
    assert_eq!(s(3, Some(1))[0].1, [0]);
    let sc = |v: i64| In::C(Tensor::from_i64(vec![], vec![v]));
    let r = run(Op::Range, vec![sc(0), sc(10), sc(3)], 1).expect("int range");
    assert_eq!(r, vec![(DType::I64, vec![4])]);
    assert_eq!(shape(Op::Range, vec![sc(10), sc(0), sc(-3)]), [4]);
    assert_eq!(shape(Op::Range, vec![sc(5), sc(0), sc(1)]), [0]);
    let fs = |v: f32| In::C(Tensor::from_f32(vec![], vec![v]));
    assert_eq!(shape(Op::Range, vec![fs(0.0), fs(1.0), fs(0.25)]), [4]);
    assert!(run(Op::Range, vec![sc(0), sc(1), sc(0)], 1).is_err());
    let cos = Op::ConstantOfShape {
        value: Tensor::from_i64(vec![1], vec![7]),
    };
    assert_eq!(
        run(cos, vec![ci(&[2, 3])], 1).expect("cos"),
        vec![(DType::I64, vec![2, 3])]
    );
}

#[test]
fn recurrent_layouts() {
    let lstm = |direction, layout| Op::Lstm {
        hidden_size: 4,
        direction,
        layout,
    };
    let o = run(
        lstm(RnnDirection::Forward, 0),
        vec![f(&[7, 2, 3]), f(&[1, 16, 3]), f(&[1, 16, 4])],
        3,
    )
    .expect("lstm");
    assert_eq!(
        o.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        [vec![7, 1, 2, 4], vec![1, 2, 4], vec![1, 2, 4]]
    );
    let o = run(
        lstm(RnnDirection::Bidirectional, 1),
        vec![f(&[2, 7, 3]), f(&[2, 16, 3]), f(&[2, 16, 4])],
        3,
    )
    .expect("lstm layout 1");
    assert_eq!(o[0].1, [2, 7, 2, 4]);
    assert_eq!(o[1].1, [2, 2, 4]);
    let gru = Op::Gru {
        hidden_size: 4,
        direction: RnnDirection::Reverse,
        linear_before_reset: true,
        layout: 0,
    };
    let o = run(
        gru.clone(),
        vec![f(&[7, 2, 3]), f(&[1, 12, 3]), f(&[1, 12, 4])],
        2,
    )
    .expect("gru");
    assert_eq!(o[0].1, [7, 1, 2, 4]);
    assert!(run(gru, vec![f(&[7, 2, 3]), f(&[1, 16, 3]), f(&[1, 16, 4])], 2).is_err());
}

#[test]
fn image_ops_preprocess_and_test_ops() {
    let d2s = Op::DepthToSpace {
        blocksize: 2,
        crd_mode: false,
    };
    assert_eq!(shape(d2s, vec![f(&[1, 8, 3, 3])]), [1, 2, 6, 6]);
    assert_eq!(
        shape(Op::SpaceToDepth { blocksize: 2 }, vec![f(&[1, 2, 6, 6])]),
        [1, 8, 3, 3]
    );
    let pre = |format, nhwc| Op::Preprocess {
        format,
        nhwc,
        mean: vec![0.0; 3],
        scale: vec![1.0; 3],
        to_bgr: false,
    };
    let u8in = |s: &[usize]| In::V(DType::U8, s.to_vec());
    let o = run(pre(ImageFormat::Nv12, false), vec![u8in(&[1, 6, 4])], 1).expect("nv12");
    assert_eq!(o, vec![(DType::F32, vec![1, 3, 4, 4])]);
    assert!(run(pre(ImageFormat::Nv12, false), vec![u8in(&[1, 5, 4])], 1).is_err());
    assert_eq!(
        shape(pre(ImageFormat::Rgb, true), vec![u8in(&[2, 5, 7, 3])]),
        [2, 3, 5, 7]
    );
    assert_eq!(
        shape(pre(ImageFormat::Gray, false), vec![u8in(&[1, 1, 5, 7])]),
        [1, 1, 5, 7]
    );
    assert!(run(pre(ImageFormat::Bgr, true), vec![u8in(&[1, 5, 7, 1])], 1).is_err());
    assert!(run(pre(ImageFormat::Rgb, true), vec![f(&[1, 5, 7, 3])], 1).is_err());
    #[cfg(feature = "test-ops")]
    {
        let spin = run(
            Op::Spin { micros: 10 },
            vec![In::V(DType::I32, vec![3, 2])],
            1,
        )
        .expect("spin");
        assert_eq!(spin, vec![(DType::I32, vec![3, 2])]);
        assert_eq!(shape(Op::Fail { panic: false }, vec![f(&[1])]), [1]);
    }
    let nms = Op::NonMaxSuppression {
        center_point_box: false,
    };
    assert_eq!(
        shape(nms.clone(), vec![f(&[1, 50, 4]), f(&[1, 3, 50]), ci(&[10])]),
        [30, 3]
    );
    assert_eq!(shape(nms, vec![f(&[1, 50, 4]), f(&[1, 3, 50])]), [0, 3]);
    assert_eq!(
        shape(
            Op::CumSum {
                exclusive: false,
                reverse: true
            },
            vec![f(&[3, 4]), ci(&[1])]
        ),
        [3, 4]
    );
    assert_eq!(shape(Op::Softmax { axis: -1 }, vec![f(&[3, 4])]), [3, 4]);
    assert!(run(Op::Softmax { axis: 2 }, vec![f(&[3, 4])], 1).is_err());
}

#[test]
fn infer_graph_records_shapes_and_reports_non_constant_arguments() {
    let mut g = Graph::default();
    let x = g.add_value(Value {
        name: "x".into(),
        dtype: DType::F32,
        shape: Some(vec![2, 6]),
        declared: None,
        konst: None,
    });
    let s = g.add_value(Value {
        name: "s".into(),
        dtype: DType::I64,
        shape: None,
        declared: None,
        konst: None,
    });
    let y = g.add_value(Value {
        name: "y".into(),
        dtype: DType::F32,
        shape: None,
        declared: None,
        konst: None,
    });
    g.nodes.push(Node {
        name: "shape".into(),
        op: Op::Shape {
            start: 0,
            end: None,
        },
        inputs: vec![Some(x)],
        outputs: vec![s],
        absorbed: vec![],
        placement: None,
    });
    g.nodes.push(Node {
        name: "reshape".into(),
        op: Op::Reshape { allowzero: false },
        inputs: vec![Some(x), Some(s)],
        outputs: vec![y],
        absorbed: vec![],
        placement: None,
    });
    let e = infer_graph(&mut g).expect_err("shape output is not folded");
    assert!(
        e.to_string().contains("'reshape'") && e.to_string().contains("must be a constant"),
        "{e}"
    );
    assert_eq!(g.values[s].shape.as_deref(), Some(&[2][..]));
    g.values[s].konst = Some(std::sync::Arc::new(Tensor::from_i64(vec![2], vec![3, 4])));
    infer_graph(&mut g).expect("folded");
    assert_eq!(g.values[y].shape.as_deref(), Some(&[3, 4][..]));
}

#[test]
fn slice_len_matches_reference_iteration() {
    // Property: for every small dim/start/end/step, the computed length equals the
    // number of indices the ONNX reference loop visits.
    for d in 0..6i64 {
        for start in -8..8 {
            for end in -8..8 {
                for step in [-3, -2, -1, 1, 2, 3] {
                    let norm = |v: i64| if v < 0 { v + d } else { v };
                    let (mut s, e) = if step > 0 {
                        (norm(start).clamp(0, d), norm(end).clamp(0, d))
                    } else {
                        (norm(start).clamp(-1, d - 1), norm(end).clamp(-1, d - 1))
                    };
                    let mut count = 0;
                    while (step > 0 && s < e) || (step < 0 && s > e) {
                        count += 1;
                        s += step;
                    }
                    assert_eq!(
                        slice_len(d, start, end, step),
                        count,
                        "d={d} {start}:{end}:{step}"
                    );
                }
            }
        }
    }
    // Extreme steps and bounds do not overflow.
    assert_eq!(slice_len(10, 0, i64::MAX, i64::MAX), 1);
    assert_eq!(slice_len(10, i64::MAX, i64::MIN, i64::MIN), 1);
    assert_eq!(slice_len(10, i64::MIN, i64::MAX, 1), 10);
}

#[test]
fn trailing_masks() {
    use super::is_trailing_mask as t;
    assert!(t(&[1, 1, 4, 5], &[1, 2, 4, 5]));
    assert!(t(&[4, 5], &[1, 2, 4, 5]));
    assert!(t(&[5], &[3, 5]));
    assert!(t(&[2, 4, 5], &[2, 4, 5]));
    assert!(!t(&[1, 2, 1, 5], &[1, 2, 4, 5]));
    assert!(!t(&[4, 1], &[1, 2, 4, 5]));
    assert!(!t(&[1, 1, 1, 4, 5], &[2, 4, 5]));
    assert!(!t(&[], &[2, 4, 5]));
    assert!(t(&[1], &[3, 1]));
    assert!(!t(&[1], &[3, 2]));
}

#[test]
fn attention_shapes() {
    let at = |ins: Vec<In>| run(Op::Attention, ins, 1);
    let (q, kt, v) = (f(&[1, 2, 4, 3]), f(&[1, 2, 3, 5]), f(&[1, 2, 5, 6]));
    let out = at(vec![q, kt, In::Absent, v]).expect("no mask");
    assert_eq!(out, vec![(DType::F32, vec![1, 2, 4, 6])]);
    for mask in [&[1, 1, 4, 5][..], &[4, 5], &[5], &[1, 2, 4, 5]] {
        let ins = vec![
            f(&[1, 2, 4, 3]),
            f(&[1, 2, 3, 5]),
            f(mask),
            f(&[1, 2, 5, 6]),
        ];
        assert_eq!(at(ins).expect("mask")[0].1, [1, 2, 4, 6], "{mask:?}");
    }
    assert_eq!(
        shape(
            Op::Attention,
            vec![f(&[4, 3]), f(&[3, 5]), In::Absent, f(&[5, 6])]
        ),
        [4, 6]
    );
    let bad: [[&[usize]; 4]; 7] = [
        // A mask that is not the scores' trailing dims.
        [&[1, 2, 4, 3], &[1, 2, 3, 5], &[1, 2, 1, 5], &[1, 2, 5, 6]],
        [&[1, 2, 4, 3], &[1, 2, 3, 5], &[5, 1], &[1, 2, 5, 6]],
        // Inner dims that do not chain.
        [&[1, 2, 4, 3], &[1, 2, 4, 5], &[], &[1, 2, 5, 6]],
        [&[1, 2, 4, 3], &[1, 2, 3, 5], &[], &[1, 2, 4, 6]],
        // Batch dims that differ (broadcasting is not part of the op) or ranks.
        [&[1, 2, 4, 3], &[1, 1, 3, 5], &[], &[1, 2, 5, 6]],
        [&[1, 2, 4, 3], &[2, 3, 5], &[], &[1, 2, 5, 6]],
        [&[3], &[3, 5], &[], &[5, 6]],
    ];
    for [q, kt, m, v] in bad {
        let mask = if m.is_empty() { In::Absent } else { f(m) };
        assert!(
            at(vec![f(q), f(kt), mask, f(v)]).is_err(),
            "{q:?} {kt:?} {m:?} {v:?}"
        );
    }
    // Missing v.
    assert!(at(vec![f(&[4, 3]), f(&[3, 5])]).is_err());
}

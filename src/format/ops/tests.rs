//! Every op survives its record round trip; unknown names and bad attributes are errors.

use super::*;
use crate::ir::*;

fn geom() -> ConvGeom {
    ConvGeom {
        kernel: vec![3, 3],
        strides: vec![2, 1],
        dilations: vec![1, 2],
        pads: vec![1, 0, 1, 0],
        auto_pad: Some("SAME_UPPER".into()),
    }
}

fn every_op() -> Vec<Op> {
    let post = vec![
        PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        PostOp::ChannelAffine {
            scale: vec![1.0, 2.0],
            shift: vec![0.5, -0.5],
        },
        PostOp::ChannelPRelu { slope: vec![0.1] },
        PostOp::AddInput { input: 3 },
        PostOp::Unary(UnaryOp::Gelu { tanh_approx: true }),
    ];
    let mut ops = vec![
        Op::Conv {
            geom: geom(),
            group: 2,
            post: post.clone(),
        },
        Op::ConvNhwc {
            geom: geom(),
            group: 2,
            post: post.clone(),
        },
        Op::ExpandConvNhwc {
            expand: vec![PostOp::Unary(UnaryOp::Relu)],
            geom: geom(),
            group: 2,
            post: post.clone(),
        },
        Op::DwProjectNhwc {
            expand: Some(vec![PostOp::Unary(UnaryOp::Relu)]),
            geom: geom(),
            group: 2,
            post: vec![PostOp::Unary(UnaryOp::Relu)],
            project: post.clone(),
        },
        Op::DwProjectNhwc {
            expand: None,
            geom: geom(),
            group: 2,
            post: vec![],
            project: post.clone(),
        },
        Op::ConvTranspose {
            geom: geom(),
            group: 1,
            output_padding: vec![1, 0],
            output_shape: vec![],
            post: post.clone(),
        },
        Op::Gemm {
            alpha: 0.5,
            beta: 2.0,
            trans_a: false,
            trans_b: true,
            post: post.clone(),
        },
        Op::MatMul { post },
        Op::BatchNorm { epsilon: 1e-5 },
        Op::InstanceNorm { epsilon: 1e-3 },
        Op::LayerNorm {
            axis: -1,
            epsilon: 1e-6,
        },
        Op::Where,
        Op::ClipDynamic,
        Op::Cast { to: DType::I64 },
        Op::MaxPool {
            geom: geom(),
            ceil_mode: true,
        },
        Op::MaxPoolNhwc {
            geom: geom(),
            ceil_mode: true,
        },
        Op::AveragePool {
            geom: geom(),
            ceil_mode: false,
            count_include_pad: true,
        },
        Op::GlobalAveragePool,
        Op::GlobalMaxPool,
        Op::Concat { axis: 1 },
        Op::Split {
            axis: 0,
            split: Some(vec![1, 2]),
            num_outputs: 2,
        },
        Op::Split {
            axis: 1,
            split: None,
            num_outputs: 3,
        },
        Op::Slice,
        Op::Reshape { allowzero: true },
        Op::Flatten { axis: 1 },
        Op::Squeeze { axes: None },
        Op::Squeeze { axes: Some(vec![]) },
        Op::Unsqueeze {
            axes: Some(vec![0, -1]),
        },
        Op::Transpose { perm: None },
        Op::Transpose {
            perm: Some(vec![0, 2, 1]),
        },
        Op::Pad {
            mode: PadMode::Reflect,
        },
        Op::Resize {
            mode: ResizeMode::Cubic,
            coord: CoordMode::TfCropAndResize,
            nearest: NearestMode::Ceil,
            cubic_coeff_a: -0.5,
            exclude_outside: true,
            extrapolation_value: 1.5,
        },
        Op::Softmax { axis: -1 },
        Op::MaskedSoftmax,
        Op::Attention,
        Op::LogSoftmax { axis: 1 },
        Op::Reduce {
            op: ReduceOp::LogSumExp,
            axes: Some(vec![1]),
            keepdims: true,
            noop_with_empty_axes: false,
        },
        Op::Reduce {
            op: ReduceOp::Mean,
            axes: None,
            keepdims: false,
            noop_with_empty_axes: true,
        },
        Op::ArgMax {
            axis: 1,
            keepdims: false,
            select_last_index: true,
        },
        Op::ArgMin {
            axis: 0,
            keepdims: true,
            select_last_index: false,
        },
        Op::TopK {
            axis: -1,
            largest: false,
            sorted: true,
        },
        Op::Gather { axis: 1 },
        Op::GatherElements { axis: -2 },
        Op::GatherND { batch_dims: 1 },
        Op::Expand,
        Op::Lstm {
            hidden_size: 16,
            direction: RnnDirection::Bidirectional,
            layout: 1,
        },
        Op::Gru {
            hidden_size: 8,
            direction: RnnDirection::Reverse,
            linear_before_reset: true,
            layout: 0,
        },
        Op::DepthToSpace {
            blocksize: 2,
            crd_mode: true,
        },
        Op::SpaceToDepth { blocksize: 4 },
        Op::Shape {
            start: 1,
            end: Some(-1),
        },
        Op::Shape {
            start: 0,
            end: None,
        },
        Op::ConstantOfShape {
            value: Tensor::new(vec![1], TensorData::I32(vec![-7])),
        },
        Op::Range,
        Op::Tile,
        Op::CumSum {
            exclusive: true,
            reverse: false,
        },
        Op::NonMaxSuppression {
            center_point_box: true,
        },
        Op::Preprocess {
            format: ImageFormat::Nv12,
            nhwc: true,
            mean: vec![1.0, 2.0, 3.0],
            scale: vec![0.5],
            to_bgr: true,
        },
        Op::Binary(BinaryOp::Mod { fmod: true }),
    ];
    for u in [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -1.0,
            max: 1.0,
        },
        UnaryOp::Sigmoid,
        UnaryOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        UnaryOp::HardSwish,
        UnaryOp::Elu { alpha: 1.0 },
        UnaryOp::Selu {
            alpha: 1.6,
            gamma: 1.05,
        },
        UnaryOp::Tanh,
        UnaryOp::Gelu { tanh_approx: false },
        UnaryOp::Erf,
        UnaryOp::Softplus,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Sqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
        UnaryOp::Not,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Identity,
        UnaryOp::Silu,
    ] {
        ops.push(Op::Unary(u));
    }
    for b in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Mod { fmod: false },
        BinaryOp::Equal,
        BinaryOp::Less,
        BinaryOp::LessOrEqual,
        BinaryOp::Greater,
        BinaryOp::GreaterOrEqual,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::PRelu,
    ] {
        ops.push(Op::Binary(b));
    }
    for r in [
        ReduceOp::Sum,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::L1,
        ReduceOp::L2,
        ReduceOp::SumSquare,
    ] {
        ops.push(Op::Reduce {
            op: r,
            axes: Some(vec![0]),
            keepdims: true,
            noop_with_empty_axes: false,
        });
    }
    #[cfg(feature = "test-ops")]
    ops.extend([Op::Spin { micros: 250 }, Op::Fail { panic: true }]);
    ops
}

#[test]
fn every_op_round_trips() {
    let mut names = std::collections::HashSet::new();
    for op in every_op() {
        let (name, attrs) = encode_op(&op).unwrap();
        let back = decode_op(&name, &attrs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, op, "{name}");
        names.insert(name);
    }
    // Distinct IR ops never share a record name.
    assert!(names.contains("Clip") && names.contains("ClipDynamic"));
}

#[test]
fn unknown_names_and_bad_attributes_are_errors() {
    assert!(decode_op("NoSuchOp", &[]).unwrap_err().contains("unknown"));
    let e = decode_op("Conv", &[]).unwrap_err();
    assert!(e.contains("missing"), "{e}");
    let (name, mut attrs) = encode_op(&Op::Reshape { allowzero: true }).unwrap();
    attrs[0].i = 7;
    assert!(decode_op(&name, &attrs).unwrap_err().contains("0 or 1"));
    let (name, mut attrs) = encode_op(&Op::Pad {
        mode: PadMode::Edge,
    })
    .unwrap();
    attrs[0].s = "mirror".into();
    assert!(decode_op(&name, &attrs).is_err());
    let (name, mut attrs) = encode_op(&Op::ConstantOfShape {
        value: Tensor::from_f32(vec![2], vec![1.0, 2.0]),
    })
    .unwrap();
    attrs[0].tensor.as_mut().unwrap().shape = vec![3];
    assert!(decode_op(&name, &attrs).is_err());
}

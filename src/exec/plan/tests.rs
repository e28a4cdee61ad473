//! Plan-time rejection of inconsistent nodes: graphs built directly (bypassing the
//! importer's and the shape rules' checks) whose shapes, indices or attributes do not
//! fit must fail in `ModelPlan::new`, never panic or index out of bounds when run.

use crate::error::Error;
use crate::exec::tests::{geom, B};
use crate::exec::{ModelPlan, PlanOptions};
use crate::ir::{
    BinaryOp, DType, Graph, Op, PadMode, ReduceOp, RnnDirection, Tensor, TensorData, UnaryOp,
};
use std::sync::Arc;

/// Plans `g`, which must fail with a plan error (not a panic); returns the error.
fn plan_err(g: Graph) -> Error {
    let e = ModelPlan::new(Arc::new(g), &PlanOptions::default()).expect_err("must not plan");
    assert!(
        matches!(
            e,
            Error::Shape { .. }
                | Error::BadAttribute { .. }
                | Error::UnsupportedOp { .. }
                | Error::InvalidArgument { .. }
        ),
        "{e}"
    );
    e
}

/// A one-node graph: `op` on f32 `inputs` (shapes) with one output of `dt` and `out`.
fn one(op: Op, inputs: &[&[usize]], dt: DType, out: &[usize]) -> Graph {
    let mut b = B::default();
    let ins: Vec<_> = inputs.iter().map(|s| b.input(DType::F32, s)).collect();
    let y = b.n1(op, &ins, dt, out);
    b.out(y);
    b.g
}

#[test]
fn reduce_axes_and_sizes_must_fit_the_input() {
    let sum = |axes: Vec<i64>| Op::Reduce {
        op: ReduceOp::Sum,
        axes: Some(axes),
        keepdims: true,
        noop_with_empty_axes: false,
    };
    // An axis beyond the rank.
    let e = plan_err(one(sum(vec![3]), &[&[2, 3]], DType::F32, &[2, 1]));
    assert!(e.to_string().contains("axis"), "{e}");
    // An empty input reduced to more elements than its kept dims.
    plan_err(one(sum(vec![1]), &[&[2, 0]], DType::F32, &[1000]));
    // ArgMax, CumSum, Softmax, LayerNorm: outputs of the wrong size.
    let arg = Op::ArgMax {
        axis: 1,
        keepdims: true,
        select_last_index: false,
    };
    plan_err(one(arg, &[&[2, 3]], DType::I64, &[5]));
    plan_err(one(Op::Softmax { axis: 1 }, &[&[2, 3]], DType::F32, &[2]));
    let mut b = B::default();
    let x = b.input(DType::F32, &[2, 3]);
    let ax = b.ki(&[0]);
    let y = b.n1(
        Op::CumSum {
            exclusive: false,
            reverse: false,
        },
        &[x, ax],
        DType::F32,
        &[2],
    );
    b.out(y);
    plan_err(b.g);
}

#[test]
fn graph_io_and_constants_must_exist_and_match() {
    // Graph input / output value indices out of range.
    let mut g = relu_of(&[3]);
    g.inputs.push(99);
    plan_err(g);
    let mut g = relu_of(&[3]);
    g.outputs.push(99);
    plan_err(g);
    // A node whose input or output value does not exist.
    let mut g = relu_of(&[3]);
    g.nodes[0].inputs[0] = Some(77);
    plan_err(g);
    // A constant whose data is shorter than its value's shape.
    let mut b = B::default();
    let x = b.input(DType::F32, &[4]);
    let k = b.kf(&[4], vec![1.0; 4]);
    b.g.values[k].shape = Some(vec![8]);
    b.g.values[x].shape = Some(vec![8]);
    let y = b.n1(Op::Binary(BinaryOp::Add), &[x, k], DType::F32, &[8]);
    b.out(y);
    let e = plan_err(b.g);
    assert!(e.to_string().contains("constant"), "{e}");
}

#[test]
fn layout_and_index_ops_must_stay_inside_their_tensors() {
    // Tile whose output is larger than the repeats make.
    let mut b = B::default();
    let x = b.input(DType::F32, &[3]);
    let r = b.ki(&[2]);
    let y = b.n1(Op::Tile, &[x, r], DType::F32, &[7]);
    b.out(y);
    plan_err(b.g);
    // Edge / reflect / wrap padding of an empty dim, and pads past the input.
    for (mode, pads, xs, os) in [
        (PadMode::Reflect, [1i64, 1], [0usize], [2usize]),
        (PadMode::Edge, [1, 1], [0], [2]),
        (PadMode::Constant, [-5, 5], [3], [3]),
    ] {
        let mut b = B::default();
        let x = b.input(DType::F32, &xs);
        let p = b.ki(&pads);
        let y = b.n1(Op::Pad { mode }, &[x, p], DType::F32, &os);
        b.out(y);
        plan_err(b.g);
    }
    // Gather whose output is not outer x indices x inner.
    let mut b = B::default();
    let x = b.input(DType::F32, &[4, 2]);
    let i = b.input(DType::I64, &[3]);
    let y = b.n1(Op::Gather { axis: 0 }, &[x, i], DType::F32, &[8, 2]);
    b.out(y);
    plan_err(b.g);
    // GatherElements indices larger than the data off the axis.
    let mut b = B::default();
    let x = b.input(DType::F32, &[2, 2]);
    let i = b.input(DType::I64, &[2, 5]);
    let y = b.n1(Op::GatherElements { axis: 0 }, &[x, i], DType::F32, &[2, 5]);
    b.out(y);
    plan_err(b.g);
    // TopK with outputs of the wrong size.
    let mut b = B::default();
    let x = b.input(DType::F32, &[2, 5]);
    let k = b.ki(&[2]);
    let op = Op::TopK {
        axis: 1,
        largest: true,
        sorted: true,
    };
    let outs: [(DType, &[usize]); 2] = [(DType::F32, &[2, 4]), (DType::I64, &[2, 4])];
    let ys = b.node(op, &[Some(x), Some(k)], &outs);
    b.out(ys[0]);
    b.out(ys[1]);
    plan_err(b.g);
    // Range from an empty start.
    let mut b = B::default();
    let s = b.k(Tensor::new(vec![0], TensorData::I64(vec![])));
    let l = b.k(Tensor::new(vec![], TensorData::I64(vec![4])));
    let d = b.k(Tensor::new(vec![], TensorData::I64(vec![1])));
    let y = b.n1(Op::Range, &[s, l, d], DType::I64, &[4]);
    b.out(y);
    plan_err(b.g);
}

#[test]
fn conv_pool_norm_and_rnn_geometry_must_fit() {
    let conv = |k: &[usize]| Op::Conv {
        geom: geom(k, &[], &[]),
        group: 1,
        post: vec![],
    };
    // Kernel attribute larger than the weights.
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 5, 5]);
    let w = b.kf(&[2, 2, 1, 1], vec![1.0; 4]);
    let y = b.n1(conv(&[3, 3]), &[x, w], DType::F32, &[1, 2, 3, 3]);
    b.out(y);
    plan_err(b.g);
    // Output batch larger than the input's.
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 3, 3]);
    let w = b.kf(&[2, 2, 1, 1], vec![1.0; 4]);
    let y = b.n1(conv(&[]), &[x, w], DType::F32, &[4, 2, 3, 3]);
    b.out(y);
    plan_err(b.g);
    // Pools: more output channels than input ones; a global pool of the wrong size.
    let mp = Op::MaxPool {
        geom: geom(&[2, 2], &[2, 2], &[]),
        ceil_mode: false,
    };
    plan_err(one(mp, &[&[1, 2, 4, 4]], DType::F32, &[1, 8, 2, 2]));
    plan_err(one(
        Op::GlobalAveragePool,
        &[&[1, 2, 4, 4]],
        DType::F32,
        &[1, 6, 1, 1],
    ));
    // InstanceNorm with an output of the wrong size.
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 2, 3]);
    let sc = b.kf(&[2], vec![1.0; 2]);
    let bi = b.kf(&[2], vec![0.0; 2]);
    let y = b.n1(
        Op::InstanceNorm { epsilon: 1e-5 },
        &[x, sc, bi],
        DType::F32,
        &[1, 2, 9],
    );
    b.out(y);
    plan_err(b.g);
    // LSTM whose Y output is smaller than the sequence makes.
    let mut b = B::default();
    let (h, i) = (2, 3);
    let x = b.input(DType::F32, &[4, 1, i]);
    let w = b.kf(&[1, 4 * h, i], vec![0.1; 4 * h * i]);
    let r = b.kf(&[1, 4 * h, h], vec![0.1; 4 * h * h]);
    let op = Op::Lstm {
        hidden_size: h,
        direction: RnnDirection::Forward,
        layout: 0,
    };
    let y = b.n1(op, &[x, w, r], DType::F32, &[1, 1, 1, h]);
    b.out(y);
    plan_err(b.g);
}

#[test]
fn extreme_slice_attributes_and_sizes_are_errors_or_plans_not_panics() {
    // Negative step over an empty dim, and steps / starts at the i64 limits: these plan
    // (the output shape decides) and run.
    for (xs, starts, ends, steps, os) in [
        (vec![0usize], i64::MAX, i64::MIN, -1i64, vec![0usize]),
        (vec![5], 0, i64::MAX, i64::MAX, vec![1]),
        (vec![5], i64::MAX, i64::MIN, i64::MIN, vec![1]),
    ] {
        let mut b = B::default();
        let x = b.input(DType::F32, &xs);
        let (s, e) = (b.ki(&[starts]), b.ki(&[ends]));
        let ax = b.ki(&[0]);
        let st = b.ki(&[steps]);
        let y = b.n1(Op::Slice, &[x, s, e, ax, st], DType::F32, &os);
        b.out(y);
        let plan = ModelPlan::new(Arc::new(b.g), &PlanOptions::default()).expect("plans");
        let mut state = plan.new_state();
        plan.set_input(&mut state, 0, &vec![0u8; plan.input_len(0)])
            .expect("input");
        plan.run_all(&mut state).expect("runs");
    }
    // A value whose byte size overflows.
    let e = plan_err(relu_of(&[usize::MAX / 2, 4]));
    assert!(e.to_string().contains("too large"), "{e}");
}

/// A one-node graph: Relu of an f32 of shape `s`.
fn relu_of(s: &[usize]) -> Graph {
    one(Op::Unary(UnaryOp::Relu), &[s], DType::F32, s)
}

#[test]
fn attention_shapes_must_chain() {
    let at = |ins: &[&[usize]], out: &[usize]| {
        let mut b = B::default();
        let v: Vec<_> = ins.iter().map(|s| b.input(DType::F32, s)).collect();
        let ins = [
            Some(v[0]),
            Some(v[1]),
            v.get(3).map(|_| v[2]),
            Some(v[v.len() - 1]),
        ];
        let y = b.node(Op::Attention, &ins, &[(DType::F32, out)])[0];
        b.out(y);
        b.g
    };
    // Inner dims, batch dims, the mask and the output must all fit.
    plan_err(at(&[&[2, 4, 3], &[2, 4, 5], &[2, 5, 6]], &[2, 4, 6]));
    plan_err(at(&[&[2, 4, 3], &[1, 3, 5], &[2, 5, 6]], &[2, 4, 6]));
    plan_err(at(
        &[&[2, 4, 3], &[2, 3, 5], &[1, 4, 1], &[2, 5, 6]],
        &[2, 4, 6],
    ));
    plan_err(at(&[&[2, 4, 3], &[2, 3, 5], &[2, 5, 6]], &[2, 4, 5]));
    plan_err(at(&[&[3], &[3, 5], &[5, 6]], &[6]));
}

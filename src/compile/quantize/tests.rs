//! Tests of the int8 lowering: outputs before and after the pass agree within one
//! quantisation step, and the expected int8 nodes appear.

use super::*;
use crate::compile::testutil::{rand_vec, run_graph, GraphBuilder};
use crate::ir::{BinaryOp, ConvGeom};

/// A node with one output of `shape` (f32 until inference types it).
fn node(g: &mut Graph, name: &str, op: Op, ins: &[Option<ValueId>], shape: &[usize]) -> ValueId {
    let out = g.add_value(crate::ir::Value {
        name: format!("{name}_out"),
        dtype: DType::F32,
        shape: Some(shape.to_vec()),
        declared: None,
        konst: None,
    });
    g.nodes.push(Node {
        name: name.into(),
        op,
        inputs: ins.to_vec(),
        outputs: vec![out],
        absorbed: vec![name.into()],
        placement: None,
    });
    out
}

/// `x → Q(s8) → DQ → Conv(DQ(w), DQ(b)) + Relu → Q(s8) → DQ`, then MaxPool between DQ
/// and Q, and an Add of the two paths.
fn qdq_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1, 4, 6, 6]);
    let mut g = b.finish(&[]);
    let f =
        |g: &mut Graph, n: &str, s: Vec<usize>, v: Vec<f32>| g.add_const(n, Tensor::from_f32(s, v));
    let xs = f(&mut g, "xs", vec![], vec![2.0 / 255.0]);
    let ys = f(&mut g, "ys", vec![], vec![0.05]);
    let wsv = vec![0.01f32, 0.02, 0.015, 0.01, 0.03, 0.02];
    let ws = f(&mut g, "ws", vec![6], wsv.clone());
    let bs = f(
        &mut g,
        "bs",
        vec![6],
        wsv.iter().map(|w| w * (2.0 / 255.0)).collect(),
    );
    let i8c = |g: &mut Graph, n: &str, s: Vec<usize>, v: Vec<i8>| {
        g.add_const(n, Tensor::new(s, TensorData::I8(v)))
    };
    let (xz, yz) = (
        i8c(&mut g, "xz", vec![], vec![3]),
        i8c(&mut g, "yz", vec![], vec![-100]),
    );
    let wv: Vec<i8> = rand_vec(6 * 4 * 9, 7)
        .iter()
        .map(|v| (v * 127.0) as i8)
        .collect();
    let w = i8c(&mut g, "w", vec![6, 4, 3, 3], wv);
    let bias = g.add_const(
        "b",
        Tensor::new(vec![6], TensorData::I32(vec![10, -20, 30, 0, 5, -5])),
    );
    let q8 = Op::QuantizeLinear {
        axis: None,
        dtype: DType::I8,
    };
    let dq = Op::DequantizeLinear { axis: None };
    let s = [1, 6, 6, 6];
    let xq = node(
        &mut g,
        "xq",
        q8.clone(),
        &[Some(x), Some(xs), Some(xz)],
        &[1, 4, 6, 6],
    );
    let xd = node(
        &mut g,
        "xd",
        dq.clone(),
        &[Some(xq), Some(xs), Some(xz)],
        &[1, 4, 6, 6],
    );
    let pc = Op::DequantizeLinear { axis: Some(0) };
    let wd = node(
        &mut g,
        "wd",
        pc.clone(),
        &[Some(w), Some(ws), None],
        &[6, 4, 3, 3],
    );
    let bd = node(&mut g, "bd", pc, &[Some(bias), Some(bs), None], &[6]);
    let geom = ConvGeom {
        kernel: vec![3, 3],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        auto_pad: None,
    };
    let conv = Op::Conv {
        geom: geom.clone(),
        group: 1,
        post: vec![PostOp::Unary(UnaryOp::Relu)],
    };
    let c = node(&mut g, "conv", conv, &[Some(xd), Some(wd), Some(bd)], &s);
    let yq = node(&mut g, "yq", q8.clone(), &[Some(c), Some(ys), Some(yz)], &s);
    let yd = node(
        &mut g,
        "yd",
        dq.clone(),
        &[Some(yq), Some(ys), Some(yz)],
        &s,
    );
    let pool = Op::MaxPool {
        geom,
        ceil_mode: false,
    };
    let p = node(&mut g, "pool", pool, &[Some(yd)], &s);
    let pq = node(&mut g, "pq", q8.clone(), &[Some(p), Some(ys), Some(yz)], &s);
    let pd = node(
        &mut g,
        "pd",
        dq.clone(),
        &[Some(pq), Some(ys), Some(yz)],
        &s,
    );
    let add = Op::Binary(BinaryOp::Add);
    let a = node(&mut g, "add", add, &[Some(yd), Some(pd)], &s);
    let aq = node(&mut g, "aq", q8, &[Some(a), Some(ys), Some(yz)], &s);
    let ad = node(&mut g, "ad", dq, &[Some(aq), Some(ys), Some(yz)], &s);
    g.outputs = vec![ad];
    crate::ir::shape::infer_graph(&mut g).expect("infer");
    g
}

/// The graph run in float (weights folded, nothing lowered): the reference.
fn float(g: &Graph) -> Graph {
    let mut f = g.clone();
    fold_constant_dequantize(&mut f).expect("fold");
    f
}

#[test]
fn conv_pool_add_lower_to_int8_within_one_step() {
    let g = qdq_graph();
    let x = rand_vec(4 * 36, 3);
    let want = run_graph(&float(&g), std::slice::from_ref(&x));
    let mut l = g.clone();
    assert_eq!(lower_int8(&mut l).expect("lower"), 3);
    let ops: Vec<&str> = l.nodes.iter().map(|n| n.op.name()).collect();
    assert!(
        ops.contains(&"QConv") && ops.contains(&"QMaxPool") && ops.contains(&"QAdd"),
        "{ops:?}"
    );
    assert!(!ops.contains(&"Conv") && !ops.contains(&"Add"), "{ops:?}");
    fold_constant_dequantize(&mut l).expect("fold");
    let got = run_graph(&l, &[x]);
    let step = 0.05f32;
    for (a, b) in got[0].iter().zip(&want[0]) {
        assert!((a - b).abs() <= step * 1.001, "{a} vs {b}");
    }
}

#[test]
fn unmatched_patterns_stay_in_float() {
    // A Conv whose output is not quantised stays a float Conv on folded weights.
    let mut g = qdq_graph();
    let conv_out = g
        .nodes
        .iter()
        .find(|n| n.name == "conv")
        .map(|n| n.outputs[0])
        .expect("conv");
    g.outputs.push(conv_out);
    let mut l = g.clone();
    lower_int8(&mut l).expect("lower");
    assert!(l
        .nodes
        .iter()
        .any(|n| n.name == "conv" && matches!(n.op, Op::Conv { .. })));
    assert_eq!(fold_constant_dequantize(&mut l).expect("fold"), 2);
    let x = rand_vec(4 * 36, 5);
    let (a, b) = (
        run_graph(&float(&g), std::slice::from_ref(&x)),
        run_graph(&l, &[x]),
    );
    assert_eq!(a[1], b[1], "the float conv output is unchanged");
}

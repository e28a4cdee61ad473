//! Tests of the int8 lowering: outputs before and after the pass agree within one
//! quantisation step, and the expected int8 nodes appear.

use super::*;
use crate::compile::testutil::{rand_vec, run_graph, GraphBuilder};
use crate::ir::{BinaryOp, ConvGeom};

/// Scalar constants of a Q/DQ node.
fn qp(b: &mut GraphBuilder, name: &str, scale: f32) -> ValueId {
    b.konst(&format!("{name}_s"), &[], vec![scale])
}

/// A u8 zero point constant.
fn zp_u8(g: &mut Graph, name: &str, z: u8) -> ValueId {
    g.add_const(name, Tensor::new(vec![], TensorData::U8(vec![z])))
}

/// An s8 zero point constant.
fn zp_i8(g: &mut Graph, name: &str, z: i8) -> ValueId {
    g.add_const(name, Tensor::new(vec![], TensorData::I8(vec![z])))
}

/// `x → Q(s8) → DQ → Conv(DQ(w)) + bias → Relu → Q(s8) → DQ → y`, then
/// `→ Q → DQ → MaxPool → Q → DQ`, and an Add of the two paths' DQs.
fn qdq_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1, 4, 6, 6]);
    let xs = qp(&mut b, "x", 2.0 / 255.0);
    let ys = qp(&mut b, "y", 0.05);
    let ws = b.konst("w_s", &[6], vec![0.01, 0.02, 0.015, 0.01, 0.03, 0.02]);
    let mut g = b.finish(&[]);
    let (xz, yz) = (zp_i8(&mut g, "xz", 3), zp_i8(&mut g, "yz", -100));
    let wv: Vec<i8> = rand_vec(6 * 4 * 9, 7)
        .iter()
        .map(|v| (v * 127.0) as i8)
        .collect();
    let w = g.add_const("w", Tensor::new(vec![6, 4, 3, 3], TensorData::I8(wv)));
    let bias = g.add_const(
        "b",
        Tensor::new(vec![6], TensorData::I32(vec![10, -20, 30, 0, 5, -5])),
    );
    let bs: Vec<f32> = [0.01f32, 0.02, 0.015, 0.01, 0.03, 0.02]
        .iter()
        .map(|w| w * (2.0 / 255.0))
        .collect();
    let mut b = GraphBuilder::from_graph(g);
    let bsv = b.konst("b_s", &[6], bs);
    let xq = b.node_opt(
        "xq",
        Op::QuantizeLinear {
            axis: None,
            dtype: DType::I8,
        },
        &[Some(x), Some(xs), Some(xz)],
        &[1, 4, 6, 6],
    );
    let xd = b.node_opt(
        "xd",
        Op::DequantizeLinear { axis: None },
        &[Some(xq), Some(xs), Some(xz)],
        &[1, 4, 6, 6],
    );
    let wd = b.node_opt(
        "wd",
        Op::DequantizeLinear { axis: Some(0) },
        &[Some(w), Some(ws), None],
        &[6, 4, 3, 3],
    );
    let bd = b.node_opt(
        "bd",
        Op::DequantizeLinear { axis: Some(0) },
        &[Some(bias), Some(bsv), None],
        &[6],
    );
    let geom = ConvGeom {
        kernel: vec![3, 3],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        auto_pad: None,
    };
    let conv = b.node(
        "conv",
        Op::Conv {
            geom: geom.clone(),
            group: 1,
            post: vec![PostOp::Unary(UnaryOp::Relu)],
        },
        &[xd, wd, bd],
        &[1, 6, 6, 6],
    );
    let yq = b.node_opt(
        "yq",
        Op::QuantizeLinear {
            axis: None,
            dtype: DType::I8,
        },
        &[Some(conv), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let yd = b.node_opt(
        "yd",
        Op::DequantizeLinear { axis: None },
        &[Some(yq), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let pool = b.node(
        "pool",
        Op::MaxPool {
            geom: geom.clone(),
            ceil_mode: false,
        },
        &[yd],
        &[1, 6, 6, 6],
    );
    let pq = b.node_opt(
        "pq",
        Op::QuantizeLinear {
            axis: None,
            dtype: DType::I8,
        },
        &[Some(pool), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let pd = b.node_opt(
        "pd",
        Op::DequantizeLinear { axis: None },
        &[Some(pq), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let add = b.node("add", Op::Binary(BinaryOp::Add), &[yd, pd], &[1, 6, 6, 6]);
    let aq = b.node_opt(
        "aq",
        Op::QuantizeLinear {
            axis: None,
            dtype: DType::I8,
        },
        &[Some(add), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let ad = b.node_opt(
        "ad",
        Op::DequantizeLinear { axis: None },
        &[Some(aq), Some(ys), Some(yz)],
        &[1, 6, 6, 6],
    );
    let mut g = b.finish(&[ad]);
    crate::ir::shape::infer_graph(&mut g).expect("infer");
    g
}

#[test]
fn conv_pool_add_lower_to_int8_within_one_step() {
    let g = qdq_graph();
    let x = rand_vec(4 * 36, 3);
    let want = run_graph(&g, &[x.clone()]);
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
    let (a, b) = (run_graph(&g, &[x.clone()]), run_graph(&l, &[x]));
    assert_eq!(a[1], b[1], "the float conv output is unchanged");
}

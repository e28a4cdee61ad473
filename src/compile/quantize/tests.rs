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

/// `v → Q(s8, scale, zp) → DQ`: an activation quantised as `quantize_static` writes it.
fn qdq(g: &mut Graph, name: &str, v: ValueId, scale: f32, zp: i8) -> ValueId {
    let shape = g.values[v].shape.clone().expect("shape");
    let s = g.add_const(format!("{name}_s"), Tensor::from_f32(vec![], vec![scale]));
    let z = g.add_const(
        format!("{name}_z"),
        Tensor::new(vec![], TensorData::I8(vec![zp])),
    );
    let q = Op::QuantizeLinear {
        axis: None,
        dtype: DType::I8,
    };
    let qv = node(
        g,
        &format!("{name}_q"),
        q,
        &[Some(v), Some(s), Some(z)],
        &shape,
    );
    let dq = Op::DequantizeLinear { axis: None };
    node(
        g,
        &format!("{name}_dq"),
        dq,
        &[Some(qv), Some(s), Some(z)],
        &shape,
    )
}

/// A graph `inputs → Q/DQ → op → Q/DQ → output`; `op` gets the dequantised inputs and
/// returns its output.
fn one_op_graph(inputs: &[&[usize]], op: impl FnOnce(&mut Graph, &[ValueId]) -> ValueId) -> Graph {
    let mut b = GraphBuilder::new();
    let xs: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(k, s)| b.input(&format!("x{k}"), s))
        .collect();
    let mut g = b.finish(&[]);
    let dqs: Vec<ValueId> = xs
        .iter()
        .enumerate()
        .map(|(k, &x)| qdq(&mut g, &format!("in{k}"), x, 0.0123 + 0.004 * k as f32, -7))
        .collect();
    let y = op(&mut g, &dqs);
    crate::ir::shape::infer_graph(&mut g).expect("infer");
    let out = qdq(&mut g, "out", y, 0.0091, 13);
    g.outputs = vec![out];
    crate::ir::shape::infer_graph(&mut g).expect("infer");
    g
}

/// Lowers `g`, checks that `want` replaced `float_op` (no DQ → f32 op → Q left), and
/// that the outputs stay within one step of the float graph.
fn assert_lowers(g: &Graph, want: &str, float_op: &str) {
    let mut l = g.clone();
    assert!(lower_int8(&mut l).expect("lower") >= 1);
    let ops: Vec<&str> = l.nodes.iter().map(|n| n.op.name()).collect();
    assert!(ops.contains(&want), "{want} missing: {ops:?}");
    assert!(
        !ops.contains(&float_op),
        "{float_op} left in float: {ops:?}"
    );
    fold_constant_dequantize(&mut l).expect("fold");
    let inputs: Vec<Vec<f32>> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let n = g.values[v].shape.as_ref().expect("shape").iter().product();
            rand_vec(n, 40 + k as u64).iter().map(|x| x * 1.5).collect()
        })
        .collect();
    let want_out = run_graph(&float(g), &inputs);
    let got = run_graph(&l, &inputs);
    let step = 0.0091f32;
    let mut exact = 0;
    for (a, b) in got[0].iter().zip(&want_out[0]) {
        assert!((a - b).abs() <= step * 1.001, "{want}: {a} vs {b}");
        exact += usize::from(a == b);
    }
    // Bit-exact but for f32 near-ties.
    assert!(
        exact * 100 >= got[0].len() * 95,
        "{want}: {exact} of {}",
        got[0].len()
    );
}

fn resize_linear() -> Op {
    Op::Resize {
        mode: ResizeMode::Linear,
        coord: crate::ir::CoordMode::HalfPixel,
        nearest: crate::ir::NearestMode::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
    }
}

#[test]
fn pools_and_linear_resize_lower_to_int8() {
    let geom = ConvGeom {
        kernel: vec![3, 3],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        auto_pad: None,
    };
    for cip in [false, true] {
        let g = one_op_graph(&[&[1, 4, 9, 9]], |g, x| {
            let op = Op::AveragePool {
                geom: geom.clone(),
                ceil_mode: true,
                count_include_pad: cip,
            };
            node(g, "pool", op, &[Some(x[0])], &[1, 4, 5, 5])
        });
        assert_lowers(&g, "QAvgPool", "AveragePool");
    }
    let g = one_op_graph(&[&[2, 6, 7, 7]], |g, x| {
        node(
            g,
            "gap",
            Op::GlobalAveragePool,
            &[Some(x[0])],
            &[2, 6, 1, 1],
        )
    });
    assert_lowers(&g, "QGlobalAvgPool", "GlobalAveragePool");
    for (scales, out) in [
        ([1.0f32, 1.0, 2.0, 2.0], [1, 3, 10, 12]),
        ([1.0, 1.0, 0.5, 1.5], [1, 3, 2, 9]),
    ] {
        let g = one_op_graph(&[&[1, 3, 5, 6]], |g, x| {
            let s = g.add_const("scales", Tensor::from_f32(vec![4], scales.to_vec()));
            node(
                g,
                "resize",
                resize_linear(),
                &[Some(x[0]), None, Some(s)],
                &out,
            )
        });
        assert_lowers(&g, "QResize", "Resize");
    }
}

#[test]
fn broadcast_add_and_mul_lower_to_int8() {
    let cases: [(&[usize], &[usize]); 4] = [
        (&[1, 8, 5, 5], &[1, 8, 1, 1]),
        (&[1, 8, 1, 1], &[2, 8, 5, 5]),
        (&[2, 8, 5, 5], &[1]),
        (&[1, 8, 5, 5], &[5, 5]),
    ];
    for (a, b) in cases {
        for (op, name) in [(BinaryOp::Add, "QAdd"), (BinaryOp::Mul, "QMul")] {
            let g = one_op_graph(&[a, b], |g, x| {
                let out = if a.len() == 4 && a.iter().product::<usize>() >= 50 {
                    a.to_vec()
                } else {
                    b.to_vec()
                };
                node(g, "op", Op::Binary(op), &[Some(x[0]), Some(x[1])], &out)
            });
            assert_lowers(&g, name, op.name());
        }
    }
}

#[test]
fn broadcast_with_an_s8_constant_lowers_and_odd_forms_stay_in_float() {
    // x * DQ(s8 constant [C, 1, 1]): the constant moves to the u8 domain.
    let g = one_op_graph(&[&[1, 4, 3, 3]], |g, x| {
        let c = g.add_const(
            "k",
            Tensor::new(vec![4, 1, 1], TensorData::I8(vec![-100, 5, 77, 127])),
        );
        let s = g.add_const("k_s", Tensor::from_f32(vec![], vec![0.02]));
        let z = g.add_const("k_z", Tensor::new(vec![], TensorData::I8(vec![3])));
        let dq = Op::DequantizeLinear { axis: None };
        let k = node(g, "k_dq", dq, &[Some(c), Some(s), Some(z)], &[4, 1, 1]);
        node(
            g,
            "mul",
            Op::Binary(BinaryOp::Mul),
            &[Some(x[0]), Some(k)],
            &[1, 4, 3, 3],
        )
    });
    assert_lowers(&g, "QMul", "Mul");
    // [1, C, 1, W] against [1, C, H, W] is not one block: Add stays in float.
    let g = one_op_graph(&[&[1, 4, 3, 5], &[1, 4, 1, 5]], |g, x| {
        let add = Op::Binary(BinaryOp::Add);
        node(g, "add", add, &[Some(x[0]), Some(x[1])], &[1, 4, 3, 5])
    });
    let mut l = g.clone();
    lower_int8(&mut l).expect("lower");
    assert!(l
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::Binary(BinaryOp::Add))));
    assert!(!l.nodes.iter().any(|n| n.op.name() == "QAdd"));
}

#[test]
fn silu_as_lut_and_mul_fuses_into_one_lut() {
    // x * Sigmoid(x) with x quantised: QLut(x) then QMul(x, .) become one QLut, with
    // the same bytes as the two (the float graph within one step, as for any lowering).
    for lut_first in [false, true] {
        let g = one_op_graph(&[&[1, 4, 5, 6]], |g, x| {
            let shape = [1, 4, 5, 6];
            let s = node(g, "sig", Op::Unary(UnaryOp::Sigmoid), &[Some(x[0])], &shape);
            let s = qdq(g, "sig_out", s, 0.0039, -128);
            let ins = if lut_first {
                [Some(s), Some(x[0])]
            } else {
                [Some(x[0]), Some(s)]
            };
            node(g, "mul", Op::Binary(BinaryOp::Mul), &ins, &shape)
        });
        assert_lowers(&g, "QLut", "Mul");
        let mut l = g.clone();
        lower_int8(&mut l).expect("lower");
        let ops: Vec<&str> = l.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops.iter().filter(|&&o| o == "QLut").count(), 1, "{ops:?}");
        assert!(!ops.contains(&"QMul"), "{ops:?}");
    }
    // The Sigmoid's output also read elsewhere: the pair stays two nodes.
    let g = one_op_graph(&[&[1, 4, 5, 6]], |g, x| {
        let shape = [1, 4, 5, 6];
        let s = node(g, "sig", Op::Unary(UnaryOp::Sigmoid), &[Some(x[0])], &shape);
        let s = qdq(g, "sig_out", s, 0.0039, -128);
        let m = node(
            g,
            "mul",
            Op::Binary(BinaryOp::Mul),
            &[Some(x[0]), Some(s)],
            &shape,
        );
        let m = qdq(g, "mul_out", m, 0.0087, 3);
        node(
            g,
            "add",
            Op::Binary(BinaryOp::Add),
            &[Some(m), Some(s)],
            &shape,
        )
    });
    let mut l = g.clone();
    lower_int8(&mut l).expect("lower");
    let ops: Vec<&str> = l.nodes.iter().map(|n| n.op.name()).collect();
    assert!(ops.contains(&"QMul"), "{ops:?}");
}

//! Unit tests of the ONNX importer: graph-level checks (opsets, sorting, names, inputs,
//! external data) and the import of every op family, on models built in memory and on
//! small files written by the official serializer (`testdata/`).

use std::collections::HashSet;

use prost::Message;

use super::builder::{attr, node_proto, tensor_proto, ModelBuilder};
use super::proto::{self, ModelProto, NodeProto, ValueInfoProto};
#[cfg(feature = "test-ops")]
use super::TEST_DOMAIN;
use super::{import_file, import_model, ImportOptions};
use crate::ir::{
    CoordMode, DType, Graph, NearestMode, Op, ResizeMode, RnnDirection, Tensor, TensorData, UnaryOp,
};
use crate::onnx::proto::{
    attr_type, data_type, tensor_shape_proto::Dimension, type_proto, AttributeProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto,
};
use crate::{Error, Result};

/// A default-domain node.
fn node(op: &str, name: &str, ins: &[&str], outs: &[&str], a: Vec<AttributeProto>) -> NodeProto {
    node_proto("", op, name, ins, outs, a)
}
/// A value info; `None` dims are symbolic (`dim_param`).
fn vi(name: &str, elem: i32, dims: &[Option<i64>]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .enumerate()
                        .map(|(i, d)| Dimension {
                            dim_value: *d,
                            dim_param: d.is_none().then(|| format!("d{i}")),
                            ..Default::default()
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    let dims = dims.iter().map(|&d| d as usize).collect();
    tensor_proto(name, &Tensor::from_f32(dims, v.to_vec()))
}
fn i64_init(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: data_type::INT64,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}
/// A model of default opset `opset` (and the test domain, with feature `test-ops`)
/// whose graph `g` holds these nodes, initializers and inputs, and untyped outputs.
fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
) -> ModelProto {
    let mut m = outputs
        .iter()
        .fold(ModelBuilder::new("g", opset), |b, o| b.output(o))
        .build();
    if let Some(g) = m.graph.as_mut() {
        g.node = nodes;
        g.initializer = inits;
        g.input = inputs;
    }
    m
}
fn import(m: &ModelProto) -> Result<Graph> {
    import_model(&m.encode_to_vec(), &ImportOptions::default())
}
fn x_input(dims: &[Option<i64>]) -> Vec<ValueInfoProto> {
    vec![vi("x", data_type::FLOAT, dims)]
}
fn out_shape(g: &Graph, i: usize) -> Option<&[usize]> {
    g.shape(g.outputs[i])
}

fn conv_relu(opset: i64) -> ModelProto {
    let w: Vec<f32> = (0..4 * 3 * 9).map(|i| i as f32 * 0.01).collect();
    model(
        opset,
        vec![
            node(
                "Conv",
                "conv",
                &["x", "w", "b"],
                &["c"],
                vec![attr::ints("pads", &[1, 1, 1, 1])],
            ),
            node("Relu", "", &["c"], &["y"], vec![]),
        ],
        vec![
            f32_init("w", &[4, 3, 3, 3], &w),
            f32_init("b", &[4], &[0.0; 4]),
        ],
        x_input(&[None, Some(3), Some(8), Some(8)]),
        &["y"],
    )
}

#[test]
fn conv_relu_imports_with_typed_ops_and_shapes() {
    let g = import(&conv_relu(13)).expect("imports");
    assert_eq!(g.name, "g");
    assert_eq!(g.nodes.len(), 2);
    let Op::Conv { geom, group, post } = &g.nodes[0].op else {
        panic!("not a conv: {:?}", g.nodes[0].op)
    };
    assert_eq!(geom.kernel, vec![3, 3], "kernel taken from the weights");
    assert_eq!(
        (geom.strides.clone(), geom.dilations.clone()),
        (vec![1, 1], vec![1, 1])
    );
    assert_eq!(geom.pads, vec![1, 1, 1, 1]);
    assert_eq!((*group, post.len()), (1, 0));
    assert_eq!(g.nodes[0].absorbed, vec!["conv".to_string()]);
    assert_eq!(g.nodes[1].op, Op::Unary(UnaryOp::Relu));
    assert_eq!(
        g.nodes[1].name, "Relu_1",
        "unnamed nodes get a generated name"
    );
    assert_eq!(g.inputs.len(), 1);
    let x = g.value(g.inputs[0]);
    assert_eq!(
        x.shape.as_deref(),
        Some(&[1, 3, 8, 8][..]),
        "dynamic batch defaults to 1"
    );
    assert_eq!(x.declared, Some(vec![None, Some(3), Some(8), Some(8)]));
    assert_eq!(out_shape(&g, 0), Some(&[1, 4, 8, 8][..]));
    assert!(g.value(g.nodes[0].inputs[1].expect("w")).konst.is_some());
}

/// Files written by the official serializer (see testdata/README.md).
#[test]
fn real_onnx_files_import_with_expected_shapes() {
    let cases: [(&[u8], &[usize]); 4] = [
        (
            include_bytes!("testdata/conv_with_autopad_same.onnx"),
            &[1, 1, 3, 3],
        ),
        (
            include_bytes!("testdata/maxpool_2d_ceil.onnx"),
            &[1, 1, 2, 2],
        ),
        (include_bytes!("testdata/lstm_defaults.onnx"), &[1, 3, 3]),
        (
            include_bytes!("testdata/convtranspose_autopad_same.onnx"),
            &[1, 2, 6, 6],
        ),
    ];
    for (i, (bytes, want)) in cases.iter().enumerate() {
        let g = import_model(bytes, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(out_shape(&g, 0), Some(*want), "case {i}");
    }
    let g = import_model(
        include_bytes!("testdata/squeezenet_light_opset13.onnx"),
        &ImportOptions::default(),
    )
    .expect("squeezenet");
    let count = |name: &str| g.nodes.iter().filter(|n| n.op.name() == name).count();
    assert_eq!(
        (count("Conv"), count("Concat"), count("MaxPool")),
        (26, 8, 3)
    );
    assert!(g.nodes.iter().all(|n| n.absorbed.len() == 1));
    // The converter's Softmax ends in Reshape(x, Shape(input)): every shape up to it is
    // known at import; the last one once the compiler has folded the Shape node.
    let (last, before) = (&g.nodes[g.nodes.len() - 1], &g.nodes[g.nodes.len() - 2]);
    assert_eq!((before.op.name(), last.op.name()), ("Softmax", "Reshape"));
    assert_eq!(g.shape(before.outputs[0]), Some(&[1, 1000][..]));
    assert_eq!(out_shape(&g, 0), None);
}

#[test]
fn opsets_outside_11_to_28_are_rejected() {
    for v in [1, 10, 29] {
        let e = import(&conv_relu(v)).expect_err("bad opset");
        assert!(matches!(e, Error::OnnxFormat { .. }), "{e}");
        assert!(e.to_string().contains(&format!("opset {v}")), "{e}");
    }
    for v in [11, 21, 22, 28] {
        assert!(import(&conv_relu(v)).is_ok(), "opset {v}");
    }
    let mut m = conv_relu(13);
    m.opset_import.clear();
    assert!(matches!(import(&m), Err(Error::OnnxFormat { .. })));
}

#[test]
fn corrupt_and_truncated_bytes_are_format_errors() {
    let good = conv_relu(13).encode_to_vec();
    for cut in (0..good.len()).step_by(7) {
        if let Err(e) = import_model(&good[..cut], &ImportOptions::default()) {
            assert!(matches!(e, Error::OnnxFormat { .. }), "cut {cut}: {e}");
        }
    }
    // Deterministic pseudo-random corruption and pure noise: errors or valid graphs,
    // never a panic.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let mut b = good.clone();
        for _ in 0..4 {
            let i = (next() as usize) % b.len();
            b[i] = next() as u8;
        }
        let _ = import_model(&b, &ImportOptions::default());
        let noise: Vec<u8> = (0..(next() % 200)).map(|_| next() as u8).collect();
        let _ = import_model(&noise, &ImportOptions::default());
    }
    let e = import_model(b"\xff\xff\xff\xff", &ImportOptions::default()).expect_err("noise");
    assert!(matches!(e, Error::OnnxFormat { .. }), "{e}");
}

#[test]
fn unsupported_op_and_attribute_name_the_node() {
    let m = model(
        13,
        vec![node("FancyOp", "my_node", &["x"], &["y"], vec![])],
        vec![],
        x_input(&[Some(1)]),
        &["y"],
    );
    let e = import(&m).expect_err("unsupported");
    assert!(matches!(e, Error::UnsupportedOp { .. }));
    let msg = e.to_string();
    assert!(msg.contains("my_node") && msg.contains("FancyOp"), "{msg}");

    let mut n = node("Relu", "r", &["x"], &["y"], vec![attr::int("bogus", 1)]);
    let m = model(13, vec![n.clone()], vec![], x_input(&[Some(1)]), &["y"]);
    let msg = import(&m).expect_err("unknown attr").to_string();
    assert!(msg.contains("'r'") && msg.contains("bogus"), "{msg}");

    n.attribute = vec![
        attr::string("auto_pad", "SAME_SIDEWAYS"),
        attr::ints("kernel_shape", &[2, 2]),
    ];
    n.op_type = "MaxPool".into();
    let m = model(
        13,
        vec![n],
        vec![],
        x_input(&[Some(1), Some(1), Some(4), Some(4)]),
        &["y"],
    );
    let e = import(&m).expect_err("bad value");
    assert!(
        matches!(&e, Error::BadAttribute { attr, .. } if attr == "auto_pad"),
        "{e}"
    );

    let mut n = node("FusedConv", "f", &["x"], &["y"], vec![]);
    n.domain = "com.microsoft".into();
    let m = model(13, vec![n], vec![], x_input(&[Some(1)]), &["y"]);
    let msg = import(&m).expect_err("foreign domain").to_string();
    assert!(msg.contains("com.microsoft::FusedConv"), "{msg}");
}

#[test]
fn axes_as_attribute_or_input_per_opset() {
    let x = x_input(&[Some(2), Some(1), Some(3)]);
    // Opset 11: axes attributes.
    let m = model(
        11,
        vec![
            node(
                "Squeeze",
                "sq",
                &["x"],
                &["s"],
                vec![attr::ints("axes", &[1])],
            ),
            node(
                "ReduceMean",
                "rm",
                &["s"],
                &["y"],
                vec![attr::ints("axes", &[-1]), attr::int("keepdims", 0)],
            ),
        ],
        vec![],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("opset 11");
    assert_eq!(
        g.nodes[0].op,
        Op::Squeeze {
            axes: Some(vec![1])
        }
    );
    assert_eq!(out_shape(&g, 0), Some(&[2][..]));
    // Opset 18: axes inputs.
    let m = model(
        18,
        vec![
            node("Squeeze", "sq", &["x", "a1"], &["s"], vec![]),
            node(
                "ReduceMean",
                "rm",
                &["s", "a2"],
                &["y"],
                vec![attr::int("keepdims", 1)],
            ),
        ],
        vec![i64_init("a1", &[1]), i64_init("a2", &[-1])],
        x,
        &["y"],
    );
    let g = import(&m).expect("opset 18");
    assert_eq!(g.nodes[0].op, Op::Squeeze { axes: None });
    assert!(g.nodes[0].inputs[1].is_some());
    assert!(matches!(
        g.nodes[1].op,
        Op::Reduce {
            axes: None,
            keepdims: true,
            ..
        }
    ));
    assert_eq!(out_shape(&g, 0), Some(&[2, 1][..]));
}

#[test]
fn split_forms() {
    let x = x_input(&[Some(1), Some(6)]);
    let m = model(
        11,
        vec![node(
            "Split",
            "s",
            &["x"],
            &["a", "b"],
            vec![attr::int("axis", 1), attr::ints("split", &[2, 4])],
        )],
        vec![],
        x.clone(),
        &["a", "b"],
    );
    let g = import(&m).expect("attr split");
    assert_eq!(
        (out_shape(&g, 0), out_shape(&g, 1)),
        (Some(&[1, 2][..]), Some(&[1, 4][..]))
    );
    let m = model(
        13,
        vec![node(
            "Split",
            "s",
            &["x", "sp"],
            &["a", "b"],
            vec![attr::int("axis", -1)],
        )],
        vec![i64_init("sp", &[5, 1])],
        x.clone(),
        &["a", "b"],
    );
    let g = import(&m).expect("input split");
    assert_eq!(out_shape(&g, 0), Some(&[1, 5][..]));
    let m = model(
        18,
        vec![node(
            "Split",
            "s",
            &["x"],
            &["a", "b", "c", "d"],
            vec![attr::int("axis", 1), attr::int("num_outputs", 4)],
        )],
        vec![],
        x,
        &["a", "d"],
    );
    let g = import(&m).expect("num_outputs");
    assert_eq!(g.nodes[0].outputs.len(), 4);
    assert_eq!(
        (out_shape(&g, 0), out_shape(&g, 1)),
        (Some(&[1, 2][..]), Some(&[1, 0][..]))
    );
}

#[test]
fn legacy_softmax_coerces_to_2d() {
    let x = x_input(&[Some(1), Some(3), Some(2), Some(2)]);
    let m = model(
        11,
        vec![node("Softmax", "sm", &["x"], &["y"], vec![])],
        vec![],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("opset 11");
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["Flatten", "Softmax", "Reshape"]);
    assert!(g.nodes.iter().all(|n| n.absorbed == ["sm"]));
    assert_eq!(g.nodes[1].op, Op::Softmax { axis: 1 });
    assert_eq!(
        g.value(g.nodes[0].outputs[0]).shape.as_deref(),
        Some(&[1, 12][..])
    );
    assert_eq!(out_shape(&g, 0), Some(&[1, 3, 2, 2][..]));
    let m = model(
        13,
        vec![node(
            "Softmax",
            "sm",
            &["x"],
            &["y"],
            vec![attr::int("axis", 1)],
        )],
        vec![],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("opset 13");
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.nodes[0].op, Op::Softmax { axis: 1 });
    // Last axis in the legacy form needs no coercion.
    let m = model(
        11,
        vec![node(
            "LogSoftmax",
            "sm",
            &["x"],
            &["y"],
            vec![attr::int("axis", 3)],
        )],
        vec![],
        x,
        &["y"],
    );
    let g = import(&m).expect("opset 11 last axis");
    assert_eq!(g.nodes[0].op, Op::LogSoftmax { axis: 3 });
}

#[test]
fn legacy_softmax_of_an_unknown_shape_computes_it() {
    // `r` has no shape until the compiler folds `s`: the expansion uses Shape.
    let m = model(
        12,
        vec![
            node("Shape", "s", &["x"], &["sh"], vec![]),
            node("Reshape", "r", &["x", "sh"], &["r"], vec![]),
            node("Softmax", "sm", &["r"], &["y"], vec![]),
        ],
        vec![],
        x_input(&[Some(2), Some(3), Some(4)]),
        &["y"],
    );
    let g = import(&m).expect("imports");
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(
        ops,
        ["Shape", "Reshape", "Shape", "Flatten", "Softmax", "Reshape"]
    );
    assert_eq!(g.nodes[2].inputs, g.nodes[3].inputs);
    assert_eq!(out_shape(&g, 0), None, "known only after folding");
}

#[test]
fn generated_names_avoid_names_used_later_in_the_file() {
    let x = x_input(&[Some(1), Some(3), Some(2)]);
    let m = model(
        11,
        vec![
            node("Softmax", "sm", &["x"], &["y"], vec![]),
            node("Neg", "n", &["y"], &["sm/shape"], vec![]),
        ],
        vec![],
        x,
        &["sm/shape"],
    );
    let g = import(&m).expect("imports");
    let names: HashSet<&str> = g.values.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), g.values.len(), "value names are unique");
    let neg = g.nodes.last().expect("neg");
    assert_eq!(g.value(neg.outputs[0]).name, "sm/shape");
    assert_eq!(g.value(neg.inputs[0].expect("y")).name, "y");
    assert_eq!(out_shape(&g, 0), Some(&[1, 3, 2][..]));
}

#[test]
fn resize_and_upsample() {
    let x = x_input(&[Some(1), Some(2), Some(4), Some(4)]);
    let scales = f32_init("sc", &[4], &[1.0, 1.0, 2.0, 2.0]);
    let empty_roi = f32_init("roi", &[0], &[]);
    let m = model(
        11,
        vec![node(
            "Resize",
            "rs",
            &["x", "roi", "sc"],
            &["y"],
            vec![
                attr::string("mode", "linear"),
                attr::string("coordinate_transformation_mode", "align_corners"),
            ],
        )],
        vec![scales.clone(), empty_roi],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("resize");
    let n = &g.nodes[0];
    assert!(matches!(
        n.op,
        Op::Resize {
            mode: ResizeMode::Linear,
            coord: CoordMode::AlignCorners,
            nearest: NearestMode::RoundPreferFloor,
            ..
        }
    ));
    assert_eq!(n.inputs[1], None, "empty roi becomes an omitted input");
    assert_eq!(out_shape(&g, 0), Some(&[1, 2, 8, 8][..]));
    let m = model(
        11,
        vec![node("Upsample", "up", &["x", "sc"], &["y"], vec![])],
        vec![scales.clone()],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("upsample");
    assert!(matches!(
        g.nodes[0].op,
        Op::Resize {
            mode: ResizeMode::Nearest,
            coord: CoordMode::Asymmetric,
            nearest: NearestMode::Floor,
            ..
        }
    ));
    assert_eq!(g.nodes[0].inputs.len(), 4);
    assert_eq!(out_shape(&g, 0), Some(&[1, 2, 8, 8][..]));
    let m = model(
        19,
        vec![node(
            "Resize",
            "rs",
            &["x", "", "sc"],
            &["y"],
            vec![attr::int("antialias", 1)],
        )],
        vec![scales],
        x.clone(),
        &["y"],
    );
    assert!(matches!(import(&m), Err(Error::BadAttribute { .. })));
    // Opset 18 axes: scales / sizes for a subset of axes cover all axes in the IR.
    let resize_axes = |inp: &str, axes: &[i64]| {
        node(
            "Resize",
            "rs",
            &[
                "x",
                "",
                if inp == "s2" { "s2" } else { "" },
                if inp == "z2" { "z2" } else { "" },
            ],
            &["y"],
            vec![attr::ints("axes", axes)],
        )
    };
    let s2 = f32_init("s2", &[2], &[3.0, 0.5]);
    let z2 = i64_init("z2", &[5, 6]);
    let m = model(
        18,
        vec![resize_axes("s2", &[3, -2])],
        vec![s2.clone(), z2.clone()],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("scales with axes");
    let sc = g.value(g.nodes[0].inputs[2].expect("scales"));
    assert_eq!(
        sc.konst.as_ref().map(|k| k.to_f32_vec()),
        Some(vec![1.0, 1.0, 0.5, 3.0])
    );
    assert_eq!(out_shape(&g, 0), Some(&[1, 2, 2, 12][..]));
    let m = model(
        18,
        vec![resize_axes("z2", &[2, 3])],
        vec![s2.clone(), z2.clone()],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("sizes with axes");
    assert_eq!(out_shape(&g, 0), Some(&[1, 2, 5, 6][..]));
    let m = model(
        18,
        vec![resize_axes("s2", &[2, 2])],
        vec![s2, z2],
        x,
        &["y"],
    );
    assert!(matches!(import(&m), Err(Error::BadAttribute { .. })));
}

#[test]
fn constants_initializer_inputs_and_optional_inputs() {
    let mut inputs = x_input(&[Some(2)]);
    inputs.push(vi("w", data_type::FLOAT, &[Some(2)]));
    let m = model(
        13,
        vec![
            node(
                "Constant",
                "k",
                &[],
                &["lo"],
                vec![attr::float("value_float", -1.0)],
            ),
            node(
                "Constant",
                "k2",
                &[],
                &["ints"],
                vec![attr::ints("value_ints", &[2])],
            ),
            node("Add", "add", &["x", "w"], &["s"], vec![]),
            node("Clip", "clip", &["s", "lo", ""], &["c"], vec![]),
            node("Reshape", "rs", &["c", "ints"], &["y"], vec![]),
        ],
        vec![f32_init("w", &[2], &[1.0, 2.0])],
        inputs,
        &["y"],
    );
    let g = import(&m).expect("imports");
    assert_eq!(
        g.inputs.len(),
        1,
        "an initializer listed as input is a constant"
    );
    let clip = &g.nodes[1];
    assert_eq!(clip.op, Op::ClipDynamic);
    assert_eq!(clip.inputs.len(), 3);
    assert_eq!(clip.inputs[2], None);
    let lo = g.value(clip.inputs[1].expect("min"));
    assert_eq!(
        lo.konst.as_ref().map(|k| k.data.clone()),
        Some(TensorData::F32(vec![-1.0]))
    );
    assert_eq!(lo.shape.as_deref(), Some(&[][..]));
    assert_eq!(out_shape(&g, 0), Some(&[2][..]));
}

#[test]
fn dynamic_dims_need_input_shapes() {
    let m = model(
        13,
        vec![node("Relu", "r", &["x"], &["y"], vec![])],
        vec![],
        x_input(&[None, Some(3), None]),
        &["y"],
    );
    let msg = import(&m).expect_err("dynamic").to_string();
    assert!(
        msg.contains("'x'") && msg.contains("dim 2") && msg.contains("d2"),
        "{msg}"
    );
    let bytes = m.encode_to_vec();
    let mut opts = ImportOptions::default();
    opts.input_shapes.insert("x".into(), vec![4, 3, 5]);
    let g = import_model(&bytes, &opts).expect("fixed");
    assert_eq!(out_shape(&g, 0), Some(&[4, 3, 5][..]));
    opts.input_shapes.insert("x".into(), vec![4, 2, 5]);
    assert!(matches!(
        import_model(&bytes, &opts),
        Err(Error::CompileOption { .. })
    ));
    opts.input_shapes.clear();
    opts.input_shapes.insert("nope".into(), vec![1]);
    assert!(matches!(
        import_model(&bytes, &opts),
        Err(Error::CompileOption { .. })
    ));
}

#[test]
fn nodes_are_sorted_and_cycles_rejected() {
    let m = model(
        13,
        vec![
            node("Sigmoid", "c", &["b"], &["y"], vec![]),
            node("Relu", "b", &["a"], &["b"], vec![]),
            node("Neg", "a", &["x"], &["a"], vec![]),
        ],
        vec![],
        x_input(&[Some(3)]),
        &["y"],
    );
    let g = import(&m).expect("sorts");
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(out_shape(&g, 0), Some(&[3][..]));
    let m = model(
        13,
        vec![
            node("Relu", "p", &["q"], &["p"], vec![]),
            node("Relu", "q", &["p"], &["q"], vec![]),
        ],
        vec![],
        x_input(&[Some(3)]),
        &["p"],
    );
    assert!(import(&m).expect_err("cycle").to_string().contains("cycle"));
    let m = model(
        13,
        vec![node("Relu", "r", &["ghost"], &["y"], vec![])],
        vec![],
        x_input(&[Some(3)]),
        &["y"],
    );
    assert!(import(&m)
        .expect_err("dangling")
        .to_string()
        .contains("ghost"));
}

#[test]
fn unused_extra_outputs_are_dropped_used_ones_rejected() {
    let c = |n: &str| f32_init(n, &[2], &[1.0, 1.0]);
    let inits = vec![c("s"), c("b"), c("m"), c("v")];
    let x = x_input(&[Some(1), Some(2), Some(2), Some(2)]);
    let bn = node(
        "BatchNormalization",
        "bn",
        &["x", "s", "b", "m", "v"],
        &["y", "rm", "rv"],
        vec![attr::float("epsilon", 1e-3), attr::float("momentum", 0.9)],
    );
    let g = import(&model(
        14,
        vec![bn.clone()],
        inits.clone(),
        x.clone(),
        &["y"],
    ))
    .expect("inference outputs");
    assert_eq!(g.nodes[0].op, Op::BatchNorm { epsilon: 1e-3 });
    assert_eq!(g.nodes[0].outputs.len(), 1);
    let e = import(&model(14, vec![bn], inits.clone(), x.clone(), &["y", "rm"]))
        .expect_err("stats used");
    assert!(matches!(e, Error::UnsupportedOp { .. }), "{e}");
    let dr = node("Dropout", "d", &["x", "ratio"], &["y", "mask"], vec![]);
    let mut inits2 = inits;
    inits2.push(f32_init("ratio", &[], &[0.5]));
    let g = import(&model(13, vec![dr], inits2, x, &["y"])).expect("dropout");
    assert_eq!(g.nodes[0].op, Op::Unary(UnaryOp::Identity));
    assert_eq!(g.nodes[0].inputs.len(), 1);
}

#[cfg(feature = "test-ops")]
#[test]
fn test_domain_and_variadic_ops() {
    use crate::ir::BinaryOp;
    let mut spin = node(
        "Spin",
        "spin",
        &["x"],
        &["s"],
        vec![attr::int("micros", 250)],
    );
    spin.domain = TEST_DOMAIN.into();
    let mut fail = node("Fail", "fail", &["s"], &["f"], vec![attr::int("panic", 1)]);
    fail.domain = TEST_DOMAIN.into();
    let sum = node("Sum", "sum", &["x", "f", "x"], &["y"], vec![]);
    let mean = node("Mean", "mean", &["x", "y"], &["z"], vec![]);
    let g = import(&model(
        13,
        vec![spin, fail, sum, mean],
        vec![],
        x_input(&[Some(4)]),
        &["z"],
    ))
    .expect("imports");
    assert_eq!(g.nodes[0].op, Op::Spin { micros: 250 });
    assert_eq!(g.nodes[1].op, Op::Fail { panic: true });
    let ops: Vec<&Op> = g.nodes[2..].iter().map(|n| &n.op).collect();
    let (add, div) = (Op::Binary(BinaryOp::Add), Op::Binary(BinaryOp::Div));
    assert_eq!(ops, [&add, &add, &add, &div]);
    assert_eq!(g.nodes[3].name, "sum");
    assert_eq!(out_shape(&g, 0), Some(&[4][..]));
}

#[test]
fn attributes_of_every_family_parse_with_defaults() {
    let x = x_input(&[Some(1), Some(4), Some(6), Some(6)]);
    let m = model(
        13,
        vec![
            node(
                "MaxPool",
                "mp",
                &["x"],
                &["a"],
                vec![
                    attr::ints("kernel_shape", &[3, 3]),
                    attr::ints("strides", &[2, 2]),
                    attr::int("ceil_mode", 1),
                ],
            ),
            node(
                "AveragePool",
                "ap",
                &["a"],
                &["b"],
                vec![
                    attr::ints("kernel_shape", &[2, 2]),
                    attr::string("auto_pad", "SAME_UPPER"),
                    attr::int("count_include_pad", 1),
                ],
            ),
            node("LeakyRelu", "lr", &["b"], &["c"], vec![]),
            node(
                "HardSigmoid",
                "hs",
                &["c"],
                &["d"],
                vec![attr::float("alpha", 0.3)],
            ),
            node(
                "Gemm",
                "gm",
                &["e", "w"],
                &["f"],
                vec![attr::int("transB", 1), attr::float("alpha", 2.0)],
            ),
            node("Flatten", "fl", &["d"], &["e"], vec![]),
            node(
                "Cast",
                "ca",
                &["f"],
                &["g"],
                vec![attr::int("to", data_type::INT64 as i64)],
            ),
            node(
                "ArgMax",
                "am",
                &["g"],
                &["y"],
                vec![attr::int("axis", 1), attr::int("keepdims", 0)],
            ),
        ],
        vec![f32_init("w", &[5, 36], &[0.0; 180])],
        x,
        &["y"],
    );
    let g = import(&m).expect("imports");
    let op = |name: &str| &g.nodes.iter().find(|n| n.name == name).expect("node").op;
    assert!(
        matches!(op("mp"), Op::MaxPool { ceil_mode: true, geom } if geom.strides == [2, 2] && geom.auto_pad.is_none())
    );
    assert!(
        matches!(op("ap"), Op::AveragePool { count_include_pad: true, ceil_mode: false, geom } if geom.auto_pad.as_deref() == Some("SAME_UPPER"))
    );
    assert_eq!(op("lr"), &Op::Unary(UnaryOp::LeakyRelu { alpha: 0.01 }));
    assert_eq!(
        op("hs"),
        &Op::Unary(UnaryOp::HardSigmoid {
            alpha: 0.3,
            beta: 0.5
        })
    );
    assert!(
        matches!(op("gm"), Op::Gemm { alpha, beta, trans_a: false, trans_b: true, .. } if *alpha == 2.0 && *beta == 1.0)
    );
    assert_eq!(op("ca"), &Op::Cast { to: DType::I64 });
    assert_eq!(
        op("am"),
        &Op::ArgMax {
            axis: 1,
            keepdims: false,
            select_last_index: false
        }
    );
    // 6 -> ceil((6-3)/2)+1 = 3 -> SAME 3 -> flatten 4*9=36 -> gemm 5.
    assert_eq!(out_shape(&g, 0), Some(&[1][..]));
    assert_eq!(g.value(g.outputs[0]).dtype, DType::I64);
}

#[test]
fn cast_widths_and_cast_like() {
    let x = x_input(&[Some(2)]);
    let m = model(
        15,
        vec![
            node(
                "Cast",
                "h",
                &["x"],
                &["h"],
                vec![attr::int("to", data_type::FLOAT16 as i64)],
            ),
            node(
                "Cast",
                "i",
                &["h"],
                &["i"],
                vec![attr::int("to", data_type::INT32 as i64)],
            ),
            node("CastLike", "l", &["i", "x"], &["y"], vec![]),
        ],
        vec![],
        x.clone(),
        &["y"],
    );
    let g = import(&m).expect("imports");
    assert_eq!(g.nodes[0].op, Op::Cast { to: DType::F32 });
    assert_eq!(g.nodes[2].op, Op::Cast { to: DType::F32 });
    assert_eq!(g.nodes[2].inputs.len(), 1);
    assert_eq!(g.value(g.nodes[1].outputs[0]).dtype, DType::I32);
    let m = model(
        13,
        vec![node(
            "Cast",
            "s",
            &["x"],
            &["y"],
            vec![attr::int("to", data_type::STRING as i64)],
        )],
        vec![],
        x,
        &["y"],
    );
    let e = import(&m).expect_err("string");
    assert!(
        matches!(&e, Error::BadAttribute { attr, .. } if attr == "to"),
        "{e}"
    );
}

#[test]
fn rnn_attributes() {
    let x = x_input(&[Some(5), Some(1), Some(3)]);
    let w = f32_init("w", &[2, 16, 3], &[0.0; 96]);
    let r = f32_init("r", &[2, 16, 4], &[0.0; 128]);
    let lstm = node(
        "LSTM",
        "l",
        &["x", "w", "r"],
        &["y", "", "yc"],
        vec![
            attr::int("hidden_size", 4),
            attr::string("direction", "bidirectional"),
        ],
    );
    let g = import(&model(
        14,
        vec![lstm],
        vec![w.clone(), r.clone()],
        x.clone(),
        &["y", "yc"],
    ))
    .expect("lstm");
    assert_eq!(
        g.nodes[0].op,
        Op::Lstm {
            hidden_size: 4,
            direction: RnnDirection::Bidirectional,
            layout: 0
        }
    );
    assert_eq!(g.nodes[0].outputs.len(), 3);
    assert_eq!(out_shape(&g, 0), Some(&[5, 2, 1, 4][..]));
    assert_eq!(out_shape(&g, 1), Some(&[2, 1, 4][..]));
    let bad = node(
        "LSTM",
        "l",
        &["x", "w", "r"],
        &["y"],
        vec![
            attr::int("hidden_size", 4),
            AttributeProto {
                name: "activations".into(),
                r#type: attr_type::STRINGS,
                strings: vec![b"Relu".to_vec(), b"Tanh".to_vec(), b"Tanh".to_vec()],
                ..Default::default()
            },
        ],
    );
    let e = import(&model(14, vec![bad], vec![w, r], x, &["y"])).expect_err("custom activations");
    assert!(
        matches!(&e, Error::BadAttribute { attr, .. } if attr == "activations"),
        "{e}"
    );
}

#[test]
fn external_data_beside_the_model_file() {
    let dir = std::env::temp_dir().join(format!("vnpu-onnx-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let vals = [0.5f32, -1.0, 2.0, 4.0];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut blob = vec![0u8; 16];
    blob.extend_from_slice(&bytes);
    std::fs::write(dir.join("weights.bin"), &blob).expect("write weights");
    let ext = TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: data_type::FLOAT,
        data_location: proto::DATA_LOCATION_EXTERNAL,
        external_data: vec![
            StringStringEntryProto {
                key: "location".into(),
                value: "weights.bin".into(),
            },
            StringStringEntryProto {
                key: "offset".into(),
                value: "16".into(),
            },
            StringStringEntryProto {
                key: "length".into(),
                value: "16".into(),
            },
        ],
        ..Default::default()
    };
    let m = model(
        13,
        vec![node("Mul", "mul", &["x", "w"], &["y"], vec![])],
        vec![ext],
        x_input(&[Some(4)]),
        &["y"],
    );
    let path = dir.join("ext.onnx");
    std::fs::write(&path, m.encode_to_vec()).expect("write model");
    let g = import_file(&path, &ImportOptions::default()).expect("imports");
    assert_eq!(g.name, "ext");
    let w = g.value(g.nodes[0].inputs[1].expect("w"));
    assert_eq!(
        w.konst.as_ref().map(|k| k.data.clone()),
        Some(TensorData::F32(vals.to_vec()))
    );
    // Without a base directory the same bytes are rejected with a clear message.
    let e = import(&m).expect_err("no base dir");
    assert!(e.to_string().contains("weights.bin"), "{e}");
    let missing =
        import_file(&dir.join("absent.onnx"), &ImportOptions::default()).expect_err("no file");
    assert!(matches!(missing, Error::Io { .. }));
    let _ = std::fs::remove_dir_all(&dir);
}

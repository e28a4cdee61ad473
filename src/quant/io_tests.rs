use super::*;
use crate::compile::config::{InputParams, InputType};
use crate::compile::testutil::{run_graph, GraphBuilder};
use crate::compile::{compile_graph, CompileOptions};
use crate::exec::{ModelPlan, PlanOptions, Tile};
use crate::ir::{Node, Value};

fn q(qtype: QType, axis: usize, scale: Vec<f32>, zero_point: Vec<i8>) -> OutputQuant {
    OutputQuant {
        qtype,
        axis,
        scale,
        zero_point,
    }
}

fn s8s(b: &[u8]) -> Vec<i8> {
    b.iter().map(|&x| x as i8).collect()
}

#[test]
fn quantize_rounds_half_even_and_saturates_per_channel() {
    // Shape [1, 2, 3]: axis 1 has two channels of three elements.
    let x = [0.5f32, 1.5, 2.5, -0.5, 1000.0, -1000.0];
    let mut out = [0u8; 6];
    quantize_f32(
        &q(QType::S8, 1, vec![1.0, 0.5], vec![]),
        &[1, 2, 3],
        &x,
        &mut out,
    );
    assert_eq!(s8s(&out), vec![0, 2, 2, -1, 127, -128]);
    // Per-tensor with a zero point.
    quantize_f32(&q(QType::S8, 0, vec![1.0], vec![3]), &[6], &x, &mut out);
    assert_eq!(s8s(&out), vec![3, 5, 5, 3, 127, -128]);
    // S16 and S32 saturate at their own bounds; NaN gives the zero point.
    let mut o16 = [0u8; 8];
    quantize_f32(
        &q(QType::S16, 0, vec![1.0], vec![]),
        &[4],
        &[40000.0, -40000.0, 3.5, f32::NAN],
        &mut o16,
    );
    let v16: Vec<i16> = o16
        .chunks_exact(2)
        .map(|c| i16::from_ne_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(v16, vec![32767, -32768, 4, 0]);
    let mut o32 = [0u8; 12];
    quantize_f32(
        &q(QType::S32, 0, vec![0.25], vec![]),
        &[3],
        &[1e12, -1e12, -1.125],
        &mut o32,
    );
    let v32: Vec<i32> = o32
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(v32, vec![i32::MAX, i32::MIN, -4]);
}

#[test]
fn quant_check_names_the_problem() {
    assert!(q(QType::S8, 3, vec![1.0; 8], vec![])
        .check(&[1, 4, 4, 8])
        .is_ok());
    assert!(q(QType::S8, 3, vec![1.0], vec![])
        .check(&[1, 4, 4, 8])
        .is_ok());
    let e = q(QType::S8, 4, vec![1.0], vec![])
        .check(&[1, 4, 4, 8])
        .unwrap_err();
    assert!(e.contains("axis 4"), "{e}");
    let e = q(QType::S8, 1, vec![1.0; 3], vec![])
        .check(&[1, 4])
        .unwrap_err();
    assert!(e.contains("3 scales for 4 channels"), "{e}");
    let e = q(QType::S8, 0, vec![0.0], vec![]).check(&[4]).unwrap_err();
    assert!(e.contains("positive"), "{e}");
    let e = q(QType::S8, 0, vec![1.0], vec![1, 2])
        .check(&[4])
        .unwrap_err();
    assert!(e.contains("zero points"), "{e}");
}

/// x [1,3,4,4] → Relu → Transpose to NHWC → "nhwc" [1,4,4,3]; x → Neg → "flat" [1,3,4,4].
fn two_output_graph() -> crate::ir::Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1, 3, 4, 4]);
    let r = b.node(
        "relu",
        Op::Unary(crate::ir::UnaryOp::Relu),
        &[x],
        &[1, 3, 4, 4],
    );
    let t = b.node(
        "to_nhwc",
        Op::Transpose {
            perm: Some(vec![0, 2, 3, 1]),
        },
        &[r],
        &[1, 4, 4, 3],
    );
    let n = b.node(
        "neg",
        Op::Unary(crate::ir::UnaryOp::Neg),
        &[x],
        &[1, 3, 4, 4],
    );
    let mut g = b.finish(&[t, n]);
    g.values[t].name = "nhwc".into();
    g.values[n].name = "flat".into();
    g
}

fn run_compiled(m: &CompiledModel, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let plan = ModelPlan::new(Arc::new(m.graph.clone()), &PlanOptions::default()).unwrap();
    let mut st = plan.new_state();
    for (i, x) in inputs.iter().enumerate() {
        plan.set_input(&mut st, i, x).unwrap();
    }
    for n in 0..m.graph.nodes.len() {
        plan.run_node(&mut st, n, Tile::WHOLE).unwrap();
    }
    (0..m.outputs.len())
        .map(|i| {
            let mut out = vec![0u8; boundary_bytes(&m.outputs[i])];
            read_output(m, &plan, &st, i, &mut out).unwrap();
            out
        })
        .collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn nhwc_outputs_are_labelled_nhwc() {
    let m = compile_graph(two_output_graph(), &CompileOptions::default()).unwrap();
    assert_eq!(m.outputs[0].layout, IoLayout::Nhwc);
    assert_eq!(m.outputs[1].layout, IoLayout::Nchw);
}

#[test]
fn quantised_output_without_scale_is_a_named_error() {
    let opts = CompileOptions {
        outputs: vec![crate::compile::config::parse_output_flag("nhwc=s32").unwrap()],
        ..Default::default()
    };
    let e = compile_graph(two_output_graph(), &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nhwc") && e.contains("calibration"), "{e}");
    let opts = CompileOptions {
        outputs: vec![crate::compile::config::parse_output_flag("boxes=s32").unwrap()],
        ..Default::default()
    };
    let e = compile_graph(two_output_graph(), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no output 'boxes'") && e.contains("nhwc, flat"),
        "{e}"
    );
}

#[test]
fn calibrated_outputs_dequantise_within_half_a_step() {
    let mut m = compile_graph(two_output_graph(), &CompileOptions::default()).unwrap();
    let x: Vec<f32> = crate::compile::testutil::rand_vec(48, 7)
        .iter()
        .map(|v| v * 3.0)
        .collect();
    let xb: Vec<u8> = bytemuck::cast_slice(&x).to_vec();
    let reference = run_compiled(&m, std::slice::from_ref(&xb));
    let opts = CompileOptions {
        outputs: vec![
            crate::compile::config::parse_output_flag("all=s8").unwrap(),
            crate::compile::config::parse_output_flag("flat=s32").unwrap(),
        ],
        ..Default::default()
    };
    let sample = vec![vec![xb.clone()]];
    let cal =
        |m: &CompiledModel, axes: &[Option<usize>]| collect_output_ranges(&m.graph, axes, &sample);
    assign_output_types(&mut m, &opts, &[], Some(&cal)).unwrap();
    let q0 = m.outputs[0].quant.clone().unwrap();
    let q1 = m.outputs[1].quant.clone().unwrap();
    assert_eq!((q0.qtype, q0.axis, q0.scale.len()), (QType::S8, 3, 3));
    assert_eq!((q1.qtype, q1.axis, q1.scale.len()), (QType::S32, 1, 3));
    let got = run_compiled(&m, &[xb]);
    assert_eq!(got[0].len(), 48);
    assert_eq!(got[1].len(), 48 * 4);
    let want0 = f32s(&reference[0]);
    for (k, (&b, &w)) in got[0].iter().zip(&want0).enumerate() {
        let deq = (b as i8) as f32 * q0.scale[k % 3];
        assert!(
            (deq - w).abs() <= q0.scale[k % 3] * 0.5 + 1e-6,
            "{k}: {deq} vs {w}"
        );
    }
    let want1 = f32s(&reference[1]);
    for (k, (v, w)) in i32s(&got[1]).into_iter().zip(want1).enumerate() {
        let s = q1.scale[k / 16];
        assert!((v as f32 * s - w).abs() <= s * 0.5 + 1e-6 * w.abs(), "{k}");
    }
}

#[test]
fn signed_image_input_matches_the_unsigned_one() {
    let mut b = GraphBuilder::new();
    let x = b.input("img", &[1, 3, 2, 2]);
    let y = b.node(
        "id",
        Op::Unary(crate::ir::UnaryOp::Abs),
        &[x],
        &[1, 3, 2, 2],
    );
    let g = b.finish(&[y]);
    let rgb = |signed: bool| CompileOptions {
        inputs: vec![InputParams {
            name: "img".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Rgb),
            nhwc: false,
            train_bgr: false,
            mean: vec![128.0],
            scale: vec![1.0 / 128.0],
        }],
        signed_inputs: if signed { vec!["img".into()] } else { vec![] },
        ..Default::default()
    };
    let mu = compile_graph(g.clone(), &rgb(false)).unwrap();
    let ms = compile_graph(g.clone(), &rgb(true)).unwrap();
    assert_eq!(ms.inputs[0].dtype, DType::I8);
    assert_eq!(ms.inputs[0].kind, IoKind::Image(ImageFormat::Rgb));
    assert_eq!(ms.inputs[0].byte_size, 12);
    let pixels: Vec<u8> = vec![0, 1, 127, 128, 129, 255, 10, 20, 30, 40, 50, 60];
    let signed: Vec<u8> = pixels
        .iter()
        .map(|&p| (p as i16 - 128) as i8 as u8)
        .collect();
    assert_eq!(run_compiled(&mu, &[pixels]), run_compiled(&ms, &[signed]));
    // A feature map takes byte + 128 as its f32 value.
    let fm = CompileOptions {
        signed_inputs: vec![String::new()],
        ..Default::default()
    };
    let mf = compile_graph(g.clone(), &fm).unwrap();
    assert_eq!(
        (mf.inputs[0].dtype, mf.inputs[0].byte_size),
        (DType::I8, 12)
    );
    let out = run_compiled(&mf, &[vec![0x80, 0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]);
    let want = run_graph(
        &g,
        &[vec![
            0., 127., 128., 129., 130., 131., 132., 133., 134., 135., 136., 137.,
        ]],
    );
    assert_eq!(f32s(&out[0]), want[0]);
    // NV12 stays unsigned.
    let mut nv = rgb(true);
    nv.inputs[0].input_type = InputType::Image(ImageFormat::Nv12);
    let e = compile_graph(g, &nv).unwrap_err().to_string();
    assert!(e.contains("nv12") && e.contains("unsigned"), "{e}");
}

#[test]
fn quantised_outputs_round_trip_through_the_file() {
    let mut m = compile_graph(two_output_graph(), &CompileOptions::default()).unwrap();
    m.outputs[0].quant = Some(q(QType::S16, 3, vec![0.5, 0.25, 0.125], vec![1, -2, 3]));
    let bytes = crate::format::write_models(std::slice::from_ref(&m)).unwrap();
    let back = crate::format::read_models(&bytes, "mem").unwrap();
    assert_eq!(back[0].outputs, m.outputs);
    // A record that does not fit the output's shape is refused at load.
    m.outputs[0].quant = Some(q(QType::S16, 3, vec![0.5, 0.25], vec![]));
    let bytes = crate::format::write_models(std::slice::from_ref(&m)).unwrap();
    let e = crate::format::read_models(&bytes, "mem")
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 scales for 3 channels"), "{e}");
}

fn konst(g: &mut crate::ir::Graph, name: &str, t: Tensor) -> ValueId {
    g.add_const(name, t)
}

/// Appends a node with one output of `dtype` and `shape`.
fn add_node(
    g: &mut crate::ir::Graph,
    name: &str,
    op: Op,
    inputs: &[ValueId],
    shape: &[usize],
    dtype: DType,
) -> ValueId {
    let out = g.add_value(Value {
        name: format!("{name}_out"),
        dtype,
        shape: Some(shape.to_vec()),
        declared: None,
        konst: None,
    });
    g.nodes.push(Node {
        name: name.into(),
        op,
        inputs: inputs.iter().map(|&v| Some(v)).collect(),
        outputs: vec![out],
        absorbed: vec![],
        placement: None,
    });
    out
}

/// x [1,4,2,2] → Transpose to NHWC → Q (u8, scale 0.05, zp 128) → DQ → "y".
fn qdq_output_graph() -> crate::ir::Graph {
    use crate::ir::TensorData;
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1, 4, 2, 2]);
    let t = b.node(
        "nhwc",
        Op::Transpose {
            perm: Some(vec![0, 2, 3, 1]),
        },
        &[x],
        &[1, 2, 2, 4],
    );
    let mut g = b.finish(&[]);
    let s = konst(&mut g, "s", Tensor::from_f32(vec![], vec![0.05]));
    let z = konst(&mut g, "z", Tensor::new(vec![], TensorData::U8(vec![128])));
    let q = add_node(
        &mut g,
        "q",
        Op::QuantizeLinear {
            axis: None,
            dtype: DType::U8,
        },
        &[t, s, z],
        &[1, 2, 2, 4],
        DType::U8,
    );
    let dq = Op::DequantizeLinear { axis: None };
    let y = add_node(&mut g, "dq", dq, &[q, s, z], &[1, 2, 2, 4], DType::F32);
    g.values[y].name = "y".into();
    g.outputs = vec![y];
    g
}

#[test]
fn dequantize_linear_outputs_give_their_scale() {
    let opts = CompileOptions {
        outputs: vec![crate::compile::config::parse_output_flag("y=s8").unwrap()],
        ..Default::default()
    };
    let g = qdq_output_graph();
    let m = compile_graph(g.clone(), &opts).unwrap();
    let o = &m.outputs[0];
    assert_eq!(o.layout, IoLayout::Nhwc);
    let qd = o.quant.as_ref().unwrap();
    assert_eq!((qd.qtype, qd.axis), (QType::S8, 3));
    assert_eq!(qd.scale, vec![0.05; 4]);
    assert!(
        qd.zero_point.is_empty(),
        "u8 zero point 128 is s8 zero point 0"
    );
    let x: Vec<f32> = crate::compile::testutil::rand_vec(16, 3)
        .iter()
        .map(|v| v * 8.0)
        .collect();
    let got = run_compiled(&m, &[bytemuck::cast_slice(&x).to_vec()]);
    let f = run_graph(&g, &[x]);
    // Exactly the u8 of the QuantizeLinear, moved to s8.
    for (&b, &v) in got[0].iter().zip(&f[0]) {
        assert_eq!(b as i8 as f32 * 0.05, v);
    }
}

#[test]
fn int8_conv_outputs_give_their_accumulator_scale_as_s32() {
    use crate::ir::{ConvGeom, TensorData};
    let mut g = qdq_output_graph();
    // Replace the output by a Conv over DQ(x) with DQ(w) per output channel.
    let dq_out = g.outputs[0];
    g.values[dq_out].name = "x_dq".into();
    g.outputs.clear();
    let w = konst(
        &mut g,
        "w",
        Tensor::new(vec![3, 2, 1, 1], TensorData::I8(vec![1, -2, 3, 4, -5, 6])),
    );
    let ws = konst(
        &mut g,
        "ws",
        Tensor::from_f32(vec![3], vec![0.01, 0.02, 0.03]),
    );
    let wdq = add_node(
        &mut g,
        "wdq",
        Op::DequantizeLinear { axis: Some(0) },
        &[w, ws],
        &[3, 2, 1, 1],
        DType::F32,
    );
    // The NHWC [1,2,2,4] DQ output read as [1,2,2,4] NCHW: 2 channels of 2x4.
    let y = add_node(
        &mut g,
        "conv",
        Op::Conv {
            geom: ConvGeom {
                kernel: vec![1, 1],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![0; 4],
                auto_pad: None,
            },
            group: 1,
            post: vec![],
        },
        &[dq_out, wdq],
        &[1, 3, 2, 4],
        DType::F32,
    );
    g.values[y].name = "acc".into();
    g.outputs = vec![y];
    let opts = CompileOptions {
        outputs: vec![crate::compile::config::parse_output_flag("acc=s32").unwrap()],
        ..Default::default()
    };
    let m = compile_graph(g.clone(), &opts).unwrap();
    let qd = m.outputs[0].quant.as_ref().unwrap();
    assert_eq!((qd.qtype, qd.axis), (QType::S32, 1));
    let want = [0.05f32 * 0.01, 0.05 * 0.02, 0.05 * 0.03];
    assert_eq!(qd.scale, want.to_vec());
    let x: Vec<f32> = crate::compile::testutil::rand_vec(16, 5)
        .iter()
        .map(|v| v * 4.0)
        .collect();
    let got = i32s(&run_compiled(&m, &[bytemuck::cast_slice(&x).to_vec()])[0]);
    let mut reference = g.clone();
    crate::compile::quantize::fold_constant_dequantize(&mut reference).unwrap();
    let f = run_graph(&reference, &[x]);
    for (k, (&q, &v)) in got.iter().zip(&f[0]).enumerate() {
        let s = want[k / 8];
        assert!((q as f32 * s - v).abs() <= 0.5 * s, "{k}: {q} vs {v}");
    }
    // Asked as s8, the accumulator scale does not apply: calibration is needed.
    let opts = CompileOptions {
        outputs: vec![crate::compile::config::parse_output_flag("acc=s8").unwrap()],
        ..Default::default()
    };
    let e = compile_graph(g, &opts).unwrap_err().to_string();
    assert!(e.contains("acc") && e.contains("no scale"), "{e}");
}

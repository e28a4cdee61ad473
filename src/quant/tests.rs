use std::path::PathBuf;

use super::*;
use crate::compile::config::{CalibrationType, QuantizeOptions};
use crate::compile::testutil::{rand_vec, run_graph, GraphBuilder};
use crate::ir::{BinaryOp, ConvGeom, Op, Tensor, UnaryOp};
use crate::quant::npy::encode_npy;

fn conv(k: usize) -> Op {
    Op::Conv {
        geom: ConvGeom {
            kernel: vec![k, k],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![k / 2; 4],
            auto_pad: None,
        },
        group: 1,
        post: vec![],
    }
}

/// x -> Conv3x3 -> Relu -> r ; r -> Conv1x1 -> c ; Add(r, c) -> Conv1x1 -> GAP -> out0 ;
/// Sigmoid(c) -> out1 (stays float).
fn model() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1, 3, 8, 8]);
    let w1 = b.konst("w1", &[8, 3, 3, 3], rand_vec(8 * 27, 1));
    let b1 = b.konst("b1", &[8], rand_vec(8, 2));
    let c1 = b.node("conv1", conv(3), &[x, w1, b1], &[1, 8, 8, 8]);
    let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[c1], &[1, 8, 8, 8]);
    let w2 = b.konst("w2", &[8, 8, 1, 1], rand_vec(64, 3));
    let c2 = b.node("conv2", conv(1), &[r, w2], &[1, 8, 8, 8]);
    let a = b.node("add", Op::Binary(BinaryOp::Add), &[r, c2], &[1, 8, 8, 8]);
    let w3 = b.konst("w3", &[8, 8, 1, 1], rand_vec(64, 4));
    let c3 = b.node("conv3", conv(1), &[a, w3], &[1, 8, 8, 8]);
    let gap = b.node("gap", Op::GlobalAveragePool, &[c3], &[1, 8, 1, 1]);
    let s = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[c2], &[1, 8, 8, 8]);
    b.finish(&[gap, s])
}

fn calib_dir(tag: &str, n: usize) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vnpu_ptq_{tag}_{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    for k in 0..n {
        let t = Tensor::from_f32(vec![1, 3, 8, 8], rand_vec(192, 100 + k as u64));
        std::fs::write(d.join(format!("{k:03}.npy")), encode_npy(&t)).unwrap();
    }
    d
}

fn qopts(dir: &Path, t: CalibrationType, per_channel: bool) -> QuantizeOptions {
    QuantizeOptions {
        cal_data_dir: dir.to_path_buf(),
        calibration_type: t,
        per_channel,
    }
}

use std::path::Path;

#[test]
fn qdq_pairs_go_around_int8_ops_and_weights_become_s8() {
    let dir = calib_dir("insert", 4);
    let mut g = model();
    let r = quantize_graph(
        &mut g,
        &CompileOptions::default(),
        &qopts(&dir, CalibrationType::Max, true),
    )
    .unwrap();
    assert_eq!(r.samples, 4);
    // x, relu output (not conv1's), conv2 output, add output; conv3 feeds only the GAP
    // whose output is a graph output, so conv3 and the GAP stay f32.
    assert_eq!(
        r.tensors,
        4,
        "{:#?}",
        g.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
    );
    let q = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::QuantizeLinear { .. }))
        .count();
    assert_eq!(q, 4);
    let wdq: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::DequantizeLinear { axis: Some(0) }))
        .collect();
    assert_eq!(wdq.len(), 2);
    assert!(g
        .nodes
        .iter()
        .any(|n| n.name == "conv3" && g.values[n.inputs[1].unwrap()].name == "w3"));
    let wq = g.values[wdq[0].inputs[0].unwrap()].konst.clone().unwrap();
    assert_eq!(wq.dtype(), crate::ir::DType::I8);
    // The sigmoid reads the dequantised conv2 output; conv1's output is read by relu only.
    let sig = g.nodes.iter().find(|n| n.name == "sig").unwrap();
    assert!(g.values[sig.inputs[0].unwrap()]
        .name
        .ends_with("_dequantized"));
    let relu = g.nodes.iter().find(|n| n.name == "relu").unwrap();
    assert_eq!(g.values[relu.inputs[0].unwrap()].name, "conv1_out");
    // Every node reads values produced earlier.
    let mut known: std::collections::HashSet<_> = g.inputs.iter().copied().collect();
    for n in &g.nodes {
        for v in n.inputs.iter().flatten() {
            assert!(
                known.contains(v) || g.values[*v].konst.is_some(),
                "{}",
                n.name
            );
        }
        known.extend(n.outputs.iter().copied());
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn quantised_model_stays_close_to_f32_for_every_calibration_type() {
    let dir = calib_dir("close", 6);
    let x = rand_vec(192, 100); // a calibration sample: in range
    let want = run_graph(&model(), std::slice::from_ref(&x));
    for t in [
        CalibrationType::Max,
        CalibrationType::Percentile(99.99),
        CalibrationType::Kl,
    ] {
        for per_channel in [true, false] {
            let opts = CompileOptions {
                quantize: Some(qopts(&dir, t, per_channel)),
                ..Default::default()
            };
            let c = crate::compile::compile_graph(model(), &opts).unwrap();
            let got = run_graph(&c.graph, std::slice::from_ref(&x));
            for (k, (a, b)) in want.iter().zip(&got).enumerate() {
                let span = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
                let worst = a
                    .iter()
                    .zip(b)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                let tol = if matches!(t, CalibrationType::Max) {
                    0.06
                } else {
                    0.15
                };
                assert!(
                    worst <= tol * span,
                    "{t:?} per_channel={per_channel} output {k}: worst {worst} of {span}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn weight_quantisation_is_symmetric_per_channel() {
    let w = Tensor::from_f32(vec![2, 3], vec![1.0, -0.5, 0.25, 0.0, 0.0, 0.0]);
    let (q, s) = insert::quantize_weight(&w, Some(0));
    assert_eq!(s, vec![1.0 / 127.0, 1.0]);
    match &q.data {
        crate::ir::TensorData::I8(v) => assert_eq!(v, &vec![127, -64, 32, 0, 0, 0]),
        other => panic!("{other:?}"),
    }
    let (_, s) = insert::quantize_weight(
        &Tensor::from_f32(vec![3, 2], vec![1.0, -2.0, 0.5, 0.0, 0.0, 4.0]),
        Some(1),
    );
    assert_eq!(s, vec![1.0 / 127.0, 4.0 / 127.0]);
    let (_, s) = insert::quantize_weight(&w, None);
    assert_eq!(s, vec![1.0 / 127.0]);
}

#[test]
fn missing_calibration_data_is_a_named_compile_error() {
    let opts = CompileOptions {
        quantize: Some(qopts(
            Path::new("/nonexistent/calib"),
            CalibrationType::Max,
            true,
        )),
        ..Default::default()
    };
    let e = crate::compile::compile_graph(model(), &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/calib"), "{e}");
}

#[test]
fn image_inputs_calibrate_from_png_files_through_the_preprocessing() {
    use crate::compile::{InputParams, InputType};
    use crate::ir::ImageFormat;
    let d = std::env::temp_dir().join(format!("vnpu_ptq_png_{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    for k in 0..3u8 {
        let f = std::fs::File::create(d.join(format!("{k}.png"))).unwrap();
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), 5, 4);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let px: Vec<u8> = (0..60u32)
            .map(|i| ((i * 37 + u32::from(k) * 91) % 256) as u8)
            .collect();
        enc.write_header().unwrap().write_image_data(&px).unwrap();
    }
    let opts = CompileOptions {
        inputs: vec![InputParams {
            name: "x".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Rgb),
            nhwc: true,
            train_bgr: false,
            mean: vec![128.0; 3],
            scale: vec![1.0 / 128.0; 3],
        }],
        quantize: Some(qopts(&d, CalibrationType::Percentile(99.9), true)),
        ..Default::default()
    };
    let c = crate::compile::compile_graph(model(), &opts).unwrap();
    assert_eq!(c.inputs[0].shape, vec![1, 8, 8, 3]);
    // Three PNG samples went through the model's own preprocessing.
    let mut g = model();
    let mut o2 = opts.clone();
    o2.inputs.clear();
    let bad = quantize_graph(&mut g, &o2, o2.quantize.as_ref().unwrap()).unwrap_err();
    assert!(bad.to_string().contains("input_type_rt"), "{bad}");
    std::fs::remove_dir_all(&d).ok();
}

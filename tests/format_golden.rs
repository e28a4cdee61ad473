//! The golden compiled file: a small model (conv, pool, layout, gemm, elementwise and
//! norm ops) compiled and stored under `tests/golden/` in format version 2. Every later
//! vnpu must keep loading it and computing the stored outputs — or refuse it with the
//! "older format" error by design, after a format version bump (then regenerate it and
//! say so in the commit).
//!
//! Regenerate (only when the format version changes):
//! `VNPU_REGEN_GOLDEN=1 cargo test --features test-ops --test format_golden`

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vnpu::compile::{compile_onnx_bytes, CompileOptions};
use vnpu::exec::{ModelPlan, PlanOptions};
use vnpu::ir::{DType, Tensor};
use vnpu::onnx::builder::{attr, ModelBuilder};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The input the expected outputs were computed from: deterministic, no RNG.
fn input() -> Vec<f32> {
    (0..3 * 8 * 8)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect()
}

fn small_model_onnx() -> Vec<u8> {
    let w: Vec<f32> = (0..4 * 3 * 3 * 3)
        .map(|i| ((i % 7) as f32 - 3.0) / 10.0)
        .collect();
    let b: Vec<f32> = vec![0.1, -0.2, 0.3, 0.0];
    let fc: Vec<f32> = (0..4 * 5).map(|i| ((i % 5) as f32 - 2.0) / 4.0).collect();
    ModelBuilder::new("golden_small", 13)
        .input("x", DType::F32, &[1, 3, 8, 8])
        .initializer("w", &Tensor::from_f32(vec![4, 3, 3, 3], w))
        .initializer("b", &Tensor::from_f32(vec![4], b))
        .initializer("fc", &Tensor::from_f32(vec![4, 5], fc))
        .initializer("shape", &Tensor::from_i64(vec![2], vec![1, 4]))
        .node(
            "Conv",
            "conv",
            &["x", "w", "b"],
            &["c"],
            vec![
                attr::ints("pads", &[1, 1, 1, 1]),
                attr::ints("strides", &[1, 1]),
            ],
        )
        .node("Relu", "relu", &["c"], &["r"], vec![])
        .node(
            "MaxPool",
            "pool",
            &["r"],
            &["p"],
            vec![
                attr::ints("kernel_shape", &[2, 2]),
                attr::ints("strides", &[2, 2]),
            ],
        )
        .node("GlobalAveragePool", "gap", &["p"], &["g"], vec![])
        .node("Reshape", "flat", &["g", "shape"], &["f"], vec![])
        .node("MatMul", "fc", &["f", "fc"], &["m"], vec![])
        .node("Sigmoid", "sig", &["m"], &["s"], vec![])
        .node(
            "Softmax",
            "softmax",
            &["s"],
            &["y"],
            vec![attr::int("axis", 1)],
        )
        .output("y")
        .to_bytes()
}

fn outputs_of(models: &[vnpu::compile::CompiledModel]) -> Vec<f32> {
    let g = Arc::new(models[0].graph.clone());
    let plan = ModelPlan::new(g, &PlanOptions::default()).expect("plan");
    let mut st = plan.new_state();
    let x = input();
    plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
        .expect("input");
    plan.run_all(&mut st).expect("run");
    let mut out = vec![0u8; plan.output_len(0)];
    plan.read_output(&st, 0, &mut out).expect("output");
    out.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn golden_file_keeps_loading_with_its_outputs() {
    let file = golden_dir().join("small_v2.vnpu");
    let expected = golden_dir().join("small_v2.expected.txt");
    if std::env::var_os("VNPU_REGEN_GOLDEN").is_some() {
        let m = compile_onnx_bytes(
            &small_model_onnx(),
            None,
            "golden_small",
            &CompileOptions::default(),
        )
        .expect("compile");
        vnpu::format::save_models(&file, &[m]).expect("save");
        let ms = vnpu::format::load_file(&file).expect("load");
        let text: Vec<String> = outputs_of(&ms).iter().map(|v| format!("{v:e}")).collect();
        std::fs::write(&expected, text.join("\n") + "\n").expect("write expected");
    }
    vnpu::format::verify_file(&file).expect("the golden file verifies");
    let models = vnpu::format::load_file(&file).expect("the golden file loads");
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].name, "golden_small");
    let ops: Vec<&str> = models[0].graph.nodes.iter().map(|n| n.op.name()).collect();
    assert!(ops.contains(&"Conv") && ops.contains(&"Softmax"), "{ops:?}");
    let want: Vec<f32> = std::fs::read_to_string(&expected)
        .expect("expected outputs")
        .lines()
        .map(|l| l.parse().expect("a float"))
        .collect();
    let got = outputs_of(&models);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
    // The same model compiled now gives the same numbers (the file is not stale).
    let fresh = compile_onnx_bytes(&small_model_onnx(), None, "g", &CompileOptions::default())
        .expect("compile");
    let now = outputs_of(&[fresh]);
    for (g, w) in now.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{now:?} vs {want:?}"
        );
    }
}

#[test]
fn older_and_newer_versions_of_the_golden_file_say_so() {
    let bytes = std::fs::read(golden_dir().join("small_v2.vnpu")).expect("golden file");
    let mut old = bytes.clone();
    old[8..12].copy_from_slice(&1u32.to_le_bytes());
    let e = vnpu::format::read_models(&old, "old")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("older format version 1: recompile with `vnpu compile`"),
        "{e}"
    );
    let mut new = bytes;
    new[8..12].copy_from_slice(&(vnpu::format::FORMAT_VERSION + 1).to_le_bytes());
    let e = vnpu::format::read_models(&new, "new").unwrap_err();
    assert!(matches!(e, vnpu::Error::IncompatibleModel { .. }), "{e}");
    assert!(e.to_string().contains("newer format"), "{e}");
}

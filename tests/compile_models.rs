//! Compile-path checks on the generated standard models (ResNet-18, MobileNetV2, CPU ops
//! in the middle / at both ends). They need `scripts/gen_models.py` output in
//! `$VNPU_TEST_MODELS`; `scripts/test.sh` provides it and runs these with
//! `--include-ignored`.

use std::path::PathBuf;

use vnpu::compile::{compile_onnx_file, CompileOptions};
use vnpu::ir::Placement;

fn model(name: &str) -> PathBuf {
    let dir =
        std::env::var("VNPU_TEST_MODELS").expect("VNPU_TEST_MODELS (scripts/test.sh sets it)");
    PathBuf::from(dir).join(name)
}

fn opts(limit: u64) -> CompileOptions {
    CompileOptions {
        max_time_per_fc: limit,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs generated models: scripts/test.sh"]
fn resnet18_splits_into_fcs_within_the_limit() {
    let m = compile_onnx_file(&model("resnet18.onnx"), &opts(1000)).unwrap();
    let fcs: Vec<_> = m
        .segments
        .iter()
        .filter(|s| s.kind == Placement::Bpu)
        .flat_map(|s| s.fcs.iter())
        .collect();
    assert!(fcs.len() >= 2, "{} FCs", fcs.len());
    let flagged: std::collections::HashSet<usize> = m.over_limit.iter().map(|o| o.node).collect();
    for fc in &fcs {
        assert!(
            fc.est_us <= 1000.0 || fc.steps.iter().any(|s| flagged.contains(&s.node)),
            "{fc:?}"
        );
    }
    // BN folded and ReLU fused: no BatchNormalization or standalone Relu remains.
    for n in &m.graph.nodes {
        assert_ne!(n.op.name(), "BatchNormalization", "{}", n.name);
        assert_ne!(n.op.name(), "Relu", "{}", n.name);
    }
    let unsplit = compile_onnx_file(&model("resnet18.onnx"), &opts(0)).unwrap();
    for s in &unsplit.segments {
        assert_eq!(s.fcs.len(), 1);
    }
}

#[test]
#[ignore = "needs generated models: scripts/test.sh"]
fn mobilenetv2_fuses_clip_and_residuals() {
    let m = compile_onnx_file(&model("mobilenetv2.onnx"), &opts(1000)).unwrap();
    assert!(
        m.graph
            .nodes
            .iter()
            .all(|n| n.op.name() != "Clip" && n.op.name() != "Add"),
        "unfused Clip/Add left"
    );
    assert!(m.graph.nodes.iter().any(|n| n.absorbed.len() >= 3));
}

#[test]
#[ignore = "needs generated models: scripts/test.sh"]
fn cpu_ops_make_cpu_segments_in_the_middle_and_at_the_ends() {
    let mid = compile_onnx_file(&model("cpu_middle.onnx"), &opts(0)).unwrap();
    let kinds: Vec<Placement> = mid.segments.iter().map(|s| s.kind).collect();
    assert!(
        kinds.len() >= 3 && kinds[0] == Placement::Bpu && kinds.contains(&Placement::Cpu),
        "{kinds:?}"
    );
    assert_eq!(*kinds.last().unwrap(), Placement::Bpu, "{kinds:?}");
    let ends = compile_onnx_file(&model("cpu_ends.onnx"), &opts(0)).unwrap();
    let kinds: Vec<Placement> = ends.segments.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.first(), Some(&Placement::Cpu), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&Placement::Cpu), "{kinds:?}");
}

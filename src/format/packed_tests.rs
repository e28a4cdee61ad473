//! Unit tests of the packed-weights record: stored for the writing host's table,
//! borrowed on load, same outputs as packing at load, ignored for another table, and
//! refused when inconsistent.

use super::tests::edit_manifest;
use super::*;
use crate::compile::{compile_onnx_bytes, CompileOptions};
use crate::exec::{ModelPlan, PlanOptions};
use crate::ir::{DType, Tensor};
use crate::onnx::builder::{attr, ModelBuilder};

fn ramp(n: usize, m: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i % m) as f32 - m as f32 / 2.0) / m as f32)
        .collect()
}

/// Dense, grouped and depthwise convs, a Gemm (transposed B, alpha) and a MatMul.
fn conv_gemm_model() -> CompiledModel {
    let onnx = ModelBuilder::new("packed", 13)
        .input("x", DType::F32, &[1, 4, 6, 6])
        .initializer("w1", &Tensor::from_f32(vec![8, 4, 3, 3], ramp(288, 7)))
        .initializer("w2", &Tensor::from_f32(vec![8, 4, 3, 3], ramp(288, 5)))
        .initializer("w3", &Tensor::from_f32(vec![8, 1, 3, 3], ramp(72, 3)))
        .initializer("fc", &Tensor::from_f32(vec![5, 8], ramp(40, 9)))
        .initializer("mm", &Tensor::from_f32(vec![5, 3], ramp(15, 4)))
        .initializer("shape", &Tensor::from_i64(vec![2], vec![1, 8]))
        .node(
            "Conv",
            "dense",
            &["x", "w1"],
            &["a"],
            vec![attr::ints("pads", &[1, 1, 1, 1])],
        )
        .node(
            "Conv",
            "grouped",
            &["a", "w2"],
            &["b"],
            vec![attr::ints("pads", &[1, 1, 1, 1]), attr::int("group", 2)],
        )
        .node(
            "Conv",
            "depthwise",
            &["b", "w3"],
            &["c"],
            vec![attr::ints("pads", &[1, 1, 1, 1]), attr::int("group", 8)],
        )
        .node("GlobalAveragePool", "gap", &["c"], &["g"], vec![])
        .node("Reshape", "flat", &["g", "shape"], &["f"], vec![])
        .node(
            "Gemm",
            "gemm",
            &["f", "fc"],
            &["h"],
            vec![attr::int("transB", 1), attr::float("alpha", 0.5)],
        )
        .node("MatMul", "mm", &["h", "mm"], &["y"], vec![])
        .output("y")
        .to_bytes();
    compile_onnx_bytes(&onnx, None, "packed", &CompileOptions::default()).expect("compile")
}

fn run(m: &CompiledModel, packed: &PackedWeights) -> Result<Vec<u8>> {
    let plan = ModelPlan::with_packed(Arc::new(m.graph.clone()), &PlanOptions::default(), packed)?;
    let mut st = plan.new_state();
    let x = ramp(4 * 36, 11);
    plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))?;
    plan.run_all(&mut st)?;
    let mut out = vec![0u8; plan.output_len(0)];
    plan.read_output(&st, 0, &mut out)?;
    Ok(out)
}

#[test]
fn packed_weights_are_stored_borrowed_and_give_the_same_outputs() {
    let m = conv_gemm_model();
    let bytes = write_models(std::slice::from_ref(&m)).unwrap();
    let back = read_models(&bytes, "mem").unwrap();
    let p = &back[0].packed;
    let isa = crate::kernels::simd::best_isa();
    assert_eq!(p.geometry, PackGeometry::of(isa));
    // The dense and grouped convs, the Gemm and the MatMul; the depthwise conv borrows
    // its constant instead.
    let ops: Vec<&str> = p
        .nodes
        .iter()
        .map(|(n, _)| back[0].graph.nodes[*n].op.name())
        .collect();
    assert_eq!(ops, ["Conv", "Conv", "Gemm", "MatMul"], "{ops:?}");
    assert!(
        p.nodes.iter().all(|(_, b)| b.is_shared()),
        "borrowed, not copied"
    );
    let want = run(&m, &PackedWeights::default()).unwrap();
    assert_eq!(run(&back[0], p).unwrap(), want, "borrowed = packed at load");
    // Packed for another table: ignored, the plan packs.
    let mut other = p.clone();
    other.geometry.table = "another-table".into();
    assert_eq!(run(&back[0], &other).unwrap(), want);
    // Packed by an earlier planner revision (which may have chosen another path for a
    // node, with buffers of other lengths): ignored too.
    let mut older = p.clone();
    older.geometry.revision = 0;
    for (_, b) in &mut older.nodes {
        *b = b.slice(0..b.len() / 2).unwrap();
    }
    assert_eq!(run(&back[0], &older).unwrap(), want);
    // Through the runtime (what loading a file does).
    let pm = crate::runtime::PackedModel::from_compiled(back, vec![]).unwrap();
    assert_eq!(pm.models.len(), 1);
    // Writing what was read stores the same packed weights again.
    let again = write_models(&read_models(&bytes, "mem").unwrap()).unwrap();
    assert_eq!(again, bytes);
}

#[test]
fn files_without_packed_weights_load_and_pack_at_load() {
    let m = conv_gemm_model();
    let bytes = write_models(std::slice::from_ref(&m)).unwrap();
    // What a file written before the record existed looks like (its blobs are left in
    // the weights section, unreferenced, which readers ignore).
    let old = edit_manifest(&bytes, |r| r.models[0].packed = None);
    let back = read_models(&old, "old").unwrap();
    assert!(back[0].packed.is_empty());
    let want = run(&m, &PackedWeights::default()).unwrap();
    assert_eq!(run(&back[0], &back[0].packed).unwrap(), want);
}

#[test]
fn inconsistent_packed_weights_are_refused() {
    let m = conv_gemm_model();
    let bytes = write_models(std::slice::from_ref(&m)).unwrap();
    let err = |b: &[u8]| read_models(b, "f").unwrap_err().to_string();
    let pool = m
        .graph
        .nodes
        .iter()
        .position(|n| n.op.name() == "GlobalAveragePool")
        .unwrap() as u64;
    let on_pool = edit_manifest(&bytes, |r| {
        let p = r.models[0].packed.as_mut().unwrap();
        p.blobs[1].node = pool;
    });
    assert!(
        err(&on_pool).contains("only Conv, Gemm and MatMul"),
        "{}",
        err(&on_pool)
    );
    let unordered = edit_manifest(&bytes, |r| {
        r.models[0].packed.as_mut().unwrap().blobs.swap(0, 1);
    });
    assert!(
        err(&unordered).contains("increasing node order"),
        "{}",
        err(&unordered)
    );
    let outside = edit_manifest(&bytes, |r| {
        r.models[0].packed.as_mut().unwrap().blobs[0].offset = 1 << 40;
    });
    assert!(err(&outside).contains("out of bounds"), "{}", err(&outside));
    let missing = edit_manifest(&bytes, |r| {
        r.models[0].packed.as_mut().unwrap().blobs[0].node = 999;
    });
    assert!(
        err(&missing).contains("does not exist"),
        "{}",
        err(&missing)
    );
    // A buffer of the wrong length loads (a record alone cannot tell) but does not plan.
    let short = edit_manifest(&bytes, |r| {
        r.models[0].packed.as_mut().unwrap().blobs[0].len -= 4;
    });
    let back = read_models(&short, "short").unwrap();
    let e = run(&back[0], &back[0].packed).unwrap_err().to_string();
    assert!(e.contains("packed weights hold"), "{e}");
    let e = crate::runtime::PackedModel::from_compiled(back, vec![]).unwrap_err();
    assert!(e.to_string().contains("packed weights hold"), "{e}");
    // The same buffer in a file of an earlier planner revision: ignored, packed at load.
    let older = edit_manifest(&bytes, |r| {
        let p = r.models[0].packed.as_mut().unwrap();
        p.blobs[0].len -= 4;
        p.revision = 0;
    });
    let back = read_models(&older, "older").unwrap();
    let want = run(
        &read_models(&bytes, "mem").unwrap()[0],
        &PackedWeights::default(),
    );
    assert_eq!(run(&back[0], &back[0].packed).unwrap(), want.unwrap());
    crate::runtime::PackedModel::from_compiled(back, vec![]).unwrap();
}

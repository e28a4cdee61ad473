//! Numerical conformance against onnxruntime.
//!
//! Reads `$VNPU_CONFORMANCE_DIR/manifest.json` (written by
//! `tests/conformance/gen_cases.py`, which runs onnxruntime in a venv), compiles every
//! case through the real compile path (import, passes, placement, FC partition, and a
//! round trip through the compiled file format), runs it, and compares every output.
//!
//! * `op` and `network` cases must all pass (max error ≤ atol + rtol·|ref|).
//! * `onnx-node` cases (the ONNX backend node tests): every case listed in
//!   `tests/conformance/onnx_node_passing.txt` must pass; the others are reported as
//!   pass / fail / unsupported counts so progress is visible.
//!
//! Run with `scripts/test.sh`, or by hand:
//! `VNPU_CONFORMANCE_DIR=build/conformance cargo test --test conformance -- --ignored`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;
use vnpu::compile::{self, CompileOptions};
use vnpu::exec::{ModelPlan, PlanOptions, Tile};
use vnpu::Error;

struct Case {
    name: String,
    kind: String,
    model: PathBuf,
    rtol: f64,
    atol: f64,
    inputs: Vec<(String, String, PathBuf)>,
    outputs: Vec<(String, String, PathBuf)>,
}

fn tensors(dir: &Path, v: &Json) -> Vec<(String, String, PathBuf)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap_or("").to_string(),
                        t["dtype"].as_str().unwrap_or("f32").to_string(),
                        dir.join(t["file"].as_str().unwrap_or("")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn load_cases(dir: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .expect("manifest.json (run scripts/test.sh)");
    let root: Json = serde_json::from_str(&text).expect("manifest is JSON");
    root["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap_or("?").to_string(),
            kind: c["kind"].as_str().unwrap_or("op").to_string(),
            model: dir.join(c["model"].as_str().unwrap_or("")),
            rtol: c["rtol"].as_f64().unwrap_or(1e-4),
            atol: c["atol"].as_f64().unwrap_or(1e-5),
            inputs: tensors(dir, &c["inputs"]),
            outputs: tensors(dir, &c["outputs"]),
        })
        .collect()
}

enum Outcome {
    Pass,
    Unsupported(String),
    Fail(String),
}

fn compare(
    name: &str,
    dtype: &str,
    got: &[u8],
    want: &[u8],
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "output '{name}': {} bytes, reference has {}",
            got.len(),
            want.len()
        ));
    }
    if dtype != "f32" {
        if got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!("output '{name}' ({dtype}) differs at byte {at}"));
        }
        return Ok(());
    }
    let g: &[f32] = bytemuck::cast_slice(got);
    let w: Vec<f32> = want
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut worst = (0usize, 0f64);
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let (a, b) = (a as f64, b as f64);
        if a.is_nan() && b.is_nan() {
            continue;
        }
        if a == b {
            continue;
        }
        let excess = (a - b).abs() - (atol + rtol * b.abs());
        if excess > worst.1 || a.is_nan() != b.is_nan() {
            worst = (
                i,
                if excess.is_nan() {
                    f64::INFINITY
                } else {
                    excess.max(f64::MIN_POSITIVE)
                },
            );
        }
    }
    if worst.1 > 0.0 {
        let i = worst.0;
        return Err(format!(
            "output '{name}' element {i}: got {} want {} (rtol {rtol}, atol {atol})",
            g[i], w[i]
        ));
    }
    Ok(())
}

fn run_case(c: &Case) -> Outcome {
    let opts = CompileOptions::default();
    let compiled = match compile::compile_onnx_file(&c.model, &opts) {
        Ok(m) => m,
        Err(e @ (Error::UnsupportedOp { .. } | Error::BadAttribute { .. })) => {
            return Outcome::Unsupported(e.to_string())
        }
        Err(e) => return Outcome::Fail(format!("compile: {e}")),
    };
    // Round trip through the file format, as the runtime loads it.
    let bytes = match vnpu::format::write_models(std::slice::from_ref(&compiled)) {
        Ok(b) => b,
        Err(e) => return Outcome::Fail(format!("write: {e}")),
    };
    let m = match vnpu::format::read_models(&bytes, &c.name) {
        Ok(mut v) => v.remove(0),
        Err(e) => return Outcome::Fail(format!("read: {e}")),
    };
    let plan = match ModelPlan::new(Arc::new(m.graph.clone()), &PlanOptions::default()) {
        Ok(p) => p,
        Err(e @ (Error::UnsupportedOp { .. } | Error::BadAttribute { .. })) => {
            return Outcome::Unsupported(e.to_string())
        }
        Err(e) => return Outcome::Fail(format!("plan: {e}")),
    };
    let mut st = plan.new_state();
    if c.inputs.len() != m.inputs.len() {
        return Outcome::Fail(format!(
            "model has {} inputs, case {}",
            m.inputs.len(),
            c.inputs.len()
        ));
    }
    for (i, (name, _, file)) in c.inputs.iter().enumerate() {
        let data = std::fs::read(file).expect("input file");
        if let Err(e) = plan.set_input(&mut st, i, &data) {
            return Outcome::Fail(format!("input '{name}': {e}"));
        }
    }
    for seg in &m.segments {
        for fc in &seg.fcs {
            for s in &fc.steps {
                if let Err(e) = plan.run_node(
                    &mut st,
                    s.node,
                    Tile {
                        index: s.tile as usize,
                        count: s.tiles as usize,
                    },
                ) {
                    let n = &m.graph.nodes[s.node];
                    return Outcome::Fail(format!("node '{}' ({}): {e}", n.name, n.op.name()));
                }
            }
        }
    }
    for (i, (name, dtype, file)) in c.outputs.iter().enumerate() {
        let want = std::fs::read(file).expect("output file");
        let mut got = vec![0u8; plan.output_len(i)];
        if let Err(e) = plan.read_output(&st, i, &mut got) {
            return Outcome::Fail(format!("output '{name}': {e}"));
        }
        if let Err(e) = compare(name, dtype, &got, &want, c.rtol, c.atol) {
            return Outcome::Fail(e);
        }
    }
    Outcome::Pass
}

#[test]
#[ignore = "needs generated data: run scripts/test.sh (or set VNPU_CONFORMANCE_DIR)"]
fn conformance_against_onnxruntime() {
    let dir = PathBuf::from(
        std::env::var("VNPU_CONFORMANCE_DIR")
            .expect("set VNPU_CONFORMANCE_DIR (scripts/test.sh does)"),
    );
    let cases = load_cases(&dir);
    let passing_list =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/onnx_node_passing.txt");
    let must_pass: BTreeSet<String> = std::fs::read_to_string(&passing_list)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut failures = Vec::new();
    let mut node = (0usize, 0usize, 0usize);
    let mut ours = (0usize, 0usize);
    let mut now_passing = Vec::new();
    for c in &cases {
        let outcome = std::panic::catch_unwind(|| run_case(c))
            .unwrap_or_else(|_| Outcome::Fail("panicked".into()));
        match c.kind.as_str() {
            "onnx-node" => match outcome {
                Outcome::Pass => {
                    node.0 += 1;
                    now_passing.push(c.name.clone());
                }
                Outcome::Fail(e) => {
                    node.1 += 1;
                    if must_pass.contains(&c.name) {
                        failures.push(format!("{} (listed as passing): {e}", c.name));
                    }
                }
                Outcome::Unsupported(e) => {
                    node.2 += 1;
                    if must_pass.contains(&c.name) {
                        failures.push(format!("{} (listed as passing): unsupported: {e}", c.name));
                    }
                }
            },
            _ => match outcome {
                Outcome::Pass => ours.0 += 1,
                Outcome::Fail(e) | Outcome::Unsupported(e) => {
                    ours.1 += 1;
                    failures.push(format!("{} [{}]: {e}", c.name, c.kind));
                }
            },
        }
    }
    println!(
        "conformance: own cases {} passed, {} failed",
        ours.0, ours.1
    );
    println!(
        "conformance: onnx node tests {} passed, {} failed, {} unsupported",
        node.0, node.1, node.2
    );
    if let Ok(out) = std::env::var("VNPU_CONFORMANCE_PASSING_OUT") {
        let _ = std::fs::write(out, now_passing.join("\n") + "\n");
    }
    assert!(ours.0 + node.0 > 0, "no case ran");
    assert!(
        failures.is_empty(),
        "{} conformance failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

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
//! A failing case names the first compiled node whose output diverges from
//! onnxruntime's intermediate value (via `tests/conformance/dump_intermediates.py`).
//!
//! Run with `scripts/test.sh`, or by hand:
//! `VNPU_CONFORMANCE_DIR=build/conformance cargo test --test conformance -- --ignored`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;
use vnpu::compile::{self, CompileOptions};
use vnpu::exec::{ExecState, ModelPlan, PlanOptions};
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

/// Errors that mean "vnpu does not support this model" rather than "vnpu is wrong":
/// unsupported ops/attributes, opsets outside 11..=21, and shapes that depend on runtime
/// values (vnpu compiles static shapes).
fn unsupported(e: &Error) -> bool {
    let msg = e.to_string();
    matches!(e, Error::UnsupportedOp { .. } | Error::BadAttribute { .. })
        || (matches!(e, Error::OnnxFormat { .. })
            && (msg.contains("opset") && msg.contains("not supported")))
        || msg.contains("vnpu needs static shapes")
        || msg.contains("imports no default-domain opset")
}

/// A case compiled through the real path and round-tripped through the file format.
struct Prepared {
    model: vnpu::compile::CompiledModel,
    plan: ModelPlan,
}

fn prepare(c: &Case) -> Result<Prepared, Outcome> {
    let opts = CompileOptions::default();
    let compiled = match compile::compile_onnx_file(&c.model, &opts) {
        Ok(m) => m,
        Err(e) if unsupported(&e) => return Err(Outcome::Unsupported(e.to_string())),
        Err(e) => return Err(Outcome::Fail(format!("compile: {e}"))),
    };
    // Round trip through the file format, as the runtime loads it.
    let bytes = vnpu::format::write_models(std::slice::from_ref(&compiled))
        .map_err(|e| Outcome::Fail(format!("write: {e}")))?;
    let model = vnpu::format::read_models(&bytes, &c.name)
        .map_err(|e| Outcome::Fail(format!("read: {e}")))?
        .remove(0);
    let plan = match ModelPlan::new(Arc::new(model.graph.clone()), &PlanOptions::default()) {
        Ok(p) => p,
        Err(e) if unsupported(&e) => return Err(Outcome::Unsupported(e.to_string())),
        Err(e) => return Err(Outcome::Fail(format!("plan: {e}"))),
    };
    if c.inputs.len() != model.inputs.len() {
        return Err(Outcome::Fail(format!(
            "model has {} inputs, case {}",
            model.inputs.len(),
            c.inputs.len()
        )));
    }
    Ok(Prepared { model, plan })
}

/// Runs every FC step of `p` in order on `inputs`. After the last tile of each node,
/// `after_node(node, state)` may stop the run with a message.
fn run_steps(
    p: &Prepared,
    inputs: &[Vec<u8>],
    mut after_node: impl FnMut(usize, &ExecState) -> Option<String>,
) -> Result<ExecState, String> {
    let mut st = p.plan.new_state();
    for (i, data) in inputs.iter().enumerate() {
        p.plan
            .set_input(&mut st, i, data)
            .map_err(|e| format!("input {i}: {e}"))?;
    }
    for seg in &p.model.segments {
        for fc in &seg.fcs {
            for s in &fc.steps {
                let tile = s.exec_tile();
                if let Err(e) = p.plan.run_node(&mut st, s.node, tile) {
                    let n = &p.model.graph.nodes[s.node];
                    return Err(format!("node '{}' ({}): {e}", n.name, n.op.name()));
                }
                if tile.index + 1 == tile.count {
                    if let Some(msg) = after_node(s.node, &st) {
                        return Err(msg);
                    }
                }
            }
        }
    }
    Ok(st)
}

fn read_inputs(c: &Case) -> Vec<Vec<u8>> {
    c.inputs
        .iter()
        .map(|(_, _, file)| std::fs::read(file).expect("input file"))
        .collect()
}

fn run_case(c: &Case) -> Outcome {
    let p = match prepare(c) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let st = match run_steps(&p, &read_inputs(c), |_, _| None) {
        Ok(st) => st,
        Err(e) => return Outcome::Fail(e),
    };
    for (i, (name, dtype, file)) in c.outputs.iter().enumerate() {
        let want = std::fs::read(file).expect("output file");
        let mut got = vec![0u8; p.plan.output_len(i)];
        if let Err(e) = p.plan.read_output(&st, i, &mut got) {
            return Outcome::Fail(format!("output '{name}': {e}"));
        }
        if let Err(e) = compare(name, dtype, &got, &want, c.rtol, c.atol) {
            return Outcome::Fail(e);
        }
    }
    Outcome::Pass
}

/// Reference values of intermediate tensors by ONNX value name: (dtype tag, bytes).
type References = HashMap<String, (String, Vec<u8>)>;

/// Reruns `p` node by node and compares every node output that has a reference;
/// names the first compiled node (with the ONNX nodes it absorbed) whose output
/// diverges, or returns how many values agreed.
fn first_divergence(
    p: &Prepared,
    inputs: &[Vec<u8>],
    refs: &References,
    rtol: f64,
    atol: f64,
) -> Result<usize, String> {
    let g = &p.model.graph;
    let mut agreed = 0;
    run_steps(p, inputs, |node, st| {
        let n = &g.nodes[node];
        for (k, &v) in n.outputs.iter().enumerate() {
            let vname = &g.values[v].name;
            let (Some((dtype, want)), Some(got)) =
                (refs.get(vname), p.plan.node_output(st, node, k))
            else {
                continue;
            };
            if let Err(e) = compare(vname, dtype, got, want, rtol, atol) {
                return Some(format!(
                    "first diverging node: '{}' ({}, absorbs [{}]): {e}",
                    n.name,
                    n.op.name(),
                    n.absorbed.join(", ")
                ));
            }
            agreed += 1;
        }
        None
    })?;
    Ok(agreed)
}

/// Runs `tests/conformance/dump_intermediates.py` (onnxruntime, in the venv) for case
/// `c` and loads what it wrote.
fn reference_intermediates(dir: &Path, c: &Case) -> Result<References, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!(
        "vnpu-intermediates-{}-{}",
        std::process::id(),
        c.name.replace(['/', '\\'], "_")
    ));
    let status = std::process::Command::new(repo.join("scripts/venv.sh"))
        .arg("python")
        .arg(repo.join("tests/conformance/dump_intermediates.py"))
        .arg(dir)
        .arg(&c.name)
        .arg(&out)
        .current_dir(repo)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("run dump_intermediates.py: {e}"))?;
    if !status.success() {
        return Err(format!("dump_intermediates.py exited with {status}"));
    }
    let refs = load_references(&out);
    let _ = std::fs::remove_dir_all(&out);
    refs
}

/// Reads a `values.json` folder written by `dump_intermediates.py`.
fn load_references(folder: &Path) -> Result<References, String> {
    let text = std::fs::read_to_string(folder.join("values.json"))
        .map_err(|e| format!("values.json: {e}"))?;
    let root: Json = serde_json::from_str(&text).map_err(|e| format!("values.json: {e}"))?;
    let mut refs = References::new();
    for (name, dtype, file) in tensors(folder, &root["values"]) {
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        refs.insert(name, (dtype, bytes));
    }
    Ok(refs)
}

/// A failure message extended with the first diverging node, when onnxruntime's
/// intermediates can be had.
fn explain_failure(dir: &Path, c: &Case, msg: String) -> String {
    let Ok(p) = prepare(c) else { return msg };
    match reference_intermediates(dir, c) {
        Ok(refs) => match first_divergence(&p, &read_inputs(c), &refs, c.rtol, c.atol) {
            Err(d) => format!("{msg}; {d}"),
            Ok(n) => format!("{msg}; all {n} intermediates with a reference agree"),
        },
        Err(e) => format!("{msg}; (first diverging node unknown: {e})"),
    }
}

/// How many failures get the (slower) first-diverging-node search.
const EXPLAIN_MAX: usize = 8;

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
    let verbose = std::env::var_os("VNPU_CONFORMANCE_VERBOSE").is_some();
    let mut failures = Vec::new();
    let mut node = (0usize, 0usize, 0usize);
    let mut ours = (0usize, 0usize);
    let mut now_passing = Vec::new();
    // `VNPU_CONFORMANCE_EXPLAIN=<case>` runs the first-diverging-node search on one
    // case even when it passes (a check of the search itself on real references).
    if let Ok(name) = std::env::var("VNPU_CONFORMANCE_EXPLAIN") {
        if let Some(c) = cases.iter().find(|c| c.name == name) {
            println!(
                "{name}: {}",
                explain_failure(&dir, c, "explain requested".into())
            );
        }
    }
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
                    if verbose {
                        println!("onnx-node FAIL {}: {e}", c.name);
                    }
                    if must_pass.contains(&c.name) {
                        let e = if failures.len() < EXPLAIN_MAX {
                            explain_failure(&dir, c, e)
                        } else {
                            e
                        };
                        failures.push(format!("{} (listed as passing): {e}", c.name));
                    }
                }
                Outcome::Unsupported(e) => {
                    node.2 += 1;
                    if verbose {
                        println!("onnx-node UNSUPPORTED {}: {e}", c.name);
                    }
                    if must_pass.contains(&c.name) {
                        failures.push(format!("{} (listed as passing): unsupported: {e}", c.name));
                    }
                }
            },
            _ => match outcome {
                Outcome::Pass => ours.0 += 1,
                Outcome::Fail(e) => {
                    ours.1 += 1;
                    let e = if failures.len() < EXPLAIN_MAX {
                        explain_failure(&dir, c, e)
                    } else {
                        e
                    };
                    failures.push(format!("{} [{}]: {e}", c.name, c.kind));
                }
                Outcome::Unsupported(e) => {
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

/// conv (+relu, fused) → max pool → transpose: three compiled nodes with known value
/// names.
fn divergence_case(dir: &Path) -> Case {
    use vnpu::ir::{DType, Tensor};
    use vnpu::onnx::builder::{attr, ModelBuilder};
    let w = Tensor::from_f32(
        vec![2, 1, 3, 3],
        (0..18).map(|i| ((i * 5) % 7) as f32 / 7.0 - 0.4).collect(),
    );
    let bytes = ModelBuilder::new("div", 13)
        .input("x", DType::F32, &[1, 1, 6, 6])
        .initializer("w", &w)
        .node(
            "Conv",
            "conv",
            &["x", "w"],
            &["c"],
            vec![attr::ints("pads", &[1, 1, 1, 1])],
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
        .node(
            "Transpose",
            "tr",
            &["p"],
            &["y"],
            vec![attr::ints("perm", &[0, 1, 3, 2])],
        )
        .output("y")
        .to_bytes();
    std::fs::create_dir_all(dir).unwrap();
    let model = dir.join("model.onnx");
    std::fs::write(&model, bytes).unwrap();
    let x: Vec<f32> = (0..36).map(|i| ((i * 7) % 13) as f32 / 6.0 - 1.0).collect();
    let input = dir.join("in_0.bin");
    std::fs::write(&input, bytemuck::cast_slice(&x)).unwrap();
    Case {
        name: "divergence".into(),
        kind: "op".into(),
        model,
        rtol: 1e-4,
        atol: 1e-5,
        inputs: vec![("x".into(), "f32".into(), input)],
        outputs: vec![],
    }
}

/// The first-diverging-node search names the compiled node (and what it absorbed)
/// whose output first disagrees with the references, reading them in the format
/// `dump_intermediates.py` writes.
#[test]
fn first_divergence_names_the_node_that_differs() {
    let dir = std::env::temp_dir().join(format!("vnpu-divergence-{}", std::process::id()));
    let c = divergence_case(&dir);
    let p = prepare(&c).unwrap_or_else(|_| panic!("compile"));
    let inputs = read_inputs(&c);
    // Our own intermediates, captured node by node, stand in for onnxruntime's.
    let g = &p.model.graph;
    let mut values = Vec::new();
    run_steps(&p, &inputs, |node, st| {
        for (k, &v) in g.nodes[node].outputs.iter().enumerate() {
            let bytes = p.plan.node_output(st, node, k).unwrap().to_vec();
            values.push((g.values[v].name.clone(), bytes));
        }
        None
    })
    .unwrap();
    let names: Vec<&str> = values.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(names, ["r", "p", "y"], "relu fused into the conv");
    let write = |values: &[(String, Vec<u8>)]| {
        let mut list = Vec::new();
        for (i, (name, bytes)) in values.iter().enumerate() {
            let file = format!("v_{i}.bin");
            std::fs::write(dir.join(&file), bytes).unwrap();
            list.push(serde_json::json!({"name": name, "dtype": "f32", "file": file}));
        }
        let doc = serde_json::json!({ "values": list });
        std::fs::write(dir.join("values.json"), doc.to_string()).unwrap();
        load_references(&dir).unwrap()
    };
    let refs = write(&values);
    assert_eq!(first_divergence(&p, &inputs, &refs, c.rtol, c.atol), Ok(3));
    // Perturb the pool's output: the search stops there, not at the transpose after it.
    let mut bad = values.clone();
    bad[1].1[8..12].copy_from_slice(&0.25f32.to_le_bytes());
    let refs = write(&bad);
    let msg = first_divergence(&p, &inputs, &refs, c.rtol, c.atol).expect_err("diverges");
    assert!(
        msg.contains("first diverging node: 'pool' (MaxPool") && msg.contains("element 2"),
        "{msg}"
    );
    // Perturb the fused conv's output: the message names the ONNX nodes it absorbed.
    let mut bad = values;
    bad[0].1[0..4].copy_from_slice(&1e6f32.to_le_bytes());
    let refs = write(&bad);
    let msg = first_divergence(&p, &inputs, &refs, c.rtol, c.atol).expect_err("diverges");
    assert!(msg.contains("'conv'") && msg.contains("relu"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

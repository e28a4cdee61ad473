//! Int8 conformance: quantised (QDQ) models against onnxruntime.
//!
//! Reads `$VNPU_QUANT_DIR/manifest.json` (written by `scripts/gen_quant_models.py`),
//! compiles each case through the real path (import, passes incl. the int8 lowering,
//! placement, FC partition, a round trip through the file format), runs its FC steps
//! and compares every output with the reference (the QDQ graph executed literally in
//! float by onnxruntime, optimisations off), in units of the output's quantisation
//! step:
//! * `op` cases: every element within one step;
//! * `network` cases: issue 16's goal is that vnpu's share of elements within one step
//!   is at least onnxruntime's own int8 execution's and vnpu's worst error (in steps) at
//!   most onnxruntime's (both measured by the generator in the same run); each case
//!   prints whether it meets it. How close onnxruntime's int8 gets depends on the CPU it
//!   runs on (its VNNI kernels round differently from its AVX2 ones: on a Zen 4 its
//!   MobileNetV2 is 34.7 % within one step, worst 10, against 10.9 %, worst 51 on an
//!   AVX2-only Zen 3), so the test asserts a regression floor that holds on both:
//!   vnpu's share at least onnxruntime's minus [`SHARE_SLACK`], its worst at most
//!   onnxruntime's plus [`WORST_SLACK`] steps.
//!
//! The cases of the resampling / broadcast lowerings also check the compiled graph: the
//! int8 op is there and the float op it replaces is not ([`LOWERED`]).
//!
//! Run: `/work/main/.venv/bin/python scripts/gen_quant_models.py build/quant` then
//! `VNPU_QUANT_DIR=build/quant cargo test --release --test quant_conformance -- --ignored --nocapture`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;
use vnpu::compile::{self, CompileOptions};
use vnpu::exec::{ModelPlan, PlanOptions};

/// Share (0.01 = one percentage point) by which vnpu's share within one step may trail onnxruntime's on
/// a whole network before the test fails (the goal itself is printed, not asserted).
const SHARE_SLACK: f64 = 0.01;
/// Steps by which vnpu's worst error may exceed onnxruntime's on a whole network.
const WORST_SLACK: f64 = 3.0;

/// One output of a case with its reference and onnxruntime's metrics.
struct Output {
    name: String,
    dtype: String,
    file: PathBuf,
    step: f64,
    ort_share: f64,
    ort_worst: f64,
}

struct Case {
    name: String,
    kind: String,
    model: PathBuf,
    inputs: Vec<PathBuf>,
    outputs: Vec<Output>,
}

fn load_cases(dir: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .expect("manifest.json (run scripts/gen_quant_models.py)");
    let root: Json = serde_json::from_str(&text).expect("manifest is JSON");
    let s = |v: &Json| v.as_str().unwrap_or("").to_string();
    root["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            name: s(&c["name"]),
            kind: s(&c["kind"]),
            model: dir.join(s(&c["model"])),
            inputs: c["inputs"]
                .as_array()
                .expect("inputs")
                .iter()
                .map(|t| dir.join(s(&t["file"])))
                .collect(),
            outputs: c["outputs"]
                .as_array()
                .expect("outputs")
                .iter()
                .map(|t| Output {
                    name: s(&t["name"]),
                    dtype: s(&t["dtype"]),
                    file: dir.join(s(&t["file"])),
                    step: t["step"].as_f64().expect("step"),
                    ort_share: t["ort_within_one_step"].as_f64().expect("ort share"),
                    ort_worst: t["ort_worst_steps"].as_f64().expect("ort worst"),
                })
                .collect(),
        })
        .collect()
}

/// Little-endian elements of `dtype` as f64.
fn values(dtype: &str, b: &[u8]) -> Vec<f64> {
    match dtype {
        "f32" => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        "i32" => b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        "u8" => b.iter().map(|&x| x as f64).collect(),
        "i8" => b.iter().map(|&x| x as i8 as f64).collect(),
        other => panic!("unexpected dtype {other}"),
    }
}

/// (share of elements within one step, worst error in steps).
fn metrics(got: &[f64], want: &[f64], step: f64) -> (f64, f64) {
    let mut within = 0usize;
    let mut worst = 0f64;
    for (&a, &b) in got.iter().zip(want) {
        let d = (a - b).abs() / step;
        let d = if d.is_nan() { f64::INFINITY } else { d };
        // One step measured through f32 values (outputs dequantised in f32) carries
        // the f32 rounding of both values: 1e-3 step absorbs that and nothing more.
        if d <= 1.0 + 1e-3 {
            within += 1;
        }
        worst = worst.max(d);
    }
    (within as f64 / want.len().max(1) as f64, worst)
}

/// What one case measured: per output (name, vnpu share, vnpu worst).
type Measured = Vec<(String, f64, f64)>;

/// Cases (by name prefix) whose compiled graph must hold the int8 ops listed and none of
/// the float ops listed (the pattern ran as DQ → f32 op → Q otherwise).
const LOWERED: &[(&str, &[&str], &[&str])] = &[
    ("globalavgpool", &["QGlobalAvgPool"], &["GlobalAveragePool"]),
    ("averagepool", &["QAvgPool"], &["AveragePool"]),
    ("resize_linear", &["QResize"], &["Resize"]),
    ("add_bcast", &["QAdd"], &["Add"]),
    ("mul_bcast", &["QMul"], &["Mul"]),
    ("mul_const", &["QMul"], &["Mul"]),
    (
        "se_block",
        &["QGlobalAvgPool", "QLut", "QMul", "QAdd"],
        &["GlobalAveragePool", "Sigmoid", "Mul", "Add"],
    ),
    // x * Sigmoid(x): the QLut and the QMul of the same input fuse into one QLut.
    ("silu", &["QLut"], &["Sigmoid", "Mul", "QMul"]),
];

/// Checks [`LOWERED`] for case `name` with compiled op names `ops`.
fn check_lowered(name: &str, ops: &[&str]) -> Result<(), String> {
    for (prefix, want, gone) in LOWERED {
        if !name.starts_with(prefix) {
            continue;
        }
        for w in *want {
            if !ops.contains(w) {
                return Err(format!("no {w} in the compiled graph: {ops:?}"));
            }
        }
        for f in *gone {
            if ops.contains(f) {
                return Err(format!("{f} left in float: {ops:?}"));
            }
        }
    }
    Ok(())
}

/// Compiles (with the file round trip) and runs a case; counts the int8 nodes.
fn run_case(c: &Case) -> Result<(Measured, usize, usize), String> {
    let compiled = compile::compile_onnx_file(&c.model, &CompileOptions::default())
        .map_err(|e| format!("compile: {e}"))?;
    let bytes = vnpu::format::write_models(std::slice::from_ref(&compiled))
        .map_err(|e| format!("write: {e}"))?;
    let model = vnpu::format::read_models(&bytes, &c.name)
        .map_err(|e| format!("read: {e}"))?
        .remove(0);
    let int8 = model
        .graph
        .nodes
        .iter()
        .filter(|n| n.op.name().starts_with("Q") && n.op.name() != "QuantizeLinear")
        .count();
    let ops: Vec<&str> = model.graph.nodes.iter().map(|n| n.op.name()).collect();
    check_lowered(&c.name, &ops)?;
    let plan = ModelPlan::new(Arc::new(model.graph.clone()), &PlanOptions::default())
        .map_err(|e| format!("plan: {e}"))?;
    let mut st = plan.new_state();
    for (i, f) in c.inputs.iter().enumerate() {
        let data = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
        plan.set_input(&mut st, i, &data)
            .map_err(|e| format!("input {i}: {e}"))?;
    }
    for seg in &model.segments {
        for fc in &seg.fcs {
            for s in &fc.steps {
                let tile = s.exec_tile();
                plan.run_node(&mut st, s.node, tile).map_err(|e| {
                    let n = &model.graph.nodes[s.node];
                    format!("node '{}' ({}): {e}", n.name, n.op.name())
                })?;
                // `VNPU_QUANT_DUMP_CASE=<case>` (with `VNPU_QUANT_DUMP=DIR`) also keeps
                // every node output of that case, by value name.
                if let (Some(d), Ok(case)) = (
                    std::env::var_os("VNPU_QUANT_DUMP"),
                    std::env::var("VNPU_QUANT_DUMP_CASE"),
                ) {
                    if case == c.name && tile.index + 1 == tile.count {
                        let n = &model.graph.nodes[s.node];
                        for (k, &v) in n.outputs.iter().enumerate() {
                            let name = model.graph.values[v].name.replace('/', "_");
                            if let Some(b) = plan.node_output(&st, s.node, k) {
                                let _ = std::fs::write(Path::new(&d).join(name), b);
                            }
                        }
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for (i, o) in c.outputs.iter().enumerate() {
        let want = std::fs::read(&o.file).map_err(|e| format!("{}: {e}", o.file.display()))?;
        let mut got = vec![0u8; plan.output_len(i)];
        plan.read_output(&st, i, &mut got)
            .map_err(|e| format!("output '{}': {e}", o.name))?;
        // `VNPU_QUANT_DUMP=DIR` keeps vnpu's outputs (`DIR/<case>.out<i>.bin`) for study.
        if let Some(d) = std::env::var_os("VNPU_QUANT_DUMP") {
            let f = Path::new(&d).join(format!("{}.out{i}.bin", c.name));
            std::fs::write(&f, &got).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        if got.len() != want.len() {
            return Err(format!(
                "output '{}': {} bytes, reference {}",
                o.name,
                got.len(),
                want.len()
            ));
        }
        let (share, worst) = metrics(&values(&o.dtype, &got), &values(&o.dtype, &want), o.step);
        out.push((o.name.clone(), share, worst));
    }
    Ok((out, int8, model.graph.nodes.len()))
}

#[test]
fn metrics_count_steps() {
    let (share, worst) = metrics(&[0.0, 1.0, 2.5], &[0.0, 0.5, 0.0], 0.5);
    assert!((share - 2.0 / 3.0).abs() < 1e-12);
    assert!((worst - 5.0).abs() < 1e-12);
    assert_eq!(values("i8", &[0xff, 1]), vec![-1.0, 1.0]);
    assert!(check_lowered(
        "se_block",
        &["QConv", "QGlobalAvgPool", "QLut", "QMul", "QAdd"]
    )
    .is_ok());
    assert!(check_lowered("globalavgpool_u8", &["QConv", "GlobalAveragePool"]).is_err());
    assert!(check_lowered("conv", &["Conv"]).is_ok());
}

#[test]
#[ignore = "needs generated data: scripts/gen_quant_models.py OUT, then VNPU_QUANT_DIR=OUT"]
fn quantised_models_match_onnxruntime() {
    let dir = PathBuf::from(
        std::env::var("VNPU_QUANT_DIR")
            .expect("set VNPU_QUANT_DIR (scripts/gen_quant_models.py OUT)"),
    );
    let cases = load_cases(&dir);
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    println!(
        "{:<16} {:<10} {:>6} {:>10} {:>8} {:>10} {:>8}",
        "case", "output", "int8", "vnpu %", "worst", "ort %", "worst"
    );
    for c in &cases {
        let (measured, int8, nodes) = match run_case(c) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: {e}", c.name));
                continue;
            }
        };
        for (o, (name, share, worst)) in c.outputs.iter().zip(&measured) {
            println!(
                "{:<16} {:<10} {:>6} {:>10.3} {:>8.1} {:>10.3} {:>8.1}",
                c.name,
                name.chars().take(10).collect::<String>(),
                format!("{int8}/{nodes}"),
                share * 100.0,
                worst,
                o.ort_share * 100.0,
                o.ort_worst
            );
            let ok = if c.kind == "op" {
                *share >= 1.0
            } else {
                let goal = *share >= o.ort_share && *worst <= o.ort_worst;
                println!(
                    "  {}: issue 16 goal (at least as close as onnxruntime on both): {}",
                    c.name,
                    if goal { "met" } else { "NOT met" }
                );
                *share >= o.ort_share - SHARE_SLACK && *worst <= o.ort_worst + WORST_SLACK
            };
            if !ok {
                failures.push(format!(
                    "{} output '{name}': vnpu {:.3}% within one step, worst {worst:.1} steps; \
                     onnxruntime {:.3}%, worst {:.1}",
                    c.name,
                    share * 100.0,
                    o.ort_share * 100.0,
                    o.ort_worst
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

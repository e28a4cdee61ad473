//! Int8 vs f32 time of the ResNet-18: the QDQ model of `scripts/gen_quant_models.py`
//! against the f32 `resnet18.onnx` of `scripts/gen_models.py`, one thread, all nodes in
//! order, best of RUNS (indicative only; never a pass/fail criterion).
//!
//! `cargo run --release --example int8_vs_f32 -- QUANT_DIR MODELS_DIR [RUNS]`

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vnpu::compile::{self, CompileOptions};
use vnpu::exec::{ModelPlan, PlanOptions};

/// Best of `runs` whole-model runs (ms) of a compiled model, one thread, all nodes in
/// order (zeroed inputs).
fn best_ms(path: &Path, runs: usize) -> Result<f64, String> {
    let m = compile::compile_onnx_file(path, &CompileOptions::default())
        .map_err(|e| format!("compile {}: {e}", path.display()))?;
    let plan = ModelPlan::new(Arc::new(m.graph.clone()), &PlanOptions::default())
        .map_err(|e| format!("plan: {e}"))?;
    let mut st = plan.new_state();
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t0 = std::time::Instant::now();
        plan.run_all(&mut st).map_err(|e| format!("run: {e}"))?;
        best = best.min(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: int8_vs_f32 QUANT_DIR MODELS_DIR [RUNS]";
    let q = PathBuf::from(args.next().expect(usage)).join("resnet18/model.onnx");
    let f = PathBuf::from(args.next().expect(usage)).join("resnet18.onnx");
    let runs: usize = args.next().map_or(5, |s| s.parse().expect("RUNS"));
    let (tq, tf) = (
        best_ms(&q, runs).expect("int8"),
        best_ms(&f, runs).expect("f32"),
    );
    println!(
        "resnet18 1 thread, best of {runs}: int8 {tq:.1} ms, f32 {tf:.1} ms, int8/f32 = {:.2}",
        tq / tf
    );
}

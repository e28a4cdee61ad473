//! Inputs the fuzz targets (`fuzz/`) found crashing, minimised into regression tests:
//! each must now give a clean error (or a result), never a panic.

use vnpu::compile::{compile_graph_within, CompileOptions, MemoryBudget};
use vnpu::ir::DType;
use vnpu::onnx::builder::{attr, ModelBuilder};
use vnpu::onnx::{import_model, ImportOptions};

/// Imports and compiles `m` under the fuzz target's 16 MiB budget.
fn compile(m: ModelBuilder) -> vnpu::Result<vnpu::compile::CompiledModel> {
    let g = import_model(&m.to_bytes(), &ImportOptions::default())?;
    compile_graph_within(g, &CompileOptions::default(), &MemoryBudget::new(16 << 20))
}

/// compile_model: ArgMax over an axis of length 0 indexed its empty input in the kernel
/// (run by the cost model at compile).
#[test]
fn argmax_over_an_empty_axis_is_refused() {
    for op in ["ArgMax", "ArgMin"] {
        let m = ModelBuilder::new("argmax_empty", 17)
            .input("x", DType::F32, &[3, 1000, 0])
            .node(
                op,
                "a",
                &["x"],
                &["y"],
                vec![attr::int("axis", -1), attr::int("keepdims", 0)],
            )
            .output("y");
        let e = compile(m).expect_err("no index to pick");
        assert!(e.to_string().contains("empty"), "{e}");
    }
}

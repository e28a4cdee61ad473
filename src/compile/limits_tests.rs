//! Hostile sizes: models whose declared shapes or constant arguments ask for more memory
//! than the budget are refused at compile with `HB_DNN_INVALID_MODEL`, before anything
//! is allocated; out-of-range constant Gather indices are refused the same way; a long
//! chain compiles.

use super::*;
use crate::error::codes::HB_DNN_INVALID_MODEL;
use crate::ir::Tensor;
use crate::onnx::builder::{attr, ModelBuilder};
use crate::onnx::{import_model, ImportOptions};

const GIB: u64 = 1 << 30;

/// Resident set size of this process in bytes (`/proc/self/statm`), if readable.
fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn import(m: ModelBuilder) -> Graph {
    import_model(&m.to_bytes(), &ImportOptions::default()).expect("imports")
}

/// Compiles `m` with a budget of `budget` bytes and returns the error it must give.
fn refused(m: ModelBuilder, budget: u64) -> Error {
    let e = compile_graph_within(
        import(m),
        &CompileOptions::default(),
        &MemoryBudget::new(budget),
    )
    .expect_err("over budget");
    assert_eq!(e.code(), HB_DNN_INVALID_MODEL, "{e}");
    if let Some(rss) = rss_bytes() {
        assert!(
            rss < 2 * GIB,
            "resident {rss} bytes after a refused compile"
        );
    }
    e
}

/// `x` of `shape` through Relu.
fn relu_of(shape: &[usize]) -> ModelBuilder {
    ModelBuilder::new("huge", 17)
        .input("x", DType::F32, shape)
        .node("Relu", "relu", &["x"], &["y"], vec![])
        .output("y")
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_i64(vec![v.len()], v.to_vec())
}

#[test]
fn batch_of_a_million_is_refused_by_the_default_budget() {
    let m = relu_of(&[1_000_000, 3, 224, 224]);
    let e = compile_onnx_bytes(&m.to_bytes(), None, "huge", &CompileOptions::default())
        .expect_err("602 GB of input");
    assert_eq!(e.code(), HB_DNN_INVALID_MODEL, "{e}");
    let s = e.to_string();
    assert!(
        s.contains("'x'") && s.contains("[1000000, 3, 224, 224]") && s.contains("memory budget"),
        "{s}"
    );
}

#[test]
fn a_2_pow_31_dim_is_refused() {
    let e = refused(relu_of(&[(1 << 31) - 1, 1024]), 4 * GIB);
    assert!(e.to_string().contains("[2147483647, 1024]"), "{e}");
    // A byte count that overflows is refused, never wrapped.
    let e = refused(relu_of(&[1 << 31, 1 << 31]), 4 * GIB);
    assert!(e.to_string().contains("[2147483648, 2147483648]"), "{e}");
}

#[test]
fn a_65536_square_image_is_refused() {
    let e = refused(relu_of(&[1, 3, 65536, 65536]), 4 * GIB);
    let s = e.to_string();
    assert!(
        s.contains("[1, 3, 65536, 65536]") && s.contains(&(4 * GIB).to_string()),
        "{s}"
    );
}

#[test]
fn huge_pad_range_resize_tile_arguments_are_refused() {
    let pad = ModelBuilder::new("pad", 17)
        .input("x", DType::F32, &[1, 3, 8, 8])
        .initializer(
            "p",
            &i64s(&[0, 0, 1 << 30, 1 << 30, 0, 0, 1 << 30, 1 << 30]),
        )
        .node("Pad", "pad", &["x", "p"], &["y"], vec![])
        .output("y");
    assert!(refused(pad, GIB).to_string().contains("'y'"));
    let scalar = |v: i64| Tensor::from_i64(vec![], vec![v]);
    let range = ModelBuilder::new("range", 17)
        .initializer("a", &scalar(0))
        .initializer("b", &scalar(1 << 40))
        .initializer("d", &scalar(1))
        .node("Range", "range", &["a", "b", "d"], &["y"], vec![])
        .output("y");
    assert!(refused(range, GIB).to_string().contains("[1099511627776]"));
    let resize = ModelBuilder::new("resize", 17)
        .input("x", DType::F32, &[1, 3, 64, 64])
        .initializer(
            "s",
            &Tensor::from_f32(vec![4], vec![1.0, 1.0, 100_000.0, 100_000.0]),
        )
        .node("Resize", "resize", &["x", "", "s"], &["y"], vec![])
        .output("y");
    assert!(refused(resize, GIB).to_string().contains("6400000"));
    let tile = ModelBuilder::new("tile", 17)
        .input("x", DType::F32, &[2, 3])
        .initializer("r", &i64s(&[1 << 20, 1 << 20]))
        .node("Tile", "tile", &["x", "r"], &["y"], vec![])
        .output("y");
    assert!(refused(tile, GIB).to_string().contains("memory budget"));
}

#[test]
fn expand_of_constants_is_refused_before_folding() {
    let m = ModelBuilder::new("expand", 17)
        .input("x", DType::F32, &[4])
        .initializer("c", &Tensor::from_f32(vec![1], vec![1.0]))
        .initializer("s", &i64s(&[1 << 20, 1 << 10, 4]))
        .node("Expand", "expand", &["c", "s"], &["e"], vec![])
        .node("Add", "add", &["x", "e"], &["y"], vec![])
        .output("y");
    let e = refused(m, GIB);
    assert!(e.to_string().contains("[1048576, 1024, 4]"), "{e}");
}

#[test]
fn the_planned_arena_is_checked_before_calibration() {
    // Every tensor fits (4 MiB) but input plus output do not fit in 6 MiB.
    let e = refused(relu_of(&[1024, 1024]), 6 << 20);
    let s = e.to_string();
    assert!(
        s.contains("planned arena") && s.contains("[1024, 1024]"),
        "{s}"
    );
    compile_graph_within(
        import(relu_of(&[1024, 1024])),
        &CompileOptions::default(),
        &MemoryBudget::new(64 << 20),
    )
    .expect("fits in 64 MiB");
}

#[test]
fn out_of_range_constant_gather_index_is_an_invalid_model() {
    let folded = ModelBuilder::new("gather", 17)
        .input("x", DType::F32, &[1])
        .initializer("d", &Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]))
        .initializer("i", &i64s(&[1, 7]))
        .node(
            "Gather",
            "gather",
            &["d", "i"],
            &["g"],
            vec![attr::int("axis", 0)],
        )
        .node("Add", "add", &["x", "g"], &["y"], vec![])
        .output("y");
    let e = refused(folded, 4 * GIB);
    assert!(e.to_string().contains("index 7 is out of range"), "{e}");
    let runtime = ModelBuilder::new("gather", 17)
        .input("x", DType::F32, &[3, 4])
        .initializer("i", &i64s(&[-4]))
        .node(
            "Gather",
            "gather",
            &["x", "i"],
            &["y"],
            vec![attr::int("axis", 0)],
        )
        .output("y");
    let e = refused(runtime, 4 * GIB);
    assert!(e.to_string().contains("index -4 is out of range"), "{e}");
}

#[test]
fn a_100k_node_chain_compiles() {
    // Alternating Relu / Add of a constant on a small tensor.
    let n = 100_000;
    let mut m = ModelBuilder::new("chain", 17)
        .input("x", DType::F32, &[1, 8])
        .initializer("c", &Tensor::from_f32(vec![1], vec![0.5]));
    let mut prev = "x".to_string();
    for i in 0..n {
        let out = format!("v{i}");
        m = if i % 2 == 0 {
            m.node("Relu", &format!("relu{i}"), &[&prev], &[&out], vec![])
        } else {
            m.node("Add", &format!("add{i}"), &[&prev, "c"], &[&out], vec![])
        };
        prev = out;
    }
    let m = m.output(&prev);
    let t0 = std::time::Instant::now();
    let cm = compile_onnx_bytes(&m.to_bytes(), None, "chain", &CompileOptions::default())
        .expect("compiles");
    eprintln!("100k chain compiled in {:.2?}", t0.elapsed());
    let x: Vec<f32> = (0..8).map(|i| i as f32 - 4.0).collect();
    let want: Vec<f32> = x
        .iter()
        .map(|v| v.max(0.0) + 0.5 * (n / 2) as f32)
        .collect();
    let got = crate::compile::testutil::run_graph(&cm.graph, &[x]);
    assert_eq!(got, vec![want]);
}

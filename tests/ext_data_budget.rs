//! One knob bounds a model's memory: the memory budget (`VNPU_MEMORY_BUDGET_MB`) is also
//! the default limit on the external-data bytes an ONNX import reads, so a tensor over
//! the budget is refused before it is read, by the importer and by the compiler alike.
//!
//! The budget is a process-wide setting, so everything that changes it runs in one test
//! (this file is its own test binary).

use std::fs::File;
use std::path::{Path, PathBuf};

use prost::Message;
use vnpu::compile::budget::BUDGET_ENV;
use vnpu::compile::{compile_onnx_file, CompileOptions, MemoryBudget};
use vnpu::ir::DType;
use vnpu::onnx::builder::ModelBuilder;
use vnpu::onnx::proto::{
    data_type, ModelProto, StringStringEntryProto, TensorProto, DATA_LOCATION_EXTERNAL,
};
use vnpu::onnx::{import_file, ImportOptions};
use vnpu::Error;

const MIB: u64 = 1 << 20;

/// `y = x * w`, `x: f32[n]`, `w` read from external data file `w.bin` (`n` floats).
fn mul_by_external(n: usize) -> ModelProto {
    let mut m = ModelBuilder::new("ext", 13)
        .input("x", DType::F32, &[n])
        .node("Mul", "mul", &["x", "w"], &["y"], vec![])
        .output("y")
        .build();
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    m.graph
        .as_mut()
        .expect("graph")
        .initializer
        .push(TensorProto {
            name: "w".into(),
            dims: vec![n as i64],
            data_type: data_type::FLOAT,
            data_location: DATA_LOCATION_EXTERNAL,
            external_data: vec![
                entry("location", "w.bin".into()),
                entry("offset", "0".into()),
                entry("length", (n * 4).to_string()),
            ],
            ..Default::default()
        });
    m
}

/// A folder holding `m.onnx` and a sparse `w.bin` for a model of `n` external floats.
fn model_dir(tag: &str, n: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnpu-ext-budget-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    File::create(dir.join("w.bin"))
        .and_then(|f| f.set_len((n * 4) as u64))
        .expect("sparse w.bin");
    std::fs::write(dir.join("m.onnx"), mul_by_external(n).encode_to_vec()).expect("write");
    dir
}

fn set_budget_mb(v: Option<&str>) {
    vnpu::config::set(BUDGET_ENV, v).expect("budget setting");
}

fn over_limit(e: &Error) -> bool {
    e.to_string().contains("external-data limit")
}

#[test]
fn the_memory_budget_bounds_external_data() {
    let small = model_dir("small", 64 * 1024); // 256 KiB of weights
    let large = model_dir("large", 512 * 1024); // 2 MiB of weights
    let onnx = |d: &Path| d.join("m.onnx");

    set_budget_mb(Some("1"));
    assert_eq!(ImportOptions::default().max_external_bytes, MIB);
    let e = import_file(&onnx(&large), &ImportOptions::default()).expect_err("2 MiB > 1 MiB");
    assert!(over_limit(&e), "{e}");
    let e = compile_onnx_file(&onnx(&large), &CompileOptions::default()).expect_err("compile");
    assert!(over_limit(&e), "{e}");
    assert_eq!(e.code(), vnpu::error::codes::HB_DNN_INVALID_MODEL, "{e}");
    import_file(&onnx(&small), &ImportOptions::default()).expect("256 KiB fits in 1 MiB");
    compile_onnx_file(&onnx(&small), &CompileOptions::default()).expect("and compiles");

    set_budget_mb(Some("3"));
    assert_eq!(ImportOptions::default().max_external_bytes, 3 * MIB);
    import_file(&onnx(&large), &ImportOptions::default()).expect("2 MiB fits in 3 MiB");

    // An explicit limit still wins over the budget.
    let tight = ImportOptions {
        max_external_bytes: 1024,
        ..Default::default()
    };
    assert!(over_limit(
        &import_file(&onnx(&small), &tight).expect_err("1 KiB limit")
    ));

    // Unset: the machine default (half the physical memory).
    set_budget_mb(None);
    assert_eq!(
        ImportOptions::default().max_external_bytes,
        MemoryBudget::machine_default().bytes
    );
    assert_eq!(
        MemoryBudget::from_env_or_default(),
        MemoryBudget::machine_default()
    );
    for d in [small, large] {
        let _ = std::fs::remove_dir_all(d);
    }
}

//! `vnpu compile` refuses to pack two models of one name (issue 11): such a file could
//! not be loaded (`hbDNNInitializeFromFiles` refuses it), so it is not written.

use std::process::Command;

use vnpu::ir::DType;
use vnpu::onnx::builder::ModelBuilder;

#[test]
fn packing_two_models_of_one_name_is_refused_before_writing() {
    let dir = std::env::temp_dir().join(format!("vnpu-cli-pack-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).expect("mkdir");
    std::fs::create_dir_all(dir.join("b")).expect("mkdir");
    let m = ModelBuilder::new("relu", 17)
        .input("x", DType::F32, &[1, 4])
        .node("Relu", "r", &["x"], &["y"], vec![])
        .output("y")
        .to_bytes();
    // Two folders, one file name: both models are named 'model'.
    std::fs::write(dir.join("a/model.onnx"), &m).expect("write");
    std::fs::write(dir.join("b/model.onnx"), &m).expect("write");
    let out = dir.join("pack.bin");
    let r = Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .arg("compile")
        .arg(dir.join("a/model.onnx"))
        .arg(dir.join("b/model.onnx"))
        .arg("-o")
        .arg(&out)
        .env("VNPU_CACHE_DIR", dir.join("cache"))
        .output()
        .expect("run vnpu");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(err.contains("second model named 'model'"), "{err}");
    assert!(!out.exists(), "an unloadable pack was written");
    let _ = std::fs::remove_dir_all(&dir);
}

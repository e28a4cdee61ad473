//! Hostile and unusual ONNX files (issue 11): devices, FIFOs and directories named as
//! the model or its external data, huge sparse files, external data escaping the model
//! folder through a symlink, and exporters' dynamic-dim spellings (`dim_value: -1`,
//! empty `dim_param`).
//!
//! Calls that could block or read without bound run under a watchdog: a regression
//! fails the test (after a generous limit) instead of hanging the suite.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use vnpu::ir::{DType, Graph, Tensor};
use vnpu::onnx::builder::{value_info, ModelBuilder};
use vnpu::onnx::proto::{
    data_type, tensor_shape_proto::Dimension, ModelProto, StringStringEntryProto, TensorProto,
    DATA_LOCATION_EXTERNAL,
};
use vnpu::onnx::{import_file, import_model, read_model_file, ImportOptions, MAX_ONNX_FILE_BYTES};
use vnpu::{Error, Result};

/// How long a call may take before the watchdog calls it hung (far above the
/// milliseconds these calls take; only a blocked or unbounded call reaches it).
const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `f` on its own thread; fails the test if it has not returned within
/// [`WATCHDOG`] (the stuck thread is left behind; the test binary exits anyway).
fn with_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer after {WATCHDOG:?} (blocked or reading without bound)"),
    }
}

/// A fresh, empty scratch folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnpu-onnx-files-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// `y = x * w` with `x: f32[n]` and `w` an initializer read from external data at
/// `location` (offset 0, `n` floats).
fn mul_by_external(location: &str, n: usize) -> ModelProto {
    let mut m = ModelBuilder::new("ext", 13)
        .input("x", DType::F32, &[n])
        .node("Mul", "mul", &["x", "w"], &["y"], vec![])
        .output("y")
        .build();
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    let w = TensorProto {
        name: "w".into(),
        dims: vec![n as i64],
        data_type: data_type::FLOAT,
        data_location: DATA_LOCATION_EXTERNAL,
        external_data: vec![
            entry("location", location.into()),
            entry("offset", "0".into()),
            entry("length", (n * 4).to_string()),
        ],
        ..Default::default()
    };
    m.graph.as_mut().expect("graph").initializer.push(w);
    m
}

/// Makes a FIFO at `path` (with the `mkfifo` tool: no unsafe code in tests).
fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {} failed", path.display());
}

fn write_model(path: &Path, m: &ModelProto) {
    use prost::Message;
    std::fs::write(path, m.encode_to_vec()).expect("write model");
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn import_in_thread(path: PathBuf, opts: ImportOptions) -> Result<Graph> {
    let what = format!("import_file({})", path.display());
    with_watchdog(&what, move || import_file(&path, &opts))
}

#[test]
fn external_data_inside_the_folder_loads_also_through_an_inner_symlink() {
    let dir = scratch("inner-link");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir data");
    std::fs::write(dir.join("data/w.bin"), floats(&[1.0, 2.0])).expect("write weights");
    std::os::unix::fs::symlink("data/w.bin", dir.join("w.bin")).expect("symlink");
    for loc in ["data/w.bin", "w.bin"] {
        let path = dir.join("m.onnx");
        write_model(&path, &mul_by_external(loc, 2));
        let g = import_in_thread(path, ImportOptions::default()).expect("imports");
        let w = g.value(g.nodes[0].inputs[1].expect("w"));
        assert_eq!(
            w.konst.as_ref().map(|k| k.to_f32_vec()),
            Some(vec![1.0, 2.0])
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn external_data_symlinked_out_of_the_folder_is_refused() {
    let dir = scratch("escape");
    let outside = scratch("escape-outside");
    // A secret outside the model folder that happens to be a valid weight blob.
    std::fs::write(outside.join("secret.bin"), floats(&[7.0, 8.0])).expect("write secret");
    std::os::unix::fs::symlink(outside.join("secret.bin"), dir.join("w.bin")).expect("symlink");
    // Also a symlinked folder pointing out.
    std::os::unix::fs::symlink(&outside, dir.join("sub")).expect("symlink dir");
    for loc in ["w.bin", "sub/secret.bin"] {
        let path = dir.join("m.onnx");
        write_model(&path, &mul_by_external(loc, 2));
        let e = import_in_thread(path, ImportOptions::default()).expect_err("escapes");
        assert!(matches!(e, Error::OnnxFormat { .. }), "{loc}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("outside the model folder"), "{loc}: {msg}");
    }
    // A symlink to /etc/passwd, the case of the issue.
    let _ = std::fs::remove_file(dir.join("w.bin"));
    std::os::unix::fs::symlink("/etc/passwd", dir.join("w.bin")).expect("symlink");
    let path = dir.join("m.onnx");
    write_model(&path, &mul_by_external("w.bin", 2));
    let e = import_in_thread(path, ImportOptions::default()).expect_err("escapes");
    assert!(e.to_string().contains("outside the model folder"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn a_fifo_as_external_data_is_refused_without_blocking() {
    let dir = scratch("fifo");
    let fifo = dir.join("w.bin");
    mkfifo(&fifo);
    let path = dir.join("m.onnx");
    write_model(&path, &mul_by_external("w.bin", 2));
    let e = import_in_thread(path, ImportOptions::default()).expect_err("fifo");
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(e.to_string().contains("FIFO"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn devices_fifos_and_folders_as_the_model_file_are_refused() {
    let dir = scratch("devices");
    let fifo = dir.join("m.onnx");
    mkfifo(&fifo);
    let cases = [
        (PathBuf::from("/dev/zero"), "character device"),
        (PathBuf::from("/dev/urandom"), "character device"),
        (fifo, "FIFO"),
        (dir.clone(), "directory"),
    ];
    for (path, kind) in cases {
        let e = import_in_thread(path.clone(), ImportOptions::default()).expect_err("refused");
        assert!(matches!(&e, Error::Io { path: p, .. } if *p == path), "{e}");
        assert!(e.to_string().contains(kind), "{}: {e}", path.display());
        let p2 = path.clone();
        let e = with_watchdog("read_model_file", move || {
            read_model_file(&p2, MAX_ONNX_FILE_BYTES)
        })
        .expect_err("refused");
        assert!(e.to_string().contains(kind), "{}: {e}", path.display());
        // The compiler's file entry point (`vnpu compile`, hbDNN on an .onnx) too.
        let p3 = path.clone();
        let e = with_watchdog("compile_onnx_file", move || {
            vnpu::compile::compile_onnx_file(&p3, &vnpu::compile::CompileOptions::default())
        })
        .expect_err("refused");
        assert!(e.to_string().contains(kind), "{}: {e}", path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Peak resident memory of this process in KiB (`VmHWM`), when /proc tells.
fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_sparse_4_gib_model_file_is_refused_before_reading() {
    let dir = scratch("sparse-model");
    let path = dir.join("huge.onnx");
    {
        use prost::Message;
        // A valid model at the start, then a hole up to 4 GiB.
        let f = File::create(&path).expect("create");
        let bytes = mul_by_external("w.bin", 2).encode_to_vec();
        std::io::Write::write_all(&mut &f, &bytes).expect("header");
        f.set_len(4 << 30).expect("sparse length");
    }
    let e = import_in_thread(path.clone(), ImportOptions::default()).expect_err("too large");
    assert!(matches!(e, Error::ModelFormat { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("huge.onnx") && msg.contains("4294967296"),
        "{msg}"
    );
    assert_eq!(e.code(), vnpu::error::codes::HB_DNN_INVALID_MODEL);
    if let Some(kib) = peak_rss_kib() {
        assert!(
            kib < 1 << 20,
            "peak resident memory {kib} KiB: the file was read"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn external_data_over_the_limit_is_refused_before_reading() {
    let dir = scratch("sparse-ext");
    // A 2 GiB (sparse) external tensor of 2^29 floats.
    let n: usize = 1 << 29;
    let f = File::create(dir.join("w.bin")).expect("create");
    f.set_len((n * 4) as u64).expect("sparse length");
    drop(f);
    let path = dir.join("m.onnx");
    write_model(&path, &mul_by_external("w.bin", n));
    let opts = ImportOptions {
        max_external_bytes: 1 << 30,
        ..Default::default()
    };
    let e = import_in_thread(path, opts).expect_err("over the limit");
    assert!(matches!(e, Error::OnnxFormat { .. }), "{e}");
    assert!(e.to_string().contains("external-data limit"), "{e}");
    if let Some(kib) = peak_rss_kib() {
        assert!(
            kib < 1 << 20,
            "peak resident memory {kib} KiB: the tensor was read"
        );
    }
    // The limit is a total over the model's tensors: two 8-byte tensors and a 12-byte
    // limit fail on the second.
    std::fs::write(dir.join("a.bin"), floats(&[1.0, 2.0])).expect("write a");
    let mut m = mul_by_external("a.bin", 2);
    let g = m.graph.as_mut().expect("graph");
    let mut second = g.initializer[0].clone();
    second.name = "w2".into();
    g.initializer.push(second);
    write_model(&dir.join("two.onnx"), &m);
    let opts = ImportOptions {
        max_external_bytes: 12,
        ..Default::default()
    };
    let e = import_in_thread(dir.join("two.onnx"), opts).expect_err("sum over the limit");
    assert!(e.to_string().contains("'w2'"), "{e}");
    let opts = ImportOptions {
        max_external_bytes: 16,
        ..Default::default()
    };
    import_in_thread(dir.join("two.onnx"), opts).expect("both fit");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `y = relu(x)` whose input `x` declares `dims` as written (value and/or param).
fn relu_with_input_dims(dims: Vec<Dimension>) -> Vec<u8> {
    let mut m = ModelBuilder::new("paddle", 13)
        .node("Relu", "r", &["x"], &["y"], vec![])
        .output("y")
        .build();
    let mut x = value_info("x", Some(DType::F32), Some(&[][..]));
    if let Some(shape) = x
        .r#type
        .as_mut()
        .and_then(|t| t.tensor_type.as_mut())
        .and_then(|t| t.shape.as_mut())
    {
        shape.dim = dims;
    }
    m.graph.as_mut().expect("graph").input.push(x);
    use prost::Message;
    m.encode_to_vec()
}

#[test]
fn exporters_dynamic_dims_are_fixed_by_the_input_shape() {
    let value = |v: i64| Dimension {
        dim_value: Some(v),
        ..Default::default()
    };
    let empty_param = Dimension {
        dim_param: Some(String::new()),
        ..Default::default()
    };
    // Paddle: -1 for every dynamic dim; some exporters: an empty dim_param.
    let bytes = relu_with_input_dims(vec![value(-1), value(3), value(-1), empty_param]);
    let mut opts = ImportOptions::default();
    opts.input_shapes.insert("x".into(), vec![2, 3, 5, 7]);
    let g = import_model(&bytes, &opts).expect("fixed by the input shape");
    assert_eq!(g.shape(g.inputs[0]), Some(&[2, 3, 5, 7][..]));
    assert_eq!(g.shape(g.outputs[0]), Some(&[2, 3, 5, 7][..]));
    assert_eq!(
        g.value(g.inputs[0]).declared,
        Some(vec![None, Some(3), None, None])
    );
    // A static dim of the model still has to agree.
    opts.input_shapes.insert("x".into(), vec![2, 4, 5, 7]);
    let e = import_model(&bytes, &opts).expect_err("static dim disagrees");
    assert!(matches!(e, Error::CompileOption { .. }), "{e}");
    // Without an input shape: the usual dynamic-dim error (the batch dim defaults to 1).
    let e = import_model(&bytes, &ImportOptions::default()).expect_err("dynamic");
    let msg = e.to_string();
    assert!(
        msg.contains("'x'") && msg.contains("dim 2") && msg.contains("dynamic"),
        "{msg}"
    );
    assert!(!msg.contains("negative"), "{msg}");
    // Other negative values are still malformed.
    let bytes = relu_with_input_dims(vec![value(-2), value(3)]);
    let e = import_model(&bytes, &opts).expect_err("negative");
    assert!(e.to_string().contains("negative dimension"), "{e}");
}

#[test]
fn a_regular_model_file_still_imports_and_its_size_is_bounded() {
    let dir = scratch("regular");
    let path = dir.join("tiny.onnx");
    let bytes = ModelBuilder::new("tiny", 13)
        .input("x", DType::F32, &[2])
        .initializer("k", &Tensor::from_f32(vec![2], vec![1.0, 2.0]))
        .node("Add", "add", &["x", "k"], &["y"], vec![])
        .output("y")
        .to_bytes();
    std::fs::write(&path, &bytes).expect("write");
    let g = import_file(&path, &ImportOptions::default()).expect("imports");
    assert_eq!(g.name, "tiny");
    assert_eq!(
        read_model_file(&path, bytes.len() as u64).expect("fits"),
        bytes
    );
    let e = read_model_file(&path, bytes.len() as u64 - 1).expect_err("one byte over");
    assert!(matches!(e, Error::ModelFormat { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

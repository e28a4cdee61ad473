//! Shared support of the service-mode tests: temporary folders, the committed tiny
//! classifier compiled to a file, a daemon served by a thread of the test process, child
//! processes that re-run this test binary as a client, and the in-process reference run.
//!
//! Waits on wall time here are deadlock guards only, never timing assertions.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::compile::{compile_onnx_bytes, CompileOptions, InputParams, InputType};
use vnpu::ir::ImageFormat;
use vnpu::runtime::{CtrlParams, ElemType, IoBuffer, Model, ModelRequest, Runtime};
use vnpu::sched::SchedConfig;
use vnpu::service::{Daemon, Limits, ServeOptions};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh folder under the system temp folder, unique to this process and call.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "vnpu-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The committed tiny classifier compiled to `dir/name.bin`, with an NV12 image input
/// when `nv12` (for ROI inference), else its f32 input.
pub fn classifier_file(dir: &Path, name: &str, nv12: bool) -> PathBuf {
    let onnx =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny_classifier.onnx"))
            .unwrap();
    let mut opts = CompileOptions::default();
    if nv12 {
        opts.inputs = vec![InputParams {
            name: "images".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Nv12),
            nhwc: false,
            train_bgr: false,
            mean: vec![],
            scale: vec![],
        }];
    }
    let c = compile_onnx_bytes(&onnx, None, name, &opts).unwrap();
    let p = dir.join(format!("{name}.bin"));
    std::fs::write(&p, vnpu::format::write_models(&[c]).unwrap()).unwrap();
    p
}

/// A daemon served by a thread of this process; stopped and joined on drop.
pub struct TestDaemon {
    pub daemon: Arc<Daemon>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub socket: PathBuf,
}

impl TestDaemon {
    /// Binds `dir/vnpu.sock` with these scheduler settings and client limits and serves it.
    pub fn start(dir: &Path, sched: SchedConfig, limits: Limits) -> TestDaemon {
        let socket = dir.join("vnpu.sock");
        let daemon = Arc::new(
            Daemon::bind(ServeOptions {
                socket: socket.clone(),
                group: None,
                sched,
                limits,
            })
            .unwrap(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (daemon.clone(), stop.clone());
        let thread = std::thread::spawn(move || d.run(&s).unwrap());
        TestDaemon {
            daemon,
            stop,
            thread: Some(thread),
            socket,
        }
    }

    /// Connected clients, from the daemon's status.
    pub fn clients(&self) -> usize {
        self.daemon.status_json()["clients"]
            .as_array()
            .unwrap()
            .len()
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` until it holds; a deadlock guard, not a timing assertion.
pub fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A deterministic input pattern for a tensor of element type `elem`.
pub fn fill_input(buf: &mut [u8], elem: ElemType) {
    match elem {
        ElemType::F32 => {
            for (i, c) in buf.chunks_exact_mut(4).enumerate() {
                c.copy_from_slice(&(((i % 17) as f32) * 0.05 - 0.4).to_le_bytes());
            }
        }
        _ => {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i * 7 % 251) as u8;
            }
        }
    }
}

/// The output of `m` on `input` from this process's own runtime: the reference that
/// results through the daemon must equal byte for byte.
pub fn reference_output(m: &Arc<Model>, input: &mut [u8]) -> Vec<u8> {
    let mut want = vec![0u8; m.outputs[0].aligned_byte_size];
    let rt = Runtime::with_config(SchedConfig::default()).unwrap();
    let t = rt
        .submit(
            vec![ModelRequest {
                model: m.clone(),
                inputs: vec![vec![IoBuffer::from_slice(input)]],
                outputs: vec![IoBuffer::from_slice(&mut want)],
                rois: vec![],
            }],
            CtrlParams::default(),
        )
        .unwrap();
    t.wait(None).unwrap();
    drop(t);
    want
}

/// Runs `name` (an ignored test of this binary) in a child with `VNPU_SERVICE=socket`
/// and `env_key=model`; its whole output.
pub fn run_child(name: &str, socket: &Path, env_key: &str, model: &Path) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VNPU_SERVICE", socket)
        .env(env_key, model)
        .output()
        .unwrap()
}

/// Stdout and stderr of a child, as one text.
pub fn output_text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// [`run_child`], asserting that the child passed and printed `child: done`; its text.
pub fn run_child_done(name: &str, socket: &Path, env_key: &str, model: &Path) -> String {
    let out = run_child(name, socket, env_key, model);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("child: done"), "{text}");
    text
}

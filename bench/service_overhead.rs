//! Service-mode overhead (DESIGN §6.4): round trip infer + wait + release of a trivial
//! model through the daemon vs in process, and background throughput of a real model.
//!
//! The daemon runs in this process (its own thread, its own runtime) and the client talks
//! to it over the Unix socket exactly as another process would. Prints p50/p99 in µs for
//! both paths. Goal: ≤ 25 µs p50 through the daemon.
//! Run: `cargo bench --bench service_overhead` (add `-- --quick` for a short run; `cargo
//! test` runs it as a smoke test).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::compile::{compile_onnx_bytes, CompileOptions};
use vnpu::ir::DType;
use vnpu::onnx::builder::ModelBuilder;
use vnpu::runtime::{CtrlParams, IoBuffer, ModelRequest, PackedModel, Runtime};
use vnpu::sched::SchedConfig;
use vnpu::service::wire::ModelRef;
use vnpu::service::{Client, Daemon, Limits, RemotePart, ServeOptions};

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = !bench || std::env::args().any(|a| a == "--quick");
    let n: usize = if quick { 2_000 } else { 50_000 };
    let dir = std::env::temp_dir().join(format!("vnpu-svc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let onnx = ModelBuilder::new("trivial", 13)
        .input("x", DType::F32, &[1, 4])
        .node("Relu", "relu", &["x"], &["y"], vec![])
        .output("y")
        .to_bytes();
    let c =
        compile_onnx_bytes(&onnx, None, "trivial", &CompileOptions::default()).expect("compile");
    let file = dir.join("trivial.bin");
    std::fs::write(&file, vnpu::format::write_models(&[c]).expect("write")).expect("write");
    let sched = SchedConfig {
        cores: 2,
        cpu_threads: 1,
        max_tasks: 64,
        ..SchedConfig::from_env().expect("configuration")
    };

    // In process.
    let rt = Runtime::with_config(sched.clone()).expect("runtime");
    let m = PackedModel::load_files(std::slice::from_ref(&file))
        .expect("load")
        .models[0]
        .clone();
    let (mut x, mut y) = (vec![0u8; 16], vec![0u8; 16]);
    let mut local = Vec::with_capacity(n);
    for k in 0..n + n / 10 {
        let t0 = Instant::now();
        let t = rt
            .submit(
                vec![ModelRequest {
                    model: m.clone(),
                    inputs: vec![vec![IoBuffer::from_slice(&mut x)]],
                    outputs: vec![IoBuffer::from_slice(&mut y)],
                    rois: vec![],
                }],
                CtrlParams::default(),
            )
            .expect("submit");
        t.wait(None).expect("wait");
        t.release().expect("release");
        if k >= n / 10 {
            local.push(t0.elapsed());
        }
    }
    local.sort();
    drop(rt);

    // Through the daemon.
    let socket = dir.join("bench.sock");
    let daemon = Arc::new(
        Daemon::bind(ServeOptions {
            socket: socket.clone(),
            group: None,
            sched,
            limits: Limits::default(),
        })
        .expect("daemon"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (d2, s2) = (daemon.clone(), stop.clone());
    let server = std::thread::spawn(move || d2.run(&s2).expect("serve"));
    let client = Client::connect(&socket).expect("connect");
    let pack = client.load_files(&[&file]).expect("load");
    let xi = client.alloc_shared(16).expect("shm");
    let yo = client.alloc_shared(16).expect("shm");
    let part = RemotePart {
        model: ModelRef {
            pack: pack.id,
            index: 0,
        },
        inputs: vec![vec![xi.whole()]],
        outputs: vec![yo.whole()],
    };
    let mut remote = Vec::with_capacity(n);
    for k in 0..n + n / 10 {
        let t0 = Instant::now();
        let t = client
            .submit(std::slice::from_ref(&part), CtrlParams::default())
            .expect("submit");
        client.wait(t, None).expect("wait");
        client.release(t).expect("release");
        if k >= n / 10 {
            remote.push(t0.elapsed());
        }
    }
    remote.sort();
    assert_eq!(client.staged_bytes(), 0);
    drop((xi, yo));
    drop(client);
    stop.store(true, Ordering::SeqCst);
    server.join().expect("server thread");
    let _ = std::fs::remove_dir_all(&dir);

    println!("service overhead: infer + wait + release of a 1-node model, {n} tasks");
    println!("| path                 | p50 µs   | p99 µs   | goal (p50) |");
    println!("|----------------------|----------|----------|------------|");
    println!(
        "| in process           | {:>8.2} | {:>8.2} |            |",
        percentile(&local, 0.5),
        percentile(&local, 0.99)
    );
    println!(
        "| through the daemon   | {:>8.2} | {:>8.2} | ≤ 25       |",
        percentile(&remote, 0.5),
        percentile(&remote, 0.99)
    );
}

//! Service-mode overhead (DESIGN §6.2 and §6.4).
//!
//! 1. Round trip infer + wait + release of a trivial model: in process, through the daemon
//!    with the Rust [`Client`], and through the daemon with the unchanged C API
//!    (`VNPU_SERVICE` set, `hbDNNInfer` / `hbDNNWaitTaskDone` / `hbDNNReleaseTask`).
//!    The daemon runs in this process (its own thread, its own runtime) and clients talk
//!    to it over the Unix socket exactly as another process would. Goal: ≤ 25 µs p50.
//! 2. With `--priority` (needs `VNPU_TEST_MODELS` with `mobilenetv2.onnx` and
//!    `resnet18.onnx`): the priority scenario of §6.2 — foreground MobileNetV2 at
//!    priority 255 every 30 ms, open loop, while ResNet-18 at priority 0 runs flat out —
//!    in process, through the daemon with both in this process, and through the daemon
//!    with the background in another process (this binary re-run with `--bg-client`).
//!    Prints foreground p50/p99/max and background tasks/s (goal: two processes match one
//!    process; background through the daemon ≥ 97 % of in process).
//!
//! Run: `cargo bench --bench service_overhead` (`-- --quick` for a short run,
//! `-- --priority` for part 2). Timings on a loaded machine are indicative only.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::compile::{compile_onnx_bytes, CompileOptions};
use vnpu::ffi::*;
use vnpu::ir::DType;
use vnpu::onnx::builder::ModelBuilder;
use vnpu::runtime::{CtrlParams, IoBuffer, ModelRequest, PackedModel, Runtime};
use vnpu::sched::SchedConfig;
use vnpu::service::wire::ModelRef;
use vnpu::service::{Client, Daemon, Limits, RemotePart, ServeOptions, SharedRegion};

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// A daemon served by a thread of this process.
struct Served {
    _daemon: Arc<Daemon>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    fn start(socket: &Path, sched: SchedConfig) -> Served {
        let daemon = Arc::new(
            Daemon::bind(ServeOptions {
                socket: socket.to_path_buf(),
                group: None,
                sched,
                limits: Limits::default(),
            })
            .expect("daemon"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (daemon.clone(), stop.clone());
        let thread = Some(std::thread::spawn(move || d.run(&s).expect("serve")));
        Served {
            _daemon: daemon,
            stop,
            thread,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn compile_to(dir: &Path, name: &str, onnx: &[u8], max_time_per_fc: u64) -> PathBuf {
    let opts = CompileOptions {
        max_time_per_fc,
        ..CompileOptions::default()
    };
    let c = compile_onnx_bytes(onnx, None, name, &opts).expect("compile");
    let file = dir.join(format!("{name}.bin"));
    std::fs::write(&file, vnpu::format::write_models(&[c]).expect("write")).expect("write");
    file
}

fn row(name: &str, v: &mut [Duration]) {
    v.sort();
    println!(
        "| {name:<28} | {:>8.2} | {:>8.2} |",
        percentile(v, 0.5),
        percentile(v, 0.99)
    );
}

/// Part 1: the trivial-model round trip three ways.
fn round_trip(dir: &Path, n: usize) {
    let onnx = ModelBuilder::new("trivial", 13)
        .input("x", DType::F32, &[1, 4])
        .node("Relu", "relu", &["x"], &["y"], vec![])
        .output("y")
        .to_bytes();
    let file = compile_to(dir, "trivial", &onnx, 0);
    let sched = SchedConfig {
        cores: 2,
        cpu_threads: 1,
        max_tasks: 64,
        ..SchedConfig::from_env().expect("configuration")
    };
    let warm = n / 10;

    // In process.
    let rt = Runtime::with_config(sched.clone()).expect("runtime");
    let m = PackedModel::load_files(std::slice::from_ref(&file))
        .expect("load")
        .models[0]
        .clone();
    let (mut x, mut y) = (vec![0u8; 16], vec![0u8; 16]);
    let mut local = Vec::with_capacity(n);
    for k in 0..n + warm {
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
        if k >= warm {
            local.push(t0.elapsed());
        }
    }
    drop(rt);

    // Through the daemon, Rust client.
    let socket = dir.join("bench.sock");
    let served = Served::start(&socket, sched);
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
    for k in 0..n + warm {
        let t0 = Instant::now();
        let t = client
            .submit(std::slice::from_ref(&part), CtrlParams::default())
            .expect("submit");
        client.wait(t, None).expect("wait");
        client.forget(t).expect("release");
        if k >= warm {
            remote.push(t0.elapsed());
        }
    }
    assert_eq!(client.staged_bytes(), 0);
    drop((xi, yo));
    drop(client);

    // Through the daemon, unchanged C API.
    vnpu::config::set("VNPU_SERVICE", Some(socket.to_str().expect("utf8"))).expect("set");
    let mut c_api = Vec::with_capacity(n);
    let path = CString::new(file.to_str().expect("utf8")).expect("path");
    let mut names = [path.as_ptr()];
    let (mut p, mut h, mut list, mut count) = (null_mut(), null_mut(), null_mut(), 0);
    // SAFETY: all-zero properties are valid values.
    let (mut ip, mut op): (hbDNNTensorProperties, hbDNNTensorProperties) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    let zero = hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    };
    let (mut xm, mut ym) = (zero, zero);
    // SAFETY: valid out-pointers and one valid path.
    unsafe {
        assert_eq!(hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1), 0);
        assert_eq!(hbDNNGetModelNameList(&mut list, &mut count, p), 0);
        assert_eq!(hbDNNGetModelHandle(&mut h, p, *list), 0);
        assert_eq!(hbDNNGetInputTensorProperties(&mut ip, h, 0), 0);
        assert_eq!(hbDNNGetOutputTensorProperties(&mut op, h, 0), 0);
        assert_eq!(hbSysAllocMem(&mut xm, 16), 0);
        assert_eq!(hbSysAllocMem(&mut ym, 16), 0);
    }
    let tensor = |props, mem| hbDNNTensor {
        sysMem: [mem, zero, zero, zero],
        properties: props,
    };
    let input = tensor(ip, xm);
    let mut output = tensor(op, ym);
    let mut ctrl = hbDNNInferCtrlParam {
        bpuCoreId: 0,
        dspCoreId: 0,
        priority: 0,
        more: 0,
        customId: 0,
        reserved1: 0,
        reserved2: 0,
    };
    for k in 0..n + warm {
        let t0 = Instant::now();
        let mut t = null_mut();
        let mut o: *mut hbDNNTensor = &mut output;
        // SAFETY: valid pointers; the memory outlives the task.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t, &mut o, &input, h, &mut ctrl), 0);
            assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
            assert_eq!(hbDNNReleaseTask(t), 0);
        }
        if k >= warm {
            c_api.push(t0.elapsed());
        }
    }
    assert_eq!(
        service_staged_bytes(),
        0,
        "hbSysAllocMem memory is not staged"
    );
    // SAFETY: live memory and pack.
    unsafe {
        hbSysFreeMem(&mut xm);
        hbSysFreeMem(&mut ym);
        hbDNNRelease(p);
    }
    drop(served);

    println!("service overhead: infer + wait + release of a 1-node model, {n} tasks");
    println!("| path                         | p50 µs   | p99 µs   |");
    println!("|------------------------------|----------|----------|");
    row("in process", &mut local);
    row("daemon, Rust client", &mut remote);
    row("daemon, C API (VNPU_SERVICE)", &mut c_api);
    println!("(goal ≤ 25 µs p50 through the daemon)");
}

/// What one configuration of the priority scenario measured.
struct Outcome {
    fg: Vec<Duration>,
    bg_per_s: f64,
}

/// Background: `part` at priority 0, back to back, until `stop`; counts tasks in `done`.
fn bg_loop(c: &Client, part: &RemotePart, stop: &AtomicBool, done: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        let t = c
            .submit(std::slice::from_ref(part), CtrlParams::default())
            .expect("bg submit");
        c.wait(t, None).expect("bg wait");
        c.forget(t).expect("bg release");
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// A client with `file` loaded and shared input/output memory for its first model.
fn remote_part(c: &Arc<Client>, file: &Path) -> (RemotePart, SharedRegion, SharedRegion) {
    let pack = c.load_files(&[file]).expect("load");
    let m = &pack.models[0];
    let i = c.alloc_shared(m.inputs[0].aligned_byte_size).expect("shm");
    let o = c.alloc_shared(m.outputs[0].aligned_byte_size).expect("shm");
    let part = RemotePart {
        model: ModelRef {
            pack: pack.id,
            index: 0,
        },
        inputs: vec![vec![i.whole()]],
        outputs: vec![o.whole()],
    };
    (part, i, o)
}

/// Foreground: `submit_wait` every 30 ms, open loop, for `requests` requests.
fn fg_loop(requests: usize, mut submit_wait: impl FnMut()) -> Vec<Duration> {
    let period = Duration::from_millis(30);
    let start = Instant::now();
    let mut lat = Vec::with_capacity(requests);
    for k in 0..requests {
        let due = start + period * k as u32;
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        submit_wait();
        lat.push(due.elapsed());
    }
    lat
}

fn priority(dir: &Path, requests: usize) {
    let Some(models) = std::env::var_os("VNPU_TEST_MODELS").map(PathBuf::from) else {
        println!("--priority: set VNPU_TEST_MODELS (mobilenetv2.onnx, resnet18.onnx)");
        return;
    };
    let read = |n: &str| std::fs::read(models.join(n)).expect("bench model");
    let fg_file = compile_to(dir, "mobilenetv2", &read("mobilenetv2.onnx"), 1000);
    let bg_file = compile_to(dir, "resnet18", &read("resnet18.onnx"), 1000);
    let sched = SchedConfig {
        core_limit: 1,
        ..SchedConfig::from_env().expect("configuration")
    };
    let fg_ctrl = CtrlParams {
        priority: 255,
        ..CtrlParams::default()
    };
    let mut results: Vec<(&str, Outcome)> = Vec::new();

    // In process: one runtime, both models.
    {
        let rt = Runtime::with_config(sched.clone()).expect("runtime");
        let load = |f: &PathBuf| {
            PackedModel::load_files(std::slice::from_ref(f))
                .expect("load")
                .models[0]
                .clone()
        };
        let (fg, bg) = (load(&fg_file), load(&bg_file));
        let stop = AtomicBool::new(false);
        let done = AtomicU64::new(0);
        let (lat, secs) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut x = vec![0u8; bg.inputs[0].aligned_byte_size];
                let mut y = vec![0u8; bg.outputs[0].aligned_byte_size];
                while !stop.load(Ordering::Relaxed) {
                    let req = ModelRequest {
                        model: bg.clone(),
                        inputs: vec![vec![IoBuffer::from_slice(&mut x)]],
                        outputs: vec![IoBuffer::from_slice(&mut y)],
                        rois: vec![],
                    };
                    let t = rt.submit(vec![req], CtrlParams::default()).expect("bg");
                    t.wait(None).expect("bg wait");
                    t.release().expect("bg release");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
            let mut x = vec![0u8; fg.inputs[0].aligned_byte_size];
            let mut y = vec![0u8; fg.outputs[0].aligned_byte_size];
            let t0 = Instant::now();
            let lat = fg_loop(requests, || {
                let req = ModelRequest {
                    model: fg.clone(),
                    inputs: vec![vec![IoBuffer::from_slice(&mut x)]],
                    outputs: vec![IoBuffer::from_slice(&mut y)],
                    rois: vec![],
                };
                let t = rt.submit(vec![req], fg_ctrl).expect("fg");
                t.wait(None).expect("fg wait");
                t.release().expect("fg release");
            });
            let secs = t0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            (lat, secs)
        });
        results.push((
            "in process",
            Outcome {
                fg: lat,
                bg_per_s: done.load(Ordering::Relaxed) as f64 / secs,
            },
        ));
    }

    // Through the daemon: background in this process, then in another process.
    for two_processes in [false, true] {
        let socket = dir.join(format!("prio-{two_processes}.sock"));
        let served = Served::start(&socket, sched.clone());
        let fgc = Client::connect(&socket).expect("connect");
        let (fg_part, _fi, _fo) = remote_part(&fgc, &fg_file);
        let stop = AtomicBool::new(false);
        let done = AtomicU64::new(0);
        let t0 = Instant::now();
        let (lat, bg_count) = if two_processes {
            let child = std::process::Command::new(std::env::current_exe().expect("exe"))
                .arg("--bg-client")
                .arg(&socket)
                .arg(&bg_file)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("bg process");
            // Let the background start before measuring.
            std::thread::sleep(Duration::from_millis(300));
            let lat = fg_loop(requests, || {
                let t = fgc
                    .submit(std::slice::from_ref(&fg_part), fg_ctrl)
                    .expect("fg");
                fgc.wait(t, None).expect("fg wait");
                fgc.forget(t).expect("fg release");
            });
            // SAFETY: signals our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let out = child.wait_with_output().expect("bg output");
            let text = String::from_utf8_lossy(&out.stdout);
            let rate: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix("bg tasks/s "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(f64::NAN);
            (lat, rate)
        } else {
            let bgc = Client::connect(&socket).expect("connect");
            let (bg_part, _bi, _bo) = remote_part(&bgc, &bg_file);
            std::thread::scope(|s| {
                s.spawn(|| bg_loop(&bgc, &bg_part, &stop, &done));
                let lat = fg_loop(requests, || {
                    let t = fgc
                        .submit(std::slice::from_ref(&fg_part), fg_ctrl)
                        .expect("fg");
                    fgc.wait(t, None).expect("fg wait");
                    fgc.forget(t).expect("fg release");
                });
                stop.store(true, Ordering::Relaxed);
                (lat, 0.0)
            })
        };
        let secs = t0.elapsed().as_secs_f64();
        let bg_per_s = if two_processes {
            bg_count
        } else {
            done.load(Ordering::Relaxed) as f64 / secs
        };
        drop(fgc);
        drop(served);
        results.push((
            if two_processes {
                "daemon, fg and bg in 2 processes"
            } else {
                "daemon, fg and bg in 1 process"
            },
            Outcome { fg: lat, bg_per_s },
        ));
    }

    println!(
        "\npriority under load (corelimit 1): MobileNetV2 prio 255 every 30 ms, open loop, \
         vs ResNet-18 prio 0 flat out; {requests} requests"
    );
    println!(
        "| configuration                    | fg p50 ms | fg p99 ms | fg max ms | bg tasks/s |"
    );
    println!(
        "|----------------------------------|-----------|-----------|-----------|------------|"
    );
    let base = results[0].1.bg_per_s;
    for (name, mut o) in results {
        o.fg.sort();
        println!(
            "| {name:<32} | {:>9.2} | {:>9.2} | {:>9.2} | {:>6.2} ({:>3.0} %) |",
            percentile(&o.fg, 0.5) / 1e3,
            percentile(&o.fg, 0.99) / 1e3,
            o.fg.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            o.bg_per_s,
            100.0 * o.bg_per_s / base
        );
    }
}

/// `--bg-client SOCKET MODEL`: runs the background loop until SIGTERM, then prints its
/// rate.
fn bg_client(socket: &Path, model: &Path) {
    static STOP: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_term(_: libc::c_int) {
        STOP.store(true, Ordering::SeqCst);
    }
    // SAFETY: installs an async-signal-safe handler (an atomic store).
    unsafe { libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t) };
    let c = Client::connect(socket).expect("connect");
    let (part, _i, _o) = remote_part(&c, model);
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    bg_loop(&c, &part, &STOP, &done);
    println!(
        "bg tasks/s {}",
        done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--bg-client") {
        bg_client(Path::new(&args[i + 1]), Path::new(&args[i + 2]));
        return;
    }
    let bench = args.iter().any(|a| a == "--bench");
    let quick = !bench || args.iter().any(|a| a == "--quick");
    let n: usize = if quick { 2_000 } else { 50_000 };
    let dir = std::env::temp_dir().join(format!("vnpu-svc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    round_trip(&dir, n);
    if args.iter().any(|a| a == "--priority") {
        priority(&dir, if quick { 60 } else { 300 });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

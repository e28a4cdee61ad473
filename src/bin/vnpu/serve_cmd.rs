//! `vnpu serve` (the service daemon, in the foreground) and `vnpu status`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use vnpu::service::{Client, Daemon, Limits, ServeOptions};

use crate::args::Args;

/// Default socket: `$XDG_RUNTIME_DIR/vnpu.sock`, else `/tmp/vnpu-<uid>.sock`.
fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("vnpu.sock"),
        // SAFETY: plain system call.
        _ => PathBuf::from(format!("/tmp/vnpu-{}.sock", unsafe { libc::getuid() })),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn group_id(name: &str) -> Result<u32, String> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(name).map_err(|_| format!("bad group name '{name}'"))?;
    // SAFETY: `c` is a valid C string; the returned record is read at once.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        return Err(format!("--group: no group named '{name}'"));
    }
    // SAFETY: non-null pointer to a static group record.
    Ok(unsafe { (*g).gr_gid })
}

/// `vnpu serve [--socket PATH] [--cores N] [--trace PATH] [--group NAME]`
pub fn run_serve(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, &["socket", "cores", "trace", "group"], &[])?;
    let socket = a
        .get("socket")
        .map(PathBuf::from)
        .unwrap_or_else(default_socket);
    let mut sched = vnpu::sched::SchedConfig::from_env().map_err(|e| e.to_string())?;
    if let Some(n) = a.num::<usize>("cores")? {
        if !(1..=64).contains(&n) {
            return Err(format!("--cores {n}: must be 1..=64"));
        }
        sched.cores = n;
    }
    sched.max_tasks = sched.max_tasks.max(1024);
    let group = a.get("group").map(group_id).transpose()?;
    let trace = a.get("trace").map(PathBuf::from);
    let daemon = Daemon::bind(ServeOptions {
        socket: socket.clone(),
        group,
        sched,
        limits: Limits::default(),
    })
    .map_err(|e| e.to_string())?;
    // SAFETY: installs async-signal-safe handlers (an atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    eprintln!(
        "vnpu serve: listening on {} (pid {}, {} cores, corelimit {}); SIGTERM stops",
        socket.display(),
        std::process::id(),
        daemon.runtime().scheduler().config().cores,
        daemon.runtime().scheduler().config().core_limit
    );
    daemon.run(&STOP).map_err(|e| e.to_string())?;
    if let Some(p) = trace {
        let json = serde_json::to_string(&daemon.trace_json()).map_err(|e| e.to_string())?;
        std::fs::write(&p, json).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        eprintln!("vnpu serve: trace written to {}", p.display());
    }
    eprintln!("vnpu serve: stopped; pending tasks were failed");
    Ok(())
}

/// `vnpu status [--socket PATH] [--json]`
pub fn run_status(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, &["socket"], &["json"])?;
    let socket = a
        .get("socket")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("VNPU_SERVICE").map(PathBuf::from))
        .unwrap_or_else(default_socket);
    let client = Client::connect(&socket).map_err(|e| e.to_string())?;
    let s = client.status().map_err(|e| e.to_string())?;
    if a.has("json") {
        println!("{s}");
        return Ok(());
    }
    println!(
        "vnpu service at {} (daemon pid {}, version {}): {} cores, corelimit {}, {} live tasks",
        socket.display(),
        s["pid"],
        s["version"].as_str().unwrap_or("?"),
        s["cores"],
        s["core_limit"],
        s["live_tasks"]
    );
    println!("clients:");
    for c in s["clients"].as_array().into_iter().flatten() {
        println!(
            "  client {:>3}  pid {:>7}  tasks {:>4}  shm {:>10} B  models {}",
            c["client"], c["pid"], c["live_tasks"], c["shared_memory_bytes"], c["models"]
        );
    }
    println!("queue:");
    for q in s["queued_by_priority"].as_array().into_iter().flatten() {
        println!("  priority {:>3}: {} tasks", q["priority"], q["tasks"]);
    }
    println!(
        "cores (last {:.1} s of the trace):",
        s["window_s"].as_f64().unwrap_or(0.0)
    );
    for c in s["core_stats"].as_array().into_iter().flatten() {
        println!(
            "  core {}: {:>6} FCs, {:>5.1} % busy",
            c["core"],
            c["fcs"],
            c["utilisation"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    Ok(())
}

//! The peer runtimes (onnxruntime, OpenVINO, MNN) as the vnpu bench sees them: which
//! Python environment runs them, a client of the `bench/peers.py --serve` request loop
//! (one process for the whole latency table, so rounds interleave with vnpu's), and the
//! Pareto front of the priority scenario.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The runtimes of the latency table, in column order.
pub const RUNTIMES: [&str; 3] = ["onnxruntime", "openvino", "mnn"];

/// The Python environment that runs the peers: the bench venv (all peers) when
/// `scripts/bench_venv.sh` can create it, else the test venv (onnxruntime only).
#[derive(Clone, Debug)]
pub struct PyEnv {
    /// The wrapper script that runs a command inside the venv.
    pub script: PathBuf,
    /// A line for the report when the fallback is in use.
    pub note: Option<String>,
}

impl PyEnv {
    /// Creates (or refreshes) the bench venv; falls back to the test venv.
    pub fn find(repo: &Path) -> PyEnv {
        let out = Command::new(repo.join("scripts/bench_venv.sh"))
            .current_dir(repo)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        match out {
            Ok(o) if o.status.success() => PyEnv {
                script: repo.join("scripts/bench_venv.sh"),
                note: None,
            },
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .next_back()
                        .unwrap_or("")
                        .to_string(),
                    Err(e) => e.to_string(),
                };
                PyEnv {
                    script: repo.join("scripts/venv.sh"),
                    note: Some(format!(
                        "bench venv (scripts/bench_venv.sh) unavailable ({why}); test venv: onnxruntime only"
                    )),
                }
            }
        }
    }

    /// A command running `python3 ARGS...` inside the venv, from the repository root.
    pub fn python(&self, repo: &Path, args: &[String]) -> Command {
        let mut c = Command::new(&self.script);
        c.arg("python3").args(args).current_dir(repo);
        c
    }
}

/// A running `bench/peers.py --serve`: one JSON request per line, one reply per line.
pub struct PeerServer {
    repo: PathBuf,
    env: PyEnv,
    proc: Option<(Child, ChildStdin, BufReader<ChildStdout>)>,
    /// Runtime name and version of each peer that imported.
    pub versions: Vec<(String, String)>,
    /// Runtime name and import error of each peer that did not.
    pub missing: Vec<(String, String)>,
    crashed: HashSet<(String, PathBuf)>,
}

impl PeerServer {
    /// Starts the server; `Err` says why no peer can run.
    pub fn start(repo: &Path, env: &PyEnv) -> Result<PeerServer, String> {
        let mut s = PeerServer {
            repo: repo.to_path_buf(),
            env: env.clone(),
            proc: None,
            versions: vec![],
            missing: vec![],
            crashed: HashSet::new(),
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let cache = self.repo.join("build/bench-cache");
        let mut child = self
            .env
            .python(
                &self.repo,
                &[
                    "bench/peers.py".into(),
                    "--serve".into(),
                    "--cache-dir".into(),
                    cache.display().to_string(),
                ],
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start bench/peers.py: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        self.proc = Some((child, stdin, stdout));
        let hello = self.read_reply()?;
        let pairs = |key: &str| -> Vec<(String, String)> {
            hello[key]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.versions = pairs("runtimes");
        self.missing = pairs("missing");
        Ok(())
    }

    fn read_reply(&mut self) -> Result<serde_json::Value, String> {
        let (_, _, out) = self.proc.as_mut().ok_or("peer server not running")?;
        let mut line = String::new();
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => return Err("peer process died".into()),
                Ok(_) => {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                        return Ok(v);
                    }
                }
            }
        }
    }

    fn stop(&mut self) {
        if let Some((mut child, stdin, _)) = self.proc.take() {
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every time (ms) of `runs` inferences of `model` on `runtime` after `warmup` ones
    /// (the model is loaded on first use and kept). A peer that crashes the server fails
    /// this cell for good; the server is restarted for the others.
    pub fn times(
        &mut self,
        runtime: &str,
        model: &Path,
        runs: usize,
        warmup: usize,
    ) -> Result<Vec<f64>, String> {
        self.request(runtime, model, runs, warmup).and_then(|v| {
            v["times_ms"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t.as_f64()).collect())
                .ok_or_else(|| "reply without times_ms".to_string())
        })
    }

    /// One `time` request; the reply's JSON when it is `ok`.
    fn request(
        &mut self,
        runtime: &str,
        model: &Path,
        runs: usize,
        warmup: usize,
    ) -> Result<serde_json::Value, String> {
        let key = (runtime.to_string(), model.to_path_buf());
        if self.crashed.contains(&key) {
            return Err("crashed the peer process".into());
        }
        if self.proc.is_none() {
            self.spawn()?;
        }
        let req = serde_json::json!({
            "op": "time", "runtime": runtime, "model": model.display().to_string(),
            "runs": runs, "warmup": warmup,
        });
        let sent = self
            .proc
            .as_mut()
            .map(|(_, stdin, _)| writeln!(stdin, "{req}").and_then(|_| stdin.flush()))
            .is_some_and(|r| r.is_ok());
        let reply = if sent {
            self.read_reply()
        } else {
            Err("peer process died".into())
        };
        match reply {
            Ok(v) if v["ok"] == true => Ok(v),
            Ok(v) => Err(v["error"].as_str().unwrap_or("unknown error").to_string()),
            Err(e) => {
                self.stop();
                self.crashed.insert(key);
                Err(format!("{e} (crashed the peer process)"))
            }
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One setting of the priority scenario: foreground p99 (lower is better) and
/// background throughput (higher is better).
#[derive(Clone, Debug)]
pub struct Point {
    /// The setting, as printed.
    pub label: String,
    /// Foreground p99 latency, ms.
    pub p99: f64,
    /// Background inferences per second.
    pub bg: f64,
}

/// Whether `a` is at least as good as `b` on both axes and better on one.
fn dominates(a: &Point, b: &Point) -> bool {
    a.p99 <= b.p99 && a.bg >= b.bg && (a.p99 < b.p99 || a.bg > b.bg)
}

/// The points no other point dominates, by foreground p99.
pub fn pareto_front(points: &[Point]) -> Vec<Point> {
    let mut front: Vec<Point> = points
        .iter()
        .filter(|p| p.p99.is_finite() && p.bg.is_finite())
        .filter(|p| !points.iter().any(|q| dominates(q, p)))
        .cloned()
        .collect();
    front.sort_by(|a, b| a.p99.total_cmp(&b.p99));
    front
}

/// Whether `v` has a lower foreground p99 than every measured peer setting and a higher
/// background throughput than every one (false when none was measured).
pub fn beats_all(v: &Point, peers: &[Point]) -> bool {
    let valid = || {
        peers
            .iter()
            .filter(|p| p.p99.is_finite() && p.bg.is_finite())
    };
    valid().next().is_some() && valid().all(|p| v.p99 < p.p99 && v.bg > p.bg)
}

/// A plain sentence on `v` against the peers' settings.
pub fn verdict(v: &Point, peers: &[Point]) -> String {
    let valid: Vec<&Point> = peers
        .iter()
        .filter(|p| p.p99.is_finite() && p.bg.is_finite())
        .collect();
    if valid.is_empty() {
        return format!("{}: no peer setting measured", v.label);
    }
    let best_p99 = valid.iter().min_by(|a, b| a.p99.total_cmp(&b.p99)).unwrap();
    let best_bg = valid.iter().max_by(|a, b| a.bg.total_cmp(&b.bg)).unwrap();
    let fg_ok = v.p99 < best_p99.p99;
    let bg_ok = v.bg > best_bg.bg;
    let beaten_by: Vec<&str> = valid
        .iter()
        .filter(|p| dominates(p, v))
        .map(|p| p.label.as_str())
        .collect();
    let head = if fg_ok && bg_ok {
        "BEATS every peer setting on both axes".to_string()
    } else {
        "does NOT beat every peer setting on both axes".to_string()
    };
    let place = if beaten_by.is_empty() {
        "on or beyond the peers' front".to_string()
    } else {
        format!("dominated by: {}", beaten_by.join("; "))
    };
    format!(
        "{}: {head} (fg p99 {:.2} vs best peer {:.2} [{}]: {}; bg {:.2}/s vs best peer {:.2}/s [{}]: {}); {place}",
        v.label,
        v.p99,
        best_p99.p99,
        best_p99.label,
        if fg_ok { "lower" } else { "not lower" },
        v.bg,
        best_bg.bg,
        best_bg.label,
        if bg_ok { "higher" } else { "not higher" },
    )
}

//! `vnpu infer`, `vnpu perf` and `vnpu demo`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use vnpu::compile::{self, CompileOptions};
use vnpu::runtime::{Model, PackedModel, Runtime};
use vnpu::sched::SchedConfig;

use crate::args::Args;
use crate::perf::{self, percentile, Load, LoadResult};

/// Detector frames per background task in `vnpu demo`.
const DEMO_BG_FRAMES_PER_TASK: usize = 8;

/// The demo's bundled models (kept small in the repository).
const DEMO_CLASSIFIER: &[u8] = include_bytes!("../../../models/tiny_classifier.onnx");
const DEMO_DETECTOR: &[u8] = include_bytes!("../../../models/tiny_detector.onnx");

fn load_pack(files: &[String]) -> Result<PackedModel, String> {
    if files.is_empty() {
        return Err("no --model_file given".into());
    }
    let paths: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    PackedModel::load_files(&paths).map_err(|e| e.to_string())
}

/// The models named by `--model_name`. Without it, a model file holding several models
/// is ambiguous (as in hrt_model_exec): the error lists the names. `files` is the number of
/// `--model_file` entries; `one` asks for exactly one model (infer).
fn pick_models(
    pack: &PackedModel,
    names: &[String],
    files: usize,
    one: bool,
) -> Result<Vec<Arc<Model>>, String> {
    if names.is_empty() {
        let n = pack.models.len();
        if n > files || (one && n > 1) {
            let all: Vec<&str> = pack.models.iter().map(|m| m.name.as_str()).collect();
            return Err(format!(
                "the model file(s) hold {n} models ({}); choose with --model_name {}",
                all.join(", "),
                if one { "NAME" } else { "NAME[,NAME...]" }
            ));
        }
        return Ok(pack.models.clone());
    }
    if one && names.len() > 1 {
        return Err("infer runs one model: give one --model_name".into());
    }
    names
        .iter()
        .map(|n| pack.model(n).map_err(|e| e.to_string()))
        .collect()
}

/// Reads one input file: raw `.bin` bytes or `.npy` (little-endian, C order).
fn read_input(path: &str, want: usize) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let data = if path.ends_with(".npy") {
        npy_payload(&bytes).map_err(|e| format!("{path}: {e}"))?
    } else {
        bytes
    };
    if data.len() != want {
        return Err(format!(
            "{path}: input has {} bytes, the model input needs {want}",
            data.len()
        ));
    }
    Ok(data)
}

/// The data part of a `.npy` file (version 1/2/3 header).
fn npy_payload(b: &[u8]) -> Result<Vec<u8>, String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = b.get(start..start + hlen).ok_or("truncated .npy header")?;
    let h = String::from_utf8_lossy(header);
    if h.contains("'fortran_order': True") {
        return Err("Fortran-ordered .npy is not supported".into());
    }
    if h.contains(">") {
        return Err("big-endian .npy is not supported".into());
    }
    Ok(b[start + hlen..].to_vec())
}

/// A per-model list flag: one value for all models or one per model. `range` is the
/// accepted range as the user should read it (e.g. `0..=255`).
fn ctrl_list<T: std::str::FromStr + Copy>(
    a: &Args,
    key: &str,
    n: usize,
    default: T,
    range: &str,
) -> Result<Vec<T>, String> {
    let vals = a.list(key);
    if vals.is_empty() {
        return Ok(vec![default; n]);
    }
    let parsed: Vec<T> = vals
        .iter()
        .map(|v| crate::args::parse_in_range::<T>(key, v, range))
        .collect::<Result<_, _>>()?;
    match parsed.len() {
        1 => Ok(vec![parsed[0]; n]),
        k if k == n => Ok(parsed),
        k => Err(format!(
            "--{} has {k} values for {n} models",
            key.replace('_', "-")
        )),
    }
}

const RUN_VALUED: &[&str] = &[
    "model_file",
    "model_name",
    "core_id",
    "input_file",
    "frame_count",
    "perf_time",
    "thread_num",
    "profile_path",
    "dump_format",
    "dump_path",
    "priority",
    "custom_id",
    "perf_fps",
];

/// `vnpu infer --model_file F --input_file a.bin[,b.npy] [--enable_dump] ...`
pub fn run_infer(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, RUN_VALUED, &["enable_dump"])?;
    let model_files = a.list("model_file");
    let pack = load_pack(&model_files)?;
    let models = pick_models(&pack, &a.list("model_name"), model_files.len(), true)?;
    let m = models.first().ok_or("no model")?.clone();
    let files = a.list("input_file");
    let inputs: Vec<Vec<u8>> = if files.is_empty() {
        let shapes: Vec<String> = m
            .inputs
            .iter()
            .map(|d| format!("{} {:?} {:?}", d.name, d.valid_shape, d.elem))
            .collect();
        println!(
            "no --input_file: using a deterministic test pattern for {} (f32 ramp (k*37 mod 255)/255, bytes k*37 mod 251)",
            shapes.join("; ")
        );
        perf::pattern_inputs(&m)
    } else {
        if files.len() != m.inputs.len() {
            return Err(format!(
                "model '{}' has {} inputs, --input_file gave {}",
                m.name,
                m.inputs.len(),
                files.len()
            ));
        }
        files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if crate::image_input::is_image(f) {
                    let mut b = crate::image_input::image_input(f, &m.inputs[i])?;
                    if m.compiled.inputs[i].dtype == vnpu::ir::DType::I8
                        && m.compiled.inputs[i].kind != vnpu::compile::IoKind::Tensor
                    {
                        // A signed image input: byte = pixel - 128.
                        b.iter_mut().for_each(|p| *p ^= 0x80);
                    }
                    Ok(b)
                } else {
                    read_input(f, m.plan.input_len(i))
                }
            })
            .collect::<Result<_, _>>()?
    };
    let rt = Runtime::global().map_err(|e| e.to_string())?;
    let load = Load {
        model: m.clone(),
        priority: ctrl_list(&a, "priority", 1, 0u8, "0..=255")?[0],
        custom_id: ctrl_list(&a, "custom_id", 1, 0i64, I64_RANGE)?[0],
        core_mask: core_mask(a.get("core_id"))?,
        fps: 0.0,
        threads: 1,
        frames: 1,
        inputs: Some(inputs),
    };
    let frames = a
        .get("frame_count")
        .map(|v| crate::args::parse_in_range::<usize>("frame_count", v, "1.."))
        .transpose()?
        .unwrap_or(1)
        .max(1);
    let mut inputs = load.inputs.clone().unwrap_or_default();
    let mut outputs: Vec<Vec<u8>> = m
        .outputs
        .iter()
        .map(|d| vec![0u8; d.aligned_byte_size])
        .collect();
    let mut lats = Vec::new();
    for _ in 0..frames {
        let (lat, _, _) = perf::infer_once(
            rt,
            &load,
            &mut inputs,
            &mut outputs,
            std::time::Instant::now(),
        )?;
        lats.push(lat);
    }
    println!(
        "model {}: {} frame(s), latency p50 {:.3} ms",
        m.name,
        frames,
        percentile(&lats, 50.0) / 1000.0
    );
    for (i, o) in outputs.iter().enumerate() {
        let d = &m.outputs[i];
        let preview: Vec<String> = if d.elem == vnpu::runtime::ElemType::F32 {
            bytemuck::cast_slice::<u8, f32>(o)
                .iter()
                .take(8)
                .map(|v| format!("{v:.5}"))
                .collect()
        } else {
            element_strings(d.elem, o).into_iter().take(8).collect()
        };
        println!(
            "  output {} {:?} {:?} {}: [{} ...]",
            d.name,
            d.valid_shape,
            d.elem,
            layout_name(d.layout),
            preview.join(", ")
        );
        if let vnpu::runtime::Quant::Scale {
            axis,
            scale,
            zero_point,
        } = &d.quant
        {
            let head: Vec<String> = scale.iter().take(4).map(|s| format!("{s:.6e}")).collect();
            println!(
                "    quantiType SCALE, quantizeAxis {axis}, scaleLen {} [{}{}], zeroPointLen {}; \
                 real = (q - zero_point[c]) * scale[c]",
                scale.len(),
                head.join(", "),
                if scale.len() > 4 { ", ..." } else { "" },
                zero_point.len()
            );
        }
    }
    if a.has("enable_dump") {
        let dir = PathBuf::from(a.get("dump_path").unwrap_or("."));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let txt = match a.get("dump_format").unwrap_or("bin") {
            "bin" => false,
            "txt" => true,
            f => return Err(format!("--dump_format must be bin or txt, got '{f}'")),
        };
        for (i, o) in outputs.iter().enumerate() {
            let name = format!("{}_output_{i}.{}", m.name, if txt { "txt" } else { "bin" });
            let path = dir.join(name);
            let res = if txt && m.outputs[i].elem == vnpu::runtime::ElemType::F32 {
                let s: String = bytemuck::cast_slice::<u8, f32>(o)
                    .iter()
                    .map(|v| format!("{v}\n"))
                    .collect();
                std::fs::write(&path, s)
            } else if txt {
                std::fs::write(
                    &path,
                    element_strings(m.outputs[i].elem, o)
                        .into_iter()
                        .map(|v| v + "\n")
                        .collect::<String>(),
                )
            } else {
                std::fs::write(&path, o)
            };
            res.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("  dumped {}", path.display());
        }
    }
    Ok(())
}

/// The elements of an output buffer as text (integers for the integer types).
fn element_strings(elem: vnpu::runtime::ElemType, b: &[u8]) -> Vec<String> {
    use vnpu::runtime::ElemType;
    match elem {
        ElemType::S8 => b.iter().map(|&v| (v as i8).to_string()).collect(),
        ElemType::S16 => b
            .chunks_exact(2)
            .map(|c| i16::from_ne_bytes([c[0], c[1]]).to_string())
            .collect(),
        ElemType::S32 => b
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]).to_string())
            .collect(),
        ElemType::S64 => b
            .chunks_exact(8)
            .map(|c| {
                i64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]).to_string()
            })
            .collect(),
        _ => b.iter().map(|v| v.to_string()).collect(),
    }
}

fn layout_name(l: vnpu::runtime::TensorLayout) -> &'static str {
    match l {
        vnpu::runtime::TensorLayout::Nhwc => "NHWC",
        vnpu::runtime::TensorLayout::Nchw => "NCHW",
        vnpu::runtime::TensorLayout::None => "NONE",
    }
}

/// The customId range, as printed in errors.
const I64_RANGE: &str = "-9223372036854775808..=9223372036854775807";
/// The core-mask range, as printed in errors (0 = any, 1 = core 0, 2 = core 1, ...).
const CORE_MASK_RANGE: &str = "0..=4294967295 (a core mask: 0 = any, 1 = core 0, 2 = core 1, ...)";

fn core_mask(v: Option<&str>) -> Result<u32, String> {
    match v {
        None => Ok(0),
        Some(s) => crate::args::parse_in_range::<u32>("core_id", s, CORE_MASK_RANGE),
    }
}

fn print_table(loads: &[Load], results: &[LoadResult]) {
    if loads.iter().any(|l| l.fps > 0.0) {
        println!("latency (open loop, fps_in > 0): from the time each request was scheduled to be sent until done");
    }
    if loads.iter().any(|l| l.fps <= 0.0) {
        println!("latency (closed loop, fps_in max): from submit until done");
    }
    println!(
        "  pend = submit until the scheduler takes the task; run = from then until done (all ms)"
    );
    println!(
        "{:<20} {:>4} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "model",
        "prio",
        "fps_in",
        "frames",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "pend p50",
        "pend p99",
        "run p50",
        "run p99",
        "FPS"
    );
    for (l, r) in loads.iter().zip(results) {
        println!(
            "{:<20} {:>4} {:>6} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>6.1}",
            l.model.name,
            l.priority,
            if l.fps > 0.0 {
                format!("{:.0}", l.fps)
            } else {
                "max".into()
            },
            r.frames,
            percentile(&r.latency_us, 50.0) / 1e3,
            percentile(&r.latency_us, 90.0) / 1e3,
            percentile(&r.latency_us, 99.0) / 1e3,
            percentile(&r.latency_us, 100.0) / 1e3,
            percentile(&r.pending_us, 50.0) / 1e3,
            percentile(&r.pending_us, 99.0) / 1e3,
            percentile(&r.running_us, 50.0) / 1e3,
            percentile(&r.running_us, 99.0) / 1e3,
            r.fps()
        );
        if let Some(e) = &r.first_error {
            println!("  {} failed task(s); first error: {e}", r.errors);
        }
    }
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub(crate) fn progress_bar(label: &str) -> impl FnMut(f64) {
    use std::io::IsTerminal as _;
    let tty = std::io::stderr().is_terminal();
    let label = label.to_string();
    let mut last = -1i64;
    move |f: f64| {
        if !tty {
            return;
        }
        let pct = (f * 100.0) as i64;
        if pct != last {
            last = pct;
            let n = (f * 30.0) as usize;
            eprint!(
                "\r{label} [{}{}] {pct:>3}%",
                "#".repeat(n),
                " ".repeat(30 - n)
            );
            if pct >= 100 {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        }
    }
}

/// `vnpu perf --model_file a.bin[,b.bin] [--priority 0,255] [--perf_fps 0,30] ...`
pub fn run_perf(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, RUN_VALUED, &[])?;
    let model_files = a.list("model_file");
    let pack = load_pack(&model_files)?;
    let models = pick_models(&pack, &a.list("model_name"), model_files.len(), false)?;
    let n = models.len();
    let prios = ctrl_list(&a, "priority", n, 0u8, "0..=255")?;
    let ids = ctrl_list(&a, "custom_id", n, 0i64, I64_RANGE)?;
    let fps = ctrl_list(&a, "perf_fps", n, 0f64, "a number >= 0")?;
    if let Some(f) = fps.iter().find(|f| !(f.is_finite() && **f >= 0.0)) {
        return Err(format!(
            "--perf-fps: {f} must be a number >= 0 (0 = as fast as possible)"
        ));
    }
    let threads = ctrl_list(&a, "thread_num", n, 1usize, "1..=1024")?;
    if let Some(t) = threads.iter().find(|t| !(1..=1024).contains(*t)) {
        return Err(format!(
            "--thread-num: {t} is out of range: must be 1..=1024"
        ));
    }
    let cores = ctrl_list(&a, "core_id", n, 0u32, CORE_MASK_RANGE)?;
    let frames = a.num::<usize>("frame_count")?.unwrap_or(0);
    let secs = a
        .num::<f64>("perf_time")?
        .unwrap_or(if frames > 0 { 0.0 } else { 5.0 });
    if secs < 0.0 || !secs.is_finite() {
        return Err("--perf_time must be a positive number of seconds".into());
    }
    let loads: Vec<Load> = (0..n)
        .map(|i| Load {
            model: models[i].clone(),
            priority: prios[i],
            custom_id: ids[i],
            core_mask: cores[i],
            fps: fps[i],
            threads: threads[i].max(1),
            frames,
            inputs: None,
        })
        .collect();
    let rt = Runtime::global().map_err(|e| e.to_string())?;
    let dur = Duration::from_secs_f64(if secs > 0.0 { secs } else { 3600.0 });
    let show = secs > 1.0 || frames > 200;
    let results = if show {
        perf::run_loads(rt, &loads, dur, progress_bar("perf"))
    } else {
        perf::run_loads(rt, &loads, dur, |_| {})
    };
    print_table(&loads, &results);
    if let Some(p) = a.get("profile_path") {
        write_profile(Path::new(p), &loads, &results)?;
    }
    Ok(())
}

/// Runs of the per-node profiling pass behind `--profile_path`.
const PROFILE_RUNS: usize = 10;

/// Writes the profiler JSON (hbDNN `profiler.log` style) into `dir/profiler.log`: per
/// model the task latency split, and per compiled node its estimated and measured
/// (`avg_time_us`, mean of a [`PROFILE_RUNS`]-run profiling pass) time.
fn write_profile(dir: &Path, loads: &[Load], results: &[LoadResult]) -> Result<(), String> {
    use serde_json::json;
    let mut models = Vec::new();
    for (l, r) in loads.iter().zip(results) {
        let c = &l.model.compiled;
        // Measured per-node time, from a separate profiling pass on this thread.
        let measured = perf::profile_nodes(&l.model, PROFILE_RUNS)?;
        let nodes: Vec<_> = c
            .graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| json!({"node": n.name, "op": n.op.name(), "absorbed": n.absorbed, "est_time_us": c.node_est_us.get(i), "avg_time_us": measured.get(i)}))
            .collect();
        let stats = |v: &[f64]| json!({"avg_time": v.iter().sum::<f64>() / v.len().max(1) as f64 / 1e3, "max_time": percentile(v, 100.0) / 1e3, "min_time": percentile(v, 0.0) / 1e3, "p50": percentile(v, 50.0) / 1e3, "p99": percentile(v, 99.0) / 1e3});
        models.push(json!({
            "model_name": l.model.name,
            "perf_result": {"FPS": r.fps(), "average_latency": r.latency_us.iter().sum::<f64>() / r.latency_us.len().max(1) as f64 / 1e3},
            "running_condition": {"core_id": l.core_mask, "frame_count": r.frames, "thread_num": l.threads, "priority": l.priority, "run_time": r.seconds * 1e3},
            "task_latency": {"TaskPendingTime": stats(&r.pending_us), "TaskRunningTime": stats(&r.running_us), "Total": stats(&r.latency_us)},
            "model_latency": nodes,
        }));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("profiler.log");
    let text = serde_json::to_string_pretty(&json!({"unit": "ms", "models": models}))
        .map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `vnpu demo [--seconds S] [--out DIR]`: a priority scenario on the bundled models.
pub fn run_demo(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, &["seconds", "out", "fps"], &[])?;
    let secs = a.num::<f64>("seconds")?.unwrap_or(5.0);
    let fps = a.num::<f64>("fps")?.unwrap_or(33.0);
    let out_dir = PathBuf::from(a.get("out").unwrap_or("vnpu-demo"));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    eprintln!("compiling the bundled detector (max_time_per_fc 1000 us) and classifier ...");
    let det_opts = CompileOptions {
        name: Some("detector".into()),
        max_time_per_fc: 1000,
        ..Default::default()
    };
    let cls_opts = CompileOptions {
        name: Some("classifier".into()),
        max_time_per_fc: 1000,
        ..Default::default()
    };
    let det = compile::compile_onnx_bytes(DEMO_DETECTOR, None, "detector", &det_opts)
        .map_err(|e| e.to_string())?;
    let cls = compile::compile_onnx_bytes(DEMO_CLASSIFIER, None, "classifier", &cls_opts)
        .map_err(|e| e.to_string())?;
    let packed_file = out_dir.join("demo_models.bin");
    vnpu::format::save_models(&packed_file, &[det, cls]).map_err(|e| e.to_string())?;
    let pack =
        PackedModel::load_files(std::slice::from_ref(&packed_file)).map_err(|e| e.to_string())?;
    let det = pack.model("detector").map_err(|e| e.to_string())?;
    let cls = pack.model("classifier").map_err(|e| e.to_string())?;
    let det_fcs: usize = det.compiled.segments.iter().map(|s| s.fcs.len()).sum();
    let det_fc_max = det
        .compiled
        .segments
        .iter()
        .flat_map(|s| s.fcs.iter().map(|f| f.est_us))
        .fold(0.0f64, f64::max);

    let base = SchedConfig::from_env().map_err(|e| e.to_string())?;
    let fg = |fps: f64, frames: usize| Load {
        model: cls.clone(),
        priority: 255,
        custom_id: 0,
        core_mask: 0,
        fps,
        threads: 1,
        frames,
        inputs: None,
    };
    // Each background task runs the detector on several frames in a row (one task, as
    // hbDNNInfer with `more`), so it is a long chain of short FCs a high-priority task can
    // overtake at any FC boundary.
    let bg_frames = DEMO_BG_FRAMES_PER_TASK;
    let bg = Load {
        model: det.clone(),
        priority: 0,
        custom_id: 0,
        core_mask: 0,
        fps: 0.0,
        threads: base.cores.max(1) + 1,
        frames: 0,
        inputs: None,
    };

    // Isolated latency of the classifier.
    let rt = Runtime::with_config(base.clone()).map_err(|e| e.to_string())?;
    let iso = perf::run_loads(&rt, &[fg(0.0, 200)], Duration::from_secs(60), |_| {});
    drop(rt);
    let iso_p50 = percentile(&iso[0].latency_us, 50.0);
    let iso_p99 = percentile(&iso[0].latency_us, 99.0);
    let mut rows = Vec::new();
    let mut trace_path = None;
    for limit in [0usize, 1] {
        let mut cfg = base.clone();
        cfg.core_limit = limit;
        let rt = Runtime::with_config(cfg).map_err(|e| e.to_string())?;
        if limit == 1 {
            rt.scheduler().trace_start();
        }
        let res = perf::run_loads_batched(
            &rt,
            &[fg(fps, 0), bg.clone()],
            &[1, bg_frames],
            Duration::from_secs_f64(secs),
            progress_bar(&format!("BPLAT_CORELIMIT={limit}")),
        );
        if limit == 1 {
            rt.scheduler().trace_stop();
            let p = out_dir.join("demo_trace.json");
            rt.scheduler()
                .dump_trace_to(&p)
                .map_err(|e| e.to_string())?;
            trace_path = Some(p);
        }
        for r in &res {
            if let Some(e) = &r.first_error {
                return Err(format!("demo task failed: {e}"));
            }
        }
        rows.push((limit, res));
    }
    let threads_used = base.cores + bg.threads + 1;
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| {
        l.split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
    });
    println!();
    println!(
        "vnpu demo: classifier (priority 255, {fps:.0} req/s, open loop: latency from the scheduled send time)"
    );
    println!(
        "  vs detector (priority 0, flat out, {} threads; each task = {bg_frames} frames = {} FCs)",
        bg.threads,
        bg_frames * det_fcs
    );
    println!(
        "detector: {det_fcs} FCs per frame, each estimated <= 1000 us (largest {det_fc_max:.0} us; max_time_per_fc 1000); classifier: {:.2} ms estimated",
        cls.compiled.est_us() / 1e3
    );
    println!(
        "host: {cpus} CPUs for {} virtual cores + {} submitting threads{}",
        base.cores,
        bg.threads + 1,
        match load {
            Some(l) => format!(", load average {l:.1}"),
            None => String::new(),
        }
    );
    if threads_used > cpus || load.is_some_and(|l| l > cpus as f64 * 0.8) {
        println!(
            "  note: the host is oversubscribed or busy; the cores' threads compete with other work for CPU time, \
             so all latencies below include waiting for a CPU (set VNPU_CORES lower or run on an idle machine)"
        );
    }
    println!(
        "BPLAT_CORELIMIT=0: no preemption, a priority-255 task waits for the background tasks on the cores to finish;"
    );
    println!(
        "BPLAT_CORELIMIT=1: it takes a core at the next FC boundary (background FCs are <= 1000 us)"
    );
    println!(
        "{:<26} {:>11} {:>11} {:>11} {:>13}",
        "setting", "cls p50 ms", "cls p99 ms", "cls max ms", "detector FPS"
    );
    println!(
        "{:<26} {:>11.3} {:>11.3} {:>11} {:>13}",
        "classifier alone",
        iso_p50 / 1e3,
        iso_p99 / 1e3,
        "-",
        "-"
    );
    for (limit, res) in &rows {
        let f = &res[0];
        println!(
            "{:<26} {:>11.3} {:>11.3} {:>11.3} {:>13.1}",
            format!("loaded, BPLAT_CORELIMIT={limit}"),
            percentile(&f.latency_us, 50.0) / 1e3,
            percentile(&f.latency_us, 99.0) / 1e3,
            percentile(&f.latency_us, 100.0) / 1e3,
            res[1].fps() * bg_frames as f64
        );
    }
    if let [(_, r0), (_, r1)] = &rows[..] {
        let (a, b) = (
            percentile(&r0[0].latency_us, 99.0),
            percentile(&r1[0].latency_us, 99.0),
        );
        if a > 0.0 && b > 0.0 {
            println!(
                "classifier p99: BPLAT_CORELIMIT=0 {:.3} ms -> BPLAT_CORELIMIT=1 {:.3} ms ({:.1}x {})",
                a / 1e3,
                b / 1e3,
                if b <= a { a / b } else { b / a },
                if b <= a { "lower" } else { "higher" }
            );
        }
    }
    if let Some(tp) = trace_path {
        let text = std::fs::read_to_string(&tp).map_err(|e| e.to_string())?;
        let (svg, overtake) = crate::timeline::render(&text, None)?;
        let svg_path = out_dir.join("demo_timeline.svg");
        std::fs::write(&svg_path, svg).map_err(|e| e.to_string())?;
        println!("trace (from the BPLAT_CORELIMIT=1 run): {}", tp.display());
        match overtake {
            Some((ms, label)) => println!(
                "timeline (same run, 20 ms centred on {ms:.1} ms: {label}): {}",
                svg_path.display()
            ),
            None => println!(
                "timeline (same run; no priority-255 FC overtook queued background work): {}",
                svg_path.display()
            ),
        }
    }
    Ok(())
}

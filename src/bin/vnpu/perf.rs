//! Load generation shared by `vnpu perf` and `vnpu demo`: closed-loop or open-loop
//! (fixed rate, latency from the scheduled time) submitters per model, with latency
//! percentiles split into pending (queue) and running time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu::runtime::{CtrlParams, IoBuffer, Model, ModelRequest, Runtime};

/// One model's load.
#[derive(Clone)]
pub struct Load {
    /// The model.
    pub model: Arc<Model>,
    /// Task priority.
    pub priority: u8,
    /// customId.
    pub custom_id: i64,
    /// Core mask (0 = any).
    pub core_mask: u32,
    /// Requests per second (0 = closed loop, as fast as possible).
    pub fps: f64,
    /// Submitting threads.
    pub threads: usize,
    /// Stop after this many frames per thread (0 = until the time is up).
    pub frames: usize,
    /// Input bytes per input (None = deterministic pattern).
    pub inputs: Option<Vec<Vec<u8>>>,
}

/// What one model's load measured.
#[derive(Debug, Default, Clone)]
pub struct LoadResult {
    /// End-to-end latencies in µs (from the scheduled time for open loop).
    pub latency_us: Vec<f64>,
    /// Queue (pending) times in µs.
    pub pending_us: Vec<f64>,
    /// Running times in µs.
    pub running_us: Vec<f64>,
    /// Completed tasks.
    pub frames: usize,
    /// Failed tasks.
    pub errors: usize,
    /// Wall time of the run in seconds.
    pub seconds: f64,
    /// First error message seen.
    pub first_error: Option<String>,
}

impl LoadResult {
    /// Frames per second.
    pub fn fps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.frames as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The p-th percentile (0..=100) of samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
}

/// Deterministic input bytes for a model.
pub fn pattern_inputs(m: &Model) -> Vec<Vec<u8>> {
    (0..m.inputs.len())
        .map(|i| {
            let n = m.plan.input_len(i);
            match m.inputs[i].elem {
                vnpu::runtime::ElemType::F32 => {
                    let v: Vec<f32> = (0..n / 4)
                        .map(|k| ((k * 37) % 255) as f32 / 255.0)
                        .collect();
                    bytemuck::cast_slice(&v).to_vec()
                }
                _ => (0..n).map(|k| (k * 37 % 251) as u8).collect(),
            }
        })
        .collect()
}

/// Runs one inference and returns (latency from `since`, pending, running) in µs.
/// `outputs` holds one set of output buffers per request: the task runs the model
/// `outputs.len() / model outputs` times in a row (several frames in one task, as
/// `hbDNNInfer` with `more`), all on the same inputs.
pub fn infer_once(
    rt: &Runtime,
    l: &Load,
    inputs: &mut [Vec<u8>],
    outputs: &mut [Vec<u8>],
    since: Instant,
) -> Result<(f64, f64, f64), String> {
    let per = l.model.outputs.len().max(1);
    let reqs: Vec<ModelRequest> = outputs
        .chunks_mut(per)
        .map(|outs| ModelRequest {
            model: l.model.clone(),
            inputs: inputs
                .iter_mut()
                .map(|b| vec![IoBuffer::from_slice(b)])
                .collect(),
            outputs: outs.iter_mut().map(|b| IoBuffer::from_slice(b)).collect(),
            rois: vec![],
        })
        .collect();
    let ctrl = CtrlParams {
        core_mask: l.core_mask,
        priority: l.priority,
        custom_id: l.custom_id,
    };
    let task = rt.submit(reqs, ctrl).map_err(|e| e.to_string())?;
    let r = task.wait(None);
    let lat = since.elapsed().as_secs_f64() * 1e6;
    let t = task.handle().timings();
    let _ = task.release();
    r.map_err(|e| e.to_string())?;
    Ok((
        lat,
        t.pending.as_secs_f64() * 1e6,
        t.running.as_secs_f64() * 1e6,
    ))
}

/// Runs all loads concurrently for `duration` (or until each thread did `frames`),
/// calling `progress(elapsed fraction)` about 10 times a second.
pub fn run_loads(
    rt: &Runtime,
    loads: &[Load],
    duration: Duration,
    progress: impl FnMut(f64),
) -> Vec<LoadResult> {
    run_loads_batched(rt, loads, &vec![1; loads.len()], duration, progress)
}

/// [`run_loads`] where each task of `loads[i]` runs its model `per_task[i]` times in a row
/// (several frames in one task).
pub fn run_loads_batched(
    rt: &Runtime,
    loads: &[Load],
    per_task: &[usize],
    duration: Duration,
    mut progress: impl FnMut(f64),
) -> Vec<LoadResult> {
    let stop = Arc::new(AtomicBool::new(false));
    let t_start = Instant::now();
    let results: Vec<LoadResult> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for (li, l) in loads.iter().enumerate() {
            let reps = per_task.get(li).copied().unwrap_or(1).max(1);
            let mut per_thread = Vec::new();
            for th in 0..l.threads.max(1) {
                let stop = stop.clone();
                per_thread.push(sc.spawn(move || {
                    let mut inputs = l.inputs.clone().unwrap_or_else(|| pattern_inputs(&l.model));
                    let n_out = l.model.outputs.len();
                    let mut outputs: Vec<Vec<u8>> = (0..n_out * reps)
                        .map(|i| vec![0u8; l.model.plan.output_len(i % n_out.max(1))])
                        .collect();
                    let mut r = LoadResult::default();
                    let period = if l.fps > 0.0 {
                        Some(Duration::from_secs_f64(l.threads.max(1) as f64 / l.fps))
                    } else {
                        None
                    };
                    // Spread open-loop threads over the period.
                    let mut next = Instant::now()
                        + period
                            .map(|p| p.mul_f64(th as f64 / l.threads.max(1) as f64))
                            .unwrap_or_default();
                    let t0 = Instant::now();
                    while !stop.load(Ordering::Relaxed)
                        && (l.frames == 0 || r.frames + r.errors < l.frames)
                    {
                        let since = match period {
                            Some(p) => {
                                let now = Instant::now();
                                if next > now {
                                    std::thread::sleep(next - now);
                                }
                                let s = next;
                                next += p;
                                s
                            }
                            None => Instant::now(),
                        };
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        match infer_once(rt, l, &mut inputs, &mut outputs, since) {
                            Ok((lat, pend, run)) => {
                                r.latency_us.push(lat);
                                r.pending_us.push(pend);
                                r.running_us.push(run);
                                r.frames += 1;
                            }
                            Err(e) => {
                                r.errors += 1;
                                r.first_error.get_or_insert(e);
                            }
                        }
                    }
                    r.seconds = t0.elapsed().as_secs_f64();
                    r
                }));
            }
            handles.push(per_thread);
        }
        let all_frames_bounded = loads.iter().all(|l| l.frames > 0);
        loop {
            let done = handles.iter().all(|hs| hs.iter().all(|h| h.is_finished()));
            let el = t_start.elapsed();
            if done {
                break;
            }
            if !all_frames_bounded && el >= duration {
                stop.store(true, Ordering::Relaxed);
            }
            progress((el.as_secs_f64() / duration.as_secs_f64().max(1e-9)).min(1.0));
            std::thread::sleep(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|hs| {
                let mut total = LoadResult::default();
                for h in hs {
                    let r = h.join().unwrap_or_default();
                    total.latency_us.extend(r.latency_us);
                    total.pending_us.extend(r.pending_us);
                    total.running_us.extend(r.running_us);
                    total.frames += r.frames;
                    total.errors += r.errors;
                    total.seconds = total.seconds.max(r.seconds);
                    if total.first_error.is_none() {
                        total.first_error = r.first_error;
                    }
                }
                total
            })
            .collect()
    });
    progress(1.0);
    results
}

/// Measured time per compiled node: runs the model `runs` times on this thread with a
/// profiling plan (same graph and kernels) and returns each node's mean µs per run.
pub fn profile_nodes(m: &Model, runs: usize) -> Result<Vec<f64>, String> {
    use vnpu::exec::{ModelPlan, PlanOptions};
    // The precision the model was loaded with, on one thread.
    let precision = m.plan.precision();
    let plan = ModelPlan::new(
        m.plan.graph().clone(),
        &PlanOptions {
            profile: true,
            precision,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut st = plan.new_state();
    let inputs = pattern_inputs(m);
    let run = |st: &mut vnpu::exec::ExecState| -> Result<(), String> {
        for (i, b) in inputs.iter().enumerate() {
            plan.set_input(st, i, b).map_err(|e| e.to_string())?;
        }
        plan.run_all(st).map_err(|e| e.to_string())
    };
    run(&mut st)?; // warm-up: caches, page faults
    plan.reset_profile(&mut st);
    let runs = runs.max(1);
    for _ in 0..runs {
        run(&mut st)?;
    }
    Ok(plan
        .profile(&st)
        .iter()
        .map(|t| t.micros / runs as f64)
        .collect())
}

//! Tasks: one inference submission bound to one or more models, executed by the
//! scheduler as a [`TaskBody`]: the models' segments in order, each FC a list of steps
//! of the compiled model run on that model's per-task execution state.
//!
//! Protocol of one model part: (1) the first step of its first segment takes an
//! `ExecState` from the model's pool and copies the inputs in; (2) every FC runs its
//! steps; (3) the last FC of its last segment copies the outputs out and returns the
//! state to the pool. FCs of one task never run concurrently (scheduler invariant), so
//! the per-part mutex is never contended.

use std::sync::Arc;

use parking_lot::Mutex;

use super::model::Model;
use crate::compile::Segment;
use crate::error::{Error, Result};
use crate::exec::ExecState;
use crate::ir::Placement;
use crate::sched::{Scheduler, SegmentInfo, SegmentKind, TaskBody, TaskCtrl, TaskHandle, TaskSlot};

/// Caller memory for one tensor plane (input or output). The caller guarantees the
/// memory stays valid (and, for outputs, untouched) until the task is done or released.
#[derive(Debug, Clone, Copy)]
pub struct IoBuffer {
    /// Start of the memory.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: an IoBuffer is a plain address range handed over by the caller for the life of
// a task (the hbDNN contract); the runtime reads inputs / writes outputs from one thread
// at a time.
unsafe impl Send for IoBuffer {}
// SAFETY: see `Send`; shared references only read the address and length.
unsafe impl Sync for IoBuffer {}

impl IoBuffer {
    /// A buffer over a Rust slice (for Rust callers and tests; the slice must outlive
    /// the task).
    pub fn from_slice(s: &mut [u8]) -> IoBuffer {
        IoBuffer {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
}

/// A region of interest in an image (inclusive bounds, as `hbDNNRoi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roi {
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
}

/// One model's part of a task: its inputs (one `Vec` of planes per input; NV12_SEPARATE
/// has two planes) and its outputs, already validated against the model by the caller
/// (`ffi`), and the ROIs for ROI inference.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The model.
    pub model: Arc<Model>,
    /// Planes of each input, in model input order (for ROI inference: the frame).
    pub inputs: Vec<Vec<IoBuffer>>,
    /// Each output's memory, in model output order (for ROI inference: room for one
    /// result per ROI, concatenated along N).
    pub outputs: Vec<IoBuffer>,
    /// ROIs (empty for plain inference).
    pub rois: Vec<Roi>,
}

/// Task control parameters (`hbDNNInferCtrlParam`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtrlParams {
    /// Allowed cores as a bit mask (bit k = core k); 0 = any.
    pub core_mask: u32,
    /// 0..=255, higher first; 255 = preemptive.
    pub priority: u8,
    /// Tie-break among equal priorities: smaller first.
    pub custom_id: i64,
}

/// Called once when a task ends, with its status code (0 on success).
pub type TaskDoneCallback = Box<dyn FnOnce(i32) + Send>;

/// Where a model part's input bytes come from.
enum InputSource {
    /// One caller plane, read in place.
    Caller(IoBuffer),
    /// Bytes gathered at submission (several planes, ROI crops).
    Owned(Vec<u8>),
}

/// One model of a task, with its execution state while it runs.
struct PartExec {
    model: Arc<Model>,
    inputs: Vec<InputSource>,
    outputs: Vec<IoBuffer>,
    state: Mutex<Option<ExecState>>,
}

/// The scheduler's view of a task: segments of all its models, in order.
struct InferBody {
    parts: Vec<PartExec>,
    segments: Vec<SegmentInfo>,
    /// For each task segment: (part index, segment index in that model).
    seg_map: Vec<(usize, usize)>,
    label: String,
}

/// A validated model part before submission.
struct PartSpec {
    model: Arc<Model>,
    inputs: Vec<InputSource>,
    outputs: Vec<IoBuffer>,
}

/// An NV12 frame in caller memory for ROI inference.
#[derive(Debug, Clone, Copy)]
pub struct RoiFrame {
    /// The Y plane.
    pub y: IoBuffer,
    /// The interleaved UV plane (may directly follow Y in the same buffer).
    pub uv: IoBuffer,
    /// Frame width in pixels.
    pub width: usize,
    /// Frame height in pixels.
    pub height: usize,
    /// Row stride of the Y plane in bytes.
    pub y_stride: usize,
    /// Row stride of the UV plane in bytes.
    pub uv_stride: usize,
}

/// Checks a plain request against its model and turns it into a part.
fn part_of(r: &ModelRequest) -> Result<PartSpec> {
    let m = &r.model;
    if !r.rois.is_empty() {
        return Err(Error::ApiUse(
            "ROI requests go through Runtime::submit_roi".into(),
        ));
    }
    if r.inputs.len() != m.inputs.len() || r.outputs.len() != m.outputs.len() {
        return Err(Error::InvalidArgument {
            name: "tensors".into(),
            reason: format!(
                "model '{}' takes {} inputs and {} outputs, got {} and {}",
                m.name,
                m.inputs.len(),
                m.outputs.len(),
                r.inputs.len(),
                r.outputs.len()
            ),
        });
    }
    let mut inputs = Vec::with_capacity(r.inputs.len());
    for (i, planes) in r.inputs.iter().enumerate() {
        let want = m.plan.input_len(i);
        let have: usize = planes.iter().map(|p| p.len).sum();
        if have < want || planes.iter().any(|p| p.ptr.is_null()) {
            return Err(Error::TensorMismatch {
                name: m.inputs[i].name.clone(),
                field: "byte size".into(),
                expected: want.to_string(),
                actual: have.to_string(),
            });
        }
        inputs.push(if planes.len() == 1 {
            InputSource::Caller(IoBuffer {
                ptr: planes[0].ptr,
                len: want,
            })
        } else {
            let mut v = Vec::with_capacity(want);
            for p in planes {
                // SAFETY: the caller guarantees each plane is readable for `len` bytes
                // (hbDNN contract, checked non-null above).
                let s = unsafe { std::slice::from_raw_parts(p.ptr, p.len) };
                let take = s.len().min(want - v.len());
                v.extend_from_slice(&s[..take]);
            }
            InputSource::Owned(v)
        });
    }
    check_outputs(m, &r.outputs)?;
    Ok(PartSpec {
        model: m.clone(),
        inputs,
        outputs: r.outputs.clone(),
    })
}

fn check_outputs(m: &Model, outputs: &[IoBuffer]) -> Result<()> {
    for (i, o) in outputs.iter().enumerate() {
        let want = crate::quant::io::boundary_bytes(&m.compiled.outputs[i]);
        if o.len < want || o.ptr.is_null() {
            return Err(Error::TensorMismatch {
                name: m.outputs[i].name.clone(),
                field: "byte size".into(),
                expected: want.to_string(),
                actual: o.len.to_string(),
            });
        }
    }
    Ok(())
}

impl InferBody {
    fn new(specs: Vec<PartSpec>) -> InferBody {
        let mut parts = Vec::with_capacity(specs.len());
        let mut segments = Vec::new();
        let mut seg_map = Vec::new();
        let mut labels: Vec<String> = Vec::new();
        for (pi, r) in specs.into_iter().enumerate() {
            let m = &r.model;
            for (si, s) in m.compiled.segments.iter().enumerate() {
                segments.push(segment_info(m, si, s));
                seg_map.push((pi, si));
            }
            if labels.last() != Some(&m.name) {
                labels.push(m.name.clone());
            }
            parts.push(PartExec {
                model: r.model,
                inputs: r.inputs,
                outputs: r.outputs,
                state: Mutex::new(None),
            });
        }
        let label = labels.join("+");
        InferBody {
            parts,
            segments,
            seg_map,
            label,
        }
    }

    /// Runs FC `fc` of task segment `seg`.
    fn run(&self, seg: usize, fc: usize) -> Result<()> {
        let (pi, si) = self.seg_map[seg];
        let part = &self.parts[pi];
        let m = &part.model;
        let segment = &m.compiled.segments[si];
        let mut guard = part.state.lock();
        if guard.is_none() {
            let mut st = m.take_state();
            for (i, src) in part.inputs.iter().enumerate() {
                let bytes: &[u8] = match src {
                    // SAFETY: the caller guarantees the input memory is readable for `len`
                    // bytes until the task ends (hbDNN contract; length checked at submit).
                    InputSource::Caller(b) => unsafe { std::slice::from_raw_parts(b.ptr, b.len) },
                    InputSource::Owned(v) => v,
                };
                m.plan.set_input(&mut st, i, bytes)?;
            }
            *guard = Some(st);
        }
        let st = guard.as_mut().expect("state set above");
        for step in &segment.fcs[fc].steps {
            crate::exec::pool::node_boundary();
            m.plan.run_node(st, step.node, step.exec_tile())?;
        }
        let last = si + 1 == m.compiled.segments.len() && fc + 1 == segment.fcs.len();
        if last {
            let st = guard.take().expect("state present");
            for (i, o) in part.outputs.iter().enumerate() {
                // SAFETY: the caller guarantees the output memory is writable for `len`
                // bytes and not accessed until the task ends (hbDNN contract).
                let out = unsafe { std::slice::from_raw_parts_mut(o.ptr, o.len) };
                let n = crate::quant::io::boundary_bytes(&m.compiled.outputs[i]);
                crate::quant::io::read_output(&m.compiled, &m.plan, &st, i, &mut out[..n])?;
            }
            m.put_state(st);
        }
        Ok(())
    }
}

fn segment_info(m: &Model, si: usize, s: &Segment) -> SegmentInfo {
    let key = (m.id, si);
    match s.kind {
        Placement::Bpu => SegmentInfo {
            kind: SegmentKind::Bpu,
            fc_est_us: s
                .fcs
                .iter()
                .map(|f| f.est_us.round().max(1.0) as u64)
                .collect(),
            estimator_key: key,
        },
        Placement::Cpu => SegmentInfo {
            kind: SegmentKind::Cpu,
            fc_est_us: vec![s.est_us().round().max(1.0) as u64],
            estimator_key: key,
        },
    }
}

impl TaskBody for InferBody {
    fn segments(&self) -> &[SegmentInfo] {
        &self.segments
    }

    fn run_cpu_segment(&self, seg: usize) -> Result<()> {
        self.run(seg, 0)
    }

    fn run_fc(&self, seg: usize, fc: usize) -> Result<()> {
        self.run(seg, fc)
    }

    fn label(&self) -> &str {
        &self.label
    }
}

fn task_ctrl(ctrl: CtrlParams) -> TaskCtrl {
    TaskCtrl {
        core_mask: ctrl.core_mask,
        priority: ctrl.priority,
        custom_id: ctrl.custom_id,
    }
}

/// A submitted task.
pub struct Task {
    handle: TaskHandle,
}

impl Task {
    /// Blocks until the task ends (`None` = no limit). A timeout leaves the task intact.
    pub fn wait(&self, timeout_ms: Option<u64>) -> Result<()> {
        self.handle
            .wait(timeout_ms.map(std::time::Duration::from_millis))
    }

    /// Registers the callback run when the task ends (at once if it already has); false
    /// (and `cb` dropped) when the task's callback already fired.
    pub fn set_done_callback(&self, cb: TaskDoneCallback) -> bool {
        self.handle.set_done_callback(cb)
    }

    /// Releases the task: a queued task is cancelled, a running one is freed when it ends.
    pub fn release(&self) -> Result<()> {
        self.handle.release()
    }

    /// Estimated remaining time in microseconds.
    pub fn estimate_time_us(&self) -> u64 {
        self.handle.estimate_time_us()
    }

    /// The scheduler's handle (timings, status).
    pub fn handle(&self) -> &TaskHandle {
        &self.handle
    }
}

/// The process-wide runtime: scheduler, cores, CPU pool.
pub struct Runtime {
    sched: Arc<Scheduler>,
}

static GLOBAL: once_cell::sync::OnceCell<Runtime> = once_cell::sync::OnceCell::new();

/// Writes the global runtime's trace to `VNPU_TRACE` (registered with `atexit`).
extern "C" fn dump_global_trace() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(rt) = GLOBAL.get() {
            if let Err(e) = rt.sched.dump_trace() {
                eprintln!("vnpu: warning: cannot write the trace: {e}");
            }
        }
    });
}

impl Runtime {
    /// The process-wide runtime, created on first use from the environment.
    pub fn global() -> Result<&'static Runtime> {
        GLOBAL.get_or_try_init(|| {
            let cfg = crate::config::start_runtime()?;
            let tracing = cfg.trace_path.is_some();
            let rt = Runtime {
                sched: Scheduler::new(cfg)?,
            };
            if tracing {
                // The global runtime is never dropped: write `VNPU_TRACE` at process exit.
                // SAFETY: registers a plain `extern "C"` function without arguments.
                unsafe { libc::atexit(dump_global_trace) };
            }
            Ok(rt)
        })
    }

    /// A private runtime with its own cores (tests, benchmarks, the demo).
    pub fn with_config(cfg: crate::sched::SchedConfig) -> Result<Runtime> {
        Ok(Runtime {
            sched: Scheduler::new(cfg)?,
        })
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }

    /// Submits a task made of one or more model requests.
    pub fn submit(&self, parts: Vec<ModelRequest>, ctrl: CtrlParams) -> Result<Arc<Task>> {
        if parts.is_empty() {
            return Err(Error::ApiUse("a task needs at least one model".into()));
        }
        if parts.len() > 255 {
            return Err(Error::TaskBatchLimit { limit: 255 });
        }
        let specs = parts.iter().map(part_of).collect::<Result<Vec<_>>>()?;
        self.submit_parts(specs, ctrl)
    }

    fn submit_parts(&self, specs: Vec<PartSpec>, ctrl: CtrlParams) -> Result<Arc<Task>> {
        let body = Arc::new(InferBody::new(specs));
        let handle = self.sched.submit(body, task_ctrl(ctrl))?;
        Ok(Arc::new(Task { handle }))
    }

    /// Submits a task into a slot reserved with `Scheduler::reserve`, with its done
    /// callback registered before it can start. On failure the slot comes back.
    pub fn submit_reserved(
        &self,
        parts: Vec<ModelRequest>,
        ctrl: CtrlParams,
        slot: TaskSlot,
        on_done: TaskDoneCallback,
    ) -> std::result::Result<Arc<Task>, (Error, TaskSlot)> {
        if parts.is_empty() {
            return Err((
                Error::ApiUse("a task needs at least one model".into()),
                slot,
            ));
        }
        let specs = match parts.iter().map(part_of).collect::<Result<Vec<_>>>() {
            Ok(s) => s,
            Err(e) => return Err((e, slot)),
        };
        let body = Arc::new(InferBody::new(specs));
        let handle = self
            .sched
            .submit_reserved(body, task_ctrl(ctrl), slot, Some(on_done))?;
        Ok(Arc::new(Task { handle }))
    }

    /// ROI inference: crops each ROI (inclusive bounds) from the NV12 `frame`, resizes it
    /// bilinearly to the model's NV12 input, and runs the model once per ROI inside one
    /// task. `outputs[i]` holds room for every ROI's result of output `i`, concatenated
    /// along N (ROI k at offset `k * output_len(i)`).
    pub fn submit_roi(
        &self,
        model: &Arc<Model>,
        frame: RoiFrame,
        rois: &[Roi],
        outputs: &[IoBuffer],
        ctrl: CtrlParams,
    ) -> Result<Arc<Task>> {
        use super::roi::{crop_resize, Nv12Frame, RoiOutput};
        use super::ElemType;
        if rois.is_empty() || rois.len() > 255 {
            return Err(Error::InvalidArgument {
                name: "roiCount".into(),
                reason: format!("{} ROIs; use 1..=255", rois.len()),
            });
        }
        let d = model
            .inputs
            .first()
            .ok_or_else(|| Error::ApiUse("model has no input".into()))?;
        let kind = match d.elem {
            ElemType::ImgNv12 | ElemType::ImgNv12Separate => RoiOutput::Nv12,
            ElemType::ImgY => RoiOutput::Y,
            _ => {
                return Err(Error::ApiUse(format!(
                    "model '{}' does not take an NV12/Y image input; ROI inference needs one (compile with --input-type-rt nv12)",
                    model.name
                )))
            }
        };
        if model.inputs.len() != 1 || outputs.len() != model.outputs.len() {
            return Err(Error::InvalidArgument {
                name: "tensors".into(),
                reason: format!(
                    "ROI inference needs a one-input model and {} outputs",
                    model.outputs.len()
                ),
            });
        }
        let (h, w) = (d.valid_shape[2] as usize, d.valid_shape[3] as usize);
        if frame.y.ptr.is_null() || frame.uv.ptr.is_null() {
            return Err(Error::InvalidArgument {
                name: "input".into(),
                reason: "frame memory is null".into(),
            });
        }
        // SAFETY: the caller guarantees the frame planes are readable for their lengths
        // (hbDNN contract; checked non-null above). Only read during this call.
        let (y, uv) = unsafe {
            (
                std::slice::from_raw_parts(frame.y.ptr, frame.y.len),
                std::slice::from_raw_parts(frame.uv.ptr, frame.uv.len),
            )
        };
        let f = Nv12Frame::new(
            y,
            uv,
            frame.width,
            frame.height,
            frame.y_stride,
            frame.uv_stride,
        )?;
        let mut specs = Vec::with_capacity(rois.len());
        for (k, roi) in rois.iter().enumerate() {
            let mut buf = vec![0u8; kind.byte_size(w, h)];
            crop_resize(&f, roi, kind, w, h, &mut buf).map_err(|e| match e {
                Error::InvalidArgument { name, reason } => Error::InvalidArgument {
                    name: format!("rois[{k}] ({name})"),
                    reason,
                },
                other => other,
            })?;
            let outs = (0..outputs.len())
                .map(|i| {
                    let n = crate::quant::io::boundary_bytes(&model.compiled.outputs[i]);
                    let o = outputs[i];
                    if o.ptr.is_null() || o.len < n * rois.len() {
                        return Err(Error::TensorMismatch {
                            name: model.outputs[i].name.clone(),
                            field: "byte size".into(),
                            expected: format!("{} ({} ROIs x {n})", n * rois.len(), rois.len()),
                            actual: o.len.to_string(),
                        });
                    }
                    Ok(IoBuffer {
                        // SAFETY: in bounds: k * n + n <= rois.len() * n <= o.len.
                        ptr: unsafe { o.ptr.add(k * n) },
                        len: n,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            specs.push(PartSpec {
                model: model.clone(),
                inputs: vec![InputSource::Owned(buf)],
                outputs: outs,
            });
        }
        self.submit_parts(specs, ctrl)
    }
}

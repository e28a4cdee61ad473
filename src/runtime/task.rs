//! Tasks: one inference submission bound to one or more models.

use std::sync::Arc;

use super::model::Model;
use crate::error::{Error, Result};

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
    /// Planes of each input, in model input order (for ROI inference: batch groups).
    pub inputs: Vec<Vec<IoBuffer>>,
    /// Each output's memory, in model output order.
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

/// A submitted task.
pub struct Task {}

impl Task {
    /// Blocks until the task ends (`None` = no limit). A timeout leaves the task intact.
    pub fn wait(&self, timeout_ms: Option<u64>) -> Result<()> {
        let _ = timeout_ms;
        Err(Error::ApiUse("tasks are not built yet".into()))
    }

    /// Registers the callback run when the task ends (at once if it already has).
    pub fn set_done_callback(&self, cb: TaskDoneCallback) -> Result<()> {
        let _ = cb;
        Err(Error::ApiUse("tasks are not built yet".into()))
    }

    /// Releases the task: a queued task is cancelled, a running one is freed when it ends.
    pub fn release(&self) {}

    /// Estimated remaining time in microseconds.
    pub fn estimate_time_us(&self) -> u64 {
        0
    }
}

/// The process-wide runtime: scheduler, cores, CPU pool.
pub struct Runtime {}

impl Runtime {
    /// The process-wide runtime, created on first use from the environment.
    pub fn global() -> Result<&'static Runtime> {
        Err(Error::ApiUse("the runtime is not built yet".into()))
    }

    /// Submits a task made of one or more model requests.
    pub fn submit(&self, parts: Vec<ModelRequest>, ctrl: CtrlParams) -> Result<Arc<Task>> {
        let _ = (parts, ctrl);
        Err(Error::ApiUse("the runtime is not built yet".into()))
    }
}

//! Where the C API's work goes: the in-process runtime (the embedded default) or a vnpu
//! daemon (service mode, `VNPU_SERVICE=PATH`).
//!
//! This is the one place the choice is made. [`engine`] picks the process's [`Engine`]
//! once, at the first call that needs it, from the `VNPU_SERVICE` setting (read through
//! [`crate::config`], so `vnpuSetConfig` before the first call works too). The exports
//! never test the mode themselves:
//! - loads go through [`Engine::load_files`] / [`Engine::load_bytes`], which return the
//!   pack's [`ModelTarget`]s (a model in this process or in the daemon);
//! - `hbSysAlloc*` memory comes from [`Engine::alloc`] (heap in process, a memory file
//!   shared with the daemon in service mode);
//! - a task is assembled by the [`Assembly`] the engine hands out and runs as a
//!   [`Submitted`] task; both dispatch to the runtime or to the daemon.
//!
//! Set but unreachable is an error naming the socket (`HB_DNN_MULTI_PROGRESS_USE_ERROR`)
//! on every call that needs the daemon; nothing falls back to private cores.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use once_cell::sync::Lazy;

use crate::error::{Error, Result};
use crate::ffi::handles::Completion;
use crate::ffi::remote::{Remote, RemoteBuilder, RemoteModel, RemoteTask};
use crate::runtime::{
    mem, CtrlParams, IoBuffer, Model, ModelRequest, PackedModel, Runtime, Task, TaskBuilder,
    TensorDesc,
};

/// The process's choice: in-process runtime or a daemon.
pub(crate) enum Engine {
    /// The embedded runtime (`Runtime::global`).
    Local,
    /// The daemon at a socket.
    Remote(Remote),
}

static ENGINE: Lazy<Engine> =
    Lazy::new(
        || match crate::config::lookup("VNPU_SERVICE").filter(|p| !p.trim().is_empty()) {
            Some(p) => Engine::Remote(Remote::new(PathBuf::from(p))),
            None => Engine::Local,
        },
    );

/// The engine of this process (chosen at the first call).
pub(crate) fn engine() -> &'static Engine {
    &ENGINE
}

/// The service socket when this process runs in service mode.
pub fn service_socket() -> Option<&'static Path> {
    match engine() {
        Engine::Local => None,
        Engine::Remote(r) => Some(r.socket()),
    }
}

/// Bytes this process copied through staging buffers to reach the daemon (memory that
/// is not `hbSysAlloc*` memory); 0 in process. Memory from `hbSysAllocMem` /
/// `hbSysAllocCachedMem` is never staged, so a run on it leaves this unchanged.
pub fn service_staged_bytes() -> u64 {
    match engine() {
        Engine::Local => 0,
        Engine::Remote(r) => r.staged_bytes(),
    }
}

/// A loaded pack: what keeps it alive and its models in order.
pub(crate) struct Loaded {
    pub(crate) keep: Box<dyn Any + Send + Sync>,
    pub(crate) models: Vec<ModelTarget>,
}

impl Loaded {
    /// An in-process pack.
    pub(crate) fn local(p: PackedModel) -> Loaded {
        Loaded {
            models: p.models.iter().cloned().map(ModelTarget::Local).collect(),
            keep: Box::new(p),
        }
    }
}

/// Where a model lives.
#[derive(Clone)]
pub(crate) enum ModelTarget {
    /// In this process.
    Local(Arc<Model>),
    /// In the daemon.
    Remote(Arc<RemoteModel>),
}

impl ModelTarget {
    /// The model's name.
    pub(crate) fn name(&self) -> &str {
        match self {
            ModelTarget::Local(m) => &m.name,
            ModelTarget::Remote(m) => &m.info.name,
        }
    }

    /// Its inputs.
    pub(crate) fn inputs(&self) -> &[TensorDesc] {
        match self {
            ModelTarget::Local(m) => &m.inputs,
            ModelTarget::Remote(m) => &m.info.inputs,
        }
    }

    /// Its outputs.
    pub(crate) fn outputs(&self) -> &[TensorDesc] {
        match self {
            ModelTarget::Local(m) => &m.outputs,
            ModelTarget::Remote(m) => &m.info.outputs,
        }
    }

    /// Latency estimate in µs (in the daemon: the compiler's estimate at load).
    pub(crate) fn estimate_latency_us(&self) -> u64 {
        match self {
            ModelTarget::Local(m) => m.estimate_latency_us(),
            ModelTarget::Remote(m) => m.info.estimate_us,
        }
    }
}

/// One model of a task, with its caller buffers (checked against the model).
pub(crate) struct Part {
    pub(crate) model: ModelTarget,
    pub(crate) inputs: Vec<Vec<IoBuffer>>,
    pub(crate) outputs: Vec<IoBuffer>,
}

impl Engine {
    /// Loads model files as one pack.
    pub(crate) fn load_files(&self, paths: &[PathBuf]) -> Result<Loaded> {
        match self {
            Engine::Local => PackedModel::load_files(paths).map(Loaded::local),
            Engine::Remote(r) => r.load_files(paths),
        }
    }

    /// Loads model bytes as one pack.
    pub(crate) fn load_bytes(&self, blobs: &[&[u8]]) -> Result<Loaded> {
        match self {
            Engine::Local => PackedModel::load_bytes(blobs).map(Loaded::local),
            Engine::Remote(r) => r.load_bytes(blobs),
        }
    }

    /// `hbSysAlloc*` memory (zeroed).
    pub(crate) fn alloc(&self, size: usize, cached: bool) -> Result<*mut u8> {
        match self {
            Engine::Local => mem::alloc(size, cached),
            Engine::Remote(r) => r.alloc(size),
        }
    }

    /// Frees `hbSysAlloc*` memory.
    pub(crate) fn free(&self, p: *mut u8) -> Result<()> {
        match self {
            Engine::Local => mem::free(p),
            Engine::Remote(r) => r.free(p),
        }
    }

    /// An empty task assembly.
    pub(crate) fn assembly(&self) -> Assembly {
        match self {
            Engine::Local => Assembly::Local(TaskBuilder::new()),
            Engine::Remote(_) => Assembly::Remote(RemoteBuilder::default()),
        }
    }
}

/// A task being assembled (`more = 1`).
pub(crate) enum Assembly {
    /// By the runtime's builder.
    Local(TaskBuilder),
    /// For the daemon.
    Remote(RemoteBuilder),
}

impl Assembly {
    /// Takes the assembly out, leaving an empty one of the same kind.
    pub(crate) fn take(&mut self) -> Assembly {
        match self {
            Assembly::Local(b) => Assembly::Local(std::mem::take(b)),
            Assembly::Remote(b) => Assembly::Remote(std::mem::take(b)),
        }
    }

    /// Adds `parts` (pointing into `owned`) and, unless `more`, submits the task; its end
    /// is reported to `completion` under `token`. `Ok(None)` while assembling. A failing
    /// call leaves the assembly as it was.
    pub(crate) fn add(
        &mut self,
        parts: Vec<Part>,
        owned: Vec<Box<[u8]>>,
        more: bool,
        ctrl: CtrlParams,
        token: usize,
        completion: &Arc<Completion>,
    ) -> Result<Option<Submitted>> {
        match self {
            Assembly::Local(b) => {
                let rt = Runtime::global()?;
                let reqs = parts
                    .into_iter()
                    .map(|p| match p.model {
                        ModelTarget::Local(model) => Ok(ModelRequest {
                            model,
                            inputs: p.inputs,
                            outputs: p.outputs,
                            rois: Vec::new(),
                        }),
                        ModelTarget::Remote(_) => Err(Error::ApiUse(
                            "a model of the vnpu daemon in an in-process task".into(),
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let c = completion.clone();
                let on_done = Box::new(move |status| c.finish(token, status));
                Ok(b.add(rt, reqs, owned, more, ctrl, on_done)?
                    .map(Submitted::Local))
            }
            Assembly::Remote(b) => {
                let Engine::Remote(r) = engine() else {
                    return Err(Error::ApiUse(
                        "a service-mode task in a process without VNPU_SERVICE".into(),
                    ));
                };
                Ok(b.add(r, parts, owned, more, ctrl, token, completion)?
                    .map(Submitted::Remote))
            }
        }
    }
}

/// A submitted task.
#[derive(Clone)]
pub(crate) enum Submitted {
    /// Runs in the in-process runtime.
    Local(Arc<Task>),
    /// Runs in the daemon.
    Remote(Arc<RemoteTask>),
}

impl Submitted {
    /// Waits for the end (`None` = no limit); `Ok` when it succeeded, else its status.
    pub(crate) fn wait(&self, timeout_ms: Option<u64>) -> Result<()> {
        match self {
            Submitted::Local(t) => t.wait(timeout_ms),
            Submitted::Remote(t) => t.wait(timeout_ms),
        }
    }

    /// Releases the task (cancels it if queued; waits for a running FC).
    pub(crate) fn release(&self) -> Result<()> {
        match self {
            Submitted::Local(t) => t.release(),
            Submitted::Remote(t) => t.release(),
        }
    }

    /// Estimated remaining time in µs.
    pub(crate) fn estimate_time_us(&self) -> u64 {
        match self {
            Submitted::Local(t) => t.estimate_time_us(),
            Submitted::Remote(t) => t.estimate_time_us(),
        }
    }

    /// A done callback was registered: make sure its end gets noticed without a wait.
    pub(crate) fn callback_registered(&self) {
        match self {
            Submitted::Local(_) => {}
            Submitted::Remote(t) => t.watch(),
        }
    }
}

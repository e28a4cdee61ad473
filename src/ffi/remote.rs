//! Service mode behind the C API: packs, memory and tasks that live in the vnpu daemon.
//!
//! - The session ([`Client`]) is opened at the first call that needs it and kept for the
//!   life of the process; connecting again is tried on the next call while it fails.
//! - `hbSysAlloc*` memory is a memory file mapped here and in the daemon: tensors in it
//!   are passed by reference ([`BufRef`]) and never copied.
//! - Any other memory (stack, heap, ROI crops) is *staged*: inputs are copied into a
//!   shared staging buffer when the model is added to the task, outputs copied back from
//!   it when the task's end is observed (by a wait or by the callback watcher), before
//!   the wait returns or the callback runs. Staging buffers are pooled per process.
//! - The end of a task is observed in its end slot (shared memory the daemon writes, see
//!   [`Client`]) by `hbDNNWaitTaskDone`, or, once a done callback is registered, by a
//!   watcher thread that waits for it and runs the callback (callbacks of all tasks run
//!   one at a time).
//! - Release: a task whose end was observed is forgotten without a message of its own
//!   (nothing can touch its memory any more; the daemon hears of it with the next
//!   submission); otherwise the release is a round trip, so that the FC in flight has
//!   finished when it returns, as in process.
//! - A task assembled with `more = 1` reserves room under the daemon's per-client task
//!   limit at its first part, as the in-process builder reserves a slot; the reservation
//!   is given back if the assembly is released unsubmitted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::codes::{HB_DNN_INVALID_TASK_HANDLE, HB_DNN_TIMEOUT};
use crate::error::{Error, Result};
use crate::ffi::engine::{Loaded, ModelTarget, Part};
use crate::ffi::handles::Completion;
use crate::runtime::{CtrlParams, IoBuffer, MAX_MODELS_PER_TASK};
use crate::service::wire::{BufRef, ModelInfo, ModelRef};
use crate::service::{Client, RemotePart, RemoteTask as TaskId, SharedRegion};

/// Staging buffers kept for reuse.
const STAGING_KEPT: usize = 8;
/// Staging buffers are allocated in multiples of this.
const STAGING_UNIT: usize = 64 * 1024;
/// Alignment of each staged tensor.
const STAGE_ALIGN: usize = 64;

/// The daemon side of this process.
pub(crate) struct Remote {
    socket: PathBuf,
    client: Mutex<Option<Arc<Client>>>,
    /// `hbSysAlloc*` memory by start address.
    regions: Mutex<BTreeMap<usize, Arc<SharedRegion>>>,
    staging: Mutex<Vec<SharedRegion>>,
}

/// A pack held by the daemon; released there when the last model handle or task using
/// it is gone.
pub(crate) struct RemotePack {
    client: Arc<Client>,
    id: u64,
}

impl Drop for RemotePack {
    fn drop(&mut self) {
        let _ = self.client.release_pack(self.id);
    }
}

/// A model of a pack held by the daemon.
pub(crate) struct RemoteModel {
    pack: Arc<RemotePack>,
    index: u32,
    pub(crate) info: ModelInfo,
}

impl Remote {
    /// The daemon at `socket` (not contacted yet).
    pub(crate) fn new(socket: PathBuf) -> Remote {
        Remote {
            socket,
            client: Mutex::new(None),
            regions: Mutex::new(BTreeMap::new()),
            staging: Mutex::new(Vec::new()),
        }
    }

    /// The socket path.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// The session, opened on first use.
    fn client(&self) -> Result<Arc<Client>> {
        let mut c = self.client.lock();
        if let Some(c) = &*c {
            return Ok(c.clone());
        }
        let new = Client::connect(&self.socket)?;
        *c = Some(new.clone());
        Ok(new)
    }

    /// Bytes copied through staging buffers so far.
    pub(crate) fn staged_bytes(&self) -> u64 {
        self.client.lock().as_ref().map_or(0, |c| c.staged_bytes())
    }

    fn loaded(&self, client: Arc<Client>, pack: crate::service::RemotePack) -> Loaded {
        let keep = Arc::new(RemotePack {
            client,
            id: pack.id,
        });
        let models = pack
            .models
            .into_iter()
            .enumerate()
            .map(|(i, info)| {
                ModelTarget::Remote(Arc::new(RemoteModel {
                    pack: keep.clone(),
                    index: i as u32,
                    info,
                }))
            })
            .collect();
        Loaded {
            keep: Box::new(keep),
            models,
        }
    }

    /// Loads model files: the daemon gets their descriptors, never their paths.
    pub(crate) fn load_files(&self, paths: &[PathBuf]) -> Result<Loaded> {
        let client = self.client()?;
        let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let pack = client.load_files(&refs)?;
        Ok(self.loaded(client, pack))
    }

    /// Loads model bytes (passed as sealed memory files).
    pub(crate) fn load_bytes(&self, blobs: &[&[u8]]) -> Result<Loaded> {
        let client = self.client()?;
        let pack = client.load_bytes(blobs)?;
        Ok(self.loaded(client, pack))
    }

    /// `hbSysAlloc*`: a memory file shared with the daemon.
    pub(crate) fn alloc(&self, size: usize) -> Result<*mut u8> {
        if size == 0 {
            return Err(Error::SysInvalidArgument("size must be > 0".into()));
        }
        let region = self.client()?.alloc_shared(size)?;
        let p = region.ptr();
        self.regions.lock().insert(p as usize, Arc::new(region));
        Ok(p)
    }

    /// Frees `hbSysAlloc*` memory (the daemon keeps its mapping while a task uses it).
    pub(crate) fn free(&self, p: *mut u8) -> Result<()> {
        match self.regions.lock().remove(&(p as usize)) {
            Some(_) => Ok(()),
            None => Err(Error::SysInvalidArgument(format!(
                "{p:p} was not allocated by hbSysAllocMem/hbSysAllocCachedMem or was already \
                 freed"
            ))),
        }
    }

    /// The shared-memory reference of `b` when it lies in `hbSysAlloc*` memory.
    fn zero_copy(&self, b: &IoBuffer) -> Option<BufRef> {
        let addr = b.ptr as usize;
        let regions = self.regions.lock();
        let (&start, r) = regions.range(..=addr).next_back()?;
        r.buf(addr - start, b.len).ok()
    }

    /// A staging buffer of at least `need` bytes.
    fn stage(&self, client: &Arc<Client>, need: usize) -> Result<SharedRegion> {
        {
            let mut pool = self.staging.lock();
            if let Some(i) = (0..pool.len())
                .filter(|&i| pool[i].len() >= need)
                .min_by_key(|&i| pool[i].len())
            {
                return Ok(pool.swap_remove(i));
            }
        }
        client.alloc_shared(need.div_ceil(STAGING_UNIT) * STAGING_UNIT)
    }

    /// Returns staging buffers no task uses any more.
    fn recycle(&self, regions: Vec<SharedRegion>) {
        let mut pool = self.staging.lock();
        for r in regions {
            if pool.len() < STAGING_KEPT {
                pool.push(r);
            }
        }
    }
}

/// An output copied back from staging when the task ends.
struct CopyOut {
    dst: *mut u8,
    src: *const u8,
    len: usize,
}

// SAFETY: `dst` is caller memory the hbDNN contract keeps valid until the task ends or is
// released (the copy happens under the task's lock, never after release); `src` points
// into a staging buffer owned by the same task.
unsafe impl Send for CopyOut {}

/// A task for the daemon being assembled.
#[derive(Default)]
pub(crate) struct RemoteBuilder {
    parts: Vec<RemotePart>,
    models: Vec<ModelTarget>,
    copy_out: Vec<CopyOut>,
    staging: Vec<SharedRegion>,
    /// Room reserved under the daemon's task limit (`more = 1`), and its session.
    reserved: Option<(Arc<Client>, u64)>,
}

impl Drop for RemoteBuilder {
    fn drop(&mut self) {
        // An assembly released before its submission gives its room back.
        if let Some((client, id)) = self.reserved.take() {
            let _ = client.unreserve(id);
        }
    }
}

fn align(n: usize) -> usize {
    n.div_ceil(STAGE_ALIGN) * STAGE_ALIGN
}

impl RemoteBuilder {
    /// As [`crate::ffi::engine::Assembly::add`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        remote: &'static Remote,
        parts: Vec<Part>,
        owned: Vec<Box<[u8]>>,
        more: bool,
        ctrl: CtrlParams,
        token: usize,
        completion: &Arc<Completion>,
    ) -> Result<Option<Arc<RemoteTask>>> {
        if self.parts.len() + parts.len() > MAX_MODELS_PER_TASK {
            return Err(Error::TaskBatchLimit {
                limit: MAX_MODELS_PER_TASK,
            });
        }
        let client = remote.client()?;
        if more && self.reserved.is_none() {
            self.reserved = Some((client.clone(), client.reserve()?));
        }
        // Which buffers are shared memory, and where the others go in staging.
        let mut plan = Vec::new();
        let mut staged = 0usize;
        for p in &parts {
            for b in p.inputs.iter().flatten().chain(&p.outputs) {
                match remote.zero_copy(b) {
                    Some(r) => plan.push(Ok(r)),
                    None => {
                        plan.push(Err(staged));
                        staged += align(b.len);
                    }
                }
            }
        }
        let mut region = match staged {
            0 => None,
            n => Some(remote.stage(&client, n)?),
        };
        let kept = (self.parts.len(), self.models.len(), self.copy_out.len());
        let mut plan = plan.into_iter();
        let mut placed = |b: &IoBuffer, input: bool, out: &mut Vec<CopyOut>| -> Result<BufRef> {
            match plan.next() {
                Some(Ok(r)) => Ok(r),
                Some(Err(off)) => {
                    let Some(reg) = region.as_mut() else {
                        return Err(Error::ApiUse("staging buffer missing".into()));
                    };
                    let at = reg.ptr().wrapping_add(off);
                    if input {
                        // SAFETY: `b` is caller memory valid for `b.len` bytes (checked
                        // against its tensor); `at..at+len` lies inside the staging region
                        // (sized from the same lengths) and does not overlap it.
                        unsafe { std::ptr::copy_nonoverlapping(b.ptr, at, b.len) };
                    } else {
                        out.push(CopyOut {
                            dst: b.ptr,
                            src: at,
                            len: b.len,
                        });
                    }
                    client.note_staged(b.len);
                    reg.buf(off, b.len)
                }
                None => Err(Error::ApiUse("buffer plan out of step".into())),
            }
        };
        let mut copy_out = Vec::new();
        let mut new_parts = Vec::with_capacity(parts.len());
        let mut new_models = Vec::with_capacity(parts.len());
        for p in parts {
            let m = match &p.model {
                ModelTarget::Remote(m) if Arc::ptr_eq(&m.pack.client, &client) => m.clone(),
                ModelTarget::Remote(_) => {
                    return Err(Error::InvalidModelHandle(
                        "the model was loaded in an earlier session with the daemon".into(),
                    ))
                }
                ModelTarget::Local(_) => {
                    return Err(Error::ApiUse(
                        "an in-process model (not loaded through VNPU_SERVICE) in a \
                         service-mode task"
                            .into(),
                    ))
                }
            };
            let inputs = p
                .inputs
                .iter()
                .map(|planes| {
                    planes
                        .iter()
                        .map(|b| placed(b, true, &mut copy_out))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            let outputs = p
                .outputs
                .iter()
                .map(|b| placed(b, false, &mut copy_out))
                .collect::<Result<Vec<_>>>()?;
            new_parts.push(RemotePart {
                model: ModelRef {
                    pack: m.pack.id,
                    index: m.index,
                },
                inputs,
                outputs,
            });
            new_models.push(p.model);
        }
        // Inputs are in staging or shared memory now; ROI crops are no longer needed.
        drop(owned);
        self.parts.extend(new_parts);
        self.models.extend(new_models);
        self.copy_out.extend(copy_out);
        let had_region = region.is_some();
        self.staging.extend(region);
        if more {
            return Ok(None);
        }
        let estimate_us = self.models.iter().map(|m| m.estimate_latency_us()).sum();
        let reservation = self.reserved.as_ref().map_or(0, |r| r.1);
        match client.submit_reserved(&self.parts, ctrl, reservation) {
            Ok(id) => {
                // The reservation became the task.
                self.reserved = None;
                let mut b = std::mem::take(self);
                let task = Arc::new(RemoteTask {
                    remote,
                    client,
                    id,
                    estimate_us,
                    token,
                    completion: completion.clone(),
                    watched: AtomicBool::new(false),
                    reported: AtomicBool::new(false),
                    st: Mutex::new(RemoteState {
                        status: None,
                        detail: String::new(),
                        released: false,
                        copy_out: std::mem::take(&mut b.copy_out),
                        staging: std::mem::take(&mut b.staging),
                        _models: std::mem::take(&mut b.models),
                    }),
                });
                if completion.has_callback() {
                    task.watch();
                }
                Ok(Some(task))
            }
            Err(e) => {
                self.parts.truncate(kept.0);
                self.models.truncate(kept.1);
                self.copy_out.truncate(kept.2);
                if had_region {
                    if let Some(r) = self.staging.pop() {
                        remote.recycle(vec![r]);
                    }
                }
                Err(e)
            }
        }
    }
}

struct RemoteState {
    status: Option<i32>,
    detail: String,
    released: bool,
    copy_out: Vec<CopyOut>,
    staging: Vec<SharedRegion>,
    _models: Vec<ModelTarget>,
}

/// Callbacks of all service-mode tasks run one at a time.
static CALLBACKS: Mutex<()> = parking_lot::const_mutex(());

/// A task submitted to the daemon.
pub(crate) struct RemoteTask {
    remote: &'static Remote,
    client: Arc<Client>,
    id: TaskId,
    estimate_us: u64,
    token: usize,
    completion: Arc<Completion>,
    watched: AtomicBool,
    /// The end was reported to the completion (callback run, waiters released).
    reported: AtomicBool,
    st: Mutex<RemoteState>,
}

fn status_result(status: i32, detail: &str) -> Result<()> {
    match status {
        0 => Ok(()),
        code => Err(Error::Remote {
            code,
            detail: detail.to_owned(),
        }),
    }
}

impl RemoteTask {
    /// Records the task's end and reports it to the completion (runs a callback).
    fn end(&self, status: i32, detail: String) {
        self.record(status, detail);
        self.report();
    }

    /// Reports the recorded end to the completion, once.
    fn report(&self) {
        let Some(status) = self.st.lock().status else {
            return;
        };
        if !self.reported.swap(true, Ordering::SeqCst) {
            self.completion.finish(self.token, status);
        }
    }

    /// Records the task's end (first caller only): copies staged outputs back unless the
    /// task was released.
    fn record(&self, status: i32, detail: String) {
        {
            let mut st = self.st.lock();
            if st.status.is_none() {
                if !st.released {
                    for c in &st.copy_out {
                        // SAFETY: see `CopyOut`: the caller's output memory is valid
                        // until release, which takes this lock first; the source lies in
                        // this task's staging buffer.
                        unsafe { std::ptr::copy_nonoverlapping(c.src, c.dst, c.len) };
                    }
                }
                st.status = Some(status);
                st.detail = detail;
            }
        }
    }

    fn recorded(&self) -> Option<Result<()>> {
        let st = self.st.lock();
        st.status.map(|s| status_result(s, &st.detail))
    }

    /// Waits for the end (`None` or `Some(0)` = no limit).
    pub(crate) fn wait(&self, timeout_ms: Option<u64>) -> Result<()> {
        if let Some(r) = self.recorded() {
            if !self.watched.load(Ordering::SeqCst) {
                self.report();
                return r;
            }
        }
        if self.watched.load(Ordering::SeqCst) {
            let limit = timeout_ms
                .filter(|&t| t > 0)
                .map(std::time::Duration::from_millis);
            return match self.completion.wait_ended(limit) {
                Some(_) => self.recorded().unwrap_or(Ok(())),
                None => Err(Error::Timeout {
                    ms: timeout_ms.unwrap_or(0),
                }),
            };
        }
        match self.client.wait(self.id, timeout_ms) {
            Ok(()) => self.end(0, String::new()),
            Err(e) if e.code() == HB_DNN_TIMEOUT || e.code() == HB_DNN_INVALID_TASK_HANDLE => {
                return Err(e)
            }
            Err(Error::Remote { code, detail }) => self.end(code, detail),
            Err(e) => self.end(e.code(), e.to_string()),
        }
        self.recorded().unwrap_or(Ok(()))
    }

    /// Starts the thread that observes the end and runs the done callback (once).
    pub(crate) fn watch(self: &Arc<Self>) {
        if self.watched.swap(true, Ordering::SeqCst) {
            return;
        }
        let t = self.clone();
        let spawned = std::thread::Builder::new()
            .name("vnpu-svc-callback".into())
            .spawn(move || {
                if t.recorded().is_none() {
                    let (status, detail) = match t.client.wait(t.id, None) {
                        Ok(()) => (0, String::new()),
                        Err(Error::Remote { code, detail }) => (code, detail),
                        Err(e) => (e.code(), e.to_string()),
                    };
                    t.record(status, detail);
                }
                let _one_at_a_time = CALLBACKS.lock();
                t.report();
            });
        if spawned.is_err() {
            // No thread: a later wait observes the end itself (and runs the callback).
            self.watched.store(false, Ordering::SeqCst);
        }
    }

    /// Releases the task in the daemon.
    pub(crate) fn release(&self) -> Result<()> {
        let (ended, staging) = {
            let mut st = self.st.lock();
            st.released = true;
            st.copy_out.clear();
            (st.status.is_some(), std::mem::take(&mut st.staging))
        };
        if ended {
            // Nothing runs any more: no need to wait for the answer.
            self.client.forget(self.id)?;
            self.remote.recycle(staging);
            return Ok(());
        }
        let r = self.client.release(self.id);
        if r.is_ok() {
            // The daemon waited for the FC in flight: nothing writes into staging now.
            self.remote.recycle(staging);
        }
        r
    }

    /// The compiler's estimate of the task's models, in µs.
    pub(crate) fn estimate_time_us(&self) -> u64 {
        match self.st.lock().status {
            Some(_) => 0,
            None => self.estimate_us,
        }
    }
}

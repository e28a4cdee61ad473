//! The client side of service mode: one session per process, a pool of connections
//! (a thread blocked in `wait` holds one, other threads open more), shared memory that
//! the daemon maps, and staging for memory it cannot map.
//!
//! Every failure to reach the daemon — unreachable at connect, gone mid-call — is an
//! [`Error::Service`] naming the socket; nothing falls back to in-process cores.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::shm::SharedMem;
use super::sock;
use super::wire::{
    BufRef, FrameRef, ModelInfo, ModelRef, PartRef, Request, Response, MAX_MESSAGE,
    PROTOCOL_VERSION, TOKEN_LEN,
};
use crate::error::{Error, Result};
use crate::runtime::{CtrlParams, Roi};

/// A connection to the daemon, in one session.
pub struct Client {
    socket: PathBuf,
    token: [u8; TOKEN_LEN],
    id: u64,
    /// Idle connections (the first one stays open for the client's life).
    idle: Mutex<Vec<OwnedFd>>,
    /// Bytes copied through staging buffers (memory the daemon could not map).
    staged: AtomicU64,
}

/// Shared memory registered with the daemon: tensors in it travel without a copy.
pub struct SharedRegion {
    mem: SharedMem,
    id: u64,
    client: Arc<Client>,
}

/// A loaded pack as the client sees it.
#[derive(Debug, Clone)]
pub struct RemotePack {
    /// Pack id in the daemon.
    pub id: u64,
    /// The models in order.
    pub models: Vec<ModelInfo>,
}

/// A submitted task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteTask(pub u64);

/// One model of a task as client buffers.
#[derive(Debug, Clone)]
pub struct RemotePart {
    /// The model.
    pub model: ModelRef,
    /// Planes of each input.
    pub inputs: Vec<Vec<BufRef>>,
    /// Each output.
    pub outputs: Vec<BufRef>,
}

/// How long a caller polls for the daemon's answer before sleeping: not at all. The
/// daemon's connection thread and core thread are the ones that should keep a CPU while
/// a short task runs (a spinning client takes the CPU the core needs on small machines).
const SPIN: std::time::Duration = std::time::Duration::ZERO;

fn gone(socket: &Path, why: impl std::fmt::Display) -> Error {
    Error::Service {
        socket: socket.display().to_string(),
        reason: why.to_string(),
    }
}

impl Client {
    /// Connects to the daemon at `socket` and opens a session.
    pub fn connect(socket: &Path) -> Result<Arc<Client>> {
        let fd = sock::connect(socket).map_err(|e| {
            gone(
                socket,
                format!("cannot connect: {e} (is `vnpu serve` running?)"),
            )
        })?;
        let r = roundtrip_on(
            socket,
            &fd,
            &Request::Hello {
                version: PROTOCOL_VERSION,
                token: None,
            },
            &[],
        )?;
        let (token, id) = match r {
            Response::Hello { token, client } => (token, client),
            other => return Err(gone(socket, format!("unexpected answer {other:?}"))),
        };
        Ok(Arc::new(Client {
            socket: socket.to_path_buf(),
            token,
            id,
            idle: Mutex::new(vec![fd]),
            staged: AtomicU64::new(0),
        }))
    }

    /// The client id the daemon gave this session.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Bytes this client copied through staging buffers so far.
    pub fn staged_bytes(&self) -> u64 {
        self.staged.load(Ordering::Relaxed)
    }

    /// Counts bytes copied through a staging buffer (memory the daemon cannot map).
    pub fn note_staged(&self, n: usize) {
        self.staged.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn take_conn(&self) -> Result<OwnedFd> {
        if let Some(fd) = self.idle.lock().pop() {
            return Ok(fd);
        }
        let fd = sock::connect(&self.socket)
            .map_err(|e| gone(&self.socket, format!("cannot connect: {e}")))?;
        match roundtrip_on(
            &self.socket,
            &fd,
            &Request::Hello {
                version: PROTOCOL_VERSION,
                token: Some(self.token),
            },
            &[],
        )? {
            Response::Hello { .. } => Ok(fd),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Sends one request with `fds` and returns the daemon's answer; an `Error` answer
    /// becomes the matching [`Error`].
    pub fn call(&self, req: &Request, fds: &[RawFd]) -> Result<Response> {
        let fd = self.take_conn()?;
        let r = roundtrip_on(&self.socket, &fd, req, fds);
        if r.is_ok() {
            self.idle.lock().push(fd);
        }
        match r? {
            Response::Error { code, detail } => Err(Error::Remote { code, detail }),
            other => Ok(other),
        }
    }

    /// Loads model files (compiled or ONNX) as one pack.
    pub fn load_files(&self, paths: &[&Path]) -> Result<RemotePack> {
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let f = std::fs::File::open(p).map_err(|e| Error::Io {
                path: p.to_path_buf(),
                reason: e.to_string(),
            })?;
            files.push(f);
        }
        let fds: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        self.load_fds(&fds)
    }

    /// Loads model bytes (`hbDNNInitializeFromDDR`): passed as a sealed memory file.
    pub fn load_bytes(&self, blobs: &[&[u8]]) -> Result<RemotePack> {
        let mut mems = Vec::with_capacity(blobs.len());
        for b in blobs {
            let mut m = SharedMem::create(b.len().max(1), "vnpu-model")
                .map_err(|e| Error::SysOutOfMemory(format!("model staging: {e}")))?;
            m.as_mut_slice()[..b.len()].copy_from_slice(b);
            mems.push(m);
        }
        let fds: Vec<RawFd> = mems.iter().map(|m| m.fd().as_raw_fd()).collect();
        self.load_fds(&fds)
    }

    fn load_fds(&self, fds: &[RawFd]) -> Result<RemotePack> {
        match self.call(
            &Request::LoadModels {
                count: fds.len() as u32,
            },
            fds,
        )? {
            Response::Models { pack, models } => Ok(RemotePack { id: pack, models }),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Releases a pack.
    pub fn release_pack(&self, pack: u64) -> Result<()> {
        self.call(&Request::ReleaseModels { pack }, &[]).map(|_| ())
    }

    /// Allocates `len` bytes of shared memory and registers it with the daemon.
    pub fn alloc_shared(self: &Arc<Self>, len: usize) -> Result<SharedRegion> {
        let mem = SharedMem::create(len, "vnpu-tensor")
            .map_err(|e| Error::SysOutOfMemory(format!("{len} bytes of shared memory: {e}")))?;
        match self.call(
            &Request::MapMemory { len: len as u64 },
            &[mem.fd().as_raw_fd()],
        )? {
            Response::Region { region } => Ok(SharedRegion {
                mem,
                id: region,
                client: self.clone(),
            }),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Submits a task of one or more models.
    pub fn submit(&self, parts: &[RemotePart], ctrl: CtrlParams) -> Result<RemoteTask> {
        self.submit_ended(parts, ctrl).map(|(t, _)| t)
    }

    /// Submits a task; also returns its end status (code, detail) when it had already
    /// ended by the time the daemon answered (short tasks), so no wait is needed.
    pub fn submit_ended(
        &self,
        parts: &[RemotePart],
        ctrl: CtrlParams,
    ) -> Result<(RemoteTask, Option<(i32, String)>)> {
        let parts = parts
            .iter()
            .map(|p| PartRef {
                model: p.model,
                inputs: p.inputs.clone(),
                outputs: p.outputs.clone(),
            })
            .collect();
        match self.call(&Request::Submit { parts, ctrl }, &[])? {
            Response::Task { task } => Ok((RemoteTask(task), None)),
            Response::TaskEnded { task, code, detail } => {
                Ok((RemoteTask(task), Some((code, detail))))
            }
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Submits ROI inference on an NV12 frame in shared memory.
    pub fn submit_roi(
        &self,
        model: ModelRef,
        frame: FrameRef,
        rois: &[Roi],
        outputs: &[BufRef],
        ctrl: CtrlParams,
    ) -> Result<RemoteTask> {
        self.expect_task(&Request::SubmitRoi {
            model,
            frame,
            rois: rois.to_vec(),
            outputs: outputs.to_vec(),
            ctrl,
        })
    }

    fn expect_task(&self, req: &Request) -> Result<RemoteTask> {
        match self.call(req, &[])? {
            Response::Task { task } | Response::TaskEnded { task, .. } => Ok(RemoteTask(task)),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Waits for a task (`None` or `Some(0)` = no limit, as `hbDNNWaitTaskDone`). A timeout
    /// leaves the task intact.
    pub fn wait(&self, task: RemoteTask, timeout_ms: Option<u64>) -> Result<()> {
        self.call(
            &Request::Wait {
                task: task.0,
                timeout_ms: timeout_ms.unwrap_or(0),
            },
            &[],
        )
        .map(|_| ())
    }

    /// Releases a task that has ended without waiting for the answer (one message, no
    /// round trip). For a task that may still run use [`release`](Self::release).
    pub fn release_no_reply(&self, task: RemoteTask) -> Result<()> {
        let fd = self.take_conn()?;
        sock::send(&fd, &Request::Forget { task: task.0 }.encode(), &[])
            .map_err(|e| gone(&self.socket, format!("send failed: {e}")))?;
        self.idle.lock().push(fd);
        Ok(())
    }

    /// Releases a task (a queued one is cancelled).
    pub fn release(&self, task: RemoteTask) -> Result<()> {
        self.call(&Request::Release { task: task.0 }, &[])
            .map(|_| ())
    }

    /// The daemon's status JSON.
    pub fn status(&self) -> Result<serde_json::Value> {
        match self.call(&Request::Status, &[])? {
            Response::Status { json } => serde_json::from_str(&json)
                .map_err(|e| gone(&self.socket, format!("bad status JSON: {e}"))),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }
}

impl SharedRegion {
    /// The region id in the daemon.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A reference to `len` bytes at `offset` (checked against the region).
    pub fn buf(&self, offset: usize, len: usize) -> Result<BufRef> {
        if offset.checked_add(len).map_or(true, |e| e > self.mem.len()) {
            return Err(Error::SysInvalidArgument(format!(
                "bytes {offset}..+{len} outside a {}-byte region",
                self.mem.len()
            )));
        }
        Ok(BufRef {
            region: self.id,
            offset: offset as u64,
            len: len as u64,
        })
    }

    /// The whole region.
    pub fn whole(&self) -> BufRef {
        BufRef {
            region: self.id,
            offset: 0,
            len: self.mem.len() as u64,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false (a region has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Start address in this process.
    pub fn ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }

    /// The memory as bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.mem.as_slice()
    }

    /// The memory as mutable bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.mem.as_mut_slice()
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        let _ = self
            .client
            .call(&Request::UnmapMemory { region: self.id }, &[]);
    }
}

fn roundtrip_on(socket: &Path, fd: &OwnedFd, req: &Request, fds: &[RawFd]) -> Result<Response> {
    let bytes = req.encode();
    if bytes.len() > MAX_MESSAGE {
        return Err(Error::InvalidArgument {
            name: "request".into(),
            reason: format!("{} bytes; a message holds up to {MAX_MESSAGE}", bytes.len()),
        });
    }
    sock::send(fd, &bytes, fds).map_err(|e| gone(socket, format!("send failed: {e}")))?;
    let pkt = sock::recv_spin(fd, MAX_MESSAGE, SPIN)
        .map_err(|e| gone(socket, format!("receive failed: {e}")))?
        .ok_or_else(|| gone(socket, "the daemon closed the connection"))?;
    Response::decode(&pkt.bytes).map_err(|e| gone(socket, e))
}

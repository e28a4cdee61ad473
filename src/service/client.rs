//! The client side of service mode: one session per process, a pool of connections
//! (each request takes one for its round trip, concurrent threads open more), shared
//! memory that the daemon maps, and staging for memory it cannot map.
//!
//! Task ends arrive in the session's [`EndSlots`], not as messages:
//! 1. `submit` takes a free end slot, arms it and names it in the `Submit` request (one
//!    round trip, answered as soon as the task is queued).
//! 2. `wait` polls the slot briefly, then sleeps on its futex word, waking every 50 ms to
//!    check that the daemon is still there.
//! 3. `forget` (a task whose end was seen) sends nothing: the id rides on the next
//!    `Submit`, or goes in a batch when many are pending; `release` is a round trip. A
//!    slot is free again once the daemon has answered the message that released its task.
//!
//! Every failure to reach the daemon — unreachable at connect, gone mid-call — is an
//! [`Error::Service`] naming the socket; nothing falls back to in-process cores.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::shm::{EndSlots, SharedMem, SlotWait};
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
    /// Where the daemon stores the ends of this client's tasks.
    ends: EndSlots,
    /// A second descriptor of the first connection, polled for hang-up by sleeping waiters.
    alive: OwnedFd,
    book: Mutex<Book>,
}

/// The client's view of its end slots.
#[derive(Default)]
struct Book {
    /// Slots no live task names.
    free: Vec<u32>,
    /// Task id -> its slot, for tasks not released.
    live: HashMap<u64, u32>,
    /// Ended tasks released here and not yet told to the daemon.
    forget: Vec<(u64, u32)>,
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

/// How long `wait` polls a task's end slot before sleeping on it; the poll yields the CPU
/// between checks, so a core thread sharing it still runs.
const SPIN: Duration = Duration::from_micros(20);
/// Released tasks kept before they are told to the daemon without a `Submit` to ride on.
const FORGET_BATCH: usize = 16;
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
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            token: None,
        };
        sock::send(&fd, &hello.encode(), &[])
            .map_err(|e| gone(socket, format!("send failed: {e}")))?;
        let pkt = sock::recv(&fd, MAX_MESSAGE)
            .map_err(|e| gone(socket, format!("receive failed: {e}")))?
            .ok_or_else(|| gone(socket, "the daemon closed the connection"))?;
        let (token, id, slots) = match Response::decode(&pkt.bytes).map_err(|e| gone(socket, e))? {
            Response::Hello {
                token,
                client,
                slots,
            } => (token, client, slots),
            Response::Error { detail, .. } => return Err(gone(socket, detail)),
            other => return Err(gone(socket, format!("unexpected answer {other:?}"))),
        };
        let ends_fd = pkt
            .fds
            .into_iter()
            .next()
            .ok_or_else(|| gone(socket, "the daemon sent no end slots"))?;
        let ends = EndSlots::from_fd(ends_fd, slots as usize)
            .map_err(|e| gone(socket, format!("cannot map the end slots: {e}")))?;
        let alive = fd
            .try_clone()
            .map_err(|e| gone(socket, format!("cannot duplicate the connection: {e}")))?;
        Ok(Arc::new(Client {
            socket: socket.to_path_buf(),
            token,
            id,
            idle: Mutex::new(vec![fd]),
            staged: AtomicU64::new(0),
            book: Mutex::new(Book {
                free: (0..ends.len() as u32).rev().collect(),
                ..Book::default()
            }),
            ends,
            alive,
        }))
    }

    /// Whether the daemon still holds the session's first connection.
    fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.alive.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd; zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n <= 0 || p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP) == 0
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
        self.submit_reserved(parts, ctrl, 0)
    }

    /// Submits the task of an assembly reserved with [`reserve`](Self::reserve) (0 = none).
    pub fn submit_reserved(
        &self,
        parts: &[RemotePart],
        ctrl: CtrlParams,
        reservation: u64,
    ) -> Result<RemoteTask> {
        let parts = parts
            .iter()
            .map(|p| PartRef {
                model: p.model,
                inputs: p.inputs.clone(),
                outputs: p.outputs.clone(),
            })
            .collect();
        self.submit_with(|slot, forget| Request::Submit {
            parts,
            ctrl,
            slot,
            reservation,
            forget,
        })
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
        self.submit_with(|slot, forget| Request::SubmitRoi {
            model,
            frame,
            rois: rois.to_vec(),
            outputs: outputs.to_vec(),
            ctrl,
            slot,
            forget,
        })
    }

    /// Step 1 of the module protocol: a free slot, armed, and the pending forgets.
    fn submit_with(&self, req: impl FnOnce(u32, Vec<u64>) -> Request) -> Result<RemoteTask> {
        let mut slot = self.book.lock().free.pop();
        if slot.is_none() {
            self.flush_forgets()?;
            slot = self.book.lock().free.pop();
        }
        let slot = slot.ok_or(Error::TaskLimit {
            limit: self.ends.len(),
        })?;
        let told = std::mem::take(&mut self.book.lock().forget);
        self.ends.arm(slot as usize);
        let r = self.call(&req(slot, told.iter().map(|f| f.0).collect()), &[]);
        let mut book = self.book.lock();
        // The daemon released the forgotten tasks before anything else in the request.
        book.free.extend(told.iter().map(|f| f.1));
        match r {
            Ok(Response::Task { task }) => {
                book.live.insert(task, slot);
                Ok(RemoteTask(task))
            }
            Ok(other) => {
                book.free.push(slot);
                Err(gone(&self.socket, format!("unexpected answer {other:?}")))
            }
            Err(e) => {
                book.free.push(slot);
                Err(e)
            }
        }
    }

    /// Reserves room under the client's task limit for a task being assembled.
    pub fn reserve(&self) -> Result<u64> {
        // Released tasks give their room back first, as they do in process.
        self.flush_forgets()?;
        match self.call(&Request::Reserve, &[])? {
            Response::Reserved { reservation } => Ok(reservation),
            other => Err(gone(&self.socket, format!("unexpected answer {other:?}"))),
        }
    }

    /// Gives back a reservation whose task will not be submitted.
    pub fn unreserve(&self, reservation: u64) -> Result<()> {
        self.call(&Request::Unreserve { reservation }, &[])
            .map(|_| ())
    }

    fn slot_of(&self, task: RemoteTask) -> Result<u32> {
        self.book
            .lock()
            .live
            .get(&task.0)
            .copied()
            .ok_or_else(|| Error::InvalidTaskHandle(format!("no task {} in this client", task.0)))
    }

    /// The task's status code when its end is known here (0 = success), without waiting.
    pub fn ended(&self, task: RemoteTask) -> Option<i32> {
        let slot = self.slot_of(task).ok()?;
        self.ends.ended(slot as usize)
    }

    /// Waits for a task (`None` or `Some(0)` = no limit, as `hbDNNWaitTaskDone`). A timeout
    /// leaves the task intact.
    pub fn wait(&self, task: RemoteTask, timeout_ms: Option<u64>) -> Result<()> {
        let slot = self.slot_of(task)? as usize;
        let limit = timeout_ms.filter(|&t| t > 0);
        let deadline = limit.map(|ms| Instant::now() + Duration::from_millis(ms));
        match self.ends.wait(slot, SPIN, deadline, || self.alive()) {
            SlotWait::Ended(0) => Ok(()),
            SlotWait::Ended(code) => Err(self.failure(task, code)),
            SlotWait::TimedOut => Err(Error::Timeout {
                ms: limit.unwrap_or(0),
            }),
            SlotWait::Gone => Err(gone(&self.socket, "the daemon closed the connection")),
        }
    }

    /// The error of a task that ended with `code`: its detail comes from the daemon.
    fn failure(&self, task: RemoteTask, code: i32) -> Error {
        let detail = match self.call(
            &Request::Wait {
                task: task.0,
                timeout_ms: 0,
            },
            &[],
        ) {
            Err(Error::Remote { code: c, detail }) if c == code => detail,
            _ => format!("the task failed in the daemon (status {code})"),
        };
        Error::Remote { code, detail }
    }

    /// Releases a task whose end was seen without a message of its own: the daemon hears
    /// of it with the next `Submit` (or a batch of them). A task not seen to end is
    /// released with a round trip ([`release`](Self::release)).
    pub fn forget(&self, task: RemoteTask) -> Result<()> {
        let slot = self.slot_of(task)?;
        if self.ends.ended(slot as usize).is_none() {
            return self.release(task);
        }
        let flush = {
            let mut book = self.book.lock();
            book.live.remove(&task.0);
            book.forget.push((task.0, slot));
            book.forget.len() >= FORGET_BATCH
        };
        if flush {
            self.flush_forgets()?;
        }
        Ok(())
    }

    /// Tells the daemon of the released tasks now.
    fn flush_forgets(&self) -> Result<()> {
        let told = std::mem::take(&mut self.book.lock().forget);
        if told.is_empty() {
            return Ok(());
        }
        let r = self.call(
            &Request::Forget {
                tasks: told.iter().map(|f| f.0).collect(),
            },
            &[],
        );
        self.book.lock().free.extend(told.iter().map(|f| f.1));
        r.map(|_| ())
    }

    /// Releases a task (a queued one is cancelled; a running one stops at its next FC
    /// boundary, and this returns when it has).
    pub fn release(&self, task: RemoteTask) -> Result<()> {
        let slot = self.book.lock().live.remove(&task.0);
        let r = self.call(&Request::Release { task: task.0 }, &[]);
        if let Some(slot) = slot {
            self.book.lock().free.push(slot);
        }
        r.map(|_| ())
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
        if offset.checked_add(len).is_none_or(|e| e > self.mem.len()) {
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
    let pkt = sock::recv(fd, MAX_MESSAGE)
        .map_err(|e| gone(socket, format!("receive failed: {e}")))?
        .ok_or_else(|| gone(socket, "the daemon closed the connection"))?;
    Response::decode(&pkt.bytes).map_err(|e| gone(socket, e))
}

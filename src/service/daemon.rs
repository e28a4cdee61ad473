//! The service daemon: owns the runtime (cores, CPU pool, library queue) and serves
//! every client process on one socket.
//!
//! Protocol of one connection:
//! 1. The daemon accepts, reads the peer's credentials (`SO_PEERCRED`) and refuses a
//!    user other than its own (or outside `--group`).
//! 2. The first message must be `Hello` with [`PROTOCOL_VERSION`]. Without a token it
//!    opens a new *session* (one per client process) and sends the session's end slots
//!    ([`EndSlots`], one per task the client may have) with the answer; with a token it
//!    adds this connection to that session, but only for the same pid and uid.
//! 3. Every later message is one request answered by one response, in order. A
//!    request names only objects of its own session (packs, regions, tasks); ids are
//!    per session, so another client's ids mean nothing here.
//! 4. `Submit` is answered as soon as the task is queued. The task's end is not a
//!    message: the done signal stores its status in the end slot the client named and
//!    wakes the client if it sleeps there, on the thread that ended the task (a core
//!    thread), so a short task costs one message each way and no daemon thread waits
//!    for it. A slot stays taken until the client releases the task (`Release`, or
//!    `Forget` of ended tasks, also carried by the next `Submit`).
//! 5. A task assembled with `more = 1` is reserved (`Reserve`) at its first part and
//!    counts against the client's task limit like a submitted one until its `Submit`
//!    (or `Unreserve`).
//! 6. A malformed or oversized message closes that connection only.
//! 7. When the last connection of a session closes (the process exited or died), the
//!    session's tasks are released (queued ones cancelled, a running FC finishes), and
//!    its regions and packs are dropped once no task uses them.
//!
//! Invariants: a task entry holds the packed model and every region its buffers point
//! into, so a region unmapped by the client (or a dead client) stays mapped until the
//! task no longer touches it; identical model files are loaded once and shared.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::shm::{EndSlots, SharedMem};
use super::sock::{self, PeerCred};
use super::wire::{
    BufRef, ModelInfo, ModelRef, PartRef, Request, Response, MAX_MESSAGE, PROTOCOL_VERSION,
    TOKEN_LEN,
};
use crate::error::{Error, Result};
use crate::runtime::{IoBuffer, ModelRequest, PackedModel, RoiFrame, Runtime, Task};
use crate::sched::{SchedConfig, TaskSlot};

/// Per-client bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Client processes at once.
    pub clients: usize,
    /// Connections per client.
    pub conns_per_client: usize,
    /// Live tasks per client.
    pub tasks_per_client: usize,
    /// Shared memory a client may map, in bytes.
    pub shm_per_client: u64,
    /// Largest model file, in bytes.
    pub model_file: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            clients: 64,
            conns_per_client: 64,
            tasks_per_client: 256,
            shm_per_client: 4 << 30,
            model_file: 2 << 30,
        }
    }
}

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The socket path.
    pub socket: PathBuf,
    /// A group whose members may connect too (socket mode 0660); else 0600, owner only.
    pub group: Option<u32>,
    /// Scheduling settings (the daemon's, as system software settings on the board).
    pub sched: SchedConfig,
    /// Per-client bounds.
    pub limits: Limits,
}

/// One client process.
struct Session {
    client: u64,
    token: [u8; TOKEN_LEN],
    cred: PeerCred,
    conns: AtomicUsize,
    /// Where the done signals of this client's tasks store their ends.
    ends: Arc<EndSlots>,
    st: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    next_id: u64,
    packs: HashMap<u64, Arc<PackedModel>>,
    regions: HashMap<u64, Arc<SharedMem>>,
    tasks: HashMap<u64, TaskEntry>,
    /// Rooms reserved for tasks being assembled, each holding a scheduler slot.
    reserved: HashMap<u64, TaskSlot>,
    /// End slots named by a task not yet released.
    slots_taken: std::collections::HashSet<u32>,
    shm_bytes: u64,
    closed: bool,
}

struct TaskEntry {
    task: Arc<Task>,
    slot: u32,
    _pack: Arc<PackedModel>,
    _regions: Vec<Arc<SharedMem>>,
}

/// A model file held once for every client that loads the same bytes.
struct HeldFile {
    bytes: Vec<u8>,
    pack: Weak<PackedModel>,
}

struct Shared {
    runtime: Runtime,
    uid: u32,
    group: Option<u32>,
    limits: Limits,
    sessions: Mutex<HashMap<[u8; TOKEN_LEN], Arc<Session>>>,
    files: Mutex<Vec<HeldFile>>,
    next_client: AtomicU64,
    /// Scheduler task id -> client pid, for the trace (bounded, newest kept).
    owners: Mutex<VecDeque<(u64, i32)>>,
    stopping: AtomicBool,
}

/// A bound daemon. [`Daemon::run`] serves until told to stop.
pub struct Daemon {
    shared: Arc<Shared>,
    listener: OwnedFd,
    socket: PathBuf,
}

const OWNERS_KEPT: usize = 65536;

fn random_token() -> [u8; TOKEN_LEN] {
    let mut t = [0u8; TOKEN_LEN];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut t).is_ok() {
            return t;
        }
    }
    // Fallback: time and address entropy (the token is checked together with pid + uid).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mix = now ^ ((&t as *const _ as usize as u128) << 64);
    t.copy_from_slice(&mix.to_le_bytes());
    t
}

fn service_err(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Service {
        socket: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl Daemon {
    /// Creates the runtime and binds the socket (mode 0600, or 0660 with a group).
    pub fn bind(opts: ServeOptions) -> Result<Daemon> {
        let mode = if opts.group.is_some() { 0o660 } else { 0o600 };
        let listener =
            sock::listen(&opts.socket, mode).map_err(|e| service_err(&opts.socket, e))?;
        if let Some(gid) = opts.group {
            let c = std::ffi::CString::new(opts.socket.as_os_str().as_encoded_bytes())
                .map_err(|_| service_err(&opts.socket, "NUL in path"))?;
            // SAFETY: `c` is a valid path; uid -1 keeps the owner.
            if unsafe { libc::chown(c.as_ptr(), u32::MAX, gid) } != 0 {
                return Err(service_err(
                    &opts.socket,
                    format!(
                        "cannot give the socket to group {gid}: {}",
                        io::Error::last_os_error()
                    ),
                ));
            }
        }
        let runtime = Runtime::with_config(opts.sched.clone())?;
        runtime.scheduler().trace_start();
        Ok(Daemon {
            shared: Arc::new(Shared {
                runtime,
                // SAFETY: plain system call.
                uid: unsafe { libc::getuid() },
                group: opts.group,
                limits: opts.limits,
                sessions: Mutex::new(HashMap::new()),
                files: Mutex::new(Vec::new()),
                next_client: AtomicU64::new(1),
                owners: Mutex::new(VecDeque::new()),
                stopping: AtomicBool::new(false),
            }),
            listener,
            socket: opts.socket,
        })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The daemon's runtime (its scheduler, for traces and tests).
    pub fn runtime(&self) -> &Runtime {
        &self.shared.runtime
    }

    /// Accepts and serves clients (a thread per connection) until `stop` is set, then
    /// fails every pending task of every client and returns.
    pub fn run(&self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            let conn = match sock::accept(&self.listener, 100) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => return Err(service_err(&self.socket, e)),
            };
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("vnpu-serve-conn".into())
                .spawn(move || serve_conn(&shared, conn));
            if let Err(e) = spawned {
                eprintln!("vnpu serve: cannot start a connection thread: {e}");
            }
        }
        self.shutdown();
        Ok(())
    }

    /// Stops accepting work and releases every client's tasks (queued ones fail with
    /// a cancellation error; running ones end at their next FC boundary).
    pub fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let sessions: Vec<_> = self.shared.sessions.lock().values().cloned().collect();
        for s in sessions {
            release_tasks(&s);
        }
    }

    /// Distinct model files loaded and still used by some client (identical files
    /// loaded by several clients count once).
    pub fn held_models(&self) -> usize {
        let mut held = self.shared.files.lock();
        held.retain(|f| f.pack.strong_count() > 0);
        held.len()
    }

    /// What `vnpu status` prints: clients, queue, cores.
    pub fn status_json(&self) -> serde_json::Value {
        status_json(&self.shared)
    }

    /// The scheduler trace as JSON, with each task's client pid.
    pub fn trace_json(&self) -> serde_json::Value {
        let mut v = self.shared.runtime.scheduler().trace_json();
        let owners = self.shared.owners.lock();
        let map: serde_json::Map<String, serde_json::Value> = owners
            .iter()
            .map(|(t, pid)| (t.to_string(), serde_json::json!(pid)))
            .collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("task_pids".into(), serde_json::Value::Object(map));
        }
        v
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Releases every task of a session, newest first, so that queued tasks are cancelled
/// before the running one gives up its core (which would start the next queued one).
fn release_tasks(s: &Session) {
    let mut tasks: Vec<(u64, TaskEntry)> = {
        let mut st = s.st.lock();
        st.reserved.clear();
        st.slots_taken.clear();
        st.tasks.drain().collect()
    };
    tasks.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    for (_, t) in &tasks {
        let _ = t.task.release();
    }
}

fn close_session(shared: &Shared, s: &Arc<Session>) {
    release_tasks(s);
    {
        let mut st = s.st.lock();
        st.closed = true;
        st.packs.clear();
        st.regions.clear();
        st.shm_bytes = 0;
    }
    shared.sessions.lock().remove(&s.token);
    shared.files.lock().retain(|f| f.pack.strong_count() > 0);
}

fn allowed(shared: &Shared, c: &PeerCred) -> bool {
    c.uid == shared.uid || c.uid == 0 || shared.group.is_some_and(|g| g == c.gid)
}

fn serve_conn(shared: &Arc<Shared>, fd: OwnedFd) {
    let cred = match sock::peer_cred(&fd) {
        Ok(c) if allowed(shared, &c) => c,
        _ => return,
    };
    let session = match hello(shared, &fd, &cred) {
        Some(s) => s,
        None => return,
    };
    loop {
        let pkt = match sock::recv(&fd, MAX_MESSAGE) {
            Ok(Some(p)) => p,
            Ok(None) | Err(_) => break,
        };
        let req = match Request::decode(&pkt.bytes) {
            Ok(r) => r,
            Err(_) => break,
        };
        if matches!(req, Request::Hello { .. }) {
            break;
        }
        let resp = match handle(shared, &session, req, pkt.fds) {
            Ok(r) => r,
            Err(e) => Response::Error {
                code: e.code(),
                detail: e.to_string(),
            },
        };
        if sock::send(&fd, &resp.encode(), &[]).is_err() {
            break;
        }
    }
    if session.conns.fetch_sub(1, Ordering::SeqCst) == 1 {
        close_session(shared, &session);
    }
}

/// Step 2 of the protocol; `None` closes the connection.
fn hello(shared: &Arc<Shared>, fd: &OwnedFd, cred: &PeerCred) -> Option<Arc<Session>> {
    let pkt = sock::recv(fd, MAX_MESSAGE).ok()??;
    let refuse = |detail: String| {
        let r = Response::Error {
            code: crate::error::codes::HB_DNN_MULTI_PROGRESS_USE_ERROR,
            detail,
        };
        let _ = sock::send(fd, &r.encode(), &[]);
        None
    };
    let (version, token) = match Request::decode(&pkt.bytes) {
        Ok(Request::Hello { version, token }) => (version, token),
        _ => return None,
    };
    if version != PROTOCOL_VERSION {
        return refuse(format!(
            "protocol version {version}; this daemon speaks {PROTOCOL_VERSION}"
        ));
    }
    if shared.stopping.load(Ordering::SeqCst) {
        return refuse("the daemon is shutting down".into());
    }
    let session = {
        let mut sessions = shared.sessions.lock();
        match token {
            Some(t) => match sessions.get(&t) {
                Some(s) if s.cred.pid == cred.pid && s.cred.uid == cred.uid => {
                    if s.conns.load(Ordering::SeqCst) >= shared.limits.conns_per_client {
                        drop(sessions);
                        return refuse(format!(
                            "more than {} connections from one client",
                            shared.limits.conns_per_client
                        ));
                    }
                    s.conns.fetch_add(1, Ordering::SeqCst);
                    s.clone()
                }
                _ => {
                    drop(sessions);
                    return refuse("unknown session".into());
                }
            },
            None => {
                if sessions.len() >= shared.limits.clients {
                    drop(sessions);
                    return refuse(format!("{} clients already", shared.limits.clients));
                }
                let ends = match EndSlots::create(shared.limits.tasks_per_client) {
                    Ok(e) => Arc::new(e),
                    Err(e) => {
                        drop(sessions);
                        return refuse(format!("cannot make the end slots: {e}"));
                    }
                };
                let s = Arc::new(Session {
                    client: shared.next_client.fetch_add(1, Ordering::Relaxed),
                    token: random_token(),
                    cred: *cred,
                    conns: AtomicUsize::new(1),
                    ends,
                    st: Mutex::new(SessionState::default()),
                });
                sessions.insert(s.token, s.clone());
                s
            }
        }
    };
    let r = Response::Hello {
        token: session.token,
        client: session.client,
        slots: session.ends.len() as u32,
    };
    let ends = [session.ends.fd().as_raw_fd()];
    let fds: &[i32] = if token.is_none() { &ends } else { &[] };
    if sock::send(fd, &r.encode(), fds).is_err() {
        if session.conns.fetch_sub(1, Ordering::SeqCst) == 1 {
            close_session(shared, &session);
        }
        return None;
    }
    Some(session)
}

fn bad(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        name: name.into(),
        reason: reason.into(),
    }
}

/// Reads a whole model file from a client's descriptor: a regular file of bounded size.
fn read_model_fd(fd: &OwnedFd, limit: u64) -> Result<Vec<u8>> {
    // SAFETY: stat is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(bad("model", io::Error::last_os_error().to_string()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(bad("model", "a model must be a regular file"));
    }
    let len = st.st_size as u64;
    if len > limit {
        return Err(bad(
            "model",
            format!("{len} bytes; the daemon takes up to {limit}"),
        ));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(len as usize)
        .map_err(|_| Error::OutOfMemory(format!("{len}-byte model file")))?;
    buf.resize(len as usize, 0);
    let mut at = 0usize;
    while at < buf.len() {
        // SAFETY: reads into the unfilled tail of `buf`.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf[at..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - at,
                at as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(bad("model", e.to_string()));
        }
        if n == 0 {
            buf.truncate(at);
            break;
        }
        at += n as usize;
    }
    Ok(buf)
}

fn load_pack(shared: &Shared, fds: &[OwnedFd]) -> Result<Arc<PackedModel>> {
    let mut files = Vec::with_capacity(fds.len());
    for fd in fds {
        files.push(read_model_fd(fd, shared.limits.model_file)?);
    }
    let joined: Vec<u8> = if files.len() == 1 {
        Vec::new()
    } else {
        files
            .iter()
            .flat_map(|f| {
                (f.len() as u64)
                    .to_le_bytes()
                    .into_iter()
                    .chain(f.iter().copied())
            })
            .collect()
    };
    let key: &[u8] = if files.len() == 1 { &files[0] } else { &joined };
    {
        let held = shared.files.lock();
        if let Some(p) = held
            .iter()
            .find(|h| h.bytes == key)
            .and_then(|h| h.pack.upgrade())
        {
            return Ok(p);
        }
    }
    let blobs: Vec<&[u8]> = files.iter().map(|f| f.as_slice()).collect();
    let pack = Arc::new(PackedModel::load_bytes(&blobs)?);
    let mut held = shared.files.lock();
    held.retain(|f| f.pack.strong_count() > 0);
    held.push(HeldFile {
        bytes: key.to_vec(),
        pack: Arc::downgrade(&pack),
    });
    Ok(pack)
}

fn model_infos(p: &PackedModel) -> Vec<ModelInfo> {
    p.models
        .iter()
        .map(|m| ModelInfo {
            name: m.name.clone(),
            inputs: m.inputs.clone(),
            outputs: m.outputs.clone(),
            estimate_us: m.estimate_latency_us(),
        })
        .collect()
}

fn new_id(st: &mut SessionState) -> u64 {
    st.next_id += 1;
    st.next_id
}

/// Resolves a client buffer to daemon memory, checking it lies inside its region.
fn resolve(st: &SessionState, b: &BufRef, held: &mut Vec<Arc<SharedMem>>) -> Result<IoBuffer> {
    let r = st
        .regions
        .get(&b.region)
        .ok_or_else(|| bad("buffer", format!("no region {} in this client", b.region)))?;
    let end = b.offset.checked_add(b.len);
    if end.is_none_or(|e| e > r.len() as u64) {
        return Err(bad(
            "buffer",
            format!(
                "bytes {}..+{} outside region {} of {} bytes",
                b.offset,
                b.len,
                b.region,
                r.len()
            ),
        ));
    }
    if !held.iter().any(|h| Arc::ptr_eq(h, r)) {
        held.push(r.clone());
    }
    Ok(IoBuffer {
        // SAFETY: offset + len <= region length (checked above).
        ptr: unsafe { r.ptr().add(b.offset as usize) },
        len: b.len as usize,
    })
}

fn model_of(st: &SessionState, m: &ModelRef) -> Result<(Arc<PackedModel>, usize)> {
    let p = st
        .packs
        .get(&m.pack)
        .ok_or_else(|| Error::InvalidPackedHandle(format!("no pack {} in this client", m.pack)))?;
    let i = m.index as usize;
    if i >= p.models.len() {
        return Err(Error::InvalidModelHandle(format!(
            "pack {} has {} models, not {}",
            m.pack,
            p.models.len(),
            i + 1
        )));
    }
    Ok((p.clone(), i))
}

fn handle(shared: &Shared, s: &Arc<Session>, req: Request, fds: Vec<OwnedFd>) -> Result<Response> {
    if shared.stopping.load(Ordering::SeqCst) {
        return Err(Error::Service {
            socket: String::new(),
            reason: "the daemon is shutting down".into(),
        });
    }
    let want_fds = match &req {
        Request::LoadModels { count } => *count as usize,
        Request::MapMemory { .. } => 1,
        _ => 0,
    };
    if fds.len() != want_fds {
        return Err(bad(
            "message",
            format!("{} descriptors attached, {want_fds} expected", fds.len()),
        ));
    }
    match req {
        Request::Hello { .. } => Err(Error::ApiUse("Hello sent twice".into())),
        Request::LoadModels { count } => {
            if count == 0 {
                return Err(bad("modelFileNames", "no model file given"));
            }
            let pack = load_pack(shared, &fds)?;
            let models = model_infos(&pack);
            let mut st = s.st.lock();
            let id = new_id(&mut st);
            st.packs.insert(id, pack);
            Ok(Response::Models { pack: id, models })
        }
        Request::ReleaseModels { pack } => {
            let mut st = s.st.lock();
            st.packs
                .remove(&pack)
                .map(|_| Response::Ok)
                .ok_or_else(|| Error::InvalidPackedHandle(format!("no pack {pack} in this client")))
        }
        Request::MapMemory { len } => {
            {
                let st = s.st.lock();
                if st.shm_bytes.saturating_add(len) > shared.limits.shm_per_client {
                    return Err(Error::SysOutOfMemory(format!(
                        "client would map {} bytes; the daemon allows {} per client",
                        st.shm_bytes.saturating_add(len),
                        shared.limits.shm_per_client
                    )));
                }
            }
            let len_us = usize::try_from(len).map_err(|_| bad("len", "too large"))?;
            let fd = fds
                .into_iter()
                .next()
                .ok_or_else(|| bad("memory", "no descriptor"))?;
            let mem = SharedMem::from_fd(fd, len_us)
                .map_err(|e| Error::SysInvalidArgument(format!("shared memory: {e}")))?;
            let mut st = s.st.lock();
            let id = new_id(&mut st);
            st.shm_bytes += len;
            st.regions.insert(id, Arc::new(mem));
            Ok(Response::Region { region: id })
        }
        Request::UnmapMemory { region } => {
            let mut st = s.st.lock();
            let r = st.regions.remove(&region).ok_or_else(|| {
                Error::SysInvalidArgument(format!("no region {region} in this client"))
            })?;
            st.shm_bytes -= r.len() as u64;
            Ok(Response::Ok)
        }
        Request::Submit {
            parts,
            ctrl,
            slot,
            reservation,
            forget: gone,
        } => {
            let mut st = s.st.lock();
            forget(&mut st, &gone);
            let room = match reservation {
                0 => None,
                r => Some(st.reserved.remove(&r).ok_or_else(|| {
                    Error::InvalidTaskHandle(format!("no reservation {r} in this client"))
                })?),
            };
            let fail = |st: &mut SessionState, room: Option<TaskSlot>, e: Error| {
                if let Some(r) = room {
                    st.reserved.insert(reservation, r);
                }
                Err(e)
            };
            if room.is_none() {
                if let Err(e) = check_task_room(shared, &st) {
                    return fail(&mut st, room, e);
                }
            }
            if let Err(e) = check_slot(s, &st, slot) {
                return fail(&mut st, room, e);
            }
            if parts.is_empty() {
                return fail(
                    &mut st,
                    room,
                    Error::ApiUse("a task needs at least one model".into()),
                );
            }
            let (reqs, pack, held) = match requests(&st, &parts) {
                Ok(r) => r,
                Err(e) => return fail(&mut st, room, e),
            };
            let task = match room {
                None => shared.runtime.submit(reqs, ctrl)?,
                Some(room) => {
                    match shared
                        .runtime
                        .submit_reserved(reqs, ctrl, room, Box::new(|_| {}))
                    {
                        Ok(t) => t,
                        Err((e, room)) => return fail(&mut st, Some(room), e),
                    }
                }
            };
            Ok(Response::Task {
                task: add_task(shared, s, &mut st, task, slot, pack, held),
            })
        }
        Request::SubmitRoi {
            model,
            frame,
            rois,
            outputs,
            ctrl,
            slot,
            forget: gone,
        } => {
            let mut st = s.st.lock();
            forget(&mut st, &gone);
            check_task_room(shared, &st)?;
            check_slot(s, &st, slot)?;
            let (pack, i) = model_of(&st, &model)?;
            let mut held = Vec::new();
            let y = resolve(&st, &frame.y, &mut held)?;
            let uv = resolve(&st, &frame.uv, &mut held)?;
            let outs = outputs
                .iter()
                .map(|b| resolve(&st, b, &mut held))
                .collect::<Result<Vec<_>>>()?;
            let [w, h, ys, uvs] = frame.dims.map(|d| d as usize);
            let f = RoiFrame {
                y,
                uv,
                width: w,
                height: h,
                y_stride: ys,
                uv_stride: uvs,
            };
            let m = pack.models[i].clone();
            let task = shared.runtime.submit_roi(&m, f, &rois, &outs, ctrl)?;
            Ok(Response::Task {
                task: add_task(shared, s, &mut st, task, slot, pack, held),
            })
        }
        Request::Wait { task, timeout_ms } => {
            let t = task_of(s, task)?;
            t.wait((timeout_ms > 0).then_some(timeout_ms))?;
            Ok(Response::Ok)
        }
        Request::Release { task } => {
            let e = s.st.lock().tasks.remove(&task).ok_or_else(|| {
                Error::InvalidTaskHandle(format!("no task {task} in this client"))
            })?;
            // The release waits for the FC in flight and the done signal: the slot is
            // free for the client's next task once this is answered.
            let r = e.task.release();
            s.st.lock().slots_taken.remove(&e.slot);
            r.map(|()| Response::Ok)
        }
        Request::Forget { tasks } => {
            forget(&mut s.st.lock(), &tasks);
            Ok(Response::Ok)
        }
        Request::Reserve => {
            let mut st = s.st.lock();
            check_task_room(shared, &st)?;
            let room = shared.runtime.scheduler().reserve()?;
            let id = new_id(&mut st);
            st.reserved.insert(id, room);
            Ok(Response::Reserved { reservation: id })
        }
        Request::Unreserve { reservation } => {
            s.st.lock()
                .reserved
                .remove(&reservation)
                .map(|_| Response::Ok)
                .ok_or_else(|| {
                    Error::InvalidTaskHandle(format!("no reservation {reservation} in this client"))
                })
        }
        Request::Status => Ok(Response::Status {
            json: status_json(shared).to_string(),
        }),
    }
}

/// The model requests of a `Submit`, the pack of its first model and the regions its
/// buffers lie in.
type Resolved = (Vec<ModelRequest>, Arc<PackedModel>, Vec<Arc<SharedMem>>);

fn requests(st: &SessionState, parts: &[PartRef]) -> Result<Resolved> {
    let mut held = Vec::new();
    let mut reqs = Vec::with_capacity(parts.len());
    let mut first_pack = None;
    for p in parts {
        let (pack, i) = model_of(st, &p.model)?;
        let inputs = p
            .inputs
            .iter()
            .map(|planes| planes.iter().map(|b| resolve(st, b, &mut held)).collect())
            .collect::<Result<Vec<Vec<IoBuffer>>>>()?;
        let outputs = p
            .outputs
            .iter()
            .map(|b| resolve(st, b, &mut held))
            .collect::<Result<Vec<_>>>()?;
        reqs.push(ModelRequest {
            model: pack.models[i].clone(),
            inputs,
            outputs,
            rois: Vec::new(),
        });
        first_pack.get_or_insert(pack);
    }
    let pack = first_pack.ok_or_else(|| Error::ApiUse("a task needs at least one model".into()))?;
    Ok((reqs, pack, held))
}

/// Releases ended tasks the client is done with (ids it does not have are ignored: the
/// list rides on other requests and must not fail them).
fn forget(st: &mut SessionState, tasks: &[u64]) {
    for id in tasks {
        if let Some(e) = st.tasks.remove(id) {
            let _ = e.task.release();
            st.slots_taken.remove(&e.slot);
        }
    }
}

/// An end slot a new task may name: inside the session's slots and not taken.
fn check_slot(s: &Session, st: &SessionState, slot: u32) -> Result<()> {
    if slot as usize >= s.ends.len() || st.slots_taken.contains(&slot) {
        return Err(bad(
            "slot",
            format!(
                "end slot {slot} is taken or outside 0..{} in this client",
                s.ends.len()
            ),
        ));
    }
    Ok(())
}

fn check_task_room(shared: &Shared, st: &SessionState) -> Result<()> {
    if st.tasks.len() + st.reserved.len() >= shared.limits.tasks_per_client {
        return Err(Error::TaskLimit {
            limit: shared.limits.tasks_per_client,
        });
    }
    Ok(())
}

fn add_task(
    shared: &Shared,
    s: &Session,
    st: &mut SessionState,
    task: Arc<Task>,
    slot: u32,
    pack: Arc<PackedModel>,
    held: Vec<Arc<SharedMem>>,
) -> u64 {
    let ends = s.ends.clone();
    task.handle()
        .set_done_signal(Box::new(move |code| ends.end(slot as usize, code)));
    st.slots_taken.insert(slot);
    {
        let mut owners = shared.owners.lock();
        if owners.len() >= OWNERS_KEPT {
            owners.pop_front();
        }
        owners.push_back((task.handle().id(), s.cred.pid));
    }
    let id = new_id(st);
    st.tasks.insert(
        id,
        TaskEntry {
            task,
            slot,
            _pack: pack,
            _regions: held,
        },
    );
    id
}

fn task_of(s: &Session, id: u64) -> Result<Arc<Task>> {
    s.st.lock()
        .tasks
        .get(&id)
        .map(|e| e.task.clone())
        .ok_or_else(|| Error::InvalidTaskHandle(format!("no task {id} in this client")))
}

fn status_json(shared: &Shared) -> serde_json::Value {
    use crate::sched::TraceKind;
    let sched = shared.runtime.scheduler();
    let cfg = sched.config();
    let mut clients: Vec<serde_json::Value> = shared
        .sessions
        .lock()
        .values()
        .map(|s| {
            let st = s.st.lock();
            let models: Vec<String> = st
                .packs
                .values()
                .flat_map(|p| p.models.iter().map(|m| m.name.clone()))
                .collect();
            serde_json::json!({
                "client": s.client,
                "pid": s.cred.pid,
                "uid": s.cred.uid,
                "connections": s.conns.load(Ordering::SeqCst),
                "models": models,
                "live_tasks": st.tasks.len(),
                "assembling_tasks": st.reserved.len(),
                "shared_memory_bytes": st.shm_bytes,
            })
        })
        .collect();
    clients.sort_by_key(|c| c["client"].as_u64());
    // Per-core FC counts and busy time over the last few seconds of the trace.
    const WINDOW_NS: u64 = 5_000_000_000;
    let events = sched.trace_events();
    let now = events.last().map(|e| e.ts_ns).unwrap_or(0);
    let from = now.saturating_sub(WINDOW_NS);
    let mut fcs = vec![0u64; cfg.cores];
    let mut busy = vec![0u64; cfg.cores];
    let mut started: Vec<Option<u64>> = vec![None; cfg.cores];
    let mut queued: HashMap<u64, u8> = HashMap::new();
    for e in &events {
        match e.kind {
            TraceKind::Submit => {
                queued.insert(e.task, e.priority);
            }
            TraceKind::Dequeue | TraceKind::Insert | TraceKind::Cancel | TraceKind::Done => {
                queued.remove(&e.task);
            }
            _ => {}
        }
        let Some(k) = e.core.filter(|&k| k < cfg.cores) else {
            continue;
        };
        match e.kind {
            TraceKind::FcStart => started[k] = Some(e.ts_ns),
            TraceKind::FcEnd => {
                if let Some(t0) = started[k].take() {
                    if e.ts_ns >= from {
                        fcs[k] += 1;
                        busy[k] += e.ts_ns - t0.max(from);
                    }
                }
            }
            _ => {}
        }
    }
    let window = (now - from).max(1);
    let cores: Vec<serde_json::Value> = (0..cfg.cores)
        .map(|k| {
            serde_json::json!({
                "core": k,
                "fcs": fcs[k],
                "utilisation": busy[k] as f64 / window as f64,
            })
        })
        .collect();
    let mut by_prio: std::collections::BTreeMap<u8, usize> = Default::default();
    for p in queued.values() {
        *by_prio.entry(*p).or_default() += 1;
    }
    serde_json::json!({
        "version": crate::VERSION,
        "pid": std::process::id(),
        "cores": cfg.cores,
        "core_limit": cfg.core_limit,
        "live_tasks": sched.live_tasks(),
        "clients": clients,
        "queued_by_priority": by_prio.iter().map(|(p, n)| serde_json::json!({"priority": p, "tasks": n})).collect::<Vec<_>>(),
        "core_stats": cores,
        "window_s": window as f64 / 1e9,
    })
}

//! Service mode: one virtual NPU per machine, shared by every process (`vnpu serve`).
//!
//! The daemon ([`Daemon`]) owns the runtime — cores, CPU pool, library queue — and the
//! loaded models; client processes reach it over a Unix socket ([`Client`]). Tasks of
//! all clients share one library queue and one set of core FC queues, so every
//! scheduling rule of the in-process runtime holds across processes.
//!
//! What crosses the socket: small messages ([`wire`], one per packet, bounded);
//! model files as descriptors (`SCM_RIGHTS`), so the daemon never opens a client's
//! paths; tensors in shared memory files ([`shm`]) that both processes map, so
//! inference on them copies nothing. Memory the daemon cannot map is staged by the
//! client through a shared buffer (one copy each way, counted by
//! [`Client::staged_bytes`]).
//!
//! Security: the socket is 0600 (0660 with a group); the daemon checks the peer's
//! credentials on every connection; a session is one client process (pid + uid +
//! a random token), and requests can name only that session's objects; messages,
//! clients, connections, tasks and shared memory per client are bounded.

mod client;
mod daemon;
pub mod shm;
pub mod sock;
pub mod wire;

pub use client::{Client, RemotePack, RemotePart, RemoteTask, SharedRegion};
pub use daemon::{Daemon, Limits, ServeOptions};

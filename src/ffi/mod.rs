//! The C ABI: hbDNN*, hbSys* and vnpu* functions, thin over [`crate::runtime`].
//!
//! Conventions (see STYLE.md "C boundary"):
//! - every export is `#[no_mangle] pub unsafe extern "C"`, and its body is one call into
//!   `boundary.rs`, which catches panics, maps `Err(e)` to `e.code()` and stores the
//!   error's text as the thread's last error detail (`vnpuGetLastErrorDetail`);
//! - every pointer is NULL-checked; out-params are written only on success; release
//!   functions accept NULL and return the documented code;
//! - handles are tokens of a generational registry (`registry.rs`), never addresses: a
//!   stale, foreign or double-released handle is an `HB_DNN_INVALID_*_HANDLE` error;
//! - C layouts live in `types.rs` only; conversions to runtime types are checked
//!   (`convert.rs`).
//!
//! The header `include/vnpu.h` is generated from this module by `build.rs` (cbindgen).

mod backend;
mod boundary;
mod config;
mod convert;
mod dnn;
mod engine;
mod ext;
mod handles;
mod registry;
mod remote;
mod sys;
mod types;

pub use backend::*;
pub use boundary::last_error_detail;
pub use config::*;
pub use dnn::*;
pub use engine::{service_socket, service_staged_bytes};
pub use ext::*;
pub use handles::{live_handle_counts, packed_handle};
pub use sys::*;
pub use types::*;

//! vnpu: a virtual NPU on the host CPU.
//!
//! ONNX models are compiled ([`compile`]) into segments and non-preemptible function
//! calls (FCs), stored in a compiled model file ([`format`]), and run by a scheduler
//! ([`sched`]) that places tasks of many models by priority onto N virtual cores with
//! FC-level preemption. [`ffi`] exposes an hbDNN-compatible C API over [`runtime`].
//!
//! Dependency direction: `ffi -> runtime -> sched -> exec -> kernels`;
//! `compile -> ir <- onnx`; `format` is shared by `compile` and `runtime`; [`sync`] (the
//! no-yield mutex and condition variable) is a leaf that `sched` and `exec` use.
#![deny(unsafe_op_in_unsafe_fn)]
// Every unsafe block names its conditions in a `// SAFETY:` comment (an error under
// `cargo clippy -- -D warnings`, which CI runs).
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod config;
pub mod error;
pub mod exec;
pub mod ffi;
pub mod ir;
pub mod kernels;
pub mod onnx;
pub mod runtime;
pub mod sched;
pub mod service;
pub mod sync;

pub use error::{Error, Result};
pub mod compile;
pub mod format;
mod huge_pages;
pub mod quant;

/// The vnpu version (crate version), part of compiled-file manifests and cache keys.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

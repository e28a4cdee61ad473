//! vnpu: a virtual NPU on the host CPU.
//!
//! ONNX models are compiled ([`compile`]) into segments and non-preemptible function
//! calls (FCs), stored in a compiled model file ([`format`]), and run by a scheduler
//! ([`sched`]) that places tasks of many models by priority onto N virtual cores with
//! FC-level preemption. [`ffi`] exposes an hbDNN-compatible C API over [`runtime`].
//!
//! Dependency direction: `ffi -> runtime -> sched -> exec -> kernels`;
//! `compile -> ir <- onnx`; `format` is shared by `compile` and `runtime`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod error;
pub mod ffi;
pub mod ir;
pub mod runtime;

pub use error::{Error, Result};

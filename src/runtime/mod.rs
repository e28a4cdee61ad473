//! Runtime: packed models, models, tasks and the process-wide configuration.
//!
//! This is the Rust API under the C ABI (`ffi`). Everything here is thread-safe.

pub mod config;
pub mod loader;
pub mod mem;
mod model;
pub mod roi;
mod task;

pub use config::RuntimeConfig;
pub use loader::LoadSource;
pub use model::{ElemType, Model, PackedModel, Quant, TensorDesc, TensorLayout};
pub use task::{
    CtrlParams, IoBuffer, ModelRequest, Roi, RoiFrame, Runtime, Task, TaskDoneCallback,
};

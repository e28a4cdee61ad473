//! Runtime: packed models, models, task assembly and tasks (settings: `crate::config`).
//!
//! This is the Rust API under the C ABI (`ffi`). Everything here is thread-safe.

mod builder;
pub mod loader;
pub mod mem;
mod model;
pub mod roi;
mod task;

pub use builder::{TaskBuilder, MAX_MODELS_PER_TASK};
pub use loader::LoadSource;
pub use model::{ElemType, Model, PackedModel, Quant, TensorDesc, TensorLayout};
pub use task::{
    CtrlParams, IoBuffer, ModelRequest, Roi, RoiFrame, Runtime, Task, TaskDoneCallback,
};

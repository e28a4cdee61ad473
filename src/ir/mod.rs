//! Graph IR: typed operators over statically shaped values, constant weights held once.
//!
//! Invariants: `Graph::nodes` is topologically ordered; every value is produced by at
//! most one node; after shape inference every value used by a node has a shape.

mod graph;
mod ops;
pub mod shape;
mod tensor;

pub use graph::{Graph, Node, Placement, Value, ValueId};
pub use ops::*;
pub use tensor::{ConstRef, DType, Elems, SharedBytes, Tensor, TensorData};

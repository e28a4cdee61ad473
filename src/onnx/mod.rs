//! ONNX import: protobuf messages declared by hand ([`proto`]) and the importer that
//! turns a `ModelProto` into the graph IR ([`import_model`], [`import_file`]).
//!
//! Invariants of an imported graph: nodes are topologically ordered; every node carries
//! a typed, validated [`crate::ir::Op`] and `absorbed == [its ONNX node name]`;
//! initializers and `Constant` outputs are constant values; every graph input has a
//! static shape. Intermediate values get their dtype/shape from a best-effort shape
//! inference run at the end of import; the compiler re-runs inference after constant
//! folding. Any malformed input yields an error, never a panic (the importer is a fuzz
//! target: see [`import_model`]).

mod attrs;
pub mod builder;
mod file;
mod import;
mod ops;
pub mod proto;
mod tensor;
#[cfg(test)]
mod tests;

pub use file::{read_model_file, MAX_ONNX_FILE_BYTES};
#[cfg(feature = "test-ops")]
pub use import::TEST_DOMAIN;
pub use import::{import_file, import_model, ImportOptions, MAX_OPSET, MIN_OPSET};

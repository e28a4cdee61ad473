//! The one error type of the library and its mapping to the hbDNN status codes.
//!
//! `Error::code()` is the only place where causes become C codes.

use std::path::PathBuf;

/// hbDNN / hbSys status codes (values of the public API).
pub mod codes {
    pub const HB_DNN_SUCCESS: i32 = 0;
    pub const HB_DNN_INVALID_ARGUMENT: i32 = -6000001;
    pub const HB_DNN_INVALID_MODEL: i32 = -6000002;
    pub const HB_DNN_MODEL_NUMBER_EXCEED_LIMIT: i32 = -6000003;
    pub const HB_DNN_INVALID_PACKED_DNN_HANDLE: i32 = -6000004;
    pub const HB_DNN_INVALID_DNN_HANDLE: i32 = -6000005;
    pub const HB_DNN_CAN_NOT_OPEN_FILE: i32 = -6000006;
    pub const HB_DNN_OUT_OF_MEMORY: i32 = -6000007;
    pub const HB_DNN_TIMEOUT: i32 = -6000008;
    pub const HB_DNN_TASK_NUM_EXCEED_LIMIT: i32 = -6000009;
    pub const HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT: i32 = -6000010;
    pub const HB_DNN_INVALID_TASK_HANDLE: i32 = -6000011;
    pub const HB_DNN_RUN_TASK_FAILED: i32 = -6000012;
    pub const HB_DNN_MODEL_IS_RUNNING: i32 = -6000013;
    pub const HB_DNN_INCOMPATIBLE_MODEL: i32 = -6000014;
    pub const HB_DNN_API_USE_ERROR: i32 = -6000015;
    pub const HB_DNN_MULTI_PROGRESS_USE_ERROR: i32 = -6000016;
    pub const HB_SYS_SUCCESS: i32 = 0;
    pub const HB_SYS_INVALID_ARGUMENT: i32 = -6000129;
    pub const HB_SYS_OUT_OF_MEMORY: i32 = -6000130;
    pub const HB_SYS_REGISTER_MEM_FAILED: i32 = -6000131;
}

/// Every failure the library reports, one variant per cause.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("cannot open {path}: {reason}")]
    Io { path: PathBuf, reason: String },
    /// The ONNX protobuf could not be decoded or is structurally invalid.
    #[error("invalid ONNX model {model}: {reason}")]
    OnnxFormat { model: String, reason: String },
    /// An operator we do not support.
    #[error("node '{node}': unsupported operator {op}{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    UnsupportedOp {
        node: String,
        op: String,
        detail: String,
    },
    /// An attribute value we do not support or that is invalid.
    #[error("node '{node}' ({op}): attribute '{attr}': {reason}")]
    BadAttribute {
        node: String,
        op: String,
        attr: String,
        reason: String,
    },
    /// Shapes that do not fit the operator.
    #[error("node '{node}' ({op}): {reason}")]
    Shape {
        node: String,
        op: String,
        reason: String,
    },
    /// A compile option out of its range or malformed.
    #[error("compile option {option}: {reason}")]
    CompileOption { option: String, reason: String },
    /// A compiled model file that is truncated, corrupted, foreign or too new.
    #[error("invalid model file {path}: {reason}")]
    ModelFormat { path: String, reason: String },
    /// A compiled model file of a newer format version.
    #[error(
        "model file {path} has a newer format version {found}; this vnpu reads up to {supported}"
    )]
    IncompatibleModel {
        path: String,
        found: u32,
        supported: u32,
    },
    /// A bad argument at the API.
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument { name: String, reason: String },
    /// A tensor that does not match the model.
    #[error("tensor '{name}': {field} expected {expected}, got {actual}")]
    TensorMismatch {
        name: String,
        field: String,
        expected: String,
        actual: String,
    },
    /// A model name not present in the packed model.
    #[error("no model named '{name}' (have: {available})")]
    UnknownModel { name: String, available: String },
    /// A null, stale, foreign or released packed-model handle.
    #[error("invalid packed model handle: {0}")]
    InvalidPackedHandle(String),
    /// A null, stale, foreign or released model handle.
    #[error("invalid model handle: {0}")]
    InvalidModelHandle(String),
    /// A null, stale, foreign or released task handle.
    #[error("invalid task handle: {0}")]
    InvalidTaskHandle(String),
    /// Too many live tasks.
    #[error("too many live tasks (limit {limit}); release finished tasks")]
    TaskLimit { limit: usize },
    /// Too many models in one task (`more`).
    #[error("too many models in one task (limit {limit})")]
    TaskBatchLimit { limit: usize },
    /// Waiting timed out; the task is intact.
    #[error("timed out after {ms} ms waiting for the task")]
    Timeout { ms: u64 },
    /// Execution of a task failed.
    #[error("task failed in model '{model}': {reason}")]
    RunFailed { model: String, reason: String },
    /// The task was released before it ended: while queued (`ran` false, it never ran) or
    /// while running (`ran` true, stopped at its next FC or segment boundary).
    #[error("task of model '{model}' was cancelled: {}", if *ran { "released while running" } else { "released before it ran" })]
    Cancelled { model: String, ran: bool },
    /// The API was used in a wrong sequence.
    #[error("API misuse: {0}")]
    ApiUse(String),
    /// An allocation failed.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// An invalid configuration value (environment variable or config call).
    #[error("invalid configuration {name}={value}: {reason}")]
    Config {
        name: String,
        value: String,
        reason: String,
    },
    /// A bad argument to an hbSys memory call.
    #[error("invalid memory argument: {0}")]
    SysInvalidArgument(String),
    /// A memory allocation through hbSys failed.
    #[error("memory allocation failed: {0}")]
    SysOutOfMemory(String),
    /// hbSysRegisterMem failed.
    #[error("memory registration failed: {0}")]
    SysRegister(String),
    /// A panic caught at a boundary (core worker or C entry point).
    #[error("internal error (panic): {0}")]
    Panic(String),
    /// Service mode: the daemon at `socket` is unreachable or went away.
    #[error("vnpu service at {socket}: {reason}")]
    Service { socket: String, reason: String },
    /// Service mode: the daemon refused a request with this code.
    #[error("{detail}")]
    Remote { code: i32, detail: String },
}

/// Result with the library error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The hbDNN / hbSys status code of this error.
    pub fn code(&self) -> i32 {
        use codes::*;
        match self {
            Error::Io { .. } => HB_DNN_CAN_NOT_OPEN_FILE,
            Error::OnnxFormat { .. }
            | Error::UnsupportedOp { .. }
            | Error::BadAttribute { .. }
            | Error::Shape { .. }
            | Error::CompileOption { .. }
            | Error::ModelFormat { .. } => HB_DNN_INVALID_MODEL,
            Error::IncompatibleModel { .. } => HB_DNN_INCOMPATIBLE_MODEL,
            Error::InvalidArgument { .. }
            | Error::TensorMismatch { .. }
            | Error::UnknownModel { .. } => HB_DNN_INVALID_ARGUMENT,
            Error::Config { .. } => HB_DNN_INVALID_ARGUMENT,
            Error::InvalidPackedHandle(_) => HB_DNN_INVALID_PACKED_DNN_HANDLE,
            Error::InvalidModelHandle(_) => HB_DNN_INVALID_DNN_HANDLE,
            Error::InvalidTaskHandle(_) => HB_DNN_INVALID_TASK_HANDLE,
            Error::TaskLimit { .. } => HB_DNN_TASK_NUM_EXCEED_LIMIT,
            Error::TaskBatchLimit { .. } => HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT,
            Error::Timeout { .. } => HB_DNN_TIMEOUT,
            Error::RunFailed { .. } | Error::Cancelled { .. } | Error::Panic(_) => {
                HB_DNN_RUN_TASK_FAILED
            }
            Error::ApiUse(_) => HB_DNN_API_USE_ERROR,
            Error::OutOfMemory(_) => HB_DNN_OUT_OF_MEMORY,
            Error::SysInvalidArgument(_) => HB_SYS_INVALID_ARGUMENT,
            Error::SysOutOfMemory(_) => HB_SYS_OUT_OF_MEMORY,
            Error::SysRegister(_) => HB_SYS_REGISTER_MEM_FAILED,
            Error::Service { .. } => HB_DNN_MULTI_PROGRESS_USE_ERROR,
            Error::Remote { code, .. } => *code,
        }
    }

    /// Shorthand for a shape error at a node.
    pub fn shape(node: &str, op: &str, reason: impl Into<String>) -> Error {
        Error::Shape {
            node: node.into(),
            op: op.into(),
            reason: reason.into(),
        }
    }
}

/// The one table of status-code descriptions: every documented code with the sentence
/// `hbDNNGetErrorDesc` returns (NUL-terminated, so the C boundary hands them out as is).
pub const DESCRIPTIONS: &[(i32, &std::ffi::CStr)] = {
    use codes::*;
    &[
        (HB_DNN_SUCCESS, c"success"),
        (
            HB_DNN_INVALID_ARGUMENT,
            c"an argument is invalid (null pointer, wrong tensor, out of range value)",
        ),
        (
            HB_DNN_INVALID_MODEL,
            c"the model is invalid (corrupt file, unsupported operator or attribute)",
        ),
        (
            HB_DNN_MODEL_NUMBER_EXCEED_LIMIT,
            c"too many models are loaded",
        ),
        (
            HB_DNN_INVALID_PACKED_DNN_HANDLE,
            c"the packed model handle is invalid or already released",
        ),
        (
            HB_DNN_INVALID_DNN_HANDLE,
            c"the model handle is invalid or its packed model was released",
        ),
        (HB_DNN_CAN_NOT_OPEN_FILE, c"the model file cannot be opened"),
        (HB_DNN_OUT_OF_MEMORY, c"out of memory"),
        (
            HB_DNN_TIMEOUT,
            c"waiting for the task timed out; the task is still valid",
        ),
        (
            HB_DNN_TASK_NUM_EXCEED_LIMIT,
            c"too many live tasks; release finished tasks first",
        ),
        (
            HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT,
            c"too many models or ROIs in one task",
        ),
        (
            HB_DNN_INVALID_TASK_HANDLE,
            c"the task handle is invalid or already released",
        ),
        (
            HB_DNN_RUN_TASK_FAILED,
            c"the task failed while running or was cancelled",
        ),
        (
            HB_DNN_MODEL_IS_RUNNING,
            c"the model is in use by a running task",
        ),
        (
            HB_DNN_INCOMPATIBLE_MODEL,
            c"the model file was built for a newer format version",
        ),
        (
            HB_DNN_API_USE_ERROR,
            c"the API was called in a wrong sequence",
        ),
        (
            HB_DNN_MULTI_PROGRESS_USE_ERROR,
            c"multi-process use failed: the vnpu service (VNPU_SERVICE) is unreachable or gone",
        ),
        (HB_SYS_INVALID_ARGUMENT, c"a memory argument is invalid"),
        (HB_SYS_OUT_OF_MEMORY, c"memory allocation failed"),
        (HB_SYS_REGISTER_MEM_FAILED, c"memory registration failed"),
    ]
};

/// The description of an unknown status code.
pub const UNKNOWN_CODE: &std::ffi::CStr = c"unknown error code";

/// A sentence describing a status code, as a C string (what `hbDNNGetErrorDesc` returns).
pub fn describe_code_c(code: i32) -> &'static std::ffi::CStr {
    DESCRIPTIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(UNKNOWN_CODE, |(_, d)| d)
}

/// A sentence describing a status code (what `hbDNNGetErrorDesc` returns).
pub fn describe_code(code: i32) -> &'static str {
    describe_code_c(code)
        .to_str()
        .unwrap_or("unknown error code")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value of every variant.
    fn every_variant() -> Vec<Error> {
        let s = || String::from("x");
        vec![
            Error::Io {
                path: PathBuf::from("p"),
                reason: s(),
            },
            Error::OnnxFormat {
                model: s(),
                reason: s(),
            },
            Error::UnsupportedOp {
                node: s(),
                op: s(),
                detail: s(),
            },
            Error::BadAttribute {
                node: s(),
                op: s(),
                attr: s(),
                reason: s(),
            },
            Error::shape("n", "op", "r"),
            Error::CompileOption {
                option: s(),
                reason: s(),
            },
            Error::ModelFormat {
                path: s(),
                reason: s(),
            },
            Error::IncompatibleModel {
                path: s(),
                found: 2,
                supported: 1,
            },
            Error::InvalidArgument {
                name: s(),
                reason: s(),
            },
            Error::TensorMismatch {
                name: s(),
                field: s(),
                expected: s(),
                actual: s(),
            },
            Error::UnknownModel {
                name: s(),
                available: s(),
            },
            Error::InvalidPackedHandle(s()),
            Error::InvalidModelHandle(s()),
            Error::InvalidTaskHandle(s()),
            Error::TaskLimit { limit: 1 },
            Error::TaskBatchLimit { limit: 1 },
            Error::Timeout { ms: 1 },
            Error::RunFailed {
                model: s(),
                reason: s(),
            },
            Error::Cancelled {
                model: s(),
                ran: false,
            },
            Error::ApiUse(s()),
            Error::OutOfMemory(s()),
            Error::Config {
                name: s(),
                value: s(),
                reason: s(),
            },
            Error::SysInvalidArgument(s()),
            Error::SysOutOfMemory(s()),
            Error::SysRegister(s()),
            Error::Panic(s()),
            Error::Service {
                socket: s(),
                reason: s(),
            },
            Error::Remote {
                code: crate::error::codes::HB_DNN_TIMEOUT,
                detail: s(),
            },
        ]
    }

    #[test]
    fn every_variant_has_a_described_code_and_a_message() {
        for e in every_variant() {
            assert!(e.code() < 0, "{e:?}");
            assert_ne!(describe_code(e.code()), "unknown error code", "{e:?}");
            assert!(!e.to_string().is_empty());
        }
        let cancelled = |ran| Error::Cancelled {
            model: "m".into(),
            ran,
        };
        assert!(cancelled(false)
            .to_string()
            .contains("released before it ran"));
        assert!(cancelled(true)
            .to_string()
            .contains("released while running"));
    }

    #[test]
    fn the_description_table_has_each_code_once() {
        for (i, (c, d)) in DESCRIPTIONS.iter().enumerate() {
            assert!(!d.to_bytes().is_empty());
            assert_eq!(describe_code_c(*c), *d);
            assert!(DESCRIPTIONS[i + 1..].iter().all(|(o, _)| o != c), "{c}");
        }
        assert_eq!(describe_code(1), "unknown error code");
        assert_eq!(describe_code_c(-1), UNKNOWN_CODE);
    }
}

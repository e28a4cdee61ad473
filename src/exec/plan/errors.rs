//! The plan errors every family reports: unsupported node, bad attribute, inconsistent
//! shapes (plan time) and data errors found while running (run time).

use crate::error::Error;
use crate::ir::Node;

/// The node uses something no kernel supports (an operand kind, dtype or variant).
pub(crate) fn unsup(n: &Node, detail: impl Into<String>) -> Error {
    Error::UnsupportedOp {
        node: n.name.clone(),
        op: n.op.name().into(),
        detail: detail.into(),
    }
}

/// An attribute of the node is invalid.
pub(crate) fn bad_attr(n: &Node, attr: &str, reason: impl Into<String>) -> Error {
    Error::BadAttribute {
        node: n.name.clone(),
        op: n.op.name().into(),
        attr: attr.into(),
        reason: reason.into(),
    }
}

/// The node's shapes (or constant operands) do not fit each other.
pub(crate) fn shape_err(n: &Node, reason: impl Into<String>) -> Error {
    Error::shape(&n.name, n.op.name(), reason)
}

/// A data error found while running the node (e.g. an out-of-range Gather index).
pub(crate) fn run_err(n: &Node, reason: impl Into<String>) -> Error {
    Error::RunFailed {
        model: String::new(),
        reason: format!("node '{}' ({}): {}", n.name, n.op.name(), reason.into()),
    }
}

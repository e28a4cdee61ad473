//! Execution engine (in progress).

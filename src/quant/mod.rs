//! Quantisation (issue 16): quantised model inputs and outputs at the API boundary.

pub mod io;

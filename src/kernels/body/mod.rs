//! Generic kernel bodies and their parameter types: the plain-Rust code every kernel
//! table compiles for its instruction set (the portable table as is, SIMD tables inside
//! `#[target_feature]` functions, where the compiler vectorises it).
//!
//! Invariant: this is a leaf of `kernels`: it imports nothing from the families nor
//! from `kernels::isa`, so the tables can be built from it without a cycle.

pub mod conv;
pub mod depthwise;
pub mod dw_block;
pub mod dw_nhwc;
pub mod eltwise;
pub mod epilogue;
pub mod im2col;
pub mod norm;
pub mod pool;
pub mod prefetch;
pub mod resize;
pub mod rnn;
pub mod transpose;
pub mod unary;

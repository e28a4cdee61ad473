//! Compute kernels: f32 first, over plain slices, no allocation.
//!
//! Each family lives in its own file (or folder) and reaches every ISA-specific routine
//! through a [`KernelTable`] ([`isa`]), chosen once by runtime CPU detection: [`table`]
//! is the best one for this CPU. Generic bodies and parameter types shared by the
//! tables live in [`body`], below both. Kernels know nothing about graphs: the executor
//! (`crate::exec`) resolves shapes, attributes and memory, then calls them.

pub mod bf16;
pub mod body;
pub mod cache;
pub mod conv;
pub mod copy;
pub mod eltwise;
pub mod gemm;
pub mod image;
pub mod nd;
pub mod norm;
pub mod packed;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod unary;
pub mod yield_point;

pub mod isa;
/// The kernel-table module under the name the executor imports (`Isa`, `best_isa`).
pub use isa as simd;
pub use isa::{table, Isa, KernelTable};

#[cfg(test)]
pub(crate) mod testutil {
    //! Deterministic random data and tolerant comparison for kernel tests.

    /// `n` pseudo-random floats in `[-1, 1)` from `seed` (xorshift).
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Asserts `|a - b| <= tol * (1 + |b|)` element-wise (NaN never matches).
    pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len(), "length");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "element {i}: got {x}, want {y}"
            );
        }
    }
}

//! The AVX2 int8 table (x86-64): the generic bodies of `body` compiled with AVX2
//! enabled, and hand-written intrinsics for the hot entries. Every entry gives the same
//! bits as the portable one.
//!
//! Every entry of [`TABLE`] is a private safe wrapper around a `#[target_feature]`
//! function; the table is reachable only through the AVX2+FMA kernel table, which is
//! handed out only after detecting AVX2 (and FMA), so each wrapper runs only on a CPU
//! that has AVX2.

use super::body::{self, AddParams};
use super::table::QuantTable;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::PoolShape;

/// The AVX2 int8 table.
pub(crate) static TABLE: QuantTable = QuantTable {
    name: "avx2",
    tile,
    requant_scalar,
    requant_cols,
    quantize,
    dequantize,
    qadd,
    dw_plane,
    max_pool_plane,
};

/// Builds a safe table entry `$name` that runs the generic body `$body` compiled with
/// AVX2 enabled.
macro_rules! avx2_build {
    ($name:ident, $body:path, ($($arg:ident: $ty:ty),*)) => {
        #[allow(clippy::too_many_arguments)]
        fn $name($($arg: $ty),*) {
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn build($($arg: $ty),*) {
                $body($($arg),*)
            }
            // SAFETY: this wrapper is reachable only through TABLE, which only the
            // AVX2+FMA kernel table holds, handed out after detecting both features; the
            // body indexes safely.
            unsafe { build($($arg),*) }
        }
    };
}

avx2_build!(tile, body::tile, (kp: usize, a: &[i16], b: &[i16], c: &mut [i32], ldc: usize));
avx2_build!(requant_scalar, body::requant_scalar, (acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]));
avx2_build!(requant_cols, body::requant_cols, (acc: &[i32], bias: &[i32], mult: &[f32], zp: i32, lo: u8, hi: u8, out: &mut [u8]));
avx2_build!(quantize, body::quantize, (x: &[f32], scale: f32, zp: u8, out: &mut [u8]));
avx2_build!(dequantize, body::dequantize, (x: &[u8], scale: f32, zp: u8, out: &mut [f32]));
avx2_build!(qadd, body::qadd, (p: &AddParams, a: &[u8], b: &[u8], out: &mut [u8]));
avx2_build!(dw_plane, body::dw_plane, (s: &ConvShape, w: &[i16], xpad: &[i16], wp: usize, acc: &mut [i32]));
avx2_build!(max_pool_plane, body::max_pool_plane, (s: &PoolShape, x: &[u8], y: &mut [u8]));

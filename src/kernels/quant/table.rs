//! The int8 sub-table: every ISA-specific int8 routine, one [`QuantTable`] per
//! instruction set, reached through `KernelTable::quant` (so the same runtime CPU
//! detection picks it). The portable instance is [`PORTABLE`]; the AVX2 one lives in
//! `x86_64_avx2` and is only reachable through the AVX2 kernel table.

use super::body;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::PoolShape;

/// Rows of one int8 GEMM micro-tile (and of one packed A panel).
pub const QMR: usize = 6;
/// Columns of one int8 GEMM micro-tile (and of one packed B panel).
pub const QNR: usize = 16;

/// Every ISA-specific int8 routine, for one instruction set. All entries are safe to call
/// with any arguments: they check the bounds they rely on. Every entry gives the same
/// bits as the portable one.
// The entries are plain kernel signatures; naming each as a type alias would only hide them.
#[allow(clippy::type_complexity)]
pub struct QuantTable {
    /// Name of the table (as the kernel table's).
    pub name: &'static str,
    /// One [`QMR`] x [`QNR`] tile of i32: `c = A_panel · B_panel` over `kp` K pairs.
    /// `a` holds `kp * QMR * 2` i16 (per pair, QMR rows of two consecutive K values),
    /// `b` `kp * QNR * 2` (per pair, QNR columns of two consecutive K values), `c` QMR rows
    /// of QNR at stride `ldc`. Products are exact (i16 x i16 pairs summed in i32).
    pub tile: fn(kp: usize, a: &[i16], b: &[i16], c: &mut [i32], ldc: usize),
    /// `out[j] = clamp(rne((acc[j] + bias) * mult) + zp, lo, hi)`: one output channel.
    pub requant_scalar:
        fn(acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]),
    /// `out[j] = clamp(rne((acc[j] + bias[j]) * mult[j]) + zp, lo, hi)`: one channel per
    /// element (a GEMM row).
    pub requant_cols:
        fn(acc: &[i32], bias: &[i32], mult: &[f32], zp: i32, lo: u8, hi: u8, out: &mut [u8]),
    /// `out[i] = clamp(rne(x[i] / scale) + zp, 0, 255)` (onnxruntime's QuantizeLinear).
    pub quantize: fn(x: &[f32], scale: f32, zp: u8, out: &mut [u8]),
    /// `out[i] = (x[i] - zp) * scale` (DequantizeLinear).
    pub dequantize: fn(x: &[u8], scale: f32, zp: u8, out: &mut [f32]),
    /// The u8 add: `out[i] = q((a[i]-za)*sa + (b[i]-zb)*sb)`, `b` of `a.len()` elements or
    /// one (broadcast), see [`body::AddParams`].
    pub qadd: fn(p: &body::AddParams, a: &[u8], b: &[u8], out: &mut [u8]),
    /// Depthwise accumulation of one channel plane: `acc[oy*ow+ox] = sum w[ky,kx] *
    /// xpad[(oy*sh+ky*dh)*wp + ox*sw+kx*dw]` (see [`body::dw_plane`]).
    pub dw_plane: fn(s: &ConvShape, w: &[i16], xpad: &[i16], wp: usize, acc: &mut [i32]),
    /// Max pool of one u8 plane (padding never wins).
    pub max_pool_plane: fn(s: &PoolShape, x: &[u8], y: &mut [u8]),
}

/// The portable int8 table (any target).
pub static PORTABLE: QuantTable = QuantTable {
    name: "portable",
    tile: body::tile,
    requant_scalar: body::requant_scalar,
    requant_cols: body::requant_cols,
    quantize: body::quantize,
    dequantize: body::dequantize,
    qadd: body::qadd,
    dw_plane: body::dw_plane,
    max_pool_plane: body::max_pool_plane,
};

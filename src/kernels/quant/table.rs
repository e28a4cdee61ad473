//! The int8 sub-table: every ISA-specific int8 routine, one [`QuantTable`] per
//! instruction set, reached through `KernelTable::quant` (so the same runtime CPU
//! detection picks it). The portable instance is [`PORTABLE`]; the AVX2 one lives in
//! `x86_64_avx2` and is only reachable through the AVX2 kernel table; the AVX-512 VNNI
//! one lives in `x86_64_vnni`, reachable only through the AVX-512 kernel table.
//!
//! The GEMM / conv operands come in two packed layouts ([`QLayout`]): K *pairs* widened
//! to i16 (any weight in `[-255, 255]`) or K *quads* of bytes (u8 activations x s8
//! weights). A table names the layout its s8 weights are packed in; every table runs
//! both (each has all tile entries), so weights packed for one table give the same
//! bits with any other.

use super::body;
use crate::kernels::body::pool::PoolShape;

/// Rows of one int8 GEMM micro-tile (and of one packed A panel).
pub const QMR: usize = 6;
/// Columns of one int8 GEMM micro-tile (and of one packed B panel).
pub const QNR: usize = 16;

/// Rows of one quad micro-tile (and of one packed quad A panel).
pub const Q4MR: usize = 8;
/// Columns of one quad micro-tile (and of one packed quad B panel).
pub const Q4NR: usize = 32;

/// How a GEMM / conv packs its operands: the K grouping and the tile geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QLayout {
    /// K pairs widened to i16 in [`QMR`] x [`QNR`] tiles: products are i16 x i16
    /// (`pmaddwd`), so weights may be anything in `[-255, 255]`.
    Pairs,
    /// K quads of bytes in [`Q4MR`] x [`Q4NR`] tiles: u8 x s8 products, four summed per
    /// i32 (`vpdpbusd`); weights must be s8.
    Quads,
}

impl QLayout {
    /// Rows of a tile (and of an A panel).
    pub const fn mr(self) -> usize {
        match self {
            QLayout::Pairs => QMR,
            QLayout::Quads => Q4MR,
        }
    }

    /// Columns of a tile (and of a B panel).
    pub const fn nr(self) -> usize {
        match self {
            QLayout::Pairs => QNR,
            QLayout::Quads => Q4NR,
        }
    }

    /// K values per group (2 or 4).
    pub const fn kg(self) -> usize {
        match self {
            QLayout::Pairs => 2,
            QLayout::Quads => 4,
        }
    }

    /// K groups of depth `k` (the last one zero-padded).
    pub const fn groups(self, k: usize) -> usize {
        k.div_ceil(self.kg())
    }

    /// Elements of `rows` rows of depth `k` packed into A panels.
    pub const fn a_len(self, rows: usize, k: usize) -> usize {
        rows.div_ceil(self.mr()) * self.mr() * self.groups(k) * self.kg()
    }

    /// Elements of `cols` columns of depth `k` packed into B panels.
    pub const fn b_len(self, k: usize, cols: usize) -> usize {
        cols.div_ceil(self.nr()) * self.nr() * self.groups(k) * self.kg()
    }
}

/// The requantisation of one quad tile's rows (one output channel per row): row `r`'s
/// outputs are `clamp(rne((acc + bias[r]) * mult[r]) + y_zp, lo, hi)`
/// (`body::requant_one`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TilePost {
    /// Folded bias per row.
    pub bias: [i32; Q4MR],
    /// Multiplier per row.
    pub mult: [f32; Q4MR],
    /// Output zero point.
    pub y_zp: i32,
    /// Output clamp, low end.
    pub lo: u8,
    /// Output clamp, high end.
    pub hi: u8,
}

/// Where [`QuantTable::quad_tile_su_u8`] writes: rows `lo..hi` of the tile, their first
/// `cols` (at most [`Q4NR`]) columns, requantised by `post` into `out` (row `r` at `(r -
/// lo) * ldo`; nothing else written), near-ties within `eps` of a rounding boundary.
#[derive(Debug)]
pub struct TileDst<'a> {
    /// The rows' requantisation.
    pub post: &'a TilePost,
    /// First row written.
    pub lo: usize,
    /// One past the last row written.
    pub hi: usize,
    /// Columns written per row.
    pub cols: usize,
    /// The output, from row `lo`'s first column.
    pub out: &'a mut [u8],
    /// Output row stride.
    pub ldo: usize,
    /// Near-tie distance ([`super::conv::TIE_EPS`]).
    pub eps: f32,
}

impl TileDst<'_> {
    /// Panics unless the rows and columns lie inside a quad tile and `out` holds them.
    pub fn check(&self) {
        let (lo, hi, cols) = (self.lo, self.hi, self.cols);
        assert!(lo < hi && hi <= Q4MR && (1..=Q4NR).contains(&cols));
        assert!(self.ldo >= cols && self.out.len() >= (hi - lo - 1) * self.ldo + cols);
    }
}

/// Where the B quads of a conv tile lie (`QuantTable::quad_tile_su`): quad `q` (four
/// consecutive K values of each of [`Q4NR`] columns, 128 bytes) at byte `offs[q]` of the
/// tile's B operand; `end` bounds every quad's last byte.
#[derive(Debug, Clone, Copy)]
pub struct QuadOffsets<'a> {
    offs: &'a [u32],
    end: usize,
}

impl<'a> QuadOffsets<'a> {
    /// The quads at `offs`.
    pub fn new(offs: &'a [u32]) -> Self {
        let end = offs
            .iter()
            .map(|&o| o as usize + Q4NR * 4)
            .max()
            .unwrap_or(0);
        QuadOffsets { offs, end }
    }

    /// Quad `q`'s byte offset.
    #[inline(always)]
    pub fn at(&self, q: usize) -> usize {
        self.offs[q] as usize
    }

    /// Panics unless `kq` quads are listed and every one lies inside `b_len` bytes.
    pub fn check(&self, kq: usize, b_len: usize) {
        assert!(
            self.offs.len() >= kq && b_len >= self.end,
            "B quads outside B"
        );
    }

    /// The offsets as listed.
    pub fn offsets(&self) -> &'a [u32] {
        self.offs
    }
}

/// The operands of a conv tile: A panel (s8 weights), B (u8) and where B's quads lie.
pub type ConvOps<'a> = (&'a [i8], &'a [u8], &'a QuadOffsets<'a>);

/// Every ISA-specific int8 routine, for one instruction set. All entries are safe to call
/// with any arguments: they check the bounds they rely on. Every entry gives the same
/// bits as the portable one.
// The entries are plain kernel signatures; naming each as a type alias would only hide them.
#[allow(clippy::type_complexity)]
pub struct QuantTable {
    /// Name of the table (as the kernel table's).
    pub name: &'static str,
    /// The layout s8 weights are packed in for this table.
    pub layout: QLayout,
    /// One [`QMR`] x [`QNR`] tile of i32: `c = A_panel · B_panel` over `kp` K pairs.
    /// `a` holds `kp * QMR * 2` i16 (per pair, QMR rows of two consecutive K values),
    /// `b` `kp * QNR * 2` (per pair, QNR columns of two consecutive K values), `c` QMR rows
    /// of QNR at stride `ldc`. Products are exact (i16 x i16 pairs summed in i32).
    pub tile: fn(kp: usize, a: &[i16], b: &[i16], c: &mut [i32], ldc: usize),
    /// One [`Q4MR`] x [`Q4NR`] tile of i32 with s8 A (conv weights) and u8 B (im2col):
    /// `c = A_panel · B` over `kq` K quads. `a` holds `kq * Q4MR * 4` bytes (per quad,
    /// Q4MR rows of four consecutive K values); B quad `q` (Q4NR columns of four
    /// consecutive K values) lies at `b[at.at(q)..]` (a packed panel: `q * 128`); `c`
    /// Q4MR rows of Q4NR at stride `ldc`.
    pub quad_tile_su:
        fn(kq: usize, a: &[i8], b: &[u8], at: &QuadOffsets<'_>, c: &mut [i32], ldc: usize),
    /// `quad_tile_su` requantised instead of stored, into `dst` ([`TileDst`]). Returns
    /// per row the mask of its near-ties: bit `j` set where column `j`'s value `(acc +
    /// bias) * mult`, clamped to the output bounds, lies more than `0.5 - eps` from the
    /// nearest integer (0 for rows not written).
    pub quad_tile_su_u8: fn(kq: usize, ops: ConvOps<'_>, dst: TileDst<'_>) -> [u32; Q4MR],
    /// As `quad_tile_su` with u8 A (GEMM activations) and s8 B (GEMM weights).
    pub quad_tile_us: fn(kq: usize, a: &[u8], b: &[i8], c: &mut [i32], ldc: usize),
    /// Scatters rows `p..p + src.len()` of a u8 B operand (`p` a multiple of 4, `p < k`;
    /// one to four rows of the same length `n`: the block's columns) into quad B panels
    /// of depth `k` in `out` (column `j`, row `p + r` at `(j / Q4NR) * panel + (p / 4) *
    /// Q4NR * 4 + (j % Q4NR) * 4 + r`, `panel = ceil(k / 4) * Q4NR * 4`). Columns past
    /// `n` and rows past the given ones are left as they are.
    pub scatter_quads: fn(k: usize, p: usize, src: &[&[u8]], out: &mut [u8]),
    /// `out[j] = clamp(rne((acc[j] + bias) * mult) + zp, lo, hi)`: one output channel.
    pub requant_scalar:
        fn(acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]),
    /// The first `j` whose value `(acc[j] + bias) * mult`, clamped to `bounds` widened
    /// by one, lies within `eps` of a rounding boundary (`x.5`), or `acc.len()`: where
    /// the near-ties of one channel's outputs are.
    pub first_near_tie:
        fn(acc: &[i32], bias: i32, mult: f32, bounds: (f32, f32), eps: f32) -> usize,
    /// `requant_scalar` and `first_near_tie` (with the output bounds) in one pass: writes
    /// every output and returns the first near-tie's index, or `acc.len()`.
    pub requant_near_tie: fn(
        acc: &[i32],
        bias: i32,
        mult: f32,
        zp: i32,
        lo: u8,
        hi: u8,
        eps: f32,
        out: &mut [u8],
    ) -> usize,
    /// [`body::REF_LANES`] fused multiply-add chains side by side, the float reference's
    /// dot products of a near-tie (`conv::FloatTies`): lane `l`'s operands are
    /// `x[l * stride..][..steps]` and `w[l * stride..][..steps]`, and for each step `s`
    /// in order `chains[l] = fma(x[l * stride + s], w[l * stride + s], chains[l])`, one
    /// rounding per step as `f32::mul_add`. Panics unless `steps <= stride` and both
    /// hold `(REF_LANES - 1) * stride + steps` values.
    pub ref_chains:
        fn(x: &[f32], w: &[f32], stride: usize, steps: usize, chains: &mut [f32; body::REF_LANES]),
    /// `out[i] = (x[taps[i]] - zp) as f32 * scale`: the dequantised input values under
    /// a near-tie's window, in the float reference's order. Panics on a tap past `x`.
    pub ref_gather: fn(x: &[u8], taps: &[u32], zp: u8, scale: f32, out: &mut [f32]),
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
    /// Depthwise accumulation: `acc[j] = sum_t w[t] * src[offs[t] + j]` for every
    /// `j < acc.len()` (one tap per offset; see `conv` for the phase-split plane).
    pub dw_taps: fn(offs: &[usize], w: &[i16], src: &[i16], acc: &mut [i32]),
    /// `y[i] = table[x[i]]` (`x` and `y` of one length): QLut, and requantisation from
    /// one u8 quantisation to another.
    pub lut: fn(table: &[u8; 256], x: &[u8], y: &mut [u8]),
    /// The u8 softmax of one block (`p.len * p.inner` bytes of `x` and `y`), every lane
    /// with the bits of `body::softmax_lane`.
    pub softmax_block: fn(p: &body::SoftmaxParams<'_>, x: &[u8], y: &mut [u8]),
    /// `dst[i] = src[2 * i]` for every `i < dst.len()` (`src` holds `2 * dst.len() - 1`
    /// bytes or more): a stride-2 conv's phase rows.
    pub take_even: fn(src: &[u8], dst: &mut [u8]),
    /// Copies `rows` rows of `len` bytes from `src` (rows `ss` apart) to `dst` (rows `ds`
    /// apart).
    pub copy_rows: fn(src: &[u8], ss: usize, dst: &mut [u8], ds: usize, shape: (usize, usize)),
    /// Max pool of one u8 plane (padding never wins).
    pub max_pool_plane: fn(s: &PoolShape, x: &[u8], y: &mut [u8]),
}

/// The portable int8 table (any target).
pub static PORTABLE: QuantTable = QuantTable {
    name: "portable",
    layout: QLayout::Pairs,
    tile: body::tile,
    quad_tile_su: body::quad_tile_at,
    quad_tile_su_u8: body::quad_tile_u8,
    quad_tile_us: body::quad_tile,
    scatter_quads: body::scatter_quads,
    requant_scalar: body::requant_scalar,
    requant_cols: body::requant_cols,
    first_near_tie: body::first_near_tie,
    requant_near_tie: body::requant_near_tie,
    ref_chains: body::ref_chains,
    ref_gather: body::ref_gather,
    quantize: body::quantize,
    dequantize: body::dequantize,
    qadd: body::qadd,
    dw_taps: body::dw_taps,
    lut: body::lut,
    softmax_block: body::softmax_block,
    take_even: body::take_even,
    copy_rows: body::copy_rows,
    max_pool_plane: body::max_pool_plane,
};

//! The portable table: every entry is a generic body compiled for the baseline target.

use super::{KernelTable, RowBlock, TileEpi, HALF, MR, NR, SEGS_ROWS};
use crate::kernels::body;

/// The portable table (any target).
pub(crate) static TABLE: KernelTable = KernelTable {
    name: "portable",
    isa: super::Isa::Portable,
    mr: MR,
    nr: NR,
    lanes: 1,
    mm_tile,
    mm_tile_rows,
    mm_row,
    mm_half,
    mm_half_strided,
    mm_half_strided_epi: None,
    mm_tile24_strided_epi: None,
    mm_cols,
    mm_part,
    mm_part_rows,
    transpose32: body::transpose::transpose32,
    gather_words: body::transpose::gather_words,
    epilogue: |e, c, ldc, i0, mr, j0, nr| e.apply_body(c, ldc, i0, mr, j0, nr),
    unary: body::unary::apply_unary,
    binary_f32: body::eltwise::binary_f32,
    depthwise_plane: body::depthwise::depthwise_plane,
    max_pool_plane: body::pool::max_pool_plane,
    max_pool_nhwc: body::pool::max_pool_nhwc,
    gemv_acc: body::rnn::gemv_acc,
    sigmoid: body::rnn::sigmoid,
    tanh: body::rnn::tanh,
    quant: &crate::kernels::quant::table::PORTABLE,
    softmax_row: body::norm::softmax_row,
    exp_row: body::norm::exp_row,
    layer_norm_row: body::norm::layer_norm_row,
    depthwise_fused: body::depthwise::depthwise_channel,
    depthwise_block: None,
    depthwise_nhwc: body::dw_nhwc::depthwise_nhwc,
    qdepthwise_block: None,
    mm_tile_strided,
    mm_tile_segs,
    mm_tile_strided_epi: None,
    mm_tiles: None,
    mm_tile_pair: None,
    mm_tile_epi: None,
    mm_tile_rows_epi: None,
    // Winograd conv transforms.
    wino_input: crate::kernels::conv::winograd_body::input_block,
    wino_output: crate::kernels::conv::winograd_body::output_block,
    // -- pooling and conv packing (issue 12, im2col helper) --
    avg_pool_plane: body::pool::avg_pool_plane,
    im2col_panels,
    add_pairs: body::conv::add_pairs,
    bilinear_up2x: body::resize::bilinear_up2x,
    conv_tiles: Some(crate::kernels::conv::direct::PORTABLE_F32),
};

// -- pooling and conv packing (issue 12, im2col helper) --
fn im2col_panels(
    s: &body::conv::ConvShape,
    x: &[f32],
    k0: usize,
    kc: usize,
    j0: usize,
    n: usize,
    out: &mut [f32],
) {
    let gather = body::im2col::gather_scalar;
    let run = body::im2col::runs::<NR>(gather);
    body::im2col::im2col_panels::<NR>(s, x, k0, kc, j0, n, out, gather, run)
}
// -- end of the im2col helper's block --

fn mm_tile(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool) {
    tile(kc, a, |p| &b[p * NR..p * NR + NR], c, ldc, acc)
}

fn mm_tile_rows(a: &[f32], b: &RowBlock<'_, '_>, off: usize, c: &mut [f32], ldc: usize, acc: bool) {
    let rows = b.rows;
    tile(rows.len(), a, |p| &rows[p][off..off + NR], c, ldc, acc)
}

/// The MR x NR tile both portable micro-kernels share; `b_row(p)` is B's NR floats
/// for step `p`.
#[inline]
fn tile<'b>(
    kc: usize,
    a: &[f32],
    b_row: impl Fn(usize) -> &'b [f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
) {
    let mut t = [[0.0f32; NR]; MR];
    for p in 0..kc {
        let bv = b_row(p);
        for (r, row) in t.iter_mut().enumerate() {
            let av = a[p * MR + r];
            for (x, bb) in row.iter_mut().zip(bv) {
                *x += av * bb;
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        let dst = &mut c[r * ldc..r * ldc + NR];
        if acc {
            for (d, s) in dst.iter_mut().zip(row) {
                *d += *s;
            }
        } else {
            dst.copy_from_slice(row);
        }
    }
}

/// Left half of a micro-tile (body shared with the SIMD tables).
#[inline(always)]
pub(super) fn mm_half(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let a = &a[..kc * MR];
    half(kc, |p, r| a[p * MR + r], b, c)
}

/// `KernelTable::mm_half_strided` in plain Rust: [`mm_half`] with A's rows read in place
/// (row `r` at `a[r * lda..]`), the same sums in the same order. Inlined into the SIMD
/// tables' `#[target_feature]` wrappers (there `mul_add` is one FMA instruction).
#[inline(always)]
pub(super) fn mm_half_strided(kc: usize, a: &[f32], lda: usize, b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= (MR - 1) * lda + kc);
    let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * lda..r * lda + kc]);
    half(kc, |p, r| rows[r][p], b, c)
}

/// The left [`HALF`] columns of a micro-tile with A's element `(r, p)` from `a(p, r)`:
/// each a fused multiply-add chain over `p`, like the full micro-kernel, so that a tile
/// gives the same bits whichever kernel computes it.
#[inline(always)]
fn half(kc: usize, a: impl Fn(usize, usize) -> f32, b: &[f32], c: &mut [f32]) {
    assert!(b.len() >= kc * NR && c.len() >= MR * NR);
    let mut acc = [[0.0f32; HALF]; MR];
    for (p, bv) in b.chunks_exact(NR).take(kc).enumerate() {
        let bv: &[f32; HALF] = bv[..HALF].try_into().expect("HALF floats");
        for (r, row) in acc.iter_mut().enumerate() {
            let x = a(p, r);
            for (d, y) in row.iter_mut().zip(bv) {
                *d = x.mul_add(*y, *d);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        c[r * NR..r * NR + HALF].copy_from_slice(row);
    }
}

/// `KernelTable::mm_part` in plain Rust: this table's tile, its first `rows` rows, panel
/// by panel.
#[allow(clippy::too_many_arguments)]
fn mm_part(
    kc: usize,
    a: &[f32],
    b: &[f32],
    panels: usize,
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    super::assert_panels_part_fits(kc, (a, b), panels, c, ldc, rows);
    for q in 0..panels {
        let b = &b[q * kc * NR..];
        part(
            kc,
            a,
            |p| &b[p * NR..p * NR + NR],
            &mut c[q * NR..],
            ldc,
            rows,
            acc,
        )
    }
}

/// `KernelTable::mm_part_rows` in plain Rust.
fn mm_part_rows(
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    let kc = b.depth();
    super::assert_part_fits(kc, a, c, ldc, rows, 1);
    part(kc, a, |p| &b.rows[p][off..off + NR], c, ldc, rows, acc)
}

/// The first `rows` rows of [`tile`] (computed whole on the stack); `b_row(p)` is B's
/// NR floats for step `p`.
fn part<'b>(
    kc: usize,
    a: &[f32],
    b_row: impl Fn(usize) -> &'b [f32],
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    let mut t = [0.0f32; MR * NR];
    tile(kc, a, b_row, &mut t, NR, false);
    for (r, row) in t.chunks_exact(NR).take(rows).enumerate() {
        let dst = &mut c[r * ldc..r * ldc + NR];
        if acc {
            for (d, s) in dst.iter_mut().zip(row) {
                *d += *s;
            }
        } else {
            dst.copy_from_slice(row);
        }
    }
}

/// `KernelTable::mm_cols` in plain Rust: one sum per element, in the order (and with
/// the separate multiply and add) of this table's tile.
#[allow(clippy::too_many_arguments)]
fn mm_cols(
    kc: usize,
    a: &[f32],
    panels: usize,
    b: &[f32],
    t: usize,
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    super::assert_cols_fit(kc, a, panels, b, t, c, ldc, rows);
    for r in 0..rows {
        let panel = &a[r / MR * kc * MR + r % MR..];
        for col in 0..t {
            let mut sum = 0.0f32;
            for p in 0..kc {
                sum += panel[p * MR] * b[p * NR + col];
            }
            let d = &mut c[r * ldc + col];
            *d = if acc { *d + sum } else { sum };
        }
    }
}

/// Row 0 of a micro-tile (body shared with the SIMD tables).
#[inline(always)]
pub(super) fn mm_row(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut acc = [0.0f32; NR];
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        let x = av[0];
        for (d, y) in acc.iter_mut().zip(bv) {
            *d = x.mul_add(*y, *d);
        }
    }
    c[..NR].copy_from_slice(&acc);
}

/// `KernelTable::mm_tile_segs` in plain Rust: products then sums, as `mm_tile`, one
/// strip at a time.
#[allow(clippy::too_many_arguments)]
pub(super) fn mm_tile_segs(
    kc: usize,
    a: &[f32],
    segs: &[usize],
    lda: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    (rows, strips): (usize, usize),
    e: Option<&TileEpi<'_>>,
) {
    super::assert_segs_fit(kc, a, segs, lda, b, c, ldc, (rows, strips), e);
    let panel = segs.len() * kc * NR;
    for q in 0..strips {
        let mut t = [[0.0f32; NR]; SEGS_ROWS];
        for (s, &off) in segs.iter().enumerate() {
            for p in 0..kc {
                let bv = &b[q * panel + (s * kc + p) * NR..][..NR];
                for (r, row) in t.iter_mut().enumerate().take(rows) {
                    let av = a[off + r * lda + p];
                    for (x, bb) in row.iter_mut().zip(bv) {
                        *x += av * bb;
                    }
                }
            }
        }
        for (r, row) in t.iter().enumerate().take(rows) {
            let dst = &mut c[r * ldc + q * NR..][..NR];
            for (j, (d, v)) in dst.iter_mut().zip(row).enumerate() {
                let mut v = *v;
                if let Some(e) = e {
                    v += e.col_bias.map_or(0.0, |b| b[q * NR + j]);
                    if let Some((lo, hi)) = e.clamp {
                        // As `vmaxps` / `vminps`: a NaN becomes `lo`.
                        v = if v > lo { v } else { lo };
                        v = if v < hi { v } else { hi };
                    }
                }
                *d = v;
            }
        }
    }
}

fn mm_tile_strided(
    kc: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
) {
    let mut t = [[0.0f32; NR]; MR];
    let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * lda..r * lda + kc]);
    for p in 0..kc {
        let bv = &b[p * NR..p * NR + NR];
        for (row, ar) in t.iter_mut().zip(&rows) {
            let av = ar[p];
            for (x, bb) in row.iter_mut().zip(bv) {
                *x += av * bb;
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        let dst = &mut c[r * ldc..r * ldc + NR];
        if acc {
            for (d, s) in dst.iter_mut().zip(row) {
                *d += *s;
            }
        } else {
            dst.copy_from_slice(row);
        }
    }
}

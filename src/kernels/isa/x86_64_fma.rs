//! The AVX2+FMA table (x86-64): a hand-written 6x16 GEMM micro-kernel and GEMV, and the
//! generic bodies compiled with AVX2 and FMA enabled.
//!
//! Every entry of [`TABLE`] is a private safe wrapper around a `#[target_feature]`
//! function; [`table`] hands the table out only after detecting both features, so each
//! wrapper runs only on a CPU that has them.

use super::x86_64_fma_math as math;
use super::{portable, KernelTable, RowBlock, TileEpi, HALF, MR, NR};
use crate::ir::{BinaryOp, UnaryOp};
use crate::kernels::body::pool::PoolShape;
use crate::kernels::body::resize::LinearTap;
use crate::kernels::body::{self, conv::ConvShape, eltwise::Bcast, epilogue::Epilogue};
use std::arch::x86_64::*;

/// The AVX2+FMA table, when this CPU has both features.
pub(super) fn table() -> Option<&'static KernelTable> {
    (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")).then_some(&TABLE)
}

static TABLE: KernelTable = KernelTable {
    name: "avx2+fma",
    isa: super::Isa::Avx2Fma,
    mr: MR,
    nr: NR,
    lanes: 8,
    mm_tile,
    mm_tile_rows,
    mm_row,
    mm_half,
    mm_half_strided,
    mm_half_strided_epi: Some(mm_half_strided_epi),
    mm_tile24_strided_epi: None,
    mm_cols,
    mm_part,
    mm_part_rows,
    transpose32: super::x86_64_transpose::transpose32,
    gather_words,
    epilogue: math::epilogue,
    unary: math::unary,
    binary_f32,
    depthwise_plane,
    max_pool_plane: super::x86_64_maxpool_avx2::max_pool_plane,
    max_pool_nhwc,
    gemv_acc,
    sigmoid: math::sigmoid,
    tanh,
    quant: &crate::kernels::quant::x86_64_avx2::TABLE,
    softmax_row: math::softmax_row,
    exp_row: math::exp_row,
    layer_norm_row,
    depthwise_fused: super::x86_64_dw::depthwise_direct,
    depthwise_block: Some(super::x86_64_dw_block_avx2::depthwise_block),
    depthwise_nhwc: super::x86_64_dw_nhwc::depthwise_nhwc,
    qdepthwise_block: None,
    mm_tile_strided,
    mm_tile_segs,
    mm_tile_strided_epi: Some(mm_tile_strided_epi),
    mm_tiles: Some(mm_tiles),
    mm_tile_pair: None,
    mm_tile_epi: Some(mm_tile_epi),
    mm_tile_rows_epi: Some(mm_tile_rows_epi),
    // Winograd conv transforms.
    wino_input: super::x86_64_wino_avx2::wino_input,
    wino_output: super::x86_64_wino_avx2::wino_output,
    // -- pooling and conv packing (issue 12, im2col helper) --
    avg_pool_plane,
    im2col_panels,
    add_pairs,
    bilinear_up2x,
    conv_tiles: None,
};

fn epilogue_body(
    e: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    mr: usize,
    j0: usize,
    nr: usize,
) {
    e.apply_body(c, ldc, i0, mr, j0, nr)
}

feature_build!("avx2,fma", pub(super) epilogue_generic, epilogue_body, (e: &Epilogue<'_>, c: &mut [f32], ldc: usize, i0: usize, mr: usize, j0: usize, nr: usize));
feature_build!("avx2,fma", pub(super) unary_body, body::unary::apply_unary, (op: UnaryOp, x: &mut [f32]));
feature_build!("avx2,fma", max_pool_nhwc, body::pool::max_pool_nhwc, (s: &PoolShape, c: usize, x: &[f32], y: &mut [f32], rows: (usize, usize)));
feature_build!("avx2,fma", binary_f32, body::eltwise::binary_f32, (op: BinaryOp, bc: &Bcast, a: &[f32], b: &[f32], out: &mut [f32], lo: usize, hi: usize));
feature_build!("avx2,fma", depthwise_plane, body::depthwise::depthwise_plane, (s: &ConvShape, w: &[f32], plane: &[f32], out: &mut [f32], scratch: &mut [f32]));
// -- pooling and conv packing (issue 12, im2col helper) --
feature_build!("avx2,fma", avg_pool_plane, body::pool::avg_pool_plane, (s: &PoolShape, count_include_pad: bool, x: &[f32], y: &mut [f32]));

#[allow(clippy::too_many_arguments)]
fn im2col_panels(
    s: &ConvShape,
    x: &[f32],
    k0: usize,
    kc: usize,
    j0: usize,
    n: usize,
    out: &mut [f32],
) {
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn build(
        s: &ConvShape,
        x: &[f32],
        k0: usize,
        kc: usize,
        j0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let gather = |src: &[f32], stride, d: &mut [f32]| {
            // SAFETY: AVX2 is enabled in this function (and detected, see `table`).
            unsafe { gather16(src, stride, d) }
        };
        let run = body::im2col::runs::<NR>(gather);
        body::im2col::im2col_panels::<NR>(s, x, k0, kc, j0, n, out, gather, run)
    }
    // SAFETY: reachable only through TABLE, handed out after detecting AVX2 and FMA.
    unsafe { build(s, x, k0, kc, j0, n, out) }
}

/// The table's `gather_words`: [`gather16`] on the words as floats (its loads,
/// shuffles and stores move bits unchanged).
pub(super) fn gather_words(src: &[u32], stride: usize, dst: &mut [u32]) {
    let Some(last) = dst.len().checked_sub(1) else {
        return;
    };
    let src: &[f32] = bytemuck::cast_slice(&src[..last * stride + 1]);
    // SAFETY: reachable only through the AVX2 and AVX-512 tables, handed out after
    // detecting AVX2; gather16 bounds its reads by `src` and its writes by `dst`.
    unsafe { gather16(src, stride, bytemuck::cast_slice_mut(dst)) }
}

/// `d[i] = src[i * stride]` for a piece of a panel row: at stride 2 (the strided convs)
/// every 8 floats whose 16-float source window lies inside `src` deinterleave two loads
/// (a whole row, 16 lanes, four); the rest, and other strides, copy one by one.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn gather16(src: &[f32], stride: usize, d: &mut [f32]) {
    if stride != 2 {
        body::im2col::gather_scalar(src, stride, d);
        return;
    }
    let even = |a: __m256, b: __m256| {
        // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
        let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(e)))
    };
    let mut i = 0;
    while i + 8 <= d.len() && 2 * i + 16 <= src.len() {
        // SAFETY: 16 floats readable from 2 * i in src and 8 writable from i in d
        // (the loop condition).
        unsafe {
            let p = src.as_ptr().add(2 * i);
            let v = even(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
            _mm256_storeu_ps(d.as_mut_ptr().add(i), v);
        }
        i += 8;
    }
    if i < d.len() {
        body::im2col::gather_scalar(&src[2 * i..], 2, &mut d[i..]);
    }
}
// -- end of the im2col helper's block --
/// `KernelTable::mm_part` with AVX2: the 6x16 tile's loop over `R` rows of `P` panels
/// at once (two sums each per panel), stored as the tile stores. `P` is picked so that a
/// call has at least eight independent sums where the panels allow (four panels for one
/// row, two for two or three rows): with two sums a row, one row ran at a quarter of the
/// FMA throughput (its chains wait on the FMA latency).
#[allow(clippy::too_many_arguments)]
pub(super) fn mm_part(
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
    let per = match rows {
        1 => 4,
        2 | 3 => 2,
        _ => 1,
    };
    let (b, c) = (b.as_ptr(), c.as_mut_ptr());
    let mut q = 0;
    while q < panels {
        let np = per.min(panels - q);
        // SAFETY: reachable only through the AVX2 and AVX-512 tables (AVX2 and FMA
        // detected); A holds kc * MR floats, B `panels` panels of kc * NR (so panels
        // q..q + np), C `rows` rows of panels * NR at ldc (the asserts above).
        unsafe {
            let bq = b.add(q * kc * NR);
            part_dispatch(
                kc,
                a.as_ptr(),
                |pn, p| bq.add(pn * kc * NR + p * NR),
                np,
                c.add(q * NR),
                ldc,
                rows,
                acc,
            )
        }
        q += np;
    }
}

/// `KernelTable::mm_part_rows` with AVX2 (B rows read in place, as `mm_tile_rows`).
pub(super) fn mm_part_rows(
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    let (r, kc) = (b.rows, b.depth());
    assert!(off + NR <= b.len, "part tile: B rows too short");
    super::assert_part_fits(kc, a, c, ldc, rows, 1);
    // SAFETY: as `mm_part`; every row holds `b.len >= off + NR` floats (RowBlock::new
    // and the assert above).
    unsafe {
        part_dispatch(
            kc,
            a.as_ptr(),
            |_, p| r[p].as_ptr().add(off),
            1,
            c.as_mut_ptr(),
            ldc,
            rows,
            acc,
        )
    }
}

/// [`part`] for `rows` (1..MR) rows of `panels` (1..=4, at most 2 for 2-3 rows, 1 for
/// more) panels.
///
/// # Safety
/// As [`part`].
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn part_dispatch(
    kc: usize,
    a: *const f32,
    b_row: impl Fn(usize, usize) -> *const f32,
    panels: usize,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        match (rows, panels) {
            (1, 1) => part::<1, 1>(kc, a, b_row, c, ldc, acc),
            (1, 2) => part::<1, 2>(kc, a, b_row, c, ldc, acc),
            (1, 3) => part::<1, 3>(kc, a, b_row, c, ldc, acc),
            (1, _) => part::<1, 4>(kc, a, b_row, c, ldc, acc),
            (2, 1) => part::<2, 1>(kc, a, b_row, c, ldc, acc),
            (2, _) => part::<2, 2>(kc, a, b_row, c, ldc, acc),
            (3, 1) => part::<3, 1>(kc, a, b_row, c, ldc, acc),
            (3, _) => part::<3, 2>(kc, a, b_row, c, ldc, acc),
            (4, _) => part::<4, 1>(kc, a, b_row, c, ldc, acc),
            _ => part::<5, 1>(kc, a, b_row, c, ldc, acc),
        }
    }
}

/// `R` rows of `P` panels of [`mm_part`]; `b_row(q, p)` points at panel `q`'s NR floats
/// for step `p`; panel `q`'s C columns start at `c + q * NR`.
///
/// # Safety
/// AVX2 and FMA available; `a` readable for `kc * MR` floats, `b_row(q, p)` for NR
/// floats for every `q < P`, `p < kc`, `c` writable for `R` rows of `P * NR` at `ldc`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn part<const R: usize, const P: usize>(
    kc: usize,
    a: *const f32,
    b_row: impl Fn(usize, usize) -> *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut t = [[[_mm256_setzero_ps(); 2]; P]; R];
    for p in 0..kc {
        // SAFETY: step p < kc of each panel of B (NR floats) and of the A panel (MR
        // floats).
        unsafe {
            let av: [__m256; R] = std::array::from_fn(|r| _mm256_broadcast_ss(&*a.add(p * MR + r)));
            for q in 0..P {
                let bp = b_row(q, p);
                let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8)));
                for (row, &a) in t.iter_mut().zip(&av) {
                    row[q][0] = _mm256_fmadd_ps(a, b0, row[q][0]);
                    row[q][1] = _mm256_fmadd_ps(a, b1, row[q][1]);
                }
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        for (q, sums) in row.iter().enumerate() {
            // SAFETY: row r < R of C, panel q's NR floats (the caller's bounds).
            unsafe {
                let cp = c.add(r * ldc + q * NR);
                let (mut v0, mut v1) = (sums[0], sums[1]);
                if acc {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cp));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cp.add(8)));
                }
                _mm256_storeu_ps(cp, v0);
                _mm256_storeu_ps(cp.add(8), v1);
            }
        }
    }
}

// `KernelTable::mm_cols` with AVX2: each vector holds one column of one A panel's six
// rows, so one step of `P` panels and `T` columns is `P x T` FMAs sharing `T`
// broadcasts of B (at least eight independent sums for `T` of 1, the FMA latency).
super::cols_entry!(cols_block, 1);

/// `P` panels x `T` columns of `mm_cols`: rows `0..rows` of `c` written.
///
/// # Safety
/// AVX2 and FMA available; `a` readable for `P * kc * MR` floats, `b` for `kc * NR`,
/// `c` writable at `r * ldc + j` for `r < rows <= P * MR`, `j < T`.
#[target_feature(enable = "avx2,fma")]
unsafe fn cols_block<const P: usize, const T: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    let mut sums = [[_mm256_setzero_ps(); T]; P];
    if kc > 0 {
        // Eight lanes from each step but the last, whose two extra floats (the next
        // step's) may lie past the last panel: that one loads its six under a mask.
        for p in 0..kc - 1 {
            // SAFETY: as the caller's; step p < kc - 1 is followed by MR more floats.
            unsafe { cols_step::<P, T, false>(&mut sums, kc, a, b, p) };
        }
        // SAFETY: as the caller's; the mask reads the last step's MR floats only.
        unsafe { cols_step::<P, T, true>(&mut sums, kc, a, b, kc - 1) };
    }
    for (q, row) in sums.iter().enumerate() {
        for (j, s) in row.iter().enumerate() {
            let mut lanes = [0.0f32; 8];
            // SAFETY: eight floats of `lanes`.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *s) };
            for (r, &v) in lanes
                .iter()
                .enumerate()
                .take(rows.saturating_sub(q * MR).min(MR))
            {
                // SAFETY: row q * MR + r < rows, column j < T (the caller's bounds).
                let d = unsafe { &mut *c.add((q * MR + r) * ldc + j) };
                *d = if acc { *d + v } else { v };
            }
        }
    }
}

/// Step `p` of [`cols_block`]: `sums[q][j] += A panel q's rows x B[p][j]`; `MASKED`
/// loads only the step's MR floats of A (else eight, two of the next step).
///
/// # Safety
/// AVX2 and FMA available; `p < kc`; `b` readable at `p * NR + j` for `j < T`; `a` at
/// `q * kc * MR + p * MR` for 8 floats (`MR` when `MASKED`) for every `q < P`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn cols_step<const P: usize, const T: usize, const MASKED: bool>(
    sums: &mut [[__m256; T]; P],
    kc: usize,
    a: *const f32,
    b: *const f32,
    p: usize,
) {
    // SAFETY: B's step p holds NR >= T floats (the caller's bound).
    let bv: [__m256; T] =
        std::array::from_fn(|j| unsafe { _mm256_broadcast_ss(&*b.add(p * NR + j)) });
    let mask = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    for (q, row) in sums.iter_mut().enumerate() {
        // SAFETY: panel q's step p is readable as the caller guarantees.
        let av = unsafe {
            let x = a.add(q * kc * MR + p * MR);
            if MASKED {
                _mm256_maskload_ps(x, mask)
            } else {
                _mm256_loadu_ps(x)
            }
        };
        for (s, bj) in row.iter_mut().zip(&bv) {
            *s = _mm256_fmadd_ps(av, *bj, *s);
        }
    }
}

feature_build!("avx2,fma", mm_half, portable::mm_half, (kc: usize, a: &[f32], b: &[f32], c: &mut [f32]));
feature_build!("avx2,fma", mm_half_strided, portable::mm_half_strided, (kc: usize, a: &[f32], lda: usize, b: &[f32], c: &mut [f32]));
feature_build!("avx2,fma", mm_row, portable::mm_row, (kc: usize, a: &[f32], b: &[f32], c: &mut [f32]));
feature_build!("avx2,fma", tanh, body::rnn::tanh, (x: &mut [f32]));
feature_build!("avx2,fma", layer_norm_row, body::norm::layer_norm_row, (x: &[f32], y: &mut [f32], scale: &[f32], bias: &[f32], eps: f32));

fn mm_tile(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool) {
    tile_packed(kc, a, b, c, ldc, acc, None)
}

fn mm_tile_epi(
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: &TileEpi<'_>,
) {
    tile_packed(kc, a, b, c, ldc, acc, Some(e))
}

#[inline]
fn tile_packed(
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    assert!(b.len() >= kc * NR, "tile: short B panel");
    super::assert_tile_fits(kc, a, c, ldc, e);
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: AVX2+FMA were detected (see `table`); the asserts above bound every offset
    // the tile touches (a: kc*MR, b row p: p*NR..p*NR+NR, c and the residual: MR rows of
    // NR at ldc).
    unsafe { tile_6x16(kc, a, |p| b.add(p * NR), c, ldc, acc, 0, e) }
}

fn mm_tile_rows(a: &[f32], b: &RowBlock<'_, '_>, off: usize, c: &mut [f32], ldc: usize, acc: bool) {
    tile_rows(a, b, off, c, ldc, acc, None)
}

fn mm_tile_rows_epi(
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: &TileEpi<'_>,
) {
    tile_rows(a, b, off, c, ldc, acc, Some(e))
}

#[inline]
fn tile_rows(
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    let rows = b.rows;
    let kc = rows.len();
    assert!(off + NR <= b.len, "tile: B rows too short");
    super::assert_tile_fits(kc, a, c, ldc, e);
    let (a, c) = (a.as_ptr(), c.as_mut_ptr());
    // SAFETY: AVX2+FMA were detected (see `table`); every row holds `b.len >= off + NR`
    // floats (checked by `RowBlock::new` and above), a holds kc*MR, c and the residual
    // MR rows of NR.
    unsafe {
        tile_6x16(
            kc,
            a,
            |p| rows[p].as_ptr().add(off),
            c,
            ldc,
            acc,
            ROWS_PREFETCH,
            e,
        )
    }
}

/// Floats ahead of each B row read in place that the tile prefetches (0: none). Rows
/// read in place come from up to KC different planes, too many streams for the
/// hardware prefetchers.
const ROWS_PREFETCH: usize = 64;

/// The 6x16 FMA tile: `b_row(p)` points at the 16 floats of B for step `p`; with
/// `prefetch > 0`, each step prefetches its B row that many floats ahead. With `e`, its
/// epilogue runs on the registers before the store ([`TileEpi`]), as the `epilogue`
/// entry would after it.
///
/// # Safety
/// AVX2 and FMA must be available; `a` valid for `kc * 6` reads, `b_row(p)` for 16
/// reads for every `p < kc`, `c` for 6 rows of 16 floats at stride `ldc`.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_6x16(
    kc: usize,
    a: *const f32,
    b_row: impl Fn(usize) -> *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    prefetch: usize,
    e: Option<&TileEpi<'_>>,
) {
    let mut t = [_mm256_setzero_ps(); 2 * MR];
    for p in 0..kc {
        let bp = b_row(p);
        if prefetch > 0 {
            // A hint only: prefetching an address past the row's end is harmless.
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(prefetch).cast());
        }
        // SAFETY: 16 floats at bp and the A column p (kc*6 floats) are readable.
        let (b0, b1, ap) = unsafe {
            (
                _mm256_loadu_ps(bp),
                _mm256_loadu_ps(bp.add(8)),
                a.add(p * MR),
            )
        };
        for r in 0..MR {
            // SAFETY: r < MR, inside the current A column.
            let av = unsafe { _mm256_broadcast_ss(&*ap.add(r)) };
            t[2 * r] = _mm256_fmadd_ps(av, b0, t[2 * r]);
            t[2 * r + 1] = _mm256_fmadd_ps(av, b1, t[2 * r + 1]);
        }
    }
    // SAFETY: the caller's contract covers C and the epilogue's operands.
    unsafe { store_tile(&t, c, ldc, acc, e) }
}

fn gemv_acc(w: &[f32], ldw: usize, x: &[f32], y: &mut [f32]) {
    let k = x.len();
    assert!(ldw >= k && (y.is_empty() || w.len() >= (y.len() - 1) * ldw + k));
    // SAFETY: AVX2+FMA were detected (see `table`); the assert bounds every row read
    // (row i: i*ldw..i*ldw+k for i < y.len()).
    unsafe { gemv_acc_fma(w.as_ptr(), ldw, x, y) }
}

/// Sum of the eight lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// GEMV with FMA: four rows at a time, two 8-lane accumulators per row.
///
/// # Safety
/// AVX2 and FMA must be available; `w` valid for rows `i * ldw .. i * ldw + x.len()`
/// for every `i < y.len()`.
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_acc_fma(w: *const f32, ldw: usize, x: &[f32], y: &mut [f32]) {
    let k = x.len();
    let k16 = k / 16 * 16;
    let xp = x.as_ptr();
    let mut i = 0;
    while i + 4 <= y.len() {
        // SAFETY: rows i..i+4 are below y.len(), so each holds k floats (caller).
        let r: [*const f32; 4] = std::array::from_fn(|q| unsafe { w.add((i + q) * ldw) });
        let mut a = [_mm256_setzero_ps(); 8];
        let mut c = 0;
        while c < k16 {
            // SAFETY: c + 16 <= k: inside x and inside each row.
            unsafe {
                let x0 = _mm256_loadu_ps(xp.add(c));
                let x1 = _mm256_loadu_ps(xp.add(c + 8));
                for q in 0..4 {
                    a[2 * q] = _mm256_fmadd_ps(_mm256_loadu_ps(r[q].add(c)), x0, a[2 * q]);
                    a[2 * q + 1] =
                        _mm256_fmadd_ps(_mm256_loadu_ps(r[q].add(c + 8)), x1, a[2 * q + 1]);
                }
            }
            c += 16;
        }
        for q in 0..4 {
            let mut s = hsum(_mm256_add_ps(a[2 * q], a[2 * q + 1]));
            for (cc, xv) in x.iter().enumerate().skip(k16) {
                // SAFETY: cc < k, inside row i + q.
                s += unsafe { *r[q].add(cc) } * xv;
            }
            y[i + q] += s;
        }
        i += 4;
    }
    while i < y.len() {
        // SAFETY: row i < y.len() holds k floats (caller).
        let row = unsafe { std::slice::from_raw_parts(w.add(i * ldw), k) };
        y[i] += row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
        i += 1;
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
    tile_strided(kc, a, lda, b, c, ldc, acc, None)
}

#[allow(clippy::too_many_arguments)]
fn mm_tile_strided_epi(
    kc: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: &TileEpi<'_>,
) {
    tile_strided(kc, a, lda, b, c, ldc, acc, Some(e))
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn tile_strided(
    kc: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    assert!(a.len() >= (MR - 1) * lda + kc && b.len() >= kc * NR);
    assert!(ldc >= NR && c.len() >= (MR - 1) * ldc + NR);
    e.inspect(|e| e.assert_fits(ldc, NR));
    // SAFETY: AVX2+FMA were detected (see `table`); the asserts above bound every offset
    // the tile touches (a row r: r*lda..r*lda+kc, b: kc*NR, c and the residual: MR rows
    // of NR at ldc, the column bias: NR).
    unsafe { tile_6x16_strided(kc, a.as_ptr(), lda, b.as_ptr(), c.as_mut_ptr(), ldc, acc, e) }
}

/// `KernelTable::mm_tiles` with AVX2: [`tile_6x16`] or [`tile_6x16_strided`] on each
/// tile of the walk, its epilogue moved along. `ahead` is unused: this table does not
/// pair tiles, so its strips go one at a time down the panels, and each column's first
/// tile asks for the next strip's panel itself.
#[allow(clippy::too_many_arguments)]
fn mm_tiles(
    kc: usize,
    a: super::WalkA<'_>,
    b: &[f32],
    _ahead: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&super::WalkEpi<'_>>,
    walk: super::TileWalk,
    count: usize,
) {
    let st = super::WalkSteps::checked(walk, count, kc, a, b, (c, ldc), e);
    let (ap, lda) = match a {
        super::WalkA::Packed(a) => (a.as_ptr(), None),
        super::WalkA::Rows { a, lda } => (a.as_ptr(), Some(lda)),
    };
    for p in 0..walk.rows() {
        let row_e = e.map(|e| e.row(p, ldc));
        // SAFETY: AVX2+FMA were detected (see `table`); `WalkSteps::checked` bounds every
        // tile of every row of the walk (A panels or rows, the B panels, C and the
        // residual rows, the biases).
        unsafe {
            tiles_6x16(
                kc,
                ap.add(p * st.a_row),
                lda,
                b.as_ptr(),
                c.as_mut_ptr().add(p * MR * ldc),
                ldc,
                acc,
                row_e.as_ref(),
                st,
                count,
            )
        }
    }
}

/// The walk of [`mm_tiles`] (one target-feature function, so the tiles inline): A
/// packed (`lda` None) or rows in place.
///
/// # Safety
/// AVX2 and FMA available; every tile `t < count` of the walk `st` within its operands.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tiles_6x16(
    kc: usize,
    a: *const f32,
    lda: Option<usize>,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&super::WalkEpi<'_>>,
    st: super::WalkSteps,
    count: usize,
) {
    for t in 0..count {
        let te = e.map(|e| e.tile(t, &st));
        // SAFETY: tile t of the walk lies within the operands (the caller's contract).
        unsafe {
            let (at, bt, ct) = (a.add(t * st.a), b.add(t * st.b), c.add(t * st.c));
            match lda {
                Some(lda) => tile_6x16_strided(kc, at, lda, bt, ct, ldc, acc, te.as_ref()),
                None => {
                    // With A packed, each tile asks for the B panel the walk reads next
                    // (the next tile's along a row, the next strip's from a column's
                    // first tile): a panel (the weights of a channels-last 1x1 conv,
                    // cold in a network; a Winograd point's or an im2col block's, in
                    // L2) is too short a run for the hardware prefetcher.
                    // Zen 3, per-node minimum of 6 alternating runs: MobileNetV2 9078
                    // -> 8881 us (its 7x7 1x1 convs -8 to -13 %), ResNet-18 26596 ->
                    // 26182, YOLOX-tiny 59652 -> 58817.
                    let pf = if t == 0 || st.b != 0 { kc * NR } else { 0 };
                    tile_6x16(kc, at, |p| bt.add(p * NR), ct, ldc, acc, pf, te.as_ref())
                }
            }
        }
    }
}

/// The 6x16 FMA tile with A read in place (row `r`, step `p` at `a + r * lda + p`) and
/// B a packed panel of `kc` rows of 16, the epilogue `e` (if any) fused into the store
/// as in [`tile_6x16`].
///
/// # Safety
/// AVX2 and FMA must be available; `a` valid for rows `r * lda .. r * lda + kc` (r < 6),
/// `b` for `kc * 16` reads, `c` (and the residual of `e`) for 6 rows of 16 floats at
/// stride `ldc`, the column bias of `e` for 16 floats.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_6x16_strided(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    // SAFETY: row r < 6 starts inside `a` (caller).
    let ar: [*const f32; MR] = std::array::from_fn(|r| unsafe { a.add(r * lda) });
    let mut t = [_mm256_setzero_ps(); 2 * MR];
    for p in 0..kc {
        // SAFETY: p < kc: 16 floats of B row p and element p of each A row are readable.
        unsafe {
            let b0 = _mm256_loadu_ps(b.add(p * NR));
            let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
            for r in 0..MR {
                let av = _mm256_broadcast_ss(&*ar[r].add(p));
                t[2 * r] = _mm256_fmadd_ps(av, b0, t[2 * r]);
                t[2 * r + 1] = _mm256_fmadd_ps(av, b1, t[2 * r + 1]);
            }
        }
    }
    // SAFETY: the caller's contract covers C, the residual and the column bias.
    unsafe { store_tile(&t, c, ldc, acc, e) }
}

/// `KernelTable::mm_half_strided_epi` with AVX2 and FMA: [`half_6x8_strided`].
#[allow(clippy::too_many_arguments)]
fn mm_half_strided_epi(
    kc: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    assert!(a.len() >= (MR - 1) * lda + kc, "half tile: short A");
    assert!(b.len() >= kc * NR, "half tile: short B panel");
    assert!(
        ldc >= HALF && c.len() >= (MR - 1) * ldc + HALF,
        "half tile: short C"
    );
    e.inspect(|e| e.assert_fits(ldc, HALF));
    // SAFETY: AVX2+FMA were detected (see `table`); the asserts bound A's six rows of
    // kc, B's kc rows of 16, C's and the residual's six rows of 8 and the column bias.
    unsafe { half_6x8_strided(kc, a.as_ptr(), lda, b.as_ptr(), c.as_mut_ptr(), ldc, acc, e) }
}

/// The left 8 columns of a 6x16 tile with A read in place (row `r`, step `p` at
/// `a + r * lda + p`): one FMA chain per row over `p`, as `mm_half_strided`, stored into
/// C with the epilogue.
///
/// # Safety
/// AVX2 and FMA available; the operands as `mm_half_strided_epi` checks them.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn half_6x8_strided(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    let mut t = [_mm256_setzero_ps(); MR];
    for p in 0..kc {
        // SAFETY: p < kc: B row p and element p of each A row are readable.
        unsafe {
            let b0 = _mm256_loadu_ps(b.add(p * NR));
            for (r, acc) in t.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r * lda + p));
                *acc = _mm256_fmadd_ps(av, b0, *acc);
            }
        }
    }
    // SAFETY: the column bias holds 8 floats (checked by the caller).
    let cb = e
        .and_then(|e| e.col_bias)
        .map(|cb| unsafe { _mm256_loadu_ps(cb.as_ptr()) });
    for (r, &v) in t.iter().enumerate() {
        // SAFETY: row r < 6 of C and of the residual hold 8 floats at r * ldc.
        unsafe {
            let cp = c.add(r * ldc);
            let mut v = v;
            if acc {
                v = _mm256_add_ps(v, _mm256_loadu_ps(cp));
            }
            if let Some(e) = e {
                v = _mm256_add_ps(v, cb.unwrap_or_else(|| _mm256_set1_ps(e.bias[r])));
                if let Some(res) = e.residual {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(res.as_ptr().add(r * ldc)));
                }
                if let Some((lo, hi)) = e.clamp {
                    v = clamp8(v, (lo, hi));
                }
            }
            _mm256_storeu_ps(cp, v);
        }
    }
}

super::segs_entry!();

/// One piece of `mm_tile_segs`: up to [`MR`] rows of one strip (twelve accumulators of
/// the sixteen registers); returns the rows and strips done.
///
/// # Safety
/// AVX2 and FMA available; the operands as `assert_segs_fit` checks them for `rows`
/// rows and `strips` strips from `a`, `b.0` and `c`.
#[allow(clippy::too_many_arguments)]
unsafe fn segs_piece(
    kc: usize,
    a: *const f32,
    segs: &[usize],
    lda: usize,
    (b, _panel): (*const f32, usize),
    c: *mut f32,
    ldc: usize,
    (rows, _strips): (usize, usize),
    e: Option<&TileEpi<'_>>,
) -> (usize, usize) {
    let r = rows.min(MR);
    // SAFETY: r <= rows rows of the first strip lie within the operands (caller).
    unsafe {
        match r {
            6 => tile_segs::<6>(kc, a, segs, lda, b, c, ldc, e),
            5 => tile_segs::<5>(kc, a, segs, lda, b, c, ldc, e),
            4 => tile_segs::<4>(kc, a, segs, lda, b, c, ldc, e),
            3 => tile_segs::<3>(kc, a, segs, lda, b, c, ldc, e),
            2 => tile_segs::<2>(kc, a, segs, lda, b, c, ldc, e),
            _ => tile_segs::<1>(kc, a, segs, lda, b, c, ldc, e),
        }
    }
    (r, 1)
}

/// `R` rows of a 16-column tile summed over segments (see `KernelTable::mm_tile_segs`):
/// two FMA chains a row, each element's products in segment then step order.
///
/// # Safety
/// AVX2 and FMA available; the operands as `assert_segs_fit` checks them for `R` rows.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_segs<const R: usize>(
    kc: usize,
    a: *const f32,
    segs: &[usize],
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    e: Option<&TileEpi<'_>>,
) {
    let mut t = [[_mm256_setzero_ps(); 2]; R];
    let mut bp = b;
    for &off in segs {
        // SAFETY: rows r < R of the segment hold kc floats from a + off + r * lda, and
        // the segment's kc B rows of 16 start at bp (the caller's contract).
        unsafe {
            let base = a.add(off);
            for p in 0..kc {
                let b0 = _mm256_loadu_ps(bp);
                let b1 = _mm256_loadu_ps(bp.add(8));
                for (r, acc) in t.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*base.add(r * lda + p));
                    acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
                }
                bp = bp.add(NR);
            }
        }
    }
    for (r, acc) in t.iter().enumerate() {
        // SAFETY: row r < R of C holds 16 floats at c + r * ldc; the column bias 16.
        unsafe {
            let (mut v0, mut v1) = (acc[0], acc[1]);
            if let Some(e) = e {
                if let Some(cb) = e.col_bias {
                    // Loaded per row: held across the sums, the two bias vectors would
                    // push the 12 accumulators out of the 16 registers.
                    let [b0, b1] = bias16(cb);
                    v0 = _mm256_add_ps(v0, b0);
                    v1 = _mm256_add_ps(v1, b1);
                }
                if let Some((lo, hi)) = e.clamp {
                    (v0, v1) = (clamp8(v0, (lo, hi)), clamp8(v1, (lo, hi)));
                }
            }
            let cp = c.add(r * ldc);
            _mm256_storeu_ps(cp, v0);
            _mm256_storeu_ps(cp.add(8), v1);
        }
    }
}

/// `v` clamped to `[lo, hi]` as the epilogue's ReLU / Clip (`vmaxps` gives `lo` for a
/// NaN).
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn clamp8(v: __m256, (lo, hi): (f32, f32)) -> __m256 {
    // SAFETY: register-only AVX operations (the caller's contract).
    unsafe { _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi)) }
}

/// The first 16 floats of a column bias as two vectors.
///
/// # Safety
/// AVX available; `cb` holds 16 floats.
#[inline(always)]
unsafe fn bias16(cb: &[f32]) -> [__m256; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        [
            _mm256_loadu_ps(cb.as_ptr()),
            _mm256_loadu_ps(cb.as_ptr().add(8)),
        ]
    }
}

/// Stores the 6x16 accumulators `t` into C (plus C when `acc`), through the epilogue `e`
/// (if any): bias (per row, or per column), residual, clamp.
///
/// # Safety
/// AVX2 available; `c` (and the residual of `e`) valid for 6 rows of 16 floats at stride
/// `ldc`, the column bias of `e` for 16 floats.
#[inline(always)]
unsafe fn store_tile(
    t: &[__m256; 2 * MR],
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    // The column bias, loaded once for the tile's rows (the compiler cannot hoist the
    // loads past the stores into C itself).
    // SAFETY: the column bias holds 16 floats (the caller's contract).
    let cb = e.and_then(|e| e.col_bias).map(|cb| unsafe { bias16(cb) });
    for r in 0..MR {
        // SAFETY: row r < MR of C, 16 floats, guaranteed by the caller.
        unsafe {
            let cp = c.add(r * ldc);
            let (mut v0, mut v1) = (t[2 * r], t[2 * r + 1]);
            if acc {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cp));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cp.add(8)));
            }
            if let Some(e) = e {
                if let Some([b0, b1]) = cb {
                    v0 = _mm256_add_ps(v0, b0);
                    v1 = _mm256_add_ps(v1, b1);
                } else {
                    let b = _mm256_set1_ps(e.bias[r]);
                    (v0, v1) = (_mm256_add_ps(v0, b), _mm256_add_ps(v1, b));
                }
                if let Some(res) = e.residual {
                    let rp = res.as_ptr().add(r * ldc);
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(rp));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(rp.add(8)));
                }
                if let Some((lo, hi)) = e.clamp {
                    (v0, v1) = (clamp8(v0, (lo, hi)), clamp8(v1, (lo, hi)));
                }
            }
            _mm256_storeu_ps(cp, v0);
            _mm256_storeu_ps(cp.add(8), v1);
        }
    }
}

feature_build!("avx2,fma", add_pairs, body::conv::add_pairs, (o: &mut [f32], a: &[f32], b: &[f32]));
feature_build!("avx2,fma", bilinear_up2x, body::resize::bilinear_up2x, (ty: &[LinearTap], tx: &[LinearTap], h: usize, w: usize, x: &[f32], y: &mut [f32], planes: (usize, usize), scratch: &mut [f32]));

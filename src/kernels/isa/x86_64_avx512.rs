//! The AVX-512 table (x86-64, F/BW/VL/DQ + VNNI): a hand-written 6x16 GEMM micro-kernel
//! with one 16-lane register per row and the A element broadcast from memory into the
//! FMA, a 16-lane GEMV and im2col gather, and the generic bodies compiled with AVX-512
//! enabled. The channels-last depthwise conv runs 16 lanes (`x86_64_dw_nhwc`); the
//! other depthwise direct kernels are the AVX2 ones (AVX-512 CPUs have AVX2).
//!
//! Every entry of [`TABLE`] is a private safe wrapper around a `#[target_feature]`
//! function; [`table`] hands the table out only after detecting every feature named in
//! [`FEATURES`] plus AVX2 and FMA, so each wrapper runs only on a CPU that has them.

use super::x86_64_avx512_math as math;
use super::{
    portable, KernelTable, RowBlock, TileEpi, TileWalk, WalkA, WalkEpi, WalkSteps, HALF, MR, NR,
};
use crate::ir::{BinaryOp, UnaryOp};
use crate::kernels::body::pool::PoolShape;
use crate::kernels::body::resize::LinearTap;
use crate::kernels::body::{self, conv::ConvShape, eltwise::Bcast, epilogue::Epilogue};
use crate::kernels::conv::{winograd_body, OutBlock, PointRows, WinoGeom};
use std::arch::x86_64::*;

/// The AVX-512 table, when this CPU has AVX-512 F/BW/VL/DQ and VNNI (the int8
/// sub-table's dot products), AVX2 and FMA.
pub(super) fn table() -> Option<&'static KernelTable> {
    (is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma"))
    .then_some(&TABLE)
}

static TABLE: KernelTable = KernelTable {
    name: "avx512",
    isa: super::Isa::Avx512,
    mr: MR,
    nr: NR,
    lanes: 16,
    mm_tile,
    mm_tile_rows,
    mm_row,
    mm_half,
    mm_half_strided,
    mm_half_strided_epi: None,
    mm_tile24_strided_epi: Some(mm_tile24_strided_epi),
    mm_cols: super::x86_64_cols::mm_cols,
    mm_part,
    mm_part_rows: super::x86_64_fma::mm_part_rows,
    transpose32: super::x86_64_transpose::transpose32,
    gather_words: super::x86_64_fma::gather_words,
    epilogue: math::epilogue,
    unary: math::unary,
    binary_f32,
    depthwise_plane,
    max_pool_plane: super::x86_64_maxpool::max_pool_plane,
    max_pool_nhwc,
    gemv_acc,
    sigmoid: math::sigmoid,
    tanh,
    quant: &crate::kernels::quant::x86_64_vnni::TABLE,
    softmax_row: math::softmax_row,
    exp_row: math::exp_row,
    layer_norm_row,
    depthwise_fused: super::x86_64_dw::depthwise_direct,
    depthwise_block: Some(super::x86_64_dw_block::depthwise_block),
    depthwise_nhwc: super::x86_64_dw_nhwc::depthwise_nhwc_512,
    qdepthwise_block: Some(super::x86_64_qdw_block::qdepthwise_block),
    mm_tile_strided,
    mm_tile_segs,
    mm_tile_strided_epi: Some(mm_tile_strided_epi),
    mm_tiles: Some(mm_tiles),
    mm_tile_pair: Some(mm_tile_pair),
    mm_tile_epi: Some(mm_tile_epi),
    mm_tile_rows_epi: Some(mm_tile_rows_epi),
    wino_input: super::x86_64_wino512::wino_input,
    wino_output,
    avg_pool_plane,
    im2col_panels,
    add_pairs,
    bilinear_up2x,
    conv_tiles: Some(super::x86_64_direct::TILES),
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

feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", pub(super) epilogue_body512, epilogue_body, (e: &Epilogue<'_>, c: &mut [f32], ldc: usize, i0: usize, mr: usize, j0: usize, nr: usize));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", pub(super) unary_body, body::unary::apply_unary, (op: UnaryOp, x: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", max_pool_nhwc, body::pool::max_pool_nhwc, (s: &PoolShape, c: usize, x: &[f32], y: &mut [f32], rows: (usize, usize)));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", binary_f32, body::eltwise::binary_f32, (op: BinaryOp, bc: &Bcast, a: &[f32], b: &[f32], out: &mut [f32], lo: usize, hi: usize));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", depthwise_plane, body::depthwise::depthwise_plane, (s: &ConvShape, w: &[f32], plane: &[f32], out: &mut [f32], scratch: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", avg_pool_plane, body::pool::avg_pool_plane, (s: &PoolShape, count_include_pad: bool, x: &[f32], y: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", mm_half, portable::mm_half, (kc: usize, a: &[f32], b: &[f32], c: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", mm_half_strided, portable::mm_half_strided, (kc: usize, a: &[f32], lda: usize, b: &[f32], c: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", mm_row, portable::mm_row, (kc: usize, a: &[f32], b: &[f32], c: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", tanh, body::rnn::tanh, (x: &mut [f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", layer_norm_row, body::norm::layer_norm_row, (x: &[f32], y: &mut [f32], scale: &[f32], bias: &[f32], eps: f32));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", add_pairs, body::conv::add_pairs, (o: &mut [f32], a: &[f32], b: &[f32]));
feature_build!("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma", bilinear_up2x, body::resize::bilinear_up2x, (ty: &[LinearTap], tx: &[LinearTap], h: usize, w: usize, x: &[f32], y: &mut [f32], planes: (usize, usize), scratch: &mut [f32]));

/// The F(4x4, 3x3) patches of a panel, lanes to vectors: per pair of patch rows, each
/// lane's two rows of six (masked loads; a border lane's rows and columns inside the
/// plane only, zeros around them) form one vector, and a 16x16 transposition turns the
/// 16 lanes' vectors into `d[r * 6 + c]` (0 in the lanes that are neither).
///
/// # Safety
/// AVX-512F available; for every lane with `inner[l] != EDGE`, `plane` holds the
/// 6x6 patch at `inner[l]` (rows `w` apart); every clip lies inside `plane`.
#[inline(always)]
pub(super) unsafe fn gather_patches6(
    plane: &[f32],
    w: usize,
    inner: &winograd_body::Origins,
    clips: &[winograd_body::Clip],
    d: &mut [winograd_body::Lanes; 36],
) {
    // SAFETY: masked loads touch only the six floats of a patch row (inside `plane`
    // per the contract); the rest is register work and stores into `d`.
    unsafe {
        for b in 0..3 {
            let mut r = [_mm512_setzero_ps(); NR];
            for l in 0..NR {
                if inner[l] == winograd_body::EDGE {
                    continue;
                }
                let p = plane.as_ptr().add(inner[l] + 2 * b * w);
                let lo = _mm256_maskz_loadu_ps(0x3f, p);
                let hi = _mm256_maskz_loadu_ps(0x3f, p.add(w));
                r[l] = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi);
            }
            for clip in clips {
                // Patch rows 2b and 2b + 1, each its columns c0..c1 under a mask from the
                // address of its column 0 (the masked-off columns, outside the plane, are
                // not read), zeros for a row outside. No closure: it would not inherit
                // the caller's features, and the loads in it would be calls.
                let ((r0, r1), (c0, c1)) = (clip.rows, clip.cols);
                let mask = ((1u32 << c1) - (1u32 << c0)) as u8;
                let mut two = [_mm256_setzero_ps(); 2];
                for (k, v) in two.iter_mut().enumerate() {
                    let pr = 2 * b + k;
                    if (r0..r1).contains(&pr) && c0 < c1 {
                        let p = plane.as_ptr().wrapping_add(clip.at + (pr - r0) * w);
                        *v = _mm256_maskz_loadu_ps(mask, p.wrapping_sub(c0));
                    }
                }
                r[clip.lane] = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(two[0]), two[1]);
            }
            let t = super::x86_64_dw_block::transpose(r);
            for c in 0..6 {
                _mm512_storeu_ps(d[2 * b * 6 + c].as_mut_ptr(), t[c]);
                _mm512_storeu_ps(d[(2 * b + 1) * 6 + c].as_mut_ptr(), t[8 + c]);
            }
        }
    }
}

fn wino_output(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]) {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn build(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]) {
        let ow = g.ow;
        winograd_body::output_block_with(g, m, b, y, |o, dst, cuts, plane| {
            // SAFETY: AVX-512 is enabled here (and detected, see `table`); the stores
            // go through bounds-checked row slices of `plane`.
            unsafe { scatter_tiles4(o, dst, cuts, ow, plane) };
            true
        })
    }
    // SAFETY: reachable only through TABLE, handed out after detecting the features.
    unsafe { build(g, m, b, y) }
}

/// The F(4x4, 3x3) output tiles of a panel, vectors to lanes: one 16x16 transposition
/// gives each lane its 4x4 tile as one vector, whose four rows are stored at `dst[l] +
/// r * ow` (lanes without a whole kept tile are skipped); a cut tile's rows inside the
/// plane under a mask of its columns inside.
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn scatter_tiles4(
    o: &[winograd_body::Lanes; 16],
    dst: &winograd_body::TileDsts,
    cuts: &[winograd_body::Cut],
    ow: usize,
    plane: &mut [f32],
) {
    // SAFETY: register work, loads of `o`'s rows (16 floats each) and stores into
    // 4-float slices of `plane` taken with bounds checks.
    unsafe {
        let mut r = [_mm512_setzero_ps(); NR];
        for (v, row) in r.iter_mut().zip(o) {
            *v = _mm512_loadu_ps(row.as_ptr());
        }
        let t = super::x86_64_dw_block::transpose(r);
        for l in 0..NR {
            if dst[l] == winograd_body::EDGE {
                continue;
            }
            let at = dst[l];
            let rows = [
                _mm512_castps512_ps128(t[l]),
                _mm512_extractf32x4_ps::<1>(t[l]),
                _mm512_extractf32x4_ps::<2>(t[l]),
                _mm512_extractf32x4_ps::<3>(t[l]),
            ];
            for (k, v) in rows.into_iter().enumerate() {
                _mm_storeu_ps(plane[at + k * ow..][..4].as_mut_ptr(), v);
            }
        }
        for cut in cuts {
            let mask = (1u8 << cut.cols.min(4)) - 1;
            let v = t[cut.lane];
            let rows = [
                _mm512_castps512_ps128(v),
                _mm512_extractf32x4_ps::<1>(v),
                _mm512_extractf32x4_ps::<2>(v),
                _mm512_extractf32x4_ps::<3>(v),
            ];
            for (k, v) in rows.into_iter().enumerate().take(cut.rows) {
                let row = &mut plane[cut.at + k * ow..][..cut.cols];
                _mm_mask_storeu_ps(row.as_mut_ptr(), mask, v);
            }
        }
    }
}

fn im2col_panels(
    s: &ConvShape,
    x: &[f32],
    k0: usize,
    kc: usize,
    j0: usize,
    n: usize,
    out: &mut [f32],
) {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
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
            if stride <= 2 {
                // SAFETY: AVX-512 is enabled here (and detected, see `table`).
                unsafe { gather_masked(src, stride, d) }
            } else {
                body::im2col::gather_scalar(src, stride, d)
            }
        };
        let run = |src: &[f32], stride, out: &mut [f32], panel, count| {
            if stride <= 2 {
                // SAFETY: AVX-512 is enabled here (and detected, see `table`).
                unsafe { gather_whole(src, stride, out, panel, count) }
            } else {
                body::im2col::runs::<NR>(body::im2col::gather_scalar)(
                    src, stride, out, panel, count,
                )
            }
        };
        body::im2col::im2col_panels::<NR>(s, x, k0, kc, j0, n, out, gather, run)
    }
    // SAFETY: reachable only through TABLE, handed out after detecting the features.
    unsafe { build(s, x, k0, kc, j0, n, out) }
}

/// `count` whole panel rows (stride 1 or 2): row `i`, `src[(i * 16 + l) * stride]` for
/// lanes `l < 16`, into `out[i * panel..][..16]`; unmasked loads (one, or two and a
/// two-source permute) and stores, no per-row bounds work.
///
/// # Safety
/// AVX-512F must be available.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn gather_whole(src: &[f32], stride: usize, out: &mut [f32], panel: usize, count: usize) {
    if count == 0 {
        return;
    }
    assert!((1..=2).contains(&stride) && panel >= NR);
    assert!(src.len() > (count * NR - 1) * stride && out.len() >= (count - 1) * panel + NR);
    let (sp, op) = (src.as_ptr(), out.as_mut_ptr());
    for i in 0..count {
        // SAFETY: row i reads src[i * 16 * stride..][..(15 * stride + 1)] (the stride-2
        // second load takes 15 lanes: up to 2 * 15 + 1 floats in all), inside src
        // (asserted), and writes out[i * panel..][..16], inside out (asserted).
        unsafe {
            let at = sp.add(i * NR * stride);
            let v = if stride == 1 {
                _mm512_loadu_ps(at)
            } else {
                let hi = _mm512_maskz_loadu_ps(0x7fff, at.add(NR));
                math::alternate_lanes::<0>(_mm512_loadu_ps(at), hi)
            };
            _mm512_storeu_ps(op.add(i * panel), v);
        }
    }
}

/// `d[i] = src[i * stride]` for a piece of a panel row (stride 1 or 2, 1 to 16 floats):
/// masked loads (one, or two and a two-source permute for stride 2) and a masked store,
/// so that partial pieces at row ends and panel edges stay vectorised.
///
/// # Safety
/// AVX-512F must be available.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn gather_masked(src: &[f32], stride: usize, d: &mut [f32]) {
    let len = d.len();
    assert!((1..=2).contains(&stride) && (1..=NR).contains(&len) && src.len() > (len - 1) * stride);
    let (sp, dp) = (src.as_ptr(), d.as_mut_ptr());
    let out = math::first_lanes(len);
    // SAFETY: the enabled lanes of each load lie inside src ((len - 1) * stride + 1
    // floats, checked) and those of the store inside d (len floats).
    unsafe {
        let v = if stride == 1 {
            _mm512_maskz_loadu_ps(out, sp)
        } else {
            let span = 2 * len - 1;
            let lo = _mm512_maskz_loadu_ps(math::first_lanes(span), sp);
            let hi = _mm512_maskz_loadu_ps(math::first_lanes(span.saturating_sub(16)), sp.add(16));
            math::alternate_lanes::<0>(lo, hi)
        };
        _mm512_mask_storeu_ps(dp, out, v);
    }
}

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
    // SAFETY: the features were detected (see `table`); the asserts above bound every
    // offset the tile touches (a: kc*MR, b row p: p*NR..p*NR+NR, c and the residual: MR
    // rows of NR at ldc).
    unsafe {
        tile_6x16(
            kc,
            |p, r| a.wrapping_add(p * MR + r),
            |p| b.add(p * NR),
            c,
            ldc,
            acc,
            e,
            0,
        )
    }
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
    // SAFETY: the features were detected (see `table`); every row holds `b.len >= off +
    // NR` floats (checked by `RowBlock::new` and above), a holds kc*MR, c and the
    // residual MR rows of NR.
    unsafe {
        tile_6x16(
            kc,
            |p, r| a.wrapping_add(p * MR + r),
            |p| rows[p].as_ptr().add(off),
            c,
            ldc,
            acc,
            e,
            ROWS_PREFETCH,
        )
    }
}

/// Floats ahead of each B row read in place that the tile prefetches. Rows read in
/// place come from up to KC different input planes, too many streams for the hardware
/// prefetchers.
const ROWS_PREFETCH: usize = 64;

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

/// `KernelTable::mm_tile24_strided_epi` with AVX-512: [`tile_6x24_strided`].
#[allow(clippy::too_many_arguments)]
fn mm_tile24_strided_epi(
    kc: usize,
    a: &[f32],
    lda: usize,
    b: [&[f32]; 2],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    const W: usize = NR + HALF;
    assert!(a.len() >= (MR - 1) * lda + kc && b.iter().all(|b| b.len() >= kc * NR));
    assert!(ldc >= W && c.len() >= (MR - 1) * ldc + W);
    e.inspect(|e| e.assert_fits(ldc, W));
    let (a, c) = (a.as_ptr(), c.as_mut_ptr());
    // SAFETY: the features were detected (see `table`); the asserts above bound every
    // offset the tile touches (a row r: r*lda..r*lda+kc, each B panel kc*NR, c and the
    // residual: MR rows of NR + HALF at ldc, the column bias NR + HALF).
    unsafe { tile_6x24_strided(kc, a, lda, [b[0].as_ptr(), b[1].as_ptr()], c, ldc, acc, e) }
}

/// Six rows of `NR + HALF` columns, A in place (row `r`, step `p` at `a + r * lda + p`):
/// per row one 16-lane and one 8-lane FMA chain over the steps, from zero (the order of
/// [`tile_6x16`] and of the AVX2 half tile, so the same bits), then C's old value when
/// `acc`, and `e`'s column bias, residual and clamp as [`store_row`] does.
///
/// # Safety
/// AVX-512F available; the reads and writes [`mm_tile24_strided_epi`] checks are in
/// bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_6x24_strided(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: [*const f32; 2],
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
) {
    let mut t = [_mm512_setzero_ps(); MR];
    let mut h = [_mm256_setzero_ps(); MR];
    // SAFETY: row r < MR starts inside `a` (caller).
    let ar: [*const f32; MR] = std::array::from_fn(|r| unsafe { a.add(r * lda) });
    for p in 0..kc {
        // SAFETY: step p < kc of both B panels and of each A row is readable (caller).
        unsafe {
            let x = _mm512_loadu_ps(b[0].add(p * NR));
            let y = _mm256_loadu_ps(b[1].add(p * NR));
            for r in 0..MR {
                let v = *ar[r].add(p);
                t[r] = _mm512_fmadd_ps(_mm512_set1_ps(v), x, t[r]);
                h[r] = _mm256_fmadd_ps(_mm256_set1_ps(v), y, h[r]);
            }
        }
    }
    for r in 0..MR {
        // SAFETY: row r of C (and of the residual) holds NR + HALF floats, the column
        // bias NR + HALF (caller).
        unsafe {
            store_row(t[r], c, ldc, r, acc, e.map(Lean::of));
            let cp = c.add(r * ldc + NR);
            let mut v = if acc {
                _mm256_add_ps(h[r], _mm256_loadu_ps(cp))
            } else {
                h[r]
            };
            if let Some(e) = e {
                v = match e.col_bias {
                    Some(cb) => _mm256_add_ps(v, _mm256_loadu_ps(cb.as_ptr().add(NR))),
                    None => _mm256_add_ps(v, _mm256_set1_ps(e.bias[r])),
                };
                if let Some(res) = e.residual {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(res.as_ptr().add(r * ldc + NR)));
                }
                if let Some((lo, hi)) = e.clamp {
                    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
                }
            }
            _mm256_storeu_ps(cp, v);
        }
    }
}

#[inline]
#[allow(clippy::too_many_arguments)]
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
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: the features were detected (see `table`); the asserts above bound every
    // offset the tile touches (a row r: r*lda..r*lda+kc, b: kc*NR, c and the residual:
    // MR rows of NR at ldc).
    unsafe {
        tile_6x16(
            kc,
            |p, r| a.wrapping_add(r * lda + p),
            |p| b.add(p * NR),
            c,
            ldc,
            acc,
            e,
            0,
        )
    }
}

/// `KernelTable::mm_tiles` with AVX-512: the walk's tiles two at a time, each pair in
/// twelve accumulators ([`tile_12x16`] down a column, [`tile_6x16_row`] along a row, four at a time there:
/// one tile's six chains cannot keep two 512-bit FMA ports with 4-cycle latency busy),
/// an odd last tile alone; every element summed in the order of [`tile_6x16`]. Along a
/// row, the calls of [`tile_6x16_row`] share `ahead`'s lines out among themselves.
#[allow(clippy::too_many_arguments)]
fn mm_tiles(
    kc: usize,
    a: WalkA<'_>,
    b: &[f32],
    ahead: &[f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<&WalkEpi<'_>>,
    walk: TileWalk,
    count: usize,
) {
    let st = WalkSteps::checked(walk, count, kc, a, b, (c, ldc), e);
    let (ap, lda) = match a {
        WalkA::Packed(a) => (a.as_ptr(), None),
        WalkA::Rows { a, lda } => (a.as_ptr(), Some(lda)),
    };
    // A row of tiles a call (a loop around the row's tiles would change how the tiles'
    // loops are compiled); `ahead`'s lines in equal shares to the rows after the first
    // (which reads the B panels from memory), all of them where the walk has one row.
    let rows = walk.rows();
    let store = Store::of(acc, e);
    let ahead = Ahead::of(ahead);
    let per = ahead.lines.div_ceil(rows.max(2) - 1);
    for p in 0..rows {
        let row_e = e.filter(|_| p > 0).map(|e| e.row(p, ldc));
        let row_ahead = match (rows, p) {
            (1, _) => ahead,
            (_, 0) => Ahead::NONE,
            _ => ahead.part((p - 1) * per, per),
        };
        let row_e = if p == 0 { e } else { row_e.as_ref() };
        let (a_p, c_p) = (
            ap.wrapping_add(p * st.a_row),
            c.as_mut_ptr().wrapping_add(p * MR * ldc),
        );
        macro_rules! walk {
            ($s:expr) => {
                // SAFETY: the features were detected (see `table`); `WalkSteps::checked`
                // bounds every tile of every row of the walk (A panels or rows, the B
                // panels, C and the residual rows, the biases); `store` is the walk's own.
                unsafe {
                    tiles_walk::<{ $s }>(
                        kc,
                        (a_p, lda),
                        b.as_ptr(),
                        row_ahead,
                        c_p,
                        ldc,
                        acc,
                        row_e,
                        (st, walk),
                        count,
                    )
                }
            };
        }
        match store {
            Store::Plain => walk!(Store::Plain as u8),
            Store::Bias => walk!(Store::Bias as u8),
            Store::BiasClamp => walk!(Store::BiasClamp as u8),
            Store::BiasResidual => walk!(Store::BiasResidual as u8),
            Store::BiasResidualClamp => walk!(Store::BiasResidualClamp as u8),
            Store::Rows => walk!(Store::Rows as u8),
        }
    }
}

/// How a walk's tiles store their sums, decided once per walk ([`Store::of`]) and
/// compiled into the tiles as a constant (`Store::X as u8`, the `S` of [`tiles_walk`]
/// and [`tile_6x16_row`]: const generics take no enums): straight, with the walk's column bias, residual and clamp, or
/// row by row through [`store_row`] (accumulation, a row bias). Checked row by row in
/// one body, the general store kept the 24 accumulators spilled to the stack after
/// every call's loop (`perf annotate`, a depth-16 walk).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Store {
    /// No epilogue, no accumulation.
    Plain,
    /// The column bias.
    Bias,
    /// The column bias and a clamp.
    BiasClamp,
    /// The column bias and the residual.
    BiasResidual,
    /// The column bias, the residual and a clamp.
    BiasResidualClamp,
    /// [`store_row`] for each row.
    Rows,
}

impl Store {
    /// The store of a walk that accumulates (`acc`) or not, with epilogue `e`.
    fn of(acc: bool, e: Option<&WalkEpi<'_>>) -> Store {
        match (acc, e) {
            (false, None) => Store::Plain,
            (false, Some(e)) if e.col_bias.is_some() => {
                match (e.residual.is_some(), e.clamp.is_some()) {
                    (false, false) => Store::Bias,
                    (false, true) => Store::BiasClamp,
                    (true, false) => Store::BiasResidual,
                    (true, true) => Store::BiasResidualClamp,
                }
            }
            _ => Store::Rows,
        }
    }
}

/// The walk of [`mm_tiles`] (one target-feature function, so the tiles inline): A
/// packed (`lda` None) or rows in place.
///
/// # Safety
/// AVX-512F available; every tile `t < count` of the walk `st` within its operands.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tiles_walk<const S: u8>(
    kc: usize,
    (a, lda): (*const f32, Option<usize>),
    b: *const f32,
    ahead: Ahead,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&WalkEpi<'_>>,
    (st, walk): (WalkSteps, TileWalk),
    count: usize,
) {
    // A row r, step p of a tile: `p * MR + r` on from its packed panel, `r * lda + p`
    // on from its rows (in bounds for the tiles of the walk: the caller's contract).
    let a_of = |at: *const f32| {
        move |p: usize, r: usize| match lda {
            None => at.wrapping_add(p * MR + r),
            Some(lda) => at.wrapping_add(r * lda + p),
        }
    };
    let mut t = 0;
    // `ahead`'s lines in equal shares, one per call along the row (a line a step: more
    // than the walk has steps for is left to the hardware).
    let calls = count / 4 + count % 4 / 2;
    let share = ahead.lines.div_ceil(calls.max(1)).min(kc);
    let ahead_of = |t: usize| ahead.part((t / 4 + t % 4 / 2) * share, share);
    while matches!(walk, TileWalk::Right { .. }) && t + 4 <= count {
        let es = e.map(|e| {
            let l = Lean::walk(e, t, &st);
            std::array::from_fn(|q| l.right(q * NR))
        });
        // SAFETY: tiles t..t + 4 <= count of the walk lie within the operands (caller).
        unsafe {
            let (a0, b0, c0) = (a.add(t * st.a), b.add(t * st.b), c.add(t * st.c));
            let bs = std::array::from_fn(|q| b0.add(q * st.b));
            // The C lines the walk writes next: the next four tiles along the row, or
            // after its last, those one A panel down from its first (the next panel's
            // tiles, strips outer); written once, they would otherwise be read from
            // memory only when stored.
            let next = if t + 8 <= count {
                c0.wrapping_add(4 * st.c)
            } else {
                c.wrapping_add(MR * ldc)
            };
            prefetch_tile_lines(next, ldc);
            tile_6x16_row::<4, S>(kc, a_of(a0), bs, c0, ldc, acc, es, ahead_of(t))
        }
        t += 4;
    }
    while t + 2 <= count {
        let es = e.map(|e| [Lean::walk(e, t, &st), Lean::walk(e, t + 1, &st)]);
        // SAFETY: tiles t and t + 1 < count of the walk lie within the operands (the
        // caller's contract), as do their A steps, B rows and C rows.
        unsafe {
            let (a0, b0, c0) = (a.add(t * st.a), b.add(t * st.b), c.add(t * st.c));
            match walk {
                TileWalk::Down => {
                    let (a1, c1) = (a0.add(st.a), c0.add(st.c));
                    let (f0, f1) = (a_of(a0), a_of(a1));
                    let a_at = |p, r| if r < MR { f0(p, r) } else { f1(p, r - MR) };
                    // Packed A panels stream from memory (a Winograd point's weights,
                    // too many for the caches in a network): each pair asks for the
                    // next pair's two panels, 2 * MR floats a step.
                    let next = lda.is_none().then(|| a0.wrapping_add(2 * st.a));
                    let b_row = |p| b0.add(p * NR);
                    tile_12x16(kc, a_at, b_row, [c0, c1], ldc, acc, es, next)
                }
                TileWalk::Right { .. } => {
                    let bs = [b0, b0.add(st.b)];
                    tile_6x16_row::<2, S>(kc, a_of(a0), bs, c0, ldc, acc, es, ahead_of(t))
                }
            }
        }
        t += 2;
    }
    if t < count {
        let te = e.map(|e| e.tile(t, &st));
        // SAFETY: tile t < count of the walk lies within the operands (caller).
        unsafe {
            let (at, bt, ct) = (a.add(t * st.a), b.add(t * st.b), c.add(t * st.c));
            tile_6x16(
                kc,
                a_of(at),
                |p| bt.add(p * NR),
                ct,
                ldc,
                acc,
                te.as_ref(),
                0,
            )
        }
    }
}

/// Asks for the lines of four 6x16 tiles side by side at `c` (stride `ldc`): a hint,
/// harmless for an address past C.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn prefetch_tile_lines(c: *const f32, ldc: usize) {
    for r in 0..MR {
        for q in 0..4 {
            _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(r * ldc + q * NR).cast());
        }
    }
}

/// Two 6x16 tiles one above the other on one B panel: twelve accumulators, `a_at(p, r)`
/// for rows r < 12 (the first tile's six, then the second's), C of tile q at `c[q]`,
/// each element summed in the order of [`tile_6x16`] (so the same bits); with
/// `prefetch`, step `p` prefetches the `2 * MR` floats `2 * MR * p` on from it.
///
/// # Safety
/// AVX-512F must be available; `a_at(p, r)` valid for one read and `b_row(p)` for 16
/// for every `p < kc`, `r < 12`; each `c[q]` (and the residual of `e[q]`) valid for 6
/// rows of 16 floats at stride `ldc`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_12x16(
    kc: usize,
    a_at: impl Fn(usize, usize) -> *const f32,
    b_row: impl Fn(usize) -> *const f32,
    c: [*mut f32; 2],
    ldc: usize,
    acc: bool,
    e: Option<[Lean; 2]>,
    prefetch: Option<*const f32>,
) {
    let mut t = [_mm512_setzero_ps(); 2 * MR];
    let (ar, da) = a_rows::<{ 2 * MR }>(&a_at);
    for p in 0..kc {
        if let Some(n) = prefetch {
            // A hint only: an address past the operand is harmless.
            _mm_prefetch::<_MM_HINT_T0>(n.wrapping_add(p * 2 * MR).cast());
        }
        // SAFETY: 16 floats at b_row(p) and A row r, step p are readable (caller).
        unsafe {
            let b = _mm512_loadu_ps(b_row(p));
            let o = p as isize * da;
            for (tr, r) in t.iter_mut().zip(ar) {
                *tr = _mm512_fmadd_ps(_mm512_set1_ps(*r.offset(o)), b, *tr);
            }
        }
    }
    for (q, tq) in t.chunks_exact(MR).enumerate() {
        for (r, tr) in tq.iter().enumerate() {
            // SAFETY: row r of tile q's C (and residual) holds 16 floats (caller).
            unsafe { store_row(*tr, c[q], ldc, r, acc, e.map(|e| e[q])) }
        }
    }
}

/// The first element of each of `R` A rows of a tile and the floats from one step to
/// the next (A is linear in the step: `MR` in a packed panel, 1 in rows in place), so
/// that the tiles' loops move one offset rather than recompute `R` addresses a step.
#[inline(always)]
fn a_rows<const R: usize>(a_at: &impl Fn(usize, usize) -> *const f32) -> ([*const f32; R], isize) {
    let ar: [*const f32; R] = std::array::from_fn(|r| a_at(0, r));
    let da = (a_at(1, 0) as isize - ar[0] as isize) / std::mem::size_of::<f32>() as isize;
    (ar, da)
}

/// The 6x16 tile: one 16-lane accumulator per row; `a_at(p, r)` points at A row `r`,
/// step `p`, `b_row(p)` at the 16 floats of B for step `p`. The broadcast of A folds
/// into the FMA's memory operand.
///
/// With `e`, its epilogue runs on the registers before the store ([`TileEpi`]); with
/// `prefetch > 0`, each step prefetches its B row that many floats ahead.
///
/// # Safety
/// AVX-512F must be available; `a_at(p, r)` valid for one read and `b_row(p)` for 16
/// for every `p < kc`, `r < 6`; `c` (and the residual of `e`) valid for 6 rows of 16
/// floats at stride `ldc`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_6x16(
    kc: usize,
    a_at: impl Fn(usize, usize) -> *const f32,
    b_row: impl Fn(usize) -> *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<&TileEpi<'_>>,
    prefetch: usize,
) {
    let mut t = [_mm512_setzero_ps(); MR];
    let (ar, da) = a_rows::<MR>(&a_at);
    for p in 0..kc {
        if prefetch > 0 {
            // A hint only: prefetching an address past the row's end is harmless.
            _mm_prefetch::<_MM_HINT_T0>(b_row(p).wrapping_add(prefetch).cast());
        }
        // SAFETY: 16 floats at b_row(p) and A row r, step p are readable (caller).
        unsafe {
            let b = _mm512_loadu_ps(b_row(p));
            let o = p as isize * da;
            for (tr, r) in t.iter_mut().zip(ar) {
                *tr = _mm512_fmadd_ps(_mm512_set1_ps(*r.offset(o)), b, *tr);
            }
        }
    }
    for (r, tr) in t.iter().enumerate() {
        // SAFETY: row r < MR of C (and of the residual), 16 floats, guaranteed by the
        // caller.
        unsafe { store_row(*tr, c, ldc, r, acc, e.map(Lean::of)) }
    }
}

/// A tile's fused epilogue as the AVX-512 tiles apply it ([`store_row`]): the
/// [`TileEpi`]'s operands as pointers at the tile's origin, so that a walk moves it from
/// tile to tile by offsets ([`Lean::right`]) rather than building a
/// `TileEpi` (its row biases copied) for each.
#[derive(Clone, Copy)]
struct Lean {
    /// The column bias at the tile's first column; null: the row bias instead.
    col_bias: *const f32,
    /// The bias of the tile's first row (then one per row); null: none (0 is added).
    row_bias: *const f32,
    /// The residual at the tile's origin (stride `ldc`); null: none.
    residual: *const f32,
    /// `(lo, hi)` of a ReLU / Clip.
    clamp: Option<(f32, f32)>,
}

impl Lean {
    /// No operands.
    const NONE: Lean = Lean {
        col_bias: std::ptr::null(),
        row_bias: std::ptr::null(),
        residual: std::ptr::null(),
        clamp: None,
    };

    /// `e`'s operands (its row biases where `e` lives).
    fn of(e: &TileEpi<'_>) -> Lean {
        Lean {
            col_bias: e.col_bias.map_or(std::ptr::null(), <[f32]>::as_ptr),
            row_bias: e.bias.as_ptr(),
            residual: e.residual.map_or(std::ptr::null(), <[f32]>::as_ptr),
            clamp: e.clamp,
        }
    }

    /// Tile `t` of a walk with steps `st` from the walk's epilogue `e`.
    fn walk(e: &WalkEpi<'_>, t: usize, st: &WalkSteps) -> Lean {
        let at = |s: Option<&[f32]>, step: usize| {
            s.map_or(std::ptr::null(), |s| s.as_ptr().wrapping_add(t * step))
        };
        Lean {
            col_bias: at(e.col_bias, st.col_bias),
            row_bias: at(e.row_bias, st.row_bias),
            residual: at(e.residual, st.c),
            clamp: e.clamp,
        }
    }

    /// The tile `cols` columns to the right (the same rows).
    fn right(self, cols: usize) -> Lean {
        let on = |p: *const f32| if p.is_null() { p } else { p.wrapping_add(cols) };
        Lean {
            col_bias: on(self.col_bias),
            residual: on(self.residual),
            ..self
        }
    }
}

/// Stores `Q` tiles' accumulators as [`store_row`] does (the same operations in the
/// same order): straight with the store `S` of the walk ([`Store`]: its column bias,
/// residual and clamp, the same for every tile), row by row through [`store_row`] for
/// [`Store::Rows`].
///
/// # Safety
/// As [`store_row`] for every row of every tile; `e` present with a column bias (and a
/// residual, a clamp) where `S` says so.
#[inline(always)]
unsafe fn store_tiles<const Q: usize, const S: u8>(
    t: &[[__m512; MR]; Q],
    c: [*mut f32; Q],
    ldc: usize,
    acc: bool,
    e: Option<[Lean; Q]>,
) {
    if S == Store::Rows as u8 {
        for (q, tq) in t.iter().enumerate() {
            for (r, tr) in tq.iter().enumerate() {
                // SAFETY: row r of tile q's C (and residual) holds 16 floats (caller).
                unsafe { store_row(*tr, c[q], ldc, r, acc, e.map(|e| e[q])) }
            }
        }
        return;
    }
    let bias = S != Store::Plain as u8;
    let residual = S == Store::BiasResidual as u8 || S == Store::BiasResidualClamp as u8;
    let clamp = S == Store::BiasClamp as u8 || S == Store::BiasResidualClamp as u8;
    let es = e.unwrap_or([Lean::NONE; Q]);
    let (lo, hi) = es[0].clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    // SAFETY: AVX-512F available; the caller's rows, biases and residual rows.
    unsafe {
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        for (q, (tq, l)) in t.iter().zip(&es).enumerate() {
            let b = if bias {
                _mm512_loadu_ps(l.col_bias)
            } else {
                _mm512_setzero_ps()
            };
            for (r, &tr) in tq.iter().enumerate() {
                let mut v = if bias { _mm512_add_ps(tr, b) } else { tr };
                if residual {
                    v = _mm512_add_ps(v, _mm512_loadu_ps(l.residual.add(r * ldc)));
                }
                if clamp {
                    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
                }
                _mm512_storeu_ps(c[q].add(r * ldc), v);
            }
        }
    }
}

/// Stores row `r` of a tile at `c` (stride `ldc`): `v` (plus the row's old value when
/// `acc`), then `e`'s bias, residual and clamp.
///
/// # Safety
/// AVX-512F must be available; row `r` of `c` and of `e`'s residual valid for 16 floats,
/// `e`'s column bias for 16 (or its row bias for `r + 1`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn store_row(v: __m512, c: *mut f32, ldc: usize, r: usize, acc: bool, e: Option<Lean>) {
    // SAFETY: row r of c and of the residual hold 16 floats, so do the column bias or
    // the row bias r + 1 (caller).
    unsafe {
        let cp = c.add(r * ldc);
        let mut v = if acc {
            _mm512_add_ps(v, _mm512_loadu_ps(cp))
        } else {
            v
        };
        if let Some(e) = e {
            v = if !e.col_bias.is_null() {
                _mm512_add_ps(v, _mm512_loadu_ps(e.col_bias))
            } else if !e.row_bias.is_null() {
                _mm512_add_ps(v, _mm512_set1_ps(*e.row_bias.add(r)))
            } else {
                _mm512_add_ps(v, _mm512_setzero_ps())
            };
            if !e.residual.is_null() {
                v = _mm512_add_ps(v, _mm512_loadu_ps(e.residual.add(r * ldc)));
            }
            if let Some((lo, hi)) = e.clamp {
                // As the epilogue's ReLU / Clip: `vmaxps` gives `lo` for a NaN.
                v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
            }
        }
        _mm512_storeu_ps(cp, v);
    }
}

fn mm_tile_pair(
    kc: usize,
    a: &[f32],
    b: [&[f32]; 2],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
    e: Option<[&TileEpi<'_>; 2]>,
) {
    assert!(
        b[0].len() >= kc * NR && b[1].len() >= kc * NR,
        "tile: short B panel"
    );
    assert!(c.len() >= NR, "tile: short C");
    super::assert_tile_fits(kc, a, c, ldc, e.map(|e| e[0]));
    super::assert_tile_fits(kc, a, &c[NR..], ldc, e.map(|e| e[1]));
    let (a, b0, b1, c) = (a.as_ptr(), b[0].as_ptr(), b[1].as_ptr(), c.as_mut_ptr());
    // SAFETY: the features were detected (see `table`); the asserts above bound every
    // offset the pair touches (a: kc*MR, each B panel kc*NR, C and each residual: MR rows
    // of NR at ldc from the tile's origin, the second tile at c + NR).
    unsafe {
        tile_6x16_row::<2, { Store::Rows as u8 }>(
            kc,
            |p, r| a.wrapping_add(p * MR + r),
            [b0, b1],
            c,
            ldc,
            acc,
            e.map(|[e0, e1]| [Lean::of(e0), Lean::of(e1)]),
            Ahead::NONE,
        )
    }
}

/// Lines of B to bring into L2 during a walk ([`KernelTable::mm_tiles`]'s `ahead`):
/// `lines` 64-byte lines from `at`.
#[derive(Clone, Copy)]
struct Ahead {
    at: *const f32,
    lines: usize,
}

impl Ahead {
    const NONE: Ahead = Ahead {
        at: std::ptr::null(),
        lines: 0,
    };

    /// The whole lines of `b`.
    fn of(b: &[f32]) -> Ahead {
        Ahead {
            at: b.as_ptr(),
            lines: b.len() / NR,
        }
    }

    /// Lines `from..from + n` (those of them that exist).
    fn part(self, from: usize, n: usize) -> Ahead {
        let from = from.min(self.lines);
        Ahead {
            at: self.at.wrapping_add(from * NR),
            lines: n.min(self.lines - from),
        }
    }
}

/// `Q` 6x16 tiles side by side on one A panel (B panel `q` at `b[q]`, C of tile `q` at
/// `c + q * NR`): `6 * Q` accumulators, each updated in the order of [`tile_6x16`] (so
/// the same bits). Two keep two FMA ports with 4-cycle latency busy where one tile's six
/// chains cannot; four also halve the A broadcasts per FMA. Step `p` prefetches line `p`
/// of `ahead` (at most `kc` lines).
///
/// # Safety
/// AVX-512F must be available; `a_at(p, r)` valid for one read for every `p < kc`,
/// `r < 6`, each `b[q]` for `kc * NR`; `c` (and each residual of `e`) for 6 rows of 16
/// floats at stride `ldc` from `c + q * NR` for q < Q.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_6x16_row<const Q: usize, const S: u8>(
    kc: usize,
    a_at: impl Fn(usize, usize) -> *const f32,
    b: [*const f32; Q],
    c: *mut f32,
    ldc: usize,
    acc: bool,
    e: Option<[Lean; Q]>,
    ahead: Ahead,
) {
    if kc == 0 {
        // No steps: the epilogue of zero sums. Apart, so that the steps below always
        // write every accumulator before the epilogue reads them (with a path where
        // they did not, the zeroed accumulators were a 1.5 KiB memset a call).
        for q in 0..Q {
            for r in 0..MR {
                // SAFETY: row r of tile q (at c + q*NR) and of its residual hold 16 floats.
                unsafe {
                    store_row(
                        _mm512_setzero_ps(),
                        c.add(q * NR),
                        ldc,
                        r,
                        acc,
                        e.map(|e| e[q]),
                    )
                }
            }
        }
        return;
    }
    let mut t = [[_mm512_setzero_ps(); MR]; Q];
    let (ar, da) = a_rows::<MR>(&a_at);
    for p in 0..kc {
        if p < ahead.lines {
            // A hint only (to L2: the lines are read by later calls).
            _mm_prefetch::<_MM_HINT_T1>(ahead.at.wrapping_add(p * NR).cast());
        }
        // SAFETY: step p < kc of each B panel and of the A rows is readable (caller).
        unsafe {
            let x: [__m512; Q] = std::array::from_fn(|q| _mm512_loadu_ps(b[q].add(p * NR)));
            for r in 0..MR {
                let av = _mm512_set1_ps(*ar[r].offset(p as isize * da));
                for q in 0..Q {
                    t[q][r] = _mm512_fmadd_ps(av, x[q], t[q][r]);
                }
            }
        }
    }
    // SAFETY: tile q (at c + q*NR) and its residual hold 6 rows of 16 floats (caller).
    unsafe {
        let cs = std::array::from_fn(|q| c.add(q * NR));
        store_tiles::<Q, S>(&t, cs, ldc, acc, e)
    }
}

/// `KernelTable::mm_part` with AVX-512: rows `0..rows` of a ragged last A panel
/// against `panels` B panels, several panels a call so that a row or two still run
/// eight or more independent sums.
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
    let per = match rows {
        1 => 8,
        2 | 3 => 4,
        _ => 2,
    };
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    let mut q = 0;
    while q < panels {
        let np = [per, 4, 2, 1]
            .into_iter()
            .find(|&n| n <= per && n <= panels - q);
        let np = np.unwrap_or(1);
        // SAFETY: the features were detected (see `table`); A holds kc * MR floats, B
        // `panels` panels of kc * NR (so panels q..q + np), C `rows` rows of
        // panels * NR at ldc (the asserts above).
        unsafe {
            let (bq, cq) = (b.add(q * kc * NR), c.add(q * NR));
            macro_rules! go {
                ($r:literal, $n:literal) => {
                    part_512::<$r, $n>(kc, a, bq, cq, ldc, acc)
                };
            }
            match (rows, np) {
                (1, 8) => go!(1, 8),
                (1, 4) => go!(1, 4),
                (1, 2) => go!(1, 2),
                (1, _) => go!(1, 1),
                (2, 4) => go!(2, 4),
                (2, 2) => go!(2, 2),
                (2, _) => go!(2, 1),
                (3, 4) => go!(3, 4),
                (3, 2) => go!(3, 2),
                (3, _) => go!(3, 1),
                (4, 2) => go!(4, 2),
                (4, _) => go!(4, 1),
                (_, 2) => go!(5, 2),
                _ => go!(5, 1),
            }
        }
        q += np;
    }
}

/// `R` rows of `Q` tiles side by side: A a packed panel (`MR` floats a step, its first
/// `R` rows used), B `Q` panels of `kc * NR` one after another, C `R` rows of `Q * NR`
/// at `ldc` (`+=` when `acc`); each element summed in the order of [`tile_6x16`].
///
/// # Safety
/// AVX-512F must be available; `a` valid for `kc * MR` floats, `b` for `Q * kc * NR`,
/// `c` for `R` rows of `Q * NR` floats at stride `ldc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn part_512<const R: usize, const Q: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut t = [[_mm512_setzero_ps(); Q]; R];
    for p in 0..kc {
        // SAFETY: step p < kc of the A panel and of each B panel is readable (caller).
        unsafe {
            let x: [__m512; Q] = std::array::from_fn(|q| _mm512_loadu_ps(b.add((q * kc + p) * NR)));
            for (r, tr) in t.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(p * MR + r));
                for (tq, xq) in tr.iter_mut().zip(x) {
                    *tq = _mm512_fmadd_ps(av, xq, *tq);
                }
            }
        }
    }
    for (r, tr) in t.iter().enumerate() {
        for (q, v) in tr.iter().enumerate() {
            // SAFETY: row r < R, columns q * NR.. of C are within the caller's bounds.
            unsafe {
                let cp = c.add(r * ldc + q * NR);
                let v = if acc {
                    _mm512_add_ps(*v, _mm512_loadu_ps(cp))
                } else {
                    *v
                };
                _mm512_storeu_ps(cp, v);
            }
        }
    }
}

super::segs_entry!();

/// One piece of `mm_tile_segs`: `R` rows of `Q` strips in `R * Q <= 24` accumulators
/// (twelve rows of one or two strips, eight of three, six of four), so that at least
/// twelve FMA chains run and each A broadcast feeds every strip; a ragged row count
/// takes the largest piece below it. Returns the rows and strips done.
///
/// # Safety
/// AVX-512F available; the operands as `assert_segs_fit` checks them for `rows` rows
/// and `strips` strips from `a`, `b.0` and `c`, strip `q`'s panel at `b.0 + q * b.1`.
#[allow(clippy::too_many_arguments)]
unsafe fn segs_piece(
    kc: usize,
    a: *const f32,
    segs: &[usize],
    lda: usize,
    b: (*const f32, usize),
    c: *mut f32,
    ldc: usize,
    (rows, strips): (usize, usize),
    e: Option<&TileEpi<'_>>,
) -> (usize, usize) {
    let q = strips.min(4);
    let most = [12, 12, 8, 6][q - 1];
    let r = [12, 8, 6, 4, 3, 2, 1]
        .into_iter()
        .find(|&r| r <= rows.min(most))
        .unwrap_or(1);
    macro_rules! pieces {
        ($(($r:literal, $q:literal)),*) => {
            match (r, q) {
                // SAFETY: r <= rows rows of q <= strips strips lie within the operands
                // (caller).
                $(($r, $q) => unsafe { tile_segs::<$r, $q>(kc, a, segs, lda, b, c, ldc, e) },)*
                _ => unreachable!("segs piece {r} x {q}"),
            }
        };
    }
    pieces!(
        (12, 1),
        (8, 1),
        (6, 1),
        (4, 1),
        (3, 1),
        (2, 1),
        (1, 1),
        (12, 2),
        (8, 2),
        (6, 2),
        (4, 2),
        (3, 2),
        (2, 2),
        (1, 2),
        (8, 3),
        (6, 3),
        (4, 3),
        (3, 3),
        (2, 3),
        (1, 3),
        (6, 4),
        (4, 4),
        (3, 4),
        (2, 4),
        (1, 4)
    );
    (r, q)
}

/// `R` rows of `Q` 16-column strips summed over segments (see
/// `KernelTable::mm_tile_segs`): one 16-lane FMA chain per row and strip, each
/// element's products in segment then step order (the AVX2 tile's order, so the same
/// bits), the column bias and clamp fused into the store.
///
/// # Safety
/// AVX-512F available; the operands as `assert_segs_fit` checks them for `R` rows and
/// `Q` strips, strip `q`'s panel at `b.0 + q * b.1`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_segs<const R: usize, const Q: usize>(
    kc: usize,
    a: *const f32,
    segs: &[usize],
    lda: usize,
    (b, panel): (*const f32, usize),
    c: *mut f32,
    ldc: usize,
    e: Option<&TileEpi<'_>>,
) {
    let mut t = [[_mm512_setzero_ps(); Q]; R];
    let mut bp = b;
    for &off in segs {
        // SAFETY: rows r < R of the segment hold kc floats from a + off + r * lda, and
        // the segment's kc B rows of 16 start at bp in every strip's panel (the
        // caller's contract).
        unsafe {
            let ar: [*const f32; R] = std::array::from_fn(|r| a.add(off + r * lda));
            for p in 0..kc {
                let bv: [__m512; Q] = std::array::from_fn(|q| _mm512_loadu_ps(bp.add(q * panel)));
                for (tr, r) in t.iter_mut().zip(ar) {
                    let av = _mm512_set1_ps(*r.add(p));
                    for (acc, x) in tr.iter_mut().zip(bv) {
                        *acc = _mm512_fmadd_ps(av, x, *acc);
                    }
                }
                bp = bp.add(NR);
            }
        }
    }
    for (r, tr) in t.iter().enumerate() {
        for (q, acc) in tr.iter().enumerate() {
            // SAFETY: row r < R of C holds Q * 16 floats at c + r * ldc; the column bias
            // Q * 16.
            unsafe {
                let mut v = *acc;
                if let Some(e) = e {
                    if let Some(cb) = e.col_bias {
                        v = _mm512_add_ps(v, _mm512_loadu_ps(cb.as_ptr().add(q * NR)));
                    }
                    if let Some((lo, hi)) = e.clamp {
                        // As the epilogue's ReLU / Clip: `vmaxps` gives `lo` for a NaN.
                        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
                    }
                }
                _mm512_storeu_ps(c.add(r * ldc + q * NR), v);
            }
        }
    }
}

fn gemv_acc(w: &[f32], ldw: usize, x: &[f32], y: &mut [f32]) {
    let k = x.len();
    assert!(ldw >= k && (y.is_empty() || w.len() >= (y.len() - 1) * ldw + k));
    // SAFETY: the features were detected (see `table`); the assert bounds every row read
    // (row i: i*ldw..i*ldw+k for i < y.len()).
    unsafe { gemv_acc_512(w.as_ptr(), ldw, x, y) }
}

/// GEMV: four rows at a time, two 16-lane accumulators per row, the tail of each row
/// under a mask (no scalar remainder).
///
/// # Safety
/// AVX-512F must be available; `w` valid for rows `i * ldw .. i * ldw + x.len()` for
/// every `i < y.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn gemv_acc_512(w: *const f32, ldw: usize, x: &[f32], y: &mut [f32]) {
    let k = x.len();
    let k32 = k / 32 * 32;
    let tail = k - k32;
    let xp = x.as_ptr();
    // Masks of the remainder's first (up to 16) and second 16 lanes.
    let m0: __mmask16 = if tail >= 16 {
        0xffff
    } else {
        (1u32 << tail) as u16 - 1
    };
    let m1: __mmask16 = if tail > 16 {
        ((1u32 << (tail - 16)) - 1) as u16
    } else {
        0
    };
    // SAFETY: the remainder lies inside x (masked loads touch only enabled lanes).
    let (xt0, xt1) = unsafe {
        (
            _mm512_maskz_loadu_ps(m0, xp.add(k32)),
            _mm512_maskz_loadu_ps(m1, xp.add(k32 + 16)),
        )
    };
    let mut i = 0;
    while i < y.len() {
        let rows = (y.len() - i).min(4);
        // SAFETY: rows i..i+rows are below y.len(), so each holds k floats (caller); a
        // missing row repeats the last one and is not stored.
        let r: [*const f32; 4] =
            std::array::from_fn(|q| unsafe { w.add((i + q.min(rows - 1)) * ldw) });
        let mut a = [_mm512_setzero_ps(); 8];
        let mut c = 0;
        while c < k32 {
            // SAFETY: c + 32 <= k: inside x and inside each row.
            unsafe {
                let x0 = _mm512_loadu_ps(xp.add(c));
                let x1 = _mm512_loadu_ps(xp.add(c + 16));
                for q in 0..4 {
                    a[2 * q] = _mm512_fmadd_ps(_mm512_loadu_ps(r[q].add(c)), x0, a[2 * q]);
                    a[2 * q + 1] =
                        _mm512_fmadd_ps(_mm512_loadu_ps(r[q].add(c + 16)), x1, a[2 * q + 1]);
                }
            }
            c += 32;
        }
        if tail > 0 {
            for q in 0..4 {
                // SAFETY: the masked lanes lie inside row q (k32 + tail = k).
                unsafe {
                    let w0 = _mm512_maskz_loadu_ps(m0, r[q].add(k32));
                    let w1 = _mm512_maskz_loadu_ps(m1, r[q].add(k32 + 16));
                    a[2 * q] = _mm512_fmadd_ps(w0, xt0, a[2 * q]);
                    a[2 * q + 1] = _mm512_fmadd_ps(w1, xt1, a[2 * q + 1]);
                }
            }
        }
        for q in 0..rows {
            y[i + q] += _mm512_reduce_add_ps(_mm512_add_ps(a[2 * q], a[2 * q + 1]));
        }
        i += rows;
    }
}

//! The AVX2 table's Winograd F(4x4, 3x3) transforms: the generic bodies of
//! `kernels::conv::winograd` with the patch gather and the tile scatter done by 8x8 and
//! 4x4 transpositions in registers instead of one float at a time, and the input
//! transform written straight into the packed panels (no staging copy).
//!
//! The gathered and stored values are the ones the generic loops move, so the bits are
//! the same (`input_transform_tables_match_portable_bits`,
//! `output_transform_tables_match_portable_bits`).

use super::NR;
use crate::kernels::conv::winograd_body::{self as body, Lanes, Origins, TileDsts, EDGE};
use crate::kernels::conv::{OutBlock, PointRows, WinoGeom};
use std::arch::x86_64::*;

/// Lanes of one AVX vector.
const L: usize = 8;
const _: () = assert!(NR.is_multiple_of(L), "a panel is whole vectors");

/// The input transform of tiles `[tb, tb + nb)` (see `winograd_body::input_block`).
pub(super) fn wino_input(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn build(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
        let (w, hw) = (g.w, g.h * g.w);
        let gather = |plane: &[f32], inner: &Origins, clips: &[body::Clip], d: &mut [Lanes; 36]| {
            prefetch_next_planes(plane, w, hw, inner);
            // SAFETY: AVX2 is enabled here (and detected, see the table); every inner
            // lane's 6x6 patch lies inside `plane` (the body sets an offset only then).
            unsafe { gather_patches6(plane, w, inner, d) };
            // The border lanes (left 0) get their inside part one float at a time.
            for clip in clips {
                clip.gather::<6, 36>(g, plane, d);
            }
            true
        };
        let transform = |d: &[Lanes; 36], v: &mut [f32], at: usize, plen: usize| {
            // SAFETY: AVX2 is enabled here (and detected, see the table).
            unsafe { transform_store6(d, v, at, plen) };
            true
        };
        body::input_block_hooks(g, x, tb, nb, v, gather, transform)
    }
    // SAFETY: reachable only through the AVX2 table, handed out after detecting AVX2
    // and FMA.
    unsafe { build(g, x, tb, nb, v) }
}

/// Prefetches the panel's patches two planes on: the block reads each plane once per
/// panel, so its rows are not in cache yet when their turn comes.
#[inline(always)]
fn prefetch_next_planes(plane: &[f32], w: usize, hw: usize, inner: &Origins) {
    let (first, last) = inner
        .iter()
        .filter(|&&i| i != EDGE)
        .fold((usize::MAX, 0), |(a, b), &i| (a.min(i), b.max(i)));
    if first > last {
        return;
    }
    let ahead = plane.as_ptr().wrapping_add(2 * hw);
    for r in 0..6 {
        let mut at = first + r * w;
        while at < last + r * w + 6 {
            // SAFETY: a prefetch never faults (the address is only a hint); SSE is
            // part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(at) as *const i8) };
            at += 16;
        }
    }
}

/// The F(4x4, 3x3) patches of a panel, lanes to vectors: for each patch row and group
/// of 8 lanes, each lane's row (6 floats, read as 8 where the plane has them) is one
/// vector, and an 8x8 transposition turns them into `d[r * 6 + c]` (0 in edge lanes).
///
/// # Safety
/// AVX2 available; for every lane with `inner[l] != EDGE`, `plane` holds the 6x6 patch
/// at `inner[l]` (rows `w` apart).
#[inline(always)]
unsafe fn gather_patches6(plane: &[f32], w: usize, inner: &Origins, d: &mut [Lanes; 36]) {
    // Lanes whose last patch row may not be read 8 wide take a 6-float masked load.
    let mut wide = [false; NR];
    for (wd, &i) in wide.iter_mut().zip(inner) {
        *wd = i != EDGE && i + 5 * w + L <= plane.len();
    }
    // SAFETY: plain loads touch the 8 floats at a patch row only where `wide` says
    // they lie in `plane`; masked loads touch its 6 floats (inside per the contract);
    // the stores go to `d`'s rows of NR >= 16 floats at lane offsets 0 and 8.
    unsafe {
        let six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
        for gl in 0..NR / L {
            for r in 0..6 {
                let mut rows = [_mm256_setzero_ps(); L];
                for (k, row) in rows.iter_mut().enumerate() {
                    let l = gl * L + k;
                    if inner[l] == EDGE {
                        continue;
                    }
                    let p = plane.as_ptr().add(inner[l] + r * w);
                    *row = if wide[l] {
                        _mm256_loadu_ps(p)
                    } else {
                        _mm256_maskload_ps(p, six)
                    };
                }
                let t = super::x86_64_dw_block_avx2::transpose8(rows);
                for (c, tc) in t.iter().take(6).enumerate() {
                    _mm256_storeu_ps(d[r * 6 + c].as_mut_ptr().add(gl * L), *tc);
                }
            }
        }
    }
}

/// `Bᵀ x` of F(4x4, 3x3) on six vectors (`x[k]` row `k`), as `winograd_body`'s
/// `input_1d` computes it: the same multiplications, additions and subtractions in the
/// same order (no fused multiply-add), so the same bits.
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn input_1d(x: [__m256; 6]) -> [__m256; 6] {
    // SAFETY: register-only intrinsics; AVX per the contract.
    unsafe {
        super::wino_input_1d!(
            x,
            _mm256_set1_ps,
            _mm256_mul_ps,
            _mm256_add_ps,
            _mm256_sub_ps
        )
    }
}

/// `Bᵀ d B` of one channel's panel (`d[r * 6 + c][lane]`, NR lanes) into the packed
/// panels: point `p = r * 6 + k`'s lanes at `v[p * plen + at..][..NR]`. First `t = Bᵀ d`
/// column by column (kept on the stack), then each row of `t B` goes straight to `v`,
/// in `winograd_body::input_transform`'s order.
///
/// # Safety
/// AVX available.
#[inline(always)]
// Row r of `t B` reads row r of every column of `t` (`t[c][r]`).
#[allow(clippy::needless_range_loop)]
unsafe fn transform_store6(d: &[Lanes; 36], v: &mut [f32], at: usize, plen: usize) {
    assert!(v.len() >= 35 * plen + at + NR, "short transformed block");
    let vp = v.as_mut_ptr();
    // SAFETY: loads of `d`'s rows (NR floats each, lane offsets 0 and 8 < NR), stores
    // into the stack `t` and into `v` at `p * plen + at + gl * L`, p < 36, inside the
    // length asserted above.
    unsafe {
        for gl in 0..NR / L {
            let ld = |i: usize| _mm256_loadu_ps(d[i].as_ptr().add(gl * L));
            // t[c][k]: column c of the patches combined over their rows.
            let mut t = [[_mm256_setzero_ps(); 6]; 6];
            for (c, tc) in t.iter_mut().enumerate() {
                *tc = input_1d([
                    ld(c),
                    ld(6 + c),
                    ld(12 + c),
                    ld(18 + c),
                    ld(24 + c),
                    ld(30 + c),
                ]);
            }
            // Row r of t B: the six columns' row r combined.
            for r in 0..6 {
                let o = input_1d(std::array::from_fn(|c| t[c][r]));
                for (k, ok) in o.into_iter().enumerate() {
                    _mm256_storeu_ps(vp.add((r * 6 + k) * plen + at + gl * L), ok);
                }
            }
        }
    }
}

/// The output transform of the tiles and channels `b` names (see
/// `winograd_body::output_block`).
pub(super) fn wino_output(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]) {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn build(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]) {
        let ow = g.ow;
        body::output_block_with(g, m, b, y, |o, dst, cuts, plane| {
            // SAFETY: AVX2 is enabled here (and detected, see the table); the stores go
            // through bounds-checked row slices of `plane`.
            unsafe { scatter_tiles4(o, dst, ow, plane) };
            // The cut tiles one float at a time.
            for cut in cuts {
                cut.scatter::<4>(o, ow, plane);
            }
            true
        })
    }
    // SAFETY: reachable only through the AVX2 table, handed out after detecting AVX2
    // and FMA.
    unsafe { build(g, m, b, y) }
}

/// The F(4x4, 3x3) output tiles of a panel, vectors to lanes: per tile row and group of
/// 8 lanes, a 4x4 transposition in each 128-bit half gives lane `j` its row of 4 (low
/// half) and lane `j + 4` its row (high half), stored at `dst[l] + r * ow`; lanes
/// without a whole kept tile are skipped.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn scatter_tiles4(o: &[Lanes; 16], dst: &TileDsts, ow: usize, plane: &mut [f32]) {
    // SAFETY: loads of `o`'s rows (NR >= 16 floats, lane offsets 0 and 8), register
    // work, and stores into 4-float slices of `plane` taken with bounds checks.
    unsafe {
        for gl in 0..NR / L {
            if dst[gl * L..(gl + 1) * L].iter().all(|&d| d == EDGE) {
                continue;
            }
            for r in 0..4 {
                let v = |c: usize| _mm256_loadu_ps(o[r * 4 + c].as_ptr().add(gl * L));
                let (v0, v1, v2, v3) = (v(0), v(1), v(2), v(3));
                let t0 = _mm256_unpacklo_ps(v0, v1);
                let t1 = _mm256_unpackhi_ps(v0, v1);
                let t2 = _mm256_unpacklo_ps(v2, v3);
                let t3 = _mm256_unpackhi_ps(v2, v3);
                let rows = [
                    _mm256_shuffle_ps::<0x44>(t0, t2),
                    _mm256_shuffle_ps::<0xee>(t0, t2),
                    _mm256_shuffle_ps::<0x44>(t1, t3),
                    _mm256_shuffle_ps::<0xee>(t1, t3),
                ];
                for (j, row) in rows.into_iter().enumerate() {
                    let (lo, hi) = (gl * L + j, gl * L + j + 4);
                    if dst[lo] != EDGE {
                        let at = dst[lo] + r * ow;
                        _mm_storeu_ps(plane[at..][..4].as_mut_ptr(), _mm256_castps256_ps128(row));
                    }
                    if dst[hi] != EDGE {
                        let at = dst[hi] + r * ow;
                        _mm_storeu_ps(
                            plane[at..][..4].as_mut_ptr(),
                            _mm256_extractf128_ps::<1>(row),
                        );
                    }
                }
            }
        }
    }
}

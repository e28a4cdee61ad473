//! The AVX-512 table's Winograd F(4x4, 3x3) input transform: the patches of a panel's
//! 16 tiles gathered a patch row at a time from whole rows of the plane.
//!
//! Side by side in one tile row, tile `l`'s patch row `r` starts four columns after tile
//! `l - 1`'s, so the six columns of sixteen patches are the elements `4 l + c` (`c < 6`)
//! of one 80-float window of that plane row: five loads (masked where the window leaves
//! the plane: the zeros of the padding) and a stride-4 de-interleave of them (eleven
//! shuffles, six for a window of 32 floats) give the six column vectors. A panel whose
//! tiles lie on two tile rows (the end of one, the start of the next) takes a window per
//! row and merges them by lanes, and so on up to four runs (planes of 4 tiles across:
//! 14x14); one with more (planes of fewer tiles across) keeps the transposing gather.
//! The gathered values are those of the generic loops and the transform is the same,
//! so the bits are the portable body's (`input_transform_tables_match_portable_bits`).

use super::NR;
use crate::kernels::conv::winograd_body::{self as body, PanelLanes};
use crate::kernels::conv::WinoGeom;
use std::arch::x86_64::*;

/// The input transform of tiles `[tb, tb + nb)` (see `winograd_body::input_block`).
pub(super) fn wino_input(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn build(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
        if g.tile != 4 {
            return body::input_block(g, x, tb, nb, v);
        }
        // SAFETY: AVX-512 is enabled here (and detected, see the table).
        unsafe { input_block4(g, x, tb, nb, v) }
    }
    // SAFETY: reachable only through the AVX-512 table, handed out after detecting the
    // features.
    unsafe { build(g, x, tb, nb, v) }
}

/// Most runs of side-by-side tiles a panel takes the window gather for. Zen 4,
/// `winograd_bench` input transform, 2 -> 4 runs: 256@14x14 0.084 -> 0.061 ms, 96@26x26
/// 0.10 -> 0.071-0.077, 128@28x28 (three runs a panel) no worse.
const MAX_RUNS: usize = 4;
const PF: usize = 2;

/// Lanes `l` of a panel whose patches start 4 columns apart on one tile row: window
/// element `e` of patch row `r` is plane offset `at[r] + e`, lane `l`'s column `c` is
/// element `4 l + c`, and the elements inside both the run's patches and the plane are
/// those of `masks[r]` (16 per load; all clear for a row outside the plane).
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    /// The run's lanes.
    lanes: u16,
    /// Plane offset of window element 0, per patch row (may lie before the plane).
    at: [isize; 6],
    /// Elements to load, per patch row and load of 16.
    masks: [[u16; 5]; 6],
    /// True when some element lies past the first 32 (the five-load de-interleave).
    wide: bool,
}

impl Run {
    /// The run of lanes `[l0, l1)` with patch origin `(iy0, ix0)` at lane `l0`.
    fn new(g: &WinoGeom, (l0, l1): (usize, usize), (iy0, ix0): (isize, isize)) -> Run {
        let xb = ix0 - 4 * l0 as isize;
        let e_lo = (4 * l0 as isize).max(-xb);
        let e_hi = ((4 * (l1 - 1) + 6) as isize).min(g.w as isize - xb);
        let mut run = Run {
            lanes: (((1u32 << l1) - (1u32 << l0)) & 0xffff) as u16,
            wide: 4 * (l1 - 1) + 6 > 32,
            ..Run::default()
        };
        for r in 0..6 {
            let y = iy0 + r as isize;
            run.at[r] = y * g.w as isize + xb;
            if y < 0 || y >= g.h as isize || e_lo >= e_hi {
                continue;
            }
            let bits = (1u128 << e_hi) - (1u128 << e_lo);
            for (j, m) in run.masks[r].iter_mut().enumerate() {
                *m = (bits >> (16 * j)) as u16;
            }
        }
        run
    }
}

/// The runs of panel `pl` (at most [`MAX_RUNS`]; `None` when it has more).
fn runs_of(g: &WinoGeom, pl: &PanelLanes) -> Option<([Run; MAX_RUNS], usize)> {
    let mut runs = [Run::default(); MAX_RUNS];
    let (mut n, mut l0) = (0, 0);
    while l0 < pl.lanes {
        let o = pl.org[l0];
        let mut l1 = l0 + 1;
        while l1 < pl.lanes && pl.org[l1] == (o.0, o.1 + 4 * (l1 - l0) as isize) {
            l1 += 1;
        }
        if n == MAX_RUNS {
            return None;
        }
        runs[n] = Run::new(g, (l0, l1), o);
        n += 1;
        l0 = l1;
    }
    Some((runs, n))
}

/// Transforms tiles `[tb, tb + nb)` of image `x` into the packed-B panels `v`, as
/// `winograd_body::input_block` with F(4x4, 3x3): per channel, each patch row gathered
/// and transformed (`d B`), then each column of that (`Bᵀ (d B)`) straight into the
/// panels.
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
// Row r of `t B` reads row r of every column of `t` (`t[c][r]`).
#[allow(clippy::needless_range_loop)]
unsafe fn input_block4(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
    let (ci, hw, w) = (g.c_in, g.h * g.w, g.w);
    let nbp = nb.div_ceil(NR) * NR;
    let plen = body::point_stride(ci * nbp);
    assert!(
        v.len() >= 35 * plen + body::packed_at(ci - 1, ci, nbp, nbp / NR - 1) + NR
            && x.len() >= ci * hw,
        "short block"
    );
    let vp = v.as_mut_ptr();
    let mut d = [[0.0f32; NR]; 36];
    let panels = nbp / NR;
    let mut g0 = 0;
    while g0 < panels {
        // A group of panels, channel by channel: each channel's patch rows of the group
        // lie side by side in its plane rows, so the plane is read in runs of the
        // group's width (panel by panel, channel after channel, the reads hopped
        // between planes every few hundred bytes and waited on memory: U-Net's 32->16
        // conv at 224x224 spent half its time on these loads).
        let gn = GROUP.min(panels - g0);
        let mut group: [Option<Panel>; GROUP] = [None; GROUP];
        for (k, slot) in group.iter_mut().take(gn).enumerate() {
            let gi = g0 + k;
            let pl = PanelLanes::new::<4, 6>(g, tb + gi * NR, NR.min(nb - gi * NR));
            let runs = runs_of(g, &pl);
            let whole = matches!(&runs, Some((r, 1)) if r[0].lanes == 0xffff);
            *slot = Some(Panel { pl, runs, whole });
        }
        for c in 0..ci {
            let plane = &x[c * hw..(c + 1) * hw];
            for (k, panel) in group.iter().take(gn).enumerate() {
                let Some(Panel { pl, runs, whole }) = panel else {
                    continue;
                };
                let gi = g0 + k;
                // SAFETY: AVX-512F per the contract; every run's loads are masked to the
                // plane's elements (`Run::new`), the transposing gather reads inside
                // patches and clips of `plane` (`PanelLanes`); the stores go to
                // `v[p * plen + at..][..NR]`, p < 36, inside `v` (asserted: `at` grows
                // with the channel and the panel).
                unsafe {
                    match runs {
                        Some((runs, n)) => {
                            prefetch_runs(plane, &runs[..*n], PF * hw);
                            for r in 0..6 {
                                let cols = gather_row(plane, &runs[..*n], *whole, r);
                                for (k, col) in cols.into_iter().enumerate() {
                                    _mm512_storeu_ps(d[r * 6 + k].as_mut_ptr(), col);
                                }
                            }
                        }
                        None => super::x86_64_avx512::gather_patches6(
                            plane,
                            w,
                            &pl.inner,
                            pl.border_clips(),
                            &mut d,
                        ),
                    }
                    let at = body::packed_at(c, ci, nbp, gi);
                    // t = Bᵀ d column by column, then each row of t B to the panels.
                    let mut t = [[_mm512_setzero_ps(); 6]; 6];
                    for (c, tc) in t.iter_mut().enumerate() {
                        let mut col = [_mm512_setzero_ps(); 6];
                        for (r, cr) in col.iter_mut().enumerate() {
                            *cr = _mm512_loadu_ps(d[r * 6 + c].as_ptr());
                        }
                        *tc = in1d(col);
                    }
                    for r in 0..6 {
                        let row: [__m512; 6] =
                            [t[0][r], t[1][r], t[2][r], t[3][r], t[4][r], t[5][r]];
                        for (k, o) in in1d(row).into_iter().enumerate() {
                            _mm512_storeu_ps(vp.add((r * 6 + k) * plen + at), o);
                        }
                    }
                }
            }
        }
        g0 += gn;
    }
}

/// Panels a group of the input transform takes channel by channel.
const GROUP: usize = 8;

/// One panel of a group: its lanes, its runs (`None`: the transposing gather) and
/// whether one run fills all its lanes.
#[derive(Clone, Copy)]
struct Panel {
    pl: PanelLanes,
    runs: Option<([Run; MAX_RUNS], usize)>,
    whole: bool,
}

/// `Bᵀ x` of F(4x4, 3x3) on six vectors (see `super::wino_input_1d`: the generic
/// body's operations in its order, so its bits).
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn in1d(x: [__m512; 6]) -> [__m512; 6] {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        super::wino_input_1d!(
            x,
            _mm512_set1_ps,
            _mm512_mul_ps,
            _mm512_add_ps,
            _mm512_sub_ps
        )
    }
}

/// Prefetches the runs' windows `ahead` floats on (the same panel two planes on: the
/// block reads each plane once, so its rows are not in cache yet).
#[inline(always)]
fn prefetch_runs(plane: &[f32], runs: &[Run], ahead: usize) {
    let base = plane.as_ptr().wrapping_add(ahead);
    for run in runs {
        for (&at, m) in run.at.iter().zip(&run.masks) {
            for (j, &mj) in m.iter().enumerate() {
                if mj != 0 {
                    let p =
                        base.wrapping_offset(at + 16 * j as isize + mj.trailing_zeros() as isize);
                    // SAFETY: a prefetch never faults; the address is only a hint.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) };
                }
            }
        }
    }
}

/// Patch row `r` of the panel's tiles, column by column (one lane per tile; 0 outside
/// the plane and in lanes of no run), from the runs' windows.
///
/// # Safety
/// AVX-512F available; the runs' masks select elements of `plane` only.
#[inline(always)]
unsafe fn gather_row(plane: &[f32], runs: &[Run], whole: bool, r: usize) -> [__m512; 6] {
    let p = plane.as_ptr();
    // SAFETY: each load is masked to elements the run's masks select, inside `plane`
    // (`Run::new`); masked-off elements are not read.
    unsafe {
        let mut cols = [_mm512_setzero_ps(); 6];
        for run in runs {
            // No closure for the loads: it would not inherit the features.
            let wp = p.wrapping_offset(run.at[r]);
            let mut q = [_mm512_setzero_ps(); 5];
            let used = if run.wide { 5 } else { 2 };
            for (j, (qj, &m)) in q.iter_mut().zip(&run.masks[r]).enumerate().take(used) {
                if m != 0 {
                    *qj = _mm512_maskz_loadu_ps(m, wp.wrapping_add(16 * j));
                }
            }
            let got = if run.wide {
                deinterleave5(q)
            } else {
                deinterleave2(q[0], q[1])
            };
            if whole {
                return got;
            }
            for (c, g) in cols.iter_mut().zip(got) {
                *c = _mm512_mask_mov_ps(*c, run.lanes, g);
            }
        }
        cols
    }
}

/// Lane `l` of column `c`: element `4 l + c` of an 80-float window (`q`, five vectors).
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn deinterleave5(q: [__m512; 5]) -> [__m512; 6] {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        // Phases 0 and 1 (2 and 3) of 32 floats: lanes 0-7 the first, 8-15 the second.
        let i01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
        let i23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        let a = _mm512_permutex2var_ps(q[0], i01, q[1]);
        let b = _mm512_permutex2var_ps(q[2], i01, q[3]);
        let c = _mm512_permutex2var_ps(q[0], i23, q[1]);
        let e = _mm512_permutex2var_ps(q[2], i23, q[3]);
        // Low halves of both for the even phase, high halves for the odd one.
        let c0 = _mm512_shuffle_f32x4::<0x44>(a, b);
        let c1 = _mm512_shuffle_f32x4::<0xee>(a, b);
        let c2 = _mm512_shuffle_f32x4::<0x44>(c, e);
        let c3 = _mm512_shuffle_f32x4::<0xee>(c, e);
        // Columns 4 and 5 are columns 0 and 1 one lane on, the last lane from q[4].
        let c4 = _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(
            _mm512_castps_si512(q[4]),
            _mm512_castps_si512(c0),
        ));
        let q4s = _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(
            _mm512_castps_si512(q[4]),
            _mm512_castps_si512(q[4]),
        ));
        let c5 = _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(
            _mm512_castps_si512(q4s),
            _mm512_castps_si512(c1),
        ));
        [c0, c1, c2, c3, c4, c5]
    }
}

/// [`deinterleave5`] for a window of 32 floats (lanes up to 6): one two-source permute
/// per column.
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn deinterleave2(q0: __m512, q1: __m512) -> [__m512; 6] {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        let base = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
        let m31 = _mm512_set1_epi32(31);
        let mut cols = [_mm512_setzero_ps(); 6];
        for (c, col) in cols.iter_mut().enumerate() {
            let idx = _mm512_and_si512(_mm512_add_epi32(base, _mm512_set1_epi32(c as i32)), m31);
            *col = _mm512_permutex2var_ps(q0, idx, q1);
        }
        cols
    }
}

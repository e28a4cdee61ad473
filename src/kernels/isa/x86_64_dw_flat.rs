//! AVX-512 depthwise conv on an aligned, zero-bordered plane (taken by the table's
//! `depthwise_block` for 3x3 and 5x5 convs of stride 1 or 2 and dilation 1, any padding,
//! whose output rows fill most of their 16-float multiple: [`FILL`]).
//!
//! Each channel's input rows are copied into a 64-byte aligned plane whose rows lie `RS`
//! floats apart (`RS` a multiple of 16), each row starting with the left pad's zeros and
//! ending with zeros, with zero rows above and below. At stride 1 output `(oy, ox)` is
//! grid position `oy * RS + ox` and its tap `(ky, kx)` sits at `+ ky * RS + kx`, so a
//! vector of sixteen outputs takes its taps of one kernel row from two aligned loads:
//! the first, and the first two shifted by one lane per tap (`valignd`). At stride 2 each
//! padded row is stored as its even columns then its odd ones (two phases of `RS / 2`),
//! so tap `kx` of output column `ox` is column `ox + kx / 2` of phase `kx % 2`: the same
//! two loads and shifts per phase. No transposes (cf. the channel-block kernel
//! `x86_64_dw_block`), no loads split across cache lines.

use super::x86_64_avx512_math::{alternate_lanes, first_lanes};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::dw_block::Act;
use std::arch::x86_64::*;

/// Output vectors computed together (independent FMA chains).
const VECS: usize = 4;
/// f32 lanes of one vector.
const L: usize = 16;
/// Least share of a plane row's lanes that hold input columns, in twentieths (14 of 16,
/// 28 of 32): with more lanes idle (a 20-wide plane in rows of 32) the channel-block
/// kernel is faster (a 5x5 conv of 480 channels at 20x20: 176 us there, 239 here).
const FILL: (usize, usize) = (17, 20);

/// Geometry of the plane of one channel.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlatGeom {
    /// Stride (1 or 2, both directions).
    st: usize,
    /// Floats of one phase of a stride-2 row (its even padded columns, then as many
    /// odd ones); the whole row at stride 1 (a multiple of 16).
    half: usize,
    /// Floats from one plane row to the next (`half * st`).
    rs: usize,
    /// Output vectors of one output row (`half / 16`).
    row_vecs: usize,
    /// Output vectors (`OH * row_vecs`).
    vecs: usize,
    /// Floats of one plane, the zero tail the last vectors' taps read included (a
    /// multiple of 16).
    len: usize,
}

impl FlatGeom {
    /// The geometry for `s`, or `None` when the flat kernel does not take it (a stride
    /// other than 1 or 2 in both directions, a dilation other than 1, a kernel other
    /// than 3x3 / 5x5, output rows that fill too little of their vectors: [`FILL`]).
    pub(super) fn new(s: &ConvShape) -> Option<FlatGeom> {
        let square = matches!((s.kh, s.kw), (3, 3) | (5, 5));
        let st = s.sw;
        let unit = s.sh == st && (st == 1 || st == 2) && s.dh == 1 && s.dw == 1;
        if !square || !unit || s.oh == 0 || s.ow == 0 {
            return None;
        }
        // Padded columns up to the last output's last tap, the data's end included;
        // at stride 2 each phase holds half of them (rounded up), and every output
        // column's taps lie at `ox + kx / 2` of one phase.
        let cols = (s.pw + s.w).max((s.ow - 1) * st + s.kw);
        let half = cols.div_ceil(st).max(s.ow + (s.kw - 1) / st).div_ceil(L) * L;
        if s.ow * FILL.1 < half * FILL.0 {
            return None;
        }
        let rs = half * st;
        let row_vecs = half / L;
        let vecs = s.oh * row_vecs;
        // The last group of VECS vectors (output row `oy_end`) reads two vectors of
        // each phase per tap row, down to kernel row kh - 1; the last input row's copy
        // writes whole vectors (up to 16 floats past its row).
        let oy_end = (vecs.div_ceil(VECS) * VECS - 1) / row_vecs;
        let reach = (oy_end * st + s.kh) * rs + 2 * L;
        let copy = (s.ph + s.h) * rs + 2 * L;
        let len = reach.max(copy).div_ceil(L) * L;
        Some(FlatGeom {
            st,
            half,
            rs,
            row_vecs,
            vecs,
            len,
        })
    }

    /// Scratch floats [`run`] needs: two planes, and room to align them.
    pub(super) fn scratch_len(&self) -> usize {
        2 * self.len + L
    }
}

/// Channels `c0..c0 + nc` of one image (`xb` `[C, H, W]`, `yb` `[C, OH, OW]`, `w`
/// `[C, KH * KW]`): the plane of each in `scratch`, then its output vectors,
/// accumulators starting at the channel's `bias` lane and finished by `act`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ available; `g` is `FlatGeom::new(s)`; `xb` holds `(c0 + nc) * H
/// * W` floats, `yb` `(c0 + nc) * OH * OW`, `w` `(c0 + nc) * KH * KW`, `scratch`
/// `g.scratch_len()`; `nc <= 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run(
    s: &ConvShape,
    g: &FlatGeom,
    w: &[f32],
    xb: &[f32],
    yb: &mut [f32],
    (c0, nc): (usize, usize),
    (bias, act): (&[f32; L], Act),
    scratch: &mut [f32],
) {
    let skip = scratch.as_ptr().align_offset(64).min(L);
    // Two planes: the next channel's rows are copied in while the current one is
    // computed, so that no load waits on the stores that just wrote its data.
    let planes = &mut scratch[skip..skip + 2 * g.len];
    // The pads stay zero: each channel writes the same data cells.
    planes.fill(0.0);
    let (hw, ohw, taps) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let pp = planes.as_mut_ptr();
    let fill = |l: usize| {
        // SAFETY: channel c0 + l < c0 + nc is inside `xb` (contract), plane l % 2
        // inside the two planes; the features are enabled here.
        unsafe {
            let src = xb.as_ptr().add((c0 + l) * hw);
            fill_plane(s, g, src, pp.add((l % 2) * g.len))
        }
    };
    fill(0);
    for (l, b) in bias.iter().enumerate().take(nc) {
        if l + 1 < nc {
            fill(l + 1);
        }
        let c = c0 + l;
        let wc = &w[c * taps..(c + 1) * taps];
        let out = &mut yb[c * ohw..(c + 1) * ohw];
        let init = _mm512_set1_ps(*b);
        // SAFETY: plane l % 2 holds g.len floats from a 64-byte boundary, every vector's
        // taps read below it (`FlatGeom::new`); `out` is the channel's output plane.
        unsafe {
            let plane = pp.add((l % 2) * g.len);
            if taps == 9 {
                channel::<3, 9>(s, g, wc, plane, out, (init, act));
            } else {
                channel::<5, 25>(s, g, wc, plane, out, (init, act));
            }
        }
    }
}

/// Copies the input plane at `src` (`H x W`) into the plane at `dst`: each row at its
/// padded place (stride 1), or split into its two phases (stride 2).
///
/// # Safety
/// AVX-512F available; `src` valid for `H * W` floats, `dst` for `g.len` (whose
/// `copy` bound covers what the last row's copy writes past it).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn fill_plane(s: &ConvShape, g: &FlatGeom, src: *const f32, dst: *mut f32) {
    // SAFETY: row iy is inside `src`; its plane row `(iy + ph) * rs ..`, and the up to
    // 16 floats a copy writes past it, are inside `dst` (contract).
    unsafe {
        let dst = dst.add(s.ph * g.rs);
        for iy in 0..s.h {
            let (from, to) = (src.add(iy * s.w), dst.add(iy * g.rs));
            if g.st == 1 {
                copy_row(from, to.add(s.pw), s.w);
            } else {
                split_row(from, to, s.pw, g.half, s.w);
            }
        }
    }
}

/// Copies `n` floats from `src` to `dst` sixteen at a time, the last vector's lanes
/// past `n` written as zeros (up to 15 floats past `dst + n`).
///
/// # Safety
/// AVX-512F available; `src` valid for `n` floats, `dst` for `n` rounded up to 16.
#[inline(always)]
unsafe fn copy_row(src: *const f32, dst: *mut f32, n: usize) {
    let mut i = 0;
    while i < n {
        let m = first_lanes(n - i);
        // SAFETY: the load reads lanes of `m` (below `n`), the store 16 floats inside
        // `dst` (contract).
        unsafe { _mm512_storeu_ps(dst.add(i), _mm512_maskz_loadu_ps(m, src.add(i))) };
        i += L;
    }
}

/// Copies the `n` floats of an input row at `src` into the two phases of a stride-2
/// plane row at `dst` (padded column `pw + i` is `src[i]`; even padded columns from
/// `dst`, odd ones from `dst + half`), 32 input floats at a time. Lanes past `n` are
/// written as zeros, up to 16 floats past each phase's data: the even phase is written
/// first, so what it spills into the odd phase is then overwritten, and what the odd
/// phase spills lands in the next row (copied after this one) or the zero border.
///
/// # Safety
/// AVX-512F available; `src` valid for `n` floats, `dst` for `2 * half + 16`.
#[inline(always)]
unsafe fn split_row(src: *const f32, dst: *mut f32, pw: usize, half: usize, n: usize) {
    // SAFETY: the loads read the lanes of their masks (below `n`), the stores 16 floats
    // inside `dst`'s `2 * half + 16` (contract); register-only intrinsics otherwise.
    unsafe {
        // Input column i lands in phase (pw + i) % 2 at (pw + i) / 2.
        let (first, second) = if pw.is_multiple_of(2) {
            (dst.add(pw / 2), dst.add(half + pw / 2))
        } else {
            (dst.add(half + pw / 2), dst.add(pw.div_ceil(2)))
        };
        // The even phase's stores first (`first` when pw is even, `second` otherwise).
        for phase in [pw.is_multiple_of(2), !pw.is_multiple_of(2)] {
            let mut i = 0;
            while i < n {
                let a = _mm512_maskz_loadu_ps(first_lanes(n - i), src.add(i));
                let b = _mm512_maskz_loadu_ps(
                    first_lanes((n - i).saturating_sub(L)),
                    src.add(i + L.min(n - i)),
                );
                if phase {
                    _mm512_storeu_ps(first.add(i / 2), alternate_lanes::<0>(a, b));
                } else {
                    _mm512_storeu_ps(second.add(i / 2), alternate_lanes::<1>(a, b));
                }
                i += 2 * L;
            }
        }
    }
}

/// The output vectors of one channel with a `K x K` kernel of `T` taps (`w`), the plane
/// at `pp`, into `out` (`OH * OW` floats), `VECS` at a time (those past the grid
/// computed and not stored).
///
/// # Safety
/// AVX-512F available; `pp` 64-byte aligned and valid for `g.len` floats, `w` holds `T`
/// taps.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn channel<const K: usize, const T: usize>(
    s: &ConvShape,
    g: &FlatGeom,
    w: &[f32],
    pp: *const f32,
    out: &mut [f32],
    (init, act): (__m512, Act),
) {
    let mut wv = [_mm512_setzero_ps(); T];
    for t in 0..T {
        wv[t] = _mm512_set1_ps(w[t]);
    }
    assert!(out.len() >= s.oh * s.ow, "flat depthwise: output plane");
    for v0 in (0..g.vecs).step_by(VECS) {
        // SAFETY: the VECS vectors from v0 read below g.len (`FlatGeom::new` counts whole
        // groups); each store writes the outputs of its row's columns, inside `out`.
        unsafe {
            let at: [*const f32; VECS] = std::array::from_fn(|v| {
                let (oy, j) = ((v0 + v) / g.row_vecs, (v0 + v) % g.row_vecs);
                pp.add(oy * g.st * g.rs + j * L)
            });
            let geom = (g.rs, g.half);
            let acc = if g.st == 1 {
                vectors::<K, T, VECS, 1>(&wv, geom, at, init, act)
            } else {
                vectors::<K, T, VECS, 2>(&wv, geom, at, init, act)
            };
            for (v, a) in acc.iter().enumerate().take(g.vecs - v0) {
                let (oy, col) = ((v0 + v) / g.row_vecs, (v0 + v) % g.row_vecs * L);
                if col < s.ow {
                    let p = out.as_mut_ptr().add(oy * s.ow + col);
                    _mm512_mask_storeu_ps(p, first_lanes(s.ow - col), *a);
                }
            }
        }
    }
}

/// `V` output vectors at stride `S` from `at` (each vector's first tap; plane rows
/// `rs` apart, at stride 2 the odd phase `half` after the even one): every tap in order
/// (kernel row by row; at stride 2 tap `kx` at `ox + kx / 2` of phase `kx % 2`), then
/// `act`. At stride 1 the vectors are consecutive, and each loaded vector serves two.
///
/// # Safety
/// AVX-512F available; every `at` 64-byte aligned, 32 floats readable from `at + ky *
/// rs` (and from `+ half` at stride 2) for every kernel row `ky`.
#[inline(always)]
unsafe fn vectors<const K: usize, const T: usize, const V: usize, const S: usize>(
    wv: &[__m512; T],
    (rs, half): (usize, usize),
    at: [*const f32; V],
    init: __m512,
    act: Act,
) -> [__m512; V] {
    // SAFETY: AVX-512F is available; every load is aligned and readable (the contract).
    unsafe {
        let mut acc = [init; V];
        for ky in 0..K {
            let mut next = _mm512_load_ps(at[0].add(ky * rs));
            for (v, a) in acc.iter_mut().enumerate() {
                let row = at[v].add(ky * rs);
                let e = if S == 1 {
                    (next, _mm512_load_ps(row.add(L)))
                } else {
                    (_mm512_load_ps(row), _mm512_load_ps(row.add(L)))
                };
                next = e.1;
                let o = if S == 1 {
                    e
                } else {
                    let odd = row.add(half);
                    (_mm512_load_ps(odd), _mm512_load_ps(odd.add(L)))
                };
                for kx in 0..K {
                    let ((lo, hi), k) = if S == 1 {
                        (e, kx)
                    } else if kx % 2 == 0 {
                        (e, kx / 2)
                    } else {
                        (o, kx / 2)
                    };
                    *a = _mm512_fmadd_ps(wv[ky * K + kx], shifted(lo, hi, k), *a);
                }
            }
        }
        act.apply16(&mut acc);
        acc
    }
}

/// Lanes `k..k + 16` of the 32 floats `lo, hi` (`k < 5`).
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn shifted(lo: __m512, hi: __m512, k: usize) -> __m512 {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        let (lo, hi) = (_mm512_castps_si512(lo), _mm512_castps_si512(hi));
        _mm512_castsi512_ps(match k {
            0 => lo,
            1 => _mm512_alignr_epi32::<1>(hi, lo),
            2 => _mm512_alignr_epi32::<2>(hi, lo),
            3 => _mm512_alignr_epi32::<3>(hi, lo),
            _ => _mm512_alignr_epi32::<4>(hi, lo),
        })
    }
}

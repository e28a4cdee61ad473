//! AVX-512 stride-1 depthwise conv on an aligned, zero-bordered plane (taken by the
//! table's `depthwise_block` for 3x3 and 5x5 convs of stride 1 and dilation 1, any
//! padding, on planes whose rows fill most of their 16-float multiple: [`FILL`]).
//!
//! Each channel's input rows are copied into a 64-byte aligned plane whose rows lie `RS`
//! floats apart (`RS` a multiple of 16), each row starting with the left pad's zeros and
//! ending with zeros up to `RS`, with zero rows above and below. Output `(oy, ox)` is then
//! grid position `oy * RS + ox` and its tap `(ky, kx)` sits at `+ ky * RS + kx`, so a
//! vector of sixteen outputs takes its taps of one kernel row from two aligned loads:
//! the first, and the first two shifted by one lane per tap (`valignd`). No transposes
//! (cf. the channel-block kernel `x86_64_dw_block`), no loads split across cache lines,
//! a third of a load per multiply-add.

use super::x86_64_avx512_math::first_lanes;
use super::x86_64_dw_block::Act;
use crate::kernels::body::conv::ConvShape;
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
    /// Floats from one plane row to the next (a multiple of 16).
    rs: usize,
    /// Vectors of one plane row (`rs / 16`).
    row_vecs: usize,
    /// Output vectors (`OH * row_vecs`).
    vecs: usize,
    /// Floats of one plane, the zero tail the last vectors' taps read included (a
    /// multiple of 16).
    len: usize,
}

impl FlatGeom {
    /// The geometry for `s`, or `None` when the flat kernel does not take it (a stride
    /// or dilation other than 1, a kernel other than 3x3 / 5x5, a narrow plane).
    pub(super) fn new(s: &ConvShape) -> Option<FlatGeom> {
        let square = matches!((s.kh, s.kw), (3, 3) | (5, 5));
        let unit = s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1;
        if !square || !unit || s.oh == 0 || s.ow == 0 {
            return None;
        }
        // Columns the last output's taps reach past the row (the right pad in use).
        let pr = (s.ow + s.kw - 1).saturating_sub(s.pw + s.w);
        let rs = (s.w + s.pw.max(pr)).max(s.ow).div_ceil(L) * L;
        if s.w * FILL.1 < rs * FILL.0 {
            return None;
        }
        let row_vecs = rs / L;
        let vecs = s.oh * row_vecs;
        // The last group of VECS vectors reads two vectors per tap row, down to kernel
        // row kh - 1; the last input row's copy writes whole vectors.
        let reach = vecs.div_ceil(VECS) * VECS * L + (s.kh - 1) * rs + L;
        let last_row = (s.ph + s.h - 1) * rs + s.pw + s.w.div_ceil(L) * L;
        let len = reach.max(last_row).max((s.ph + s.h) * rs).div_ceil(L) * L;
        Some(FlatGeom {
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
        // SAFETY: row iy of channel c0 + l is inside `xb` (contract); its plane row
        // `(iy + ph) * rs + pw ..`, rounded up to whole vectors, is inside plane l % 2
        // (`FlatGeom::new`: `last_row`); the features are enabled here.
        unsafe {
            let src = xb.as_ptr().add((c0 + l) * hw);
            let dst = pp.add((l % 2) * g.len + s.ph * g.rs + s.pw);
            for iy in 0..s.h {
                copy_row(src.add(iy * s.w), dst.add(iy * g.rs), s.w);
            }
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
            let acc = vectors::<K, T, VECS>(&wv, g.rs, pp.add(v0 * L), init, act);
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

/// `V` consecutive output vectors from grid position `at` (rows `rs` apart): every tap
/// in order (kernel row by row), then `act`.
///
/// # Safety
/// AVX-512F available; `at` 64-byte aligned, `16 * (V + 1)` floats readable from `at +
/// ky * rs` for every kernel row `ky`.
#[inline(always)]
unsafe fn vectors<const K: usize, const T: usize, const V: usize>(
    wv: &[__m512; T],
    rs: usize,
    at: *const f32,
    init: __m512,
    act: Act,
) -> [__m512; V] {
    // SAFETY: AVX-512F is available; every load is aligned and readable (the contract).
    unsafe {
        let mut acc = [init; V];
        for ky in 0..K {
            let row = at.add(ky * rs);
            let mut next = _mm512_load_ps(row);
            for (v, a) in acc.iter_mut().enumerate() {
                let (lo, hi) = (next, _mm512_load_ps(row.add((v + 1) * L)));
                next = hi;
                for kx in 0..K {
                    let x = shifted(lo, hi, kx);
                    *a = _mm512_fmadd_ps(wv[ky * K + kx], x, *a);
                }
            }
        }
        act.apply(&mut acc);
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

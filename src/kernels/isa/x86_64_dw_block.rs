//! AVX-512 depthwise conv across channels (table entry `depthwise_block`): 16 channels
//! per block, one channel per lane. The block's input planes are transposed 16x16 in
//! registers into a zero-bordered, channel-innermost copy (`[HP][WP][16]`), every tap of
//! every output pixel is then one full-width FMA (any width, stride, dilation), bias
//! plus ReLU / Clip / HardSwish are applied to the accumulators (one lane per channel),
//! and the output pixels are transposed back into the channel planes. Other epilogues
//! run on the finished planes. The shapes the aligned-plane kernel takes
//! (`x86_64_dw_flat::FlatGeom`) go there instead: nothing transposed.

use super::x86_64_avx512_math::{self as math, first_lanes};
use super::x86_64_dw_flat::{self as flat, FlatGeom};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::dw_block::{block_scratch_len, fused, padded, Act, BLOCK_LANES};
use crate::kernels::body::epilogue::Epilogue;
use std::arch::x86_64::*;

const L: usize = BLOCK_LANES;
/// Output pixels accumulated together (independent FMA chains).
const PIXELS: usize = 8;

impl Act {
    /// Applies the activation to every (16-lane) accumulator.
    ///
    /// # Safety
    /// AVX-512F available (inlined into the `#[target_feature]` kernels).
    #[inline(always)]
    pub(super) unsafe fn apply16(self, acc: &mut [__m512]) {
        // SAFETY: register-only intrinsics; AVX-512F per the contract.
        unsafe {
            match self {
                Act::None => {}
                Act::Clamp(lo, hi) => {
                    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
                    for a in acc.iter_mut() {
                        *a = _mm512_min_ps(_mm512_max_ps(*a, lo), hi);
                    }
                }
                Act::HardSwish => {
                    let (sixth, half) = (_mm512_set1_ps(1.0 / 6.0), _mm512_set1_ps(0.5));
                    let (zero, one) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0));
                    for a in acc.iter_mut() {
                        let g = _mm512_add_ps(_mm512_mul_ps(*a, sixth), half);
                        *a = _mm512_mul_ps(*a, _mm512_min_ps(_mm512_max_ps(g, zero), one));
                    }
                }
            }
        }
    }
}

/// Depthwise conv of channels `c0..c0 + nc` of one image with the epilogue `epi` (see
/// `KernelTable::depthwise_block`).
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_block(
    s: &ConvShape,
    w: &[f32],
    xb: &[f32],
    yb: &mut [f32],
    c0: usize,
    nc: usize,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    assert!((1..=L).contains(&nc), "depthwise block of {nc} channels");
    assert!(xb.len() >= (c0 + nc) * hw && yb.len() >= (c0 + nc) * ohw);
    assert!(w.len() >= (c0 + nc) * khw && scratch.len() >= block_scratch_len(s));
    let fuse = fused(epi, c0, nc);
    let (act, bias) = fuse.unwrap_or((Act::None, [0.0; L]));
    let post = (&bias, act);
    match FlatGeom::new(s).filter(|g| scratch.len() >= g.scratch_len()) {
        // 3x3 / 5x5 at stride 1 or 2 with well-filled rows: the aligned plane.
        // SAFETY: reachable only through the AVX-512 table (features detected); the
        // slices were checked above and the scratch against the flat geometry.
        Some(g) => unsafe { flat::run(s, &g, w, xb, yb, (c0, nc), post, scratch) },
        // SAFETY: as above; every access below stays inside the slices whose lengths
        // were checked above.
        None => unsafe { run(s, w, xb, yb, c0, nc, post, scratch) },
    }
    if fuse.is_none() {
        math::epilogue(epi, yb, ohw, c0, nc, 0, ohw);
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2 and FMA available; the slices as checked by
/// [`depthwise_block`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    s: &ConvShape,
    w: &[f32],
    xb: &[f32],
    yb: &mut [f32],
    c0: usize,
    nc: usize,
    (bias, act): (&[f32; L], Act),
    scratch: &mut [f32],
) {
    let (hp, wp) = padded(s);
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let (pad, rest) = scratch.split_at_mut(hp * wp * L);
    let (wt, out) = rest.split_at_mut(khw * L);
    wt[..khw * L].fill(0.0);
    for l in 0..nc {
        for (t, v) in w[(c0 + l) * khw..(c0 + l + 1) * khw].iter().enumerate() {
            wt[t * L + l] = *v;
        }
    }
    // Zero border: whole rows above and below, the pad columns of the input rows.
    pad[..s.ph * wp * L].fill(0.0);
    pad[(s.ph + s.h) * wp * L..].fill(0.0);
    for iy in 0..s.h {
        let row = &mut pad[(iy + s.ph) * wp * L..(iy + s.ph + 1) * wp * L];
        row[..s.pw * L].fill(0.0);
        row[(s.pw + s.w) * L..].fill(0.0);
    }
    // SAFETY: the caller checked `xb`, `yb`, `w` and `scratch`; pixels stay inside the
    // planes of `s` and the padded geometry `padded(s)`; loads and stores past a
    // plane's end are masked off, with the pointer of a lane-less access kept at the
    // block's start; the features are enabled on this function.
    unsafe {
        let xp = xb.as_ptr().add(c0 * hw);
        let dst = pad.as_mut_ptr();
        // Input planes as flat runs of 16 pixels: 16 channel runs in, 16 pixel vectors out,
        // each stored at its padded position.
        let mut p0 = 0;
        while p0 < hw {
            let n = L.min(hw - p0);
            let m = first_lanes(n);
            let mut r = [_mm512_setzero_ps(); L];
            for (l, v) in r.iter_mut().enumerate() {
                let (mask, l) = if l < nc { (m, l) } else { (0, 0) };
                *v = _mm512_maskz_loadu_ps(mask, xp.add(l * hw + p0));
            }
            let r = transpose(r);
            let (mut iy, mut ix) = (p0 / s.w, p0 % s.w);
            for (p, v) in r.iter().enumerate() {
                if p < n {
                    let at = ((iy + s.ph) * wp + s.pw + ix) * L;
                    _mm512_storeu_ps(dst.add(at), *v);
                    ix += 1;
                    if ix == s.w {
                        (iy, ix) = (iy + 1, 0);
                    }
                }
            }
            p0 += n;
        }
        // Output pixels, PIXELS at a time.
        let (pp, wtp, op) = (pad.as_ptr(), wt.as_ptr(), out.as_mut_ptr());
        let post = (_mm512_loadu_ps(bias.as_ptr()), act);
        for oy in 0..s.oh {
            let mut ox = 0;
            while ox < s.ow {
                let n = PIXELS.min(s.ow - ox);
                let at = (oy, ox);
                match n {
                    8 => pixels::<8>(s, wp, pp, wtp, op, at, post),
                    7 => pixels::<7>(s, wp, pp, wtp, op, at, post),
                    6 => pixels::<6>(s, wp, pp, wtp, op, at, post),
                    5 => pixels::<5>(s, wp, pp, wtp, op, at, post),
                    4 => pixels::<4>(s, wp, pp, wtp, op, at, post),
                    3 => pixels::<3>(s, wp, pp, wtp, op, at, post),
                    2 => pixels::<2>(s, wp, pp, wtp, op, at, post),
                    _ => pixels::<1>(s, wp, pp, wtp, op, at, post),
                }
                ox += n;
            }
        }
        // Back to planes: 16 pixel vectors in, 16 channel runs (the first nc) out.
        let yp = yb.as_mut_ptr().add(c0 * ohw);
        let mut p0 = 0;
        while p0 < ohw {
            let n = L.min(ohw - p0);
            let m = first_lanes(n);
            let mut r = [_mm512_setzero_ps(); L];
            for (p, v) in r.iter_mut().enumerate() {
                let (mask, p) = if p < n { (0xffff, p) } else { (0, 0) };
                *v = _mm512_maskz_loadu_ps(mask, op.add((p0 + p) * L));
            }
            let r = transpose(r);
            for (l, v) in r.iter().enumerate() {
                if l < nc {
                    _mm512_mask_storeu_ps(yp.add(l * ohw + p0), m, *v);
                }
            }
            p0 += n;
        }
    }
}

/// Output pixels `ox..ox + N` of row `oy` (`at`): every tap one FMA per pixel, then the
/// bias vector and the activation of `post`.
///
/// # Safety
/// AVX-512F and FMA available; `pad` holds the padded block of `s` (row length `wp`),
/// `wt` its taps, `out` its output pixels, and `ox + N <= s.ow`, `oy < s.oh`.
#[inline(always)]
unsafe fn pixels<const N: usize>(
    s: &ConvShape,
    wp: usize,
    pad: *const f32,
    wt: *const f32,
    out: *mut f32,
    (oy, ox): (usize, usize),
    (bias, act): (__m512, Act),
) {
    // SAFETY: AVX-512F is available and the offsets stay inside the buffers (the
    // function's contract).
    unsafe {
        let mut acc = [bias; N];
        if s.kw == 3 && s.sw == 1 && s.dw == 1 {
            // Three taps along a row: each input vector loaded once, used by up to three
            // output pixels.
            for ky in 0..s.kh {
                let col = pad.add(((oy * s.sh + ky * s.dh) * wp + ox) * L);
                let tap = wt.add(ky * 3 * L);
                let w = [0, 1, 2].map(|kx| _mm512_loadu_ps(tap.add(kx * L)));
                let mut x = [_mm512_setzero_ps(); PIXELS + 2];
                for (q, v) in x.iter_mut().enumerate().take(N + 2) {
                    *v = _mm512_loadu_ps(col.add(q * L));
                }
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(w[0], x[q], *a);
                    *a = _mm512_fmadd_ps(w[1], x[q + 1], *a);
                    *a = _mm512_fmadd_ps(w[2], x[q + 2], *a);
                }
            }
        } else {
            for ky in 0..s.kh {
                let row = pad.add((oy * s.sh + ky * s.dh) * wp * L);
                for kx in 0..s.kw {
                    let wv = _mm512_loadu_ps(wt.add((ky * s.kw + kx) * L));
                    let col = row.add((ox * s.sw + kx * s.dw) * L);
                    for (q, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(col.add(q * s.sw * L)), *a);
                    }
                }
            }
        }
        act.apply16(&mut acc);
        let dst = out.add((oy * s.ow + ox) * L);
        for (q, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(dst.add(q * L), *a);
        }
    }
}

/// 16x16 transpose in registers: lane `j` of row `i` becomes lane `i` of row `j`.
///
/// # Safety
/// AVX-512F available (inlined into the `#[target_feature]` kernels).
#[inline(always)]
pub(super) unsafe fn transpose(r: [__m512; L]) -> [__m512; L] {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        let mut t = [_mm512_setzero_ps(); L];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); L];
        for b in (0..L).step_by(4) {
            let (t0, t1) = (_mm512_castps_pd(t[b]), _mm512_castps_pd(t[b + 1]));
            let (t2, t3) = (_mm512_castps_pd(t[b + 2]), _mm512_castps_pd(t[b + 3]));
            u[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
            u[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
            u[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
            u[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
        }
        for b in [0, 8] {
            for j in 0..4 {
                t[b + j] = _mm512_shuffle_f32x4::<0x88>(u[b + j], u[b + 4 + j]);
                t[b + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(u[b + j], u[b + 4 + j]);
            }
        }
        for j in 0..8 {
            u[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
            u[8 + j] = _mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]);
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_swaps_rows_and_lanes() {
        if crate::kernels::isa::Isa::Avx512.table().isa != crate::kernels::isa::Isa::Avx512 {
            return;
        }
        let src: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let mut dst = vec![0.0f32; 256];
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
        unsafe fn go(src: &[f32], dst: &mut [f32]) {
            let mut r = [_mm512_setzero_ps(); L];
            for (i, v) in r.iter_mut().enumerate() {
                // SAFETY: src holds 256 floats; AVX-512F enabled here.
                *v = unsafe { _mm512_loadu_ps(src.as_ptr().add(i * L)) };
            }
            // SAFETY: AVX-512F enabled here.
            let r = unsafe { transpose(r) };
            for (i, v) in r.iter().enumerate() {
                // SAFETY: dst holds 256 floats.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(i * L), *v) };
            }
        }
        // SAFETY: AVX-512F detected above; both buffers hold 256 floats.
        unsafe { go(&src, &mut dst) };
        for i in 0..L {
            for j in 0..L {
                assert_eq!(dst[j * L + i], src[i * L + j], "({i}, {j})");
            }
        }
    }
}

//! AVX2+FMA depthwise conv across channels (table entry `depthwise_block` of the AVX2
//! table): 16 channels per block, two 8-lane vectors per pixel. As in the AVX-512 entry
//! (`x86_64_dw_block`), the block's input planes are transposed (8x8 in registers) into
//! a zero-bordered, channel-innermost copy (`[HP][WP][16]`), every tap of every output
//! pixel is one FMA per half (any width, stride, dilation), bias plus ReLU / Clip /
//! HardSwish are applied to the accumulators, and the output pixels are transposed back
//! into the channel planes; other epilogues run on the finished planes. Each output is
//! the bias plus its taps in `(ky, kx)` order, one fused chain, as the per-plane kernels
//! sum them.
//!
//! The entry is reachable only through the AVX2 table, which `super::x86_64_fma::table`
//! hands out only after detecting AVX2 and FMA.

use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::dw_block::{block_scratch_len, fused, padded, Act, BLOCK_LANES};
use crate::kernels::body::epilogue::Epilogue;
use std::arch::x86_64::*;

const L: usize = BLOCK_LANES;
/// Lanes of one vector (channels per half block).
const V: usize = 8;
/// Output pixels accumulated together per half (independent FMA chains).
const PIXELS: usize = 8;

impl Act {
    /// Applies the activation to every (8-lane) accumulator.
    ///
    /// # Safety
    /// AVX available (inlined into the `#[target_feature]` kernels).
    #[inline(always)]
    pub(super) unsafe fn apply8(self, acc: &mut [__m256]) {
        // SAFETY: register-only intrinsics; AVX per the contract.
        unsafe {
            match self {
                Act::None => {}
                Act::Clamp(lo, hi) => {
                    let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
                    for a in acc.iter_mut() {
                        *a = _mm256_min_ps(_mm256_max_ps(*a, lo), hi);
                    }
                }
                Act::HardSwish => {
                    let (sixth, half) = (_mm256_set1_ps(1.0 / 6.0), _mm256_set1_ps(0.5));
                    let (zero, one) = (_mm256_setzero_ps(), _mm256_set1_ps(1.0));
                    for a in acc.iter_mut() {
                        let g = _mm256_add_ps(_mm256_mul_ps(*a, sixth), half);
                        *a = _mm256_mul_ps(*a, _mm256_min_ps(_mm256_max_ps(g, zero), one));
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
    // SAFETY: reachable only through the AVX2 table (features detected); every access
    // in `run` stays inside the slices whose lengths were checked above.
    unsafe { run(s, w, xb, yb, c0, nc, post, scratch) };
    if fuse.is_none() {
        (super::Isa::Avx2Fma.table().epilogue)(epi, yb, ohw, c0, nc, 0, ohw);
    }
}

/// Mask of the first `n` lanes (`n <= 8`) for `maskload` / `maskstore`.
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn first_lanes(n: usize) -> __m256i {
    // SAFETY: register-only intrinsics; AVX per the contract.
    unsafe {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
    }
}

/// # Safety
/// AVX2 and FMA available; the slices as checked by [`depthwise_block`].
#[target_feature(enable = "avx2,fma")]
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
    // planes of `s` and the padded geometry `padded(s)`; loads and stores past a plane's
    // end are masked off, and channels past `nc` are neither read nor stored (their
    // lanes stay zero); the features are enabled on this function.
    unsafe {
        let xp = xb.as_ptr().add(c0 * hw);
        let dst = pad.as_mut_ptr();
        // Input planes as runs of 8 pixels: per half, 8 channel runs in (masked only for
        // a plane's last short run), 8 pixel vectors out, each stored at its padded
        // position.
        let mut p0 = 0;
        while p0 < hw {
            let n = V.min(hw - p0);
            let m = first_lanes(n);
            for h in 0..L / V {
                let mut r = [_mm256_setzero_ps(); V];
                for (l, v) in r.iter_mut().enumerate() {
                    let ch = h * V + l;
                    if ch < nc {
                        let src = xp.add(ch * hw + p0);
                        *v = if n == V {
                            _mm256_loadu_ps(src)
                        } else {
                            _mm256_maskload_ps(src, m)
                        };
                    }
                }
                let r = transpose8(r);
                let (mut iy, mut ix) = (p0 / s.w, p0 % s.w);
                for v in r.iter().take(n) {
                    let at = ((iy + s.ph) * wp + s.pw + ix) * L + h * V;
                    _mm256_storeu_ps(dst.add(at), *v);
                    ix += 1;
                    if ix == s.w {
                        (iy, ix) = (iy + 1, 0);
                    }
                }
            }
            p0 += n;
        }
        // Output pixels, PIXELS at a time, each half on its own.
        let (pp, wtp, op) = (pad.as_ptr(), wt.as_ptr(), out.as_mut_ptr());
        for h in 0..L / V {
            let post = (_mm256_loadu_ps(bias.as_ptr().add(h * V)), act);
            let (pp, wtp, op) = (pp.add(h * V), wtp.add(h * V), op.add(h * V));
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
        }
        // Back to planes: per half, 8 pixel vectors in, 8 channel runs (those below nc)
        // out.
        let yp = yb.as_mut_ptr().add(c0 * ohw);
        let mut p0 = 0;
        while p0 < ohw {
            let n = V.min(ohw - p0);
            let m = first_lanes(n);
            for h in 0..L / V {
                if h * V >= nc {
                    break;
                }
                let mut r = [_mm256_setzero_ps(); V];
                for (p, v) in r.iter_mut().enumerate().take(n) {
                    *v = _mm256_loadu_ps(op.add((p0 + p) * L + h * V));
                }
                let r = transpose8(r);
                for (l, v) in r.iter().enumerate() {
                    let ch = h * V + l;
                    if ch < nc {
                        // Full runs unmasked: masked stores are microcoded and slow on
                        // AMD cores (they took ~40 % of this kernel on Zen 3).
                        let dst = yp.add(ch * ohw + p0);
                        if n == V {
                            _mm256_storeu_ps(dst, *v);
                        } else {
                            _mm256_maskstore_ps(dst, m, *v);
                        }
                    }
                }
            }
            p0 += n;
        }
    }
}

/// Output pixels `ox..ox + N` of row `oy` (`at`) of one half block: every tap one FMA
/// per pixel, from the bias vector, then the activation of `post`.
///
/// # Safety
/// AVX and FMA available; `pad` points at the half's lanes of the padded block of `s`
/// (row length `wp`, pixels `L` floats apart), `wt` at its taps, `out` at its output
/// pixels, and `ox + N <= s.ow`, `oy < s.oh`.
#[inline(always)]
unsafe fn pixels<const N: usize>(
    s: &ConvShape,
    wp: usize,
    pad: *const f32,
    wt: *const f32,
    out: *mut f32,
    (oy, ox): (usize, usize),
    (bias, act): (__m256, Act),
) {
    // SAFETY: AVX and FMA are available and the offsets stay inside the buffers (the
    // function's contract).
    unsafe {
        let mut acc = [bias; N];
        for ky in 0..s.kh {
            let row = pad.add((oy * s.sh + ky * s.dh) * wp * L);
            for kx in 0..s.kw {
                let wv = _mm256_loadu_ps(wt.add((ky * s.kw + kx) * L));
                let col = row.add((ox * s.sw + kx * s.dw) * L);
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(col.add(q * s.sw * L)), *a);
                }
            }
        }
        act.apply8(&mut acc);
        let dst = out.add((oy * s.ow + ox) * L);
        for (q, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(dst.add(q * L), *a);
        }
    }
}

/// 8x8 transpose in registers: lane `j` of row `i` becomes lane `i` of row `j`.
///
/// # Safety
/// AVX available (inlined into the `#[target_feature]` kernels).
#[inline(always)]
pub(super) unsafe fn transpose8(r: [__m256; V]) -> [__m256; V] {
    // SAFETY: register-only intrinsics; AVX per the contract.
    unsafe {
        let mut t = [_mm256_setzero_ps(); V];
        for i in 0..4 {
            t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm256_setzero_ps(); V];
        for b in [0, 4] {
            u[b] = _mm256_shuffle_ps::<0x44>(t[b], t[b + 2]);
            u[b + 1] = _mm256_shuffle_ps::<0xee>(t[b], t[b + 2]);
            u[b + 2] = _mm256_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
            u[b + 3] = _mm256_shuffle_ps::<0xee>(t[b + 1], t[b + 3]);
        }
        let mut o = [_mm256_setzero_ps(); V];
        for j in 0..4 {
            o[j] = _mm256_permute2f128_ps::<0x20>(u[j], u[j + 4]);
            o[j + 4] = _mm256_permute2f128_ps::<0x31>(u[j], u[j + 4]);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose8_swaps_rows_and_lanes() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let src: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let mut dst = vec![0.0f32; 64];
        #[target_feature(enable = "avx2,fma")]
        unsafe fn go(src: &[f32], dst: &mut [f32]) {
            let mut r = [_mm256_setzero_ps(); V];
            for (i, v) in r.iter_mut().enumerate() {
                // SAFETY: src holds 64 floats; AVX enabled here.
                *v = unsafe { _mm256_loadu_ps(src.as_ptr().add(i * V)) };
            }
            // SAFETY: AVX enabled here.
            let r = unsafe { transpose8(r) };
            for (i, v) in r.iter().enumerate() {
                // SAFETY: dst holds 64 floats.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i * V), *v) };
            }
        }
        // SAFETY: AVX2 and FMA detected above; both buffers hold 64 floats.
        unsafe { go(&src, &mut dst) };
        for i in 0..V {
            for j in 0..V {
                assert_eq!(dst[j * V + i], src[i * V + j], "({i}, {j})");
            }
        }
    }
}

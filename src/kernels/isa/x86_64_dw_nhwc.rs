//! AVX2+FMA depthwise conv over channels-last images (table entry `depthwise_nhwc` of the
//! AVX2 and AVX-512 tables; see `kernels::body::dw_nhwc`). Per output row and 8-channel
//! vector, the columns whose taps all lie inside the row run 8 pixels at a time (eight
//! independent FMA chains, one tap vector load per eight FMAs; at stride 1 with 3 or 5
//! taps a row, 6 or 5 pixels whose row inputs are loaded once), border columns one pixel
//! at a time with their taps checked, four channel vectors together (four independent
//! chains: one vector alone waits on each FMA's latency; on Zen 3, MobileNetV2's 14x14
//! and 7x7 depthwise convs 48-50 -> 39-41 and 43-45 -> 34-37 us, the MobileNetV3 DBNet's
//! 5x5 ones at 20x20 -10 to -24 %); the channels past the last full vector go through
//! `body::dw_nhwc::pixel_fused`, whose `mul_add` lanes give the same bits as the vector
//! lanes.
//!
//! The entry is reachable only through the tables `super::x86_64_fma::table` and
//! `super::x86_64_avx512::table` hand out after detecting AVX2 and FMA.

use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::dw_nhwc::{assert_fits, inner_columns, pixel_fused, row_taps, Act};
use std::arch::x86_64::*;

/// Lanes of one vector.
const V: usize = 8;
/// Output pixels accumulated together (independent FMA chains).
const PIXELS: usize = 8;
/// Channel vectors a border pixel accumulates together (independent FMA chains).
const BORDER_VECS: usize = 4;

/// Output rows `r0..r1` of a channels-last depthwise conv (see `KernelTable::
/// depthwise_nhwc`).
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_nhwc(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    r0: usize,
    r1: usize,
) {
    assert_fits(s, taps, bias, x, y, (r0, r1));
    // SAFETY: reachable only through tables handed out after detecting AVX2 and FMA;
    // every access in `run` stays inside the slices `assert_fits` checked.
    unsafe { run(s, taps, bias, act, x, y, r0, r1) };
}

/// # Safety
/// AVX2 and FMA available; the slices as checked by `assert_fits`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    r0: usize,
    r1: usize,
) {
    let c = s.c_in;
    let full = c / V * V;
    let (lo, hi) = inner_columns(s);
    for r in r0..r1 {
        let (b, oy) = (r / s.oh, r % s.oh);
        // The channels past the last full vector, every column.
        if full < c {
            for ox in 0..s.ow {
                pixel_fused(s, taps, bias, act, x, (y, r0), (r, ox), (full, c));
            }
        }
        let (ky0, ky1) = row_taps(s, oy);
        // SAFETY: rows ky0..ky1 of output row oy and the columns of inner pixels
        // lo..hi lie inside image b (`row_taps`, `inner_columns`); channels v..v + 8 (a
        // border group's v..v + 8 * BORDER_VECS) <= full <= c; the output pixels lie
        // inside row r - r0 of `y` (checked to hold rows r0..r1); the features are
        // enabled on this function.
        unsafe {
            let xb = x.as_ptr().add(b * s.h * s.w * c);
            let yr = y.as_mut_ptr().add((r - r0) * s.ow * c);
            let at = |ox: usize, v: usize| Group {
                s,
                xb: xb.add(v),
                taps: taps.as_ptr().add(v),
                out: yr.add(ox * c + v),
                oy,
                ox,
                rows: (ky0, ky1),
            };
            let bv = |v: usize| _mm256_loadu_ps(bias.as_ptr().add(v));
            // Pixel groups outer, channel vectors inner: a group's input window
            // (rows x (8 * stride + reach) pixels x C) stays in L1 across its vectors.
            // Border pixels take BORDER_VECS channel vectors at a time (independent FMA
            // chains; one vector alone waits on each FMA's latency). They build their
            // groups themselves: with `at` used in a third loop (or as an always-inlined
            // method) the inner loops compiled slower on Zen 3 (56x56x144 212 -> 232-243
            // us, 14x14x576 55 -> 58-68).
            let border = |ox: usize| {
                let g = |v: usize| Group {
                    s,
                    xb: xb.add(v),
                    taps: taps.as_ptr().add(v),
                    out: yr.add(ox * c + v),
                    oy,
                    ox,
                    rows: (ky0, ky1),
                };
                let mut v = 0;
                while v + BORDER_VECS * V <= full {
                    let b: [__m256; BORDER_VECS] = std::array::from_fn(|j| bv(v + j * V));
                    g(v).border(b, act);
                    v += BORDER_VECS * V;
                }
                while v < full {
                    g(v).border([bv(v)], act);
                    v += V;
                }
            };
            for ox in 0..lo {
                border(ox);
            }
            let mut ox = lo;
            // 3 or 5 taps wide, stride 1 or 2: row inputs reused from registers, a few
            // pixels at a time (inputs, accumulators and a tap in 16 registers).
            let form = if s.dw == 1 { (s.kw, s.sw) } else { (0, 0) };
            let per = match form {
                (3, 1) => 6,
                (5, 1) => 5,
                (3, 2) => 4,
                _ => 0,
            };
            while per > 0 && ox + per <= hi {
                for v in (0..full).step_by(V) {
                    let g = at(ox, v);
                    match form {
                        (3, 1) => g.row_reuse::<6, 8, 3, 1>(bv(v), act),
                        (5, 1) => g.row_reuse::<5, 9, 5, 1>(bv(v), act),
                        _ => g.row_reuse::<4, 9, 3, 2>(bv(v), act),
                    }
                }
                ox += per;
            }
            while ox < hi {
                let n = PIXELS.min(hi - ox);
                for v in (0..full).step_by(V) {
                    let g = at(ox, v);
                    match n {
                        8 => g.pixels::<8>(bv(v), act),
                        7 => g.pixels::<7>(bv(v), act),
                        6 => g.pixels::<6>(bv(v), act),
                        5 => g.pixels::<5>(bv(v), act),
                        4 => g.pixels::<4>(bv(v), act),
                        3 => g.pixels::<3>(bv(v), act),
                        2 => g.pixels::<2>(bv(v), act),
                        _ => g.pixels::<1>(bv(v), act),
                    }
                }
                ox += n;
            }
            for ox in hi..s.ow {
                border(ox);
            }
        }
    }
}

/// Up to [`PIXELS`] inner output pixels of one row and one channel vector.
struct Group<'a> {
    s: &'a ConvShape,
    /// The image's first pixel at the vector's channel.
    xb: *const f32,
    /// The first tap at the vector's channel.
    taps: *const f32,
    /// The first output pixel at the vector's channel.
    out: *mut f32,
    oy: usize,
    ox: usize,
    /// In-bounds tap rows.
    rows: (usize, usize),
}

impl Group<'_> {
    /// Pixels `ox..ox + N` of a stride-1, undilated conv `K` taps wide: per tap row,
    /// the `M = N + K - 1` input vectors the pixels read are loaded once and each feeds
    /// its taps from a register (the loads, not the FMAs, bound [`Group::pixels`] at
    /// stride 1). Same sums in the same order as [`Group::pixels`].
    ///
    /// # Safety
    /// As [`Group::pixels`], and `s.sw == s.dw == 1`, `s.kw == K`.
    #[inline(always)]
    unsafe fn row_reuse<const N: usize, const M: usize, const K: usize, const S: usize>(
        &self,
        bias: __m256,
        act: Act,
    ) {
        debug_assert!(M == S * (N - 1) + K && self.s.sw == S && self.s.dw == 1 && self.s.kw == K);
        let s = self.s;
        let c = s.c_in;
        // SAFETY: the pixels' taps, columns ox - pw .. ox - pw + M, lie inside the row
        // (the contract); the channel vector inside each pixel.
        unsafe {
            let mut acc = [bias; N];
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let col = self.xb.add((iy * s.w + self.ox * S - s.pw) * c);
                let x: [__m256; M] = std::array::from_fn(|q| _mm256_loadu_ps(col.add(q * c)));
                for kx in 0..K {
                    let wv = _mm256_loadu_ps(self.taps.add((ky * K + kx) * c));
                    for (q, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(wv, x[q * S + kx], *a);
                    }
                }
            }
            act.apply8(&mut acc);
            for (q, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(self.out.add(q * c), *a);
            }
        }
    }

    /// Pixel `ox` alone, its taps inside the row only, for `W` consecutive channel
    /// vectors: bias, those taps one FMA each in `(ky, kx)` order, then the activation.
    ///
    /// # Safety
    /// AVX2 and FMA available; the rows as for [`Group::pixels`], channel vectors
    /// `0..W` from the group's channel inside the pixel.
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    unsafe fn border<const W: usize>(&self, bias: [__m256; W], act: Act) {
        let s = self.s;
        let c = s.c_in;
        // SAFETY: rows come from `row_taps` and columns are checked against the row
        // before each load; the W channel vectors lie inside the pixel.
        unsafe {
            let mut acc = bias;
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let row = self.xb.add(iy * s.w * c);
                for kx in 0..s.kw {
                    let ix = (self.ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                    if ix < 0 || ix >= s.w as isize {
                        continue;
                    }
                    let tp = self.taps.add((ky * s.kw + kx) * c);
                    let xp = row.add(ix as usize * c);
                    for (j, a) in acc.iter_mut().enumerate() {
                        let wv = _mm256_loadu_ps(tp.add(j * V));
                        *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(j * V)), *a);
                    }
                }
            }
            act.apply8(&mut acc);
            for (j, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(self.out.add(j * V), *a);
            }
        }
    }

    /// Pixels `ox..ox + N`: bias, every in-bounds tap one FMA in `(ky, kx)` order, then
    /// the activation.
    ///
    /// # Safety
    /// AVX2 and FMA available; the pixels inner columns of the image (see `run`).
    #[inline(always)]
    unsafe fn pixels<const N: usize>(&self, bias: __m256, act: Act) {
        let s = self.s;
        let c = s.c_in;
        // SAFETY: per the contract, every tap of these pixels lies inside the image and
        // the channel vector inside the pixel.
        unsafe {
            let mut acc = [bias; N];
            let step = s.sw * c;
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let row = self.xb.add(iy * s.w * c);
                for kx in 0..s.kw {
                    let wv = _mm256_loadu_ps(self.taps.add((ky * s.kw + kx) * c));
                    let ix = self.ox * s.sw + kx * s.dw - s.pw;
                    let col = row.add(ix * c);
                    for (q, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(col.add(q * step)), *a);
                    }
                }
            }
            act.apply8(&mut acc);
            for (q, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(self.out.add(q * c), *a);
            }
        }
    }
}

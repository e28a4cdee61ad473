//! AVX-512 int8 depthwise conv across channels (table entry `qdepthwise_block`), on exact
//! f32 sums (`kernels::quant::dw_exact`): 16 channels per block, one per lane. Each
//! input row of the block is loaded as u8 (16 pixels per channel), widened, converted
//! and transposed 16x16 in registers into a ring of channel-innermost rows bordered
//! with the input zero point; every tap of every output pixel is one full-width FMA
//! from the channels' folded bias; the accumulators are requantised in registers (one
//! multiplier per lane) and a band's output pixels transposed back and narrowed into the
//! u8 channel planes. Wide planes of 3x3 convs (`dw_exact::PlaneGeom`) run a channel at a
//! time instead ([`plane`]): 16 output columns per vector, nothing transposed. Gives the
//! bits of the integer path wherever `DwTaps::exact` holds for every channel of the
//! block, and runs nothing otherwise.

// Fixed-count index loops over arrays of vectors keep them in registers (iterator
// adapters over `__m512` arrays spill inside `#[target_feature]` functions).
#![allow(clippy::needless_range_loop)]

use super::x86_64_avx512_math::first_lanes;
use super::x86_64_dw_block::transpose;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::quant::body::{bounds, ROUND_MAGIC};
use crate::kernels::quant::conv::TIE_EPS;
use crate::kernels::quant::dw_exact::PLANE_ROWS;
use crate::kernels::quant::dw_exact::{
    self, BytePlaneGeom, DwGeom, DwTaps, NearTies, PlaneGeom, KH_MAX, LANES as L,
};
use crate::kernels::quant::x86_64_vnni::near_tie_lanes;
use crate::kernels::quant::Requant;
use std::arch::x86_64::*;

/// Output pixels accumulated together (independent FMA chains).
const PIXELS: usize = 8;

/// The requantisation, one lane per channel.
#[derive(Clone, Copy)]
struct Post {
    /// The folded i32 bias as f32 (the accumulators' start).
    bias: __m512,
    mult: __m512,
    /// `lo - y_zp`, `hi - y_zp`.
    minv: __m512,
    maxv: __m512,
    y_zp: __m512i,
}

/// The near-ties among the lanes of `v` (requantised, clamped, before rounding; `t = v
/// + ROUND_MAGIC`): within `TIE_EPS` of a rounding boundary.
///
/// # Safety
/// AVX-512F available.
#[inline(always)]
unsafe fn near_ties(v: __m512, t: __m512) -> u16 {
    // SAFETY: the function's contract.
    unsafe { near_tie_lanes(!0, v, t, _mm512_set1_ps(0.5 - TIE_EPS)) }
}

/// Table entry `qdepthwise_block`: the int8 depthwise conv of channels `c0..c0 + nc` of
/// one image `xb` (`[C, H, W]` u8, zero point `x_zp`; taps `w`) into `yb`
/// (`[C, OH*OW]` u8) requantised by `rq`. Returns false, writing nothing, where a
/// channel's sums might not be exact in f32, the geometry is not taken or `scratch` is
/// shorter than `dw_exact::scratch_len`. The near-ties go to `ties`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qdepthwise_block(
    s: &ConvShape,
    xb: &[u8],
    x_zp: u8,
    w: &DwTaps,
    rq: &Requant<'_>,
    yb: &mut [u8],
    c0: usize,
    nc: usize,
    scratch: &mut [f32],
    ties: &mut NearTies<'_>,
) -> bool {
    let Some(g) = DwGeom::new(s) else {
        return false;
    };
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    assert!(
        (1..=L).contains(&nc),
        "int8 depthwise block of {nc} channels"
    );
    assert!(xb.len() >= (c0 + nc) * hw && yb.len() >= (c0 + nc) * ohw);
    assert!(
        w.channels() >= c0 + nc && w.khw() == khw,
        "DwTaps of another conv"
    );
    let (taps, stride) = w.taps();
    assert!(taps.len() >= (khw - 1) * stride + c0 + L);
    assert!(rq.mult.len() >= c0 + nc && rq.bias.len() >= c0 + nc && rq.lo <= rq.hi);
    if scratch.len() < dw_exact::scratch_len(s) {
        return false;
    }
    if let Some(bg) = BytePlaneGeom::new(s) {
        let plane = bytemuck::cast_slice_mut(scratch);
        let (x, y) = ((xb, x_zp), (&mut *yb, c0, nc));
        if super::x86_64_qdw_bytes::qdepthwise_bytes(s, &bg, x, w, rq, y, plane, ties) {
            return true;
        }
    }
    let (mut bias, mut mult) = ([0.0f32; L], [0.0f32; L]);
    for l in 0..nc {
        let c = c0 + l;
        if !w.exact(c, rq.bias[c]) {
            return false;
        }
        bias[l] = rq.bias[c] as f32;
        mult[l] = rq.mult[c];
    }
    let (minv, maxv) = bounds(rq.lo, rq.hi, rq.y_zp);
    if let Some(pg) = PlaneGeom::new(s) {
        for l in 0..nc {
            let c = c0 + l;
            let mut wc = [0.0f32; 9];
            for (t, v) in wc.iter_mut().enumerate() {
                *v = taps[t * stride + c];
            }
            let post = (bias[l], mult[l], minv, maxv, rq.y_zp);
            let (x, y) = (&xb[c * hw..(c + 1) * hw], &mut yb[c * ohw..(c + 1) * ohw]);
            // SAFETY: as below; `x` and `y` are the channel's planes, `scratch` holds
            // `pg.scratch_len()` floats (checked above).
            unsafe { plane(s, &pg, (x, x_zp), &wc, post, (y, c * ohw), scratch, ties) };
        }
        return true;
    }
    // SAFETY: reachable only through the AVX-512 table (features detected); the slices
    // were checked above against the geometry `g` that `run` indexes by.
    unsafe {
        run(
            s,
            &g,
            (xb, x_zp),
            (&taps[c0..], stride),
            scratch,
            yb,
            (c0, nc),
            (&bias, &mult, minv, maxv, rq.y_zp),
            ties,
        )
    };
    true
}

/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2 and FMA available; the slices as checked by
/// [`qdepthwise_block`] (`g` is `DwGeom::new(s)`, `rest` holds the ring and the band).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    s: &ConvShape,
    g: &DwGeom,
    (xb, x_zp): (&[u8], u8),
    (taps, stride): (&[f32], usize),
    scratch: &mut [f32],
    yb: &mut [u8],
    (c0, nc): (usize, usize),
    (bias, mult, minv, maxv, y_zp): (&[f32; L], &[f32; L], f32, f32, i32),
    ties: &mut NearTies<'_>,
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    let row = g.wp * L;
    let (ring, band) = scratch.split_at_mut(g.slots * row);
    assert!(band.len() >= g.band * s.ow * L);
    // SAFETY: the caller checked `xb`, `yb` and `taps`; ring rows are `slots` rows of
    // `wp` pixels, and every padded column a tap reads lies below `wp` (`DwGeom::new`);
    // band pixels stay below `band * ow`; loads and stores past a plane's end are
    // masked off; the features are enabled on this function.
    unsafe {
        let post = Post {
            bias: _mm512_loadu_ps(bias.as_ptr()),
            mult: _mm512_loadu_ps(mult.as_ptr()),
            minv: _mm512_set1_ps(minv),
            maxv: _mm512_set1_ps(maxv),
            y_zp: _mm512_set1_epi32(y_zp),
        };
        let src = Src {
            x: xb.as_ptr().add(c0 * hw),
            zp: _mm512_set1_ps(f32::from(x_zp)),
            nc,
        };
        let wt = Taps {
            at: taps.as_ptr(),
            stride,
        };
        let (rp, bp) = (ring.as_mut_ptr(), band.as_mut_ptr());
        let yp = yb.as_mut_ptr().add(c0 * ohw);
        // Padded rows below `filled` are in the ring (slot: row % slots).
        let mut filled = 0;
        let mut oy0 = 0;
        while oy0 < s.oh {
            let oy1 = (oy0 + g.band).min(s.oh);
            let need = (oy1 - 1) * s.sh + (s.kh - 1) * s.dh + 1;
            fill(s, g, &src, rp, filled.max(oy0 * s.sh), need);
            filled = need;
            for oy in oy0..oy1 {
                let mut rows = [rp as *const f32; KH_MAX];
                for (ky, r) in rows.iter_mut().enumerate().take(s.kh) {
                    *r = rp.add(((oy * s.sh + ky * s.dh) % g.slots) * row);
                }
                let out = bp.add((oy - oy0) * s.ow * L);
                let mut at = Tied {
                    base: c0 * ohw + oy * s.ow,
                    step: ohw,
                    ties: &mut *ties,
                };
                let mut ox = 0;
                while ox < s.ow {
                    let n = PIXELS.min(s.ow - ox);
                    match n {
                        8 => pixels::<8>(s, &rows, wt, (out, ox), &post, &mut at),
                        7 => pixels::<7>(s, &rows, wt, (out, ox), &post, &mut at),
                        6 => pixels::<6>(s, &rows, wt, (out, ox), &post, &mut at),
                        5 => pixels::<5>(s, &rows, wt, (out, ox), &post, &mut at),
                        4 => pixels::<4>(s, &rows, wt, (out, ox), &post, &mut at),
                        3 => pixels::<3>(s, &rows, wt, (out, ox), &post, &mut at),
                        2 => pixels::<2>(s, &rows, wt, (out, ox), &post, &mut at),
                        _ => pixels::<1>(s, &rows, wt, (out, ox), &post, &mut at),
                    }
                    ox += n;
                }
            }
            store_band(yp, ohw, nc, bp, (oy0 * s.ow, oy1 * s.ow));
            oy0 = oy1;
        }
    }
}

/// Where an output row's near-ties go: lane `l` of output pixel `p` (from the row's
/// first) is output `base + p + l * step` of the block's planes.
struct Tied<'t, 'l> {
    base: usize,
    step: usize,
    ties: &'t mut NearTies<'l>,
}

impl Tied<'_, '_> {
    /// Records the near-tie lanes `masks[i]` of the vector of outputs that starts at
    /// `first + i * stride` (lane `l` one `self.step` further each).
    #[cold]
    #[inline(never)]
    fn push(&mut self, first: usize, stride: usize, masks: &[u16]) {
        for (i, &m) in masks.iter().enumerate() {
            if m != 0 {
                self.ties.push_lanes(first + i * stride, self.step, m);
            }
        }
    }
}

/// The block's input: channel planes from `x`, zero point `zp` (the padding), `nc`
/// channels.
struct Src {
    x: *const u8,
    zp: __m512,
    nc: usize,
}

/// The block's taps: tap `t` of the block's lanes at `at + t * stride`.
#[derive(Clone, Copy)]
struct Taps {
    at: *const f32,
    stride: usize,
}

/// Fills padded rows `a..b` into the ring `rp`: rows outside the plane and the pad
/// columns of the others hold the zero point, the pixels are converted and transposed
/// in.
///
/// # Safety
/// As [`run`]; `b - a <= g.slots`.
#[inline(always)]
unsafe fn fill(s: &ConvShape, g: &DwGeom, src: &Src, rp: *mut f32, a: usize, b: usize) {
    let row = g.wp * L;
    // SAFETY: slots hold `wp` pixel vectors each; see `run`.
    unsafe {
        let zero = src.zp;
        for pr in a..b {
            let dst = rp.add((pr % g.slots) * row);
            if pr < s.ph || pr >= s.ph + s.h {
                for i in 0..g.wp {
                    _mm512_storeu_ps(dst.add(i * L), zero);
                }
            } else {
                for i in (0..s.pw).chain(s.pw + s.w..g.wp) {
                    _mm512_storeu_ps(dst.add(i * L), zero);
                }
            }
        }
        let iy_a = a.max(s.ph) - s.ph;
        let iy_b = b.min(s.ph + s.h).saturating_sub(s.ph);
        if iy_a < iy_b {
            transpose_in(s, g, src, rp, (iy_a * s.w, iy_b * s.w));
        }
    }
}

/// Input pixels `p_a..p_b` (flat over the plane's rows) of the block's channels, as f32
/// `x - zp`, into their padded positions in the ring: 16 at a time, 16 channel runs in,
/// 16 pixel vectors out.
///
/// # Safety
/// As [`run`]; the rows of `p_a..p_b` are ring rows being filled.
#[inline(always)]
unsafe fn transpose_in(
    s: &ConvShape,
    g: &DwGeom,
    src: &Src,
    rp: *mut f32,
    (p_a, p_b): (usize, usize),
) {
    let hw = s.h * s.w;
    let row = g.wp * L;
    // SAFETY: the loads read `n` bytes inside channel planes `< nc`; the stores go to the
    // padded columns `pw..pw + w` of ring rows; see `run`.
    unsafe {
        let mut p0 = p_a;
        while p0 < p_b {
            let n = L.min(p_b - p0);
            let m = first_lanes(n);
            let mut r = [_mm512_setzero_ps(); L];
            for (l, v) in r.iter_mut().enumerate() {
                if l < src.nc {
                    let b = _mm_maskz_loadu_epi8(m, src.x.add(l * hw + p0) as *const i8);
                    *v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
                }
            }
            let r = transpose(r);
            let (mut iy, mut ix) = (p0 / s.w, p0 % s.w);
            let mut base = rp.add(((iy + s.ph) % g.slots) * row + s.pw * L);
            for (p, v) in r.iter().enumerate() {
                if p < n {
                    _mm512_storeu_ps(base.add(ix * L), *v);
                    ix += 1;
                    if ix == s.w && p + 1 < n {
                        (iy, ix) = (iy + 1, 0);
                        base = rp.add(((iy + s.ph) % g.slots) * row + s.pw * L);
                    }
                }
            }
            p0 += n;
        }
    }
}

/// Output pixels `ox..ox + N` of one output row (tap row `ky` at `rows[ky]`, padded
/// column 0): every tap one FMA per pixel from the bias, then requantised into i32 lanes
/// at `out + ox * L`, the near-ties recorded through `at`.
///
/// # Safety
/// AVX-512F and FMA available; `rows[..kh]` are ring rows, `wt` the block's taps, `out`
/// the output row in the band, `ox + N <= s.ow`.
#[inline(always)]
unsafe fn pixels<const N: usize>(
    s: &ConvShape,
    rows: &[*const f32; KH_MAX],
    wt: Taps,
    (out, ox): (*mut f32, usize),
    post: &Post,
    at: &mut Tied<'_, '_>,
) {
    // SAFETY: every padded column read lies below `wp` (`DwGeom::new`); the function's
    // contract.
    unsafe {
        let mut acc = [post.bias; N];
        if s.kw == 3 && s.dw == 1 && s.sw == 1 {
            // Three taps along a row: each input vector loaded once, used by up to three
            // output pixels.
            let mut x = [_mm512_setzero_ps(); PIXELS + 2];
            for ky in 0..s.kh {
                let col = rows[ky].add(ox * L);
                let tap = wt.at.add(ky * 3 * wt.stride);
                let (w0, w1, w2) = (
                    _mm512_loadu_ps(tap),
                    _mm512_loadu_ps(tap.add(wt.stride)),
                    _mm512_loadu_ps(tap.add(2 * wt.stride)),
                );
                for q in 0..N + 2 {
                    x[q] = _mm512_loadu_ps(col.add(q * L));
                }
                for q in 0..N {
                    acc[q] = _mm512_fmadd_ps(w0, x[q], acc[q]);
                    acc[q] = _mm512_fmadd_ps(w1, x[q + 1], acc[q]);
                    acc[q] = _mm512_fmadd_ps(w2, x[q + 2], acc[q]);
                }
            }
        } else if s.kw == 3 && s.dw == 1 && s.sw == 2 {
            // Stride 2: pixel q reads padded columns 2q..2q + 2 of the run.
            let mut x = [_mm512_setzero_ps(); 2 * PIXELS + 1];
            for ky in 0..s.kh {
                let col = rows[ky].add(2 * ox * L);
                let tap = wt.at.add(ky * 3 * wt.stride);
                let (w0, w1, w2) = (
                    _mm512_loadu_ps(tap),
                    _mm512_loadu_ps(tap.add(wt.stride)),
                    _mm512_loadu_ps(tap.add(2 * wt.stride)),
                );
                for q in 0..2 * N + 1 {
                    x[q] = _mm512_loadu_ps(col.add(q * L));
                }
                for q in 0..N {
                    acc[q] = _mm512_fmadd_ps(w0, x[2 * q], acc[q]);
                    acc[q] = _mm512_fmadd_ps(w1, x[2 * q + 1], acc[q]);
                    acc[q] = _mm512_fmadd_ps(w2, x[2 * q + 2], acc[q]);
                }
            }
        } else {
            for ky in 0..s.kh {
                let r = rows[ky];
                for kx in 0..s.kw {
                    let wv = _mm512_loadu_ps(wt.at.add((ky * s.kw + kx) * wt.stride));
                    let col = r.add((ox * s.sw + kx * s.dw) * L);
                    for q in 0..N {
                        let xv = _mm512_loadu_ps(col.add(q * s.sw * L));
                        acc[q] = _mm512_fmadd_ps(wv, xv, acc[q]);
                    }
                }
            }
        }
        // `clamp(rne(v * mult), lo - zp, hi - zp) + zp` as `body::clamp_round`, in the
        // low byte of each lane: the clamped value plus 1.5 * 2^23 is rounded half to even
        // to an integer, whose low bits the float's mantissa holds (`ROUND_MAGIC`).
        let magic = _mm512_set1_ps(ROUND_MAGIC);
        let dst = out.add(ox * L);
        let mut near = [0u16; N];
        for q in 0..N {
            let v = _mm512_mul_ps(acc[q], post.mult);
            let v = _mm512_min_ps(_mm512_max_ps(v, post.minv), post.maxv);
            let t = _mm512_add_ps(v, magic);
            near[q] = near_ties(v, t);
            let i = _mm512_add_epi32(_mm512_castps_si512(t), post.y_zp);
            _mm512_storeu_ps(dst.add(q * L), _mm512_castsi512_ps(i));
        }
        // After the stores, so that no vector is live across the (rare) call.
        if near.iter().fold(0, |a, &m| a | m) != 0 {
            at.push(at.base + ox, 1, &near);
        }
    }
}

/// Output pixels `p_a..p_b` of the band `bp` (pixel `p` at `(p - p_a) * L`, i32 lanes
/// whose low bytes are the outputs) into the first `nc` channel planes at `yp` (`ohw` bytes each).
///
/// # Safety
/// As [`run`].
#[inline(always)]
unsafe fn store_band(
    yp: *mut u8,
    ohw: usize,
    nc: usize,
    bp: *const f32,
    (p_a, p_b): (usize, usize),
) {
    // SAFETY: band pixels `< p_b - p_a`; the masked stores write `n` bytes inside the
    // channel planes `< nc`; see `run`.
    unsafe {
        let mut p0 = p_a;
        while p0 < p_b {
            let n = L.min(p_b - p0);
            let m = first_lanes(n);
            let mut r = [_mm512_setzero_ps(); L];
            for (p, v) in r.iter_mut().enumerate() {
                if p < n {
                    *v = _mm512_loadu_ps(bp.add((p0 - p_a + p) * L));
                }
            }
            let r = transpose(r);
            for (l, v) in r.iter().enumerate() {
                if l < nc {
                    let d = yp.add(l * ohw + p0) as *mut i8;
                    _mm512_mask_cvtepi32_storeu_epi8(d, m, _mm512_castps_si512(*v));
                }
            }
            p0 += n;
        }
    }
}

/// One channel of a wide plane (`dw_exact::PlaneGeom`): every input row converted once
/// into a ring of padded f32 rows (split into even and odd columns for stride 2), then
/// passes of up to `PLANE_ROWS` output rows, `L` output columns per vector, where every
/// loaded input vector serves each output row whose window holds it; the accumulators
/// start at the bias and are requantised and narrowed into the output row.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2 and FMA available; `g` is `PlaneGeom::new(s)`, `x` holds
/// `h * w` bytes, `y` `oh * ow` (output `y_at` of the block's planes), `scratch`
/// `g.scratch_len()` floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn plane(
    s: &ConvShape,
    g: &PlaneGeom,
    (x, x_zp): (&[u8], u8),
    wc: &[f32; 9],
    (bias, mult, minv, maxv, y_zp): (f32, f32, f32, f32, i32),
    (y, y_at): (&mut [u8], usize),
    scratch: &mut [f32],
    ties: &mut NearTies<'_>,
) {
    assert!(x.len() >= s.h * s.w && y.len() >= s.oh * s.ow);
    let scratch = &mut scratch[..g.scratch_len()];
    let (ring, zrow) = scratch.split_at_mut(g.slots * g.row_len);
    let zp = _mm512_set1_ps(f32::from(x_zp));
    let mut wv = [_mm512_setzero_ps(); 9];
    for t in 0..9 {
        wv[t] = _mm512_set1_ps(wc[t]);
    }
    let post = Post {
        bias: _mm512_set1_ps(bias),
        mult: _mm512_set1_ps(mult),
        minv: _mm512_set1_ps(minv),
        maxv: _mm512_set1_ps(maxv),
        y_zp: _mm512_set1_epi32(y_zp),
    };
    let st = s.sh;
    // SAFETY: ring slots, the zero-point row and `tmp` are `row_len` floats each
    // (`PlaneGeom::new` sizes them for every vector the passes read and the fills
    // write); input rows are read with masked loads inside `x`; output rows are written
    // with masked stores inside `y`.
    unsafe {
        let zr = zrow.as_mut_ptr();
        for i in 0..g.row_len / L {
            _mm512_storeu_ps(zr.add(i * L), zp);
        }
        let rp = ring.as_mut_ptr();
        let mut filled = 0;
        let mut oy = 0;
        while oy < s.oh {
            let r = super::x86_64_dw::pass_rows(s.oh - oy);
            let first_row = oy * st;
            let count = (r - 1) * st + 3;
            let mut rows = [zr as *const f32; (PLANE_ROWS - 1) * 2 + 3];
            for (i, p) in rows.iter_mut().enumerate().take(count) {
                let pr = first_row + i;
                if pr < s.ph || pr >= s.ph + s.h {
                    continue;
                }
                let slot = rp.add((pr % g.slots) * g.row_len);
                if pr >= filled {
                    let src = x.as_ptr().add((pr - s.ph) * s.w);
                    fill_row(s, g, src, x_zp, slot);
                }
                *p = slot;
            }
            filled = filled.max(first_row + count);
            let out = y.as_mut_ptr().add(oy * s.ow);
            let pass = PlanePass {
                rows: &rows,
                half: g.half,
                nv: g.nv,
                ow: s.ow,
                wv: &wv,
                post,
            };
            let mut at = Tied {
                base: y_at + oy * s.ow,
                step: 1,
                ties: &mut *ties,
            };
            match (st, r) {
                (1, 4) => pass.run::<1, 4>(out, &mut at),
                (1, 2) => pass.run::<1, 2>(out, &mut at),
                (1, _) => pass.run::<1, 1>(out, &mut at),
                (_, 4) => pass.run::<2, 4>(out, &mut at),
                (_, 2) => pass.run::<2, 2>(out, &mut at),
                (_, _) => pass.run::<2, 1>(out, &mut at),
            }
            oy += r;
        }
    }
}

/// Input row `src` (`w` bytes) as f32 into ring row `dst`: padded column `pw + i` holds
/// `src[i]`, every other column the zero point; stride 2 splits the padded row into its
/// even columns (first half) and odd ones (second half). Every ring vector is loaded as
/// bytes (the zero point in the lanes outside the row), converted and stored once.
///
/// # Safety
/// As [`plane`]; `dst` holds `g.row_len` floats, `src` `w` bytes, `pw <= 1`.
#[inline(always)]
unsafe fn fill_row(s: &ConvShape, g: &PlaneGeom, src: *const u8, zp: u8, dst: *mut f32) {
    let (w, pw) = (s.w, s.pw);
    // SAFETY: loads only touch the lanes of `src` inside the row, from a pointer inside
    // it; stores stay inside the `row_len` floats of `dst`.
    unsafe {
        if g.half == 0 {
            let zv = _mm_set1_epi8(zp as i8);
            for i in 0..g.row_len / L {
                // Padded columns 16i.. are input columns 16i - pw..
                let b = if i == 0 {
                    let b = _mm_maskz_loadu_epi8(first_lanes(w), src as *const i8);
                    let b = if pw == 1 { _mm_bslli_si128::<1>(b) } else { b };
                    let valid = first_lanes(pw + w) & !first_lanes(pw);
                    _mm_mask_blend_epi8(valid, zv, b)
                } else if i * L - pw < w {
                    let at = i * L - pw;
                    _mm_mask_loadu_epi8(zv, first_lanes(w - at), src.add(at) as *const i8)
                } else {
                    zv
                };
                let v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
                _mm512_storeu_ps(dst.add(i * L), v);
            }
        } else {
            let zv = _mm256_set1_epi8(zp as i8);
            // Per 128-bit lane: the even bytes, then the odd ones; then the lanes'
            // halves gathered (even: qwords 0, 2; odd: 1, 3).
            let split = _mm256_setr_epi8(
                0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1,
                3, 5, 7, 9, 11, 13, 15,
            );
            let first32 = |n: usize| -> __mmask32 {
                if n >= 32 {
                    u32::MAX
                } else {
                    (1u32 << n) - 1
                }
            };
            for i in 0..g.half / L {
                // Padded columns 32i.. are input columns 32i - pw..
                let b = if i == 0 {
                    let b = _mm256_maskz_loadu_epi8(first32(w), src as *const i8);
                    let b = if pw == 1 {
                        let lo = _mm256_permute2x128_si256::<0x08>(b, b);
                        _mm256_alignr_epi8::<15>(b, lo)
                    } else {
                        b
                    };
                    let valid = first32(pw + w) & !first32(pw);
                    _mm256_mask_blend_epi8(valid, zv, b)
                } else if 2 * i * L - pw < w {
                    let at = 2 * i * L - pw;
                    _mm256_mask_loadu_epi8(zv, first32(w - at), src.add(at) as *const i8)
                } else {
                    zv
                };
                let b = _mm256_permute4x64_epi64::<0xD8>(_mm256_shuffle_epi8(b, split));
                let (e, o) = (_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
                let e = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(e));
                let o = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(o));
                _mm512_storeu_ps(dst.add(i * L), e);
                _mm512_storeu_ps(dst.add(g.half + i * L), o);
            }
        }
    }
}

/// One pass of the per-plane kernel over up to `PLANE_ROWS` output rows.
struct PlanePass<'a> {
    /// Ring rows of the pass, from its first padded row.
    rows: &'a [*const f32; (PLANE_ROWS - 1) * 2 + 3],
    half: usize,
    nv: usize,
    ow: usize,
    /// The taps, broadcast (`ky * 3 + kx`).
    wv: &'a [__m512; 9],
    post: Post,
}

impl PlanePass<'_> {
    /// Output rows `0..R` from `out` (row stride `ow`).
    ///
    /// # Safety
    /// As [`plane`]; rows `0..(R - 1) * S + 3` of `self.rows` are ring rows (or the zero
    /// point row), `out` has `R` output rows; near-ties recorded through `at`.
    #[inline(always)]
    unsafe fn run<const S: usize, const R: usize>(&self, out: *mut u8, at: &mut Tied<'_, '_>) {
        // SAFETY: the function's contract; reads inside ring rows (`PlaneGeom::new`),
        // masked stores inside the output rows.
        unsafe {
            let magic = _mm512_set1_ps(ROUND_MAGIC);
            for v in 0..self.nv {
                let col = v * L;
                let mut acc = [self.post.bias; R];
                for i in 0..(R - 1) * S + 3 {
                    let rp = self.rows[i];
                    for kx in 0..3 {
                        let off = if S == 1 {
                            col + kx
                        } else {
                            (kx % 2) * self.half + col + kx / 2
                        };
                        let xv = _mm512_loadu_ps(rp.add(off));
                        for j in 0..R {
                            // Input row i is tap row i - j * S of output row j.
                            if i >= j * S && i - j * S < 3 {
                                acc[j] = _mm512_fmadd_ps(self.wv[(i - j * S) * 3 + kx], xv, acc[j]);
                            }
                        }
                    }
                }
                let m = first_lanes(self.ow - col);
                let mut near = [0u16; R];
                for j in 0..R {
                    let v = _mm512_mul_ps(acc[j], self.post.mult);
                    let v = _mm512_min_ps(_mm512_max_ps(v, self.post.minv), self.post.maxv);
                    let t = _mm512_add_ps(v, magic);
                    near[j] = near_ties(v, t) & m;
                    let q = _mm512_add_epi32(_mm512_castps_si512(t), self.post.y_zp);
                    let d = out.add(j * self.ow + col) as *mut i8;
                    _mm512_mask_cvtepi32_storeu_epi8(d, m, q);
                }
                if near.iter().fold(0, |a, &m| a | m) != 0 {
                    at.push(at.base + col, self.ow, &near);
                }
            }
        }
    }
}

//! AVX-512 VNNI int8 depthwise conv a channel at a time on its byte plane (tried first by
//! the AVX-512 table's `qdepthwise_block`; geometry `dw_exact::BytePlaneGeom`). The
//! channel's plane is copied into a plane of bytes bordered with the input zero point;
//! sixteen output columns are one vector of i32 lanes. For each kernel row, one 64-byte
//! load at the vector's first input column is spread so that every 128-bit lane holds
//! the bytes its four output columns read (`vpermd`), and a byte shuffle gathers each
//! lane's kernel-row taps into one quad (two for kernels wider than four); `vpdpbusd`
//! then multiplies the u8 quad by the channel's s8 taps and adds the four products to
//! the lane's i32 sum. Sums are exact (the integer path's), so any bias works; the taps
//! must be s8. Up to four output rows share each loaded input row. The sums are
//! requantised in registers as `body::requant_scalar` and their near-ties recorded for
//! the caller, as the f32 kernels of `x86_64_qdw_block` do.

// Fixed-count index loops over arrays of vectors keep them in registers.
#![allow(clippy::needless_range_loop)]

use super::x86_64_avx512_math::first_lanes;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::quant::body::{bounds, ROUND_MAGIC};
use crate::kernels::quant::conv::TIE_EPS;
use crate::kernels::quant::dw_exact::{BytePlaneGeom, DwTaps, NearTies, LANES as L};
use crate::kernels::quant::x86_64_vnni::{copy512, near_tie_lanes};
use crate::kernels::quant::Requant;
use std::arch::x86_64::*;

/// Output rows one pass computes at most.
const ROWS: usize = 4;

/// Kernel rows the taps array holds (the tallest of `dw_exact::BYTE_KH`).
const KH_CAP: usize = 5;

/// One channel's taps as quads: `[ky][q]` holds taps `4q..4q + 4` of kernel row `ky` as
/// four s8 bytes (zero past the kernel width).
type Quads = [[i32; 2]; KH_CAP];

/// The byte-plane kernel (geometry `g = BytePlaneGeom::new(s)`) on channels `c0..c0 +
/// nc` of one image, with the arguments of `qdepthwise_block` (after its checks) and its
/// scratch as bytes. Returns false, writing nothing, when a tap of one of the channels is
/// outside s8 or `plane` holds fewer than `g.scratch_bytes()` bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qdepthwise_bytes(
    s: &ConvShape,
    g: &BytePlaneGeom,
    (xb, x_zp): (&[u8], u8),
    w: &DwTaps,
    rq: &Requant<'_>,
    (yb, c0, nc): (&mut [u8], usize, usize),
    plane: &mut [u8],
    ties: &mut NearTies<'_>,
) -> bool {
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let (taps, stride) = w.taps();
    // The entry checked the operands' sizes; slicing below checks them again.
    debug_assert!(w.khw() == khw && w.channels() >= c0 + nc && rq.lo <= rq.hi);
    let s8 = |v: f32| (-128.0..=127.0).contains(&v);
    if !(c0..c0 + nc).all(|c| (0..khw).all(|t| s8(taps[t * stride + c]))) {
        return false;
    }
    if plane.len() < g.scratch_bytes() {
        return false;
    }
    let plane = &mut plane[..g.scratch_bytes()];
    // The borders stay the zero point for every channel: only the interior is copied.
    plane.fill(x_zp);
    let (minv, maxv) = bounds(rq.lo, rq.hi, rq.y_zp);
    for c in c0..c0 + nc {
        let mut quads: Quads = [[0; 2]; KH_CAP];
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let v = taps[(ky * s.kw + kx) * stride + c] as i8;
                quads[ky][kx / 4] |= i32::from(v as u8) << (8 * (kx % 4));
            }
        }
        let x = &xb[c * hw..(c + 1) * hw];
        let post = (rq.bias[c], rq.mult[c], minv, maxv, rq.y_zp);
        let y = &mut yb[c * ohw..(c + 1) * ohw];
        // SAFETY: reachable only through the AVX-512 table, handed out after detecting
        // AVX-512 F/BW/VL/DQ, VNNI, AVX2 and FMA; `plane` holds `g.scratch_bytes()` bytes,
        // `x` the channel's `h * w` input bytes, `y` its `oh * ow` outputs.
        unsafe { channel(s, g, x, plane, &quads, post, (y, c * ohw), ties) };
    }
    true
}

/// One channel: its interior rows into `plane`, then passes of up to [`ROWS`] output
/// rows.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, VNNI, AVX2 and FMA available; `g` is `BytePlaneGeom::new(s)`,
/// `plane` holds `g.scratch_bytes()` bytes whose borders are the zero point, `x` `h * w`
/// bytes, `y` `oh * ow`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn channel(
    s: &ConvShape,
    g: &BytePlaneGeom,
    x: &[u8],
    plane: &mut [u8],
    quads: &Quads,
    (bias, mult, minv, maxv, y_zp): (i32, f32, f32, f32, i32),
    (y, y_at): (&mut [u8], usize),
    ties: &mut NearTies<'_>,
) {
    assert!(x.len() >= s.h * s.w && y.len() >= s.oh * s.ow);
    assert!(plane.len() >= g.scratch_bytes() && s.pw + s.w <= g.row_len);
    // Interior rows: padded row `ph + iy`, columns `pw..pw + w`.
    for iy in 0..s.h.min(g.rows.saturating_sub(s.ph)) {
        let dst = &mut plane[(s.ph + iy) * g.row_len + s.pw..][..s.w];
        // SAFETY: `dst` and the source row are `w` bytes; masked 64-byte pieces stay
        // inside both.
        unsafe { copy512(x.as_ptr().add(iy * s.w), dst.as_mut_ptr(), s.w) };
    }
    // Lane `l` (four output columns) reads input dwords from `l * sw`.
    let spread = if s.sw == 1 {
        _mm512_setr_epi32(0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6)
    } else {
        _mm512_setr_epi32(0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9)
    };
    // Byte `4j + e` of a lane's quad `q`: tap `4q + e` of output column `j` of the lane,
    // at byte `j * sw + 4q + e` of the spread lane (below 16 for sw <= 2, kw <= 8).
    let mut gather = [_mm512_setzero_si512(); 2];
    for (q, gv) in gather.iter_mut().enumerate() {
        let mut b = [0u8; 16];
        for (i, v) in b.iter_mut().enumerate() {
            *v = ((i / 4) * s.sw + 4 * q + i % 4) as u8;
        }
        // SAFETY: `b` is 16 bytes.
        *gv = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(b.as_ptr() as *const __m128i) });
    }
    let mut wv = [[_mm512_setzero_si512(); 2]; KH_CAP];
    for ky in 0..s.kh {
        for q in 0..2 {
            wv[ky][q] = _mm512_set1_epi32(quads[ky][q]);
        }
    }
    let pass = Pass {
        plane: plane.as_ptr(),
        row_len: g.row_len,
        nv: g.nv,
        sw: s.sw,
        ow: s.ow,
        two_quads: s.kw > 4,
        spread,
        gather,
        wv,
        bias: _mm512_set1_epi32(bias),
        mult: _mm512_set1_ps(mult),
        minv: _mm512_set1_ps(minv),
        maxv: _mm512_set1_ps(maxv),
        y_zp: _mm512_set1_epi32(y_zp),
    };
    let mut oy = 0;
    while oy < s.oh {
        let r = match s.oh - oy {
            1 => 1,
            2 | 3 => 2,
            _ => ROWS,
        };
        let first = oy * s.sh;
        let out = &mut y[oy * s.ow..(oy + r) * s.ow];
        let base = y_at + oy * s.ow;
        // SAFETY: padded rows `first..first + (r - 1) * sh + kh` are inside the plane
        // (`rows = (oh - 1) * sh + kh`), each vector's 64-byte load inside its row
        // (`row_len >= (nv - 1) * 16 * sw + 64`); `out` holds `r` output rows.
        unsafe {
            match (s.sh, s.kh, r) {
                (1, 3, 4) => pass.run::<1, 3, 4>(first, out, base, ties),
                (1, 3, 2) => pass.run::<1, 3, 2>(first, out, base, ties),
                (1, 3, _) => pass.run::<1, 3, 1>(first, out, base, ties),
                (1, _, 4) => pass.run::<1, 5, 4>(first, out, base, ties),
                (1, _, 2) => pass.run::<1, 5, 2>(first, out, base, ties),
                (1, _, _) => pass.run::<1, 5, 1>(first, out, base, ties),
                (_, 3, 4) => pass.run::<2, 3, 4>(first, out, base, ties),
                (_, 3, 2) => pass.run::<2, 3, 2>(first, out, base, ties),
                (_, 3, _) => pass.run::<2, 3, 1>(first, out, base, ties),
                (_, _, 4) => pass.run::<2, 5, 4>(first, out, base, ties),
                (_, _, 2) => pass.run::<2, 5, 2>(first, out, base, ties),
                (_, _, _) => pass.run::<2, 5, 1>(first, out, base, ties),
            }
        }
        oy += r;
    }
}

/// The loop-invariant state of a channel's passes.
struct Pass {
    plane: *const u8,
    row_len: usize,
    nv: usize,
    sw: usize,
    ow: usize,
    /// The kernel is wider than four: two quads per kernel row.
    two_quads: bool,
    spread: __m512i,
    gather: [__m512i; 2],
    /// The taps, broadcast (`[ky][q]`).
    wv: [[__m512i; 2]; KH_CAP],
    bias: __m512i,
    mult: __m512,
    minv: __m512,
    maxv: __m512,
    y_zp: __m512i,
}

impl Pass {
    /// Output rows `0..R` of `out` (row stride `ow`) from padded rows `first..first + (R -
    /// 1) * S + KH`; output `base + i` of the block's planes is `out[i]` (for the ties).
    ///
    /// # Safety
    /// As [`channel`]; the rows exist in the plane and `out` holds `R` rows.
    #[inline(always)]
    unsafe fn run<const S: usize, const KH: usize, const R: usize>(
        &self,
        first: usize,
        out: &mut [u8],
        base: usize,
        ties: &mut NearTies<'_>,
    ) {
        debug_assert!(out.len() >= R * self.ow);
        // SAFETY: the function's contract: loads inside the plane's rows, masked stores
        // inside `out`.
        unsafe {
            let magic = _mm512_set1_ps(ROUND_MAGIC);
            let near_lim = _mm512_set1_ps(0.5 - TIE_EPS);
            for v in 0..self.nv {
                let col = v * L;
                let at = self.plane.add(first * self.row_len + col * self.sw);
                let mut acc = [self.bias; R];
                for i in 0..(R - 1) * S + KH {
                    let raw = _mm512_loadu_si512(at.add(i * self.row_len) as *const _);
                    let lanes = _mm512_permutexvar_epi32(self.spread, raw);
                    for q in 0..2 {
                        if q == 1 && !self.two_quads {
                            break;
                        }
                        let xq = _mm512_shuffle_epi8(lanes, self.gather[q]);
                        for j in 0..R {
                            // Input row i is kernel row i - j * S of output row j.
                            if i >= j * S && i - j * S < KH {
                                acc[j] = _mm512_dpbusd_epi32(acc[j], xq, self.wv[i - j * S][q]);
                            }
                        }
                    }
                }
                let m = first_lanes(self.ow - col);
                for j in 0..R {
                    let f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), self.mult);
                    let f = _mm512_min_ps(_mm512_max_ps(f, self.minv), self.maxv);
                    let t = _mm512_add_ps(f, magic);
                    let near = near_tie_lanes(m, f, t, near_lim);
                    let q = _mm512_add_epi32(_mm512_castps_si512(t), self.y_zp);
                    let b = _mm512_cvtepi32_epi8(q);
                    let o = out.as_mut_ptr().add(j * self.ow + col);
                    _mm_mask_storeu_epi8(o as *mut i8, m, b);
                    if near != 0 {
                        ties.push_lanes(base + j * self.ow + col, 1, near);
                    }
                }
            }
        }
    }
}

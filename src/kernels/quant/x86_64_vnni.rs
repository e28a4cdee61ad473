//! The AVX-512 VNNI int8 table (x86-64): K-quad GEMM / conv tiles on `vpdpbusd` (u8 x
//! s8, four products summed into each i32 lane, 64 per instruction, no saturation), and
//! the AVX2 entries for the rest (AVX-512 CPUs have AVX2). Weights are packed in K quads
//! ([`QLayout::Quads`]); every entry gives the same bits as the portable one.
//!
//! Every entry of [`TABLE`] is a safe wrapper around a `#[target_feature]` function; the
//! table is reachable only through the AVX-512 kernel table (`kernels::isa`), which is
//! handed out only after detecting AVX-512 F/BW/VL/DQ, VNNI, AVX2 and FMA, so each
//! wrapper runs only on a CPU that has them.

use super::body::{self, ROUND_MAGIC};
use super::table::{ConvOps, QLayout, QuadOffsets, QuantTable, TileDst, Q4MR, Q4NR};
use super::x86_64_avx2 as avx2;
use crate::kernels::body::pool::PoolShape;
use std::arch::x86_64::*;

/// The AVX-512 VNNI int8 table.
pub(crate) static TABLE: QuantTable = QuantTable {
    name: "avx512-vnni",
    layout: QLayout::Quads,
    tile: avx2::tile,
    quad_tile_su,
    quad_tile_su_u8,
    quad_tile_us,
    scatter_quads,
    requant_scalar,
    requant_cols: avx2::requant_cols,
    first_near_tie,
    requant_near_tie,
    ref_chains: avx2::ref_chains,
    ref_gather,
    quantize: avx2::quantize,
    dequantize: avx2::dequantize,
    qadd: avx2::qadd,
    dw_taps: avx2::dw_taps,
    lut,
    softmax_block,
    take_even,
    copy_rows,
    max_pool_plane,
};

fn ref_gather(x: &[u8], taps: &[u32], zp: u8, scale: f32, out: &mut [f32]) {
    assert_eq!(taps.len(), out.len(), "ref_gather: one tap per output");
    // SAFETY: AVX-512 F was detected with the table (see the module doc); the lengths
    // were just checked.
    unsafe { ref_gather512(x, taps, zp, scale, out) }
}

/// [`body::ref_gather`] sixteen taps at a time: one dword gather of the four bytes at
/// each tap (the low byte is the value), for the taps at least four bytes before the
/// end of `x`; a group with a later tap goes through the body, which checks them.
///
/// # Safety
/// AVX-512 F available; `out.len() == taps.len()`.
#[target_feature(enable = "avx512f")]
unsafe fn ref_gather512(x: &[u8], taps: &[u32], zp: u8, scale: f32, out: &mut [f32]) {
    // Taps below `lim` read four bytes inside `x`, and are positive as i32 indices.
    let lim = x.len().saturating_sub(3).min(i32::MAX as usize) as u32;
    let (limv, zpv, sv) = (
        _mm512_set1_epi32(lim as i32),
        _mm512_set1_epi32(i32::from(zp)),
        _mm512_set1_ps(scale),
    );
    let n = taps.len();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n = taps.len() = out.len().
        let t = unsafe { _mm512_loadu_si512(taps.as_ptr().add(i).cast()) };
        if _mm512_cmpge_epu32_mask(t, limv) != 0 {
            body::ref_gather(x, &taps[i..i + 16], zp, scale, &mut out[i..i + 16]);
        } else {
            // SAFETY: every tap is below `lim`: its four bytes lie inside `x`.
            let v = unsafe { _mm512_i32gather_epi32::<1>(t, x.as_ptr().cast()) };
            let v = _mm512_sub_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xff)), zpv);
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), sv);
            // SAFETY: as the load.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i), f) };
        }
        i += 16;
    }
    body::ref_gather(x, &taps[i..], zp, scale, &mut out[i..]);
}

fn lut(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    assert_eq!(x.len(), y.len(), "lut: lengths");
    if std::arch::is_x86_feature_detected!("avx512vbmi") {
        // SAFETY: AVX-512 F/BW were detected with the table (see the module doc), VBMI
        // just now; `x` and `y` have one length.
        unsafe { lut_vbmi(table, x, y) }
    } else {
        avx2::lut(table, x, y)
    }
}

/// `y[i] = table[x[i]]`, 64 bytes at a time: the table in four registers, two
/// two-register byte permutes (`vpermi2b`, the low seven bits of each index) and a
/// blend on the high bit.
///
/// # Safety
/// AVX-512 F/BW and VBMI available; `y.len() == x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lut_vbmi(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    let n = x.len();
    // SAFETY: the table is 256 bytes; the masks keep every access inside `x` and `y`
    // (`n` bytes each, caller).
    unsafe {
        let tp = table.as_ptr() as *const __m512i;
        let (t0, t1) = (_mm512_loadu_si512(tp), _mm512_loadu_si512(tp.add(1)));
        let (t2, t3) = (_mm512_loadu_si512(tp.add(2)), _mm512_loadu_si512(tp.add(3)));
        let mut i = 0;
        while i < n {
            let m = first_bytes(n - i);
            let v = _mm512_maskz_loadu_epi8(m, x.as_ptr().add(i) as *const i8);
            let lo = _mm512_permutex2var_epi8(t0, v, t1);
            let hi = _mm512_permutex2var_epi8(t2, v, t3);
            let r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
            _mm512_mask_storeu_epi8(y.as_mut_ptr().add(i) as *mut i8, m, r);
            i += 64;
        }
    }
}

fn softmax_block(p: &body::SoftmaxParams<'_>, x: &[u8], y: &mut [u8]) {
    let block = p.len * p.inner;
    assert!(x.len() >= block && y.len() >= block, "softmax: block size");
    let Some(exps) = p.exps else {
        return avx2::softmax_block(p, x, y);
    };
    assert!(exps.len() >= 256 * 256, "softmax: terms table");
    let groups = if p.len == 0 { 0 } else { p.inner / 16 };
    for g in 0..groups {
        // SAFETY: AVX-512 F/BW/VL/DQ were detected (see the module doc); lanes 16g..16g +
        // 16 of every row lie inside the block (checked), table indices below 65536.
        unsafe { softmax16(p, exps, x.as_ptr().add(16 * g), y.as_mut_ptr().add(16 * g)) };
    }
    body::softmax_lanes(p, x, y, 16 * groups);
}

/// Rows a lane group keeps its terms for (longer lanes gather them twice).
const SOFTMAX_KEEP: usize = 32;

/// Sixteen adjacent softmax lanes from `x` into `y` (rows `p.inner` apart), one per
/// vector lane, with the bits of `body::softmax_lane` on the terms table: the lanes'
/// largest bytes, each term gathered from its lane's table row, the sum in row order,
/// one division, then each output quantised as `body::quantize_to`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ available; `x` and `y` hold 16 bytes at each of `p.len` rows;
/// `exps` 65536 floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
// Index loops over the kept vectors keep them in registers.
#[allow(clippy::needless_range_loop)]
unsafe fn softmax16(p: &body::SoftmaxParams<'_>, exps: &[f32], x: *const u8, y: *mut u8) {
    let (len, inner) = (p.len, p.inner);
    // SAFETY: rows `0..len` of 16 bytes at `x` and `y` (caller); gather indices
    // `m * 256 + q < 65536` inside `exps`.
    unsafe {
        let row = |i: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(x.add(i * inner) as *const _));
        let mut m = _mm_loadu_si128(x as *const _);
        for i in 1..len {
            let v = _mm_loadu_si128(x.add(i * inner) as *const _);
            m = if p.qx.scale >= 0.0 {
                _mm_max_epu8(m, v)
            } else {
                _mm_min_epu8(m, v)
            };
        }
        let base = _mm512_slli_epi32::<8>(_mm512_cvtepu8_epi32(m));
        let term =
            |i: usize| _mm512_i32gather_ps::<4>(_mm512_add_epi32(base, row(i)), exps.as_ptr());
        let mut kept = [_mm512_setzero_ps(); SOFTMAX_KEEP];
        let mut sum = _mm512_setzero_ps();
        for i in 0..len {
            let e = term(i);
            if i < SOFTMAX_KEEP {
                kept[i] = e;
            }
            sum = _mm512_add_ps(sum, e);
        }
        let inv = _mm512_div_ps(_mm512_set1_ps(1.0), sum);
        let (scale, zp) = (
            _mm512_set1_ps(p.qy.scale),
            _mm512_set1_ps(f32::from(p.qy.zp)),
        );
        let (lo, hi) = (_mm512_setzero_ps(), _mm512_set1_ps(255.0));
        for i in 0..len {
            let e = if i < SOFTMAX_KEEP { kept[i] } else { term(i) };
            // `quantize_to`: rne(x / scale) + zp, NaN -> zp, clamped to [0, 255].
            let q = _mm512_div_ps(_mm512_mul_ps(e, inv), scale);
            let q = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(q);
            let q = _mm512_add_ps(q, zp);
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(q, q);
            let q = _mm512_mask_blend_ps(nan, q, zp);
            let q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
            let b = _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(q));
            _mm_storeu_si128(y.add(i * inner) as *mut _, b);
        }
    }
}

fn take_even(src: &[u8], dst: &mut [u8]) {
    let n = dst.len();
    assert!(src.len() + 1 >= 2 * n, "take_even: source too short");
    // SAFETY: AVX-512 F/BW were detected (see the module doc); the lengths were checked.
    unsafe { take_even512(src.as_ptr(), src.len(), dst.as_mut_ptr(), n) }
}

/// `dst[i] = src[2 * i]` for `i < n`, 32 at a time: per 128-bit lane the even bytes
/// gathered into its low half (`vpshufb`), then the lanes' low halves into the low 256
/// bits (`vpermq`).
///
/// # Safety
/// AVX-512 F/BW available; `src` readable for `len >= 2 * n - 1` bytes, `dst` writable
/// for `n`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn take_even512(src: *const u8, len: usize, dst: *mut u8, n: usize) {
    let evens = _mm512_broadcast_i32x4(_mm_setr_epi8(
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
    ));
    let lows = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    let mut i = 0;
    while i < n {
        let (from, count) = (2 * i, (n - i).min(32));
        let m_in = first_bytes(len - from);
        let m_out = first_bytes(count) as __mmask32;
        // SAFETY: the masks keep the load inside `src` and the store inside `dst`.
        unsafe {
            let v = _mm512_maskz_loadu_epi8(m_in, src.add(from) as *const i8);
            let v = _mm512_permutexvar_epi64(lows, _mm512_shuffle_epi8(v, evens));
            let e = _mm512_castsi512_si256(v);
            _mm256_mask_storeu_epi8(dst.add(i) as *mut i8, m_out, e);
        }
        i += 32;
    }
}

fn copy_rows(src: &[u8], ss: usize, dst: &mut [u8], ds: usize, (rows, len): (usize, usize)) {
    body::check_rows(src.len(), ss, dst.len(), ds, (rows, len));
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    for r in 0..rows {
        // SAFETY: AVX-512 F/BW were detected (see the module doc); row r's `len` bytes
        // lie inside both slices (checked).
        unsafe { copy512(sp.add(r * ss), dp.add(r * ds), len) };
    }
}

/// Copies `n` bytes in 64-byte pieces (the last one masked): no call, for the short
/// rows of output planes.
///
/// # Safety
/// AVX-512 F/BW available; `src` readable and `dst` writable for `n` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(crate) unsafe fn copy512(src: *const u8, dst: *mut u8, n: usize) {
    let mut i = 0;
    while i < n {
        let m = first_bytes(n - i);
        // SAFETY: the mask keeps both accesses inside the `n` bytes (caller).
        unsafe {
            let v = _mm512_maskz_loadu_epi8(m, src.add(i) as *const i8);
            _mm512_mask_storeu_epi8(dst.add(i) as *mut i8, m, v);
        }
        i += 64;
    }
}

/// Bytes of the rows the AVX-512 max pool keeps on the stack.
const POOL_ROW: usize = 4096;

fn max_pool_plane(s: &PoolShape, x: &[u8], y: &mut [u8]) {
    let pw = s.pads[1];
    let span = (s.ow.max(1) - 1) * s.sw + s.kw;
    let taken = (s.dh, s.dw) == (1, 1)
        && (s.sw == 1 || s.sw == 2)
        && s.kh > 0
        && s.kw > 0
        && (pw + s.w).max(span).max(2 * s.ow) + s.kw + 64 <= POOL_ROW;
    if !taken {
        return avx2::max_pool_plane(s, x, y);
    }
    assert!(
        x.len() >= s.h * s.w && y.len() >= s.oh * s.ow,
        "max pool: plane sizes"
    );
    // SAFETY: AVX-512 F/BW were detected (see the module doc); the plane sizes were
    // checked and `taken` bounds every row access by `POOL_ROW`.
    unsafe { max_pool512(s, x, y) }
}

/// The u8 max pool of one plane (dilation 1, stride 1 or 2 across): per output row, the
/// window's input rows reduced into one zero-bordered row (`vpmaxub`, 64 columns at a
/// time; padding, 0, never wins over a byte), then each output the maximum of `kw`
/// shifted loads of it (stride 2: the stride-1 maxima, then every other one,
/// [`take_even512`]). A window wholly in padding gives 0, as the body.
///
/// # Safety
/// AVX-512 F/BW available; `x` holds `h * w` bytes, `y` `oh * ow`; rows fit `POOL_ROW`
/// as [`max_pool_plane`] checks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn max_pool512(s: &PoolShape, x: &[u8], y: &mut [u8]) {
    let (pt, pw) = (s.pads[0], s.pads[1]);
    let (mut r, mut m) = ([0u8; POOL_ROW], [0u8; POOL_ROW]);
    // SAFETY: row loads and stores stay inside the `POOL_ROW` buffers (checked by the
    // caller) and, masked, inside `x`'s rows and `y`'s rows.
    unsafe {
        for oy in 0..s.oh {
            let iy0 = (oy * s.sh) as isize - pt as isize;
            let (a, b) = (
                iy0.max(0) as usize,
                ((iy0 + s.kh as isize).max(0) as usize).min(s.h),
            );
            let mut i = 0;
            while i < s.w {
                let mk = first_bytes(s.w - i);
                let mut v = _mm512_setzero_si512();
                for iy in a..b {
                    let p = x.as_ptr().add(iy * s.w + i) as *const i8;
                    v = _mm512_max_epu8(v, _mm512_maskz_loadu_epi8(mk, p));
                }
                _mm512_mask_storeu_epi8(r.as_mut_ptr().add(pw + i) as *mut i8, mk, v);
                i += 64;
            }
            let cols = if s.sw == 1 { s.ow } else { 2 * s.ow };
            let dst = if s.sw == 1 {
                y.as_mut_ptr().add(oy * s.ow)
            } else {
                m.as_mut_ptr()
            };
            let mut j = 0;
            while j < cols {
                let mut v = _mm512_loadu_si512(r.as_ptr().add(j) as *const _);
                for kx in 1..s.kw {
                    let u = _mm512_loadu_si512(r.as_ptr().add(j + kx) as *const _);
                    v = _mm512_max_epu8(v, u);
                }
                _mm512_mask_storeu_epi8(dst.add(j) as *mut i8, first_bytes(cols - j), v);
                j += 64;
            }
            if s.sw == 2 {
                take_even512(
                    m.as_ptr(),
                    2 * s.ow - 1,
                    y.as_mut_ptr().add(oy * s.ow),
                    s.ow,
                );
            }
        }
    }
}

/// Lanes `m` of `c` (requantised values clamped to the output range, before rounding;
/// `x = c + ROUND_MAGIC`, which rounds them) that lie more than `near` (`0.5 - eps` in
/// every lane) from the nearest integer: the near-ties. The one near-tie test of the
/// AVX-512 requantisations (tiles, depthwise kernels).
///
/// # Safety
/// AVX-512 F available.
#[inline(always)]
pub(crate) unsafe fn near_tie_lanes(m: __mmask16, c: __m512, x: __m512, near: __m512) -> __mmask16 {
    // SAFETY: register arithmetic only; the function's contract.
    unsafe {
        let d = _mm512_abs_ps(_mm512_sub_ps(
            c,
            _mm512_sub_ps(x, _mm512_set1_ps(ROUND_MAGIC)),
        ));
        _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(m, d, near)
    }
}

/// The mask of the first `n` lanes of a vector of sixteen (all of them from 16 on).
#[inline(always)]
fn first_words(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

/// The mask of the first `n` bytes of a 64-byte vector (all of them from 64 on).
#[inline(always)]
pub(crate) fn first_bytes(n: usize) -> __mmask64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

fn first_near_tie(acc: &[i32], bias: i32, mult: f32, bounds: (f32, f32), eps: f32) -> usize {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
    fn build(acc: &[i32], bias: i32, mult: f32, bounds: (f32, f32), eps: f32) -> usize {
        body::first_near_tie(acc, bias, mult, bounds, eps)
    }
    // SAFETY: AVX-512 F/BW/VL/DQ, VNNI, AVX2 and FMA were detected (see the module doc);
    // the generic body indexes safely.
    unsafe { build(acc, bias, mult, bounds, eps) }
}

fn requant_scalar(acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]) {
    let n = out.len().min(acc.len());
    // SAFETY: AVX-512 F/BW/VL/DQ were detected (see the module doc); `acc` and `out` hold
    // `n` elements each.
    unsafe {
        requant16::<false>(
            acc.as_ptr(),
            n,
            (bias, mult, zp),
            (lo, hi),
            0.0,
            out.as_mut_ptr(),
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn requant_near_tie(
    acc: &[i32],
    bias: i32,
    mult: f32,
    zp: i32,
    lo: u8,
    hi: u8,
    eps: f32,
    out: &mut [u8],
) -> usize {
    let n = out.len().min(acc.len());
    // SAFETY: as in `requant_scalar`.
    let first = unsafe {
        requant16::<true>(
            acc.as_ptr(),
            n,
            (bias, mult, zp),
            (lo, hi),
            eps,
            out.as_mut_ptr(),
        )
    };
    if first < n {
        first
    } else {
        // Like the portable pair: the scan covers all of `acc`.
        n + body::first_near_tie(&acc[n..], bias, mult, body::bounds(lo, hi, zp), eps)
    }
}

/// Requantises `n` sums at `acc` into `out` (`clamp(rne((acc + bias) * mult), lo - zp,
/// hi - zp) + zp`, [`body::clamp_round`]) 16 at a time; with `TIES`, returns the first
/// `j` whose value clamped to the bounds widened by one lies more than `0.5 - eps` from
/// the nearest integer ([`body::first_near_tie`]), else `n`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ must be available; `acc` valid for `n` reads, `out` for `n` writes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn requant16<const TIES: bool>(
    acc: *const i32,
    n: usize,
    (bias, mult, zp): (i32, f32, i32),
    (lo, hi): (u8, u8),
    eps: f32,
    out: *mut u8,
) -> usize {
    let (minv, maxv) = body::bounds(lo, hi, zp);
    let (vmin, vmax) = (_mm512_set1_ps(minv), _mm512_set1_ps(maxv));
    let (tmin, tmax) = (_mm512_set1_ps(minv - 1.0), _mm512_set1_ps(maxv + 1.0));
    let near = _mm512_set1_ps(0.5 - eps);
    let (vb, vm, vzp) = (
        _mm512_set1_epi32(bias),
        _mm512_set1_ps(mult),
        _mm512_set1_epi32(zp),
    );
    let mut first = n;
    let mut i = 0;
    while i < n {
        let lanes = first_words(n - i);
        // SAFETY: the mask covers `i..min(i + 16, n)`, within `acc` (caller).
        let a = unsafe { _mm512_maskz_loadu_epi32(lanes, acc.add(i)) };
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a, vb)), vm);
        // `maxps` first: a NaN gives the lower bound, as `body::clamp_round`.
        let c = _mm512_min_ps(_mm512_max_ps(v, vmin), vmax);
        let q = _mm512_add_epi32(_mm512_cvtps_epi32(c), vzp);
        // The register form of the narrowing: its store form is slow on Zen 4.
        let b = _mm512_cvtusepi32_epi8(q);
        // SAFETY: as the load, within `out` (caller).
        unsafe { _mm_mask_storeu_epi8(out.add(i) as *mut i8, lanes, b) };
        if TIES && first == n {
            let t = _mm512_min_ps(_mm512_max_ps(v, tmin), tmax);
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
            let d = _mm512_abs_ps(_mm512_sub_ps(t, r));
            let m = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(lanes, d, near);
            if m != 0 {
                first = i + m.trailing_zeros() as usize;
            }
        }
        i += 16;
    }
    first
}

/// Panics unless a quad tile of `kq` quads may read `a_len` A bytes, `b_len` B bytes
/// and write `Q4MR` rows of `Q4NR` i32 at stride `ldc` in `c_len`.
fn check_quad_tile(kq: usize, a_len: usize, b_len: usize, c_len: usize, ldc: usize) {
    assert!(a_len >= kq * Q4MR * 4 && b_len >= kq * Q4NR * 4);
    assert!(ldc >= Q4NR && c_len >= (Q4MR - 1) * ldc + Q4NR);
}

fn quad_tile_su(kq: usize, a: &[i8], b: &[u8], at: &QuadOffsets<'_>, c: &mut [i32], ldc: usize) {
    assert!(a.len() >= kq * Q4MR * 4 && ldc >= Q4NR && c.len() >= (Q4MR - 1) * ldc + Q4NR);
    at.check(kq, b.len());
    let (a, b, offs) = (a.as_ptr() as *const u8, b.as_ptr(), at.offsets().as_ptr());
    // SAFETY: AVX-512 F and VNNI were detected (see the module doc); the checks bound
    // every offset the tile touches (a: kq*32 bytes, each B quad inside b, c: Q4MR rows
    // of Q4NR).
    unsafe { tile_8x32::<false, true>(kq, (a, b, offs), c.as_mut_ptr(), ldc) }
}

fn quad_tile_us(kq: usize, a: &[u8], b: &[i8], c: &mut [i32], ldc: usize) {
    check_quad_tile(kq, a.len(), b.len(), c.len(), ldc);
    let (a, b) = (a.as_ptr(), b.as_ptr() as *const u8);
    // SAFETY: as in `quad_tile_su` (B quads packed: kq*128 bytes).
    unsafe { tile_8x32::<true, false>(kq, (a, b, std::ptr::null()), c.as_mut_ptr(), ldc) }
}

fn quad_tile_su_u8(kq: usize, (a, b, at): ConvOps<'_>, dst: TileDst<'_>) -> [u32; Q4MR] {
    assert!(a.len() >= kq * Q4MR * 4);
    at.check(kq, b.len());
    dst.check();
    let (a, b, offs) = (a.as_ptr() as *const u8, b.as_ptr(), at.offsets().as_ptr());
    // SAFETY: AVX-512 F/BW/VL/DQ and VNNI were detected (see the module doc); the
    // checks bound the operands (a: kq*32 bytes, each B quad inside b) and the rows.
    unsafe { tile_8x32_u8(kq, (a, b, offs), dst) }
}

/// [`sums_8x32`] (s8 A, u8 B) then [`requant_8x32`], the sums kept in registers.
///
/// # Safety
/// As both.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn tile_8x32_u8(kq: usize, ops: Operands, dst: TileDst<'_>) -> [u32; Q4MR] {
    // SAFETY: the function's contract.
    unsafe { requant_8x32(&sums_8x32::<false, true>(kq, ops), dst) }
}

/// Rows `dst.lo..dst.hi` of the tile `t` (two vectors a row) requantised into `dst`, as
/// [`requant16`] with each row's bias and multiplier; returns each row's near-tie mask
/// (on the value clamped to the output bounds).
///
/// # Safety
/// AVX-512 F/BW/VL/DQ available; `dst` checked ([`TileDst::check`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn requant_8x32(t: &[__m512i; 2 * Q4MR], dst: TileDst<'_>) -> [u32; Q4MR] {
    let post = dst.post;
    let (minv, maxv) = body::bounds(post.lo, post.hi, post.y_zp);
    let (vmin, vmax) = (_mm512_set1_ps(minv), _mm512_set1_ps(maxv));
    let (magic, near) = (_mm512_set1_ps(ROUND_MAGIC), _mm512_set1_ps(0.5 - dst.eps));
    let vzp = _mm512_set1_epi32(post.y_zp);
    let m = [
        first_words(dst.cols),
        first_words(dst.cols.saturating_sub(16)),
    ];
    let mut masks = [0u32; Q4MR];
    let out = dst.out.as_mut_ptr();
    for r in dst.lo..dst.hi {
        let (vb, vm) = (
            _mm512_set1_epi32(post.bias[r]),
            _mm512_set1_ps(post.mult[r]),
        );
        for h in 0..2 {
            let v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(t[2 * r + h], vb)), vm);
            // `maxps` first, as `body::clamp_round`.
            let c = _mm512_min_ps(_mm512_max_ps(v, vmin), vmax);
            let x = _mm512_add_ps(c, magic);
            // SAFETY: register arithmetic (AVX-512 F available).
            let tie = unsafe { near_tie_lanes(m[h], c, x, near) };
            masks[r] |= u32::from(tie) << (16 * h);
            // The low byte of `x`'s bits is `rne(c)`'s; `c + zp` lies in `[lo, hi]`.
            let q = _mm512_add_epi32(_mm512_castps_si512(x), vzp);
            // SAFETY: the mask keeps the store inside row r's `cols` bytes (checked).
            unsafe {
                let o = out.add((r - dst.lo) * dst.ldo + 16 * h) as *mut i8;
                _mm_mask_storeu_epi8(o, m[h], _mm512_cvtepi32_epi8(q));
            }
        }
    }
    masks
}

/// A tile's operands: A, B, and with B quads at offsets the `kq` offsets (else null).
type Operands = (*const u8, *const u8, *const u32);

/// The 8x32 quad tile: per K quad, the four A bytes of each row broadcast as one i32
/// against two zmm of B (32 columns of four bytes), one `vpdpbusd` per row and half:
/// 16 accumulators. `A_U8`: A holds the u8 operand (GEMM), else B does (conv). `AT`:
/// B quad `q` at byte `offs[q]` of B (else B quads packed, `q * 128`).
///
/// # Safety
/// AVX-512 F and VNNI must be available; `a` valid for `kq * 32` reads, every B quad for
/// 128 (`offs` for `kq` reads with `AT`), `c` for 8 rows of 32 i32 at stride `ldc`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn tile_8x32<const A_U8: bool, const AT: bool>(
    kq: usize,
    ops: Operands,
    c: *mut i32,
    ldc: usize,
) {
    // SAFETY: the function's contract.
    let t = unsafe { sums_8x32::<A_U8, AT>(kq, ops) };
    for r in 0..Q4MR {
        // SAFETY: row r < Q4MR of C, 32 i32, guaranteed by the caller.
        unsafe {
            let cp = c.add(r * ldc);
            _mm512_storeu_si512(cp as *mut _, t[2 * r]);
            _mm512_storeu_si512(cp.add(16) as *mut _, t[2 * r + 1]);
        }
    }
}

/// The sums of [`tile_8x32`], in registers (row `r`: vectors `2r`, `2r + 1`).
///
/// # Safety
/// As [`tile_8x32`] without `c`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn sums_8x32<const A_U8: bool, const AT: bool>(
    kq: usize,
    (a, b, offs): Operands,
) -> [__m512i; 2 * Q4MR] {
    let mut t = [_mm512_setzero_si512(); 2 * Q4MR];
    for q in 0..kq {
        // SAFETY: quad q < kq: 128 bytes of B (at its offset) and 32 of A are readable.
        let (b0, b1, ap) = unsafe {
            let bp = if AT {
                b.add(*offs.add(q) as usize)
            } else {
                b.add(q * Q4NR * 4)
            };
            (
                _mm512_loadu_si512(bp as *const _),
                _mm512_loadu_si512(bp.add(64) as *const _),
                a.add(q * Q4MR * 4) as *const i32,
            )
        };
        for r in 0..Q4MR {
            // SAFETY: r < Q4MR, inside quad q of the A panel (unaligned i32 read).
            let av = _mm512_set1_epi32(unsafe { ap.add(r).read_unaligned() });
            if A_U8 {
                t[2 * r] = _mm512_dpbusd_epi32(t[2 * r], av, b0);
                t[2 * r + 1] = _mm512_dpbusd_epi32(t[2 * r + 1], av, b1);
            } else {
                t[2 * r] = _mm512_dpbusd_epi32(t[2 * r], b0, av);
                t[2 * r + 1] = _mm512_dpbusd_epi32(t[2 * r + 1], b1, av);
            }
        }
    }
    t
}

fn scatter_quads(k: usize, p: usize, src: &[&[u8]], out: &mut [u8]) {
    let [r0, r1, r2, r3] = src else {
        return body::scatter_quads(k, p, src, out);
    };
    let n = r0.len();
    assert!(p.is_multiple_of(4) && p < k && [r1, r2, r3].iter().all(|r| r.len() == n));
    let panel = k.div_ceil(4) * Q4NR * 4;
    let off = (p / 4) * Q4NR * 4;
    // Column j's quad lies at `off + 4 * (j % 32)` of panel `j / 32`.
    let end = |j: usize| (j / Q4NR) * panel + off + 4 * (j % Q4NR) + 4;
    assert!(
        n == 0 || out.len() >= end(n - 1),
        "scatter_quads: out too short"
    );
    let rows = [r0.as_ptr(), r1.as_ptr(), r2.as_ptr(), r3.as_ptr()];
    for c in 0..n.div_ceil(64) {
        let m = (n - c * 64).min(64);
        // SAFETY: AVX-512 F/BW was detected (see the module doc); columns 64c..64c+m of
        // every row are readable (64c + m <= n) and the assert bounds both panels'
        // quads of those columns.
        unsafe {
            interleave64(
                rows,
                (c * 64, m),
                out.as_mut_ptr().add(2 * c * panel + off),
                panel,
            )
        };
    }
}

/// Columns `j..j + m` (`m <= 64`) of four rows interleaved into quads: columns 0-31 to
/// the 128 bytes at `dst`, columns 32-63 to those at `dst + panel`, nothing past column
/// `m` read or written. Byte and word unpacks interleave inside each 128-bit lane
/// (output `o_i` holds columns `16L + 4i..16L + 4i + 4` in lane `L`); two rounds of
/// lane shuffles put the columns in order.
///
/// # Safety
/// AVX-512 F/BW must be available; `rows[r]` readable at `j..j + m`, `dst` writable for
/// the quads of columns `0..min(m, 32)` and `dst + panel` for those of `32..m`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn interleave64(rows: [*const u8; 4], (j, m): (usize, usize), dst: *mut u8, panel: usize) {
    let cols: u64 = if m >= 64 { !0 } else { (1u64 << m) - 1 };
    // SAFETY: m bytes of each row from j are readable (caller); the mask reads no more.
    let (x0, x1, x2, x3) = unsafe {
        (
            _mm512_maskz_loadu_epi8(cols, rows[0].add(j) as *const _),
            _mm512_maskz_loadu_epi8(cols, rows[1].add(j) as *const _),
            _mm512_maskz_loadu_epi8(cols, rows[2].add(j) as *const _),
            _mm512_maskz_loadu_epi8(cols, rows[3].add(j) as *const _),
        )
    };
    let (lo01, hi01) = (_mm512_unpacklo_epi8(x0, x1), _mm512_unpackhi_epi8(x0, x1));
    let (lo23, hi23) = (_mm512_unpacklo_epi8(x2, x3), _mm512_unpackhi_epi8(x2, x3));
    let o0 = _mm512_unpacklo_epi16(lo01, lo23);
    let o1 = _mm512_unpackhi_epi16(lo01, lo23);
    let o2 = _mm512_unpacklo_epi16(hi01, hi23);
    let o3 = _mm512_unpackhi_epi16(hi01, hi23);
    // t0 = [o0.L0, o0.L1, o1.L0, o1.L1], t1 = the same of o2, o3; t2, t3 lanes 2 and 3.
    let t0 = _mm512_shuffle_i32x4::<0x44>(o0, o1);
    let t1 = _mm512_shuffle_i32x4::<0x44>(o2, o3);
    let t2 = _mm512_shuffle_i32x4::<0xEE>(o0, o1);
    let t3 = _mm512_shuffle_i32x4::<0xEE>(o2, o3);
    // Columns 0-15: [o0.L0, o1.L0, o2.L0, o3.L0]; 16-31 lanes 1; 32-47 lanes 2; 48-63 lanes 3.
    let c0 = _mm512_shuffle_i32x4::<0x88>(t0, t1);
    let c1 = _mm512_shuffle_i32x4::<0xDD>(t0, t1);
    let c2 = _mm512_shuffle_i32x4::<0x88>(t2, t3);
    let c3 = _mm512_shuffle_i32x4::<0xDD>(t2, t3);
    // One dword (quad) per column: register i holds columns 16i..16i + 16.
    let q = |i: u32| (cols >> (16 * i)) as u16;
    // SAFETY: the quads of columns below m at dst and dst + panel are writable (caller);
    // the masks store no others.
    unsafe {
        _mm512_mask_storeu_epi32(dst as *mut _, q(0), c0);
        _mm512_mask_storeu_epi32(dst.add(64) as *mut _, q(1), c1);
        _mm512_mask_storeu_epi32(dst.add(panel) as *mut _, q(2), c2);
        _mm512_mask_storeu_epi32(dst.add(panel + 64) as *mut _, q(3), c3);
    }
}

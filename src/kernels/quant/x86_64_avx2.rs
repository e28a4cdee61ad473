//! The AVX2 int8 table (x86-64): the generic bodies of `body` compiled with AVX2
//! enabled, and hand-written intrinsics for the hot entries. Every entry gives the same
//! bits as the portable one.
//!
//! Every entry of [`TABLE`] is a safe wrapper around a `#[target_feature]` function,
//! private to the int8 tables: it is reachable only through this table (held by the
//! AVX2+FMA kernel table, handed out only after detecting AVX2 and FMA) and through the
//! AVX-512 VNNI table (`x86_64_vnni`, held by the AVX-512 kernel table, handed out only
//! after detecting AVX-512, AVX2 and FMA), so each wrapper runs only on a CPU that has
//! AVX2.

use super::body::{self, AddParams};
use super::table::{ConvOps, QLayout, QuadOffsets, QuantTable, TileDst, Q4MR, QMR, QNR};
use crate::kernels::body::pool::PoolShape;
use std::arch::x86_64::*;

/// The AVX2 int8 table.
pub(crate) static TABLE: QuantTable = QuantTable {
    name: "avx2",
    layout: QLayout::Pairs,
    tile,
    quad_tile_su,
    quad_tile_su_u8,
    quad_tile_us,
    scatter_quads,
    requant_scalar,
    requant_cols,
    first_near_tie,
    requant_near_tie,
    ref_chains,
    ref_gather,
    quantize,
    dequantize,
    qadd,
    dw_taps,
    lut,
    softmax_block,
    take_even,
    copy_rows,
    max_pool_plane,
};

/// Builds a safe table entry `$name` that runs the generic body `$body` compiled with
/// AVX2 enabled.
macro_rules! avx2_build {
    ($name:ident, $body:path, ($($arg:ident: $ty:ty),*)) => {
        avx2_build!($name, $body, ($($arg: $ty),*) -> ());
    };
    ($name:ident, $body:path, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $name($($arg: $ty),*) -> $ret {
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn build($($arg: $ty),*) -> $ret {
                $body($($arg),*)
            }
            // SAFETY: this wrapper is reachable only through the int8 tables of CPUs
            // detected to have AVX2 and FMA (see the module doc); the body indexes
            // safely.
            unsafe { build($($arg),*) }
        }
    };
}

avx2_build!(dw_taps_body, body::dw_taps, (offs: &[usize], w: &[i16], src: &[i16], acc: &mut [i32]));

/// Taps at most [`dw_taps_pairs`] takes (more go to the generic body).
const DW_MAX_TAPS: usize = 64;

pub(super) fn dw_taps(offs: &[usize], w: &[i16], src: &[i16], acc: &mut [i32]) {
    let n = acc.len();
    assert!(offs.len() <= w.len() && offs.iter().all(|&o| o + n <= src.len()));
    if offs.len() > DW_MAX_TAPS || offs.is_empty() {
        return dw_taps_body(offs, w, src, acc);
    }
    // SAFETY: AVX2 was detected (see the module doc); the assert bounds every read
    // (`src[offs[t] + j]` for `j < n`), the writes stay in `acc`.
    unsafe { dw_taps_pairs(offs, w, src, acc) }
}

/// Depthwise taps two at a time: the rows of taps `t` and `t + 1` interleaved as i16
/// pairs (`unpacklo/hi_epi16`) against the weight pair, one `pmaddwd` per 8 outputs
/// and 2 taps (exact: |x| <= 255, |w| <= 255); an odd last tap pairs with weight 0.
/// The interleave permutes outputs inside each 128-bit lane, undone by one
/// `permute2x128` per 16 outputs at the end.
///
/// # Safety
/// AVX2 must be available; `src[offs[t] + j]` readable for every tap `t < offs.len()
/// <= DW_MAX_TAPS` and `j < acc.len()`, `w.len() >= offs.len()`.
#[target_feature(enable = "avx2")]
unsafe fn dw_taps_pairs(offs: &[usize], w: &[i16], src: &[i16], acc: &mut [i32]) {
    let n = acc.len();
    let nt = offs.len();
    let np = nt.div_ceil(2);
    let mut po = [(0usize, 0usize); DW_MAX_TAPS / 2];
    let mut pw = [0i32; DW_MAX_TAPS / 2];
    for p in 0..np {
        let (t0, t1) = (2 * p, (2 * p + 1).min(nt - 1));
        let w1 = if 2 * p + 1 < nt { w[t1] } else { 0 };
        po[p] = (offs[t0], offs[t1]);
        pw[p] = (w[t0] as u16 as u32 | (w1 as u16 as u32) << 16) as i32;
    }
    let sp = src.as_ptr();
    let mut j = 0;
    while j + 16 <= n {
        let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for p in 0..np {
            let (o0, o1) = po[p];
            let wv = _mm256_set1_epi32(pw[p]);
            // SAFETY: o0 + j + 16 <= o0 + n <= src.len() (same for o1), see the caller.
            let (a, b) = unsafe {
                (
                    _mm256_loadu_si256(sp.add(o0 + j) as *const __m256i),
                    _mm256_loadu_si256(sp.add(o1 + j) as *const __m256i),
                )
            };
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wv));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wv));
        }
        // lo holds outputs 0-3 | 8-11, hi 4-7 | 12-15.
        // SAFETY: j + 16 <= n = acc.len().
        unsafe {
            let d = acc.as_mut_ptr().add(j) as *mut __m256i;
            _mm256_storeu_si256(d, _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256(d.add(1), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
        j += 16;
    }
    for (jj, d) in acc.iter_mut().enumerate().skip(j) {
        let mut sum = 0i32;
        for (&o, &wv) in offs.iter().zip(w) {
            sum = sum.wrapping_add(wv as i32 * src[o + jj] as i32);
        }
        *d = sum;
    }
}
avx2_build!(quad_tile_su, body::quad_tile_at, (kq: usize, a: &[i8], b: &[u8], at: &QuadOffsets<'_>, c: &mut [i32], ldc: usize));
avx2_build!(quad_tile_su_u8, body::quad_tile_u8, (kq: usize, ops: ConvOps<'_>, dst: TileDst<'_>) -> [u32; Q4MR]);
avx2_build!(lut, body::lut, (table: &[u8; 256], x: &[u8], y: &mut [u8]));
avx2_build!(take_even, body::take_even, (src: &[u8], dst: &mut [u8]));
avx2_build!(copy_rows, body::copy_rows, (src: &[u8], ss: usize, dst: &mut [u8], ds: usize, shape: (usize, usize)));
avx2_build!(softmax_block, body::softmax_block, (p: &body::SoftmaxParams<'_>, x: &[u8], y: &mut [u8]));
avx2_build!(quad_tile_us, body::quad_tile, (kq: usize, a: &[u8], b: &[i8], c: &mut [i32], ldc: usize));
avx2_build!(scatter_quads, body::scatter_quads, (k: usize, p: usize, src: &[&[u8]], out: &mut [u8]));
avx2_build!(ref_gather, body::ref_gather, (x: &[u8], taps: &[u32], zp: u8, scale: f32, out: &mut [f32]));

pub(super) fn ref_chains(
    x: &[f32],
    w: &[f32],
    stride: usize,
    steps: usize,
    chains: &mut [f32; body::REF_LANES],
) {
    body::check_chains(x, w, stride, steps);
    // SAFETY: reachable only on CPUs with AVX2 and FMA (see the module doc); the
    // operands were just checked.
    unsafe { ref_chains_fma(x, w, stride, steps, chains) }
}

/// [`body::ref_chains`] with the eight lanes in one register: eight steps at a time,
/// each lane's eight operands loaded and the 8x8 block transposed, so that one FMA
/// advances every chain by a step.
///
/// # Safety
/// AVX2 and FMA available; `x` and `w` checked by [`body::check_chains`].
#[target_feature(enable = "avx2,fma")]
unsafe fn ref_chains_fma(
    x: &[f32],
    w: &[f32],
    stride: usize,
    steps: usize,
    chains: &mut [f32; body::REF_LANES],
) {
    const _: () = assert!(body::REF_LANES == 8, "one register of chains");
    // SAFETY: eight chains.
    let mut acc = unsafe { _mm256_loadu_ps(chains.as_ptr()) };
    let mut s = 0;
    while s + 8 <= steps {
        // SAFETY: lane l reads [l * stride + s, + 8) with s + 8 <= steps, within the
        // checked operands.
        let (xt, wt) = unsafe {
            (
                transposed8(x.as_ptr().add(s), stride),
                transposed8(w.as_ptr().add(s), stride),
            )
        };
        for j in 0..8 {
            acc = _mm256_fmadd_ps(xt[j], wt[j], acc);
        }
        s += 8;
    }
    while s < steps {
        let lane = |v: &[f32]| std::array::from_fn::<f32, 8, _>(|l| v[l * stride + s]);
        let (xl, wl) = (lane(x), lane(w));
        // SAFETY: eight-value arrays.
        let (xv, wv) = unsafe { (_mm256_loadu_ps(xl.as_ptr()), _mm256_loadu_ps(wl.as_ptr())) };
        acc = _mm256_fmadd_ps(xv, wv, acc);
        s += 1;
    }
    // SAFETY: eight chains.
    unsafe { _mm256_storeu_ps(chains.as_mut_ptr(), acc) };
}

/// Rows `p[l * stride..][..8]` (`l < 8`) transposed: register `j` holds value `j` of
/// every row.
///
/// # Safety
/// AVX available; the eight rows readable.
#[target_feature(enable = "avx2,fma")]
unsafe fn transposed8(p: *const f32, stride: usize) -> [__m256; 8] {
    // SAFETY: the caller's rows.
    let r: [__m256; 8] = std::array::from_fn(|l| unsafe { _mm256_loadu_ps(p.add(l * stride)) });
    // Pairs of rows interleaved, then quads, then the 128-bit halves exchanged.
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

#[allow(clippy::too_many_arguments)]
pub(super) fn requant_near_tie(
    acc: &[i32],
    bias: i32,
    mult: f32,
    zp: i32,
    lo: u8,
    hi: u8,
    eps: f32,
    out: &mut [u8],
) -> usize {
    requant_scalar(acc, bias, mult, zp, lo, hi, out);
    first_near_tie(acc, bias, mult, body::bounds(lo, hi, zp), eps)
}
avx2_build!(first_near_tie, body::first_near_tie, (acc: &[i32], bias: i32, mult: f32, bounds: (f32, f32), eps: f32) -> usize);
avx2_build!(max_pool_plane, body::max_pool_plane, (s: &PoolShape, x: &[u8], y: &mut [u8]));

pub(super) fn tile(kp: usize, a: &[i16], b: &[i16], c: &mut [i32], ldc: usize) {
    assert!(a.len() >= kp * QMR * 2 && b.len() >= kp * QNR * 2);
    assert!(ldc >= QNR && c.len() >= (QMR - 1) * ldc + QNR);
    // SAFETY: AVX2 was detected (see the module doc); the asserts bound every offset the
    // tile touches (a: kp*12 i16, b: kp*32 i16, c: QMR rows of QNR at ldc).
    unsafe { tile_6x16(kp, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc) }
}

/// The 6x16 int8 tile: per K pair, one `pmaddwd` per row and half-panel (the pair of A
/// broadcast as one i32 against 8 column pairs of B), summed in i32.
///
/// # Safety
/// AVX2 must be available; `a` valid for `kp * 12` reads, `b` for `kp * 32`, `c` for 6
/// rows of 16 i32 at stride `ldc`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn tile_6x16(kp: usize, a: *const i16, b: *const i16, c: *mut i32, ldc: usize) {
    let mut t = [_mm256_setzero_si256(); 2 * QMR];
    for q in 0..kp {
        // SAFETY: pair q < kp: 32 i16 of B and 12 i16 (6 pairs) of A are readable.
        let (b0, b1, ap) = unsafe {
            let bp = b.add(q * QNR * 2);
            (
                _mm256_loadu_si256(bp as *const __m256i),
                _mm256_loadu_si256(bp.add(QNR) as *const __m256i),
                a.add(q * QMR * 2) as *const i32,
            )
        };
        for r in 0..QMR {
            // SAFETY: r < QMR, inside pair q of the A panel (unaligned i32 read).
            let av = _mm256_set1_epi32(unsafe { ap.add(r).read_unaligned() });
            t[2 * r] = _mm256_add_epi32(t[2 * r], _mm256_madd_epi16(av, b0));
            t[2 * r + 1] = _mm256_add_epi32(t[2 * r + 1], _mm256_madd_epi16(av, b1));
        }
    }
    for r in 0..QMR {
        // SAFETY: row r < QMR of C, 16 i32, guaranteed by the caller.
        unsafe {
            let cp = c.add(r * ldc) as *mut __m256i;
            _mm256_storeu_si256(cp, t[2 * r]);
            _mm256_storeu_si256(cp.add(1), t[2 * r + 1]);
        }
    }
}

/// Clamp to `[vmin, vmax]` as `body::clamp_round` (`maxps` first: a NaN gives `vmin`),
/// round half to even (`cvtps2dq` under the default rounding mode), add `vzp`.
#[inline]
#[target_feature(enable = "avx2")]
fn clamp_round8(v: __m256, vmin: __m256, vmax: __m256, vzp: __m256i) -> __m256i {
    let v = _mm256_min_ps(_mm256_max_ps(v, vmin), vmax);
    _mm256_add_epi32(_mm256_cvtps_epi32(v), vzp)
}

/// Four vectors of i32 in `[0, 255]` → 32 bytes in order.
#[inline]
#[target_feature(enable = "avx2")]
fn pack32(v: [__m256i; 4]) -> __m256i {
    let p0 = _mm256_packs_epi32(v[0], v[1]);
    let p1 = _mm256_packs_epi32(v[2], v[3]);
    let u = _mm256_packus_epi16(p0, p1);
    _mm256_permutevar8x32_epi32(u, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// Eight u8 at `p` widened to i32.
///
/// # Safety
/// AVX2 must be available and `p` valid for 8 reads.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load8_u8(p: *const u8) -> __m256i {
    // SAFETY: 8 bytes readable (caller).
    _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(p as *const __m128i) })
}

/// Runs `f(i)` (the i32 results of elements `i..i + 8`) over the 32-element blocks of
/// `out` and stores the bytes; returns where the tail (left to the scalar body) starts.
#[inline]
#[target_feature(enable = "avx2")]
fn map32(out: &mut [u8], f: impl Fn(usize) -> __m256i) -> usize {
    let n32 = out.len() / 32 * 32;
    let mut i = 0;
    while i < n32 {
        let v = pack32([f(i), f(i + 8), f(i + 16), f(i + 24)]);
        // SAFETY: i + 32 <= out.len().
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, v) };
        i += 32;
    }
    n32
}

pub(super) fn requant_scalar(
    acc: &[i32],
    bias: i32,
    mult: f32,
    zp: i32,
    lo: u8,
    hi: u8,
    out: &mut [u8],
) {
    let n = out.len().min(acc.len());
    // SAFETY: AVX2 was detected (see the module doc).
    unsafe { requant_scalar_avx2(&acc[..n], bias, mult, zp, lo, hi, &mut out[..n]) }
}

#[target_feature(enable = "avx2")]
fn requant_scalar_avx2(acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]) {
    let (minv, maxv) = body::bounds(lo, hi, zp);
    let (vmin, vmax, vzp) = (
        _mm256_set1_ps(minv),
        _mm256_set1_ps(maxv),
        _mm256_set1_epi32(zp),
    );
    let (vb, vm) = (_mm256_set1_epi32(bias), _mm256_set1_ps(mult));
    let ap = acc.as_ptr();
    let done = map32(out, |i| {
        // SAFETY: i + 8 <= out.len() == acc.len().
        let a = unsafe { _mm256_loadu_si256(ap.add(i) as *const __m256i) };
        let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a, vb)), vm);
        clamp_round8(v, vmin, vmax, vzp)
    });
    body::requant_scalar(&acc[done..], bias, mult, zp, lo, hi, &mut out[done..]);
}

pub(super) fn requant_cols(
    acc: &[i32],
    bias: &[i32],
    mult: &[f32],
    zp: i32,
    lo: u8,
    hi: u8,
    out: &mut [u8],
) {
    let n = out.len().min(acc.len()).min(bias.len()).min(mult.len());
    // SAFETY: AVX2 was detected (see the module doc).
    unsafe { requant_cols_avx2(&acc[..n], &bias[..n], &mult[..n], zp, lo, hi, &mut out[..n]) }
}

#[target_feature(enable = "avx2")]
fn requant_cols_avx2(
    acc: &[i32],
    bias: &[i32],
    mult: &[f32],
    zp: i32,
    lo: u8,
    hi: u8,
    out: &mut [u8],
) {
    let (minv, maxv) = body::bounds(lo, hi, zp);
    let (vmin, vmax, vzp) = (
        _mm256_set1_ps(minv),
        _mm256_set1_ps(maxv),
        _mm256_set1_epi32(zp),
    );
    let (ap, bp, mp) = (acc.as_ptr(), bias.as_ptr(), mult.as_ptr());
    let done = map32(out, |i| {
        // SAFETY: i + 8 <= out.len(), the length of all three inputs.
        let (a, b, m) = unsafe {
            (
                _mm256_loadu_si256(ap.add(i) as *const __m256i),
                _mm256_loadu_si256(bp.add(i) as *const __m256i),
                _mm256_loadu_ps(mp.add(i)),
            )
        };
        let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a, b)), m);
        clamp_round8(v, vmin, vmax, vzp)
    });
    body::requant_cols(
        &acc[done..],
        &bias[done..],
        &mult[done..],
        zp,
        lo,
        hi,
        &mut out[done..],
    );
}

pub(super) fn quantize(x: &[f32], scale: f32, zp: u8, out: &mut [u8]) {
    let n = out.len().min(x.len());
    // SAFETY: AVX2 was detected (see the module doc).
    unsafe { quantize_avx2(&x[..n], scale, zp, &mut out[..n]) }
}

#[target_feature(enable = "avx2")]
fn quantize_avx2(x: &[f32], scale: f32, zp: u8, out: &mut [u8]) {
    let (minv, maxv) = body::bounds(0, 255, zp as i32);
    let (vmin, vmax) = (_mm256_set1_ps(minv), _mm256_set1_ps(maxv));
    let (vzp, vs) = (_mm256_set1_epi32(zp as i32), _mm256_set1_ps(scale));
    let xp = x.as_ptr();
    let done = map32(out, |i| {
        // SAFETY: i + 8 <= out.len() == x.len().
        let v = unsafe { _mm256_loadu_ps(xp.add(i)) };
        clamp_round8(_mm256_div_ps(v, vs), vmin, vmax, vzp)
    });
    body::quantize(&x[done..], scale, zp, &mut out[done..]);
}

pub(super) fn dequantize(x: &[u8], scale: f32, zp: u8, out: &mut [f32]) {
    let n = out.len().min(x.len());
    // SAFETY: AVX2 was detected (see the module doc).
    unsafe { dequantize_avx2(&x[..n], scale, zp, &mut out[..n]) }
}

#[target_feature(enable = "avx2")]
fn dequantize_avx2(x: &[u8], scale: f32, zp: u8, out: &mut [f32]) {
    let (vzp, vs) = (_mm256_set1_epi32(zp as i32), _mm256_set1_ps(scale));
    let n8 = out.len() / 8 * 8;
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= out.len() == x.len().
        unsafe {
            let v = _mm256_sub_epi32(load8_u8(x.as_ptr().add(i)), vzp);
            _mm256_storeu_ps(
                out.as_mut_ptr().add(i),
                _mm256_mul_ps(_mm256_cvtepi32_ps(v), vs),
            );
        }
        i += 8;
    }
    body::dequantize(&x[n8..], scale, zp, &mut out[n8..]);
}

pub(super) fn qadd(p: &AddParams, a: &[u8], b: &[u8], out: &mut [u8]) {
    assert!(out.len() <= a.len() && (b.len() == 1 || out.len() <= b.len()));
    if out.is_empty() {
        return;
    }
    // SAFETY: AVX2 was detected (see the module doc); lengths checked above.
    unsafe { qadd_avx2(p, a, b, out) }
}

/// # Safety
/// AVX2 must be available; `a` (and `b`, unless it has one element) hold `out.len()`.
#[target_feature(enable = "avx2")]
unsafe fn qadd_avx2(p: &AddParams, a: &[u8], b: &[u8], out: &mut [u8]) {
    let (minv, maxv) = body::bounds(p.lo, p.hi, p.y_zp as i32);
    let (vmin, vmax) = (_mm256_set1_ps(minv), _mm256_set1_ps(maxv));
    let vzy = _mm256_set1_epi32(p.y_zp as i32);
    let (vza, vsa) = (_mm256_set1_epi32(p.a_zp as i32), _mm256_set1_ps(p.a_scale));
    let (vzb, vsb) = (_mm256_set1_epi32(p.b_zp as i32), _mm256_set1_ps(p.b_scale));
    let vsy = _mm256_set1_ps(p.y_scale);
    let scalar_b = b.len() == 1 && out.len() != 1;
    // The broadcast operand dequantised once: the same f32 the body computes per element.
    let fb1 = _mm256_set1_ps(body::dequantize_one(b[0], p.b_scale, p.b_zp));
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let done = map32(out, |i| {
        // SAFETY: i + 8 <= out.len() <= a.len() (and b.len() unless broadcast).
        let fa = unsafe { _mm256_cvtepi32_ps(_mm256_sub_epi32(load8_u8(ap.add(i)), vza)) };
        let fb = if scalar_b {
            fb1
        } else {
            // SAFETY: as above.
            let vb = unsafe { _mm256_sub_epi32(load8_u8(bp.add(i)), vzb) };
            _mm256_mul_ps(_mm256_cvtepi32_ps(vb), vsb)
        };
        let v = _mm256_div_ps(_mm256_add_ps(_mm256_mul_ps(fa, vsa), fb), vsy);
        clamp_round8(v, vmin, vmax, vzy)
    });
    let bt = if scalar_b { b } else { &b[done..] };
    body::qadd(p, &a[done..], bt, &mut out[done..]);
}

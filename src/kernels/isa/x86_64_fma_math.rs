//! Element-wise math of the AVX2+FMA table on 8 lanes: `e^x` (the range reduction and
//! polynomial of `body::unary::exp` in FMA form, `2^n` built in the exponent bits),
//! sigmoid (`1 / (1 + e^-|x|)` correctly rounded, as the scalar body), SiLU (the steps of
//! `body::unary::silu`), GELU, and the
//! entries built on them: the fused GEMM epilogue (bias, activations, affine, PReLU and
//! residual adds applied in registers, one load and one store per element), the in-place
//! unary functions, the sigmoid slice and the softmax rows.
//!
//! The same design as the AVX-512 table's math, on 8 lanes and without mask registers:
//! a row's last partial vector goes through an 8-float copy on the stack, so every
//! element gets the same lane arithmetic wherever it sits in its row. (The
//! autovectorised generic bodies these replace ran one vector at a time through the
//! exponential's dependency chain and the blends of each scalar edge case: a YOLO
//! model's SiLU epilogues were 16 % of its samples, SVTR's softmax exponentials 17 %.)
//!
//! Every function here requires AVX2 and FMA; the public entries are safe wrappers
//! reachable only through the AVX2+FMA table, which `x86_64_fma::table` hands out after
//! detecting those features.

use crate::ir::UnaryOp;
use crate::kernels::body::{epilogue::Epilogue, unary::PostOpRt};
use std::arch::x86_64::*;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Inputs above overflow `e^x` to +inf, below flush it to 0 (as `body::unary::exp`).
const EXP_HI: f32 = 88.72;
const EXP_LO: f32 = -87.33;
/// Lanes of a vector.
const L: usize = 8;
/// Vectors the row loops run interleaved.
const V: usize = 4;

/// `N` vectors, each computed by `$e` from its index `$i`. The math below is written
/// step by step over `N` independent vectors so that their steps interleave: the
/// exponential's dependency chain is ~50 cycles long, too long for the out-of-order
/// window to overlap consecutive single vectors. Expands inside `unsafe` code only.
macro_rules! each {
    ($n:expr, |$i:ident| $e:expr) => {{
        let mut out = [_mm256_setzero_ps(); $n];
        for $i in 0..$n {
            out[$i] = $e;
        }
        out
    }};
}

// The math functions below are `#[inline(always)]` without `#[target_feature]` (and
// without closures) so that they inline into the `#[target_feature]` kernels that call
// them, intrinsics included. Each requires AVX2 and FMA: that is their safety contract.

/// `e^x` for `x` already inside `[EXP_LO, EXP_HI]`: `x = n·ln2 + r` (`n` clamped to
/// `[-126, 127]` so that `2^n` stays normal, as the scalar body; `POS` says `x` may
/// exceed 0, else `n` lies inside already), `e^r` by the degree-7 Taylor polynomial of
/// `body::unary::exp`, times `2^n` built in the exponent bits.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn exp_core<const N: usize, const POS: bool>(x: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let (log2e, lo, hi) = (
            _mm256_set1_ps(LOG2E),
            _mm256_set1_ps(-126.0),
            _mm256_set1_ps(127.0),
        );
        const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let n = each!(N, |i| _mm256_round_ps::<NEAREST>(_mm256_mul_ps(
            x[i], log2e
        )));
        let n = if POS {
            each!(N, |i| _mm256_min_ps(_mm256_max_ps(n[i], lo), hi))
        } else {
            n
        };
        let (ln2_hi, ln2_lo) = (_mm256_set1_ps(LN2_HI), _mm256_set1_ps(LN2_LO));
        let r = each!(N, |i| _mm256_fnmadd_ps(n[i], ln2_hi, x[i]));
        let r = each!(N, |i| _mm256_fnmadd_ps(n[i], ln2_lo, r[i]));
        let mut p = [_mm256_set1_ps(1.0 / 5040.0); N];
        for c in [
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ] {
            let c = _mm256_set1_ps(c);
            p = each!(N, |i| _mm256_fmadd_ps(p[i], r[i], c));
        }
        let bias = _mm256_set1_epi32(127);
        each!(N, |i| _mm256_mul_ps(
            p[i],
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(n[i]),
                bias
            )))
        ))
    }
}

/// All bits of the lanes of `v` that are NaN.
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn nan_lanes(v: __m256) -> __m256 {
    // SAFETY: a register-only intrinsic; AVX per the contract.
    unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v) }
}

/// `e^x` with the edge cases of `body::unary::exp`: +inf above 88.72, 0 below -87.33,
/// NaN kept.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn exp8<const N: usize>(x: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let (lo, hi) = (_mm256_set1_ps(EXP_LO), _mm256_set1_ps(EXP_HI));
        let y = exp_core::<N, true>(each!(N, |i| _mm256_min_ps(_mm256_max_ps(x[i], lo), hi)));
        let inf = _mm256_set1_ps(f32::INFINITY);
        let y = each!(N, |i| _mm256_blendv_ps(
            y[i],
            inf,
            _mm256_cmp_ps::<_CMP_GT_OQ>(x[i], hi)
        ));
        let y = each!(N, |i| _mm256_andnot_ps(
            _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], lo),
            y[i]
        ));
        each!(N, |i| _mm256_blendv_ps(y[i], x[i], nan_lanes(x[i])))
    }
}

/// `e^x` for lanes known not to exceed 0 (softmax's `x - max`): the bits of [`exp8`]
/// (0 below `EXP_LO`, NaN kept) without the overflow side.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn exp8_nonpos<const N: usize>(x: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let lo = _mm256_set1_ps(EXP_LO);
        // `vmaxps` gives its second operand for a NaN: NaN lanes stay NaN through
        // exp_core.
        let y = exp_core::<N, false>(each!(N, |i| _mm256_max_ps(lo, x[i])));
        each!(N, |i| _mm256_andnot_ps(
            _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], lo),
            y[i]
        ))
    }
}

/// The logistic function without NaN propagation (a NaN lane gives a finite value):
/// with `e = e^-|x|`, `1 / (1 + e)` for `x >= 0` and `e / (1 + e)` below.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn sigmoid_core<const N: usize>(x: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        // -|x| (the sign bit set), clamped where e^-|x| is below the normal range.
        let (sign, lo) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(EXP_LO));
        let e = exp_core::<N, false>(each!(N, |i| _mm256_max_ps(_mm256_or_ps(x[i], sign), lo)));
        let one = _mm256_set1_ps(1.0);
        let d = each!(N, |i| _mm256_add_ps(one, e[i]));
        // 1/d for d in [1, 2], correctly rounded as in the scalar body: a recurrent
        // layer's `1 - z` cancels to the last bit of z near 1 (vrcpps plus one Newton
        // step, ~2^-22, moved GRU outputs that should be 0 to -1.2e-7).
        let s = each!(N, |i| _mm256_div_ps(one, d[i]));
        let zero = _mm256_setzero_ps();
        each!(N, |i| _mm256_blendv_ps(
            s[i],
            _mm256_mul_ps(e[i], s[i]),
            _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], zero)
        ))
    }
}

/// SiLU as `x / (1 + 2^y)`, `y = -x·log2(e)` clamped to `[-125, 126]`, the steps of
/// `body::unary::silu` in FMA form: `2^y` is `2^n · 2^f` with `n` rounded by the
/// 1.5·2^23 trick (its integer read from the same bits), `2^f` by a degree-5 minimax
/// polynomial on `|f| <= 1/2`. About half the FMA-port work of `x · sigmoid(x)` by
/// `sigmoid_core` (no second exponential form, no blend, one division); a NaN lane stays
/// NaN through the division.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn silu8<const N: usize>(x: [__m256; N]) -> [__m256; N] {
    use crate::kernels::body::unary::silu_consts as k;
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let (m, lo, hi) = (
            _mm256_set1_ps(-LOG2E),
            _mm256_set1_ps(k::Y_LO),
            _mm256_set1_ps(k::Y_HI),
        );
        // vmaxps gives its second operand for a NaN lane: y stays finite.
        let y = each!(N, |i| _mm256_min_ps(
            _mm256_max_ps(_mm256_mul_ps(x[i], m), lo),
            hi
        ));
        let round = _mm256_set1_ps(k::ROUND);
        let nr = each!(N, |i| _mm256_add_ps(y[i], round));
        let f = each!(N, |i| _mm256_sub_ps(y[i], _mm256_sub_ps(nr[i], round)));
        let mut p = [_mm256_set1_ps(k::P[4]); N];
        for c in [k::P[3], k::P[2], k::P[1], k::P[0], 1.0] {
            let c = _mm256_set1_ps(c);
            p = each!(N, |i| _mm256_fmadd_ps(p[i], f[i], c));
        }
        // 2^n added to the exponent bits: the low bits of nr's pattern hold n.
        let e = each!(N, |i| _mm256_castsi256_ps(_mm256_add_epi32(
            _mm256_castps_si256(p[i]),
            _mm256_slli_epi32::<23>(_mm256_castps_si256(nr[i]))
        )));
        let one = _mm256_set1_ps(1.0);
        each!(N, |i| _mm256_div_ps(x[i], _mm256_add_ps(one, e[i])))
    }
}

/// `op` on `N` vectors, for the ops [`super::has_lane_form`] names (others pass through; callers
/// check first). Same NaN handling as the scalar bodies.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn unary8<const N: usize>(op: UnaryOp, v: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let zero = _mm256_setzero_ps();
        let one = _mm256_set1_ps(1.0);
        match op {
            // `v > 0 ? v : 0`: vmaxps returns its second operand for a NaN.
            UnaryOp::Relu => each!(N, |i| _mm256_max_ps(v[i], zero)),
            UnaryOp::Clip { min, max } => {
                let (lo, hi) = (_mm256_set1_ps(min), _mm256_set1_ps(max));
                each!(N, |i| _mm256_min_ps(_mm256_max_ps(v[i], lo), hi))
            }
            UnaryOp::Sigmoid => {
                let s = sigmoid_core(v);
                each!(N, |i| _mm256_blendv_ps(s[i], v[i], nan_lanes(v[i])))
            }
            UnaryOp::Silu => silu8(v),
            UnaryOp::HardSwish => {
                let (a, b) = (_mm256_set1_ps(1.0 / 6.0), _mm256_set1_ps(0.5));
                let t = each!(N, |i| _mm256_fmadd_ps(v[i], a, b));
                each!(N, |i| _mm256_mul_ps(
                    v[i],
                    _mm256_min_ps(_mm256_max_ps(t[i], zero), one)
                ))
            }
            UnaryOp::HardSigmoid { alpha, beta } => {
                let (a, b) = (_mm256_set1_ps(alpha), _mm256_set1_ps(beta));
                let t = each!(N, |i| _mm256_fmadd_ps(v[i], a, b));
                let t = each!(N, |i| _mm256_min_ps(_mm256_max_ps(t[i], zero), one));
                // clamp(NaN) is NaN in the scalar body.
                each!(N, |i| _mm256_blendv_ps(t[i], v[i], nan_lanes(v[i])))
            }
            UnaryOp::LeakyRelu { alpha } => {
                let a = _mm256_set1_ps(alpha);
                each!(N, |i| _mm256_blendv_ps(
                    v[i],
                    _mm256_mul_ps(v[i], a),
                    _mm256_cmp_ps::<_CMP_LT_OQ>(v[i], zero)
                ))
            }
            UnaryOp::Exp => exp8(v),
            UnaryOp::Gelu { tanh_approx: false } => gelu8(v),
            _ => v,
        }
    }
}

/// The polynomial `cs` (lowest power first) at `x` on `N` vectors, by Horner's rule.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn horner<const N: usize>(cs: &[f32], x: [__m256; N]) -> [__m256; N] {
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let mut acc = [_mm256_set1_ps(cs[cs.len() - 1]); N];
        for &a in cs[..cs.len() - 1].iter().rev() {
            let a = _mm256_set1_ps(a);
            acc = each!(N, |i| _mm256_fmadd_ps(acc[i], x[i], a));
        }
        acc
    }
}

/// GELU, erf form (`0.5 v (1 + erf(v / sqrt 2))`), with `body::unary::erf`'s rational
/// approximation (±1 from |x| >= 3.9 on); a NaN lane stays NaN.
///
/// # Safety
/// AVX2 and FMA available.
#[inline(always)]
unsafe fn gelu8<const N: usize>(v: [__m256; N]) -> [__m256; N] {
    use crate::kernels::body::unary::erf_coeffs as k;
    // SAFETY: register-only intrinsics; AVX2 and FMA per the contract.
    unsafe {
        let s2 = _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2);
        let (lo, hi, sign) = (
            _mm256_set1_ps(-4.0),
            _mm256_set1_ps(4.0),
            _mm256_set1_ps(-0.0),
        );
        let x = each!(N, |i| _mm256_mul_ps(v[i], s2));
        let c = each!(N, |i| _mm256_min_ps(_mm256_max_ps(x[i], lo), hi));
        let x2 = each!(N, |i| _mm256_mul_ps(c[i], c[i]));
        let (pa, pb) = (horner(&k::A, x2), horner(&k::B, x2));
        let (one, half, big) = (
            _mm256_set1_ps(1.0),
            _mm256_set1_ps(0.5),
            _mm256_set1_ps(3.9),
        );
        let erf = each!(N, |i| _mm256_div_ps(_mm256_mul_ps(c[i], pa[i]), pb[i]));
        // |x| >= 3.9: ±1 with x's sign.
        let erf = each!(N, |i| _mm256_blendv_ps(
            erf[i],
            _mm256_or_ps(_mm256_and_ps(x[i], sign), one),
            _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, x[i]), big)
        ));
        let y = each!(N, |i| _mm256_mul_ps(
            _mm256_mul_ps(v[i], half),
            _mm256_add_ps(one, erf[i])
        ));
        // A NaN lane: the clamp made c finite, so put the NaN back.
        each!(N, |i| _mm256_blendv_ps(y[i], v[i], nan_lanes(v[i])))
    }
}

/// The first `n` floats at `p` (at most [`L`]; all of them from `L` on), the other
/// lanes `pad`.
///
/// # Safety
/// AVX available; `min(n, L)` floats readable at `p`.
#[inline(always)]
unsafe fn load_n(p: *const f32, n: usize, pad: f32) -> __m256 {
    // SAFETY: min(n, L) floats readable at p (caller).
    unsafe {
        if n >= L {
            _mm256_loadu_ps(p)
        } else {
            load_part(p, n, pad)
        }
    }
}

/// [`load_n`]'s partial vector, through a copy on the stack (out of line: row tails
/// only).
///
/// # Safety
/// AVX available; `n < L` floats readable at `p`.
#[cold]
#[inline(never)]
unsafe fn load_part(p: *const f32, n: usize, pad: f32) -> __m256 {
    let mut buf = [pad; L];
    // SAFETY: n < L floats readable at p (caller) into an L-float array; AVX available.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
        _mm256_loadu_ps(buf.as_ptr())
    }
}

/// Stores the first `n` lanes of `v` at `p` (all of them from `L` on).
///
/// # Safety
/// AVX available; `min(n, L)` floats writable at `p`.
#[inline(always)]
unsafe fn store_n(p: *mut f32, n: usize, v: __m256) {
    // SAFETY: min(n, L) floats writable at p (caller).
    unsafe {
        if n >= L {
            _mm256_storeu_ps(p, v)
        } else {
            store_part(p, n, v)
        }
    }
}

/// [`store_n`]'s partial vector, through a copy on the stack (out of line).
///
/// # Safety
/// AVX available; `n < L` floats writable at `p`.
#[cold]
#[inline(never)]
unsafe fn store_part(p: *mut f32, n: usize, v: __m256) {
    let mut buf = [0.0f32; L];
    // SAFETY: an L-float array, n < L floats writable at p (caller); AVX available.
    unsafe {
        _mm256_storeu_ps(buf.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
    }
}

/// `x[i] = op(x[i])` for an op [`unary8`] computes.
///
/// # Safety
/// AVX2 and FMA must be available.
#[target_feature(enable = "avx2,fma")]
unsafe fn unary_slice(op: UnaryOp, x: &mut [f32]) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i + V * L <= n {
        // SAFETY: 4 L floats at i lie inside x.
        unsafe {
            let v = unary8(op, each!(V, |q| _mm256_loadu_ps(p.add(i + q * L))));
            for (q, vq) in v.iter().enumerate() {
                _mm256_storeu_ps(p.add(i + q * L), *vq);
            }
        }
        i += V * L;
    }
    while i < n {
        // SAFETY: min(n - i, L) floats at i lie inside x.
        unsafe {
            let [v] = unary8(op, [load_n(p.add(i), n - i, 0.0)]);
            store_n(p.add(i), n - i, v);
        }
        i += L;
    }
}

/// The table's `unary` entry: the ops [`unary8`] computes on 8 lanes, the rest through
/// the generic body compiled for AVX2.
pub(super) fn unary(op: UnaryOp, x: &mut [f32]) {
    if super::has_lane_form(op) {
        // SAFETY: reachable only through the AVX2+FMA table (features detected).
        unsafe { unary_slice(op, x) }
    } else {
        super::x86_64_fma::unary_body(op, x)
    }
}

/// The table's `sigmoid` entry.
pub(super) fn sigmoid(x: &mut [f32]) {
    // SAFETY: reachable only through the AVX2+FMA table (features detected).
    unsafe { unary_slice(UnaryOp::Sigmoid, x) }
}

/// The lanes of per-channel parameter `p` for a vector whose first lane is channel `c`:
/// with `COLS` (channels along the columns) the `min(n, L)` channels from `c`, else
/// channel `c` in every lane.
///
/// # Safety
/// AVX available; `p` holds those channels.
#[inline(always)]
unsafe fn chan_param<const COLS: bool>(p: &[f32], c: usize, n: usize) -> __m256 {
    // SAFETY: as the caller guarantees.
    unsafe {
        if COLS {
            load_n(p.as_ptr().add(c), n, 0.0)
        } else {
            _mm256_set1_ps(*p.get_unchecked(c))
        }
    }
}

/// The first channel of the vector `j` lanes after one whose first channel is `c`.
#[inline(always)]
fn ahead<const COLS: bool>(c: usize, j: usize) -> usize {
    if COLS {
        c + j
    } else {
        c
    }
}

/// One post-op on `N` consecutive vectors of a row: the first vector's channel is `c`
/// (see [`chan_param`]), its residual elements start at `at`, and `live` lanes of the
/// row lie from there (only the last vector may be partial; the row loops pass a
/// constant for whole vectors, which folds the length checks away).
///
/// # Safety
/// AVX2 and FMA available; `min(live, N L)` floats at `at` lie inside every residual of
/// `e`, every per-channel parameter holds the vectors' channels.
#[inline(always)]
unsafe fn post8<const N: usize, const COLS: bool>(
    e: &Epilogue<'_>,
    po: &PostOpRt,
    v: [__m256; N],
    c: usize,
    at: usize,
    live: usize,
) -> [__m256; N] {
    // SAFETY: in bounds (caller); the features are enabled in every caller.
    unsafe {
        match po {
            PostOpRt::Unary(u) => unary8(*u, v),
            PostOpRt::Affine { scale, shift } => {
                let s = each!(N, |q| chan_param::<COLS>(
                    scale,
                    ahead::<COLS>(c, q * L),
                    live - q * L
                ));
                let t = each!(N, |q| chan_param::<COLS>(
                    shift,
                    ahead::<COLS>(c, q * L),
                    live - q * L
                ));
                each!(N, |q| _mm256_fmadd_ps(v[q], s[q], t[q]))
            }
            PostOpRt::PRelu { slope } => {
                let s = each!(N, |q| chan_param::<COLS>(
                    slope,
                    ahead::<COLS>(c, q * L),
                    live - q * L
                ));
                let zero = _mm256_setzero_ps();
                each!(N, |q| _mm256_blendv_ps(
                    v[q],
                    _mm256_mul_ps(v[q], s[q]),
                    _mm256_cmp_ps::<_CMP_LT_OQ>(v[q], zero)
                ))
            }
            PostOpRt::AddInput { slot } => {
                let r = e.residuals.get_unchecked(*slot).as_ptr().add(at);
                each!(N, |q| _mm256_add_ps(
                    v[q],
                    load_n(r.add(q * L), live - q * L, 0.0)
                ))
            }
        }
    }
}

/// The `N` vectors at `j` of a row at `p` (`live` lanes from there, offset `off` in C,
/// first channel `c`) plus their addend and bias: the epilogue's first step.
///
/// # Safety
/// AVX2 available; `min(live, N L)` floats at `j` of the row and at `off + j` of the
/// addend, and the vectors' channels in the bias.
#[inline(always)]
unsafe fn epilogue_first<const N: usize, const COLS: bool>(
    e: &Epilogue<'_>,
    p: *const f32,
    j: usize,
    live: usize,
    c: usize,
    off: usize,
) -> [__m256; N] {
    // SAFETY: in bounds (caller).
    unsafe {
        let mut v = each!(N, |q| load_n(p.add(j + q * L), live - q * L, 0.0));
        if let Some(a) = e.addend {
            let a = a.as_ptr().add(off + j);
            v = each!(N, |q| _mm256_add_ps(
                v[q],
                load_n(a.add(q * L), live - q * L, 0.0)
            ));
        }
        if let Some(b) = e.bias {
            v = each!(N, |q| _mm256_add_ps(
                v[q],
                chan_param::<COLS>(b, ahead::<COLS>(c, q * L), live - q * L)
            ));
        }
        v
    }
}

/// One row of C through the whole epilogue, in registers: `+ addend`, `+ bias`, then the
/// post-ops; four vectors at a time (one dispatch on each post-op for 32 floats, their
/// math interleaved), then one vector at a time for the rest. `ch` is the row's channel
/// (its first column's with `COLS`), `off` the row's offset in C.
///
/// # Safety
/// AVX2 and FMA available; the addend and every residual of `e` hold `off + row.len()`
/// floats; every per-channel parameter holds the row's channel (`ch + row.len()`
/// channels with `COLS`).
#[target_feature(enable = "avx2,fma")]
unsafe fn epilogue_row<const COLS: bool>(e: &Epilogue<'_>, row: &mut [f32], ch: usize, off: usize) {
    let n = row.len();
    let p = row.as_mut_ptr();
    let at = |j: usize| ahead::<COLS>(ch, j);
    // SAFETY: every vector below reads and writes min(n - j, L) floats at j of the row
    // and at off + j of the addend and the residuals, and its channels (caller).
    unsafe {
        let mut j = 0;
        while j + V * L <= n {
            let mut v = epilogue_first::<V, COLS>(e, p, j, V * L, at(j), off);
            for po in e.post {
                v = post8::<V, COLS>(e, po, v, at(j), off + j, V * L);
            }
            for (q, vq) in v.iter().enumerate() {
                _mm256_storeu_ps(p.add(j + q * L), *vq);
            }
            j += V * L;
        }
        while j < n {
            let mut v = epilogue_first::<1, COLS>(e, p, j, n - j, at(j), off);
            for po in e.post {
                v = post8::<1, COLS>(e, po, v, at(j), off + j, n - j);
            }
            store_n(p.add(j), n - j, v[0]);
            j += L;
        }
    }
}

/// The commonest conv epilogues without a dispatch per vector (channels along the rows,
/// [`Epilogue::simple_form`]): `+ bias`, then (with `RES`) the residual row `res`, then
/// `min(max(v, lo), hi)` for `clamp` (ReLU / Clip: [`unary8`]'s lanes exactly; without
/// a clamp a NaN stays NaN).
///
/// # Safety
/// AVX2 and FMA available; with `RES`, `res` is `Some` and holds `row.len()` floats.
#[inline(always)]
unsafe fn epilogue_row_simple<const RES: bool>(
    row: &mut [f32],
    bias: f32,
    res: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        match clamp {
            Some(_) => epilogue_row_simple_as::<RES, true>(row, bias, res, clamp),
            None => epilogue_row_simple_as::<RES, false>(row, bias, res, clamp),
        }
    }
}

/// [`epilogue_row_simple`] with the clamp's presence (`CLAMP`) fixed at compile time.
///
/// # Safety
/// As [`epilogue_row_simple`].
#[target_feature(enable = "avx2,fma")]
unsafe fn epilogue_row_simple_as<const RES: bool, const CLAMP: bool>(
    row: &mut [f32],
    bias: f32,
    res: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) {
    let n = row.len();
    let p = row.as_mut_ptr();
    let rp = res.map_or(p as *const f32, |r| r.as_ptr());
    let b = _mm256_set1_ps(bias);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (vlo, vhi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    // One vector: as `unary8`, `vmaxps` returns its second operand for a NaN lane.
    let step = |v: __m256, r: __m256| {
        let v = _mm256_add_ps(v, b);
        let v = if RES { _mm256_add_ps(v, r) } else { v };
        if CLAMP {
            _mm256_min_ps(_mm256_max_ps(v, vlo), vhi)
        } else {
            v
        }
    };
    let mut j = 0;
    // SAFETY: every access is min(n - j, L) floats at j of the row and, with RES, of
    // `res` (caller).
    unsafe {
        while j + 2 * L <= n {
            let (r0, r1) = if RES {
                (_mm256_loadu_ps(rp.add(j)), _mm256_loadu_ps(rp.add(j + L)))
            } else {
                (b, b)
            };
            let v0 = step(_mm256_loadu_ps(p.add(j)), r0);
            let v1 = step(_mm256_loadu_ps(p.add(j + L)), r1);
            _mm256_storeu_ps(p.add(j), v0);
            _mm256_storeu_ps(p.add(j + L), v1);
            j += 2 * L;
        }
        while j < n {
            let r = if RES {
                load_n(rp.add(j), n - j, 0.0)
            } else {
                b
            };
            store_n(p.add(j), n - j, step(load_n(p.add(j), n - j, 0.0), r));
            j += L;
        }
    }
}

/// The table's `epilogue` entry: [`epilogue_row_simple`] for the simple conv forms,
/// [`epilogue_row`] on each row when every post-op has a lane form, else the generic
/// body compiled for AVX2.
pub(super) fn epilogue(
    e: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    mr: usize,
    j0: usize,
    nr: usize,
) {
    if !super::post_has_lane_form(e.post) {
        return super::x86_64_fma::epilogue_generic(e, c, ldc, i0, mr, j0, nr);
    }
    e.assert_fits(ldc, i0, mr, j0, nr);
    let simple = e.simple_form();
    for i in i0..i0 + mr {
        let off = i * ldc + j0;
        let row = &mut c[off..off + nr];
        // SAFETY (all three): reachable only through the AVX2+FMA table (features
        // detected); the row holds nr floats, the addend and every residual off + nr,
        // every per-channel parameter the row's channels (`assert_fits` above).
        match simple {
            Some((slot, clamp)) => {
                let bias = e.bias.map_or(0.0, |b| b[e.channel_offset + i]);
                match slot {
                    // SAFETY: see above.
                    None => unsafe { epilogue_row_simple::<false>(row, bias, None, clamp) },
                    Some(k) => {
                        let res = Some(&e.residuals[k][off..]);
                        // SAFETY: see above.
                        unsafe { epilogue_row_simple::<true>(row, bias, res, clamp) }
                    }
                }
            }
            // SAFETY: see above.
            None if e.channel_is_row => unsafe {
                epilogue_row::<false>(e, row, e.channel_offset + i, off)
            },
            // SAFETY: see above.
            None => unsafe { epilogue_row::<true>(e, row, e.channel_offset + j0, off) },
        }
    }
}

/// The table's `softmax_row` entry: max, `e^(x - max)` with the sum in registers, then
/// the scaling (or the log shift).
pub(super) fn softmax_row(x: &[f32], add: &[f32], y: &mut [f32], log: bool) {
    let y = &mut y[..x.len()];
    let add = super::softmax_add_row(add, x.len());
    // SAFETY: reachable only through the AVX2+FMA table (features detected); y and add
    // are as long as x.
    unsafe { softmax_row8(x, add, y, log) }
}

/// The table's `exp_row` entry: softmax's max and exponential passes.
pub(super) fn exp_row(x: &[f32], add: &[f32], y: &mut [f32]) -> (f32, f32) {
    let y = &mut y[..x.len()];
    let add = super::softmax_add_row(add, x.len());
    // SAFETY: reachable only through the AVX2+FMA table (features detected); y and add
    // are as long as x.
    unsafe { exp_pass8(x, add, y) }
}

/// `x + add` for the `min(n, L)` floats at `j` (the other lanes `-inf`).
///
/// # Safety
/// AVX available; `min(n, L)` floats at `j` inside `x` and `add`.
#[inline(always)]
unsafe fn load_sum(x: *const f32, add: Option<*const f32>, j: usize, n: usize) -> __m256 {
    // SAFETY: inside x and add (caller).
    unsafe {
        let v = load_n(x.add(j), n, f32::NEG_INFINITY);
        match add {
            Some(a) => _mm256_add_ps(v, load_n(a.add(j), n, 0.0)),
            None => v,
        }
    }
}

/// The 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn lanes(v: __m256) -> [f32; L] {
    let mut a = [0.0f32; L];
    // SAFETY: an 8-float array.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
    a
}

/// Softmax's first two passes: the max of `x + add` (NaN ignored), then `y = e^(x + add
/// - max)` with the sum in registers; returns `(max, sum)`. The padding lanes of a
/// partial vector are `-inf` (their exponential 0).
///
/// # Safety
/// AVX2 and FMA must be available; `y.len() == x.len()`, and `add` (when given) as long.
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_pass8(x: &[f32], add: Option<&[f32]>, y: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let ap = add.map(|a| a.as_ptr());
    // Max, NaN ignored (vmaxps keeps its second operand, the running max, for a NaN).
    let (mut m0, mut m1) = (
        _mm256_set1_ps(f32::NEG_INFINITY),
        _mm256_set1_ps(f32::NEG_INFINITY),
    );
    let mut j = 0;
    while j < n {
        // SAFETY: min(n - j, L) floats at j inside x and add.
        let v = unsafe { load_sum(xp, ap, j, n - j) };
        if (j / L).is_multiple_of(2) {
            m0 = _mm256_max_ps(v, m0);
        } else {
            m1 = _mm256_max_ps(v, m1);
        }
        j += L;
    }
    // Horizontal max, NaN lanes ignored like the running max.
    let mx = lanes(_mm256_max_ps(m0, m1))
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let mb = _mm256_set1_ps(mx);
    let mut sums = [_mm256_setzero_ps(); V];
    let mut j = 0;
    while j + V * L <= n {
        // SAFETY: 4 L floats at j inside x, add and y.
        unsafe {
            let v = exp8_nonpos(each!(V, |q| _mm256_sub_ps(
                load_sum(xp, ap, j + q * L, L),
                mb
            )));
            for q in 0..V {
                _mm256_storeu_ps(yp.add(j + q * L), v[q]);
                sums[q] = _mm256_add_ps(sums[q], v[q]);
            }
        }
        j += V * L;
    }
    while j < n {
        // SAFETY: min(n - j, L) floats at j inside x, add and y.
        unsafe {
            let [v] = exp8_nonpos([_mm256_sub_ps(load_sum(xp, ap, j, n - j), mb)]);
            store_n(yp.add(j), n - j, v);
            // The padding lanes: e^-inf is 0 for a finite max, but keep them out of the
            // sum whatever the max.
            let mut keep = [f32::from_bits(u32::MAX); L];
            keep[(n - j).min(L)..].fill(0.0);
            sums[0] = _mm256_add_ps(sums[0], _mm256_and_ps(v, _mm256_loadu_ps(keep.as_ptr())));
        }
        j += L;
    }
    let s = sums[1..]
        .iter()
        .fold(sums[0], |acc, &v| _mm256_add_ps(acc, v));
    (mx, lanes(s).iter().sum())
}

/// # Safety
/// AVX2 and FMA must be available; `y.len() == x.len()`, and `add` (when given) as long.
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row8(x: &[f32], add: Option<&[f32]>, y: &mut [f32], log: bool) {
    // SAFETY: y as long as x, add too (caller).
    let (mx, sum) = unsafe { exp_pass8(x, add, y) };
    let n = x.len();
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let ap = add.map(|a| a.as_ptr());
    let mut j = 0;
    if log {
        let sh = _mm256_set1_ps(mx + sum.ln());
        while j < n {
            // SAFETY: min(n - j, L) floats at j inside x, add and y.
            unsafe {
                let v = _mm256_sub_ps(load_sum(xp, ap, j, n - j), sh);
                store_n(yp.add(j), n - j, v);
            }
            j += L;
        }
    } else {
        let inv = _mm256_set1_ps(1.0 / sum);
        while j < n {
            // SAFETY: min(n - j, L) floats at j inside y.
            unsafe {
                let v = _mm256_mul_ps(load_n(yp.add(j), n - j, 0.0), inv);
                store_n(yp.add(j), n - j, v);
            }
            j += L;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    /// Softmax's exponential of non-positive lanes gives exp8's bits (zeros below the
    /// normal range, -inf, NaN, -0 included).
    #[test]
    fn exp_of_non_positive_lanes_is_exp8() {
        if !crate::kernels::isa::tables()
            .iter()
            .any(|t| t.isa == crate::kernels::isa::Isa::Avx2Fma)
        {
            return;
        }
        let mut xs: Vec<f32> = (0..4000).map(|i| -(i as f32) * 0.031).collect();
        xs.extend([
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
            0.0,
            -87.33,
            -87.34,
            -1e30,
        ]);
        for chunk in xs.chunks(8) {
            let mut v = [0.0f32; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            let (mut a, mut b) = ([0.0f32; 8], [0.0f32; 8]);
            // SAFETY: AVX2+FMA detected above; 8-float arrays.
            unsafe {
                let x = _mm256_loadu_ps(v.as_ptr());
                _mm256_storeu_ps(a.as_mut_ptr(), super::exp8_nonpos([x])[0]);
                _mm256_storeu_ps(b.as_mut_ptr(), super::exp8([x])[0]);
            }
            for l in 0..8 {
                assert!(
                    a[l].to_bits() == b[l].to_bits() || (a[l].is_nan() && b[l].is_nan()),
                    "x {} lane {l}: {} vs {}",
                    v[l],
                    a[l],
                    b[l]
                );
            }
        }
    }
}

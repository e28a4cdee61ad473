//! Element-wise math of the AVX-512 table on 16 lanes: `e^x` and sigmoid (the range
//! reduction and polynomial of `body::unary::exp`, the power of two applied by
//! `vscalefps`, the reciprocal by `vrcp14ps` plus one Newton step), SiLU (the steps of
//! `body::unary::silu`), and the entries
//! built on them: the fused GEMM epilogue (bias, activations, affine, PReLU and residual
//! adds applied in registers, one load and one store per element), the in-place unary
//! functions, the sigmoid slice and the softmax row. Row tails run under a lane mask.
//!
//! Every function here requires AVX-512F and DQ; the public entries are safe wrappers
//! reachable only through the AVX-512 table, which `x86_64_avx512::table` hands out
//! after detecting those features.

use crate::ir::UnaryOp;
use crate::kernels::body::{epilogue::Epilogue, unary::PostOpRt};
use std::arch::x86_64::*;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Inputs above overflow `e^x` to +inf, below flush it to 0 (as `body::unary::exp`).
const EXP_HI: f32 = 88.72;
const EXP_LO: f32 = -87.33;

/// `e^x` for `x` already inside `[EXP_LO, EXP_HI]`: `x = n·ln2 + r`, `e^r` by the
/// degree-7 Taylor polynomial of `body::unary::exp`, times `2^n` by `vscalefps`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn exp_core(x: __m512) -> __m512 {
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(1.0 / 5040.0);
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// `e^x` with the edge cases of `body::unary::exp`: +inf above 88.72, 0 below -87.33,
/// NaN kept.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn exp16(x: __m512) -> __m512 {
    let (lo, hi) = (_mm512_set1_ps(EXP_LO), _mm512_set1_ps(EXP_HI));
    let y = exp_core(_mm512_min_ps(_mm512_max_ps(x, lo), hi));
    let y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi),
        y,
        _mm512_set1_ps(f32::INFINITY),
    );
    let y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo),
        y,
        _mm512_setzero_ps(),
    );
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), y, x)
}

/// `e^x` for lanes known not to exceed 0 (softmax's `x - max`), lanes `keep` only (0
/// elsewhere): the same bits as [`exp16`] there (0 below `EXP_LO`, NaN kept) without the
/// overflow side.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn exp16_nonpos(x: __m512, keep: __mmask16) -> __m512 {
    let lo = _mm512_set1_ps(EXP_LO);
    // `vmaxps` gives its second operand for a NaN: NaN lanes stay NaN through exp_core.
    let y = exp_core(_mm512_max_ps(lo, x));
    _mm512_maskz_mov_ps(keep & _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, lo), y)
}

/// The logistic function without NaN propagation (a NaN lane gives a finite value):
/// with `e = e^-|x|`, `1 / (1 + e)` for `x >= 0` and `e / (1 + e)` below.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn sigmoid_core(x: __m512) -> __m512 {
    // -|x| (the sign bit set), clamped where e^-|x| is below the normal range.
    let a = _mm512_or_ps(x, _mm512_set1_ps(-0.0));
    let e = exp_core(_mm512_max_ps(a, _mm512_set1_ps(EXP_LO)));
    let one = _mm512_set1_ps(1.0);
    let d = _mm512_add_ps(one, e);
    // 1/d for d in [1, 2]: 14-bit estimate, one Newton step (about 2^-28 relative).
    let r0 = _mm512_rcp14_ps(d);
    let s = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(d, r0, one), r0);
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    _mm512_mask_mul_ps(s, neg, e, s)
}

/// Sigmoid with NaN kept.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn sigmoid16(x: __m512) -> __m512 {
    let s = sigmoid_core(x);
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), s, x)
}

/// SiLU as `body::unary::silu` computes it: `x / (1 + 2^y)`, `y = -x·log2(e)` clamped,
/// `2^y = 2^n · 2^f` with `n` rounded by the 1.5·2^23 trick and added to the exponent
/// bits, `2^f` by the degree-5 polynomial; a NaN lane stays NaN through the division.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn silu16(x: __m512) -> __m512 {
    use crate::kernels::body::unary::silu_consts as k;
    // vmaxps gives its second operand for a NaN lane: y stays finite.
    let y = _mm512_min_ps(
        _mm512_max_ps(
            _mm512_mul_ps(x, _mm512_set1_ps(-LOG2E)),
            _mm512_set1_ps(k::Y_LO),
        ),
        _mm512_set1_ps(k::Y_HI),
    );
    let round = _mm512_set1_ps(k::ROUND);
    let nr = _mm512_add_ps(y, round);
    let f = _mm512_sub_ps(y, _mm512_sub_ps(nr, round));
    let mut p = _mm512_set1_ps(k::P[4]);
    for c in [k::P[3], k::P[2], k::P[1], k::P[0], 1.0] {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    // 2^n added to the exponent bits: the low bits of nr's pattern hold n.
    let e = _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_castps_si512(p),
        _mm512_slli_epi32::<23>(_mm512_castps_si512(nr)),
    ));
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// `op` on 16 lanes, for the ops [`super::has_lane_form`] names (others pass through; callers
/// check first). Same NaN handling as the scalar bodies.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn unary16(op: UnaryOp, v: __m512) -> __m512 {
    let zero = _mm512_setzero_ps();
    match op {
        // `v > 0 ? v : 0`: vmaxps returns its second operand for a NaN.
        UnaryOp::Relu => _mm512_max_ps(v, zero),
        UnaryOp::Clip { min, max } => {
            _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(min)), _mm512_set1_ps(max))
        }
        UnaryOp::Sigmoid => sigmoid16(v),
        UnaryOp::Silu => silu16(v),
        UnaryOp::HardSwish => {
            let t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0 / 6.0), _mm512_set1_ps(0.5));
            let t = _mm512_min_ps(_mm512_max_ps(t, zero), _mm512_set1_ps(1.0));
            _mm512_mul_ps(v, t)
        }
        UnaryOp::HardSigmoid { alpha, beta } => {
            let t = _mm512_fmadd_ps(v, _mm512_set1_ps(alpha), _mm512_set1_ps(beta));
            let t = _mm512_min_ps(_mm512_max_ps(t, zero), _mm512_set1_ps(1.0));
            // clamp(NaN) is NaN in the scalar body.
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), t, v)
        }
        UnaryOp::LeakyRelu { alpha } => {
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero);
            _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(alpha))
        }
        UnaryOp::Exp => exp16(v),
        UnaryOp::Gelu { tanh_approx: false } => gelu16(v),
        _ => v,
    }
}

/// GELU, erf form (`0.5 v (1 + erf(v / sqrt 2))`), with `body::unary::erf`'s rational
/// approximation (±1 from |x| >= 3.9 on); a NaN lane stays NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn gelu16(v: __m512) -> __m512 {
    use crate::kernels::body::unary::erf_coeffs as k;
    let x = _mm512_mul_ps(v, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
    let c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-4.0)), _mm512_set1_ps(4.0));
    let x2 = _mm512_mul_ps(c, c);
    let horner = |cs: &[f32]| {
        let mut acc = _mm512_set1_ps(cs[cs.len() - 1]);
        for &a in cs[..cs.len() - 1].iter().rev() {
            acc = _mm512_fmadd_ps(acc, x2, _mm512_set1_ps(a));
        }
        acc
    };
    let p = _mm512_mul_ps(c, horner(&k::A));
    let q = horner(&k::B);
    let erf = _mm512_div_ps(p, q);
    // |x| >= 3.9: ±1 with x's sign.
    let sign = _mm512_and_ps(x, _mm512_set1_ps(-0.0));
    let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(x), _mm512_set1_ps(3.9));
    let erf = _mm512_mask_blend_ps(big, erf, _mm512_or_ps(sign, _mm512_set1_ps(1.0)));
    let half_v = _mm512_mul_ps(v, _mm512_set1_ps(0.5));
    _mm512_mul_ps(half_v, _mm512_add_ps(_mm512_set1_ps(1.0), erf))
}

/// The even (`ODD = 0`) or odd (`ODD = 1`) lanes of the 32 floats `lo, hi`: lane `i` is
/// lane `2 i + ODD` of the pair (a stride-2 gather of two loaded vectors).
///
/// # Safety
/// AVX-512F available (inlined into the `#[target_feature]` kernels).
#[inline(always)]
pub(super) unsafe fn alternate_lanes<const ODD: i32>(lo: __m512, hi: __m512) -> __m512 {
    // SAFETY: register-only intrinsics; AVX-512F per the contract.
    unsafe {
        let idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        _mm512_permutex2var_ps(lo, _mm512_add_epi32(idx, _mm512_set1_epi32(ODD)), hi)
    }
}

/// Mask of the first `n` lanes of 16 (all of them from 16 on).
#[inline]
pub(super) fn first_lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

/// `x[i] = op(x[i])` for an op [`unary16`] computes.
///
/// # Safety
/// AVX-512F/DQ must be available.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn unary_slice(op: UnaryOp, x: &mut [f32]) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n floats of x.
        unsafe { _mm512_storeu_ps(p.add(i), unary16(op, _mm512_loadu_ps(p.add(i)))) };
        i += 16;
    }
    if i < n {
        let m = first_lanes(n - i);
        // SAFETY: the masked lanes lie inside x.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            _mm512_mask_storeu_ps(p.add(i), m, unary16(op, v));
        }
    }
}

/// The table's `unary` entry: the ops [`unary16`] computes on 16 lanes, the rest
/// through the generic body compiled for AVX-512.
pub(super) fn unary(op: UnaryOp, x: &mut [f32]) {
    if super::has_lane_form(op) {
        // SAFETY: reachable only through the AVX-512 table (features detected).
        unsafe { unary_slice(op, x) }
    } else {
        super::x86_64_avx512::unary_body(op, x)
    }
}

/// The table's `sigmoid` entry.
pub(super) fn sigmoid(x: &mut [f32]) {
    // SAFETY: reachable only through the AVX-512 table (features detected).
    unsafe { unary_slice(UnaryOp::Sigmoid, x) }
}

/// True when [`epilogue_rows`] handles `e`: channels along rows, no addend, post-ops
/// that run on 16 lanes.
fn epilogue_fits(e: &Epilogue<'_>) -> bool {
    e.channel_is_row && e.addend.is_none() && super::post_has_lane_form(e.post)
}

/// True when `e` has its channels along the columns (Gemm, MatMul) and only post-ops
/// with a lane form: [`epilogue_row_columns`] runs it.
fn epilogue_fits_columns(e: &Epilogue<'_>) -> bool {
    !e.channel_is_row && super::post_has_lane_form(e.post)
}

/// One row of C with channels along the columns: `+ addend`, `+ bias[j]` (a vector
/// per 16 columns), then the post-ops, 16 lanes at a time.
///
/// # Safety
/// AVX-512F/DQ must be available; `bias` (when given) as long as `row`, the addend and
/// every residual of `e` hold `off + row.len()` floats, every per-channel parameter
/// `ch0 + row.len()`.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn epilogue_row_columns(
    e: &Epilogue<'_>,
    row: &mut [f32],
    bias: Option<&[f32]>,
    ch0: usize,
    off: usize,
) {
    let n = row.len();
    let p = row.as_mut_ptr();
    let mut j = 0;
    while j < n {
        let m = first_lanes(n - j);
        // SAFETY: the masked lanes lie inside the row, the bias and (at off + j..)
        // every residual (caller).
        unsafe {
            let mut v = _mm512_maskz_loadu_ps(m, p.add(j));
            if let Some(a) = e.addend {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, a.as_ptr().add(off + j)));
            }
            if let Some(b) = bias {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b.as_ptr().add(j)));
            }
            for po in e.post {
                v = post16(e, po, v, Chan::Cols(ch0 + j), off + j, m);
            }
            _mm512_mask_storeu_ps(p.add(j), m, v);
        }
        j += 16;
    }
}

/// The table's `epilogue` entry: [`epilogue_rows`] when it handles `e`, else the
/// generic body compiled for AVX-512.
pub(super) fn epilogue(
    e: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    mr: usize,
    j0: usize,
    nr: usize,
) {
    if epilogue_fits_columns(e) {
        // Channels of columns j0..j0 + nr: every per-channel parameter holds them.
        let ch0 = e.channel_offset + j0;
        let bias = e.bias.map(|b| &b[ch0..ch0 + nr]);
        for p in e.post {
            match p {
                PostOpRt::Affine { scale, shift } => {
                    assert!(scale.len() >= ch0 + nr && shift.len() >= ch0 + nr)
                }
                PostOpRt::PRelu { slope } => assert!(slope.len() >= ch0 + nr),
                PostOpRt::AddInput { .. } | PostOpRt::Unary(_) => {}
            }
        }
        for i in i0..i0 + mr {
            let off = i * ldc + j0;
            for p in e.post {
                if let PostOpRt::AddInput { slot } = p {
                    assert!(e.residuals[*slot].len() >= off + nr);
                }
            }
            assert!(e.addend.is_none_or(|a| a.len() >= off + nr));
            // SAFETY: reachable only through the AVX-512 table (features detected); the
            // row and the bias hold nr floats, the addend and every residual off + nr,
            // every per-channel parameter ch0 + nr (checked).
            unsafe { epilogue_row_columns(e, &mut c[off..off + nr], bias, ch0, off) };
        }
        return;
    }
    if !epilogue_fits(e) {
        return super::x86_64_avx512::epilogue_body512(e, c, ldc, i0, mr, j0, nr);
    }
    for i in i0..i0 + mr {
        let off = i * ldc + j0;
        let ch = e.channel_offset + i;
        let row = &mut c[off..off + nr];
        let bias = e.bias.map_or(0.0, |b| b[ch]);
        // Bounds of every per-channel parameter and residual row, checked here once.
        for p in e.post {
            match p {
                PostOpRt::Affine { scale, shift } => assert!(ch < scale.len() && ch < shift.len()),
                PostOpRt::PRelu { slope } => assert!(ch < slope.len()),
                PostOpRt::AddInput { slot } => assert!(e.residuals[*slot].len() >= off + nr),
                PostOpRt::Unary(_) => {}
            }
        }
        // SAFETY: reachable only through the AVX-512 table (features detected); `row`
        // holds nr floats, every residual off + nr and every parameter index ch (checked).
        unsafe {
            match e.simple_form() {
                Some((None, clamp)) => epilogue_row_simple::<false>(row, bias, None, clamp),
                Some((Some(k), clamp)) => {
                    epilogue_row_simple::<true>(row, bias, Some(&e.residuals[k][off..]), clamp)
                }
                None => epilogue_row(e, row, bias, ch, off),
            }
        }
    }
}

/// The commonest epilogues without a dispatch per vector: bias, then (with `RES`) the
/// residual row `res`, then `min(max(v, lo), hi)` for `clamp` (ReLU / Clip,
/// [`Epilogue::simple_form`]: [`unary16`]'s lanes exactly).
///
/// # Safety
/// AVX-512F/DQ must be available; with `RES`, `res` is `Some` and holds `row.len()`
/// floats.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn epilogue_row_simple<const RES: bool>(
    row: &mut [f32],
    bias: f32,
    res: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) {
    let n = row.len();
    let p = row.as_mut_ptr();
    let rp = res.map_or(p as *const f32, |r| r.as_ptr());
    let b = _mm512_set1_ps(bias);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (vlo, vhi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    let has_clamp = clamp.is_some();
    let mut j = 0;
    while j < n {
        let m = first_lanes(n - j);
        // SAFETY: the masked lanes lie inside the row and, with RES, inside `res` (caller).
        unsafe {
            let mut v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p.add(j)), b);
            if RES {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rp.add(j)));
            }
            if has_clamp {
                // As `unary16`: `vmaxps` returns its second operand for a NaN lane.
                v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
            }
            _mm512_mask_storeu_ps(p.add(j), m, v);
        }
        j += 16;
    }
}

/// Bias then the post-ops on one row of C, in registers: four vectors at a time (one
/// dispatch on each post-op for 64 floats), then 16 lanes at a time for the rest.
///
/// # Safety
/// AVX-512F/DQ must be available; every residual of `e` holds `off + row.len()` floats
/// and every per-channel parameter index `ch`.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn epilogue_row(e: &Epilogue<'_>, row: &mut [f32], bias: f32, ch: usize, off: usize) {
    let n = row.len();
    let p = row.as_mut_ptr();
    let b = _mm512_set1_ps(bias);
    let mut j = 0;
    while j + 64 <= n {
        // SAFETY: 64 floats at j lie inside the row and (at off + j..) inside every
        // residual; parameter indices are in bounds (caller).
        unsafe {
            let mut v = [
                _mm512_add_ps(_mm512_loadu_ps(p.add(j)), b),
                _mm512_add_ps(_mm512_loadu_ps(p.add(j + 16)), b),
                _mm512_add_ps(_mm512_loadu_ps(p.add(j + 32)), b),
                _mm512_add_ps(_mm512_loadu_ps(p.add(j + 48)), b),
            ];
            for po in e.post {
                for (q, vq) in v.iter_mut().enumerate() {
                    *vq = post16(e, po, *vq, Chan::Row(ch), off + j + 16 * q, 0xffff);
                }
            }
            for (q, vq) in v.iter().enumerate() {
                _mm512_storeu_ps(p.add(j + 16 * q), *vq);
            }
        }
        j += 64;
    }
    while j < n {
        let m = first_lanes(n - j);
        // SAFETY: the masked lanes lie inside the row and (at off + j..) inside every
        // residual; parameter indices are in bounds (caller).
        unsafe {
            let mut v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p.add(j)), b);
            for po in e.post {
                v = post16(e, po, v, Chan::Row(ch), off + j, m);
            }
            _mm512_mask_storeu_ps(p.add(j), m, v);
        }
        j += 16;
    }
}

/// Where a vector's per-channel parameters (Affine, PRelu) come from.
#[derive(Clone, Copy)]
enum Chan {
    /// One channel for every lane (channels along the rows of C): its index.
    Row(usize),
    /// A channel per lane (channels along the columns): the first lane's index.
    Cols(usize),
}

/// One post-op on the lanes `m` of a vector whose channels are `ch` and whose residual
/// elements start at `at`.
///
/// # Safety
/// AVX-512F/DQ must be available; the lanes of `m` at `at` lie inside every residual of
/// `e`, every per-channel parameter holds the channels of `ch` (for `Cols`, those of
/// the lanes of `m`).
#[inline(always)]
unsafe fn post16(
    e: &Epilogue<'_>,
    po: &PostOpRt,
    v: __m512,
    ch: Chan,
    at: usize,
    m: __mmask16,
) -> __m512 {
    // The parameter vector of `p` for these lanes.
    // SAFETY: in bounds (caller).
    let param = |p: &[f32]| unsafe { chan_param(p, ch, m) };
    // SAFETY: in bounds (caller); the features are enabled in every caller.
    unsafe {
        match po {
            PostOpRt::Unary(u) => unary16(*u, v),
            PostOpRt::Affine { scale, shift } => _mm512_fmadd_ps(v, param(scale), param(shift)),
            PostOpRt::PRelu { slope } => {
                let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, _mm512_setzero_ps());
                _mm512_mask_mul_ps(v, neg, v, param(slope))
            }
            PostOpRt::AddInput { slot } => {
                let r = e.residuals.get_unchecked(*slot).as_ptr().add(at);
                _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r))
            }
        }
    }
}

/// The lanes `m` of per-channel parameter `p` for channels `ch`.
///
/// # Safety
/// AVX-512F available; `p` holds the channels of `ch` (for `Cols`, those of the lanes
/// of `m`).
#[inline(always)]
unsafe fn chan_param(p: &[f32], ch: Chan, m: __mmask16) -> __m512 {
    // SAFETY: as the caller guarantees.
    unsafe {
        match ch {
            Chan::Row(c) => _mm512_set1_ps(*p.get_unchecked(c)),
            Chan::Cols(c) => _mm512_maskz_loadu_ps(m, p.as_ptr().add(c)),
        }
    }
}

/// The table's `softmax_row` entry: max, `e^(x - max)` with the sum in registers, then
/// the scaling (or the log shift), each pass 16 lanes at a time.
pub(super) fn softmax_row(x: &[f32], add: &[f32], y: &mut [f32], log: bool) {
    let y = &mut y[..x.len()];
    let add = super::softmax_add_row(add, x.len());
    // SAFETY: reachable only through the AVX-512 table (features detected); y and add
    // are as long as x.
    unsafe { softmax_row512(x, add, y, log) }
}

/// The table's `exp_row` entry: softmax's max and exponential passes.
pub(super) fn exp_row(x: &[f32], add: &[f32], y: &mut [f32]) -> (f32, f32) {
    let y = &mut y[..x.len()];
    let add = super::softmax_add_row(add, x.len());
    // SAFETY: reachable only through the AVX-512 table (features detected); y and add
    // are as long as x.
    unsafe { exp_pass512(x, add, y) }
}

/// Lanes `m` of `x + add` at `j` (0 elsewhere).
///
/// # Safety
/// AVX-512F available; the lanes of `m` at `j` inside `x` and `add`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_sum(x: *const f32, add: Option<*const f32>, m: __mmask16, j: usize) -> __m512 {
    // SAFETY: masked lanes inside x and add (caller).
    unsafe {
        let v = _mm512_maskz_loadu_ps(m, x.add(j));
        match add {
            Some(a) => _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, a.add(j))),
            None => v,
        }
    }
}

/// Softmax's first two passes: the max of `x + add` (NaN ignored), then `y = e^(x + add
/// - max)` with the sum in registers; returns `(max, sum)`.
///
/// # Safety
/// AVX-512F/DQ must be available; `y.len() == x.len()`, and `add` (when given) as long.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn exp_pass512(x: &[f32], add: Option<&[f32]>, y: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let ap = add.map(|a| a.as_ptr());
    let mask_at = |j: usize| first_lanes(n - j);
    // Max, NaN ignored (vmaxps keeps its second operand, the running max, for a NaN).
    let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut j = 0;
    while j < n {
        let m = mask_at(j);
        // SAFETY: masked lanes inside x and add.
        let v = _mm512_mask_mov_ps(mv, m, unsafe { load_sum(xp, ap, m, j) });
        mv = _mm512_max_ps(v, mv);
        j += 16;
    }
    let mx = _mm512_reduce_max_ps(mv);
    let mb = _mm512_set1_ps(mx);
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut j = 0;
    while j < n {
        let m = mask_at(j);
        // SAFETY: masked lanes inside x, add and y.
        unsafe {
            let v = exp16_nonpos(_mm512_sub_ps(load_sum(xp, ap, m, j), mb), m);
            _mm512_mask_storeu_ps(yp.add(j), m, v);
            if (j / 16) % 2 == 0 {
                s0 = _mm512_add_ps(s0, v);
            } else {
                s1 = _mm512_add_ps(s1, v);
            }
        }
        j += 16;
    }
    (mx, _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)))
}

/// # Safety
/// AVX-512F/DQ must be available; `y.len() == x.len()`, and `add` (when given) as long.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn softmax_row512(x: &[f32], add: Option<&[f32]>, y: &mut [f32], log: bool) {
    // SAFETY: y as long as x, add too (caller).
    let (mx, sum) = unsafe { exp_pass512(x, add, y) };
    let n = x.len();
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let ap = add.map(|a| a.as_ptr());
    let mask_at = |j: usize| first_lanes(n - j);
    if log {
        let sh = _mm512_set1_ps(mx + sum.ln());
        let mut j = 0;
        while j < n {
            let m = mask_at(j);
            // SAFETY: masked lanes inside y.
            unsafe {
                let v = _mm512_sub_ps(load_sum(xp, ap, m, j), sh);
                _mm512_mask_storeu_ps(yp.add(j), m, v);
            }
            j += 16;
        }
    } else {
        let inv = _mm512_set1_ps(1.0 / sum);
        let mut j = 0;
        while j < n {
            let m = mask_at(j);
            // SAFETY: masked lanes inside y.
            unsafe {
                let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, yp.add(j)), inv);
                _mm512_mask_storeu_ps(yp.add(j), m, v);
            }
            j += 16;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::UnaryOp;
    use crate::kernels::body::{epilogue::Epilogue, unary::PostOpRt};
    use crate::kernels::isa::twin_test;
    use crate::kernels::testutil::rand_vec;

    /// The ops with a 16-lane form, over values spanning the exp range, infinities and
    /// NaN (only for ops with finite results on them), at lengths around the lane count.
    fn lane_ops() -> Vec<UnaryOp> {
        vec![
            UnaryOp::Relu,
            UnaryOp::Clip {
                min: -0.5,
                max: 6.0,
            },
            UnaryOp::Identity,
            UnaryOp::Sigmoid,
            UnaryOp::Silu,
            UnaryOp::HardSwish,
            UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            UnaryOp::LeakyRelu { alpha: 0.1 },
            UnaryOp::Exp,
            UnaryOp::Gelu { tanh_approx: false },
        ]
    }

    fn values(n: usize, op: UnaryOp) -> Vec<f32> {
        let mut x: Vec<f32> = (0..n).map(|i| (i as f32 - 50.0) * 1.7).collect();
        if n > 5 {
            x[3] = f32::NAN;
            // Infinite outputs cannot be compared within a tolerance: only the bounded
            // functions see infinite inputs.
            let bounded = matches!(
                op,
                UnaryOp::Sigmoid | UnaryOp::Clip { .. } | UnaryOp::HardSigmoid { .. }
            );
            if bounded {
                x[1] = f32::INFINITY;
                x[2] = f32::NEG_INFINITY;
            }
            x[4] = -0.0;
            x[5] = 1e-30;
        }
        x
    }

    /// Softmax's exponential of non-positive lanes gives exp16's bits (zeros below the
    /// normal range, -inf, NaN, -0 included) and zeros outside `keep`.
    #[test]
    fn exp_of_non_positive_lanes_is_exp16() {
        if !crate::kernels::isa::tables()
            .iter()
            .any(|t| t.isa == crate::kernels::isa::Isa::Avx512)
        {
            return;
        }
        use std::arch::x86_64::*;
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
        for (c, chunk) in xs.chunks(16).enumerate() {
            let mut v = [0.0f32; 16];
            v[..chunk.len()].copy_from_slice(chunk);
            let keep = (0xffffu32 >> (c % 5)) as u16;
            let (mut a, mut b) = ([0.0f32; 16], [0.0f32; 16]);
            // SAFETY: AVX-512 detected above; 16-float arrays.
            unsafe {
                let x = _mm512_loadu_ps(v.as_ptr());
                _mm512_storeu_ps(a.as_mut_ptr(), super::exp16_nonpos(x, keep));
                _mm512_storeu_ps(b.as_mut_ptr(), super::exp16(x));
            }
            for l in 0..16 {
                let want = if keep >> l & 1 == 1 { b[l] } else { 0.0 };
                assert!(
                    a[l].to_bits() == want.to_bits() || (a[l].is_nan() && want.is_nan()),
                    "x {} lane {l}: {} vs {want}",
                    v[l],
                    a[l]
                );
            }
        }
    }

    twin_test!(unary_lane_ops_match_portable, 1e-6, |t| {
        let mut out = Vec::new();
        for op in lane_ops() {
            for n in [0, 1, 7, 15, 16, 17, 31, 32, 33, 100] {
                let mut x = values(n, op);
                (t.unary)(op, &mut x);
                out.extend(x);
            }
        }
        for n in [1, 16, 19, 40] {
            let mut x = values(n, UnaryOp::Sigmoid);
            (t.sigmoid)(&mut x);
            out.extend(x);
        }
        out
    });

    twin_test!(epilogue_rows_match_portable, 1e-6, |t| {
        let mut out = Vec::new();
        // Per-channel parameters long enough for channels along rows and columns.
        let (bias, scale, shift, slope) = (
            rand_vec(48, 1),
            rand_vec(48, 2),
            rand_vec(48, 3),
            rand_vec(48, 4),
        );
        let res = rand_vec(12 * 40, 5);
        let residuals: [&[f32]; 2] = [&res, &res[7..]];
        let mut chains: Vec<Vec<PostOpRt>> = lane_ops()
            .into_iter()
            .filter(|&u| u != UnaryOp::Exp)
            .map(|u| vec![PostOpRt::Unary(u)])
            .collect();
        chains.push(vec![]);
        chains.push(vec![
            PostOpRt::Affine { scale, shift },
            PostOpRt::Unary(UnaryOp::Silu),
            PostOpRt::AddInput { slot: 1 },
            PostOpRt::PRelu { slope },
            PostOpRt::AddInput { slot: 0 },
        ]);
        // A transformer MLP's (bias per column) and projection's epilogues.
        chains.push(vec![PostOpRt::Unary(UnaryOp::Gelu { tanh_approx: false })]);
        chains.push(vec![PostOpRt::AddInput { slot: 1 }]);
        for post in &chains {
            for (with_bias, channel_is_row) in
                [(true, true), (false, true), (true, false), (false, false)]
            {
                for (j0, nr) in [(0, 1), (1, 15), (0, 16), (3, 17), (2, 33)] {
                    let e = Epilogue {
                        bias: with_bias.then_some(&bias[..]),
                        channel_is_row,
                        channel_offset: 1,
                        // Gemm's `beta * C` / a MatMul's residual as the addend.
                        addend: (!channel_is_row && with_bias).then_some(&res[..]),
                        post,
                        residuals: &residuals,
                    };
                    let mut c: Vec<f32> = rand_vec(11 * 40, 6).iter().map(|v| v * 200.0).collect();
                    (t.epilogue)(&e, &mut c, 40, 2, 5, j0, nr);
                    out.extend_from_slice(&c);
                }
            }
        }
        out
    });
}

//! Element-wise single-input functions on f32 values and slices (the bodies every kernel
//! table builds), and the runtime form of fused epilogue steps ([`PostOpRt`]).
//!
//! Every function follows the ONNX definition; `Round` rounds half to even. `Erf`, `Tanh`,
//! `Exp` and the functions built on them (`Gelu`, `Sigmoid`, `Silu`) use branch-free f32
//! approximations so that loops over them vectorise: `erf` is a 13/8 odd/even rational
//! in `x` over `[-4, 4]` (within 5e-7 absolute and 3e-7 relative near 0; ±1 beyond,
//! where erf differs from ±1 by less than 2e-8), `tanh` a 13/6 rational (see [`tanh`]).

use crate::ir::UnaryOp;

/// A fused epilogue step as the kernels run it (channels resolved, residual by slot).
#[derive(Debug, Clone, PartialEq)]
pub enum PostOpRt {
    /// An element-wise function.
    Unary(UnaryOp),
    /// `y * scale[c] + shift[c]`.
    Affine { scale: Vec<f32>, shift: Vec<f32> },
    /// `y < 0 ? y * slope[c] : y`.
    PRelu { slope: Vec<f32> },
    /// `y + residual`, where the residual is entry `slot` of the epilogue's residual list.
    AddInput { slot: usize },
}

/// Shared body of the tables' `unary` entry: simple activations as branch-free loops
/// that vectorise, the rest through [`unary_scalar`].
#[inline(always)]
pub fn apply_unary(op: UnaryOp, x: &mut [f32]) {
    match op {
        UnaryOp::Relu => x
            .iter_mut()
            .for_each(|v| *v = if *v > 0.0 { *v } else { 0.0 }),
        UnaryOp::Clip { min, max } => x.iter_mut().for_each(|v| {
            let a = if *v > min { *v } else { min };
            *v = if a < max { a } else { max };
        }),
        UnaryOp::Identity => {}
        UnaryOp::Neg => x.iter_mut().for_each(|v| *v = -*v),
        UnaryOp::Abs => x.iter_mut().for_each(|v| *v = v.abs()),
        UnaryOp::LeakyRelu { alpha } => x
            .iter_mut()
            .for_each(|v| *v = if *v < 0.0 { *v * alpha } else { *v }),
        UnaryOp::HardSwish => x
            .iter_mut()
            .for_each(|v| *v *= (*v * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)),
        UnaryOp::HardSigmoid { alpha, beta } => x
            .iter_mut()
            .for_each(|v| *v = (*v * alpha + beta).clamp(0.0, 1.0)),
        UnaryOp::Sigmoid => x.iter_mut().for_each(|v| *v = sigmoid(*v)),
        UnaryOp::Silu => x.iter_mut().for_each(|v| *v = silu(*v)),
        UnaryOp::Exp => x.iter_mut().for_each(|v| *v = exp(*v)),
        UnaryOp::Erf => x.iter_mut().for_each(|v| *v = erf(*v)),
        UnaryOp::Tanh => x.iter_mut().for_each(|v| *v = tanh(*v)),
        UnaryOp::Gelu { tanh_approx: false } => x.iter_mut().for_each(|v| *v = gelu(*v)),
        UnaryOp::Gelu { tanh_approx: true } => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        _ => x.iter_mut().for_each(|v| *v = unary_scalar(op, *v)),
    }
}

/// `op` applied to one value.
pub fn unary_scalar(op: UnaryOp, v: f32) -> f32 {
    match op {
        UnaryOp::Relu => v.max(0.0),
        UnaryOp::LeakyRelu { alpha } => {
            if v < 0.0 {
                v * alpha
            } else {
                v
            }
        }
        UnaryOp::Clip { min, max } => v.max(min).min(max),
        UnaryOp::Sigmoid => sigmoid(v),
        UnaryOp::Silu => silu(v),
        UnaryOp::HardSigmoid { alpha, beta } => (v * alpha + beta).clamp(0.0, 1.0),
        UnaryOp::HardSwish => v * (v * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0),
        UnaryOp::Elu { alpha } => {
            if v < 0.0 {
                alpha * (v.exp() - 1.0)
            } else {
                v
            }
        }
        UnaryOp::Selu { alpha, gamma } => {
            if v <= 0.0 {
                gamma * alpha * (v.exp() - 1.0)
            } else {
                gamma * v
            }
        }
        UnaryOp::Tanh => tanh(v),
        UnaryOp::Gelu { tanh_approx: false } => gelu(v),
        UnaryOp::Gelu { tanh_approx: true } => gelu_tanh(v),
        UnaryOp::Erf => erf(v),
        UnaryOp::Softplus => {
            if v > 20.0 {
                v
            } else {
                v.exp().ln_1p()
            }
        }
        UnaryOp::Exp => exp(v),
        UnaryOp::Log => v.ln(),
        UnaryOp::Abs => v.abs(),
        UnaryOp::Neg => -v,
        UnaryOp::Sqrt => v.sqrt(),
        UnaryOp::Reciprocal => 1.0 / v,
        UnaryOp::Floor => v.floor(),
        UnaryOp::Ceil => v.ceil(),
        UnaryOp::Round => v.round_ties_even(),
        UnaryOp::Sign => {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Not => {
            if v == 0.0 {
                1.0
            } else {
                0.0
            }
        }
        UnaryOp::Sin => v.sin(),
        UnaryOp::Cos => v.cos(),
        UnaryOp::Identity => v,
    }
}

/// Logistic function, stable for large |v|, branch-free (vectorises): with
/// `e = exp(-|v|)`, `1 / (1 + e)` for `v >= 0` and `e / (1 + e)` below.
#[inline(always)]
pub fn sigmoid(v: f32) -> f32 {
    let e = exp(-v.abs());
    let s = 1.0 / (1.0 + e);
    if v >= 0.0 {
        s
    } else {
        e * s
    }
}

/// Constants of [`silu`] (shared with the tables' vector forms).
pub mod silu_consts {
    /// 1.5 · 2^23: adding it rounds to an integer held in the low mantissa bits.
    pub const ROUND: f32 = 12_582_912.0;
    /// `y = -x·log2(e)` is clamped to `[Y_LO, Y_HI]`: `2^y` stays a normal number and
    /// `1 + 2^y` finite.
    pub const Y_LO: f32 = -125.0;
    /// See [`Y_LO`].
    pub const Y_HI: f32 = 126.0;
    /// `2^f - 1` on `|f| <= 1/2` as `f·(P0 + f·(P1 + ...))`: a degree-5 minimax fit of
    /// `2^f`, relative error 1.9e-7 in f32 (P0 is the fit's, 3e-7 below ln 2).
    #[allow(clippy::approx_constant)]
    pub const P: [f32; 5] = [
        0.693_147,
        0.240_222_42,
        0.055_507_336,
        0.009_671_513,
        0.001_326_472_7,
    ];
}

/// SiLU, `x · sigmoid(x)`, as `x / (1 + 2^y)` with `y = -x·log2(e)` clamped to
/// `[-125, 126]` (beyond it the result is `x` or below 1e-36 in magnitude): `2^y` is
/// `2^n · 2^f`, `n` the nearest integer, `2^f` a degree-5 polynomial, `2^n` added to the
/// exponent bits. Within `3e-7 + 1e-7·|x|` relative of the exact value for x >= -87
/// (the second term for negative x only: the rounding of `y` carried into `2^y`), below
/// 1e-36 in magnitude further down; +inf gives +inf, -inf gives -inf, NaN stays NaN. One
/// exponential, no branch (vectorises), and half the work of `x * sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    use silu_consts::{P, ROUND, Y_HI, Y_LO};
    let y = (x * -std::f32::consts::LOG2_E).clamp(Y_LO, Y_HI);
    let y = if y.is_nan() { 0.0 } else { y };
    let nr = y + ROUND;
    let f = y - (nr - ROUND);
    let p = 1.0 + f * (P[0] + f * (P[1] + f * (P[2] + f * (P[3] + f * P[4]))));
    let e = f32::from_bits(p.to_bits().wrapping_add(nr.to_bits() << 23));
    x / (1.0 + e)
}

/// `e^x` within 1e-6 relative for normal results, branch-free so that loops over it vectorise:
/// `x = n·ln2 + r` with `|r| <= ln2/2`, `e^r` by a degree-7 Taylor polynomial, `2^n`
/// built in the exponent bits. Overflows to +inf above 88.72, flushes results below
/// `f32::MIN_POSITIVE` (x < -87.33) to 0; NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.33, 88.72);
    // 2^n must stay a normal number: near the top, |r| grows to 0.67 instead.
    let n = ((xc * LOG2E + ROUND) - ROUND).clamp(-126.0, 127.0);
    // n as an integer read from the mantissa bits (an `as i32` cast would not vectorise:
    // it must saturate and map NaN to 0).
    let ni = (n + ROUND).to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits((ni.wrapping_add(127) << 23) as u32);
    let y = p * scale;
    if x > 88.72 {
        f32::INFINITY
    } else if x < -87.33 {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

/// Coefficients of [`erf`]'s rational approximation `x * A(x^2) / B(x^2)` on
/// `[-4, 4]`, lowest power first (shared with the tables' vector forms).
pub mod erf_coeffs {
    /// Numerator, odd powers 1..13 (as a polynomial in `x^2` after the factor `x`).
    pub const A: [f32; 7] = [
        -1.609_603_3e-2,
        -2.954_6e-3,
        -7.349_906_3e-4,
        -5.692_506_4e-5,
        -2.101_024e-6,
        2.770_681_4e-8,
        -2.726_142_3e-10,
    ];
    /// Denominator, even powers 0..8.
    pub const B: [f32; 5] = [
        -1.426_473_9e-2,
        -7.373_329e-3,
        -1.682_827e-3,
        -2.133_740_6e-4,
        -1.456_607_2e-5,
    ];
}

/// Error function (see the module doc for the method): `x·P(x²) / Q(x²)` with `x`
/// clamped to `[-4, 4]`, exactly ±1 from |x| = 3.9 on; NaN stays NaN.
#[inline(always)]
pub fn erf(v: f32) -> f32 {
    use erf_coeffs::{A, B};
    let [a1, a3, a5, a7, a9, a11, a13] = A;
    let [b0, b2, b4, b6, b8] = B;
    let x = v.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = x * (a1 + x2 * (a3 + x2 * (a5 + x2 * (a7 + x2 * (a9 + x2 * (a11 + x2 * a13))))));
    let q = b0 + x2 * (b2 + x2 * (b4 + x2 * (b6 + x2 * b8)));
    // From 3.9 on erf rounds to ±1 in f32; the rational is 1e-7 short of it.
    if v.abs() >= 3.9 {
        1.0f32.copysign(v)
    } else {
        p / q
    }
}

/// `tanh(v)` by a branch-free rational approximation (13/6 odd/even polynomials over
/// `[-7.9, 7.9]`, beyond which tanh is ±1 in f32), within a few ulp; NaN stays NaN.
#[inline(always)]
pub fn tanh(v: f32) -> f32 {
    const CLAMP: f32 = 7.905_311;
    const A1: f32 = 4.893_524_6e-3;
    const A3: f32 = 6.372_619_3e-4;
    const A5: f32 = 1.485_722_4e-5;
    const A7: f32 = 5.122_297e-8;
    const A9: f32 = -8.604_672e-11;
    const A11: f32 = 2.000_188e-13;
    const A13: f32 = -2.760_768_5e-16;
    const B0: f32 = 4.893_525e-3;
    const B2: f32 = 2.268_434_7e-3;
    const B4: f32 = 1.185_347_1e-4;
    const B6: f32 = 1.198_258_4e-6;
    let x = v.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    let p = x * (A1 + x2 * (A3 + x2 * (A5 + x2 * (A7 + x2 * (A9 + x2 * (A11 + x2 * A13))))));
    let q = B0 + x2 * (B2 + x2 * (B4 + x2 * B6));
    p / q
}

/// Exact GELU: `0.5·v·(1 + erf(v / √2))`.
#[inline(always)]
pub fn gelu(v: f32) -> f32 {
    0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU, tanh form: `0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³)))`.
#[inline(always)]
pub fn gelu_tanh(v: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    0.5 * v * (1.0 + tanh(C * (v + 0.044715 * v * v * v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x · sigmoid(x)` in f64.
    fn silu_exact(x: f32) -> f64 {
        let x = f64::from(x);
        x / (1.0 + (-x).exp())
    }

    /// Relative error bound of [`silu`]: 3e-7, plus the rounding of `y = -x·log2(e)`
    /// carried into `2^y` for negative `x` (1e-7 per unit of |x|).
    fn silu_bound(x: f32) -> f64 {
        3e-7 + 1e-7 * f64::from((-x).max(0.0))
    }

    #[test]
    fn silu_is_within_its_bound_of_the_exact_value() {
        let mut worst = 0.0f64;
        // Dense from -87 (where `2^y` reaches its clamp) to where it saturates at x.
        for i in -348_000..=400_000 {
            let x = i as f32 * 2.5e-4;
            let want = silu_exact(x);
            let err = (f64::from(silu(x)) - want).abs() / want.abs().max(f64::MIN_POSITIVE);
            worst = worst.max(if x == 0.0 { 0.0 } else { err / silu_bound(x) });
        }
        for x in [-60.0f32, -30.0, 30.0, 60.0, 89.0, 1e4, 3e38] {
            let want = silu_exact(x);
            let got = f64::from(silu(x));
            worst = worst.max((got - want).abs() / want.abs() / silu_bound(x));
        }
        assert!(worst <= 1.0, "worst error {worst} of the bound");
    }

    #[test]
    fn silu_edge_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!(silu(f32::NAN).is_nan());
        assert_eq!(silu(f32::INFINITY), f32::INFINITY);
        // Far below the range the result is x / 2^126: tiny and negative.
        let far = silu(-1e6);
        assert!(far < 0.0 && far > -1e-30, "{far}");
        // The slice form gives the value form's bits.
        let xs: Vec<f32> = (0..50).map(|i| (i as f32 - 25.0) * 0.77).collect();
        let mut ys = xs.clone();
        apply_unary(UnaryOp::Silu, &mut ys);
        for (x, y) in xs.iter().zip(&ys) {
            assert_eq!(y.to_bits(), silu(*x).to_bits(), "{x}");
        }
    }
}

//! Element-wise single-input functions on f32 values and slices (the bodies every kernel
//! table builds), and the runtime form of fused epilogue steps ([`PostOpRt`]).
//!
//! Every function follows the ONNX definition; `Round` rounds half to even, `Erf` is
//! evaluated in f64 by its power series (error far below f32 precision for |x| < 4, and
//! ±1 beyond, where erf differs from ±1 by less than 2e-8).

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
        UnaryOp::Silu => x.iter_mut().for_each(|v| *v *= sigmoid(*v)),
        UnaryOp::Exp => x.iter_mut().for_each(|v| *v = exp(*v)),
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
        UnaryOp::Silu => v * sigmoid(v),
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
        UnaryOp::Tanh => v.tanh(),
        UnaryOp::Gelu { tanh_approx } => {
            if tanh_approx {
                let c = (2.0f32 / std::f32::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            } else {
                0.5 * v * (1.0 + erf(v / std::f32::consts::SQRT_2))
            }
        }
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
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2^n from the bits of `n + ROUND` (n sits in the low mantissa bits): integer ops
    // only, which vectorise; `n as i32` (a saturating cast) would be done lane by lane.
    let scale = f32::from_bits(
        (n + ROUND)
            .to_bits()
            .wrapping_sub(ROUND.to_bits())
            .wrapping_add(127)
            << 23,
    );
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

/// Error function (see the module doc for the method).
pub fn erf(v: f32) -> f32 {
    let x = v as f64;
    if x.abs() >= 4.0 {
        return x.signum() as f32;
    }
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0f64;
    while term.abs() > 1e-17 * sum.abs().max(1e-300) {
        n += 1.0;
        term *= -x2 / n;
        sum += term / (2.0 * n + 1.0);
        if n > 200.0 {
            break;
        }
    }
    (sum * 2.0 / std::f64::consts::PI.sqrt()) as f32
}

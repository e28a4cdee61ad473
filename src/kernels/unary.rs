//! Element-wise single-input functions on f32 slices through the kernel table, and the
//! scalar functions other families share.

pub use super::body::unary::{erf, exp, gelu, sigmoid, tanh, unary_scalar, PostOpRt};
use crate::ir::UnaryOp;

/// Applies `op` in place to every element of `x` (the best table of this CPU).
pub fn apply_unary(op: UnaryOp, x: &mut [f32]) {
    (super::table().unary)(op, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_sigmoid_match_libm() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.7 {
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 1e-6, "exp relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        let mut x = -40.0f32;
        while x < 40.0 {
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            let got = sigmoid(x) as f64;
            assert!(
                (got - want).abs() <= 1e-6 * want + 1e-30,
                "sigmoid({x}) = {got}, want {want}"
            );
            x += 0.0173;
        }
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert!(sigmoid(f32::NAN).is_nan());
        // The table's vectorised sweep agrees with the scalar function (to the last
        // bits: a table may take the reciprocal by estimate and Newton step).
        let mut v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.05 - 25.0).collect();
        let want: Vec<f32> = v.iter().map(|&x| sigmoid(x)).collect();
        apply_unary(UnaryOp::Sigmoid, &mut v);
        for (g, w) in v.iter().zip(&want) {
            assert!((g - w).abs() <= 2e-7 * w, "sigmoid sweep {g} vs {w}");
        }
    }

    #[test]
    fn erf_matches_known_values() {
        let cases = [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
            (3.5, 0.999_999_3),
            (5.0, 1.0),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {}", erf(x));
        }
    }

    /// erf in f64 by its power series, the reference for the f32 form; ±1 from
    /// |x| = 4 on, where erf differs from ±1 by less than 2e-8 (and the series loses
    /// precision to cancellation).
    fn erf_f64(x: f64) -> f64 {
        if x.abs() >= 4.0 {
            return x.signum();
        }
        let (x2, mut term, mut sum, mut n) = (x * x, x, x, 0.0f64);
        while term.abs() > 1e-18 * sum.abs().max(1e-300) && n < 400.0 {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_tanh_gelu_match_f64_over_dense_range() {
        let (mut worst_erf, mut worst_tanh, mut worst_rel) = (0f64, 0f64, 0f64);
        let mut x = -6.0f32;
        while x <= 6.0 {
            let want = erf_f64(x as f64);
            worst_erf = worst_erf.max((erf(x) as f64 - want).abs());
            if x.abs() < 0.5 && x != 0.0 {
                worst_rel = worst_rel.max(((erf(x) as f64 - want) / want).abs());
            }
            let wt = (x as f64).tanh();
            worst_tanh = worst_tanh.max((tanh(x) as f64 - wt).abs());
            let wg = 0.5 * x as f64 * (1.0 + erf_f64(x as f64 / 2f64.sqrt()));
            let g = gelu(x) as f64;
            assert!(
                (g - wg).abs() <= 2e-6 * (1.0 + wg.abs()),
                "gelu({x}) = {g}, want {wg}"
            );
            x += 0.000_37;
        }
        assert!(worst_erf < 1e-6, "erf absolute error {worst_erf}");
        assert!(worst_rel < 1e-6, "erf relative error near 0: {worst_rel}");
        assert!(worst_tanh < 1e-6, "tanh absolute error {worst_tanh}");
        for t in [1e-30f32, 1e-10, 1e-5] {
            let rel = (erf(t) as f64 / erf_f64(t as f64) - 1.0).abs();
            assert!(rel < 1e-6, "erf({t}) relative error {rel}");
        }
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf(1e30), 1.0);
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        assert!(gelu(f32::NAN).is_nan());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu(-1e30), 0.0);
    }

    crate::kernels::isa::twin_test!(unary_tables_match_portable, 1e-6, |t| {
        let ops = [
            UnaryOp::Erf,
            UnaryOp::Tanh,
            UnaryOp::Gelu { tanh_approx: false },
            UnaryOp::Gelu { tanh_approx: true },
            UnaryOp::Exp,
            UnaryOp::Sigmoid,
        ];
        let mut out = Vec::new();
        for op in ops {
            for n in [0, 1, 7, 8, 9, 31, 33, 100] {
                let mut x: Vec<f32> = (0..n).map(|i| (i as f32 - 50.0) * 0.173).collect();
                // Infinite outputs cannot be compared within a tolerance: only the
                // bounded functions see infinite inputs.
                let bounded = matches!(op, UnaryOp::Erf | UnaryOp::Tanh | UnaryOp::Sigmoid);
                if n > 3 && bounded {
                    x[1] = f32::INFINITY;
                    x[2] = f32::NEG_INFINITY;
                }
                if n > 3 {
                    x[3] = f32::NAN;
                }
                (t.unary)(op, &mut x);
                out.extend(x);
            }
        }
        out
    });

    #[test]
    fn vector_paths_match_scalar() {
        let ops = [
            UnaryOp::Relu,
            UnaryOp::Silu,
            UnaryOp::Clip {
                min: -0.5,
                max: 0.25,
            },
            UnaryOp::HardSwish,
            UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            UnaryOp::LeakyRelu { alpha: 0.1 },
            UnaryOp::Neg,
            UnaryOp::Abs,
            UnaryOp::Sigmoid,
            UnaryOp::Erf,
            UnaryOp::Tanh,
            UnaryOp::Gelu { tanh_approx: false },
            UnaryOp::Gelu { tanh_approx: true },
            UnaryOp::Exp,
        ];
        let x: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.37).collect();
        for op in ops {
            let mut y = x.clone();
            apply_unary(op, &mut y);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - unary_scalar(op, *b)).abs() < 1e-6, "{op:?}");
            }
        }
        assert_eq!(unary_scalar(UnaryOp::Round, 2.5), 2.0);
        assert_eq!(unary_scalar(UnaryOp::Round, -1.5), -2.0);
        assert_eq!(unary_scalar(UnaryOp::Sign, -3.0), -1.0);
    }
}

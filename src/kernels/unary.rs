//! Element-wise single-input functions on f32 slices through the kernel table, and the
//! scalar functions other families share.

pub use super::body::unary::{erf, exp, sigmoid, unary_scalar, PostOpRt};
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
        // The vectorised sweep agrees with the scalar function.
        let mut v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.05 - 25.0).collect();
        let want: Vec<f32> = v.iter().map(|&x| sigmoid(x)).collect();
        apply_unary(UnaryOp::Sigmoid, &mut v);
        assert_eq!(v, want);
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

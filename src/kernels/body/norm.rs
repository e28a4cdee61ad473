//! Row bodies of the normalisation family every kernel table builds: Softmax /
//! LogSoftmax and LayerNorm over one contiguous row.
//!
//! Reductions keep [`LANES`] partial results (max, sums) in an array so that they
//! vectorise without reassociation; the element-wise passes are plain loops over
//! branch-free functions.

use super::unary::exp;

/// Lanes of the partial reductions.
const LANES: usize = 8;

/// Largest element of `x` (NaN ignored, like `f32::max`; `-inf` when empty).
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut m = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for a in acc {
        m = m.max(a);
    }
    m
}

/// Sum of `x` in [`LANES`] partial sums.
#[inline(always)]
fn row_sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    chunks.remainder().iter().sum::<f32>() + acc.iter().sum::<f32>()
}

/// Mean and variance of `x` (non-empty), accumulated in f64 in [`LANES`] partial sums
/// (two passes: the variance sums squared deviations from the mean).
#[inline(always)]
fn row_stats(x: &[f32]) -> (f64, f64) {
    let mut acc = [0.0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64;
        }
    }
    let sum = chunks.remainder().iter().map(|&v| v as f64).sum::<f64>() + acc.iter().sum::<f64>();
    let mean = sum / x.len() as f64;
    let mut acc = [0.0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let d = v as f64 - mean;
            *a += d * d;
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum();
    (mean, (tail + acc.iter().sum::<f64>()) / x.len() as f64)
}

/// Softmax's exponentials of the row `x + add` into `y` (as for [`softmax_row`], which
/// shares this body); returns the row's max and their sum.
#[inline(always)]
pub fn exp_row(x: &[f32], add: &[f32], y: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    let y = &mut y[..n];
    let m = if add.is_empty() {
        let m = row_max(x);
        for (d, &v) in y.iter_mut().zip(x) {
            *d = exp(v - m);
        }
        m
    } else {
        for ((d, &v), &a) in y.iter_mut().zip(x).zip(&add[..n]) {
            *d = v + a;
        }
        let m = row_max(y);
        for d in y.iter_mut() {
            *d = exp(*d - m);
        }
        m
    };
    (m, row_sum(y))
}

/// Softmax (LogSoftmax when `log`) of the row `x + add` into `y` (as long as `x`; `add`
/// empty for none, else at least as long as `x`, added in f32 before anything else).
#[inline(always)]
pub fn softmax_row(x: &[f32], add: &[f32], y: &mut [f32], log: bool) {
    let n = x.len();
    let y = &mut y[..n];
    let (m, sum) = exp_row(x, add, y);
    if log {
        let sh = m + sum.ln();
        if add.is_empty() {
            for (d, &v) in y.iter_mut().zip(x) {
                *d = v - sh;
            }
        } else {
            for ((d, &v), &a) in y.iter_mut().zip(x).zip(&add[..n]) {
                *d = (v + a) - sh;
            }
        }
    } else {
        let inv = 1.0 / sum;
        for d in y.iter_mut() {
            *d *= inv;
        }
    }
}

/// LayerNorm of the row `x` into `y`: `(x - mean) / sqrt(var + eps) * scale + bias`
/// (`scale` as long as `x`, `bias` too or empty for 0); statistics in f64, the
/// normalisation in f32.
#[inline(always)]
pub fn layer_norm_row(x: &[f32], y: &mut [f32], scale: &[f32], bias: &[f32], eps: f32) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let (y, scale) = (&mut y[..n], &scale[..n]);
    let (mean, var) = row_stats(x);
    let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
    let mean = mean as f32;
    if bias.is_empty() {
        for ((d, &v), &s) in y.iter_mut().zip(x).zip(scale) {
            *d = (v - mean) * inv * s;
        }
    } else {
        let bias = &bias[..n];
        for (((d, &v), &s), &b) in y.iter_mut().zip(x).zip(scale).zip(bias) {
            *d = (v - mean) * inv * s + b;
        }
    }
}

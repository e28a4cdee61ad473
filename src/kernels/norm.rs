//! Normalisations: per-channel affine (BatchNorm in inference form), InstanceNorm over
//! each plane, LayerNorm over trailing axes. Statistics are accumulated in f64.

/// `y = x * scale[c] + shift[c]` over `[N, C, inner]`, planes `[lo, hi)` of `N*C`.
pub fn channel_affine(
    c: usize,
    inner: usize,
    scale: &[f32],
    shift: &[f32],
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    for p in lo..hi {
        let ch = p % c;
        let (s, t) = (scale[ch], shift[ch]);
        let (xs, ys) = (
            &x[p * inner..(p + 1) * inner],
            &mut y[p * inner..(p + 1) * inner],
        );
        for (d, v) in ys.iter_mut().zip(xs) {
            *d = v.mul_add(s, t);
        }
    }
}

/// Normalises each of `rows` contiguous groups of `len` elements to zero mean and unit
/// variance, then applies `scale`/`bias` indexed by `param(row, j)`.
fn normalize_rows(
    len: usize,
    eps: f32,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
    mut affine: impl FnMut(usize, usize) -> (f32, f32),
) {
    for r in lo..hi {
        let xs = &x[r * len..(r + 1) * len];
        let mean = xs.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
        let var = xs.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / len as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for (j, (d, v)) in y[r * len..(r + 1) * len].iter_mut().zip(xs).enumerate() {
            let (s, b) = affine(r, j);
            *d = ((*v as f64 - mean) * inv) as f32 * s + b;
        }
    }
}

/// InstanceNorm over `[N, C, inner]`, planes `[lo, hi)`.
#[allow(clippy::too_many_arguments)]
pub fn instance_norm(
    c: usize,
    inner: usize,
    eps: f32,
    scale: &[f32],
    bias: &[f32],
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    normalize_rows(inner, eps, x, y, lo, hi, |r, _| (scale[r % c], bias[r % c]));
}

/// LayerNorm over rows of `len` (the trailing axes), rows `[lo, hi)`; `scale`/`bias`
/// have `len` elements (`bias` may be empty = 0).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    len: usize,
    eps: f32,
    scale: &[f32],
    bias: &[f32],
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    normalize_rows(len, eps, x, y, lo, hi, |_, j| {
        (scale[j], if bias.is_empty() { 0.0 } else { bias[j] })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};

    #[test]
    fn norms_match_naive() {
        let x = rand_vec(2 * 3 * 8, 1);
        let scale = rand_vec(3, 2);
        let bias = rand_vec(3, 3);
        let mut y = vec![0.0; 48];
        instance_norm(3, 8, 1e-5, &scale, &bias, &x, &mut y, 0, 6);
        for p in 0..6 {
            let xs = &x[p * 8..p * 8 + 8];
            let m: f32 = xs.iter().sum::<f32>() / 8.0;
            let v: f32 = xs.iter().map(|a| (a - m) * (a - m)).sum::<f32>() / 8.0;
            let want: Vec<f32> = xs
                .iter()
                .map(|a| (a - m) / (v + 1e-5).sqrt() * scale[p % 3] + bias[p % 3])
                .collect();
            assert_close(&y[p * 8..p * 8 + 8], &want, 1e-4);
        }
        let s8 = rand_vec(8, 4);
        layer_norm(8, 1e-5, &s8, &[], &x, &mut y, 0, 6);
        let xs = &x[8..16];
        let m: f32 = xs.iter().sum::<f32>() / 8.0;
        let v: f32 = xs.iter().map(|a| (a - m) * (a - m)).sum::<f32>() / 8.0;
        let want: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(j, a)| (a - m) / (v + 1e-5).sqrt() * s8[j])
            .collect();
        assert_close(&y[8..16], &want, 1e-4);
        channel_affine(3, 8, &scale, &bias, &x, &mut y, 0, 6);
        assert!((y[9] - (x[9] * scale[1] + bias[1])).abs() < 1e-6);
    }
}

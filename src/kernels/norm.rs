//! Normalisations: per-channel affine (BatchNorm in inference form), InstanceNorm over
//! each plane, LayerNorm over trailing axes. Statistics are accumulated in f64.

/// `y = x * scale[c] + shift[c]` over `[N, C, inner]`, planes `[lo, hi)` of `N*C`.
#[allow(clippy::too_many_arguments)]
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
            *d = v * s + t;
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
/// have `len` elements (`bias` may be empty = 0). Runs through `isa`'s vector row
/// kernel.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    isa: super::isa::Isa,
    len: usize,
    eps: f32,
    scale: &[f32],
    bias: &[f32],
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    let row = isa.table().layer_norm_row;
    for r in lo..hi {
        let s = r * len..(r + 1) * len;
        row(&x[s.clone()], &mut y[s], scale, bias, eps);
    }
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
        layer_norm(
            crate::kernels::isa::Isa::Portable,
            8,
            1e-5,
            &s8,
            &[],
            &x,
            &mut y,
            0,
            6,
        );
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

    crate::kernels::isa::twin_test!(norm_rows_tables_match_portable, 1e-5, |t| {
        let mut out = Vec::new();
        for n in [1, 7, 8, 9, 16, 31, 64, 100, 192] {
            let x: Vec<f32> = rand_vec(n, n as u64)
                .iter()
                .map(|v| v * 3.0 + 1.0)
                .collect();
            let scale = rand_vec(n, 5);
            let bias = rand_vec(n, 6);
            let mut y = vec![0.0; n];
            (t.layer_norm_row)(&x, &mut y, &scale, &bias, 1e-5);
            out.extend_from_slice(&y);
            (t.layer_norm_row)(&x, &mut y, &scale, &[], 1e-5);
            out.extend_from_slice(&y);
            for log in [false, true] {
                (t.softmax_row)(&x, &[], &mut y, log);
                out.extend_from_slice(&y);
            }
        }
        out
    });

    #[test]
    fn softmax_and_layer_norm_rows_match_f64() {
        for n in [1usize, 5, 8, 13, 960] {
            let x: Vec<f32> = rand_vec(n, 9).iter().map(|v| v * 20.0).collect();
            let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let sum: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
            for t in crate::kernels::isa::tables() {
                let mut y = vec![0.0; n];
                (t.softmax_row)(&x, &[], &mut y, false);
                for (&v, &got) in x.iter().zip(&y) {
                    let want = (v as f64 - m).exp() / sum;
                    assert!(
                        (got as f64 - want).abs() < 1e-6 * (1.0 + want),
                        "{}",
                        t.name
                    );
                }
                (t.softmax_row)(&x, &[], &mut y, true);
                for (&v, &got) in x.iter().zip(&y) {
                    let want = v as f64 - m - sum.ln();
                    assert!((got as f64 - want).abs() < 1e-5 * (1.0 + want.abs()));
                }
                let ones = vec![1.0; n];
                (t.layer_norm_row)(&x, &mut y, &ones, &[], 1e-5);
                let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
                let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
                for (&v, &got) in x.iter().zip(&y) {
                    let want = (v as f64 - mean) / (var + 1e-5).sqrt();
                    assert!((got as f64 - want).abs() < 1e-5 * (1.0 + want.abs()));
                }
            }
        }
        // A mask row added inside the kernel gives the bits of the materialised sum.
        for n in [1usize, 15, 16, 17, 40, 960] {
            let x: Vec<f32> = rand_vec(n, 11).iter().map(|v| v * 8.0).collect();
            let add: Vec<f32> = rand_vec(n, 12)
                .iter()
                .map(|&v| if v > 0.5 { -1e4 } else { v })
                .collect();
            let sum: Vec<f32> = x.iter().zip(&add).map(|(a, b)| a + b).collect();
            for t in crate::kernels::isa::tables() {
                for log in [false, true] {
                    let (mut got, mut want) = (vec![0.0; n], vec![0.0; n]);
                    (t.softmax_row)(&x, &add, &mut got, log);
                    (t.softmax_row)(&sum, &[], &mut want, log);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{} n {n} log {log}", t.name);
                    // exp_row: the unnormalised terms and their sum, softmax's bits
                    // once scaled by 1 / sum.
                    if !log {
                        let mut e = vec![0.0; n];
                        let (_, s) = (t.exp_row)(&x, &add, &mut e);
                        let inv = 1.0 / s;
                        let scaled: Vec<f32> = e.iter().map(|v| v * inv).collect();
                        assert_eq!(bits(&scaled), bits(&want), "{} exp_row n {n}", t.name);
                    }
                }
            }
        }
        // A NaN anywhere in a softmax row makes the row NaN; -inf entries give 0.
        for t in crate::kernels::isa::tables() {
            let mut y = vec![0.0; 9];
            let mut x = vec![0.5f32; 9];
            x[3] = f32::NEG_INFINITY;
            (t.softmax_row)(&x, &[], &mut y, false);
            assert_eq!(y[3], 0.0);
            assert!((y[0] - 0.125).abs() < 1e-7);
            x[4] = f32::NAN;
            (t.softmax_row)(&x, &[], &mut y, false);
            assert!(y.iter().all(|v| v.is_nan()));
        }
    }
}

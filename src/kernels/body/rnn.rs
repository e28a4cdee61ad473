//! Slice bodies of the recurrent-cell routines every kernel table builds: the GEMV and
//! the vectorisable sigmoid / tanh.

use super::unary::{sigmoid as sigmoid1, tanh as tanh1};

/// Lanes of the register-blocked GEMV accumulators.
const LANES: usize = 8;

/// `y[i] += sum_k w[i * ldw + k] * x[k]` for every row `i < y.len()`. Four rows share
/// each load of `x`; each row keeps [`LANES`] partial sums (no reassociation needed to
/// vectorise).
#[inline(always)]
pub fn gemv_acc(w: &[f32], ldw: usize, x: &[f32], y: &mut [f32]) {
    let k = x.len();
    assert!(ldw >= k && (y.is_empty() || w.len() >= (y.len() - 1) * ldw + k));
    let full = k / LANES * LANES;
    let mut rows = y.chunks_exact_mut(4);
    let mut i = 0;
    for out in &mut rows {
        let r: [&[f32]; 4] = std::array::from_fn(|q| &w[(i + q) * ldw..(i + q) * ldw + k]);
        let mut acc = [[0.0f32; LANES]; 4];
        for c in (0..full).step_by(LANES) {
            let xv: &[f32; LANES] = x[c..c + LANES].try_into().expect("lanes");
            for (a, row) in acc.iter_mut().zip(&r) {
                let wv: &[f32; LANES] = row[c..c + LANES].try_into().expect("lanes");
                for l in 0..LANES {
                    a[l] += wv[l] * xv[l];
                }
            }
        }
        for (q, (o, a)) in out.iter_mut().zip(&acc).enumerate() {
            let tail: f32 = (full..k).map(|c| r[q][c] * x[c]).sum();
            *o += a.iter().sum::<f32>() + tail;
        }
        i += 4;
    }
    for (q, o) in rows.into_remainder().iter_mut().enumerate() {
        let row = &w[(i + q) * ldw..(i + q) * ldw + k];
        *o += row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
    }
}

/// `x[i] = sigmoid(x[i])`.
#[inline(always)]
pub fn sigmoid(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = sigmoid1(*v));
}

/// `x[i] = tanh(x[i])`.
#[inline(always)]
pub fn tanh(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = tanh1(*v));
}

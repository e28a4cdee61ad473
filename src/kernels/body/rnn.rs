//! Slice bodies of the recurrent-cell routines every kernel table builds: the GEMV and
//! the vectorisable sigmoid / tanh.

use super::unary::sigmoid as sigmoid1;

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

/// `tanh(v)` by a branch-free rational approximation (13/6 odd/even polynomials over
/// `[-7.9, 7.9]`, beyond which tanh is ±1 in f32), within a few ulp.
#[inline(always)]
pub fn tanh1(v: f32) -> f32 {
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
    let y = p / q;
    if v.is_nan() {
        v
    } else {
        y
    }
}

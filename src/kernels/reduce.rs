//! Reductions and axis ops: Reduce* over any set of axes, Softmax / LogSoftmax,
//! ArgMax / ArgMin, TopK and CumSum.
//!
//! Axis ops view the input as `[outer, len, inner]` around their axis. Reduce* walks
//! the input once, accumulating into the output through strides that are 0 on reduced
//! axes ([`ReducePlan`]).

use super::nd::{coalesce, contiguous_strides, for_rows};
use crate::ir::{ReduceOp, UnaryOp};

/// A reduction resolved to strides.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducePlan {
    /// Coalesced input dims.
    pub dims: Vec<usize>,
    /// Input strides (contiguous) and output strides (0 on reduced axes).
    pub strides: [Vec<isize>; 2],
    /// Elements reduced into each output.
    pub count: usize,
}

impl ReducePlan {
    /// Reduces `shape` over `axes` (normalised, distinct).
    pub fn new(shape: &[usize], axes: &[usize]) -> ReducePlan {
        let kept: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        let mut os = contiguous_strides(&kept);
        for &a in axes {
            os[a] = 0;
        }
        let (dims, s) = coalesce(shape, &[contiguous_strides(shape), os]);
        let count = axes.iter().map(|&a| shape[a]).product();
        ReducePlan {
            dims,
            strides: [s[0].clone(), s[1].clone()],
            count,
        }
    }

    fn walk(&self, mut f: impl FnMut(usize, usize, usize, isize)) {
        let r = self.dims.len();
        let os = self.strides[1][r - 1];
        for_rows(
            &self.dims,
            [&self.strides[0], &self.strides[1]],
            [0, 0],
            0,
            self.dims[0],
            |[i, o], n| f(i as usize, o as usize, n, os),
        );
    }
}

/// f32 reduction of `x` into `y` (every output element written). `tmp` must hold
/// `y.len()` floats (used by LogSumExp).
pub fn reduce_f32(op: ReduceOp, p: &ReducePlan, x: &[f32], y: &mut [f32], tmp: &mut [f32]) {
    let init = match op {
        ReduceOp::Max | ReduceOp::LogSumExp => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
        ReduceOp::Prod => 1.0,
        _ => 0.0,
    };
    y.fill(init);
    /// Folds every input element into its output with `f` (monomorphised per op, so
    /// that runs along a kept innermost axis, output stride 1, vectorise).
    fn acc(p: &ReducePlan, x: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        p.walk(|i, o, n, os| {
            if os == 1 {
                for (d, v) in y[o..o + n].iter_mut().zip(&x[i..i + n]) {
                    *d = f(*d, *v);
                }
            } else {
                for j in 0..n {
                    let d = &mut y[(o as isize + j as isize * os) as usize];
                    *d = f(*d, x[i + j]);
                }
            }
        })
    }
    match op {
        ReduceOp::Sum | ReduceOp::Mean => acc(p, x, y, |a, v| a + v),
        ReduceOp::Max => acc(p, x, y, |a, v| if v > a || v.is_nan() { v } else { a }),
        ReduceOp::Min => acc(p, x, y, |a, v| if v < a || v.is_nan() { v } else { a }),
        ReduceOp::Prod => acc(p, x, y, |a, v| a * v),
        ReduceOp::L1 => acc(p, x, y, |a, v| a + v.abs()),
        ReduceOp::L2 | ReduceOp::SumSquare => acc(p, x, y, |a, v| a + v * v),
        ReduceOp::LogSumExp => {
            acc(p, x, y, |a, v| a.max(v));
            let tmp = &mut tmp[..y.len()];
            tmp.fill(0.0);
            p.walk(|i, o, n, os| {
                for j in 0..n {
                    let oi = (o as isize + j as isize * os) as usize;
                    tmp[oi] += (x[i + j] - y[oi]).exp();
                }
            });
            for (m, s) in y.iter_mut().zip(tmp.iter()) {
                *m = if m.is_finite() { *m + s.ln() } else { *m };
            }
        }
    }
    match op {
        ReduceOp::Mean => y.iter_mut().for_each(|v| *v /= p.count as f32),
        ReduceOp::L2 => y.iter_mut().for_each(|v| *v = v.sqrt()),
        _ => {}
    }
}

/// i64 reduction (Sum, Prod, Max, Min, Mean) for shape math; other ops are rejected at
/// plan time.
pub fn reduce_i64(op: ReduceOp, p: &ReducePlan, x: &[i64], y: &mut [i64]) {
    let init = match op {
        ReduceOp::Max => i64::MIN,
        ReduceOp::Min => i64::MAX,
        ReduceOp::Prod => 1,
        _ => 0,
    };
    y.fill(init);
    p.walk(|i, o, n, os| {
        for j in 0..n {
            let d = &mut y[(o as isize + j as isize * os) as usize];
            let v = x[i + j];
            *d = match op {
                ReduceOp::Max => (*d).max(v),
                ReduceOp::Min => (*d).min(v),
                ReduceOp::Prod => d.wrapping_mul(v),
                _ => d.wrapping_add(v),
            };
        }
    });
    if op == ReduceOp::Mean && p.count > 0 {
        y.iter_mut().for_each(|v| *v /= p.count as i64);
    }
}

/// `[outer, len, inner]` view of a tensor around one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisView {
    /// Product of dims before the axis.
    pub outer: usize,
    /// The axis length.
    pub len: usize,
    /// Product of dims after the axis.
    pub inner: usize,
}

impl AxisView {
    /// The view of `shape` around `axis`.
    pub fn new(shape: &[usize], axis: usize) -> AxisView {
        AxisView {
            outer: shape[..axis].iter().product(),
            len: shape[axis],
            inner: shape[axis + 1..].iter().product(),
        }
    }
}

/// Columns of one softmax tile when the axis is not the last (`inner > 1`): the
/// per-column max and sum live on the stack.
pub const SOFTMAX_COLS: usize = 256;

/// Tiles of a softmax over `v`: its outer rows when the axis is the last, else each outer
/// row cut into chunks of [`SOFTMAX_COLS`] columns.
pub fn softmax_tiles(v: AxisView) -> usize {
    if v.inner == 1 {
        v.outer
    } else {
        v.outer * v.inner.div_ceil(SOFTMAX_COLS)
    }
}

/// Softmax (or LogSoftmax when `log`) along the axis, tiles `[lo, hi)` of
/// [`softmax_tiles`]. A last axis goes row by row through the table's `softmax_row`;
/// another axis runs on chunks of columns: the max and the sum of each column
/// accumulate over the axis as whole rows of the chunk, and the exponential runs
/// vectorised (the table's `Exp`) on each row of the chunk.
pub fn softmax(
    isa: super::isa::Isa,
    v: AxisView,
    log: bool,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    if v.inner == 1 {
        let row = isa.table().softmax_row;
        for o in lo..hi {
            let r = o * v.len..(o + 1) * v.len;
            row(&x[r.clone()], &[], &mut y[r], log);
        }
        return;
    }
    let unary = isa.table().unary;
    let chunks = v.inner.div_ceil(SOFTMAX_COLS);
    let mut m = [0.0f32; SOFTMAX_COLS];
    let mut sum = [0.0f32; SOFTMAX_COLS];
    for t in lo..hi {
        let (o, c) = (t / chunks, t % chunks);
        let i0 = c * SOFTMAX_COLS;
        let w = (v.inner - i0).min(SOFTMAX_COLS);
        let base = o * v.len * v.inner + i0;
        let at = |k: usize| base + k * v.inner..base + k * v.inner + w;
        let (m, sum) = (&mut m[..w], &mut sum[..w]);
        m.fill(f32::NEG_INFINITY);
        sum.fill(0.0);
        for k in 0..v.len {
            for (mv, &xv) in m.iter_mut().zip(&x[at(k)]) {
                *mv = mv.max(xv);
            }
        }
        for k in 0..v.len {
            let yr = &mut y[at(k)];
            for ((yv, &xv), &mv) in yr.iter_mut().zip(&x[at(k)]).zip(m.iter()) {
                *yv = xv - mv;
            }
            unary(UnaryOp::Exp, yr);
            for (s, &e) in sum.iter_mut().zip(yr.iter()) {
                *s += e;
            }
        }
        if log {
            for s in sum.iter_mut() {
                *s = s.ln();
            }
            for k in 0..v.len {
                let yr = &mut y[at(k)];
                for (((yv, &xv), &mv), &ls) in
                    yr.iter_mut().zip(&x[at(k)]).zip(m.iter()).zip(sum.iter())
                {
                    *yv = xv - mv - ls;
                }
            }
        } else {
            for s in sum.iter_mut() {
                *s = 1.0 / *s;
            }
            for k in 0..v.len {
                for (yv, &inv) in y[at(k)].iter_mut().zip(sum.iter()) {
                    *yv *= inv;
                }
            }
        }
    }
}

/// ArgMax (`max`) / ArgMin along the axis into i64 indices (`[outer, inner]`).
pub fn arg_extreme(v: AxisView, max: bool, last: bool, x: &[f32], y: &mut [i64]) {
    for o in 0..v.outer {
        for i in 0..v.inner {
            let base = o * v.len * v.inner + i;
            let mut best = 0usize;
            let mut bv = x[base];
            for k in 1..v.len {
                let c = x[base + k * v.inner];
                let better = if max { c > bv } else { c < bv };
                if better || (last && c == bv) {
                    best = k;
                    bv = c;
                }
            }
            y[o * v.inner + i] = best as i64;
        }
    }
}

/// TopK along the axis: `k` values and i64 indices per row (ties: smaller index first).
/// `order` is scratch of at least `v.len` entries.
#[allow(clippy::too_many_arguments)]
pub fn top_k(
    v: AxisView,
    k: usize,
    largest: bool,
    x: &[f32],
    vals: &mut [f32],
    idx: &mut [i64],
    order: &mut [usize],
) {
    let order = &mut order[..v.len];
    for o in 0..v.outer {
        for i in 0..v.inner {
            let base = o * v.len * v.inner + i;
            for (j, s) in order.iter_mut().enumerate() {
                *s = j;
            }
            let key = |a: &usize, b: &usize| {
                let (xa, xb) = (x[base + a * v.inner], x[base + b * v.inner]);
                let ord = if largest {
                    xb.partial_cmp(&xa)
                } else {
                    xa.partial_cmp(&xb)
                };
                ord.unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(b))
            };
            if k < v.len && k > 0 {
                order.select_nth_unstable_by(k - 1, key);
            }
            order[..k].sort_unstable_by(key);
            for (j, &src) in order[..k].iter().enumerate() {
                let d = (o * k + j) * v.inner + i;
                vals[d] = x[base + src * v.inner];
                idx[d] = src as i64;
            }
        }
    }
}

/// Additive element types of [`cumsum`] (integers wrap instead of overflowing).
pub trait Accumulate: Copy + Default {
    /// `self + o`.
    fn acc(self, o: Self) -> Self;
}

impl Accumulate for f32 {
    fn acc(self, o: Self) -> Self {
        self + o
    }
}

impl Accumulate for i64 {
    fn acc(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}

/// Cumulative sum along the axis.
pub fn cumsum<T: Accumulate>(v: AxisView, exclusive: bool, reverse: bool, x: &[T], y: &mut [T]) {
    for o in 0..v.outer {
        for i in 0..v.inner {
            let base = o * v.len * v.inner + i;
            let mut acc = T::default();
            for step in 0..v.len {
                let k = if reverse { v.len - 1 - step } else { step };
                let at = base + k * v.inner;
                if exclusive {
                    y[at] = acc;
                    acc = acc.acc(x[at]);
                } else {
                    acc = acc.acc(x[at]);
                    y[at] = acc;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};

    #[test]
    fn reduce_over_axes_matches_naive() {
        let shape = [3usize, 4, 5];
        let x = rand_vec(60, 3);
        for axes in [vec![1usize], vec![0, 2], vec![0, 1, 2], vec![2]] {
            let p = ReducePlan::new(&shape, &axes);
            let outn = 60 / p.count;
            let mut want = vec![0.0f32; outn];
            let mut wmax = vec![f32::NEG_INFINITY; outn];
            for a in 0..3 {
                for b in 0..4 {
                    for c in 0..5 {
                        let idx = [a, b, c];
                        let mut o = 0;
                        for d in 0..3 {
                            if !axes.contains(&d) {
                                o = o * shape[d] + idx[d];
                            }
                        }
                        let v = x[(a * 4 + b) * 5 + c];
                        want[o] += v;
                        wmax[o] = wmax[o].max(v);
                    }
                }
            }
            let mut y = vec![0.0; outn];
            let mut tmp = vec![0.0; outn];
            reduce_f32(ReduceOp::Sum, &p, &x, &mut y, &mut tmp);
            assert_close(&y, &want, 1e-5);
            reduce_f32(ReduceOp::Max, &p, &x, &mut y, &mut tmp);
            assert_close(&y, &wmax, 0.0);
            reduce_f32(ReduceOp::LogSumExp, &p, &x, &mut y, &mut tmp);
            assert!(y.iter().zip(&wmax).all(|(l, m)| l >= m));
        }
    }

    /// The strided softmax (axis not last) against f64, over ragged column chunks, tiles
    /// run one at a time in any order, with every table.
    #[test]
    fn strided_softmax_tiles_match_f64() {
        for (shape, axis) in [
            (vec![2usize, 5, 3], 1usize),
            (vec![1, 16, 4, 300], 1),
            (vec![3, 7, 513], 1),
            (vec![2, 1, 9], 1),
        ] {
            let v = AxisView::new(&shape, axis);
            let n: usize = shape.iter().product();
            let x: Vec<f32> = rand_vec(n, 7).iter().map(|t| t * 30.0).collect();
            let tiles = softmax_tiles(v);
            assert_eq!(tiles, v.outer * v.inner.div_ceil(SOFTMAX_COLS));
            for t in crate::kernels::isa::tables() {
                for log in [false, true] {
                    let mut y = vec![f32::NAN; n];
                    for tile in (0..tiles).rev() {
                        softmax(t.isa, v, log, &x, &mut y, tile, tile + 1);
                    }
                    for o in 0..v.outer {
                        for i in 0..v.inner {
                            let at = |k: usize| o * v.len * v.inner + k * v.inner + i;
                            let m = (0..v.len).map(|k| x[at(k)] as f64).fold(f64::MIN, f64::max);
                            let sum: f64 = (0..v.len).map(|k| (x[at(k)] as f64 - m).exp()).sum();
                            for k in 0..v.len {
                                let d = x[at(k)] as f64 - m;
                                let want = if log { d - sum.ln() } else { d.exp() / sum };
                                let got = y[at(k)] as f64;
                                assert!(
                                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                    "{} {shape:?} log {log}: {got} vs {want}",
                                    t.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn softmax_topk_argmax_cumsum() {
        let v = AxisView::new(&[2, 5, 3], 1);
        let x = rand_vec(30, 4);
        let mut y = vec![0.0; 30];
        softmax(
            crate::kernels::isa::Isa::Portable,
            v,
            false,
            &x,
            &mut y,
            0,
            2,
        );
        for o in 0..2 {
            for i in 0..3 {
                let s: f32 = (0..5).map(|k| y[o * 15 + k * 3 + i]).sum();
                assert!((s - 1.0).abs() < 1e-5);
            }
        }
        let mut vals = vec![0.0; 12];
        let mut idx = vec![0i64; 12];
        let mut order = vec![0usize; 5];
        top_k(v, 2, true, &x, &mut vals, &mut idx, &mut order);
        let mut am = vec![0i64; 6];
        arg_extreme(v, true, false, &x, &mut am);
        for o in 0..2 {
            for i in 0..3 {
                let mut col: Vec<(f32, usize)> =
                    (0..5).map(|k| (x[o * 15 + k * 3 + i], k)).collect();
                col.sort_by(|a, b| b.0.total_cmp(&a.0));
                assert_eq!(idx[o * 6 + i], col[0].1 as i64);
                assert_eq!(idx[o * 6 + 3 + i], col[1].1 as i64);
                assert_eq!(vals[o * 6 + i], col[0].0);
                assert_eq!(am[o * 3 + i], col[0].1 as i64);
            }
        }
        let mut c = vec![0i64; 4];
        cumsum(AxisView::new(&[4], 0), true, true, &[1i64, 2, 3, 4], &mut c);
        assert_eq!(c, vec![9, 7, 4, 0]);
    }
}

//! LSTM and GRU (ONNX semantics, default activations: sigmoid / tanh / tanh), forward,
//! reverse or bidirectional, layout 0 (`[seq, batch, ...]`) or 1 (`[batch, seq, ...]`).
//!
//! Gate order follows ONNX: LSTM `i, o, f, c`; GRU `z, r, h`. Every sequence has the full
//! length (variable `sequence_lens` are rejected at plan time unless all equal it).

use super::unary::sigmoid;

/// Shape of a recurrent layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnnShape {
    /// Sequence length.
    pub seq: usize,
    /// Batch.
    pub batch: usize,
    /// Input size.
    pub input: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Directions (1 or 2).
    pub dirs: usize,
    /// Run direction 0 backwards (a `reverse` layer).
    pub reverse: bool,
    /// Batch-major layout (ONNX `layout = 1`).
    pub batch_major: bool,
}

impl RnnShape {
    fn x_at(&self, t: usize, b: usize) -> usize {
        if self.batch_major {
            (b * self.seq + t) * self.input
        } else {
            (t * self.batch + b) * self.input
        }
    }
    fn y_at(&self, t: usize, d: usize, b: usize) -> usize {
        let h = self.hidden;
        if self.batch_major {
            ((b * self.seq + t) * self.dirs + d) * h
        } else {
            ((t * self.dirs + d) * self.batch + b) * h
        }
    }
    fn state_at(&self, d: usize, b: usize) -> usize {
        if self.batch_major {
            (b * self.dirs + d) * self.hidden
        } else {
            (d * self.batch + b) * self.hidden
        }
    }
    /// Scratch floats a call needs.
    pub fn scratch_len(&self, gates: usize) -> usize {
        (gates + 3) * self.hidden
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Inputs of one recurrent layer; optional ones may be empty slices.
pub struct RnnParams<'a> {
    /// `[dirs, G*H, I]`.
    pub w: &'a [f32],
    /// `[dirs, G*H, H]`.
    pub r: &'a [f32],
    /// `[dirs, 2*G*H]` or empty.
    pub b: &'a [f32],
    /// Initial hidden state or empty.
    pub h0: &'a [f32],
    /// Initial cell state (LSTM) or empty.
    pub c0: &'a [f32],
    /// Peepholes `[dirs, 3*H]` (LSTM) or empty.
    pub p: &'a [f32],
}

/// Outputs of one recurrent layer; any may be empty (not requested).
pub struct RnnOutputs<'a> {
    /// `Y`.
    pub y: &'a mut [f32],
    /// `Y_h`.
    pub yh: &'a mut [f32],
    /// `Y_c` (LSTM).
    pub yc: &'a mut [f32],
}

/// LSTM forward pass.
pub fn lstm(
    s: &RnnShape,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    let hs = s.hidden;
    let (gates, rest) = scratch.split_at_mut(4 * hs);
    let (h, rest) = rest.split_at_mut(hs);
    let (c, rest) = rest.split_at_mut(hs);
    let hn = &mut rest[..hs];
    for d in 0..s.dirs {
        let w = &prm.w[d * 4 * hs * s.input..(d + 1) * 4 * hs * s.input];
        let r = &prm.r[d * 4 * hs * hs..(d + 1) * 4 * hs * hs];
        let backwards = d == 1 || s.reverse;
        for bt in 0..s.batch {
            let st = s.state_at(d, bt);
            if prm.h0.is_empty() {
                h.fill(0.0)
            } else {
                h.copy_from_slice(&prm.h0[st..st + hs])
            }
            if prm.c0.is_empty() {
                c.fill(0.0)
            } else {
                c.copy_from_slice(&prm.c0[st..st + hs])
            }
            for step in 0..s.seq {
                let t = if backwards { s.seq - 1 - step } else { step };
                let xt = &x[s.x_at(t, bt)..s.x_at(t, bt) + s.input];
                for (g, gv) in gates.iter_mut().enumerate() {
                    let mut v = dot(&w[g * s.input..(g + 1) * s.input], xt)
                        + dot(&r[g * hs..(g + 1) * hs], h);
                    if !prm.b.is_empty() {
                        v += prm.b[d * 8 * hs + g] + prm.b[d * 8 * hs + 4 * hs + g];
                    }
                    *gv = v;
                }
                for j in 0..hs {
                    let (pi, po, pf) = if prm.p.is_empty() {
                        (0.0, 0.0, 0.0)
                    } else {
                        let p = &prm.p[d * 3 * hs..];
                        (p[j], p[hs + j], p[2 * hs + j])
                    };
                    let i = sigmoid(gates[j] + pi * c[j]);
                    let f = sigmoid(gates[2 * hs + j] + pf * c[j]);
                    let cc = gates[3 * hs + j].tanh();
                    c[j] = f * c[j] + i * cc;
                    let o = sigmoid(gates[hs + j] + po * c[j]);
                    hn[j] = o * c[j].tanh();
                }
                h.copy_from_slice(hn);
                if !out.y.is_empty() {
                    let yo = s.y_at(t, d, bt);
                    out.y[yo..yo + hs].copy_from_slice(h);
                }
            }
            if !out.yh.is_empty() {
                out.yh[st..st + hs].copy_from_slice(h);
            }
            if !out.yc.is_empty() {
                out.yc[st..st + hs].copy_from_slice(c);
            }
        }
    }
}

/// GRU forward pass.
pub fn gru(
    s: &RnnShape,
    linear_before_reset: bool,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    let hs = s.hidden;
    let (gates, rest) = scratch.split_at_mut(3 * hs);
    let (h, rest) = rest.split_at_mut(hs);
    let (rh, rest) = rest.split_at_mut(hs);
    let hn = &mut rest[..hs];
    for d in 0..s.dirs {
        let w = &prm.w[d * 3 * hs * s.input..(d + 1) * 3 * hs * s.input];
        let r = &prm.r[d * 3 * hs * hs..(d + 1) * 3 * hs * hs];
        let bias = |i: usize| {
            if prm.b.is_empty() {
                0.0
            } else {
                prm.b[d * 6 * hs + i]
            }
        };
        let backwards = d == 1 || s.reverse;
        for bt in 0..s.batch {
            let st = s.state_at(d, bt);
            if prm.h0.is_empty() {
                h.fill(0.0)
            } else {
                h.copy_from_slice(&prm.h0[st..st + hs])
            }
            for step in 0..s.seq {
                let t = if backwards { s.seq - 1 - step } else { step };
                let xt = &x[s.x_at(t, bt)..s.x_at(t, bt) + s.input];
                for g in 0..2 * hs {
                    gates[g] = dot(&w[g * s.input..(g + 1) * s.input], xt)
                        + dot(&r[g * hs..(g + 1) * hs], h)
                        + bias(g)
                        + bias(3 * hs + g);
                    gates[g] = sigmoid(gates[g]);
                }
                // gates[0..H] = z, gates[H..2H] = r.
                for j in 0..hs {
                    rh[j] = gates[hs + j] * h[j];
                }
                for j in 0..hs {
                    let g = 2 * hs + j;
                    let xw = dot(&w[g * s.input..(g + 1) * s.input], xt) + bias(g);
                    let rr = &r[g * hs..(g + 1) * hs];
                    let hh = if linear_before_reset {
                        xw + gates[hs + j] * (dot(rr, h) + bias(3 * hs + g))
                    } else {
                        xw + dot(rr, rh) + bias(3 * hs + g)
                    };
                    gates[2 * hs + j] = hh.tanh();
                }
                for j in 0..hs {
                    let z = gates[j];
                    hn[j] = (1.0 - z) * gates[2 * hs + j] + z * h[j];
                }
                h.copy_from_slice(hn);
                if !out.y.is_empty() {
                    let yo = s.y_at(t, d, bt);
                    out.y[yo..yo + hs].copy_from_slice(h);
                }
            }
            if !out.yh.is_empty() {
                out.yh[st..st + hs].copy_from_slice(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};

    /// One GRU step for a single batch by the ONNX formulas, written independently.
    #[allow(clippy::too_many_arguments)]
    fn gru_ref(
        x: &[f32],
        w: &[f32],
        r: &[f32],
        b: &[f32],
        hs: usize,
        inp: usize,
        seq: usize,
        lbr: bool,
    ) -> Vec<f32> {
        let mut h = vec![0.0f32; hs];
        let mut ys = Vec::new();
        let mv = |m: &[f32], row: usize, v: &[f32], n: usize| {
            (0..n).map(|k| m[row * n + k] * v[k]).sum::<f32>()
        };
        for t in 0..seq {
            let xt = &x[t * inp..(t + 1) * inp];
            let z: Vec<f32> = (0..hs)
                .map(|j| sigmoid(mv(w, j, xt, inp) + mv(r, j, &h, hs) + b[j] + b[3 * hs + j]))
                .collect();
            let rg: Vec<f32> = (0..hs)
                .map(|j| {
                    sigmoid(
                        mv(w, hs + j, xt, inp) + mv(r, hs + j, &h, hs) + b[hs + j] + b[4 * hs + j],
                    )
                })
                .collect();
            let rh: Vec<f32> = (0..hs).map(|j| rg[j] * h[j]).collect();
            let ht: Vec<f32> = (0..hs)
                .map(|j| {
                    let xw = mv(w, 2 * hs + j, xt, inp) + b[2 * hs + j];
                    if lbr {
                        (xw + rg[j] * (mv(r, 2 * hs + j, &h, hs) + b[5 * hs + j])).tanh()
                    } else {
                        (xw + mv(r, 2 * hs + j, &rh, hs) + b[5 * hs + j]).tanh()
                    }
                })
                .collect();
            h = (0..hs)
                .map(|j| (1.0 - z[j]) * ht[j] + z[j] * h[j])
                .collect();
            ys.extend_from_slice(&h);
        }
        ys
    }

    #[test]
    fn gru_matches_reference_and_reverse_runs_backwards() {
        let (seq, inp, hs) = (4, 3, 5);
        let x = rand_vec(seq * inp, 1);
        let w = rand_vec(3 * hs * inp, 2);
        let r = rand_vec(3 * hs * hs, 3);
        let b = rand_vec(6 * hs, 4);
        for lbr in [false, true] {
            let s = RnnShape {
                seq,
                batch: 1,
                input: inp,
                hidden: hs,
                dirs: 1,
                reverse: false,
                batch_major: false,
            };
            let prm = RnnParams {
                w: &w,
                r: &r,
                b: &b,
                h0: &[],
                c0: &[],
                p: &[],
            };
            let mut y = vec![0.0; seq * hs];
            let mut yh = vec![0.0; hs];
            let mut scratch = vec![0.0; s.scratch_len(3)];
            gru(
                &s,
                lbr,
                &x,
                &prm,
                &mut RnnOutputs {
                    y: &mut y,
                    yh: &mut yh,
                    yc: &mut [],
                },
                &mut scratch,
            );
            let want = gru_ref(&x, &w, &r, &b, hs, inp, seq, lbr);
            assert_close(&y, &want, 1e-5);
            assert_close(&yh, &want[(seq - 1) * hs..], 1e-5);
            // Reverse on the time-reversed input gives the forward outputs reversed in time.
            let xr: Vec<f32> = (0..seq)
                .rev()
                .flat_map(|t| x[t * inp..(t + 1) * inp].to_vec())
                .collect();
            let sr = RnnShape { reverse: true, ..s };
            let mut y2 = vec![0.0; seq * hs];
            gru(
                &sr,
                lbr,
                &xr,
                &prm,
                &mut RnnOutputs {
                    y: &mut y2,
                    yh: &mut [],
                    yc: &mut [],
                },
                &mut scratch,
            );
            for t in 0..seq {
                assert_close(
                    &y2[(seq - 1 - t) * hs..(seq - t) * hs],
                    &want[t * hs..(t + 1) * hs],
                    1e-5,
                );
            }
        }
    }

    #[test]
    fn lstm_single_step_matches_formula() {
        let (inp, hs) = (2, 3);
        let x = rand_vec(inp, 5);
        let w = rand_vec(4 * hs * inp, 6);
        let r = rand_vec(4 * hs * hs, 7);
        let b = rand_vec(8 * hs, 8);
        let s = RnnShape {
            seq: 1,
            batch: 1,
            input: inp,
            hidden: hs,
            dirs: 1,
            reverse: false,
            batch_major: false,
        };
        let (h0, c0) = (rand_vec(hs, 9), rand_vec(hs, 10));
        let prm = RnnParams {
            w: &w,
            r: &r,
            b: &b,
            h0: &h0,
            c0: &c0,
            p: &[],
        };
        let (mut y, mut yh, mut yc) = (vec![0.0; hs], vec![0.0; hs], vec![0.0; hs]);
        let mut scratch = vec![0.0; s.scratch_len(4)];
        lstm(
            &s,
            &x,
            &prm,
            &mut RnnOutputs {
                y: &mut y,
                yh: &mut yh,
                yc: &mut yc,
            },
            &mut scratch,
        );
        for j in 0..hs {
            let g = |k: usize| {
                (0..inp)
                    .map(|q| w[(k * hs + j) * inp + q] * x[q])
                    .sum::<f32>()
                    + (0..hs)
                        .map(|q| r[(k * hs + j) * hs + q] * h0[q])
                        .sum::<f32>()
                    + b[k * hs + j]
                    + b[4 * hs + k * hs + j]
            };
            let (i, o, f, c) = (sigmoid(g(0)), sigmoid(g(1)), sigmoid(g(2)), g(3).tanh());
            let cn = f * c0[j] + i * c;
            assert!((yc[j] - cn).abs() < 1e-5);
            assert!((yh[j] - o * cn.tanh()).abs() < 1e-5);
        }
        assert_eq!(y, yh);
    }
}

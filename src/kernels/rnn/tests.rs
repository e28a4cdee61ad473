//! RNN kernels against independent references and the scalar formulation; every table
//! against the portable one.

use super::*;
use crate::kernels::isa::KernelTable;
use crate::kernels::testutil::{assert_close, rand_vec};
use crate::kernels::unary::sigmoid;

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
                sigmoid(mv(w, hs + j, xt, inp) + mv(r, hs + j, &h, hs) + b[hs + j] + b[4 * hs + j])
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The scalar LSTM the GEMM formulation replaced: one dot product per gate and step.
fn lstm_ref(
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

/// The scalar GRU the GEMM formulation replaced.
fn gru_scalar(
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

/// Every input of a layer, random, with the optional ones present or not.
struct Layer {
    s: RnnShape,
    cell: Cell,
    x: Vec<f32>,
    w: Vec<f32>,
    r: Vec<f32>,
    b: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
    p: Vec<f32>,
}

impl Layer {
    fn new(s: RnnShape, cell: Cell, optional: bool, seed: u64) -> Layer {
        let (g, hs) = (cell.gates(), s.hidden);
        let opt = |n: usize, k: u64| {
            if optional {
                rand_vec(n, seed + k)
            } else {
                Vec::new()
            }
        };
        Layer {
            x: rand_vec(s.seq * s.batch * s.input, seed),
            w: rand_vec(s.dirs * g * hs * s.input, seed + 1),
            r: rand_vec(s.dirs * g * hs * hs, seed + 2),
            b: opt(s.dirs * 2 * g * hs, 3),
            h0: opt(s.dirs * s.batch * hs, 4),
            c0: if cell == Cell::Lstm {
                opt(s.dirs * s.batch * hs, 5)
            } else {
                Vec::new()
            },
            p: if cell == Cell::Lstm {
                opt(s.dirs * 3 * hs, 6)
            } else {
                Vec::new()
            },
            s,
            cell,
        }
    }

    fn params(&self) -> RnnParams<'_> {
        RnnParams {
            w: &self.w,
            r: &self.r,
            b: &self.b,
            h0: &self.h0,
            c0: &self.c0,
            p: &self.p,
        }
    }

    /// `Y`, `Y_h`, `Y_c` (empty for GRU) concatenated, by `f`.
    fn outputs(&self, f: impl FnOnce(&mut RnnOutputs<'_>)) -> Vec<f32> {
        let s = &self.s;
        let n = s.dirs * s.batch * s.hidden;
        let mut y = vec![f32::NAN; s.seq * n];
        let mut yh = vec![f32::NAN; n];
        let mut yc = vec![f32::NAN; if self.cell == Cell::Lstm { n } else { 0 }];
        f(&mut RnnOutputs {
            y: &mut y,
            yh: &mut yh,
            yc: &mut yc,
        });
        [y, yh, yc].concat()
    }

    /// Through the kernel table `t`, W packed at plan time or per call.
    fn run(&self, t: &KernelTable, prepacked: bool) -> Vec<f32> {
        let g = self.cell.gates();
        let wts = prepacked.then(|| RnnWeights::pack(&self.s, self.cell, &self.w));
        let len = if prepacked {
            self.s.packed_scratch_len(g)
        } else {
            self.s.scratch_len(g)
        };
        let mut scratch = vec![f32::NAN; len];
        self.outputs(|o| {
            run_with(
                t,
                &self.s,
                self.cell,
                wts.as_ref(),
                &self.x,
                &self.params(),
                o,
                &mut scratch,
            )
        })
    }

    /// The scalar formulation.
    fn reference(&self) -> Vec<f32> {
        let mut scratch = vec![0.0; (self.cell.gates() + 3) * self.s.hidden];
        self.outputs(|o| match self.cell {
            Cell::Lstm => lstm_ref(&self.s, &self.x, &self.params(), o, &mut scratch),
            Cell::Gru {
                linear_before_reset,
            } => gru_scalar(
                &self.s,
                linear_before_reset,
                &self.x,
                &self.params(),
                o,
                &mut scratch,
            ),
        })
    }
}

/// Edge shapes: one step, one unit, ragged GEMM and GEMV sizes, batch, both layouts,
/// every direction mode.
fn edge_shapes() -> Vec<RnnShape> {
    let mut v = Vec::new();
    for (seq, batch, input, hidden) in [(1, 1, 1, 1), (3, 2, 5, 7), (5, 1, 17, 16), (4, 3, 9, 13)] {
        for (dirs, reverse) in [(1, false), (1, true), (2, false)] {
            for batch_major in [false, true] {
                v.push(RnnShape {
                    seq,
                    batch,
                    input,
                    hidden,
                    dirs,
                    reverse,
                    batch_major,
                });
            }
        }
    }
    v
}

const CELLS: [Cell; 3] = [
    Cell::Lstm,
    Cell::Gru {
        linear_before_reset: false,
    },
    Cell::Gru {
        linear_before_reset: true,
    },
];

#[test]
fn gemm_formulation_matches_scalar_formulation() {
    let t = crate::kernels::table();
    for (k, s) in edge_shapes().into_iter().enumerate() {
        for cell in CELLS {
            for optional in [false, true] {
                let l = Layer::new(s, cell, optional, k as u64 * 10);
                let want = l.reference();
                for prepacked in [false, true] {
                    let got = l.run(t, prepacked);
                    assert_close(&got, &want, 2e-5);
                }
            }
        }
    }
}

#[test]
fn tanh_is_accurate() {
    let mut x: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.005).collect();
    x.extend([1e-8, -1e-30, 20.0, -100.0, f32::INFINITY, f32::NEG_INFINITY]);
    for t in crate::kernels::isa::tables() {
        let mut y = x.clone();
        (t.tanh)(&mut y);
        for (a, b) in x.iter().zip(&y) {
            let want = (*a as f64).tanh();
            assert!(
                (*b as f64 - want).abs() <= 2e-7 + 2e-6 * want.abs(),
                "{}: tanh({a}) = {b}, want {want}",
                t.name
            );
        }
        let mut n = [f32::NAN];
        (t.tanh)(&mut n);
        assert!(n[0].is_nan());
    }
}

crate::kernels::isa::twin_test!(rnn_tables_match_portable, 1e-5, |t| {
    let mut out = Vec::new();
    for rows in [0usize, 1, 3, 4, 5, 9] {
        for k in [0usize, 1, 7, 8, 15, 16, 17, 33, 256] {
            let ldw = k + 3;
            let w = rand_vec(rows * ldw, 1);
            let x = rand_vec(k, 2);
            let mut y = rand_vec(rows, 3);
            (t.gemv_acc)(&w[..(rows * ldw).saturating_sub(3)], ldw, &x, &mut y);
            out.extend_from_slice(&y);
        }
    }
    for n in [0usize, 1, 7, 8, 9, 33] {
        let x: Vec<f32> = rand_vec(n, 4).iter().map(|v| v * 20.0).collect();
        let (mut a, mut b) = (x.clone(), x);
        (t.sigmoid)(&mut a);
        (t.tanh)(&mut b);
        out.extend(a.into_iter().chain(b));
    }
    for (k, s) in edge_shapes().into_iter().enumerate().step_by(5) {
        for cell in CELLS {
            out.extend(Layer::new(s, cell, true, k as u64).run(t, true));
        }
    }
    out
});

#[test]
fn units_run_in_pieces_equal_the_whole_run_bit_for_bit() {
    let t = crate::kernels::table();
    // Beyond the edge shapes, layers whose projection comes in several pieces.
    let mut shapes = edge_shapes();
    for (seq, batch, batch_major) in [(13, 2, false), (30, 1, true), (9, 6, true)] {
        shapes.push(RnnShape {
            seq,
            batch,
            input: 5,
            hidden: 7,
            dirs: 2,
            reverse: false,
            batch_major,
        });
    }
    for (k, s) in shapes.into_iter().enumerate() {
        for cell in CELLS {
            for optional in [false, true] {
                let l = Layer::new(s, cell, optional, k as u64 * 7);
                let whole = l.run(t, true);
                if s.seq * s.batch > PROJ_ROWS {
                    assert_close(&whole, &l.reference(), 2e-5);
                    // W packed per call gives the same bits.
                    assert_eq!(
                        l.run(t, false)
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    );
                }
                let wts = RnnWeights::pack(&s, cell, &l.w);
                let units = s.units();
                // Cuts into 1, 2, 3, 5 and `units` pieces, as `Tile::range` shares them.
                for pieces in [1, 2, 3, 5, units] {
                    let pieces = pieces.min(units);
                    let mut scratch = vec![f32::NAN; s.packed_scratch_len(cell.gates())];
                    let got = l.outputs(|o| {
                        for p in 0..pieces {
                            let tile = crate::exec::Tile {
                                index: p,
                                count: pieces,
                            };
                            let u = tile.range(units, 1);
                            let prm = l.params();
                            run_units_with(t, &s, cell, Some(&wts), &l.x, &prm, o, &mut scratch, u);
                        }
                    });
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{s:?} {cell:?} in {pieces} pieces"
                    );
                }
            }
        }
    }
}

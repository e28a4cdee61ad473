//! LSTM and GRU (ONNX semantics, default activations: sigmoid / tanh / tanh), forward,
//! reverse or bidirectional, layout 0 (`[seq, batch, ...]`) or 1 (`[batch, seq, ...]`).
//!
//! Gate order follows ONNX: LSTM `i, o, f, c`; GRU `z, r, h`. Every sequence has the full
//! length (variable `sequence_lens` are rejected at plan time unless all equal it).
//!
//! Per direction: the input projection of every time step is one packed GEMM,
//! `XW[T*B, G*H] = X · W^T + bias` (W^T packed once by [`RnnWeights::pack`] at plan time,
//! or per call into scratch when W is not a constant); then each step runs, per batch
//! row, the recurrent GEMV `gates += R · h` and the gate math over whole gate vectors,
//! both from the kernel table (`gemv_acc`, `sigmoid`, `tanh`). LSTM and GRU share all
//! of it but the cell update. No allocation: every buffer is carved from `scratch`.

use super::gemm::{self, gemm_packed, BSource, Epilogue};
use super::isa::KernelTable;

/// Rows (time steps times batch) of one piece of the input projection, a unit of work
/// of its own (see [`run_units_with`]): a multiple of the GEMM's row panel. A
/// bidirectional LSTM of 80 steps, 512 inputs and 256 hidden units projects one
/// direction in ~1.2-1.7 ms on a Zen 3 core, more than one FC may take.
pub const PROJ_ROWS: usize = 4 * gemm::MR;

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
    /// Row of X (and of the input projection) holding step `t` of batch `b`.
    fn row(&self, t: usize, b: usize) -> usize {
        if self.batch_major {
            b * self.seq + t
        } else {
            t * self.batch + b
        }
    }
    #[cfg(test)]
    fn x_at(&self, t: usize, b: usize) -> usize {
        self.row(t, b) * self.input
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
    /// Rows of the input projection (`seq * batch`).
    fn rows(&self) -> usize {
        self.seq * self.batch
    }
    /// Scratch floats a call with weights packed at plan time ([`RnnWeights`]) needs.
    pub fn packed_scratch_len(&self, gates: usize) -> usize {
        let gh = gates * self.hidden;
        gemm::packed_a_len(self.rows(), self.input)
            + self.dirs * self.rows() * gh
            + gh
            + 2 * self.dirs * self.batch * self.hidden
            + self.hidden
    }
    /// Pieces of one direction's input projection, [`PROJ_ROWS`] rows each.
    fn proj_chunks(&self) -> usize {
        self.rows().div_ceil(PROJ_ROWS).max(1)
    }
    /// Units of work of one layer, in the order they run (see [`run_units_with`]): the
    /// input projection of each direction in pieces of rows, then each time step of the
    /// first direction, then each of the second's.
    pub fn units(&self) -> usize {
        self.dirs * self.proj_chunks() + self.dirs * self.seq
    }
    /// Scratch floats a call needs when it packs W itself (any call of [`lstm`] / [`gru`]).
    pub fn scratch_len(&self, gates: usize) -> usize {
        let gh = gates * self.hidden;
        self.packed_scratch_len(gates) + gemm::packed_b_len(self.input, gh) + gh
    }
}

/// The recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// LSTM (gates `i, o, f, c`).
    Lstm,
    /// GRU (gates `z, r, h`).
    Gru {
        /// ONNX `linear_before_reset`.
        linear_before_reset: bool,
    },
}

impl Cell {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru { .. } => 3,
        }
    }
}

/// W^T of every direction packed for the input-projection GEMM (built once per plan).
#[derive(Debug, Clone)]
pub struct RnnWeights {
    dirs: Vec<Vec<f32>>,
}

impl RnnWeights {
    /// Packs `w` (`[dirs, G*H, I]`) for `s` and `cell`.
    pub fn pack(s: &RnnShape, cell: Cell, w: &[f32]) -> RnnWeights {
        let gh = cell.gates() * s.hidden;
        let mut row = vec![0.0; gh];
        let dirs = (0..s.dirs)
            .map(|d| {
                let mut pb = vec![0.0; gemm::packed_b_len(s.input, gh)];
                pack_w(
                    s,
                    gh,
                    &w[d * gh * s.input..(d + 1) * gh * s.input],
                    &mut pb,
                    &mut row,
                );
                pb
            })
            .collect();
        RnnWeights { dirs }
    }
}

/// Packs one direction's W (`[G*H, I]`) as the GEMM's B = W^T (`I x G*H`).
fn pack_w(s: &RnnShape, gh: usize, w: &[f32], out: &mut [f32], row: &mut [f32]) {
    gemm::pack_b(w, 1, s.input, s.input, gh, 1.0, out, row);
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

/// LSTM forward pass (packs W into `scratch`: [`RnnShape::scratch_len`]`(4)` floats).
pub fn lstm(
    s: &RnnShape,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    run(s, Cell::Lstm, None, x, prm, out, scratch)
}

/// GRU forward pass (packs W into `scratch`: [`RnnShape::scratch_len`]`(3)` floats).
pub fn gru(
    s: &RnnShape,
    linear_before_reset: bool,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    let cell = Cell::Gru {
        linear_before_reset,
    };
    run(s, cell, None, x, prm, out, scratch)
}

/// Forward pass of `cell` with the best kernel table. With `wts` (W packed at plan time)
/// `scratch` holds [`RnnShape::packed_scratch_len`] floats, without it
/// [`RnnShape::scratch_len`] (W is packed per call).
pub fn run(
    s: &RnnShape,
    cell: Cell,
    wts: Option<&RnnWeights>,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    run_with(super::table(), s, cell, wts, x, prm, out, scratch)
}

/// [`run`] with the kernel table `t`.
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    t: &KernelTable,
    s: &RnnShape,
    cell: Cell,
    wts: Option<&RnnWeights>,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
) {
    run_units_with(t, s, cell, wts, x, prm, out, scratch, (0, s.units()));
}

/// Units `[u0, u1)` of [`RnnShape::units`]: with `P` pieces of [`PROJ_ROWS`] rows per
/// direction, unit `d * P + j` projects piece `j` of direction `d`'s input (piece 0 also
/// sets the direction's initial state); unit `dirs * P + d * seq + i` runs step `i` of
/// direction `d` (a backward one from the end). A piece's GEMM rows get the bits they
/// get in the whole projection (each row is computed alone by the same kernels). The
/// projections and the states live in `scratch` between calls, so consecutive calls over
/// `[0, a)`, `[a, b)`, ... `[c, units)` (nothing else touching `scratch` in between)
/// give the whole run's outputs bit for bit: each direction's operations are the same
/// and in the same order (the directions share nothing). Steps go direction by
/// direction, so that a call of a few steps (an FC tile) reads one direction's recurrent
/// weights, which the next call then finds in L2.
/// `Y_h` / `Y_c` are written by the call that runs the last unit.
#[allow(clippy::too_many_arguments)]
pub fn run_units_with(
    t: &KernelTable,
    s: &RnnShape,
    cell: Cell,
    wts: Option<&RnnWeights>,
    x: &[f32],
    prm: &RnnParams<'_>,
    out: &mut RnnOutputs<'_>,
    scratch: &mut [f32],
    (u0, u1): (usize, usize),
) {
    assert!(
        u0 <= u1 && u1 <= s.units(),
        "units {u0}..{u1} of {}",
        s.units()
    );
    let (hs, inp, rows) = (s.hidden, s.input, s.rows());
    let g = cell.gates();
    let gh = g * hs;
    let state = s.batch * hs;
    let (pa, rest) = scratch.split_at_mut(gemm::packed_a_len(rows, inp));
    let (proj, rest) = rest.split_at_mut(s.dirs * rows * gh);
    let (bias, rest) = rest.split_at_mut(gh);
    let (h, rest) = rest.split_at_mut(s.dirs * state);
    let (c, rest) = rest.split_at_mut(s.dirs * state);
    let (tmp, rest) = rest.split_at_mut(hs);
    let chunks = s.proj_chunks();
    let proj_units = s.dirs * chunks;
    if u0 < proj_units {
        gemm::pack_a(x, inp, 1, rows, (inp, gemm::k_depth(inp, gh)), 1.0, pa);
    }
    // W^T of the direction in `pw_own` when not packed at plan time (packed once per
    // direction and call).
    let (pw_own, row) = match wts {
        Some(_) => (&mut [][..], &mut [][..]),
        None => rest.split_at_mut(gemm::packed_b_len(inp, gh)),
    };
    let mut own_dir = None;
    for u in u0..u1.min(proj_units) {
        let (d, j) = (u / chunks, u % chunks);
        // Input projection of every step: proj[row] = x[row] · W^T + (Wb + Rb), except
        // GRU's linear-before-reset h gate, whose Rb is applied with R·h below.
        let pw: &[f32] = match wts {
            Some(w) => &w.dirs[d],
            None => {
                if own_dir != Some(d) {
                    pack_w(s, gh, &prm.w[d * gh * inp..(d + 1) * gh * inp], pw_own, row);
                    own_dir = Some(d);
                }
                pw_own
            }
        };
        let has_bias = !prm.b.is_empty();
        if has_bias {
            let (wb, rb) = prm.b[d * 2 * gh..(d + 1) * 2 * gh].split_at(gh);
            for ((o, a), b) in bias.iter_mut().zip(wb).zip(rb) {
                *o = a + b;
            }
            if let Cell::Gru {
                linear_before_reset: true,
            } = cell
            {
                bias[2 * hs..].copy_from_slice(&wb[2 * hs..]);
            }
        }
        let epi = Epilogue {
            bias: has_bias.then_some(&bias[..]),
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let piece = (j * PROJ_ROWS, ((j + 1) * PROJ_ROWS).min(rows));
        gemm_packed(
            t.isa,
            rows,
            gh,
            (inp, gemm::k_depth(inp, gh)),
            pa,
            BSource::Packed(pw),
            &mut [],
            &mut proj[d * rows * gh..(d + 1) * rows * gh],
            gh,
            piece,
            (0, gh),
            &epi,
        );
        if j > 0 {
            continue;
        }
        for b in 0..s.batch {
            let st = s.state_at(d, b);
            let hb = &mut h[d * state + b * hs..][..hs];
            let cb = &mut c[d * state + b * hs..][..hs];
            match prm.h0.get(st..st + hs) {
                Some(v) => hb.copy_from_slice(v),
                None => hb.fill(0.0),
            }
            match prm.c0.get(st..st + hs) {
                Some(v) if cell == Cell::Lstm => cb.copy_from_slice(v),
                _ => cb.fill(0.0),
            }
        }
    }
    // Direction by direction over the call's steps: each direction's recurrent weights
    // (1 MiB at H = 256) then stay in L2 for all its steps, where steps taking turns
    // between two directions kept both live (a CRNN's two bidirectional LSTM layers at
    // H = 256, Xeon with 2 MiB L2, node minimum of 20 runs: 5.13 -> 2.50-3.40 ms and
    // 6.85 -> 4.40-4.74 ms).
    let units = u0.max(proj_units) - proj_units..u1.saturating_sub(proj_units);
    for d in 0..s.dirs {
        // This direction's steps among the call's units.
        let steps = units.start.clamp(d * s.seq, (d + 1) * s.seq) - d * s.seq
            ..units.end.clamp(d * s.seq, (d + 1) * s.seq) - d * s.seq;
        let r = &prm.r[d * gh * hs..(d + 1) * gh * hs];
        let rbh = (!prm.b.is_empty()
            && cell
                == Cell::Gru {
                    linear_before_reset: true,
                })
        .then(|| &prm.b[d * 2 * gh + gh + 2 * hs..d * 2 * gh + 2 * gh]);
        let peep =
            (!prm.p.is_empty() && cell == Cell::Lstm).then(|| &prm.p[d * 3 * hs..(d + 1) * 3 * hs]);
        let backwards = d == 1 || s.reverse;
        for step in steps {
            let ts = if backwards { s.seq - 1 - step } else { step };
            for b in 0..s.batch {
                let row = s.row(ts, b);
                let gv = &mut proj[(d * rows + row) * gh..(d * rows + row + 1) * gh];
                let hb = &mut h[d * state + b * hs..][..hs];
                match cell {
                    Cell::Lstm => {
                        let cb = &mut c[d * state + b * hs..][..hs];
                        lstm_cell(t, r, peep, gv, hb, cb, tmp)
                    }
                    Cell::Gru {
                        linear_before_reset,
                    } => gru_cell(t, r, linear_before_reset, rbh, gv, hb, tmp),
                }
                if !out.y.is_empty() {
                    let yo = s.y_at(ts, d, b);
                    out.y[yo..yo + hs].copy_from_slice(hb);
                }
            }
        }
    }
    if u0 < u1 && u1 == s.units() {
        for d in 0..s.dirs {
            for b in 0..s.batch {
                let st = s.state_at(d, b);
                let at = d * state + b * hs;
                if !out.yh.is_empty() {
                    out.yh[st..st + hs].copy_from_slice(&h[at..at + hs]);
                }
                if !out.yc.is_empty() {
                    out.yc[st..st + hs].copy_from_slice(&c[at..at + hs]);
                }
            }
        }
    }
}

/// One LSTM step of one batch row: `g` holds the projected input of the step (`4H`,
/// gates `i, o, f, c`), `h` / `c` the state, `tmp` H floats of scratch.
fn lstm_cell(
    t: &KernelTable,
    r: &[f32],
    peep: Option<&[f32]>,
    g: &mut [f32],
    h: &mut [f32],
    c: &mut [f32],
    tmp: &mut [f32],
) {
    let hs = h.len();
    (t.gemv_acc)(r, hs, h, g);
    let (gi, rest) = g.split_at_mut(hs);
    let (go, rest) = rest.split_at_mut(hs);
    let (gf, gc) = rest.split_at_mut(hs);
    match peep {
        None => (t.sigmoid)(&mut gi[..]),
        Some(p) => {
            for ((v, pi), cv) in gi.iter_mut().zip(&p[..hs]).zip(c.iter()) {
                *v += pi * cv;
            }
            for ((v, pf), cv) in gf.iter_mut().zip(&p[2 * hs..]).zip(c.iter()) {
                *v += pf * cv;
            }
            (t.sigmoid)(&mut gi[..]);
        }
    }
    (t.sigmoid)(&mut gf[..]);
    (t.tanh)(&mut gc[..]);
    for (((cv, i), f), cc) in c.iter_mut().zip(gi.iter()).zip(gf.iter()).zip(gc.iter()) {
        *cv = f * *cv + i * cc;
    }
    if let Some(p) = peep {
        for ((v, po), cv) in go.iter_mut().zip(&p[hs..2 * hs]).zip(c.iter()) {
            *v += po * cv;
        }
    }
    (t.sigmoid)(&mut go[..]);
    tmp.copy_from_slice(c);
    (t.tanh)(tmp);
    for ((hv, o), tc) in h.iter_mut().zip(go.iter()).zip(tmp.iter()) {
        *hv = o * tc;
    }
}

/// One GRU step of one batch row: `g` holds the projected input of the step (`3H`,
/// gates `z, r, h`), `h` the state, `tmp` H floats of scratch; `rbh` is the recurrent
/// bias of the h gate when it is applied before the reset (`linear_before_reset`).
fn gru_cell(
    t: &KernelTable,
    r: &[f32],
    lbr: bool,
    rbh: Option<&[f32]>,
    g: &mut [f32],
    h: &mut [f32],
    tmp: &mut [f32],
) {
    let hs = h.len();
    let (gzr, gh) = g.split_at_mut(2 * hs);
    (t.gemv_acc)(&r[..2 * hs * hs], hs, h, gzr);
    (t.sigmoid)(gzr);
    let (z, rg) = gzr.split_at(hs);
    let rh = &r[2 * hs * hs..];
    if lbr {
        match rbh {
            Some(b) => tmp.copy_from_slice(b),
            None => tmp.fill(0.0),
        }
        (t.gemv_acc)(rh, hs, h, tmp);
        for ((v, rv), a) in gh.iter_mut().zip(rg).zip(tmp.iter()) {
            *v += rv * a;
        }
    } else {
        for ((d, rv), hv) in tmp.iter_mut().zip(rg).zip(h.iter()) {
            *d = rv * hv;
        }
        (t.gemv_acc)(rh, hs, tmp, gh);
    }
    (t.tanh)(gh);
    for ((hv, zv), hh) in h.iter_mut().zip(z).zip(gh.iter()) {
        *hv = (1.0 - zv) * hh + zv * *hv;
    }
}

#[cfg(test)]
mod tests;

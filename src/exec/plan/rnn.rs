//! Recurrent family (LSTM, GRU): one planned shape, run over the sequence with the
//! optional outputs Y, Y_h, Y_c written when present. Tiles are ranges of the layer's
//! units (each direction's input projection, then the time steps: see
//! `rnn::run_units_with`), run in order; the projections and the states stay in the
//! scratch from one tile to the next, which the state's `bcache` tag vouches for (a tile
//! that does not find its predecessor's tag reruns the units before it first).

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::{units_done, units_stale, FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{DType, Op, RnnDirection};
use crate::kernels::rnn::{self, Cell, RnnOutputs, RnnParams, RnnShape, RnnWeights};

/// A planned LSTM or GRU (`lbr`: GRU with `linear_before_reset`).
#[derive(Debug)]
pub(crate) struct RnnKernel {
    s: RnnShape,
    cell: Cell,
    /// The input weights W packed once at plan time when they are constant.
    wts: Option<RnnWeights>,
}

/// Plans an LSTM or GRU (`layout` 1: batch-major X and states).
pub(crate) fn plan_rnn(
    c: &Ctx<'_>,
    hidden: usize,
    dir: RnnDirection,
    layout: i64,
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    let gru = matches!(n.op, Op::Gru { .. });
    let lbr = matches!(
        n.op,
        Op::Gru {
            linear_before_reset: true,
            ..
        }
    );
    let gates = if gru { 3 } else { 4 };
    for i in [0, 1, 2] {
        c.require_f32(i)?;
    }
    let xs = c.ishape(0)?;
    if xs.len() != 3 || !(layout == 0 || layout == 1) {
        return Err(unsup(n, "X must be 3-D and layout 0 or 1"));
    }
    let batch_major = layout == 1;
    let (seq, batch) = if batch_major {
        (xs[1], xs[0])
    } else {
        (xs[0], xs[1])
    };
    let dirs = if dir == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let s = RnnShape {
        seq,
        batch,
        input: xs[2],
        hidden,
        dirs,
        reverse: dir == RnnDirection::Reverse,
        batch_major,
    };
    let expect = |i: usize, want: &[usize]| -> Result<()> {
        if c.has(i) && c.ishape(i)? != want {
            return Err(shape_err(
                n,
                format!("input {i} must be {want:?}, is {:?}", c.ishape(i)?),
            ));
        }
        if c.has(i) {
            c.require_f32(i)?;
        }
        Ok(())
    };
    expect(1, &[dirs, gates * hidden, s.input])?;
    expect(2, &[dirs, gates * hidden, hidden])?;
    if c.has(3) {
        expect(3, &[dirs, 2 * gates * hidden])?;
    }
    if c.has(4) {
        let lens = c.const_ints(4, "sequence_lens")?;
        if lens.iter().any(|&l| l != seq as i64) {
            return Err(unsup(n, "sequence_lens shorter than the sequence"));
        }
    }
    let st = if batch_major {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    expect(5, &st)?;
    if !gru {
        expect(6, &st)?;
        if c.has(7) {
            expect(7, &[dirs, 3 * hidden])?;
        }
    }
    // Y, then Y_h (and Y_c for an LSTM): each absent or full.
    let state: usize = st.iter().product();
    let sizes = [seq * state, state, state];
    if n.outputs.len() > gates - 1 {
        return Err(shape_err(n, format!("{} outputs", n.outputs.len())));
    }
    for (k, &want) in sizes.iter().enumerate().take(n.outputs.len()) {
        let got: usize = c.oshape(k)?.iter().product();
        if got != want {
            return Err(shape_err(
                n,
                format!("output {k} has {got} elements, the op produces {want}"),
            ));
        }
    }
    let cell = if gru {
        Cell::Gru {
            linear_before_reset: lbr,
        }
    } else {
        Cell::Lstm
    };
    let wts = match c.konst(1) {
        Some(t) if t.dtype() == DType::F32 => Some(RnnWeights::pack(&s, cell, &t.to_f32_vec())),
        _ => None,
    };
    let scratch = if wts.is_some() {
        s.packed_scratch_len(gates)
    } else {
        s.scratch_len(gates)
    };
    Ok(Planned::new(RnnKernel { s, cell, wts }).scratch(scratch))
}

impl FamilyKernel for RnnKernel {
    fn tiles(&self) -> usize {
        self.s.units()
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (io, out, outs) = (r.io, r.out, r.outs);
        let RnnKernel { s, cell, wts } = self;
        let gru = matches!(cell, Cell::Gru { .. });
        let prm = RnnParams {
            w: io.f32(1),
            r: io.f32(2),
            b: io.opt(3).map_or(&[][..], bytemuck::cast_slice),
            h0: io.opt(5).map_or(&[][..], bytemuck::cast_slice),
            c0: if gru {
                &[]
            } else {
                io.opt(6).map_or(&[][..], bytemuck::cast_slice)
            },
            p: if gru {
                &[]
            } else {
                io.opt(7).map_or(&[][..], bytemuck::cast_slice)
            },
        };
        // Outputs are laid out in order inside the block.
        let mut rest: &mut [u8] = out;
        let mut base = 0;
        let mut parts: [&mut [f32]; 3] = [&mut [], &mut [], &mut []];
        for (k, &(o, l)) in outs.iter().enumerate().take(3) {
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(o - base);
            let (mine, tail) = tail.split_at_mut(l);
            parts[k] = bytemuck::cast_slice_mut(mine);
            rest = tail;
            base = o + l;
        }
        let [y, yh, yc] = parts;
        let mut o = RnnOutputs { y, yh, yc };
        let (u0, u1) = r.tile.range(s.units(), 1);
        let t = r.isa.table();
        let run = |units, o: &mut RnnOutputs<'_>, scratch: &mut [f32]| {
            rnn::run_units_with(
                t,
                s,
                *cell,
                wts.as_ref(),
                io.f32(0),
                &prm,
                o,
                scratch,
                units,
            )
        };
        if units_stale(r.bcache, r.index, u0) {
            // Not right after this node's previous tile: rebuild its projections and
            // states (the outputs it writes are written again, the same).
            run((0, u0), &mut o, r.scratch);
        }
        run((u0, u1), &mut o, r.scratch);
        units_done(r.bcache, r.index, u1);
        Ok(())
    }
}

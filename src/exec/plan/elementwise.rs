//! Element-wise family (Unary, Binary, Where, ClipDynamic, Cast): one output element per
//! (broadcast) input element. Tiles split element ranges, or outer broadcast rows.

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::{FamilyKernel, Planned, Run, ELEMS_PER_TILE};
use crate::error::Result;
use crate::ir::{BinaryOp, DType, UnaryOp};
use crate::kernels::eltwise::{self, Bcast};
use crate::kernels::nd::MAX_RANK;
use crate::kernels::unary::apply_unary;

/// A planned element-wise op.
#[derive(Debug)]
pub(crate) enum EltKernel {
    Unary { op: UnaryOp, t: DType, n: usize },
    Binary { op: BinaryOp, t: DType, bc: Bcast },
    Where { bc: Bcast, elem: usize },
    ClipDyn { n: usize },
    Cast { from: DType, to: DType, n: usize },
}

/// Plans a unary op (f32; the integer and bool ops that have integer meaning).
pub(crate) fn plan_unary(c: &Ctx<'_>, u: UnaryOp) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let t = c.itype(0)?;
    let ok = match t {
        DType::F32 => true,
        DType::Bool => matches!(u, UnaryOp::Not | UnaryOp::Identity),
        DType::I64 | DType::I32 => {
            matches!(
                u,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Identity | UnaryOp::Sign
            )
        }
        _ => matches!(u, UnaryOp::Identity),
    };
    if !ok || c.otype(0)? != t {
        return Err(unsup(n, format!("{} on {}", u.name(), t.name())));
    }
    Ok(Planned::new(EltKernel::Unary {
        op: u,
        t,
        n: c.same_numel(0, 0)?,
    }))
}

/// The broadcast of `inputs` to output 0, within the kernels' rank.
fn bcast(c: &Ctx<'_>, inputs: &[usize]) -> Result<Bcast> {
    let shapes = inputs
        .iter()
        .map(|&i| c.ishape(i))
        .collect::<Result<Vec<_>>>()?;
    Bcast::new(&shapes, c.oshape(0)?)
        .filter(|b| b.dims.len() <= MAX_RANK)
        .ok_or_else(|| shape_err(c.n, "inputs do not broadcast to the output"))
}

/// Plans a binary op (both inputs of one dtype, broadcast to the output).
pub(crate) fn plan_binary(c: &Ctx<'_>, op: BinaryOp) -> Result<Planned> {
    let (ta, tb) = (c.itype(0)?, c.itype(1)?);
    let out_t = crate::ir::shape::binary_type(op, ta);
    if ta != tb || out_t != Some(c.otype(0)?) {
        return Err(unsup(
            c.n,
            format!("{} on {} and {}", op.name(), ta.name(), tb.name()),
        ));
    }
    let bc = bcast(c, &[0, 1])?;
    Ok(Planned::new(EltKernel::Binary { op, t: ta, bc }))
}

/// Plans a Where (bool condition, X and Y of one dtype, broadcast to the output).
pub(crate) fn plan_where(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(c.itype(1)?)?;
    if c.itype(0)? != DType::Bool || c.itype(1)? != c.itype(2)? {
        return Err(unsup(c.n, "condition must be bool and X, Y of one dtype"));
    }
    let bc = bcast(c, &[0, 1, 2])?;
    Ok(Planned::new(EltKernel::Where {
        bc,
        elem: c.itype(1)?.size(),
    }))
}

/// Plans a Clip whose bounds are (optional) scalar inputs.
pub(crate) fn plan_clip(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    for i in [1, 2] {
        if c.has(i) {
            c.require_f32(i)?;
            if c.ishape(i)?.iter().product::<usize>() != 1 {
                return Err(shape_err(c.n, "Clip bounds must be scalars"));
            }
        }
    }
    Ok(Planned::new(EltKernel::ClipDyn {
        n: c.same_numel(0, 0)?,
    }))
}

/// Plans a Cast to `to`.
pub(crate) fn plan_cast(c: &Ctx<'_>, to: DType) -> Result<Planned> {
    c.outputs_typed(to)?;
    Ok(Planned::new(EltKernel::Cast {
        from: c.itype(0)?,
        to,
        n: c.same_numel(0, 0)?,
    }))
}

impl FamilyKernel for EltKernel {
    fn tiles(&self) -> usize {
        match self {
            EltKernel::Unary { n, .. } | EltKernel::ClipDyn { n } | EltKernel::Cast { n, .. } => {
                n.div_ceil(ELEMS_PER_TILE)
            }
            EltKernel::Binary { bc, .. } | EltKernel::Where { bc, .. } => bc.outer(),
        }
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let (tile, io) = (r.tile, r.io);
        match self {
            EltKernel::Unary { op, t, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                run_unary(*op, *t, io.bytes(0), r.out_bytes(0), lo, hi);
            }
            EltKernel::Binary { op, t, bc } => {
                let (lo, hi) = tile.range(bc.outer(), 1);
                let (a, b) = (io.bytes(0), io.bytes(1));
                let isa = r.isa;
                let o = r.out_bytes(0);
                use BinaryOp::*;
                let cmp = matches!(op, Equal | Less | LessOrEqual | Greater | GreaterOrEqual);
                match t {
                    DType::F32 if cmp => eltwise::compare(*op, bc, io.f32(0), io.f32(1), o, lo, hi),
                    DType::F32 => eltwise::binary_f32(
                        isa,
                        *op,
                        bc,
                        io.f32(0),
                        io.f32(1),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    DType::I64 if cmp => {
                        eltwise::compare::<i64>(*op, bc, io.i64(0), io.i64(1), o, lo, hi)
                    }
                    DType::I64 => eltwise::binary_int::<i64>(
                        *op,
                        bc,
                        io.i64(0),
                        io.i64(1),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    DType::I32 if cmp => eltwise::compare::<i32>(
                        *op,
                        bc,
                        bytemuck::cast_slice(a),
                        bytemuck::cast_slice(b),
                        o,
                        lo,
                        hi,
                    ),
                    DType::I32 => eltwise::binary_int::<i32>(
                        *op,
                        bc,
                        bytemuck::cast_slice(a),
                        bytemuck::cast_slice(b),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    _ => eltwise::logic(*op, bc, a, b, o, lo, hi),
                }
            }
            EltKernel::Where { bc, elem } => {
                let (lo, hi) = tile.range(bc.outer(), 1);
                let o = r.out_bytes(0);
                eltwise::where_select(bc, *elem, io.bytes(0), io.bytes(1), io.bytes(2), o, lo, hi);
            }
            EltKernel::ClipDyn { n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let min = io
                    .opt(1)
                    .map_or(f32::NEG_INFINITY, |b| bytemuck::cast_slice::<u8, f32>(b)[0]);
                let max = io
                    .opt(2)
                    .map_or(f32::INFINITY, |b| bytemuck::cast_slice::<u8, f32>(b)[0]);
                let y = &mut r.out_f32(0)[lo..hi];
                y.copy_from_slice(&io.f32(0)[lo..hi]);
                apply_unary(UnaryOp::Clip { min, max }, y);
            }
            EltKernel::Cast { from, to, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                eltwise::cast(*from, *to, io.bytes(0), r.out_bytes(0), lo, hi);
            }
        }
        Ok(())
    }
}

/// Elements `[lo, hi)` of a unary op on raw bytes of dtype `t`.
fn run_unary(op: UnaryOp, t: DType, x: &[u8], y: &mut [u8], lo: usize, hi: usize) {
    let e = t.size();
    // The integer unary ops, for one integer type.
    macro_rules! int_unary {
        ($t:ty) => {{
            let (x, y): (&[$t], &mut [$t]) = (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(y));
            for (d, s) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = match op {
                    UnaryOp::Neg => s.wrapping_neg(),
                    UnaryOp::Abs => s.wrapping_abs(),
                    UnaryOp::Sign => s.signum(),
                    _ => *s,
                };
            }
        }};
    }
    match t {
        DType::F32 => {
            let (x, y): (&[f32], &mut [f32]) =
                (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(y));
            y[lo..hi].copy_from_slice(&x[lo..hi]);
            apply_unary(op, &mut y[lo..hi]);
        }
        DType::Bool if op == UnaryOp::Not => {
            for (d, s) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = (*s == 0) as u8;
            }
        }
        DType::I64 => int_unary!(i64),
        DType::I32 => int_unary!(i32),
        _ => y[lo * e..hi * e].copy_from_slice(&x[lo * e..hi * e]),
    }
}

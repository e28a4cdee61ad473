//! Reduce family (Reduce*, ArgMax, ArgMin, CumSum): reductions and scans along axes.
//! Runs whole (one tile).

use super::ctx::{norm_axis, Ctx};
use super::errors::{shape_err, unsup};
use super::{layout, FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{DType, ReduceOp};
use crate::kernels::nd::MAX_RANK;
use crate::kernels::reduce::{self, AxisView, ReducePlan};

/// A planned reduction or scan.
#[derive(Debug)]
pub(crate) enum ReduceKernel {
    Reduce {
        op: ReduceOp,
        p: ReducePlan,
        t: DType,
    },
    Arg {
        v: AxisView,
        max: bool,
        last: bool,
    },
    CumSum {
        v: AxisView,
        exclusive: bool,
        reverse: bool,
        t: DType,
    },
}

/// Plans a reduction over `axes` (the attribute, else the constant input 1; none = all
/// axes, or a copy with `noop_with_empty_axes`).
pub(crate) fn plan_reduce(
    c: &Ctx<'_>,
    op: ReduceOp,
    axes: Option<&[i64]>,
    noop_with_empty_axes: bool,
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let t = c.itype(0)?;
    let ok = match t {
        DType::F32 => true,
        DType::I64 => matches!(
            op,
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean
        ),
        _ => false,
    };
    if !ok {
        return Err(unsup(n, format!("{} on {}", op.name(), t.name())));
    }
    let raw: Vec<i64> = match axes {
        Some(a) => a.to_vec(),
        None if c.has(1) => c.const_ints(1, "axes")?,
        None => Vec::new(),
    };
    let mut ax: Vec<usize> = raw
        .iter()
        .map(|&a| norm_axis(n, a, s.len()))
        .collect::<Result<_>>()?;
    ax.sort_unstable();
    ax.dedup();
    if ax.is_empty() {
        if noop_with_empty_axes {
            return layout::plan_reshape(c);
        }
        ax = (0..s.len()).collect();
    }
    let p = ReducePlan::new(s, &ax);
    if p.dims.len() > MAX_RANK {
        return Err(unsup(n, "reduction of rank > 8 after coalescing"));
    }
    let outn: usize = c.oshape(0)?.iter().product();
    let kept: usize = (0..s.len())
        .filter(|d| !ax.contains(d))
        .map(|d| s[d])
        .product();
    if outn != kept || outn * p.count != s.iter().product::<usize>() {
        return Err(shape_err(n, "output size does not match the reduction"));
    }
    Ok(Planned::new(ReduceKernel::Reduce { op, p, t }).scratch(outn))
}

/// Plans an ArgMax (`max`) or ArgMin along `axis` (f32 in, i64 out).
pub(crate) fn plan_arg(c: &Ctx<'_>, axis: i64, max: bool, last: bool) -> Result<Planned> {
    let n = c.n;
    c.require_f32(0)?;
    if c.otype(0)? != DType::I64 {
        return Err(unsup(n, "output must be i64"));
    }
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let v = AxisView::new(s, a);
    if c.oshape(0)?.iter().product::<usize>() != v.outer * v.inner {
        return Err(shape_err(n, "output size does not match the reduced axis"));
    }
    Ok(Planned::new(ReduceKernel::Arg { v, max, last }))
}

/// Plans a CumSum along the constant axis input 1.
pub(crate) fn plan_cumsum(c: &Ctx<'_>, exclusive: bool, reverse: bool) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let t = c.itype(0)?;
    if !matches!(t, DType::F32 | DType::I64) {
        return Err(unsup(n, format!("CumSum on {}", t.name())));
    }
    let s = c.ishape(0)?;
    let ax = c.const_ints(1, "axis")?;
    let a = norm_axis(
        n,
        *ax.first().ok_or_else(|| shape_err(n, "axis is empty"))?,
        s.len(),
    )?;
    c.same_numel(0, 0)?;
    Ok(Planned::new(ReduceKernel::CumSum {
        v: AxisView::new(s, a),
        exclusive,
        reverse,
        t,
    }))
}

impl FamilyKernel for ReduceKernel {
    fn tiles(&self) -> usize {
        1
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let io = r.io;
        match self {
            ReduceKernel::Reduce { op, p, t } => match t {
                DType::I64 => {
                    reduce::reduce_i64(*op, p, io.i64(0), bytemuck::cast_slice_mut(r.out_bytes(0)))
                }
                _ => {
                    let y = super::out_f32(r.out, r.outs, 0);
                    reduce::reduce_f32(*op, p, io.f32(0), y, r.scratch)
                }
            },
            ReduceKernel::Arg { v, max, last } => {
                let y = bytemuck::cast_slice_mut(r.out_bytes(0));
                reduce::arg_extreme(*v, *max, *last, io.f32(0), y);
            }
            ReduceKernel::CumSum {
                v,
                exclusive,
                reverse,
                t,
            } => match t {
                DType::I64 => reduce::cumsum(
                    *v,
                    *exclusive,
                    *reverse,
                    io.i64(0),
                    bytemuck::cast_slice_mut(r.out_bytes(0)),
                ),
                _ => reduce::cumsum(*v, *exclusive, *reverse, io.f32(0), r.out_f32(0)),
            },
        }
        Ok(())
    }
}

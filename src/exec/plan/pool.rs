//! Pool family (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) over NCHW / NCL
//! planes. Tiles split planes.

use super::ctx::{geom2, nchw, Ctx};
use super::errors::{shape_err, unsup};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{self, DType};
use crate::kernels::pool::{self, PoolShape};

/// A planned pool.
#[derive(Debug)]
pub(crate) enum PoolKernel {
    Max(PoolShape),
    /// With `count_include_pad`.
    Avg(PoolShape, bool),
    Global {
        avg: bool,
        planes: usize,
        len: usize,
    },
}

/// Plans a MaxPool (`avg = None`) or an AveragePool (`avg = Some(count_include_pad)`).
/// The output size (with `ceil_mode` applied) comes from the output shape.
pub(crate) fn plan_pool(c: &Ctx<'_>, geom: &ir::ConvGeom, avg: Option<bool>) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let (xs, os) = (c.ishape(0)?, c.oshape(0)?);
    let [nb, ch, h, w] = nchw(n, xs)?;
    let [onb, och, oh, ow] = nchw(n, os)?;
    if os.len() != xs.len() || (onb, och) != (nb, ch) {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit input {xs:?}"),
        ));
    }
    let ge = geom2(n, geom, xs.len() - 2, &[])?;
    let s = PoolShape {
        planes: nb * ch,
        h,
        w,
        oh,
        ow,
        kh: ge.k[0],
        kw: ge.k[1],
        sh: ge.s[0],
        sw: ge.s[1],
        dh: ge.d[0],
        dw: ge.d[1],
        pads: ge.p,
    };
    if n.outputs.len() > 1 {
        return Err(unsup(n, "MaxPool Indices output"));
    }
    Ok(Planned::new(match avg {
        Some(count_include_pad) => {
            if ge.d != [1, 1] {
                return Err(unsup(n, "AveragePool with dilations"));
            }
            PoolKernel::Avg(s, count_include_pad)
        }
        None => PoolKernel::Max(s),
    }))
}

/// Plans a global average (`avg`) or max pool: one value per plane.
pub(crate) fn plan_global_pool(c: &Ctx<'_>, avg: bool) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    if s.len() < 3 {
        return Err(shape_err(c.n, "global pool input needs rank >= 3"));
    }
    let planes = s[0] * s[1];
    if c.oshape(0)?.iter().product::<usize>() != planes {
        return Err(shape_err(c.n, "output must hold one value per plane"));
    }
    Ok(Planned::new(PoolKernel::Global {
        avg,
        planes,
        len: s[2..].iter().product(),
    }))
}

impl FamilyKernel for PoolKernel {
    fn tiles(&self) -> usize {
        match self {
            PoolKernel::Max(s) | PoolKernel::Avg(s, _) => s.planes,
            PoolKernel::Global { planes, .. } => *planes,
        }
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let (tile, isa, x) = (r.tile, r.isa, r.io.f32(0));
        let y = r.out_f32(0);
        match self {
            PoolKernel::Max(s) => {
                let (lo, hi) = tile.range(s.planes, 1);
                pool::max_pool(isa, s, x, y, lo, hi);
            }
            PoolKernel::Avg(s, inc) => {
                let (lo, hi) = tile.range(s.planes, 1);
                pool::avg_pool_on(isa, s, *inc, x, y, lo, hi);
            }
            PoolKernel::Global { avg, planes, len } => {
                let (lo, hi) = tile.range(*planes, 1);
                pool::global_pool(*avg, *len, x, y, lo, hi);
            }
        }
        Ok(())
    }
}

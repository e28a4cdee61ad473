//! Pool family (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) over NCHW / NCL
//! planes, and MaxPoolNhwc over channels-last images. Tiles split planes (channels-last:
//! output rows).

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
    /// Channels-last (`planes` the images), with its channels.
    MaxNhwc(PoolShape, usize),
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
    let s = ge.pool_shape(nb * ch, [h, w], [oh, ow]);
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

/// Output rows of a channels-last max pool between two yield points.
const POOL_BAND_ROWS: usize = 8;

/// Plans a MaxPoolNhwc: X `[N, H, W, C]`, output `[N, OH, OW, C]` (its size, with
/// `ceil_mode` applied, from the output shape).
pub(crate) fn plan_max_pool_nhwc(c: &Ctx<'_>, geom: &ir::ConvGeom) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let (xs, os) = (c.ishape(0)?, c.oshape(0)?);
    if xs.len() != 4 || os.len() != 4 || (os[0], os[3]) != (xs[0], xs[3]) {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit channels-last input {xs:?}"),
        ));
    }
    let ge = geom2(n, geom, 2, &[])?;
    if n.outputs.len() > 1 {
        return Err(unsup(n, "MaxPool Indices output"));
    }
    let s = ge.pool_shape(xs[0], [xs[1], xs[2]], [os[1], os[2]]);
    Ok(Planned::new(PoolKernel::MaxNhwc(s, xs[3])))
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
            PoolKernel::MaxNhwc(s, _) => s.planes * s.oh,
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
            PoolKernel::MaxNhwc(s, ch) => {
                let (lo, hi) = tile.range(s.planes * s.oh, 1);
                let row = s.ow * ch;
                // Bands of rows, a yield point before each (ResNet's pool runs ~200 µs).
                for b0 in (lo..hi).step_by(POOL_BAND_ROWS) {
                    crate::kernels::yield_point::yield_point();
                    let b1 = (b0 + POOL_BAND_ROWS).min(hi);
                    let out = &mut y[b0 * row..b1 * row];
                    pool::max_pool_nhwc(isa, s, *ch, x, out, (b0, b1));
                }
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

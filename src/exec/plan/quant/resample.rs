//! Plans of the int8 resampling ops: QAvgPool, QGlobalAvgPool and QResize (linear) on
//! u8 NCHW tensors, run by `kernels::quant::{avgpool_u8, global_avgpool_u8,
//! resize_bilinear_u8}`. Each computes on the dequantised values as the float QDQ
//! reference does and quantises once to the output parameters. Tiles split planes.

use super::super::ctx::{geom2, nchw, Ctx};
use super::super::errors::{shape_err, unsup};
use super::super::{Planned, Run};
use super::{QKernel, QuantKernel};
use crate::error::Result;
use crate::ir::{ConvGeom, CoordMode, DType, QParam};
use crate::kernels::body::pool::PoolShape;
use crate::kernels::quant::{avgpool_u8, global_avgpool_u8, resize_bilinear_u8};
use crate::kernels::resize;

/// A planned int8 resampling node.
#[derive(Debug)]
pub(crate) enum ResampleKernel {
    /// Average pool of `s` (`count_include_pad` as ONNX).
    AvgPool {
        s: PoolShape,
        count_include_pad: bool,
        x: QParam,
        y: QParam,
    },
    /// One output per plane of `len` values.
    GlobalAvgPool {
        planes: usize,
        len: usize,
        x: QParam,
        y: QParam,
    },
    /// Bilinear resize of `planes` planes of `h x w` with taps per output row / column.
    Bilinear {
        ty: Vec<(usize, usize, f32)>,
        tx: Vec<(usize, usize, f32)>,
        h: usize,
        w: usize,
        planes: usize,
        x: QParam,
        y: QParam,
    },
}

/// Wraps a resampling kernel as a planned int8 node.
fn planned(k: ResampleKernel) -> Planned {
    Planned::new(QuantKernel::Int8(Box::new(QKernel::Resample(k))))
}

/// Checks a u8 input and output.
fn u8_io(c: &Ctx<'_>, what: &str) -> Result<()> {
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(c.n, format!("{what} input must be u8")));
    }
    Ok(())
}

/// Plans a QAvgPool (u8 NCHW, no dilation).
pub(crate) fn plan_qavgpool(
    c: &Ctx<'_>,
    geom: &ConvGeom,
    count_include_pad: bool,
    x: QParam,
    y: QParam,
) -> Result<Planned> {
    let n = c.n;
    u8_io(c, "QAvgPool")?;
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
    if ge.d != [1, 1] {
        return Err(unsup(n, "QAvgPool with dilations"));
    }
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
        dh: 1,
        dw: 1,
        pads: ge.p,
    };
    Ok(planned(ResampleKernel::AvgPool {
        s,
        count_include_pad,
        x,
        y,
    }))
}

/// Plans a QGlobalAvgPool (u8 `[N, C, spatial..]`).
pub(crate) fn plan_qglobal_avgpool(c: &Ctx<'_>, x: QParam, y: QParam) -> Result<Planned> {
    u8_io(c, "QGlobalAvgPool")?;
    let s = c.ishape(0)?;
    if s.len() < 3 {
        return Err(shape_err(c.n, "global pool input needs rank >= 3"));
    }
    let planes = s[0] * s[1];
    if c.oshape(0)?.iter().product::<usize>() != planes {
        return Err(shape_err(c.n, "output must hold one value per plane"));
    }
    Ok(planned(ResampleKernel::GlobalAvgPool {
        planes,
        len: s[2..].iter().product(),
        x,
        y,
    }))
}

/// Plans a QResize (linear over the two innermost dims; `scales`, when given as
/// constant input 2, set the coordinate mapping as for the float Resize).
pub(crate) fn plan_qresize(c: &Ctx<'_>, coord: CoordMode, x: QParam, y: QParam) -> Result<Planned> {
    let n = c.n;
    u8_io(c, "QResize")?;
    let (s, o) = (c.ishape(0)?, c.oshape(0)?);
    let r = s.len();
    if r < 2 || o.len() != r || s[..r - 2] != o[..r - 2] || s.contains(&0) {
        return Err(unsup(
            n,
            format!("QResize of {s:?} to {o:?}: only the two innermost dims of a non-empty input"),
        ));
    }
    if coord == CoordMode::TfCropAndResize {
        return Err(unsup(
            n,
            "coordinate_transformation_mode tf_crop_and_resize",
        ));
    }
    let scales: Vec<f32> = if c.has(2) {
        c.const_f32(2, "scales")?
    } else {
        Vec::new()
    };
    let scale = |d: usize| -> f32 {
        if scales.len() == r {
            scales[d]
        } else {
            o[d] as f32 / s[d] as f32
        }
    };
    Ok(planned(ResampleKernel::Bilinear {
        ty: resize::linear_taps(coord, scale(r - 2), s[r - 2], o[r - 2]),
        tx: resize::linear_taps(coord, scale(r - 1), s[r - 1], o[r - 1]),
        h: s[r - 2],
        w: s[r - 1],
        planes: s[..r - 2].iter().product(),
        x,
        y,
    }))
}

impl ResampleKernel {
    /// Tiles: planes.
    pub(super) fn tiles(&self) -> usize {
        match self {
            ResampleKernel::AvgPool { s, .. } => s.planes,
            ResampleKernel::GlobalAvgPool { planes, .. }
            | ResampleKernel::Bilinear { planes, .. } => *planes,
        }
    }

    /// Runs the planes of `r.tile`.
    pub(super) fn run(&self, r: &mut Run<'_>) {
        let (tile, x) = (r.tile, r.io.bytes(0));
        let out = r.out_bytes(0);
        let qp = |q: &QParam| (q.scale, q.zp);
        match self {
            ResampleKernel::AvgPool {
                s,
                count_include_pad,
                x: qx,
                y,
            } => {
                let (lo, hi) = tile.range(s.planes, 1);
                avgpool_u8(s, *count_include_pad, x, qp(qx), qp(y), out, lo, hi);
            }
            ResampleKernel::GlobalAvgPool {
                planes,
                len,
                x: qx,
                y,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                global_avgpool_u8(*len, x, qp(qx), qp(y), out, lo, hi);
            }
            ResampleKernel::Bilinear {
                ty,
                tx,
                h,
                w,
                planes,
                x: qx,
                y,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                resize_bilinear_u8(ty, tx, *h, *w, x, qp(qx), qp(y), out, lo, hi);
            }
        }
    }
}

//! Image family (Preprocess): a raw u8 image (RGB/BGR/gray/NV12, NHWC or NCHW) converted
//! and normalised into an NCHW f32 tensor. Tiles split output rows.

use super::ctx::Ctx;
use super::errors::{bad_attr, shape_err, unsup};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{DType, ImageFormat};
use crate::kernels::image::Preprocess;

/// A planned Preprocess.
#[derive(Debug)]
pub(crate) struct ImageKernel(Preprocess);

/// Plans a Preprocess to the output shape `[N, 1|3, H, W]` (`mean`, `scale`: 0, 1 or 3
/// values).
pub(crate) fn plan_preprocess(
    c: &Ctx<'_>,
    format: ImageFormat,
    nhwc: bool,
    mean: &[f32],
    scale: &[f32],
    to_bgr: bool,
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    if c.itype(0)? != DType::U8 || c.otype(0)? != DType::F32 {
        return Err(unsup(n, "Preprocess maps u8 to f32"));
    }
    let o = c.oshape(0)?;
    if o.len() != 4 || !(o[1] == 1 || o[1] == 3) {
        return Err(shape_err(n, "Preprocess output must be [N, 1|3, H, W]"));
    }
    let ch = |v: &[f32], d: f32| -> Result<[f32; 3]> {
        match v.len() {
            0 => Ok([d; 3]),
            1 => Ok([v[0]; 3]),
            3 => Ok([v[0], v[1], v[2]]),
            l => Err(bad_attr(
                n,
                "mean/scale",
                format!("{l} values (need 0, 1 or 3)"),
            )),
        }
    };
    let p = Preprocess {
        format,
        nhwc,
        n: o[0],
        h: o[2],
        w: o[3],
        c_out: o[1],
        mean: ch(mean, 0.0)?,
        scale: ch(scale, 1.0)?,
        to_bgr,
    };
    let inb: usize = c.ishape(0)?.iter().product();
    if inb != p.input_len() {
        return Err(shape_err(
            n,
            format!(
                "raw input has {inb} bytes, the image needs {}",
                p.input_len()
            ),
        ));
    }
    Ok(Planned::new(ImageKernel(p)))
}

impl FamilyKernel for ImageKernel {
    fn tiles(&self) -> usize {
        self.0.n * self.0.h
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let p = &self.0;
        let (lo, hi) = r.tile.range(p.n * p.h, 1);
        let x = r.io.bytes(0);
        p.run(x, r.out_f32(0), lo, hi);
        Ok(())
    }
}

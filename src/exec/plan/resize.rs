//! Resize family: nearest (planned as a layout index map), bilinear and bicubic over the
//! two innermost dims (taps computed at plan time). Tiles split planes.

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::layout::index_map;
use super::{out_f32, FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir;
use crate::kernels::body;
use crate::kernels::nd::contiguous_strides;
use crate::kernels::resize;

/// A planned linear or cubic resize of `planes` planes of `h x w`.
#[derive(Debug)]
pub(crate) enum ResizeKernel {
    Bilinear {
        ty: Vec<(usize, usize, f32)>,
        tx: Vec<(usize, usize, f32)>,
        h: usize,
        w: usize,
        planes: usize,
        /// `tx` is the 2x-width pattern (`body::resize::is_up2x`): the table's
        /// `bilinear_up2x` runs it.
        up2x: bool,
    },
    Bicubic {
        ty: Vec<resize::CubicTaps>,
        tx: Vec<resize::CubicTaps>,
        h: usize,
        w: usize,
        planes: usize,
    },
}

/// Plans a Resize to the output shape (`scales`, when given as constant input 2, set the
/// coordinate mapping).
pub(crate) fn plan_resize(
    c: &Ctx<'_>,
    mode: ir::ResizeMode,
    coord: ir::CoordMode,
    nearest: ir::NearestMode,
    (cubic_a, exclude_outside): (f32, bool),
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let o = c.oshape(0)?;
    if s.len() != o.len() || s.is_empty() {
        return Err(shape_err(n, "input and output ranks differ"));
    }
    if s.contains(&0) && !o.contains(&0) {
        return Err(shape_err(
            n,
            "cannot resize an empty input to a non-empty output",
        ));
    }
    if coord == ir::CoordMode::TfCropAndResize {
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
        if scales.len() == s.len() {
            scales[d]
        } else {
            o[d] as f32 / s[d].max(1) as f32
        }
    };
    match mode {
        ir::ResizeMode::Nearest => {
            let st = contiguous_strides(s);
            let maps = (0..s.len())
                .map(|d| {
                    (0..o[d])
                        .map(|oi| {
                            let x = resize::source_coord(coord, oi, scale(d), s[d], o[d]);
                            resize::nearest_index(nearest, x, s[d]) as isize * st[d]
                        })
                        .collect()
                })
                .collect();
            index_map(c, o, maps, vec![0u8; c.itype(0)?.size()])
        }
        ir::ResizeMode::Linear | ir::ResizeMode::Cubic => {
            c.require_f32(0)?;
            let r = s.len();
            if r < 2 || s[..r - 2] != o[..r - 2] || s.contains(&0) {
                return Err(unsup(
                    n,
                    "linear/cubic resize of dims other than the two innermost",
                ));
            }
            let (h, w, planes) = (s[r - 2], s[r - 1], s[..r - 2].iter().product());
            if mode == ir::ResizeMode::Cubic {
                let taps = |d: usize| {
                    resize::cubic_taps(coord, scale(d), s[d], o[d], cubic_a, exclude_outside)
                };
                return Ok(Planned::new(ResizeKernel::Bicubic {
                    ty: taps(r - 2),
                    tx: taps(r - 1),
                    h,
                    w,
                    planes,
                }));
            }
            let tx = resize::linear_taps(coord, scale(r - 1), s[r - 1], o[r - 1]);
            let up2x = body::resize::is_up2x(&tx);
            Ok(Planned::new(ResizeKernel::Bilinear {
                ty: resize::linear_taps(coord, scale(r - 2), s[r - 2], o[r - 2]),
                tx,
                h,
                w,
                planes,
                up2x,
            })
            .scratch(if up2x { 4 * w } else { 0 }))
        }
    }
}

impl FamilyKernel for ResizeKernel {
    fn tiles(&self) -> usize {
        match self {
            ResizeKernel::Bilinear { planes, .. } | ResizeKernel::Bicubic { planes, .. } => *planes,
        }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (tile, x) = (r.tile, r.io.f32(0));
        let y = out_f32(r.out, r.outs, 0);
        match self {
            ResizeKernel::Bilinear {
                ty,
                tx,
                h,
                w,
                planes,
                up2x,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                if *up2x {
                    let up = r.isa.table().bilinear_up2x;
                    up(ty, tx, *h, *w, x, y, (lo, hi), r.scratch);
                } else {
                    resize::bilinear(ty, tx, *h, *w, x, y, lo, hi);
                }
            }
            ResizeKernel::Bicubic {
                ty,
                tx,
                h,
                w,
                planes,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                resize::bicubic(ty, tx, *h, *w, x, y, lo, hi);
            }
        }
        Ok(())
    }
}

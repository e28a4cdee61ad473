//! Generate family (Shape, ConstantOfShape, Range): outputs made from shapes, attributes
//! and scalar inputs rather than from input data. Runs whole (one tile).

use super::ctx::Ctx;
use super::errors::{bad_attr, shape_err, unsup};
use super::index::read_index;
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{DType, Tensor};

/// A planned generator.
#[derive(Debug)]
pub(crate) enum GenKernel {
    /// `start + i * delta` for `n` elements of `t`, from the scalar inputs 0 and 2.
    Range { t: DType, n: usize },
    /// `n` copies of one element.
    Fill { elem: Vec<u8>, n: usize },
    /// Bytes known at plan time.
    ConstOut(Vec<u8>),
}

/// Plans a Range (start, limit, delta: scalars of the output dtype; the length is the
/// output shape).
pub(crate) fn plan_range(c: &Ctx<'_>) -> Result<Planned> {
    let t = c.otype(0)?;
    if !matches!(t, DType::F32 | DType::I64 | DType::I32)
        || (0..3).any(|i| c.itype(i).ok() != Some(t))
    {
        return Err(unsup(
            c.n,
            "Range needs start/limit/delta of the output dtype (f32, i64, i32)",
        ));
    }
    for i in 0..3 {
        if c.ishape(i)?.iter().product::<usize>() != 1 {
            return Err(shape_err(c.n, format!("input {i} must be a scalar")));
        }
    }
    Ok(Planned::new(GenKernel::Range {
        t,
        n: c.oshape(0)?.iter().product(),
    }))
}

/// Plans a ConstantOfShape (the shape is the output shape).
pub(crate) fn plan_constant_of_shape(c: &Ctx<'_>, value: &Tensor) -> Result<Planned> {
    if value.dtype() != c.otype(0)? || value.numel() != 1 {
        return Err(bad_attr(
            c.n,
            "value",
            "must be one element of the output dtype",
        ));
    }
    Ok(Planned::new(GenKernel::Fill {
        elem: crate::exec::const_bytes(value).to_vec(),
        n: c.oshape(0)?.iter().product(),
    }))
}

/// Plans a Shape (dims `start..end` of input 0, known at plan time).
pub(crate) fn plan_shape(c: &Ctx<'_>, start: i64, end: Option<i64>) -> Result<Planned> {
    let s = c.ishape(0)?;
    let r = s.len() as i64;
    let clampi = |x: i64| (if x < 0 { x.saturating_add(r) } else { x }).clamp(0, r) as usize;
    let (lo, hi) = (clampi(start), clampi(end.unwrap_or(r)));
    let dims: Vec<i64> = s[lo..hi.max(lo)].iter().map(|&d| d as i64).collect();
    if c.otype(0)? != DType::I64 || c.oshape(0)?.iter().product::<usize>() != dims.len() {
        return Err(shape_err(
            c.n,
            "output must be an i64 vector of the selected dims",
        ));
    }
    Ok(Planned::new(GenKernel::ConstOut(
        bytemuck::cast_slice(&dims).to_vec(),
    )))
}

/// Scalar `b` of dtype `t` as f64.
fn scalar_f64(t: DType, b: &[u8]) -> f64 {
    match t {
        DType::F32 => f32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as f64,
        _ => read_index(t, b, 0) as f64,
    }
}

impl FamilyKernel for GenKernel {
    fn tiles(&self) -> usize {
        1
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let io = r.io;
        match self {
            GenKernel::Range { t, n } => {
                let start = scalar_f64(*t, io.bytes(0));
                let delta = scalar_f64(*t, io.bytes(2));
                // Integer ranges are computed in i64 (exact beyond 2^53).
                let (istart, idelta) = if *t == DType::F32 {
                    (0, 0)
                } else {
                    (
                        read_index(*t, io.bytes(0), 0),
                        read_index(*t, io.bytes(2), 0),
                    )
                };
                let o = r.out_bytes(0);
                match t {
                    DType::F32 => {
                        let y: &mut [f32] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = (start + i as f64 * delta) as f32;
                        }
                    }
                    DType::I64 => {
                        let y: &mut [i64] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = istart.wrapping_add((i as i64).wrapping_mul(idelta));
                        }
                    }
                    _ => {
                        let y: &mut [i32] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = (istart as i32)
                                .wrapping_add((i as i32).wrapping_mul(idelta as i32));
                        }
                    }
                }
            }
            GenKernel::Fill { elem, n } => {
                let o = r.out_bytes(0);
                for i in 0..*n {
                    o[i * elem.len()..(i + 1) * elem.len()].copy_from_slice(elem);
                }
            }
            GenKernel::ConstOut(b) => r.out_bytes(0).copy_from_slice(b),
        }
        Ok(())
    }
}

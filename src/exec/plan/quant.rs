//! Quant family: QuantizeLinear and DequantizeLinear, run in float exactly as ONNX
//! defines them (and as onnxruntime computes them):
//! `q = saturate(round_half_even(x / scale) + zp)`, `x = (q - zp) * scale` (the
//! subtraction in integers, the product in f32). Per-tensor or per-axis parameters.
//! Tiles split element ranges.

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::{FamilyKernel, Planned, Run, ELEMS_PER_TILE};
use crate::error::Result;
use crate::ir::DType;

/// Per-tensor or per-axis quantisation parameters resolved for a flat loop: element
/// `i` uses entry `(i / inner) % scale.len()`.
#[derive(Debug)]
pub(crate) struct QParams {
    scale: Vec<f32>,
    zp: Vec<i32>,
    inner: usize,
}

impl QParams {
    /// The entry element `i` uses.
    #[inline]
    fn at(&self, i: usize) -> usize {
        if self.scale.len() == 1 {
            0
        } else {
            (i / self.inner) % self.scale.len()
        }
    }
}

/// A planned QuantizeLinear or DequantizeLinear over `n` elements.
#[derive(Debug)]
pub(crate) enum QuantKernel {
    /// f32 → `to` (u8, i8 or i32).
    Quantize { p: QParams, to: DType, n: usize },
    /// `from` (u8, i8 or i32) → f32.
    Dequantize { p: QParams, from: DType, n: usize },
}

/// Reads the constant scale (input 1) and zero point (input 2) of a Q/DQ node on input 0,
/// quantised along `axis`.
fn qparams(c: &Ctx<'_>, axis: Option<usize>) -> Result<QParams> {
    let s = c.ishape(0)?;
    let scale = c.const_f32(1, "scale")?;
    let zp: Vec<i32> = if c.has(2) {
        c.const_ints(2, "zero point")?
            .into_iter()
            .map(|z| i32::try_from(z).unwrap_or(0))
            .collect()
    } else {
        vec![0; scale.len()]
    };
    let (dim, inner) = match axis {
        None => (1, s.iter().product::<usize>().max(1)),
        Some(a) if a < s.len() => (s[a], s[a + 1..].iter().product::<usize>().max(1)),
        Some(a) => return Err(shape_err(c.n, format!("axis {a} out of range"))),
    };
    if scale.len() != dim || zp.len() != dim {
        return Err(shape_err(
            c.n,
            format!(
                "{} scales and {} zero points for {dim} channel(s)",
                scale.len(),
                zp.len()
            ),
        ));
    }
    if scale.iter().any(|s| !s.is_finite() || *s == 0.0) {
        return Err(unsup(c.n, "scales must be finite and non-zero"));
    }
    Ok(QParams { scale, zp, inner })
}

/// Plans a QuantizeLinear to `dtype`.
pub(crate) fn plan_quantize(c: &Ctx<'_>, axis: Option<usize>, dtype: DType) -> Result<Planned> {
    c.require_f32(0)?;
    c.outputs_typed(dtype)?;
    if !matches!(dtype, DType::U8 | DType::I8 | DType::I32) {
        return Err(unsup(c.n, format!("quantising to {}", dtype.name())));
    }
    let p = qparams(c, axis)?;
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Quantize { p, to: dtype, n }))
}

/// Plans a DequantizeLinear.
pub(crate) fn plan_dequantize(c: &Ctx<'_>, axis: Option<usize>) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    let from = c.itype(0)?;
    if !matches!(from, DType::U8 | DType::I8 | DType::I32) {
        return Err(unsup(c.n, format!("dequantising {}", from.name())));
    }
    let p = qparams(c, axis)?;
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Dequantize { p, from, n }))
}

/// `saturate(round_half_even(x / scale) + zp)` into `[lo, hi]`, as onnxruntime's
/// QuantizeLinear computes it (division and rounding in f32).
#[inline]
pub(crate) fn quantize_one(x: f32, scale: f32, zp: i32, lo: f32, hi: f32) -> f32 {
    let v = (x / scale).round_ties_even() + zp as f32;
    if v.is_nan() {
        zp as f32
    } else {
        v.clamp(lo, hi)
    }
}

impl FamilyKernel for QuantKernel {
    fn tiles(&self) -> usize {
        match self {
            QuantKernel::Quantize { n, .. } | QuantKernel::Dequantize { n, .. } => {
                n.div_ceil(ELEMS_PER_TILE)
            }
        }
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let tile = r.tile;
        let io = r.io;
        match self {
            QuantKernel::Quantize { p, to, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let x = &io.f32(0)[lo..hi];
                let out = r.out_bytes(0);
                match to {
                    DType::U8 => {
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            *o = quantize_one(v, p.scale[c], p.zp[c], 0.0, 255.0) as u8;
                        }
                    }
                    DType::I8 => {
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            *o = quantize_one(v, p.scale[c], p.zp[c], -128.0, 127.0) as i8 as u8;
                        }
                    }
                    _ => {
                        let out: &mut [i32] = bytemuck::cast_slice_mut(out);
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            let q = (f64::from(v) / f64::from(p.scale[c])).round_ties_even()
                                + f64::from(p.zp[c]);
                            // `as` saturates (NaN → 0).
                            *o = q as i32;
                        }
                    }
                }
            }
            QuantKernel::Dequantize { p, from, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let b = io.bytes(0);
                let out = &mut r.out_f32(0)[lo..hi];
                let deq = |k: usize, q: i64| {
                    let c = p.at(k);
                    (q - i64::from(p.zp[c])) as f32 * p.scale[c]
                };
                match from {
                    DType::U8 => {
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(b[k]));
                        }
                    }
                    DType::I8 => {
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(b[k] as i8));
                        }
                    }
                    _ => {
                        let x: &[i32] = bytemuck::cast_slice(b);
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(x[k]));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

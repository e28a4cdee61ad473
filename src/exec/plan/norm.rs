//! Normalisation family (BatchNorm, InstanceNorm, LayerNorm, Softmax, LogSoftmax):
//! per-channel or per-row statistics and affine maps. Tiles split planes or rows.

use super::ctx::{expand_channel, norm_axis, Ctx};
use super::errors::shape_err;
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::DType;
use crate::kernels::norm;
use crate::kernels::reduce::{self, AxisView};

/// A planned normalisation.
#[derive(Debug)]
pub(crate) enum NormKernel {
    /// Inference BatchNorm folded into one scale and shift per channel.
    Affine {
        c: usize,
        inner: usize,
        planes: usize,
        scale: Vec<f32>,
        shift: Vec<f32>,
    },
    InstanceNorm {
        c: usize,
        inner: usize,
        planes: usize,
        eps: f32,
        scale: Vec<f32>,
        bias: Vec<f32>,
    },
    LayerNorm {
        len: usize,
        rows: usize,
        eps: f32,
        scale: Vec<f32>,
        bias: Vec<f32>,
    },
    Softmax {
        v: AxisView,
        log: bool,
    },
    /// Softmax over rows of `len` of `x + mask` (input 1, `mask_rows` rows of `len`, row
    /// `r` of x adding mask row `r % mask_rows`).
    MaskedSoftmax {
        len: usize,
        rows: usize,
        mask_rows: usize,
    },
}

/// Plans an inference BatchNorm (constant scale, B, mean, var) as a channel affine map.
pub(crate) fn plan_batchnorm(c: &Ctx<'_>, epsilon: f32) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    if s.len() < 2 {
        return Err(shape_err(n, "BatchNorm input needs rank >= 2"));
    }
    let ch = s[1];
    let scale = c.const_f32(1, "scale")?;
    let b = c.const_f32(2, "B")?;
    let mean = c.const_f32(3, "mean")?;
    let var = c.const_f32(4, "var")?;
    if [scale.len(), b.len(), mean.len(), var.len()]
        .iter()
        .any(|&l| l != ch)
    {
        return Err(shape_err(n, "BatchNorm parameters must have C elements"));
    }
    let sc: Vec<f32> = (0..ch)
        .map(|j| scale[j] / (var[j] + epsilon).sqrt())
        .collect();
    let sh: Vec<f32> = (0..ch).map(|j| b[j] - mean[j] * sc[j]).collect();
    c.same_numel(0, 0)?;
    Ok(Planned::new(NormKernel::Affine {
        c: ch,
        inner: s[2..].iter().product(),
        planes: s[0] * ch,
        scale: sc,
        shift: sh,
    }))
}

/// Plans an InstanceNorm (constant per-channel scale and B).
pub(crate) fn plan_instance_norm(c: &Ctx<'_>, epsilon: f32) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    if s.len() < 3 {
        return Err(shape_err(n, "InstanceNorm input needs rank >= 3"));
    }
    let scale = c.const_f32(1, "scale")?;
    let bias = c.const_f32(2, "B")?;
    if scale.len() != s[1] || bias.len() != s[1] {
        return Err(shape_err(n, "InstanceNorm parameters must have C elements"));
    }
    c.same_numel(0, 0)?;
    Ok(Planned::new(NormKernel::InstanceNorm {
        c: s[1],
        inner: s[2..].iter().product(),
        planes: s[0] * s[1],
        eps: epsilon,
        scale,
        bias,
    }))
}

/// Plans a LayerNorm over the dims from `axis` on (constant scale, optional B).
pub(crate) fn plan_layer_norm(c: &Ctx<'_>, axis: i64, epsilon: f32) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let len: usize = s[a..].iter().product();
    let scale = c.const_f32(1, "scale")?;
    let bias = if c.has(2) {
        c.const_f32(2, "B")?
    } else {
        Vec::new()
    };
    let scale = expand_channel(n, &scale, len, "scale")?;
    let bias = if bias.is_empty() {
        bias
    } else {
        expand_channel(n, &bias, len, "B")?
    };
    c.same_numel(0, 0)?;
    Ok(Planned::new(NormKernel::LayerNorm {
        len,
        rows: s[..a].iter().product(),
        eps: epsilon,
        scale,
        bias,
    }))
}

/// Plans a Softmax (or LogSoftmax, `log`) along `axis`.
pub(crate) fn plan_softmax(c: &Ctx<'_>, axis: i64, log: bool) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    let a = norm_axis(c.n, axis, s.len())?;
    c.same_numel(0, 0)?;
    Ok(Planned::new(NormKernel::Softmax {
        v: AxisView::new(s, a),
        log,
    }))
}

/// Plans a MaskedSoftmax: softmax over the last axis of `x + mask`.
pub(crate) fn plan_masked_softmax(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    c.require_f32(1)?;
    let (s, m) = (c.ishape(0)?, c.ishape(1)?);
    if !crate::ir::shape::is_trailing_mask(m, s) {
        return Err(crate::exec::plan::errors::shape_err(
            c.n,
            format!("mask {m:?} is not the trailing dims of {s:?}"),
        ));
    }
    let len = s.last().copied().unwrap_or(1).max(1);
    let (numel, mnumel) = (s.iter().product::<usize>(), m.iter().product::<usize>());
    Ok(Planned::new(NormKernel::MaskedSoftmax {
        len,
        rows: numel / len,
        mask_rows: (mnumel / len).max(1),
    }))
}

impl FamilyKernel for NormKernel {
    fn tiles(&self) -> usize {
        match self {
            NormKernel::Affine { planes, .. } | NormKernel::InstanceNorm { planes, .. } => *planes,
            NormKernel::LayerNorm { rows, .. } => *rows,
            NormKernel::Softmax { v, .. } => reduce::softmax_tiles(*v),
            NormKernel::MaskedSoftmax { rows, .. } => *rows,
        }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (tile, isa, x) = (r.tile, r.isa, r.io.f32(0));
        let y = super::out_f32(r.out, r.outs, 0);
        match self {
            NormKernel::Affine {
                c,
                inner,
                planes,
                scale,
                shift,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                norm::channel_affine(*c, *inner, scale, shift, x, y, lo, hi);
            }
            NormKernel::InstanceNorm {
                c,
                inner,
                planes,
                eps,
                scale,
                bias,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                norm::instance_norm(*c, *inner, *eps, scale, bias, x, y, lo, hi);
            }
            NormKernel::LayerNorm {
                len,
                rows,
                eps,
                scale,
                bias,
            } => {
                let (lo, hi) = tile.range(*rows, 1);
                norm::layer_norm(isa, *len, *eps, scale, bias, x, y, lo, hi);
            }
            NormKernel::Softmax { v, log } => {
                let (lo, hi) = tile.range(reduce::softmax_tiles(*v), 1);
                reduce::softmax(isa, *v, *log, x, y, lo, hi);
            }
            NormKernel::MaskedSoftmax {
                len,
                rows,
                mask_rows,
            } => {
                let (lo, hi) = tile.range(*rows, 1);
                let (row, mask) = (isa.table().softmax_row, r.io.f32(1));
                for o in lo..hi {
                    let (xr, mr) = (o * len..(o + 1) * len, (o % mask_rows) * len);
                    row(&x[xr.clone()], &mask[mr..mr + len], &mut y[xr], false);
                }
            }
        }
        Ok(())
    }
}

//! Channels-last depthwise conv (`ConvNhwc` with a group per channel, placed by
//! `compile::layout`):
//! planning (geometry checked, taps packed tap-major, fused post-ops resolved, intra-op
//! chunks cut) and running by output rows: tiles and intra-op chunks are ranges of the
//! `N * OH` output rows, each computed by the same kernel as the whole (bit-identical).

use super::ctx::{geom2, Ctx};
use super::errors::{shape_err, unsup};
use super::post::{post_ops, residual_inputs};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::exec::pool;
use crate::ir::{self, DType, PostOp};
use crate::kernels::body::dw_nhwc::pack_taps;
use crate::kernels::conv::{depthwise_nhwc, ConvShape};
use crate::kernels::gemm::Epilogue;
use crate::kernels::simd::Isa;
use crate::kernels::unary::PostOpRt;

/// A planned channels-last depthwise conv.
#[derive(Debug)]
pub(crate) struct DwNhwcKernel {
    s: ConvShape,
    /// Taps `[KH*KW][C]`.
    taps: Vec<f32>,
    /// Per-channel bias (zeros without one).
    bias: Vec<f32>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
    /// Output row ranges of the intra-op chunks when the node runs whole; empty = one
    /// thread.
    par: Vec<(usize, usize)>,
}

/// Plans a depthwise `ConvNhwc` (`group` = channels): X `[N, H, W, C]`, W `[C, 1, KH,
/// KW]` constant, [B `[C]` constant], output `[N, OH, OW, C]`.
pub(crate) fn plan_depthwise_nhwc(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let (xs, os) = (c.ishape(0)?, c.oshape(0)?);
    let (&[nb, h, w, ch], &[onb, oh, ow, och]) = (xs, os) else {
        return Err(shape_err(
            n,
            format!("input {xs:?} / output {os:?} are not 4-D"),
        ));
    };
    if group != ch {
        return Err(unsup(
            n,
            format!("channels-last conv of {group} groups of {ch} channels"),
        ));
    }
    if (onb, och) != (nb, ch) {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit input {xs:?}"),
        ));
    }
    let ge = geom2(n, geom, 2, &[])?;
    // The output plane the window gives (a file's shapes are not trusted).
    let out_dim = |len: usize, i: usize| {
        let (k, pads) = ((ge.k[i] - 1) * ge.d[i] + 1, ge.p[i] + ge.p[i + 2]);
        (len + pads).checked_sub(k).map(|v| v / ge.s[i] + 1)
    };
    if out_dim(h, 0) != Some(oh) || out_dim(w, 1) != Some(ow) {
        return Err(shape_err(
            n,
            format!("output {os:?} is not the window of input {xs:?}"),
        ));
    }
    let s = ge.conv_shape(nb, [ch, h, w], [ch, oh, ow], ch);
    let khw = s.kh * s.kw;
    let wt = c.const_f32(1, "ConvNhwc weights")?;
    if wt.len() != ch * khw {
        return Err(shape_err(
            n,
            format!("{} weights for {ch} channels of {khw} taps", wt.len()),
        ));
    }
    let bias = match n.inputs.get(2).copied().flatten() {
        Some(_) => {
            let b = c.const_f32(2, "ConvNhwc bias")?;
            if b.len() != ch {
                return Err(shape_err(
                    n,
                    format!("{} biases for {ch} channels", b.len()),
                ));
            }
            b
        }
        None => vec![0.0; ch],
    };
    if ge.p[0] >= s.kh * s.dh || ge.p[1] >= s.kw * s.dw {
        // A leading pad past the kernel's reach leaves whole output rows / columns
        // without taps; the ONNX conv allows it, the row kernels do not expect it.
        return Err(unsup(n, "leading pads past the kernel extent"));
    }
    let (post, res) = post_ops(c, post, ch)?;
    let rows = nb * oh;
    let us = s.macs() / pool::DEPTHWISE_MACS_PER_US;
    let par = if c.threads < 2 {
        Vec::new()
    } else {
        pool::chunk_ranges(rows, 1, us, c.threads)
    };
    let helper = usize::from(!par.is_empty());
    Ok(Planned::new(DwNhwcKernel {
        taps: pack_taps(&wt, ch, khw),
        s,
        bias,
        post,
        res,
        par,
    })
    .helper_scratch(helper))
}

impl DwNhwcKernel {
    /// Rows `r0..r1` into `y` (those rows).
    fn rows(&self, isa: Isa, x: &[f32], y: &mut [f32], r: (usize, usize), epi: &Epilogue<'_>) {
        depthwise_nhwc(isa, &self.s, &self.taps, &self.bias, x, y, r, epi);
    }
}

impl FamilyKernel for DwNhwcKernel {
    fn tiles(&self) -> usize {
        self.s.n * self.s.oh
    }

    fn macs(&self) -> usize {
        self.s.macs()
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let resid = residual_inputs(r.io, &self.res);
        let epi = Epilogue {
            post: &self.post,
            residuals: &resid[..self.res.len()],
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let (isa, tile) = (r.isa, r.tile);
        let x = r.io.f32(0);
        let row = self.s.ow * self.s.c_out;
        let helpers = std::mem::take(&mut r.helpers);
        let scratch = std::mem::take(&mut r.scratch);
        let y = r.out_f32(0);
        if tile.count == 1 && !self.par.is_empty() && helpers.len() + 1 >= self.par.len() {
            let mut parts = pool::chunk_parts(
                self.par.iter().map(|&(a, b)| (b - a) * row),
                y,
                scratch,
                helpers,
            );
            pool::global().run(&mut parts[..self.par.len()], &|i, slot| {
                if let Some((part, _)) = slot.take() {
                    self.rows(isa, x, part, self.par[i], &epi);
                }
            });
        } else {
            let (lo, hi) = tile.range(self.s.n * self.s.oh, 1);
            self.rows(isa, x, &mut y[lo * row..hi * row], (lo, hi), &epi);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::testutil::*;
    use crate::exec::{ModelPlan, PlanOptions};
    use crate::ir::{ConvGeom, Op};
    use std::sync::Arc;

    fn conv_nhwc(group: usize, wshape: &[usize], oh: usize) -> crate::error::Result<ModelPlan> {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 5, 5, 4]);
        let n: usize = wshape.iter().product();
        let w = b.konst("w", wshape, rand_vec(n, 1));
        let op = Op::ConvNhwc {
            geom: ConvGeom {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1; 4],
                auto_pad: None,
            },
            group,
            post: vec![],
        };
        let y = b.node("c", op, &[x, w], &[1, oh, oh, wshape[0]]);
        ModelPlan::new(Arc::new(b.finish(&[y])), &PlanOptions::default())
    }

    #[test]
    fn only_depthwise_channels_last_convs_are_planned() {
        assert!(conv_nhwc(4, &[4, 1, 3, 3], 5).is_ok());
        let e = conv_nhwc(1, &[4, 4, 3, 3], 5).expect_err("dense channels-last conv");
        assert!(e.to_string().contains("1 groups of 4 channels"), "{e}");
    }

    #[test]
    fn an_output_plane_that_is_not_the_window_is_refused() {
        let e = conv_nhwc(4, &[4, 1, 3, 3], 9).expect_err("9x9 output of a 5x5 input");
        assert!(e.to_string().contains("not the window"), "{e}");
    }
}

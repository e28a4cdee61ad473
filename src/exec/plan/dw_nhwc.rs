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

/// The kernel-level shape of a `ConvNhwc` with `group` groups, one per channel
/// (depthwise) or one (dense): X `[N, H, W, C]`, output `[N, OH, OW, Cout]` the window
/// of the geometry (a file's shapes are not trusted).
pub(super) fn nhwc_shape(c: &Ctx<'_>, geom: &ir::ConvGeom, group: usize) -> Result<ConvShape> {
    nhwc_shape_of(c, geom, group, c.ishape(0)?)
}

/// [`nhwc_shape`] of a conv whose input `[N, H, W, C]` is `xs` (not the node's input 0:
/// the expanded image of `ExpandConvNhwc`).
pub(super) fn nhwc_shape_of(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    xs: &[usize],
) -> Result<ConvShape> {
    nhwc_shape_io(c, geom, group, xs, c.oshape(0)?)
}

/// [`nhwc_shape_of`] of a conv whose output is `os` (not the node's output 0: the
/// depthwise output that `DwProjectNhwc` projects).
pub(super) fn nhwc_shape_io(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    xs: &[usize],
    os: &[usize],
) -> Result<ConvShape> {
    let n = c.n;
    let (&[nb, h, w, ch], &[onb, oh, ow, och]) = (xs, os) else {
        return Err(shape_err(
            n,
            format!("input {xs:?} / output {os:?} are not 4-D"),
        ));
    };
    if group != ch && group != 1 {
        return Err(unsup(
            n,
            format!("channels-last conv of {group} groups of {ch} channels"),
        ));
    }
    if onb != nb || (group > 1 && och != ch) || och == 0 {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit input {xs:?}"),
        ));
    }
    let ge = geom2(n, geom, 2, &[])?;
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
    let s = ge.conv_shape(nb, [ch, h, w], [och, oh, ow], group);
    if ge.p[0] >= s.kh * s.dh || ge.p[1] >= s.kw * s.dw {
        // A leading pad past the kernel's reach leaves whole output rows / columns
        // without taps; the ONNX conv allows it, the row kernels do not expect it.
        return Err(unsup(n, "leading pads past the kernel extent"));
    }
    Ok(s)
}

/// Plans a depthwise `ConvNhwc` (`group` = channels): X `[N, H, W, C]`, W `[C, 1, KH,
/// KW]` constant, [B `[C]` constant], output `[N, OH, OW, C]`.
pub(crate) fn plan_depthwise_nhwc(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = nhwc_shape(c, geom, group)?;
    let ch = s.c_in;
    let (taps, bias) = depthwise_weights(c, &s, 1)?;
    let (post, res) = post_ops(c, post, ch)?;
    let rows = s.n * s.oh;
    let us = s.macs() / pool::DEPTHWISE_MACS_PER_US;
    let par = if c.threads < 2 {
        Vec::new()
    } else {
        pool::chunk_ranges(rows, 1, us, c.threads)
    };
    let helper = usize::from(!par.is_empty());
    Ok(Planned::new(DwNhwcKernel {
        taps,
        s,
        bias,
        post,
        res,
        par,
    })
    .helper_scratch(helper))
}

/// The constant weights `[C, 1, KH, KW]` of the depthwise conv `s` at input `at` as taps
/// `[KH*KW][C]`, and its bias at input `at + 1` (zeros without one).
pub(super) fn depthwise_weights(
    c: &Ctx<'_>,
    s: &ConvShape,
    at: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let (n, ch, khw) = (c.n, s.c_in, s.kh * s.kw);
    let wt = c.const_f32(at, "depthwise weights")?;
    if wt.len() != ch * khw {
        return Err(shape_err(
            n,
            format!("{} weights for {ch} channels of {khw} taps", wt.len()),
        ));
    }
    let bias = match n.inputs.get(at + 1).copied().flatten() {
        Some(_) => {
            let b = c.const_f32(at + 1, "depthwise bias")?;
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
    Ok((pack_taps(&wt, ch, khw), bias))
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

    fn run(&self, r: Run<'_>) -> Result<()> {
        let resid = residual_inputs(r.io, &self.res);
        let epi = Epilogue {
            post: &self.post,
            residuals: &resid[..self.res.len()],
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let (isa, x) = (r.isa, r.io.f32(0));
        let rows = (self.s.n * self.s.oh, self.s.ow * self.s.c_out);
        run_by_rows(r, &self.par, rows, |out, range, _| {
            self.rows(isa, x, out, range, &epi)
        });
        Ok(())
    }
}

/// Runs a channels-last conv by output rows (`rows.0` rows of `rows.1` floats): on the
/// intra-op chunks `par` (row ranges) when the node runs whole and the helpers are there,
/// else the FC tile's range of rows; `f(out, (r0, r1), scratch)` computes rows `r0..r1`
/// into `out` with the scratch of the thread running them.
pub(super) fn run_by_rows<F>(mut r: Run<'_>, par: &[(usize, usize)], rows: (usize, usize), f: F)
where
    F: Fn(&mut [f32], (usize, usize), &mut [f32]) + Sync,
{
    let (n, row) = rows;
    let tile = r.tile;
    let helpers = std::mem::take(&mut r.helpers);
    let scratch = std::mem::take(&mut r.scratch);
    let y = r.out_f32(0);
    if tile.count == 1 && !par.is_empty() && helpers.len() + 1 >= par.len() {
        let lens = par.iter().map(|&(a, b)| (b - a) * row);
        let mut parts = pool::chunk_parts(lens, y, scratch, helpers);
        pool::global().run(&mut parts[..par.len()], &|i, slot| {
            if let Some((part, sc)) = slot.take() {
                f(part, par[i], sc);
            }
        });
    } else {
        let (lo, hi) = tile.range(n, 1);
        f(&mut y[lo * row..hi * row], (lo, hi), scratch);
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
    fn only_depthwise_and_one_group_channels_last_convs_are_planned() {
        assert!(conv_nhwc(4, &[4, 1, 3, 3], 5).is_ok());
        assert!(conv_nhwc(1, &[6, 4, 3, 3], 5).is_ok());
        let e = conv_nhwc(2, &[4, 2, 3, 3], 5).expect_err("grouped channels-last conv");
        assert!(e.to_string().contains("2 groups of 4 channels"), "{e}");
    }

    #[test]
    fn an_output_plane_that_is_not_the_window_is_refused() {
        let e = conv_nhwc(4, &[4, 1, 3, 3], 9).expect_err("9x9 output of a 5x5 input");
        assert!(e.to_string().contains("not the window"), "{e}");
    }
}

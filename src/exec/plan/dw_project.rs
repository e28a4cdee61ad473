//! A channels-last depthwise conv (alone, or with the expansion before it: the pair of
//! `ExpandConvNhwc`) fused with the 1x1 projection that alone reads its output
//! (`DwProjectNhwc`, fused by `compile::band`): each band of output rows runs the
//! depthwise conv into scratch and the projection's GEMM from there into the output, so
//! that the depthwise output (MobileNetV2's first block: 112x112x32, 1.6 MB) is never
//! written whole nor read back from memory.
//!
//! Same bits as the nodes apart: the depthwise rows are the same kernel's sums whatever
//! rows a call asks for, and every projected row is one GEMM row (its sum does not depend
//! on the rows computed with it), with A read in place as the `MatMul` plan reads it for
//! so few output channels (`gemm::A_IN_PLACE_MAX_N`, which the fusion requires).

use super::ctx::Ctx;
use super::dw_nhwc::{depthwise_weights, nhwc_shape_io, run_by_rows};
use super::errors::shape_err;
use super::expand_dw::{expand_dw_kernel, ExpandDwKernel};
use super::post::{leading_bias, post_ops, residual_inputs};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::exec::pool;
use crate::ir::{self, DType, PostOp};
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::conv::{depthwise_nhwc, ConvShape};
use crate::kernels::gemm::{self, ASource, BSource, Epilogue};
use crate::kernels::simd::Isa;
use crate::kernels::unary::PostOpRt;

/// Bytes of depthwise output rows one band holds at most (at least one row): with the
/// projection's weights, inside L1 and L2 while the GEMM reads them.
const BAND_BYTES: usize = 96 * 1024;

/// The depthwise part of a fused node.
#[derive(Debug)]
enum Depthwise {
    /// A depthwise conv on the node's input: its shape, taps `[KH*KW][C]`, bias and
    /// post-ops (no residuals).
    Alone {
        s: ConvShape,
        taps: Vec<f32>,
        bias: Vec<f32>,
        post: Vec<PostOpRt>,
    },
    /// The expansion and depthwise conv of an `ExpandConvNhwc`.
    Expanded(ExpandDwKernel),
}

/// A planned `DwProjectNhwc`.
#[derive(Debug)]
pub(crate) struct DwProjectKernel {
    dw: Depthwise,
    /// The depthwise conv's shape (its `c_out` channels are the projection's depth).
    s: ConvShape,
    /// Output channels of the projection.
    cout: usize,
    /// The projection's B `[C, Cout]`, packed.
    pb: Vec<f32>,
    /// The projection's bias, other post-ops and their residual inputs.
    pbias: Option<Vec<f32>>,
    ppost: Vec<PostOpRt>,
    pres: Vec<usize>,
    /// Output rows per band.
    band: usize,
    /// Output row ranges of the intra-op chunks when the node runs whole; empty = one
    /// thread.
    par: Vec<(usize, usize)>,
}

/// Plans a `DwProjectNhwc`: X `[N, H, W, Cin]`, [W1 `[Cin, C]` with `expand`], W `[C, 1,
/// KH, KW]`, [B `[C]`], W2 `[C, Cout]`, all but X constant, then the projection's
/// residuals; output `[N, OH, OW, Cout]`.
pub(crate) fn plan_dw_project(
    c: &Ctx<'_>,
    expand: Option<&[PostOp]>,
    geom: &ir::ConvGeom,
    group: usize,
    (post, project): (&[PostOp], &[PostOp]),
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let (xs, os) = (c.ishape(0)?, c.oshape(0)?);
    let (&[nb, h, w, cin], &[onb, oh, ow, cout]) = (xs, os) else {
        return Err(shape_err(
            n,
            format!("input {xs:?} / output {os:?} are not [N, H, W, C]"),
        ));
    };
    if post.iter().any(|p| matches!(p, PostOp::AddInput { .. })) {
        return Err(shape_err(
            n,
            "the depthwise conv's epilogue adds no residual",
        ));
    }
    // The depthwise output: the output's rows with the conv's channels.
    let ch = match expand {
        Some(_) => match c.ishape(1)? {
            &[_, ce] => ce,
            s => return Err(shape_err(n, format!("expansion {s:?} is not [Cin, C]"))),
        },
        None => cin,
    };
    let dos = [onb, oh, ow, ch];
    let (dw, s, at) = match expand {
        Some(e) => {
            let k = expand_dw_kernel(c, e, geom, group, post, &dos)?;
            let s = k.s.clone();
            (Depthwise::Expanded(k), s, 4)
        }
        None => {
            let s = nhwc_shape_io(c, geom, group, &[nb, h, w, cin], &dos)?;
            if group != cin {
                return Err(shape_err(n, "a projection fused after a dense conv"));
            }
            let (taps, bias) = depthwise_weights(c, &s, 1)?;
            let (post, _) = post_ops(c, post, ch)?;
            (
                Depthwise::Alone {
                    s: s.clone(),
                    taps,
                    bias,
                    post,
                },
                s,
                3,
            )
        }
    };
    let w2 = c.const_f32(at, "projection weights")?;
    let w2s = c.ishape(at)?;
    if w2s != [ch, cout] || w2.len() != ch * cout || cout > gemm::A_IN_PLACE_MAX_N {
        return Err(shape_err(
            n,
            format!("projection {w2s:?} for {ch} -> {cout} channels"),
        ));
    }
    let mut pb = vec![0.0; gemm::packed_b_len(ch, cout)];
    gemm::pack_b(&w2, cout, 1, ch, cout, 1.0, &mut pb, &mut vec![0.0; cout]);
    let (pbias, prest) = leading_bias(c, project, cout)?;
    let (ppost, pres) = post_ops(c, prest, cout)?;
    // Output rows per band: the expansion's own bands (its expanded rows carried from
    // one to the next), else as many as BAND_BYTES of depthwise output holds.
    let band = match &dw {
        Depthwise::Expanded(k) => k.band,
        Depthwise::Alone { .. } => (BAND_BYTES / (ow * ch * 4).max(1)).clamp(1, oh.max(1)),
    };
    let mut k = DwProjectKernel {
        dw,
        s,
        cout,
        pb,
        pbias,
        ppost,
        pres,
        band,
        par: Vec::new(),
    };
    if c.threads >= 2 {
        let us = k.macs() / pool::DENSE_MACS_PER_US;
        k.par = pool::chunk_ranges(k.s.n * k.s.oh, 1, us, c.threads);
    }
    let scratch = k.scratch_len();
    let helper = if k.par.is_empty() { 0 } else { scratch };
    Ok(Planned::new(Box::new(k))
        .scratch(scratch)
        .helper_scratch(helper))
}

impl DwProjectKernel {
    /// Floats of one band's depthwise output.
    fn band_len(&self) -> usize {
        self.band * self.s.ow * self.s.c_out
    }

    /// Scratch floats: one band's depthwise output, then the expansion's scratch.
    fn scratch_len(&self) -> usize {
        self.band_len()
            + match &self.dw {
                Depthwise::Expanded(k) => k.scratch_len(),
                Depthwise::Alone { .. } => 0,
            }
    }

    /// Output rows `r0..r1` (of `N * OH`) into `y` (those rows), band by band.
    fn rows(
        &self,
        isa: Isa,
        x: &[f32],
        resid: &[&[f32]],
        y: &mut [f32],
        (r0, r1): (usize, usize),
        scratch: &mut [f32],
    ) {
        let s = &self.s;
        let (ch, cout) = (s.c_out, self.cout);
        let (d, e) = scratch.split_at_mut(self.band_len());
        // Expanded rows the expansion's scratch holds, carried from band to band.
        let mut held = None;
        let mut r = r0;
        while r < r1 {
            // A band stays inside one image.
            let o0 = r % s.oh;
            let rows = self.band.min(s.oh - o0).min(r1 - r);
            let m = rows * s.ow;
            let dw = &mut d[..m * ch];
            match &self.dw {
                Depthwise::Alone {
                    s,
                    taps,
                    bias,
                    post,
                } => {
                    let epi = Epilogue {
                        post,
                        channel_is_row: false,
                        ..Epilogue::NONE
                    };
                    depthwise_nhwc(isa, s, taps, bias, x, dw, (r, r + rows), &epi);
                }
                Depthwise::Expanded(k) => k.rows(isa, x, &[], dw, (r, r + rows), e, &mut held),
            }
            let rc = residual_slices(resid, r * s.ow * cout..(r + rows) * s.ow * cout);
            let epi = Epilogue {
                bias: self.pbias.as_deref(),
                channel_is_row: false,
                post: &self.ppost,
                residuals: &rc[..resid.len()],
                ..Epilogue::NONE
            };
            let out = &mut y[(r - r0) * s.ow * cout..][..m * cout];
            gemm::gemm_with(
                isa,
                m,
                cout,
                ch,
                ASource::InPlace { a: dw, lda: ch },
                BSource::Packed(&self.pb),
                &mut [],
                out,
                cout,
                (0, m),
                (0, cout),
                &epi,
            );
            r += rows;
        }
    }
}

impl FamilyKernel for DwProjectKernel {
    fn tiles(&self) -> usize {
        self.s.n * self.s.oh
    }

    fn macs(&self) -> usize {
        let project = self.s.n * self.s.oh * self.s.ow * self.s.c_out * self.cout;
        project
            + match &self.dw {
                Depthwise::Expanded(k) => k.macs(),
                Depthwise::Alone { s, .. } => s.macs(),
            }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let resid = residual_inputs(r.io, &self.pres);
        let resid = &resid[..self.pres.len()];
        let (isa, x) = (r.isa, r.io.f32(0));
        let rows = (self.s.n * self.s.oh, self.s.ow * self.cout);
        run_by_rows(r, &self.par, rows, |out, range, scratch| {
            self.rows(isa, x, resid, out, range, scratch)
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::testutil::*;
    use crate::exec::{ModelPlan, PlanOptions};
    use crate::ir::{ConvGeom, Op, PostOp};
    use std::sync::Arc;

    /// A `DwProjectNhwc` over X `[1, 8, 8, 6]` (no expansion) with depthwise weights
    /// `wd` and projection `w2`, planned.
    fn plan(wd: &[usize], w2: &[usize]) -> crate::error::Result<ModelPlan> {
        plan_with(wd, w2, vec![])
    }

    /// [`plan`] with the depthwise epilogue `post`.
    fn plan_with(wd: &[usize], w2: &[usize], post: Vec<PostOp>) -> crate::error::Result<ModelPlan> {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8, 8, 6]);
        let wd = b.konst("wd", wd, rand_vec(wd.iter().product(), 1));
        let bd = b.konst("bd", &[6], rand_vec(6, 2));
        let w2v = b.konst("w2", w2, rand_vec(w2.iter().product(), 3));
        let op = Op::DwProjectNhwc {
            expand: None,
            geom: ConvGeom {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1; 4],
                auto_pad: None,
            },
            group: 6,
            post,
            project: vec![],
        };
        let y = b.node("f", op, &[x, wd, bd, w2v], &[1, 8, 8, w2[1]]);
        ModelPlan::new(Arc::new(b.finish(&[y])), &PlanOptions::default())
    }

    #[test]
    fn mismatched_depthwise_or_projection_weights_are_named_errors() {
        assert!(plan(&[6, 1, 3, 3], &[6, 4]).is_ok());
        let e = plan(&[6, 1, 3, 3], &[5, 4]).expect_err("projection of 5 rows for 6 channels");
        assert!(e.to_string().contains("projection"), "{e}");
        let e = plan(&[6, 1, 2, 3], &[6, 4]).expect_err("depthwise taps of a 2x3 kernel");
        assert!(e.to_string().contains("weights"), "{e}");
        // The same 24 weights as [4, 6]: not read as [6, 4].
        let e = plan(&[6, 1, 3, 3], &[4, 6]).expect_err("a transposed projection");
        assert!(e.to_string().contains("projection"), "{e}");
        // A residual in the depthwise epilogue (only the projection's may add one).
        let post = vec![PostOp::AddInput { input: 0 }];
        let e = plan_with(&[6, 1, 3, 3], &[6, 4], post).expect_err("depthwise residual");
        assert!(e.to_string().contains("no residual"), "{e}");
    }
}

//! Dense channels-last conv (`ConvNhwc` with one group: the image stems and, in models
//! compiled for bf16 on a CPU with a matrix engine, the dense convs placed by
//! `compile::layout`): planning (geometry checked, weights packed, bias and fused
//! post-ops resolved, intra-op chunks cut) and running by output rows: tiles and
//! intra-op chunks are ranges of the `N * OH` output rows, each computed by the same
//! kernel as the whole (bit-identical).
//!
//! Two kernels: in a bf16 plan whose table has the wide (AMX) run and a conv it takes,
//! `conv_direct_nhwc` on the wide run; else the f32 batch-reduce GEMM `dense_nhwc`.

use super::ctx::Ctx;
use super::dw_nhwc::{nhwc_shape, run_by_rows};
use super::errors::{shape_err, unsup};
use super::post::{post_ops, residual_inputs};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::exec::pool;
use crate::ir::{self, DType, PostOp};
use crate::kernels::bf16::{self, Bf16Table};
use crate::kernels::conv::{
    dense_nhwc, dense_nhwc_applies, dense_nhwc_scratch_len, direct_nhwc_scratch_len,
    pack_dense_nhwc, ConvShape,
};
use crate::kernels::gemm::Epilogue;
use crate::kernels::unary::PostOpRt;

/// A planned one-group channels-last conv.
#[derive(Debug)]
pub(crate) struct DenseNhwcKernel {
    s: ConvShape,
    /// The packed weights, for the kernel that runs the conv.
    w: Weights,
    /// Per-channel bias (zeros without one).
    bias: Vec<f32>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
    /// Output row ranges of the intra-op chunks when the node runs whole; empty = one
    /// thread.
    par: Vec<(usize, usize)>,
}

/// The weights of a [`DenseNhwcKernel`], as its kernel reads them.
enum Weights {
    /// f32, packed as the GEMM's B `[KH*KW*Cin][Cout]` (`dense_nhwc`).
    Gemm(Vec<f32>),
    /// bf16 K pairs in the wide run's panels, and the table that runs them.
    Wide(bf16::Dwords, &'static Bf16Table),
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Weights::Gemm(w) => write!(f, "Gemm({} floats)", w.len()),
            Weights::Wide(w, t) => write!(f, "Wide({} pairs, {})", w.len(), t.name),
        }
    }
}

/// Products per microsecond of the wide run, for cutting intra-op chunks (a 64-channel
/// 3x3 conv at 56x56 ran at ~400 GMAC/s on a 2.6 GHz Xeon VM).
const WIDE_MACS_PER_US: usize = 300_000;

/// The wide run's time for conv `s`, in µs, for cutting intra-op chunks: its products at
/// [`WIDE_MACS_PER_US`] plus its f32 input and output at [`pool::STREAM_BYTES_PER_US`]
/// (shallow convs are bound by their planes, not by the engine: MobileNetV2's 1x1
/// 16 -> 96 expansion at 112x112, 5.6 MB in and out, took 417 us, 46 GMAC/s).
fn wide_us(s: &ConvShape) -> usize {
    let bytes = 4 * s.n * (s.h * s.w * s.c_in + s.oh * s.ow * s.c_out);
    s.macs() / WIDE_MACS_PER_US + bytes / pool::STREAM_BYTES_PER_US
}

/// Plans a one-group `ConvNhwc`: X `[N, H, W, Cin]`, W `[Cout, Cin, KH, KW]` constant,
/// [B `[Cout]` constant], output `[N, OH, OW, Cout]`.
pub(crate) fn plan_dense_nhwc(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    post: &[PostOp],
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let s = nhwc_shape(c, geom, 1)?;
    let wide = c.bf16.filter(|t| bf16::nhwc_wide_applies(t, &s));
    if wide.is_none() && !dense_nhwc_applies(&s) {
        return Err(unsup(
            n,
            "one-group channels-last conv with dilated columns or more than 16 kernel \
             rows",
        ));
    }
    let k = s.k();
    let wt = c.const_f32(1, "ConvNhwc weights")?;
    if wt.len() != s.c_out * k {
        return Err(shape_err(
            n,
            format!("{} weights for {} channels of {k} taps", wt.len(), s.c_out),
        ));
    }
    let bias = match n.inputs.get(2).copied().flatten() {
        Some(_) => {
            let b = c.const_f32(2, "ConvNhwc bias")?;
            if b.len() != s.c_out {
                return Err(shape_err(
                    n,
                    format!("{} biases for {} channels", b.len(), s.c_out),
                ));
            }
            b
        }
        None => vec![0.0; s.c_out],
    };
    let (post, res) = post_ops(c, post, s.c_out)?;
    let rows = s.n * s.oh;
    let (w, us, scratch) = match wide {
        Some(t) => (
            Weights::Wide(bf16::pack_nhwc_weights(&s, &wt), t),
            wide_us(&s),
            direct_nhwc_scratch_len(&s),
        ),
        None => (
            Weights::Gemm(pack_dense_nhwc(&s, &wt)),
            s.macs() / pool::DENSE_MACS_PER_US,
            dense_nhwc_scratch_len(&s),
        ),
    };
    let par = if c.threads < 2 {
        Vec::new()
    } else {
        pool::chunk_ranges(rows, 1, us, c.threads)
    };
    let helper = if par.is_empty() { 0 } else { scratch };
    Ok(Planned::new(DenseNhwcKernel {
        w,
        s,
        bias,
        post,
        res,
        par,
    })
    .scratch(scratch)
    .helper_scratch(helper))
}

impl FamilyKernel for DenseNhwcKernel {
    fn tiles(&self) -> usize {
        self.s.n * self.s.oh
    }

    fn macs(&self) -> usize {
        self.s.macs()
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let resid = residual_inputs(r.io, &self.res);
        let epi = Epilogue {
            bias: Some(&self.bias),
            post: &self.post,
            residuals: &resid[..self.res.len()],
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let (isa, x) = (r.isa, r.io.f32(0));
        let rows = (self.s.n * self.s.oh, self.s.ow * self.s.c_out);
        run_by_rows(r, &self.par, rows, |out, range, scratch| match &self.w {
            Weights::Gemm(pb) => dense_nhwc(isa, &self.s, pb, x, out, range, &epi, scratch),
            Weights::Wide(w, tab) => {
                let sc: &mut [u32] = bytemuck::cast_slice_mut(scratch);
                bf16::conv_nhwc(tab, isa, &self.s, w, x, out, range, &epi, sc)
            }
        });
        Ok(())
    }
}

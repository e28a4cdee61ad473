//! A channels-last 1x1 expansion fused with the depthwise conv it feeds
//! (`ExpandConvNhwc`, fused by `compile::band`): each tile of output rows runs in bands
//! whose expanded input rows are computed into scratch (the packed GEMM, A read in place)
//! and consumed there by the depthwise kernel on a sub-image, so that the expanded image
//! (MobileNetV2's 112x112x96: 4.8 MB) is never written whole nor read back from memory.
//! Rows shared by two bands are kept (moved to the top of the buffer), not recomputed.
//! Same bits as the two nodes apart: every expanded element is one GEMM element (its sum
//! does not depend on the rows computed with it) and every output the depthwise kernel's
//! sum of the same taps.

use super::ctx::Ctx;
use super::dw_nhwc::{depthwise_weights, nhwc_shape_io, run_by_rows};
use super::errors::shape_err;
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

/// Bytes of expanded rows a band holds at most (at least the rows of one output row):
/// with the input and output rows of the band, about half of a 2 MiB L2 (MobileNetV2's
/// three fused blocks, Xeon, medians of 7 interleaved runs: 192 KiB 1451 us, 384 KiB
/// 1376, 768 KiB 1431).
const BAND_BYTES: usize = 384 * 1024;

/// A planned `ExpandConvNhwc`.
#[derive(Debug)]
pub(crate) struct ExpandDwKernel {
    /// The depthwise conv over the expanded image (`c_in` = its channels).
    pub(super) s: ConvShape,
    /// Input channels of the expansion.
    cin: usize,
    /// The expansion's B `[Cin, Ce]`, packed.
    pb: Vec<f32>,
    /// The expansion's bias and its other post-ops.
    ebias: Option<Vec<f32>>,
    epost: Vec<PostOpRt>,
    /// Depthwise taps `[KH*KW][Ce]`, bias, post-ops and their residual inputs.
    taps: Vec<f32>,
    bias: Vec<f32>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
    /// Output rows per band.
    pub(super) band: usize,
    /// Output row ranges of the intra-op chunks when the node runs whole; empty = one
    /// thread.
    par: Vec<(usize, usize)>,
}

/// Plans an `ExpandConvNhwc`: X `[N, H, W, Cin]`, W1 `[Cin, Ce]`, W `[Ce, 1, KH, KW]`,
/// [B `[Ce]`], all but X constant.
pub(crate) fn plan_expand_dw(
    c: &Ctx<'_>,
    expand: &[PostOp],
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
) -> Result<Planned> {
    let k = expand_dw_kernel(c, expand, geom, group, post, c.oshape(0)?)?;
    let scratch = k.scratch_len();
    let helper = if k.par.is_empty() { 0 } else { scratch };
    Ok(Planned::new(k).scratch(scratch).helper_scratch(helper))
}

/// The kernel of an `ExpandConvNhwc` (or of the same pair inside a `DwProjectNhwc`)
/// whose depthwise output is `os` `[N, OH, OW, Ce]`.
pub(super) fn expand_dw_kernel(
    c: &Ctx<'_>,
    expand: &[PostOp],
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
    os: &[usize],
) -> Result<ExpandDwKernel> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    let (xs, w1s) = (c.ishape(0)?, c.ishape(1)?);
    let w1 = c.const_f32(1, "ExpandConvNhwc expansion")?;
    let (&[nb, h, w, cin], &[_, ce]) = (xs, w1s) else {
        return Err(shape_err(
            n,
            format!("input {xs:?} / expansion are not [N, H, W, C] / [C, Ce]"),
        ));
    };
    if w1.len() != cin * ce || ce != group {
        return Err(shape_err(
            n,
            format!(
                "expansion of {} weights for {cin} -> {ce} channels (group {group})",
                w1.len()
            ),
        ));
    }
    let s = nhwc_shape_io(c, geom, group, &[nb, h, w, ce], os)?;
    if s.dh != 1 {
        return Err(shape_err(n, "a dilated depthwise conv is not fused"));
    }
    let (taps, bias) = depthwise_weights(c, &s, 2)?;
    let (ebias, erest) = leading_bias(c, expand, ce)?;
    let (epost, eres) = post_ops(c, erest, ce)?;
    if !eres.is_empty() {
        return Err(shape_err(n, "the expansion's epilogue adds no residual"));
    }
    let (post, res) = post_ops(c, post, ce)?;
    let mut pb = vec![0.0; gemm::packed_b_len(cin, ce)];
    gemm::pack_b(&w1, ce, 1, cin, ce, 1.0, &mut pb, &mut vec![0.0; ce]);
    // Output rows per band: as many as keep the band's expanded rows within BAND_BYTES.
    let row_bytes = s.w * ce * std::mem::size_of::<f32>();
    let fit = (BAND_BYTES / row_bytes.max(1)).max(s.kh);
    let band = ((fit - s.kh) / s.sh + 1).clamp(1, s.oh);
    let rows = s.n * s.oh;
    let macs = s.macs() + s.n * s.h * s.w * cin * ce;
    let us = macs / pool::DENSE_MACS_PER_US;
    let par = if c.threads < 2 {
        Vec::new()
    } else {
        pool::chunk_ranges(rows, 1, us, c.threads)
    };
    Ok(ExpandDwKernel {
        taps,
        s,
        cin,
        pb,
        ebias,
        epost,
        bias,
        post,
        res,
        band,
        par,
    })
}

impl ExpandDwKernel {
    /// Expanded rows one band reads at most.
    fn band_in_rows(&self) -> usize {
        (self.band - 1) * self.s.sh + self.s.kh
    }

    /// Scratch floats: one band's expanded rows.
    pub(super) fn scratch_len(&self) -> usize {
        self.band_in_rows().min(self.s.h) * self.s.w * self.s.c_in
    }

    /// Expanded rows `[a, b)` of image `img` into `e` (those rows).
    fn expand_rows(&self, isa: Isa, x: &[f32], img: usize, (a, b): (usize, usize), e: &mut [f32]) {
        let (w, ce, cin) = (self.s.w, self.s.c_in, self.cin);
        let m = (b - a) * w;
        if m == 0 {
            return;
        }
        let first = (img * self.s.h + a) * w;
        let epi = Epilogue {
            bias: self.ebias.as_deref(),
            channel_is_row: false,
            post: &self.epost,
            ..Epilogue::NONE
        };
        let a_rows = ASource::InPlace {
            a: &x[first * cin..],
            lda: cin,
        };
        let b = BSource::Packed(&self.pb);
        let c = &mut e[..m * ce];
        gemm::gemm_with(
            isa,
            m,
            ce,
            cin,
            a_rows,
            b,
            &mut [],
            c,
            ce,
            (0, m),
            (0, ce),
            &epi,
        );
    }

    /// Output rows `r0..r1` (of `N * OH`) into `y` (those rows), bands of expanded rows
    /// in `e`; `held` says which expanded rows `e` holds (image, first row, end: `None`
    /// for none), kept from one call to the next over the same `e`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rows(
        &self,
        isa: Isa,
        x: &[f32],
        resid: &[&[f32]],
        y: &mut [f32],
        (r0, r1): (usize, usize),
        e: &mut [f32],
        held: &mut Option<(usize, usize, usize)>,
    ) {
        let s = &self.s;
        let (row_in, row_out) = (s.w * s.c_in, s.ow * s.c_out);
        let mut r = r0;
        while r < r1 {
            let (img, o0) = (r / s.oh, r % s.oh);
            let o1 = (o0 + self.band).min(s.oh).min(o0 + r1 - r);
            // Input rows the band's taps reach: [i0, i1).
            // (Empty for a band that sees only trailing padding.)
            let i1 = ((o1 - 1) * s.sh + s.kh).saturating_sub(s.ph).min(s.h);
            let i0 = (o0 * s.sh).saturating_sub(s.ph).min(i1);
            let kept = match *held {
                Some((hi, lo, end)) if hi == img && lo <= i0 && i0 < end => {
                    e.copy_within((i0 - lo) * row_in..(end - lo) * row_in, 0);
                    end.min(i1)
                }
                _ => i0,
            };
            let from = (kept - i0) * row_in;
            self.expand_rows(isa, x, img, (kept, i1), &mut e[from..]);
            *held = Some((img, i0, i1.max(kept)));
            // The band's conv on the sub-image of rows [i0, i1).
            let sub = ConvShape {
                n: 1,
                h: i1 - i0,
                oh: o1 - o0,
                ph: (s.ph + i0).saturating_sub(o0 * s.sh),
                ..*s
            };
            let rc = residual_slices(resid, r * row_out..(r + o1 - o0) * row_out);
            let epi = Epilogue {
                post: &self.post,
                residuals: &rc[..resid.len()],
                channel_is_row: false,
                ..Epilogue::NONE
            };
            let out = &mut y[(r - r0) * row_out..(r - r0 + o1 - o0) * row_out];
            let ein = &e[..(i1 - i0) * row_in];
            depthwise_nhwc(
                isa,
                &sub,
                &self.taps,
                &self.bias,
                ein,
                out,
                (0, o1 - o0),
                &epi,
            );
            r += o1 - o0;
        }
    }
}

impl FamilyKernel for ExpandDwKernel {
    fn tiles(&self) -> usize {
        self.s.n * self.s.oh
    }

    fn macs(&self) -> usize {
        self.s.macs() + self.s.n * self.s.h * self.s.w * self.cin * self.s.c_in
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let resid = residual_inputs(r.io, &self.res);
        let resid = &resid[..self.res.len()];
        let (isa, x) = (r.isa, r.io.f32(0));
        let rows = (self.s.n * self.s.oh, self.s.ow * self.s.c_out);
        run_by_rows(r, &self.par, rows, |out, range, scratch| {
            self.rows(isa, x, resid, out, range, scratch, &mut None)
        });
        Ok(())
    }
}

//! Depthwise conv (one input and one output channel per group): small planes a block
//! of channels per table call (`depthwise_block`, across channels, where the table has
//! it); wider ones one table call per output channel (`depthwise_fused`: the
//! hand-written kernels of the table where it has them, else `body::depthwise`), the
//! epilogue fused into the kernel.

use super::super::body::dw_block;
use super::super::body::dw_nhwc::Act;
use super::super::gemm::Epilogue;
use super::super::isa::Isa;
use super::ConvShape;

/// Output channels `[c_lo, c_hi)` of one image: `xb` `[C, H, W]`, `yb` `[C, OH, OW]`,
/// `w` `[C, KH*KW]` (scratch: `depthwise_scratch_len`).
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise(
    isa: Isa,
    s: &ConvShape,
    w: &[f32],
    xb: &[f32],
    yb: &mut [f32],
    c_lo: usize,
    c_hi: usize,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let (hw, khw) = (s.h * s.w, s.kh * s.kw);
    let t = isa.table();
    if let (Some(block), true) = (t.depthwise_block, dw_block::applies_on(isa, s)) {
        // Small planes: across channels, a block at a time.
        let mut c0 = c_lo;
        while c0 < c_hi {
            let nc = dw_block::BLOCK_LANES.min(c_hi - c0);
            block(s, w, xb, yb, c0, nc, epi, scratch);
            c0 += nc;
        }
        return;
    }
    for c in c_lo..c_hi {
        let plane = &xb[c * hw..(c + 1) * hw];
        (t.depthwise_fused)(s, &w[c * khw..(c + 1) * khw], plane, yb, c, epi, scratch);
    }
}

/// Output rows `r0..r1` (of `N * OH`) of a channels-last depthwise conv: `x`
/// `[N][H][W][C]`, `taps` `[KH*KW][C]` (`body::dw_nhwc::pack_taps`), `y` those rows of
/// the output `[N][OH][OW][C]`, each output its channel's `bias` (`C` floats) plus its
/// taps, then the epilogue `epi` (channels are its columns, its residuals whole outputs;
/// its bias unused): a ReLU / Clip / HardSwish alone in registers, anything else over
/// the finished rows.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_nhwc(
    isa: Isa,
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    epi: &Epilogue<'_>,
) {
    let t = isa.table();
    let act = Act::of(epi.post).filter(|_| epi.addend.is_none());
    (t.depthwise_nhwc)(s, taps, bias, act.unwrap_or(Act::None), x, y, r0, r1);
    if act.is_none() && r1 > r0 {
        // Residuals are laid out like the output: take these rows.
        let row = s.ow * s.c_out;
        let mut rc: [&[f32]; 4] = [&[]; 4];
        assert!(epi.residuals.len() <= rc.len(), "too many residuals");
        for (d, r) in rc.iter_mut().zip(epi.residuals) {
            *d = &r[r0 * row..r1 * row];
        }
        let e = Epilogue {
            bias: None,
            channel_is_row: false,
            residuals: &rc[..epi.residuals.len()],
            ..*epi
        };
        (t.epilogue)(&e, y, s.c_out, 0, (r1 - r0) * s.ow, 0, s.c_out);
    }
}

#[cfg(test)]
mod tests;

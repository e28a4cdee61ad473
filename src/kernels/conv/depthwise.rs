//! Depthwise conv (one input and one output channel per group): small planes a block
//! of channels per table call (`depthwise_block`, across channels, where the table has
//! it); wider ones one table call per output channel (`depthwise_fused`: the
//! hand-written kernels of the table where it has them, else `body::depthwise`), the
//! epilogue fused into the kernel.

use super::super::body::dw_block;
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

#[cfg(test)]
mod tests;

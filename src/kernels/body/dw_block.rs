//! Geometry of the depthwise conv across channels (table entry `depthwise_block`, where
//! a table has one): a block of [`BLOCK_LANES`] channels at a time, the block's input
//! copied channel-innermost (`[HP][WP][L]`, zero border included), so that every tap of
//! every output pixel is one full-width multiply-add whatever the plane's width, stride
//! or dilation. Made for small planes (the 7x7 to 28x28 stages of mobile networks),
//! where the per-plane kernels waste most vector lanes on row ends.

use super::conv::ConvShape;
use super::epilogue::Epilogue;
use super::unary::PostOpRt;
use crate::ir::UnaryOp;

/// Channels of one block (lanes of the block layout; two AVX2 vectors, one AVX-512).
pub const BLOCK_LANES: usize = 16;

/// Widest input row the block path takes for any kernel (wider planes fill their
/// vectors along rows and go through the per-plane kernels, but see [`applies`]).
pub const BLOCK_MAX_W: usize = 28;

/// True when a depthwise conv of shape `s` runs through the table's `depthwise_block`
/// entry (where it has one): input rows up to [`BLOCK_MAX_W`] columns, up to 80 with a
/// 5x5 kernel, up to 56 at stride 2. Beyond 28 columns the AVX-512 entry beats the
/// per-plane kernels there (min of 40 interleaved rounds, thread CPU): 5x5 stride 2 on
/// 40 columns 0.73-0.9x, 5x5 on 40 and 80 columns 0.88-0.92x, 3x3 stride 2 on 56
/// columns 0.94x; not on wider planes (5x5 stride 2 on 160 columns 1.57x, 3x3 stride 2
/// on 112 1.2x).
pub fn applies(s: &ConvShape) -> bool {
    s.w <= BLOCK_MAX_W || (s.kw == 5 && s.w <= 80) || (s.sw == 2 && s.w <= 56)
}

/// Widest input row the AVX2 entry takes: on two 8-lane vectors per pixel it beats the
/// per-plane kernels on 7- and 14-column planes (Zen 3, MobileNetV2 in network, min of
/// 10 runs: 384 channels 3x3 at 14x14 ~140 -> ~80 us, 960 channels at 7x7 ~95 -> ~60
/// us), ties on 28 columns at stride 1 (192 channels: 0.260 vs 0.257 ms as a one-conv
/// model) and loses on 56 columns at stride 2 (144 channels: 0.330 vs 0.252 ms).
pub const AVX2_MAX_W: usize = 14;

/// True when `isa`'s table computes a depthwise conv of shape `s` across channels:
/// [`applies`], and on AVX2 rows of at most [`AVX2_MAX_W`] columns.
pub fn applies_on(isa: crate::kernels::isa::Isa, s: &ConvShape) -> bool {
    applies(s) && (isa != crate::kernels::isa::Isa::Avx2Fma || s.w <= AVX2_MAX_W)
}

/// Padded plane size of the block layout: `(HP, WP)`, input rows/columns including the
/// leading pads and whatever the last output's taps reach.
pub fn padded(s: &ConvShape) -> (usize, usize) {
    let hp = (s.h + s.ph).max((s.oh.max(1) - 1) * s.sh + (s.kh - 1) * s.dh + 1);
    let wp = (s.w + s.pw).max((s.ow.max(1) - 1) * s.sw + (s.kw - 1) * s.dw + 1);
    (hp, wp)
}

/// Scratch floats a `depthwise_block` call needs: the padded input block, the taps and the
/// output block.
pub fn block_scratch_len(s: &ConvShape) -> usize {
    let (hp, wp) = padded(s);
    (hp * wp + s.kh * s.kw + s.oh * s.ow) * BLOCK_LANES
}

/// The activation a `depthwise_block` entry applies to its accumulators (after the
/// bias), one lane per channel.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Act {
    /// Bias only (or nothing).
    None,
    /// `max(v, lo)` then `min(v, hi)` (ReLU, Clip), as `Epilogue::apply_body` computes it.
    Clamp(f32, f32),
    /// `v * clamp(v / 6 + 0.5, 0, 1)`.
    HardSwish,
}

impl Act {
    /// The activation of one value, as the vector forms compute it.
    #[inline(always)]
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Act::None => v,
            Act::Clamp(lo, hi) => {
                let a = if v > lo { v } else { lo };
                if a < hi {
                    a
                } else {
                    hi
                }
            }
            Act::HardSwish => {
                let g = v * (1.0 / 6.0) + 0.5;
                let g = if g > 0.0 { g } else { 0.0 };
                v * if g < 1.0 { g } else { 1.0 }
            }
        }
    }

    /// The activation `post` is when it is one the kernels apply in registers.
    pub fn of(post: &[PostOpRt]) -> Option<Act> {
        Some(match post {
            [] => Act::None,
            [PostOpRt::Unary(UnaryOp::Relu)] => Act::Clamp(0.0, f32::INFINITY),
            [PostOpRt::Unary(UnaryOp::Clip { min, max })] => Act::Clamp(*min, *max),
            [PostOpRt::Unary(UnaryOp::HardSwish)] => Act::HardSwish,
            _ => return None,
        })
    }
}

/// The register-fused part of `epi` for channels `c0..c0 + nc` (`nc <= BLOCK_LANES`):
/// the activation and the block's bias lanes (zero past `nc`), or `None` when the
/// epilogue must run on the finished planes.
pub fn fused(epi: &Epilogue<'_>, c0: usize, nc: usize) -> Option<(Act, [f32; BLOCK_LANES])> {
    if epi.addend.is_some() || !epi.channel_is_row {
        return None;
    }
    let act = Act::of(epi.post)?;
    let mut bias = [0.0f32; BLOCK_LANES];
    if let Some(b) = epi.bias {
        let at = epi.channel_offset + c0;
        bias[..nc].copy_from_slice(&b[at..at + nc]);
    }
    Some((act, bias))
}

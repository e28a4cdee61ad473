//! Geometry of the depthwise conv across channels (table entry `depthwise_block`, where
//! a table has one): a block of [`BLOCK_LANES`] channels at a time, the block's input
//! copied channel-innermost (`[HP][WP][L]`, zero border included), so that every tap of
//! every output pixel is one full-width multiply-add whatever the plane's width, stride
//! or dilation. Made for small planes (the 7x7 to 28x28 stages of mobile networks),
//! where the per-plane kernels waste most vector lanes on row ends.

use super::conv::ConvShape;

/// Channels of one block (lanes of the block layout; two AVX2 vectors, one AVX-512).
pub const BLOCK_LANES: usize = 16;

/// Widest input row the block path takes (wider planes fill their vectors along rows
/// and go through the per-plane kernels).
pub const BLOCK_MAX_W: usize = 28;

/// True when a depthwise conv of shape `s` runs across channels (on a table with a
/// `depthwise_block` entry).
pub fn applies(s: &ConvShape) -> bool {
    s.w <= BLOCK_MAX_W
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

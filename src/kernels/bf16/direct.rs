//! Direct dense convs in bf16: the generic direct conv ([`crate::kernels::conv::direct`])
//! on K-pair phase planes (two input channels per dword) with the bf16 table's
//! `pack_pairs` and `conv_tiles`.

use super::{pair, Bf16Table};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::conv::direct::{self, Kernels, Tiling};
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::Isa;

/// Input channels per plane element: a K pair.
const PER: usize = 2;

/// True when conv `s` runs as a direct bf16 conv (see [`direct::applies`]).
pub fn applies(s: &ConvShape) -> bool {
    direct::applies(s, PER)
}

/// Dwords of scratch a direct bf16 conv of `s` needs.
pub(super) fn scratch_len(s: &ConvShape) -> usize {
    direct::scratch_len(s, PER)
}

/// The tiling of a direct bf16 conv of `s` (see [`direct::tiling`]).
pub(super) fn tiling(s: &ConvShape) -> Tiling {
    direct::tiling(s, PER)
}

/// Weights `w` (`[Cout, Cin, KH, KW]`) in K pairs, as `tiling`'s tile reads them.
pub(super) fn pack_weights(s: &ConvShape, w: &[f32], tiling: Tiling) -> Vec<u32> {
    direct::pack_weights(s, w, PER, pair, tiling)
}

/// [`direct::conv_direct`] in bf16 through `tab`, weights packed for `tiling`.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_direct(
    tab: &Bf16Table,
    tiling: Tiling,
    isa: Isa,
    s: &ConvShape,
    w: &[u32],
    x: &[f32],
    y: &mut [f32],
    chans: (usize, usize),
    cols: (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [u32],
) {
    let k = Kernels {
        per: PER,
        pack: tab.pack_pairs,
        tiles: tab.conv_tiles,
    };
    direct::conv_direct(&k, tiling, isa, s, w, x, y, chans, cols, epi, scratch);
}

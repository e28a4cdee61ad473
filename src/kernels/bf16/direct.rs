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

/// True when conv `s` runs as a direct bf16 conv through `tab` (see
/// [`direct::applies`]; with `tab`'s wide run, [`direct::wide_applies`] too).
pub fn applies(tab: &Bf16Table, s: &ConvShape) -> bool {
    direct::applies(s, PER) || runs_wide(tab, s)
}

/// True when `tab` runs conv `s` on its wide run.
pub fn runs_wide(tab: &Bf16Table, s: &ConvShape) -> bool {
    tab.wide.is_some() && direct::wide_applies(s)
}

/// Dwords of scratch a direct bf16 conv of `s` in `tiling` needs.
pub(super) fn scratch_len(s: &ConvShape, tiling: Tiling) -> usize {
    direct::scratch_len(s, PER, tiling)
}

/// The tiling of a direct bf16 conv of `s` through `tab`: the wide run where `tab` has
/// one and it takes `s`, else [`direct::tiling`].
pub(super) fn tiling(tab: &Bf16Table, s: &ConvShape) -> Tiling {
    if runs_wide(tab, s) {
        Tiling::Wide
    } else {
        direct::tiling(s, PER)
    }
}

/// True when a conv packed in `tiling` can run it: the wide run takes it, or the tiles.
pub(super) fn takes(s: &ConvShape, tiling: Tiling) -> bool {
    match tiling {
        Tiling::Wide => direct::wide_applies(s),
        _ => direct::applies(s, PER),
    }
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
        wide: tab.wide,
    };
    direct::conv_direct(&k, tiling, isa, s, w, x, y, chans, cols, epi, scratch);
}

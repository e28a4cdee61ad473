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

/// True when `tab` runs conv `s` on its wide run (as it is, or with its tap columns
/// folded into channels: [`unfolds`]).
pub fn runs_wide(tab: &Bf16Table, s: &ConvShape) -> bool {
    tab.wide.is_some() && (direct::wide_applies(s) || unfolds(s))
}

/// True when the wide run computes `s` as its kw-unfolded conv
/// ([`direct::unfold_applies`]; convs with too few channels for a K step).
pub(super) fn unfolds(s: &ConvShape) -> bool {
    !direct::wide_applies(s) && direct::unfold_applies(s)
}

/// Dwords of the unfolded input of `s` rounded up to whole 64-byte lines.
fn unfolded_lines(s: &ConvShape) -> usize {
    direct::unfolded_len(s).div_ceil(16) * 16
}

/// Dwords of scratch a direct bf16 conv of `s` in `tiling` needs (an unfolded one: the
/// unfolded input, then the planes of its conv).
pub(super) fn scratch_len(s: &ConvShape, tiling: Tiling) -> usize {
    if tiling == Tiling::Wide && unfolds(s) {
        let u = direct::unfolded_shape(s);
        return unfolded_lines(s) + direct::scratch_len(&u, PER, tiling);
    }
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

/// True when a conv packed in `tiling` can run it: the wide run takes it (or its
/// unfolded conv), or the tiles.
pub(super) fn takes(s: &ConvShape, tiling: Tiling) -> bool {
    match tiling {
        Tiling::Wide => direct::wide_applies(s) || unfolds(s),
        _ => direct::applies(s, PER),
    }
}

/// Weights `w` (`[Cout, Cin, KH, KW]`) in K pairs, as `tiling`'s tile reads them (the
/// unfolded conv's where the wide run [`unfolds`] `s`).
pub(super) fn pack_weights(s: &ConvShape, w: &[f32], tiling: Tiling) -> Vec<u32> {
    if tiling == Tiling::Wide && unfolds(s) {
        let (u, wu) = (direct::unfolded_shape(s), direct::unfold_weights(s, w));
        return direct::pack_weights(&u, &wu, PER, pair, tiling);
    }
    direct::pack_weights(s, w, PER, pair, tiling)
}

/// [`direct::conv_direct`] in bf16 through `tab`, weights packed for `tiling` (a conv
/// the wide run [`unfolds`]: its input unfolded into the scratch first, then that conv).
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
    if tiling == Tiling::Wide && unfolds(s) {
        let u = direct::unfolded_shape(s);
        // The planes after whole lines of the unfolded input (tile rows start lines).
        let (xu, rest) = scratch.split_at_mut(unfolded_lines(s));
        let xu = &mut xu[..direct::unfolded_len(s)];
        let xu: &mut [f32] = bytemuck::cast_slice_mut(xu);
        direct::unfold_input(s, x, xu);
        return direct::conv_direct(&k, tiling, isa, &u, w, xu, y, chans, cols, epi, rest);
    }
    direct::conv_direct(&k, tiling, isa, s, w, x, y, chans, cols, epi, scratch);
}

/// True when `tab` computes the channels-last dense conv `s` on its wide run
/// ([`crate::kernels::conv::conv_direct_nhwc`]).
pub fn nhwc_wide_applies(tab: &Bf16Table, s: &ConvShape) -> bool {
    tab.wide.is_some() && crate::kernels::conv::direct_nhwc_applies(s)
}

/// Weights `w` (`[Cout, Cin, KH, KW]`) of a channels-last conv the wide run computes,
/// in K pairs as it reads them, starting a cache line (tile rows must not cross lines).
pub fn pack_nhwc_weights(s: &ConvShape, w: &[f32]) -> super::Dwords {
    crate::kernels::conv::pack_direct_nhwc(s, w, pair).into()
}

/// Output rows `rows` of the channels-last dense conv `s` ([`nhwc_wide_applies`]) on
/// `tab`'s wide run: see [`crate::kernels::conv::conv_direct_nhwc`]; `w` from
/// [`pack_nhwc_weights`].
#[allow(clippy::too_many_arguments)]
pub fn conv_nhwc(
    tab: &Bf16Table,
    isa: Isa,
    s: &ConvShape,
    w: &[u32],
    x: &[f32],
    y: &mut [f32],
    rows: (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [u32],
) {
    let wide = tab
        .wide
        .as_ref()
        .expect("bf16 nhwc conv: the table has no wide run");
    crate::kernels::conv::conv_direct_nhwc(wide, isa, s, w, x, y, rows, epi, scratch);
}

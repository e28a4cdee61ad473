//! Dense and grouped convs in bf16. Dense convs of up to 7x7 taps run direct
//! ([`super::direct`]: K-pair phase planes, no im2col matrix). The others compute per
//! group `Y_g = W_g · im2col(X_g)` with the weights packed in K pairs once
//! ([`Bf16ConvWeights::pack`]) and the im2col matrix written block by block into f32
//! panels by the kernel table's `im2col_panels`, converted to K pairs, and multiplied by
//! [`super::gemm::gemm_panels`]. The epilogue stays f32.

use super::direct;
use super::gemm::{gemm_panels, panels_scratch_len};
use super::{pack_a, Bf16Table};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::conv::direct::Tiling;
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::Isa;

/// Conv weights in K pairs: one packed A per group (im2col), or the direct conv's
/// tap-major panels.
#[derive(Debug, Clone)]
pub struct Bf16ConvWeights {
    /// Packed A (`Cout_g` rows, depth `Cin_g * KH * KW`) of each group, or (direct) one
    /// entry with the direct layout.
    pub groups: Vec<super::Dwords>,
    /// The direct conv's tiling when the conv runs direct.
    pub direct: Option<Tiling>,
}

impl Bf16ConvWeights {
    /// Packs `w` (`[Cout, Cin_g, KH, KW]`) for `s` (a dense or grouped conv) as `tab`
    /// runs it: direct (in the tiling it picks) when the direct conv takes `s`.
    pub fn pack(tab: &Bf16Table, s: &ConvShape, w: &[f32]) -> Bf16ConvWeights {
        let t = direct::applies(tab, s).then(|| direct::tiling(tab, s));
        Self::with_layout(s, w, t)
    }

    /// Packs `w` for the direct conv in `tiling` when given (and that tiling takes
    /// `s`), else for im2col.
    pub fn with_layout(s: &ConvShape, w: &[f32], tiling: Option<Tiling>) -> Bf16ConvWeights {
        if let Some(t) = tiling.filter(|&t| direct::takes(s, t)) {
            return Bf16ConvWeights {
                groups: vec![direct::pack_weights(s, w, t).into()],
                direct: Some(t),
            };
        }
        let (mg, k) = (s.cout_g(), s.k());
        let groups = (0..s.group)
            .map(|g| pack_a(&w[g * mg * k..(g + 1) * mg * k], k, mg, k).into())
            .collect();
        Bf16ConvWeights {
            groups,
            direct: None,
        }
    }
}

/// Scratch floats a [`conv2d_bf16`] call through `tab` needs, for either layout.
pub fn conv_scratch_len(tab: &Bf16Table, s: &ConvShape) -> usize {
    let im2col = panels_scratch_len(s.k(), s.oh * s.ow);
    if direct::applies(tab, s) {
        im2col.max(direct::scratch_len(s, direct::tiling(tab, s)))
    } else {
        im2col
    }
}

/// Forward conv of output channels `[c_lo, c_hi)` and output positions `cols` (start a
/// multiple of the GEMM column panel) in bf16, as `conv::conv2d` lays out its operands:
/// `x` `[N, Cin, H, W]`, `y` `[N, Cout, OH, OW]`, residuals laid out like `y`.
/// `scratch`: [`conv_scratch_len`] floats.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_bf16(
    tab: &Bf16Table,
    isa: Isa,
    s: &ConvShape,
    wts: &Bf16ConvWeights,
    x: &[f32],
    y: &mut [f32],
    (c_lo, c_hi): (usize, usize),
    cols: (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    if let Some(tiling) = wts.direct {
        let scratch: &mut [u32] = bytemuck::cast_slice_mut(scratch);
        let (w, chans) = (&wts.groups[0], (c_lo, c_hi));
        return direct::conv_direct(tab, tiling, isa, s, w, x, y, chans, cols, epi, scratch);
    }
    let (ohw, hw) = (s.oh * s.ow, s.h * s.w);
    let (mg, k) = (s.cout_g(), s.k());
    let t = isa.table();
    for b in 0..s.n {
        let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
        let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
        for g in c_lo / mg..c_hi.div_ceil(mg) {
            let m_lo = c_lo.max(g * mg) - g * mg;
            let m_hi = c_hi.min((g + 1) * mg) - g * mg;
            let xg = &xb[g * s.cin_g() * hw..(g + 1) * s.cin_g() * hw];
            let yg = &mut yb[g * mg * ohw..(g + 1) * mg * ohw];
            let at = (b * s.c_out + g * mg) * ohw;
            let res = residual_slices(epi.residuals, at..at + mg * ohw);
            let epi_g = Epilogue {
                channel_offset: epi.channel_offset + g * mg,
                residuals: &res[..epi.residuals.len()],
                ..*epi
            };
            let fill = |k0: usize, kc: usize, jc: usize, nc: usize, buf: &mut [f32]| {
                (t.im2col_panels)(s, xg, k0, kc, jc, nc, buf)
            };
            gemm_panels(
                tab,
                isa,
                (mg, k),
                &wts.groups[g],
                &fill,
                scratch,
                yg,
                ohw,
                (m_lo, m_hi),
                cols,
                &epi_g,
            );
        }
    }
}

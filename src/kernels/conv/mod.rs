//! Convolutions on NCHW f32 tensors (1-D convs are 2-D with height 1).
//!
//! * Grouped / dense conv: per group, `Y_g[Cout_g, OH*OW] = W_g[Cout_g, Cin_g*KH*KW] ·
//!   im2col(X_g)`. The weights are packed once ([`ConvWeights::pack`]); the im2col matrix
//!   is written block by block straight into packed-B panels in scratch memory
//!   (implicit GEMM, `im2col_panels` of the kernel table: strided rows gathered with
//!   SIMD, no im2col matrix in between); a 1x1, stride-1, unpadded conv reads or packs
//!   the input planes directly.
//! * Depthwise conv (one input and one output channel per group): direct, accumulating
//!   each kernel tap as a (strided) AXPY over output rows.
//! * Channels-last convs (`[N, H, W, C]`): depthwise ([`depthwise_nhwc`]), and dense
//!   one-group stems by im2col rows and a GEMM with the channels as columns
//!   ([`dense_nhwc`]).
//! * ConvTranspose: `cols = W_g^T · X_g` by the same GEMM, then col2im scatter-add.
//!
//! A call computes output channels `[c_lo, c_hi)` only; the epilogue (bias, post-ops,
//! residuals) runs inside the GEMM / per channel plane while it is hot.

mod deconv;
mod dense_nhwc;
mod depthwise;
pub mod direct;
mod direct_nhwc;
mod winograd;

pub use super::body::conv::ConvShape;
pub use super::body::depthwise::depthwise_scratch_len;
pub use super::body::pool::valid_range;
pub use deconv::DeconvPlan;
pub use dense_nhwc::{
    dense_nhwc, dense_nhwc_applies, dense_nhwc_io, dense_nhwc_io_scratch_len,
    dense_nhwc_scratch_len, pack_dense_nhwc, planar_nhwc_wins, NhwcIo,
};
use depthwise::depthwise;
pub use depthwise::depthwise_nhwc;
pub use direct_nhwc::{
    conv_direct_nhwc, direct_nhwc_applies, direct_nhwc_scratch_len, pack_direct_nhwc,
};
pub(crate) use winograd::body as winograd_body;
pub use winograd::WinogradPlan;
pub use winograd::{OutBlock, PointRows, WinoGeom};

use super::body::epilogue::residual_slices;
use super::gemm::{self, gemm_packed, BSource, Epilogue, MR};
use super::isa::{self, Isa};
use super::packed::WeightBuf;

impl ConvShape {
    /// A single-image conv over a square `hw x hw` input with a square `k x k` kernel,
    /// stride `stride` on both axes, dilation 1 and "same"-style leading pads `k / 2`
    /// (the shape benches and examples sweep over).
    pub fn square(
        c_in: usize,
        hw: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        group: usize,
    ) -> Self {
        let p = k / 2;
        let o = (hw + 2 * p - k) / stride + 1;
        ConvShape {
            n: 1,
            c_in,
            h: hw,
            w: hw,
            c_out,
            oh: o,
            ow: o,
            kh: k,
            kw: k,
            sh: stride,
            sw: stride,
            dh: 1,
            dw: 1,
            ph: p,
            pw: p,
            group,
        }
    }

    /// Input channels per group.
    pub fn cin_g(&self) -> usize {
        self.c_in / self.group
    }
    /// Output channels per group.
    pub fn cout_g(&self) -> usize {
        self.c_out / self.group
    }
    /// GEMM depth per group.
    pub fn k(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }
    /// True for a depthwise conv (one in and one out channel per group).
    pub fn is_depthwise(&self) -> bool {
        self.group > 1 && self.cin_g() == 1 && self.cout_g() == 1
    }
    /// True when im2col is the identity (1x1, stride 1, no padding).
    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.sh == 1 && self.sw == 1 && self.ph == 0 && self.pw == 0
    }
    /// Multiply-accumulates of the whole conv.
    pub fn macs(&self) -> usize {
        self.n * self.c_out * self.oh * self.ow * self.k()
    }
    /// Scratch floats a forward conv call needs.
    pub fn scratch_len(&self) -> usize {
        if self.is_depthwise() {
            depthwise_scratch_len(self)
        } else {
            let im2col = gemm::block_scratch_len(self.k(), self.oh * self.ow);
            im2col.max(self.padded().map_or(0, |p| p.scratch_len(self)))
        }
    }
    /// The padded-rows geometry when it applies (see [`PaddedRows`]).
    fn padded(&self) -> Option<PaddedRows> {
        let (hp, wp) = (
            self.oh + (self.kh - 1) * self.dh,
            self.ow + (self.kw - 1) * self.dw,
        );
        let extra = (self.kw - 1) * self.dw;
        // Only for few output channels: B is then read in place (row table), which is
        // where skipping im2col pays; with packed B blocks im2col is cheap anyway.
        let ok = self.cout_g() <= gemm::ROWS_IN_PLACE_MAX_M
            && self.sh == 1
            && self.sw == 1
            && !self.is_pointwise()
            && !self.is_depthwise()
            && hp >= self.h + self.ph
            && wp >= self.w + self.pw
            // The extra columns per row are computed and thrown away: keep them few.
            && extra * PADDED_MAX_WASTE_INV <= wp;
        ok.then(|| PaddedRows {
            hp,
            wp,
            rows: (gemm::NC / wp).clamp(1, self.oh),
        })
    }
}

/// Conv weights packed for the GEMM (one packed A per group), or kept flat for depthwise.
#[derive(Debug, Clone)]
pub struct ConvWeights {
    /// Packed A per group (dense) or `[C, KH*KW]` (depthwise), owned or borrowed from a
    /// compiled file.
    pub groups: Vec<WeightBuf>,
}

impl ConvWeights {
    /// Packs `w` (`[Cout, Cin_g, KH, KW]`) for `s`.
    pub fn pack(s: &ConvShape, w: &[f32]) -> ConvWeights {
        if s.is_depthwise() {
            return ConvWeights {
                groups: vec![WeightBuf::owned(w.to_vec())],
            };
        }
        let (mg, k) = (s.cout_g(), s.k());
        let kd = weights_depth(s);
        let groups = (0..s.group)
            .map(|g| {
                let mut pa = vec![0.0; gemm::packed_a_len(mg, k)];
                gemm::pack_a(
                    &w[g * mg * k..(g + 1) * mg * k],
                    k,
                    1,
                    mg,
                    (k, kd),
                    1.0,
                    &mut pa,
                );
                WeightBuf::owned(pa)
            })
            .collect();
        ConvWeights { groups }
    }
}

/// Depth of the K blocks of a dense conv's packed weights: those of its whole im2col
/// product (output positions as columns), whichever part of it a GEMM call computes.
pub fn weights_depth(s: &ConvShape) -> usize {
    gemm::k_depth(s.k(), s.oh * s.ow)
}

/// Output channel block a tile must align to: tiles of a grouped conv start at a group
/// boundary, tiles of a dense conv at a multiple of the GEMM row panel.
pub fn channel_align(s: &ConvShape) -> usize {
    if s.is_depthwise() {
        1
    } else if s.group > 1 {
        s.cout_g()
    } else {
        MR
    }
}

/// Floats of a whole packed im2col matrix plus its row buffer ([`pack_b_full`]).
pub fn full_b_len(s: &ConvShape) -> usize {
    let ohw = s.oh * s.ow;
    gemm::packed_b_len(s.k(), ohw) + ohw
}

/// Packs the whole im2col matrix of image 0, group 0 of `x` into `out`
/// ([`full_b_len`] floats) for [`conv2d`]'s `b_full`, through the process's table.
pub fn pack_b_full(s: &ConvShape, x: &[f32], out: &mut [f32]) {
    pack_b_full_on(isa::best_isa(), s, x, out)
}

/// [`pack_b_full`] through `isa`'s table.
pub fn pack_b_full_on(isa: Isa, s: &ConvShape, x: &[f32], out: &mut [f32]) {
    let (ohw, hw, k) = (s.oh * s.ow, s.h * s.w, s.k());
    let (pb, row) = out.split_at_mut(gemm::packed_b_len(k, ohw));
    let xg = &x[..s.cin_g() * hw];
    if s.is_pointwise() {
        gemm::pack_b_rows(k, ohw, pb, row, |p, _| Some(&xg[p * hw..(p + 1) * hw]));
        return;
    }
    // The packed layout of a whole B is its K blocks one after the other, each laid out
    // like one block of all columns.
    let n_pad = ohw.div_ceil(gemm::NR) * gemm::NR;
    let t = isa.table();
    let kd = gemm::k_depth(k, ohw);
    let mut k0 = 0;
    while k0 < k {
        let kc = kd.min(k - k0);
        (t.im2col_panels)(
            s,
            xg,
            k0,
            kc,
            0,
            ohw,
            &mut pb[k0 * n_pad..(k0 + kc) * n_pad],
        );
        k0 += kc;
    }
}

/// Forward conv of output channels `[c_lo, c_hi)` and output positions `cols`
/// (`oy * OW + ox`; must be the whole plane for depthwise convs, and start at a multiple
/// of the GEMM column panel otherwise). `x`: `[N, Cin, H, W]`, `y`: `[N, Cout, OH, OW]`.
/// `b_full`, when given, is the already packed im2col matrix ([`pack_b_full`]; one
/// image, one group). `epi.residuals` are laid out like `y` (the whole tensor); `bias`
/// and channel post-ops are indexed by output channel.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    isa: Isa,
    s: &ConvShape,
    wts: &ConvWeights,
    x: &[f32],
    y: &mut [f32],
    c_lo: usize,
    c_hi: usize,
    cols: (usize, usize),
    b_full: Option<&[f32]>,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let ohw = s.oh * s.ow;
    let hw = s.h * s.w;
    for b in 0..s.n {
        let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
        let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
        let res_b = residual_slices(epi.residuals, b * s.c_out * ohw..(b + 1) * s.c_out * ohw);
        let epi_b = Epilogue {
            residuals: &res_b[..epi.residuals.len()],
            ..*epi
        };
        if s.is_depthwise() {
            depthwise(isa, s, &wts.groups[0], xb, yb, c_lo, c_hi, &epi_b, scratch);
            continue;
        }
        let (mg, k) = (s.cout_g(), s.k());
        let g_lo = c_lo / mg;
        let g_hi = c_hi.div_ceil(mg);
        for g in g_lo..g_hi {
            let m_lo = c_lo.max(g * mg) - g * mg;
            let m_hi = c_hi.min((g + 1) * mg) - g * mg;
            let xg = &xb[g * s.cin_g() * hw..(g + 1) * s.cin_g() * hw];
            let yg = &mut yb[g * mg * ohw..(g + 1) * mg * ohw];
            let mut res_g: [&[f32]; 4] = [&[]; 4];
            for (d, r) in res_g.iter_mut().zip(epi_b.residuals) {
                *d = &r[g * mg * ohw..(g + 1) * mg * ohw];
            }
            let epi_g = Epilogue {
                channel_offset: epi.channel_offset + g * mg,
                residuals: &res_g[..epi.residuals.len()],
                ..*epi
            };
            if let (Some(pr), None) = (s.padded(), b_full) {
                pr.run(
                    isa,
                    s,
                    &wts.groups[g],
                    xg,
                    yg,
                    (m_lo, m_hi),
                    cols,
                    &epi_g,
                    scratch,
                );
                continue;
            }
            let pointwise = s.is_pointwise();
            let xg_ref = xg;
            let t = isa.table();
            let panels = |k0: usize, kc: usize, jc: usize, nc: usize, buf: &mut [f32]| {
                (t.im2col_panels)(s, xg_ref, k0, kc, jc, nc, buf)
            };
            // With few output channels the GEMM reads B rows in place, one line per row
            // and micro-tile: rows borrowed straight from the input planes (often a
            // multiple of 4 KiB apart) then can fall into a few cache sets and evict
            // each other. Unless the plane stride spreads them over the sets, the GEMM
            // packs each block into panels instead (was: copied into row slots, read
            // through the row table; 0.37-0.85x the time on 1x1 convs of 24-40 outputs
            // at 56x56 and 112x112, e.g. U-Net's 64->32 at 112 0.80x).
            let in_place =
                m_hi - m_lo > gemm::ROWS_IN_PLACE_MAX_M || rows_spread(hw, k.min(gemm::KC));
            let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                Some(&xg[p * hw + j0..p * hw + j0 + len])
            };
            gemm_packed(
                isa,
                mg,
                ohw,
                (k, weights_depth(s)),
                &wts.groups[g],
                match b_full {
                    Some(p) => BSource::Packed(p),
                    None if pointwise && in_place => BSource::Rows(&fill),
                    None if pointwise => BSource::RowsPacked(&fill),
                    // Other convs write im2col straight into packed panels.
                    None => BSource::Panels(&panels),
                },
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

/// L1 data cache sets of 64-byte lines (32 KiB, 8 ways) the row-spread check assumes.
const L1_SETS: usize = 64;
/// Most rows of one micro-tile column that may share an L1 set when read in place
/// (half its ways, the rest for A and C).
const ROWS_PER_SET: usize = 4;

/// True when `rows` rows of `stride` floats, read at the same column, fall into the L1
/// sets evenly enough (at most [`ROWS_PER_SET`] per set) to be read in place.
fn rows_spread(stride: usize, rows: usize) -> bool {
    let mut per_set = [0u16; L1_SETS];
    let line = 16; // floats per 64-byte line
    (0..rows).all(|p| {
        let set = (p * stride / line) % L1_SETS;
        per_set[set] += 1;
        usize::from(per_set[set]) <= ROWS_PER_SET
    })
}

/// A stride-1 conv reads im2col row `(ci, ky, kx)` as one contiguous slice of the
/// zero-padded input plane `ci` when the output is computed on the padded grid (`wp`
/// columns per output row, of which the first `ow` are kept): no im2col at all, only
/// one padded copy of the input and one copy of the output rows.
#[derive(Debug, Clone, Copy)]
struct PaddedRows {
    /// Padded input height and width.
    hp: usize,
    wp: usize,
    /// Output rows per GEMM call.
    rows: usize,
}

/// The padded-rows path is used when at most 1/this of the computed columns is thrown
/// away.
const PADDED_MAX_WASTE_INV: usize = 16;

impl PaddedRows {
    /// Floats of the padded input of one group.
    fn input_len(&self, s: &ConvShape) -> usize {
        s.cin_g() * self.hp * self.wp + (s.kw - 1) * s.dw
    }

    /// Scratch floats: padded input, one call's C block, the GEMM's block scratch.
    fn scratch_len(&self, s: &ConvShape) -> usize {
        let n = self.rows * self.wp;
        self.input_len(s) + s.cout_g() * n + gemm::block_scratch_len(s.k(), n)
    }

    /// Output channels `[m_lo, m_hi)` (within group), positions `cols` of one group.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        isa: Isa,
        s: &ConvShape,
        pa: &[f32],
        xg: &[f32],
        yg: &mut [f32],
        (m_lo, m_hi): (usize, usize),
        cols: (usize, usize),
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let (hw, ohw, hpwp) = (s.h * s.w, s.oh * s.ow, self.hp * self.wp);
        let (mg, k, wp) = (s.cout_g(), s.k(), self.wp);
        let (xpad, rest) = scratch.split_at_mut(self.input_len(s));
        let (cbuf, gscratch) = rest.split_at_mut(mg * self.rows * wp);
        let khw = s.kh * s.kw;
        let first_row = cols.0 / s.ow;
        let end_row = cols.1.div_ceil(s.ow);
        // Only the padded rows the windows of these output rows cover are copied (a
        // call for part of the columns, an FC tile, pads its own rows, not the whole
        // input); the rows after them are read only for the thrown-away columns.
        let pr_lo = first_row;
        let pr_hi = (end_row + (s.kh - 1) * s.dh).min(self.hp);
        for ci in 0..s.cin_g() {
            let plane = &mut xpad[ci * hpwp..(ci + 1) * hpwp];
            plane[pr_lo * wp..pr_hi * wp].fill(0.0);
            for pr in pr_lo..pr_hi {
                let Some(iy) = pr.checked_sub(s.ph).filter(|&iy| iy < s.h) else {
                    continue;
                };
                let d = pr * wp + s.pw;
                plane[d..d + s.w].copy_from_slice(&xg[ci * hw + iy * s.w..][..s.w]);
            }
        }
        xpad[s.cin_g() * hpwp..].fill(0.0);
        let mut oy0 = first_row;
        while oy0 < end_row {
            let oy1 = (oy0 + self.rows).min(end_row);
            let n = (oy1 - oy0) * wp;
            let xpad = &*xpad;
            let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                let (ci, ky, kx) = (p / khw, (p % khw) / s.kw, p % s.kw);
                let at = ci * hpwp + (oy0 + ky * s.dh) * wp + kx * s.dw + j0;
                Some(&xpad[at..at + len])
            };
            let m_from = m_lo / MR * MR;
            // Without residuals or an addend (laid out like y, not like the padded
            // block) the epilogue runs inside the GEMM on the hot block, thrown-away
            // columns included, instead of in a pass over y afterwards.
            let early = epi.residuals.is_empty() && epi.addend.is_none();
            gemm_packed(
                isa,
                mg,
                n,
                (k, weights_depth(s)),
                pa,
                BSource::Rows(&fill),
                gscratch,
                cbuf,
                n,
                (m_from, m_hi),
                (0, n),
                if early { epi } else { &Epilogue::NONE },
            );
            // Keep the first `ow` columns of each padded row, within `cols`.
            let lo = cols.0.max(oy0 * s.ow);
            let hi = cols.1.min(oy1 * s.ow);
            for i in m_lo..m_hi {
                let crow = &cbuf[i * n..(i + 1) * n];
                let yrow = &mut yg[i * ohw..(i + 1) * ohw];
                for oy in oy0..oy1 {
                    let a = lo.max(oy * s.ow);
                    let b = hi.min((oy + 1) * s.ow);
                    if a < b {
                        let src = (oy - oy0) * wp + (a - oy * s.ow);
                        yrow[a..b].copy_from_slice(&crow[src..src + (b - a)]);
                    }
                }
            }
            if !early && !epi.is_empty() {
                epi.apply(isa, yg, ohw, m_lo, m_hi - m_lo, lo, hi - lo);
            }
            oy0 = oy1;
        }
    }
}

#[cfg(test)]
pub(crate) mod direct_tests;
#[cfg(test)]
pub(crate) mod tests;

//! Convolutions on NCHW f32 tensors (1-D convs are 2-D with height 1).
//!
//! * Grouped / dense conv: per group, `Y_g[Cout_g, OH*OW] = W_g[Cout_g, Cin_g*KH*KW] ·
//!   im2col(X_g)`. The weights are packed once ([`ConvWeights::pack`]); the im2col matrix
//!   is generated row by row straight into packed-B panels in scratch memory (a 1x1,
//!   stride-1, unpadded conv packs the input planes directly).
//! * Depthwise conv (one input and one output channel per group): direct, accumulating
//!   each kernel tap as a (strided) AXPY over output rows.
//! * ConvTranspose: `cols = W_g^T · X_g` by the same GEMM, then col2im scatter-add.
//!
//! A call computes output channels `[c_lo, c_hi)` only; the epilogue (bias, post-ops,
//! residuals) runs inside the GEMM / per channel plane while it is hot.

use super::gemm::{self, gemm_packed, BSource, Epilogue, MR};
use super::simd::{self, Isa};

/// Geometry of a 2-D convolution (1-D uses `h = kh = oh = 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvShape {
    /// Batch.
    pub n: usize,
    /// Input channels (all groups).
    pub c_in: usize,
    /// Input height and width.
    pub h: usize,
    pub w: usize,
    /// Output channels (all groups).
    pub c_out: usize,
    /// Output height and width.
    pub oh: usize,
    pub ow: usize,
    /// Kernel height and width.
    pub kh: usize,
    pub kw: usize,
    /// Strides (h, w).
    pub sh: usize,
    pub sw: usize,
    /// Dilations (h, w).
    pub dh: usize,
    pub dw: usize,
    /// Leading pads (top, left).
    pub ph: usize,
    pub pw: usize,
    /// Groups.
    pub group: usize,
}

impl ConvShape {
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
    /// Packed A per group (dense) or `[C, KH*KW]` (depthwise).
    pub groups: Vec<Vec<f32>>,
}

impl ConvWeights {
    /// Packs `w` (`[Cout, Cin_g, KH, KW]`) for `s`.
    pub fn pack(s: &ConvShape, w: &[f32]) -> ConvWeights {
        if s.is_depthwise() {
            return ConvWeights {
                groups: vec![w.to_vec()],
            };
        }
        let (mg, k) = (s.cout_g(), s.k());
        let groups = (0..s.group)
            .map(|g| {
                let mut pa = vec![0.0; gemm::packed_a_len(mg, k)];
                gemm::pack_a(&w[g * mg * k..(g + 1) * mg * k], k, 1, mg, k, 1.0, &mut pa);
                pa
            })
            .collect();
        ConvWeights { groups }
    }
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
/// ([`full_b_len`] floats) for [`conv2d`]'s `b_full`.
pub fn pack_b_full(s: &ConvShape, x: &[f32], out: &mut [f32]) {
    let (ohw, hw, k) = (s.oh * s.ow, s.h * s.w, s.k());
    let (pb, row) = out.split_at_mut(gemm::packed_b_len(k, ohw));
    let xg = &x[..s.cin_g() * hw];
    let pointwise = s.is_pointwise();
    gemm::pack_b_rows(k, ohw, pb, row, |p, row| {
        if pointwise {
            Some(&xg[p * hw..(p + 1) * hw])
        } else {
            im2col_segment(s, xg, p, 0, &mut row[..ohw]);
            None
        }
    });
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
        let mut res_b: [&[f32]; 4] = [&[]; 4];
        for (d, r) in res_b.iter_mut().zip(epi.residuals) {
            *d = &r[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
        }
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
            let fill = |p: usize, j0: usize, len: usize, row: &mut [f32]| {
                if pointwise {
                    Some(&xg[p * hw + j0..p * hw + j0 + len])
                } else {
                    im2col_segment(s, xg, p, j0, &mut row[..len]);
                    None
                }
            };
            gemm_packed(
                isa,
                mg,
                ohw,
                k,
                &wts.groups[g],
                match b_full {
                    Some(p) => BSource::Packed(p),
                    None => BSource::Rows(&fill),
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
        xpad.fill(0.0);
        for ci in 0..s.cin_g() {
            for iy in 0..s.h {
                let d = ci * hpwp + (iy + s.ph) * wp + s.pw;
                xpad[d..d + s.w].copy_from_slice(&xg[ci * hw + iy * s.w..][..s.w]);
            }
        }
        let khw = s.kh * s.kw;
        let first_row = cols.0 / s.ow;
        let end_row = cols.1.div_ceil(s.ow);
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
            gemm_packed(
                isa,
                mg,
                n,
                k,
                pa,
                BSource::Rows(&fill),
                gscratch,
                cbuf,
                n,
                (m_from, m_hi),
                (0, n),
                &Epilogue::NONE,
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
            if !epi.is_empty() {
                epi.apply(isa, yg, ohw, m_lo, m_hi - m_lo, lo, hi - lo);
            }
            oy0 = oy1;
        }
    }
}

/// Writes columns `j0..j0 + out.len()` of im2col row `p` (`p = (ci, ky, kx)`, columns
/// = output positions `oy * OW + ox`) of one image and group into `out`.
fn im2col_segment(s: &ConvShape, xg: &[f32], p: usize, j0: usize, out: &mut [f32]) {
    let (hw, khw) = (s.h * s.w, s.kh * s.kw);
    let ci = p / khw;
    let ky = (p % khw) / s.kw;
    let kx = p % s.kw;
    let plane = &xg[ci * hw..(ci + 1) * hw];
    let (vlo, vhi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
    let mut j = j0;
    let end = j0 + out.len();
    while j < end {
        let (oy, ox0) = (j / s.ow, j % s.ow);
        let ox1 = s.ow.min(ox0 + (end - j));
        let seg = &mut out[j - j0..j - j0 + (ox1 - ox0)];
        j += ox1 - ox0;
        let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
        let (lo, hi) = (vlo.clamp(ox0, ox1), vhi.clamp(ox0, ox1));
        if iy < 0 || iy >= s.h as isize || lo >= hi {
            seg.fill(0.0);
            continue;
        }
        let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
        seg[..lo - ox0].fill(0.0);
        seg[hi - ox0..].fill(0.0);
        let ix0 = lo * s.sw + kx * s.dw - s.pw;
        let dst = &mut seg[lo - ox0..hi - ox0];
        if s.sw == 1 {
            dst.copy_from_slice(&src[ix0..ix0 + dst.len()]);
        } else {
            strided_copy(&src[ix0..], s.sw, dst);
        }
    }
}

/// `dst[i] = src[i * stride]` for as many elements as both allow (stride 2 has a
/// fixed-size fast path the compiler vectorises).
#[inline(always)]
fn strided_copy(src: &[f32], stride: usize, dst: &mut [f32]) {
    if stride == 2 {
        for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = pair[0];
        }
        // An odd-length source leaves one last element outside the exact chunks.
        let done = src.len() / 2;
        if done < dst.len() && src.len() % 2 == 1 {
            dst[done] = src[src.len() - 1];
        }
    } else {
        for (d, c) in dst.iter_mut().zip(src.chunks(stride)) {
            *d = c[0];
        }
    }
}

/// Output positions `[lo, hi)` whose input index `o*stride + off - pad` lies in `[0, len)`.
pub fn valid_range(
    out_len: usize,
    stride: usize,
    pad: usize,
    off: usize,
    len: usize,
) -> (usize, usize) {
    // o*stride + off >= pad  <=>  o >= ceil((pad - off) / stride)
    let lo = if off >= pad {
        0
    } else {
        (pad - off).div_ceil(stride)
    };
    // o*stride + off - pad <= len - 1  <=>  o <= (len - 1 + pad - off) / stride
    let hi = if len + pad > off {
        ((len - 1 + pad - off) / stride + 1).min(out_len)
    } else {
        0
    };
    (lo.min(out_len), hi.max(lo.min(out_len)))
}

#[allow(clippy::too_many_arguments)]
fn depthwise(
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
    let (ohw, hw, khw) = (s.oh * s.ow, s.h * s.w, s.kh * s.kw);
    for c in c_lo..c_hi {
        let plane = &xb[c * hw..(c + 1) * hw];
        let out = &mut yb[c * ohw..(c + 1) * ohw];
        simd::depthwise_plane(isa, s, &w[c * khw..(c + 1) * khw], plane, out, scratch);
        epi.apply(isa, yb, ohw, c, 1, 0, ohw);
    }
}

/// Geometry of the zero-padded, phase-split copy of a depthwise input plane:
/// `(phase_len, phase_row_len)`; there are `sh * sw` phases.
fn dw_padded(s: &ConvShape) -> (usize, usize) {
    let hp = (s.h + s.ph).max((s.oh.max(1) - 1) * s.sh + (s.kh - 1) * s.dh + 1);
    let wp = (s.w + s.pw).max((s.ow.max(1) - 1) * s.sw + (s.kw - 1) * s.dw + 1);
    let (hps, wps) = (hp.div_ceil(s.sh), wp.div_ceil(s.sw));
    ((hps + 1) * wps, wps)
}

/// Scratch floats [`depthwise_plane_body`] needs.
pub fn depthwise_scratch_len(s: &ConvShape) -> usize {
    let (plen, wps) = dw_padded(s);
    s.sh * s.sw * plen + s.oh * wps
}

/// Output elements accumulated per block in [`depthwise_plane_body`] (stays in L1).
const DW_BLOCK: usize = 1024;
/// Where tap `(ky, kx)` starts reading the phase-split padded plane (`sh * sw` phases of
/// `plen` floats, rows of `wps`) for output position 0.
#[inline(always)]
fn dw_tap_offset(s: &ConvShape, plen: usize, wps: usize, ky: usize, kx: usize) -> usize {
    let (qy, ry) = ((ky * s.dh) % s.sh, (ky * s.dh) / s.sh);
    let (qx, cx) = ((kx * s.dw) % s.sw, (kx * s.dw) / s.sw);
    (qy * s.sw + qx) * plen + ry * wps + cx
}

/// 3x3 depthwise: lanes of one register accumulator, and independent accumulators per
/// step (enough to hide the multiply-add latency).
const DW_LANES: usize = 8;
const DW_CHUNKS: usize = 4;

/// One depthwise plane: `out[oy, ox] = sum_{ky,kx} w[ky, kx] * x[iy, ix]` (zero padding).
/// Shared body of the AVX2 and portable builds ([`simd::depthwise_plane`]).
///
/// The plane is first copied into `scratch` with its zero border, split into `sh * sw`
/// phases (padded position `(r, c)` goes to phase `(r % sh, c % sw)` at `(r / sh, c / sw)`).
/// Output `(oy, ox)` of tap `(ky, kx)` then reads phase position `(oy + ky*dh / sh,
/// ox + kx*dw / sw)`, so over a "wide" output of rows of the phase width each tap is one
/// contiguous, bounds-free multiply-add over the whole plane; the wide rows are then
/// trimmed into `out`.
#[inline(always)]
pub(crate) fn depthwise_plane_body(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let (plen, wps) = dw_padded(s);
    let (sh, sw) = (s.sh, s.sw);
    let (pads, wide) = scratch.split_at_mut(sh * sw * plen);
    pads.fill(0.0);
    for iy in 0..s.h {
        let src = &plane[iy * s.w..(iy + 1) * s.w];
        let r = iy + s.ph;
        let base = (r % sh) * sw * plen + (r / sh) * wps;
        if sw == 1 {
            pads[base + s.pw..base + s.pw + s.w].copy_from_slice(src);
        } else {
            for qx in 0..sw {
                // First padded column of this phase that holds input: c0 >= pw, c0 % sw == qx.
                let c0 = s.pw + (qx + sw - s.pw % sw) % sw;
                if c0 - s.pw >= s.w {
                    continue;
                }
                let dst = &mut pads[base + qx * plen + c0 / sw..];
                strided_copy(&src[c0 - s.pw..], sw, dst);
            }
        }
    }
    let n = s.oh * wps;
    let wide = &mut wide[..n];
    let mut b0 = 0;
    if s.kh * s.kw == 9 {
        // 3x3: every output sums its nine taps in registers, DW_CHUNKS independent
        // vectors at a time (one load per tap, one store; no accumulator round trips).
        let offs: [usize; 9] = std::array::from_fn(|t| dw_tap_offset(s, plen, wps, t / 3, t % 3));
        let wt: &[f32; 9] = w[..9].try_into().expect("3x3 taps");
        const STEP: usize = DW_LANES * DW_CHUNKS;
        while b0 + STEP <= n {
            let mut acc = [[0.0f32; DW_LANES]; DW_CHUNKS];
            for (t, &o) in offs.iter().enumerate() {
                let src: &[f32; STEP] = pads[o + b0..o + b0 + STEP].try_into().expect("STEP");
                for (a, chunk) in acc.iter_mut().zip(src.chunks_exact(DW_LANES)) {
                    for (d, x) in a.iter_mut().zip(chunk) {
                        *d += wt[t] * *x;
                    }
                }
            }
            for (c, a) in acc.iter().enumerate() {
                wide[b0 + c * DW_LANES..b0 + (c + 1) * DW_LANES].copy_from_slice(a);
            }
            b0 += STEP;
        }
    }
    while b0 < n {
        let len = DW_BLOCK.min(n - b0);
        let acc = &mut wide[b0..b0 + len];
        let mut first = true;
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let off = dw_tap_offset(s, plen, wps, ky, kx) + b0;
                let wv = w[ky * s.kw + kx];
                let src = &pads[off..off + len];
                if first {
                    for (d, x) in acc.iter_mut().zip(src) {
                        *d = wv * *x;
                    }
                    first = false;
                } else {
                    for (d, x) in acc.iter_mut().zip(src) {
                        *d += wv * *x;
                    }
                }
            }
        }
        b0 += len;
    }
    for oy in 0..s.oh {
        out[oy * s.ow..(oy + 1) * s.ow].copy_from_slice(&wide[oy * wps..oy * wps + s.ow]);
    }
}

/// ConvTranspose geometry and packed weights.
#[derive(Debug, Clone)]
pub struct DeconvPlan {
    /// Geometry, with `h, w` the input size and `oh, ow` the output size; strides,
    /// dilations and leading pads as in ONNX ConvTranspose.
    pub s: ConvShape,
    /// Per group, packed `W_g^T` (`[Cout_g*KH*KW, Cin_g]`).
    pub packed: Vec<Vec<f32>>,
}

impl DeconvPlan {
    /// Packs `w` (`[Cin, Cout_g, KH, KW]`).
    pub fn new(s: ConvShape, w: &[f32]) -> DeconvPlan {
        let (cin_g, cout_g) = (s.cin_g(), s.cout_g());
        let m = cout_g * s.kh * s.kw;
        let packed = (0..s.group)
            .map(|g| {
                let wg = &w[g * cin_g * m..(g + 1) * cin_g * m];
                let mut pa = vec![0.0; gemm::packed_a_len(m, cin_g)];
                gemm::pack_a(wg, 1, m, m, cin_g, 1.0, &mut pa);
                pa
            })
            .collect();
        DeconvPlan { s, packed }
    }

    /// Scratch floats a call needs.
    pub fn scratch_len(&self) -> usize {
        let s = &self.s;
        let hw = s.h * s.w;
        let m = s.cout_g() * s.kh * s.kw;
        gemm::block_scratch_len(s.cin_g(), hw) + m.div_ceil(MR) * MR * hw
    }

    /// Computes output channels `[c_lo, c_hi)` of `y` (`[N, Cout, OH, OW]`) from `x`
    /// (`[N, Cin, H, W]`), adding `bias` per channel.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        isa: Isa,
        x: &[f32],
        bias: Option<&[f32]>,
        y: &mut [f32],
        c_lo: usize,
        c_hi: usize,
        scratch: &mut [f32],
    ) {
        let s = &self.s;
        let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
        let (cin_g, cout_g, khw) = (s.cin_g(), s.cout_g(), s.kh * s.kw);
        let m = cout_g * khw;
        let (bscratch, cols) = scratch.split_at_mut(gemm::block_scratch_len(cin_g, hw));
        for b in 0..s.n {
            let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
            let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
            for g in c_lo / cout_g..c_hi.div_ceil(cout_g) {
                let lo = c_lo.max(g * cout_g) - g * cout_g;
                let hi = c_hi.min((g + 1) * cout_g) - g * cout_g;
                let xg = &xb[g * cin_g * hw..(g + 1) * cin_g * hw];
                let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                    Some(&xg[p * hw + j0..p * hw + j0 + len])
                };
                let (r_lo, r_hi) = (lo * khw / MR * MR, hi * khw);
                gemm_packed(
                    isa,
                    m,
                    hw,
                    cin_g,
                    &self.packed[g],
                    BSource::Rows(&fill),
                    bscratch,
                    cols,
                    hw,
                    (r_lo, r_hi),
                    (0, hw),
                    &Epilogue::NONE,
                );
                for co in lo..hi {
                    let c = g * cout_g + co;
                    let out = &mut yb[c * ohw..(c + 1) * ohw];
                    out.fill(bias.map_or(0.0, |bv| bv[c]));
                    for ky in 0..s.kh {
                        // Input rows whose output row `iy*sh + ky*dh - ph` is inside.
                        let (y_lo, y_hi) = valid_range(s.h, s.sh, s.ph, ky * s.dh, s.oh);
                        for kx in 0..s.kw {
                            let src = &cols[(co * khw + ky * s.kw + kx) * hw..][..hw];
                            let (x_lo, x_hi) = valid_range(s.w, s.sw, s.pw, kx * s.dw, s.ow);
                            if x_lo >= x_hi {
                                continue;
                            }
                            for iy in y_lo..y_hi {
                                let oy = iy * s.sh + ky * s.dh - s.ph;
                                let ox0 = x_lo * s.sw + kx * s.dw - s.pw;
                                let orow = &mut out[oy * s.ow + ox0..(oy + 1) * s.ow];
                                let srow = &src[iy * s.w + x_lo..iy * s.w + x_hi];
                                if s.sw == 1 {
                                    for (o, v) in orow.iter_mut().zip(srow) {
                                        *o += *v;
                                    }
                                } else {
                                    for (o, v) in orow.iter_mut().step_by(s.sw).zip(srow) {
                                        *o += *v;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};

    /// Naive conv straight from the definition.
    fn conv_naive(s: &ConvShape, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f32> {
        let mut y = vec![0.0; s.n * s.c_out * s.oh * s.ow];
        let (cig, cog) = (s.cin_g(), s.cout_g());
        for b in 0..s.n {
            for co in 0..s.c_out {
                let g = co / cog;
                for oy in 0..s.oh {
                    for ox in 0..s.ow {
                        let mut acc = bias[co] as f64;
                        for ci in 0..cig {
                            for ky in 0..s.kh {
                                for kx in 0..s.kw {
                                    let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                                    let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                                    if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize
                                    {
                                        continue;
                                    }
                                    let xv = x[((b * s.c_in + g * cig + ci) * s.h + iy as usize)
                                        * s.w
                                        + ix as usize];
                                    let wv = w[((co * cig + ci) * s.kh + ky) * s.kw + kx];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        y[((b * s.c_out + co) * s.oh + oy) * s.ow + ox] = acc as f32;
                    }
                }
            }
        }
        y
    }

    #[allow(clippy::too_many_arguments)]
    fn shape(
        n: usize,
        c_in: usize,
        hw: (usize, usize),
        c_out: usize,
        k: (usize, usize),
        st: (usize, usize),
        d: (usize, usize),
        p: (usize, usize, usize, usize),
        group: usize,
    ) -> ConvShape {
        let oh = (hw.0 + p.0 + p.2 - d.0 * (k.0 - 1) - 1) / st.0 + 1;
        let ow = (hw.1 + p.1 + p.3 - d.1 * (k.1 - 1) - 1) / st.1 + 1;
        ConvShape {
            n,
            c_in,
            h: hw.0,
            w: hw.1,
            c_out,
            oh,
            ow,
            kh: k.0,
            kw: k.1,
            sh: st.0,
            sw: st.1,
            dh: d.0,
            dw: d.1,
            ph: p.0,
            pw: p.1,
            group,
        }
    }

    #[test]
    fn conv_matches_naive() {
        let cases = [
            shape(1, 3, (9, 11), 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
            shape(2, 4, (7, 7), 13, (3, 3), (2, 2), (1, 1), (0, 1, 2, 0), 1),
            shape(1, 16, (5, 6), 7, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
            shape(1, 8, (10, 10), 8, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 8),
            shape(1, 6, (9, 8), 6, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 6),
            shape(1, 8, (6, 6), 12, (3, 2), (1, 2), (1, 1), (1, 0, 1, 1), 2),
            shape(1, 5, (1, 20), 7, (1, 5), (1, 3), (1, 2), (0, 2, 0, 1), 1),
            shape(1, 4, (8, 8), 6, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
            // Wide stride-1 convs take the padded-rows path (several row chunks, row
            // table and packed B, dilation, asymmetric pads, groups, batch).
            shape(1, 5, (30, 40), 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
            shape(2, 3, (12, 70), 30, (3, 3), (1, 1), (2, 2), (2, 1, 0, 3), 1),
            shape(1, 4, (6, 36), 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
            shape(1, 2, (3, 64), 7, (1, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
        ];
        assert!(cases[8..].iter().all(|s| s.padded().is_some()));
        assert!(cases[..8].iter().all(|s| s.padded().is_none()));
        for isa in simd::available_isas() {
            for s in &cases {
                let x = rand_vec(s.n * s.c_in * s.h * s.w, 1);
                let w = rand_vec(s.c_out * s.cin_g() * s.kh * s.kw, 2);
                let bias = rand_vec(s.c_out, 3);
                let wts = ConvWeights::pack(s, &w);
                let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
                let mut scratch = vec![0.0; s.scratch_len()];
                let epi = Epilogue {
                    bias: Some(&bias),
                    ..Epilogue::NONE
                };
                // Two tiles on an aligned boundary must equal the whole.
                let al = channel_align(s);
                let mid = (s.c_out / 2 / al * al).min(s.c_out);
                let ohw = s.oh * s.ow;
                let mut run = |y: &mut [f32],
                               c: (usize, usize),
                               cols: (usize, usize),
                               full: Option<&[f32]>| {
                    conv2d(
                        isa,
                        s,
                        &wts,
                        &x,
                        y,
                        c.0,
                        c.1,
                        cols,
                        full,
                        &epi,
                        &mut scratch,
                    )
                };
                run(&mut y, (0, mid), (0, ohw), None);
                run(&mut y, (mid, s.c_out), (0, ohw), None);
                let want = conv_naive(s, &x, &w, &bias);
                assert_close(&y, &want, 1e-4);
                if s.group == 1 {
                    // Output-position tiles on a column-panel boundary.
                    let midc = ohw / 2 / gemm::NR * gemm::NR;
                    y.fill(f32::NAN);
                    run(&mut y, (0, s.c_out), (0, midc), None);
                    run(&mut y, (0, s.c_out), (midc, ohw), None);
                    assert_close(&y, &want, 1e-4);
                }
                if s.group == 1 && s.n == 1 {
                    // Channel tiles over a pre-packed im2col matrix.
                    let mut full = vec![0.0; full_b_len(s)];
                    pack_b_full(s, &x, &mut full);
                    y.fill(f32::NAN);
                    let m = MR.min(s.c_out);
                    run(&mut y, (0, m), (0, ohw), Some(&full));
                    run(&mut y, (m, s.c_out), (0, ohw), Some(&full));
                    assert_close(&y, &want, 1e-4);
                }
            }
        }
    }

    #[test]
    fn deconv_matches_naive() {
        // y[co, iy*s - p + ky*d] += x[ci, iy] * w[ci, co, ky]
        for &(cin, cout, group, k, st, pad) in &[
            (3usize, 4usize, 1usize, 3usize, 2usize, 1usize),
            (4, 6, 2, 2, 2, 0),
            (2, 2, 1, 3, 1, 1),
        ] {
            let (h, w_) = (5, 4);
            let oh = (h - 1) * st + k - 2 * pad;
            let ow = (w_ - 1) * st + k - 2 * pad;
            let s = ConvShape {
                n: 1,
                c_in: cin,
                h,
                w: w_,
                c_out: cout,
                oh,
                ow,
                kh: k,
                kw: k,
                sh: st,
                sw: st,
                dh: 1,
                dw: 1,
                ph: pad,
                pw: pad,
                group,
            };
            let (cig, cog) = (cin / group, cout / group);
            let x = rand_vec(cin * h * w_, 1);
            let wt = rand_vec(cin * cog * k * k, 2);
            let bias = rand_vec(cout, 3);
            let mut want = vec![0.0f32; cout * oh * ow];
            for co in 0..cout {
                want[co * oh * ow..(co + 1) * oh * ow].fill(bias[co]);
            }
            for ci in 0..cin {
                let g = ci / cig;
                for cl in 0..cog {
                    let co = g * cog + cl;
                    for iy in 0..h {
                        for ix in 0..w_ {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let oy = (iy * st + ky) as isize - pad as isize;
                                    let ox = (ix * st + kx) as isize - pad as isize;
                                    if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                        continue;
                                    }
                                    want[(co * oh + oy as usize) * ow + ox as usize] += x
                                        [(ci * h + iy) * w_ + ix]
                                        * wt[((ci * cog + cl) * k + ky) * k + kx];
                                }
                            }
                        }
                    }
                }
            }
            let plan = DeconvPlan::new(s, &wt);
            let mut scratch = vec![0.0; plan.scratch_len()];
            let mut y = vec![f32::NAN; cout * oh * ow];
            plan.run(
                simd::best_isa(),
                &x,
                Some(&bias),
                &mut y,
                0,
                1,
                &mut scratch,
            );
            plan.run(
                simd::best_isa(),
                &x,
                Some(&bias),
                &mut y,
                1,
                cout,
                &mut scratch,
            );
            assert_close(&y, &want, 1e-4);
        }
    }
}

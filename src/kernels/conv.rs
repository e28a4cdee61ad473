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

use super::gemm::{self, gemm_packed, Epilogue, MR};
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
            0
        } else {
            let n = self.oh * self.ow;
            gemm::packed_b_len(self.k(), n) + n
        }
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

/// Forward conv of output channels `[c_lo, c_hi)`. `x`: `[N, Cin, H, W]`, `y`:
/// `[N, Cout, OH, OW]`. `epi.residuals` are laid out like `y` (the whole tensor); `bias`
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
            depthwise(isa, s, &wts.groups[0], xb, yb, c_lo, c_hi, &epi_b);
            continue;
        }
        let (mg, k) = (s.cout_g(), s.k());
        let g_lo = c_lo / mg;
        let g_hi = c_hi.div_ceil(mg);
        for g in g_lo..g_hi {
            let m_lo = c_lo.max(g * mg) - g * mg;
            let m_hi = c_hi.min((g + 1) * mg) - g * mg;
            let (pb, row) = scratch.split_at_mut(gemm::packed_b_len(k, ohw));
            let xg = &xb[g * s.cin_g() * hw..(g + 1) * s.cin_g() * hw];
            pack_im2col(s, xg, pb, row);
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
            gemm_packed(
                isa,
                mg,
                ohw,
                k,
                &wts.groups[g],
                pb,
                yg,
                ohw,
                (m_lo, m_hi),
                (0, ohw),
                &epi_g,
            );
        }
    }
}

/// Writes the im2col matrix of one image and group (`[Cin_g*KH*KW, OH*OW]`) into packed
/// B panels `pb`, using `row` (OH*OW floats) as scratch.
fn pack_im2col(s: &ConvShape, xg: &[f32], pb: &mut [f32], row: &mut [f32]) {
    let (ohw, hw, k) = (s.oh * s.ow, s.h * s.w, s.k());
    if s.is_pointwise() {
        gemm::pack_b_rows(k, ohw, pb, row, |p, _| Some(&xg[p * hw..(p + 1) * hw]));
        return;
    }
    let khw = s.kh * s.kw;
    gemm::pack_b_rows(k, ohw, pb, row, |p, row| {
        let ci = p / khw;
        let ky = (p % khw) / s.kw;
        let kx = p % s.kw;
        let plane = &xg[ci * hw..(ci + 1) * hw];
        let (ox_lo, ox_hi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
        for oy in 0..s.oh {
            let out = &mut row[oy * s.ow..(oy + 1) * s.ow];
            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
            if iy < 0 || iy >= s.h as isize || ox_lo >= ox_hi {
                out.fill(0.0);
                continue;
            }
            let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
            out[..ox_lo].fill(0.0);
            out[ox_hi..].fill(0.0);
            let ix0 = ox_lo * s.sw + kx * s.dw - s.pw;
            if s.sw == 1 {
                out[ox_lo..ox_hi].copy_from_slice(&src[ix0..ix0 + (ox_hi - ox_lo)]);
            } else {
                for (i, o) in out[ox_lo..ox_hi].iter_mut().enumerate() {
                    *o = src[ix0 + i * s.sw];
                }
            }
        }
        None
    });
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
) {
    let (ohw, hw, khw) = (s.oh * s.ow, s.h * s.w, s.kh * s.kw);
    for c in c_lo..c_hi {
        let plane = &xb[c * hw..(c + 1) * hw];
        let out = &mut yb[c * ohw..(c + 1) * ohw];
        out.fill(0.0);
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let wv = w[c * khw + ky * s.kw + kx];
                let (ox_lo, ox_hi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
                if ox_lo >= ox_hi {
                    continue;
                }
                let ix0 = ox_lo * s.sw + kx * s.dw - s.pw;
                let (oy_lo, oy_hi) = valid_range(s.oh, s.sh, s.ph, ky * s.dh, s.h);
                for oy in oy_lo..oy_hi {
                    let iy = oy * s.sh + ky * s.dh - s.ph;
                    let src = &plane[iy * s.w + ix0..(iy + 1) * s.w];
                    let dst = &mut out[oy * s.ow + ox_lo..oy * s.ow + ox_hi];
                    simd::axpy_strided(isa, wv, src, s.sw, dst);
                }
            }
        }
        epi.apply(yb, ohw, c, 1, 0, ohw);
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
        gemm::packed_b_len(s.cin_g(), hw) + hw + m.div_ceil(MR) * MR * hw
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
        let (pb, rest) = scratch.split_at_mut(gemm::packed_b_len(cin_g, hw));
        let (row, cols) = rest.split_at_mut(hw);
        for b in 0..s.n {
            let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
            let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
            for g in c_lo / cout_g..c_hi.div_ceil(cout_g) {
                let lo = c_lo.max(g * cout_g) - g * cout_g;
                let hi = c_hi.min((g + 1) * cout_g) - g * cout_g;
                let xg = &xb[g * cin_g * hw..(g + 1) * cin_g * hw];
                gemm::pack_b_rows(cin_g, hw, pb, row, |p, _| Some(&xg[p * hw..(p + 1) * hw]));
                let (r_lo, r_hi) = (lo * khw / MR * MR, hi * khw);
                gemm_packed(
                    isa,
                    m,
                    hw,
                    cin_g,
                    &self.packed[g],
                    pb,
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
                        for kx in 0..s.kw {
                            let src = &cols[(co * khw + ky * s.kw + kx) * hw..][..hw];
                            for iy in 0..s.h {
                                let oy = (iy * s.sh + ky * s.dh) as isize - s.ph as isize;
                                if oy < 0 || oy >= s.oh as isize {
                                    continue;
                                }
                                let orow = &mut out[oy as usize * s.ow..(oy as usize + 1) * s.ow];
                                for ix in 0..s.w {
                                    let ox = (ix * s.sw + kx * s.dw) as isize - s.pw as isize;
                                    if ox >= 0 && ox < s.ow as isize {
                                        orow[ox as usize] += src[iy * s.w + ix];
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
        ];
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
                conv2d(isa, s, &wts, &x, &mut y, 0, mid, &epi, &mut scratch);
                conv2d(isa, s, &wts, &x, &mut y, mid, s.c_out, &epi, &mut scratch);
                assert_close(&y, &conv_naive(s, &x, &w, &bias), 1e-4);
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

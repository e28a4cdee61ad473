//! ConvTranspose: `cols = W_g^T · X_g` by the packed GEMM, then a col2im scatter-add.

use super::{valid_range, ConvShape};
use crate::kernels::gemm::{self, gemm_packed, BSource, Epilogue, MR};
use crate::kernels::isa::Isa;

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

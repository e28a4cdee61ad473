//! ConvTranspose: `cols = W_g^T · X_g` by the packed GEMM, then a col2im scatter-add.

use super::{valid_range, ConvShape};
use crate::kernels::gemm::{self, gemm_packed, BSource, Epilogue, MR};
use crate::kernels::isa::Isa;

/// Floats of one block of `cols` (256 KiB, half of a typical L2).
const BLOCK_FLOATS: usize = 64 * 1024;

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

    /// Input rows per block: the block of `cols` (`m` rows by the block's input
    /// positions) stays within [`BLOCK_FLOATS`], so that the GEMM writes it and the
    /// scatter reads it back in cache.
    fn block_rows(&self) -> usize {
        let s = &self.s;
        let m_pad = (s.cout_g() * s.kh * s.kw).div_ceil(MR) * MR;
        (BLOCK_FLOATS / (m_pad * s.w).max(1)).clamp(1, s.h.max(1))
    }

    /// Scratch floats a call needs.
    pub fn scratch_len(&self) -> usize {
        let s = &self.s;
        let n = self.block_rows() * s.w;
        let m = s.cout_g() * s.kh * s.kw;
        gemm::block_scratch_len(s.cin_g(), n) + m.div_ceil(MR) * MR * n
    }

    /// Computes output channels `[c_lo, c_hi)` of `y` (`[N, Cout, OH, OW]`) from `x`
    /// (`[N, Cin, H, W]`), adding `bias` per channel. Input rows are taken a block at a
    /// time: `cols` of the block, then its scatter-add into the output rows it reaches.
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
        let rows = self.block_rows();
        let (bscratch, cols) = scratch.split_at_mut(gemm::block_scratch_len(cin_g, rows * s.w));
        for b in 0..s.n {
            let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
            let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
            for g in c_lo / cout_g..c_hi.div_ceil(cout_g) {
                let lo = c_lo.max(g * cout_g) - g * cout_g;
                let hi = c_hi.min((g + 1) * cout_g) - g * cout_g;
                let xg = &xb[g * cin_g * hw..(g + 1) * cin_g * hw];
                for co in lo..hi {
                    let c = g * cout_g + co;
                    yb[c * ohw..(c + 1) * ohw].fill(bias.map_or(0.0, |bv| bv[c]));
                }
                let (r_lo, r_hi) = (lo * khw / MR * MR, hi * khw);
                let mut iy0 = 0;
                while iy0 < s.h {
                    let iy1 = (iy0 + rows).min(s.h);
                    let (j0, n) = (iy0 * s.w, (iy1 - iy0) * s.w);
                    let fill = |p: usize, j: usize, len: usize, _: &mut [f32]| {
                        Some(&xg[p * hw + j0 + j..p * hw + j0 + j + len])
                    };
                    gemm_packed(
                        isa,
                        m,
                        n,
                        cin_g,
                        &self.packed[g],
                        BSource::Rows(&fill),
                        bscratch,
                        cols,
                        n,
                        (r_lo, r_hi),
                        (0, n),
                        &Epilogue::NONE,
                    );
                    for co in lo..hi {
                        let c = g * cout_g + co;
                        let out = &mut yb[c * ohw..(c + 1) * ohw];
                        self.scatter(&cols[co * khw * n..(co + 1) * khw * n], out, iy0, iy1);
                    }
                    iy0 = iy1;
                }
            }
        }
    }

    /// Adds the `cols` rows of one output channel (`KH*KW` rows of the block's input
    /// positions, input rows `iy0..iy1`) into its output plane `out`.
    fn scatter(&self, cols: &[f32], out: &mut [f32], iy0: usize, iy1: usize) {
        let s = &self.s;
        let n = (iy1 - iy0) * s.w;
        for ky in 0..s.kh {
            // Input rows whose output row `iy*sh + ky*dh - ph` is inside.
            let (y_lo, y_hi) = valid_range(s.h, s.sh, s.ph, ky * s.dh, s.oh);
            let (y_lo, y_hi) = (y_lo.max(iy0), y_hi.min(iy1));
            for kx in 0..s.kw {
                let src = &cols[(ky * s.kw + kx) * n..][..n];
                let (x_lo, x_hi) = valid_range(s.w, s.sw, s.pw, kx * s.dw, s.ow);
                if x_lo >= x_hi {
                    continue;
                }
                for iy in y_lo..y_hi {
                    let oy = iy * s.sh + ky * s.dh - s.ph;
                    let ox0 = x_lo * s.sw + kx * s.dw - s.pw;
                    let orow = &mut out[oy * s.ow + ox0..(oy + 1) * s.ow];
                    let r = (iy - iy0) * s.w;
                    let srow = &src[r + x_lo..r + x_hi];
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

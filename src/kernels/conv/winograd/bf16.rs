//! The point GEMMs of a Winograd conv in bf16 (`VNPU_PRECISION=bf16`): the transformed
//! weights `U_p` held in K pairs (converted once, when the plan is made bf16), each block's
//! transformed input `V_p` converted to K pairs by the bf16 table's `pack_panel` before its
//! GEMMs, the products accumulated in f32 by the table's tiles. The transforms, the GEMM
//! results `M_p` and everything after them stay f32.
//!
//! Layout of a converted operand, per point: as [`crate::kernels::bf16`] packs A and B,
//! K blocks of [`KC`] rows (even, so a block starts on a whole pair), each a run of
//! panels of `kp * MR` (U) or `kp * NR` (V) dwords, `kp = kc.div_ceil(2)`.
//!
//! Invariant: a column of `M_p` gets the same bits whatever the panel or row range (the
//! one- and two-panel tiles compute each column with the same lane arithmetic), so
//! channel and tile ranges equal the whole bit for bit.

use super::body::point_stride;
use crate::kernels::bf16::{self, Bf16Table};
use crate::kernels::isa::{KC, MR, NR};

/// Rows of U swept over a block's B panels at a time (a multiple of [`MR`]).
const MC: usize = 72;

/// Transformed weights in K pairs and the table whose tiles multiply them.
#[derive(Debug, Clone)]
pub struct Bf16Points {
    /// The bf16 kernels.
    pub tab: &'static Bf16Table,
    /// `points` packed A operands (`Cout` rows padded to [`MR`], depth `Cin`), each
    /// [`bf16::packed_a_len`] dwords, point after point.
    pub u: Vec<u32>,
}

impl Bf16Points {
    /// Converts the f32 packed U of `points` points (`gemm::pack_a` layout: per K block
    /// `k0`, MR-row panels of `kc * MR` floats at `k0 * co_pad + i * kc`) of a conv with
    /// `co` outputs and `ci` inputs to K pairs.
    pub fn from_packed(
        tab: &'static Bf16Table,
        u: &[f32],
        points: usize,
        co: usize,
        ci: usize,
    ) -> Bf16Points {
        let co_pad = co.div_ceil(MR) * MR;
        let (flen, blen) = (co_pad * ci, bf16::packed_a_len(co, ci));
        let mut out = vec![0u32; points * blen];
        for p in 0..points {
            let (src, dst) = (&u[p * flen..][..flen], &mut out[p * blen..][..blen]);
            let mut k0 = 0;
            while k0 < ci {
                let kc = KC.min(ci - k0);
                for i in (0..co_pad).step_by(MR) {
                    let sp = &src[k0 * co_pad + i * kc..][..kc * MR];
                    let dp = &mut dst[bf16::a_panel(co_pad, k0, kc, i)..][..kc.div_ceil(2) * MR];
                    for (q, d) in dp.chunks_exact_mut(MR).enumerate() {
                        for (r, x) in d.iter_mut().enumerate() {
                            let hi = if 2 * q + 1 < kc {
                                sp[(2 * q + 1) * MR + r]
                            } else {
                                0.0
                            };
                            *x = bf16::pair(sp[2 * q * MR + r], hi);
                        }
                    }
                }
                k0 += kc;
            }
        }
        Bf16Points { tab, u: out }
    }

    /// Dwords between two points' converted inputs of `nbp` columns (one block).
    pub fn v_stride(ci: usize, nbp: usize) -> usize {
        point_stride(ci.div_ceil(2) * nbp)
    }

    /// Converts panels `[j0, j1)` (columns, multiples of [`NR`]) of every point of one
    /// block's f32 transformed input `v` (point `p` at `v[p * plen..]`, `nbp` columns,
    /// depth `ci`) into `vb` (point `p` at `vb[p * Self::v_stride(ci, nbp)..]`).
    #[allow(clippy::too_many_arguments)]
    pub fn convert_input(
        &self,
        v: &[f32],
        plen: usize,
        points: usize,
        ci: usize,
        nbp: usize,
        (j0, j1): (usize, usize),
        vb: &mut [u32],
    ) {
        let pbs = Self::v_stride(ci, nbp);
        for p in 0..points {
            let (vp, bp) = (&v[p * plen..][..ci * nbp], &mut vb[p * pbs..][..pbs]);
            let mut k0 = 0;
            while k0 < ci {
                let kc = KC.min(ci - k0);
                let kp = kc.div_ceil(2);
                for j in (j0..j1).step_by(NR) {
                    let src = &vp[k0 * nbp + j * kc..][..kc * NR];
                    (self.tab.pack_panel)(src, kc, &mut bp[k0 / 2 * nbp + j * kp..][..kp * NR]);
                }
                k0 += kc;
            }
        }
    }

    /// The point GEMM `M[c0..c1, j0..j1] = U_p · V_p[.., j0..j1]` of one block in bf16, as
    /// the f32 `gemm_point` lays it out: `u` point `p`'s converted weights (`co_pad` rows),
    /// `vb` its converted input (`nbp` columns, depth `ci`), `m` row `i - c0` holding
    /// channel `i` at stride `ldm`. Panels go through the two-panel tile in pairs from
    /// `j0` (the last one alone); both tiles give a column the same bits.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_point(
        &self,
        u: &[u32],
        vb: &[u32],
        m: &mut [f32],
        ldm: usize,
        (ci, co_pad, nbp): (usize, usize, usize),
        (j0, j1): (usize, usize),
        (c0, c1): (usize, usize),
    ) {
        let tab = self.tab;
        let mut k0 = 0;
        while k0 < ci {
            let kc = KC.min(ci - k0);
            let kp = kc.div_ceil(2);
            let (pa, pw) = (kp * MR, kp * NR);
            let mut ic = c0;
            while ic < c1 {
                let ic_end = (ic + MC).min(c1);
                let mut j = j0;
                while j < j1 {
                    let b0 = &vb[k0 / 2 * nbp + j * kp..][..pw];
                    let two = j + NR < j1;
                    for i in (ic..ic_end).step_by(MR) {
                        let ap = &u[bf16::a_panel(co_pad, k0, kc, i)..][..pa];
                        let c = &mut m[(i - c0) * ldm + j..];
                        if two {
                            let b1 = &vb[k0 / 2 * nbp + (j + NR) * kp..][..pw];
                            (tab.tile2)(kp, ap, b0, b1, c, ldm, k0 > 0);
                        } else {
                            (tab.tile1)(kp, ap, b0, c, ldm, k0 > 0);
                        }
                    }
                    j += if two { 2 * NR } else { NR };
                }
                ic = ic_end;
            }
            k0 += kc;
        }
    }
}

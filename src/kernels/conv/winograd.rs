//! Winograd F(4x4, 3x3) convolution for dense 3x3, stride-1, dilation-1 convs (any
//! padding), f32, NCHW.
//!
//! The output plane is cut into 4x4 tiles, each computed from a 6x6 input patch:
//! `Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A`. Summed over input channels, the element-wise
//! product becomes 36 independent GEMMs, one per transform point `p`:
//! `M_p[Cout, tiles] = U_p[Cout, Cin] · V_p[Cin, tiles]`.
//!
//! * `U` (the transformed weights, 36 packed A matrices) is computed once at plan time
//!   ([`WinogradPlan::new`]) and owned by the plan as one plain `Vec<f32>`.
//! * `V` (the transformed input) is written straight into packed-B panels, [`NR`] tiles
//!   per panel, so each GEMM runs on the kernel table's packed micro-kernels.
//! * Tiles are processed in blocks of `nt` (a multiple of `NR`) sized so that a block's
//!   `V` and `M` stay in L2; after each block the output transform writes the finished
//!   tiles and the fused epilogue runs on every output row that is now complete.
//!
//! A call computes output channels `[c_lo, c_hi)` for tile rows `[ty0, ty1)`. Channel
//! tiles of one image can share one transformed input ([`WinogradPlan::transform_input`],
//! laid out block after block from tile 0), so the input is transformed once per node.
//!
//! Accuracy: the transforms use the points 0, ±1, ±2, ∞; the error is a small multiple of
//! the direct conv's, relative to `Σ|x||w|` (see the tests).

use super::ConvShape;
use crate::kernels::gemm::{self, gemm_packed, BSource, Epilogue, KC, MR, NR};
use crate::kernels::isa::Isa;
use crate::kernels::packed::WeightBuf;

/// Output tile side.
const TILE: usize = 4;
/// Input patch side (`TILE + 3 - 1`).
const PATCH: usize = 6;
/// Transform points (GEMMs per block).
const POINTS: usize = PATCH * PATCH;
/// Floats of one block's transformed input and GEMM output together (about 384 KiB,
/// inside a per-core L2).
const BLOCK_FLOATS: usize = 96 * 1024;
/// Most tiles per block.
const MAX_BLOCK_TILES: usize = 8 * NR;

/// `NR` lanes: one value per tile of a panel.
type Lanes = [f32; NR];

/// A planned Winograd conv: geometry, transformed weights and blocking.
#[derive(Debug, Clone)]
pub struct WinogradPlan {
    s: ConvShape,
    /// 36 packed A matrices (`Cout x Cin`), point after point: the conv's packed weights
    /// (owned, or borrowed from a compiled file's mapping).
    u: WeightBuf,
    /// Tiles across and down the output plane.
    tw: usize,
    th: usize,
    /// Tiles per block (a multiple of `NR`).
    nt: usize,
}

impl WinogradPlan {
    /// True when `s` is a conv this path computes: dense, 3x3, stride 1, dilation 1.
    pub fn applies(s: &ConvShape) -> bool {
        s.group == 1
            && (s.kh, s.kw) == (3, 3)
            && (s.sh, s.sw, s.dh, s.dw) == (1, 1, 1, 1)
            && s.oh > 0
            && s.ow > 0
            && s.c_in > 0
            && s.c_out > 0
    }

    /// True when this path should beat the im2col GEMM on `s`: enough channels for the
    /// GEMMs to dominate the transforms, and enough tiles that the GEMM panels (and the
    /// ragged edge tiles) are not mostly padding.
    pub fn wins(s: &ConvShape) -> bool {
        let tiles = s.oh.div_ceil(TILE) * s.ow.div_ceil(TILE);
        // Useful fraction of the computed outputs (edge tiles overhang the plane).
        let covered = tiles * TILE * TILE;
        Self::applies(s)
            && s.c_in >= 16
            && s.c_out >= 16
            && s.oh >= 8
            && s.ow >= 8
            && tiles >= NR
            && 4 * s.oh * s.ow >= 3 * covered
    }

    /// Plans `s` (which must satisfy [`Self::applies`]) with weights `w`
    /// (`[Cout, Cin, 3, 3]`): transforms and packs them.
    pub fn new(s: &ConvShape, w: &[f32]) -> WinogradPlan {
        assert!(Self::applies(s), "not a 3x3 stride-1 dense conv");
        let (ci, co) = (s.c_in, s.c_out);
        assert!(w.len() >= co * ci * 9, "short weights");
        // U[p][co][ci] in f64, then each point packed as one GEMM A operand.
        let mut up = vec![0.0f32; POINTS * co * ci];
        for o in 0..co {
            for i in 0..ci {
                let g = &w[(o * ci + i) * 9..(o * ci + i) * 9 + 9];
                let t = transform_weight(g);
                for (p, v) in t.iter().enumerate() {
                    up[(p * co + o) * ci + i] = *v as f32;
                }
            }
        }
        let alen = gemm::packed_a_len(co, ci);
        let mut u = vec![0.0f32; Self::weights_len(s)];
        for p in 0..POINTS {
            gemm::pack_a(
                &up[p * co * ci..(p + 1) * co * ci],
                ci,
                1,
                co,
                ci,
                1.0,
                &mut u[p * alen..(p + 1) * alen],
            );
        }
        Self::with_weights(s, WeightBuf::owned(u)).expect("weights of the planned length")
    }

    /// Floats of the transformed weights of `s` ([`Self::weights`]).
    pub fn weights_len(s: &ConvShape) -> usize {
        POINTS * gemm::packed_a_len(s.c_out, s.c_in)
    }

    /// Plans `s` (which must satisfy [`Self::applies`]) with weights already transformed
    /// and packed (what [`Self::weights`] returned for the same shape and kernel table,
    /// e.g. stored in a compiled file); `None` when `u` has another length.
    pub fn with_weights(s: &ConvShape, u: WeightBuf) -> Option<WinogradPlan> {
        if !Self::applies(s) || u.len() != Self::weights_len(s) {
            return None;
        }
        let (ci, co) = (s.c_in, s.c_out);
        let tw = s.ow.div_ceil(TILE);
        let th = s.oh.div_ceil(TILE);
        let fit = BLOCK_FLOATS / (POINTS * (ci + co)) / NR * NR;
        let nt = fit
            .clamp(NR, MAX_BLOCK_TILES)
            .min((tw * th).div_ceil(NR) * NR);
        Some(WinogradPlan {
            s: s.clone(),
            u,
            tw,
            th,
            nt,
        })
    }

    /// The conv geometry.
    pub fn shape(&self) -> &ConvShape {
        &self.s
    }

    /// The transformed, packed weights (36 packed A matrices).
    pub fn weights(&self) -> &[f32] {
        &self.u
    }

    /// Rows of 4x4 tiles down the output plane (the unit of position tiles).
    pub fn tile_rows(&self) -> usize {
        self.th
    }

    /// Floats of one block's transformed input, for `nb` tiles.
    fn v_len(&self, nb: usize) -> usize {
        POINTS * gemm::packed_b_len(self.s.c_in, nb)
    }

    /// Floats of one block's GEMM output.
    fn m_len(&self) -> usize {
        POINTS * self.s.c_out * self.nt
    }

    /// Floats of the whole transformed input of one image ([`Self::transform_input`]).
    pub fn input_len(&self) -> usize {
        let t = self.tw * self.th;
        (t / self.nt) * self.v_len(self.nt) + self.v_len(t % self.nt)
    }

    /// Scratch floats a [`Self::run`] call needs (without a shared transformed input).
    pub fn scratch_len(&self) -> usize {
        self.v_len(self.nt) + self.m_len()
    }

    /// Transforms the whole input plane set of one image `x` (`[Cin, H, W]`) into `v`
    /// ([`Self::input_len`] floats), block after block from tile 0, for [`Self::run`]'s
    /// `shared`.
    pub fn transform_input(&self, x: &[f32], v: &mut [f32]) {
        let t = self.tw * self.th;
        let mut off = 0;
        let mut tb = 0;
        while tb < t {
            let nb = self.nt.min(t - tb);
            let len = self.v_len(nb);
            self.transform_block(x, tb, nb, &mut v[off..off + len]);
            off += len;
            tb += nb;
        }
    }

    /// Output channels `[c_lo, c_hi)` (`c_lo` a multiple of [`MR`]) of tile rows
    /// `[ty0, ty1)` of every image. `x`: `[N, Cin, H, W]`, `y`: `[N, Cout, OH, OW]`;
    /// `epi.residuals` are laid out like `y`. `shared`, when given, is image 0's
    /// transformed input ([`Self::transform_input`]; one image, all tile rows). `scratch`
    /// holds [`Self::scratch_len`] floats.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        (c_lo, c_hi): (usize, usize),
        (ty0, ty1): (usize, usize),
        shared: Option<&[f32]>,
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let rows = (ty0, ty1);
        self.run_into(isa, x, y, 0, (c_lo, c_hi), rows, shared, epi, scratch);
    }

    /// Scratch floats a [`Self::run_chunk`] call needs.
    pub fn chunk_scratch_len(&self) -> usize {
        self.m_len()
    }

    /// Output channels `[c_lo, c_hi)` (`c_lo` a multiple of [`MR`]) of a one-image conv
    /// from its transformed input `shared` ([`Self::transform_input`]) into `y`, which
    /// holds those channels only (`[c_hi - c_lo, OH, OW]`), like `epi` (its residuals and
    /// channel offset already taken for the chunk): one intra-op thread's part.
    /// `scratch` holds [`Self::chunk_scratch_len`] floats.
    pub fn run_chunk(
        &self,
        isa: Isa,
        shared: &[f32],
        y: &mut [f32],
        (c_lo, c_hi): (usize, usize),
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let rows = (0, self.th);
        self.run_into(
            isa,
            &[],
            y,
            c_lo,
            (c_lo, c_hi),
            rows,
            Some(shared),
            epi,
            scratch,
        );
    }

    /// [`Self::run`] into `y` holding channels `y_c0..` of each image (`epi` likewise).
    #[allow(clippy::too_many_arguments)]
    fn run_into(
        &self,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        y_c0: usize,
        (c_lo, c_hi): (usize, usize),
        (ty0, ty1): (usize, usize),
        shared: Option<&[f32]>,
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let s = &self.s;
        let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
        let (ci, co) = (s.c_in, s.c_out);
        assert!(c_lo % MR == 0 && c_lo <= c_hi && c_hi <= co && ty1 <= self.th);
        assert!(
            y_c0 <= c_lo && y.len() >= s.n * (c_hi - y_c0) * ohw,
            "output too short"
        );
        assert!(
            shared.is_none() || (s.n == 1 && (ty0, ty1) == (0, self.th)),
            "a shared transformed input covers one whole image"
        );
        if c_lo == c_hi || ty0 >= ty1 {
            return;
        }
        let (vbuf, mbuf) = scratch.split_at_mut(if shared.is_some() {
            0
        } else {
            self.v_len(self.nt)
        });
        let mbuf = &mut mbuf[..self.m_len()];
        let alen = gemm::packed_a_len(co, ci);
        let per = y.len() / s.n;
        for b in 0..s.n {
            let yb = &mut y[b * per..(b + 1) * per];
            let mut res_b: [&[f32]; 4] = [&[]; 4];
            for (d, r) in res_b.iter_mut().zip(epi.residuals) {
                let per = r.len() / s.n;
                *d = &r[b * per..(b + 1) * per];
            }
            let epi_b = Epilogue {
                residuals: &res_b[..epi.residuals.len()],
                ..*epi
            };
            // Tiles to write; the GEMMs run on whole NR panels of blocks aligned from tile
            // 0, so that every tile is computed by the same kernels as in a whole run (a
            // range of tiles then equals the whole bit for bit).
            let (t0, t1) = (ty0 * self.tw, ty1 * self.tw);
            let a1 = (t1.div_ceil(NR) * NR).min(self.tw * self.th);
            let mut tb = t0 / NR * NR;
            let mut voff = 0;
            // Output rows whose tiles are all written (and whose epilogue ran).
            let mut rows_done = ty0 * TILE;
            while tb < a1 {
                let nb = ((tb / self.nt + 1) * self.nt).min(a1) - tb;
                let vlen = self.v_len(nb);
                let v: &[f32] = match shared {
                    Some(sh) => &sh[voff..voff + vlen],
                    None => {
                        let xb = &x[b * ci * hw..(b + 1) * ci * hw];
                        self.transform_block(xb, tb, nb, &mut vbuf[..vlen]);
                        &vbuf[..vlen]
                    }
                };
                voff += vlen;
                let plen = vlen / POINTS;
                for p in 0..POINTS {
                    gemm_packed(
                        isa,
                        co,
                        nb,
                        ci,
                        &self.u[p * alen..(p + 1) * alen],
                        BSource::Packed(&v[p * plen..(p + 1) * plen]),
                        &mut [],
                        &mut mbuf[p * co * self.nt..(p + 1) * co * self.nt],
                        self.nt,
                        (c_lo, c_hi),
                        (0, nb),
                        &Epilogue::NONE,
                    );
                }
                let keep = (t0.max(tb), t1.min(tb + nb));
                self.output_block(mbuf, tb, nb, keep, (c_lo, c_hi), &mut yb[..], y_c0);
                tb += nb;
                let rows = ((tb.min(t1) / self.tw) * TILE).min(s.oh);
                if rows > rows_done && !epi.is_empty() {
                    let (j0, j1) = (rows_done * s.ow, rows * s.ow);
                    epi_b.apply(isa, yb, ohw, c_lo - y_c0, c_hi - c_lo, j0, j1 - j0);
                }
                rows_done = rows_done.max(rows);
            }
        }
    }

    /// Transforms tiles `[tb, tb + nb)` of one image `x` into packed-B panels: point `p`'s
    /// `Cin x nb` operand at `v[p * plen..]`.
    fn transform_block(&self, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
        let s = &self.s;
        let (ci, hw) = (s.c_in, s.h * s.w);
        let nbp = nb.div_ceil(NR) * NR;
        let plen = ci * nbp;
        let mut d = [[0.0f32; NR]; POINTS];
        let mut out = [[0.0f32; NR]; POINTS];
        for c in 0..ci {
            let plane = &x[c * hw..(c + 1) * hw];
            let k0 = c / KC * KC;
            let kc = KC.min(ci - k0);
            for g in 0..nbp / NR {
                let lanes = NR.min(nb - g * NR);
                for (l, t) in (tb + g * NR..tb + g * NR + lanes).enumerate() {
                    self.gather(plane, t, &mut d, l);
                }
                for row in d.iter_mut() {
                    row[lanes..].fill(0.0);
                }
                input_transform(&d, &mut out);
                let at = k0 * nbp + g * NR * kc + (c - k0) * NR;
                for (p, o) in out.iter().enumerate() {
                    v[p * plen + at..p * plen + at + NR].copy_from_slice(o);
                }
            }
        }
    }

    /// Reads the 6x6 input patch of tile `t` from `plane` into lane `l` of `d` (zeros
    /// outside the plane).
    #[inline]
    fn gather(&self, plane: &[f32], t: usize, d: &mut [Lanes; POINTS], l: usize) {
        let s = &self.s;
        let (ty, tx) = (t / self.tw, t % self.tw);
        let iy0 = (ty * TILE) as isize - s.ph as isize;
        let ix0 = (tx * TILE) as isize - s.pw as isize;
        let inside =
            iy0 >= 0 && ix0 >= 0 && iy0 as usize + PATCH <= s.h && ix0 as usize + PATCH <= s.w;
        if inside {
            let (iy0, ix0) = (iy0 as usize, ix0 as usize);
            for r in 0..PATCH {
                let src = &plane[(iy0 + r) * s.w + ix0..][..PATCH];
                for (c, v) in src.iter().enumerate() {
                    d[r * PATCH + c][l] = *v;
                }
            }
            return;
        }
        for r in 0..PATCH {
            let iy = iy0 + r as isize;
            for c in 0..PATCH {
                let ix = ix0 + c as isize;
                d[r * PATCH + c][l] =
                    if iy >= 0 && ix >= 0 && (iy as usize) < s.h && (ix as usize) < s.w {
                        plane[iy as usize * s.w + ix as usize]
                    } else {
                        0.0
                    };
            }
        }
    }

    /// Output transform of the tiles `[k0, k1)` of block `[tb, tb + nb)`, channels
    /// `[c_lo, c_hi)`, from the GEMM outputs in `mbuf` into the image's output planes `y`
    /// (channels `y_c0..`).
    #[allow(clippy::too_many_arguments)]
    fn output_block(
        &self,
        mbuf: &[f32],
        tb: usize,
        nb: usize,
        (k0, k1): (usize, usize),
        (c_lo, c_hi): (usize, usize),
        y: &mut [f32],
        y_c0: usize,
    ) {
        let s = &self.s;
        let (co, ohw, nt) = (s.c_out, s.oh * s.ow, self.nt);
        let mut m = [[0.0f32; NR]; POINTS];
        let mut o = [[0.0f32; NR]; TILE * TILE];
        for c in c_lo..c_hi {
            let plane = &mut y[(c - y_c0) * ohw..(c - y_c0 + 1) * ohw];
            for g in 0..nb.div_ceil(NR) {
                for (p, mp) in m.iter_mut().enumerate() {
                    let at = (p * co + c) * nt + g * NR;
                    mp.copy_from_slice(&mbuf[at..at + NR]);
                }
                output_transform(&m, &mut o);
                let lanes = NR.min(nb - g * NR);
                for (l, t) in (tb + g * NR..tb + g * NR + lanes).enumerate() {
                    if t < k0 || t >= k1 {
                        continue;
                    }
                    let (oy0, ox0) = ((t / self.tw) * TILE, (t % self.tw) * TILE);
                    let rows = TILE.min(s.oh - oy0);
                    let cols = TILE.min(s.ow - ox0);
                    for r in 0..rows {
                        let dst = &mut plane[(oy0 + r) * s.ow + ox0..][..cols];
                        for (cc, d) in dst.iter_mut().enumerate() {
                            *d = o[r * TILE + cc][l];
                        }
                    }
                }
            }
        }
    }
}

/// `G g Gᵀ` of one 3x3 kernel `g` (row-major), in f64: the 6x6 transformed weights.
fn transform_weight(g: &[f32]) -> [f64; POINTS] {
    let col = |a: f64, b: f64, c: f64| -> [f64; PATCH] {
        [
            a / 4.0,
            -(a + b + c) / 6.0,
            -(a - b + c) / 6.0,
            a / 24.0 + b / 12.0 + c / 6.0,
            a / 24.0 - b / 12.0 + c / 6.0,
            c,
        ]
    };
    let g: [f64; 9] = std::array::from_fn(|i| f64::from(g[i]));
    // t = G g (6x3), one column of g at a time.
    let mut t = [[0.0f64; 3]; PATCH];
    for j in 0..3 {
        let c = col(g[j], g[3 + j], g[6 + j]);
        for (i, v) in c.iter().enumerate() {
            t[i][j] = *v;
        }
    }
    // u = t Gᵀ (6x6), one row of t at a time.
    let mut u = [0.0f64; POINTS];
    for (i, row) in t.iter().enumerate() {
        let r = col(row[0], row[1], row[2]);
        u[i * PATCH..(i + 1) * PATCH].copy_from_slice(&r);
    }
    u
}

/// `Bᵀ x` for six lane vectors (the 1-D input transform), into `o`.
#[inline(always)]
fn input_1d(x: [&Lanes; PATCH], o: &mut [Lanes; PATCH]) {
    for l in 0..NR {
        let (d0, d1, d2, d3, d4, d5) = (x[0][l], x[1][l], x[2][l], x[3][l], x[4][l], x[5][l]);
        o[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
        o[1][l] = d3 + d4 - 4.0 * (d1 + d2);
        o[2][l] = d4 - d3 + 4.0 * (d1 - d2);
        o[3][l] = d4 - d2 + 2.0 * (d3 - d1);
        o[4][l] = d4 - d2 + 2.0 * (d1 - d3);
        o[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
}

/// `Bᵀ d B` of `NR` patches at once (`d[r * 6 + c][lane]`, `v` likewise).
fn input_transform(d: &[Lanes; POINTS], v: &mut [Lanes; POINTS]) {
    // t = Bᵀ d, stored transposed (`t[c * 6 + r]`) so both passes read whole rows.
    let mut t = [[0.0f32; NR]; POINTS];
    for (c, tc) in t.chunks_exact_mut(PATCH).enumerate() {
        let tc: &mut [Lanes; PATCH] = tc.try_into().expect("six points");
        input_1d(std::array::from_fn(|r| &d[r * PATCH + c]), tc);
    }
    // v = t B: row r of t is column r of the stored transpose.
    for (r, vr) in v.chunks_exact_mut(PATCH).enumerate() {
        let vr: &mut [Lanes; PATCH] = vr.try_into().expect("six points");
        input_1d(std::array::from_fn(|c| &t[c * PATCH + r]), vr);
    }
}

/// `Aᵀ x` for six lane vectors (the 1-D output transform), into `o`.
#[inline(always)]
fn output_1d(x: [&Lanes; PATCH], o: &mut [Lanes; TILE]) {
    for l in 0..NR {
        let (m0, m1, m2, m3, m4, m5) = (x[0][l], x[1][l], x[2][l], x[3][l], x[4][l], x[5][l]);
        let (s12, d12, s34, d34) = (m1 + m2, m1 - m2, m3 + m4, m3 - m4);
        o[0][l] = m0 + s12 + s34;
        o[1][l] = d12 + 2.0 * d34;
        o[2][l] = s12 + 4.0 * s34;
        o[3][l] = d12 + 8.0 * d34 + m5;
    }
}

/// `Aᵀ m A` of `NR` tiles at once: 36 points in, 4x4 outputs (`o[r * 4 + c][lane]`).
fn output_transform(m: &[Lanes; POINTS], o: &mut [Lanes; TILE * TILE]) {
    // t = Aᵀ m (4x6), stored transposed (`t[c * 4 + r]`).
    let mut t = [[0.0f32; NR]; TILE * PATCH];
    for (c, tc) in t.chunks_exact_mut(TILE).enumerate() {
        let tc: &mut [Lanes; TILE] = tc.try_into().expect("four outputs");
        output_1d(std::array::from_fn(|r| &m[r * PATCH + c]), tc);
    }
    // o = t A.
    for (r, orow) in o.chunks_exact_mut(TILE).enumerate() {
        let orow: &mut [Lanes; TILE] = orow.try_into().expect("four outputs");
        output_1d(std::array::from_fn(|c| &t[c * TILE + r]), orow);
    }
}

#[cfg(test)]
mod tests;

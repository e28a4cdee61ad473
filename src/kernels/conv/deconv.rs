//! ConvTranspose: `cols = W_g^T · X_g` by the packed GEMM, then a col2im scatter-add; or,
//! where the kernel is a whole number of strides and the taps overlap (a 4x4 kernel of
//! stride 2), as direct convs per output phase: output pixels `(s*i + a, s*j + b)`
//! are a conv of the input with the `(KH/s) x (KW/s)` taps that reach them (flipped),
//! all phases computed by one merged conv ([`Phases`]) and interleaved into the output.
//! No col2im: each output
//! gets its sum in one chain, over a depth `s*s` times the GEMM's (U-Net's 32->16 4x4/2
//! upsampling at 112x112: K 128 rather than 32).

use super::direct::{self, RowSink, Tiling};
use super::{valid_range, ConvShape};
use crate::kernels::body::epilogue::residual_slices;
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
    /// Per group, packed `W_g^T` (`[Cout_g*KH*KW, Cin_g]`); empty with `phases`.
    pub packed: Vec<Vec<f32>>,
    /// The output phases as one direct conv (None: the GEMM and col2im).
    phases: Option<Phases>,
}

/// Every output phase of a ConvTranspose as one direct conv over the input: output pixels
/// `(sh*i + a, sw*j + b)` of phase `q = a * sw + b` are a conv of the input with the
/// `(KH/sh) x (KW/sw)` taps that reach them (flipped). The phases' windows differ only by
/// where they start, so one conv with the largest leading pads and `Cout * phases`
/// channels computes them all, packing the input once: its channel `co * np + q` is
/// phase `q`'s channel `co`, phase `q`'s pixel `(i, j)` at its position `(i + dy, j + dx)`.
#[derive(Debug, Clone)]
struct Phases {
    /// The phases, row phases outer.
    at: Vec<PhaseAt>,
    /// The merged conv (one image).
    s: ConvShape,
    tiling: Tiling,
    /// Its weights packed for the direct conv (`[Cout * np, Cin, KH/sh, KW/sw]`).
    w: Vec<f32>,
}

impl Phases {
    /// Floats of the merged conv's output plane a call stages its outputs in (none with
    /// the row tiles).
    fn plane_len(&self) -> usize {
        if self.tiling == Tiling::Rows {
            0
        } else {
            self.s.c_out * self.s.oh * self.s.ow
        }
    }
}

/// One output phase of [`Phases`].
#[derive(Debug, Clone, Copy)]
struct PhaseAt {
    /// Row and column phase.
    a: usize,
    b: usize,
    /// Phase pixels across (`ow` of its own conv).
    ow: usize,
    /// Where its pixel (0, 0) sits in the merged conv's output.
    dy: usize,
    dx: usize,
}

/// The phase convs' outputs (merged channel `co * np + q`, merged position `(i, j)`,
/// rows `mw` wide) put straight into the output image: phase `q`'s pixel
/// `(i - dy, j - dx)`, i.e. output pixel `(sh * (i - dy) + a, sw * (j - dx) + b)`; only
/// output rows `rows.0..rows.1` are written, merged positions outside the phase dropped.
struct PhaseOut<'a> {
    y: &'a mut [f32],
    s: &'a ConvShape,
    at: &'a [PhaseAt],
    mw: usize,
    rows: (usize, usize),
}

impl PhaseOut<'_> {
    /// Where merged channel `r`'s run `q..q + len` lands: the output row's start in `y`,
    /// the run's first position inside the phase (`skip`), its phase column and the
    /// positions that land (None: none does).
    #[inline]
    fn land(&self, r: usize, (q, len): (usize, usize)) -> Option<(usize, usize, usize, usize)> {
        let s = self.s;
        let np = self.at.len();
        let (co, p) = (r / np, &self.at[r % np]);
        let (i, j) = (q / self.mw, q % self.mw);
        if i < p.dy || j + len <= p.dx {
            return None;
        }
        let oy = (i - p.dy) * s.sh + p.a;
        let skip = p.dx.saturating_sub(j);
        let j0 = j + skip - p.dx;
        if !(self.rows.0..self.rows.1).contains(&oy) || j0 >= p.ow {
            return None;
        }
        Some((
            (co * s.oh + oy) * s.ow,
            skip,
            j0,
            (len - skip).min(p.ow - j0),
        ))
    }

    /// Merged channel `r`'s run alone: every `sw`-th output of its row.
    #[inline]
    fn put_one(&mut self, r: usize, run: (usize, usize), src: &[f32]) {
        if let Some((row, skip, j0, n)) = self.land(r, run) {
            let (sw, b) = (self.s.sw, self.at[r % self.at.len()].b);
            let dst = self.y[row + j0 * sw + b..].iter_mut().step_by(sw);
            for (o, v) in dst.zip(&src[skip..skip + n]) {
                *o = *v;
            }
        }
    }
}

/// `dst[2k] = a[k]`, `dst[2k + 1] = b[k]` for as many pairs as all three hold; returns
/// that count.
#[inline]
fn zip_pairs(a: &[f32], b: &[f32], dst: &mut [f32]) -> usize {
    let mut n = 0;
    for (o, (x, y)) in dst.chunks_exact_mut(2).zip(a.iter().zip(b)) {
        o[0] = *x;
        o[1] = *y;
        n += 1;
    }
    n
}

impl RowSink for PhaseOut<'_> {
    #[inline]
    fn put(&mut self, (r_lo, r_hi): (usize, usize), run: (usize, usize), src: &[f32], ld: usize) {
        let np = self.at.len();
        let mut r = r_lo;
        while r < r_hi {
            let row = &src[(r - r_lo) * ld..];
            // Column phases 0 and 1 of a stride-2 row phase together: their outputs
            // interleave in pairs (phase column j of both, from merged columns j + dx).
            let pair =
                self.s.sw == 2 && (r % np).is_multiple_of(2) && r + 1 < r_hi && self.s.ow > 1;
            if !pair {
                self.put_one(r, run, row);
                r += 1;
                continue;
            }
            let next = &src[(r + 1 - r_lo) * ld..];
            match (self.land(r, run), self.land(r + 1, run)) {
                (Some((o0, s0, j0, n0)), Some((o1, s1, j1, n1))) if o0 == o1 => {
                    // Phase columns both runs hold, paired; the rest one at a time.
                    let (lo, hi) = (j0.max(j1), (j0 + n0).min(j1 + n1));
                    if lo < hi {
                        let v0 = &row[s0 + lo - j0..][..hi - lo];
                        let v1 = &next[s1 + lo - j1..][..hi - lo];
                        zip_pairs(v0, v1, &mut self.y[o0 + 2 * lo..][..2 * (hi - lo)]);
                    }
                    // The ends only one run holds (a column or so), one at a time.
                    for (k, (o, s, j, n)) in [(0, (o0, s0, j0, n0)), (1, (o1, s1, j1, n1))] {
                        let src = if k == 0 { row } else { next };
                        let (a, b) = (lo.clamp(j, j + n), hi.clamp(j, j + n));
                        for c in (j..a).chain(b.max(a)..j + n) {
                            self.y[o + 2 * c + k] = src[s + c - j];
                        }
                    }
                }
                _ => {
                    self.put_one(r, run, row);
                    self.put_one(r + 1, run, next);
                }
            }
            r += 2;
        }
    }

    fn done(&mut self, _: (usize, usize), _: (usize, usize)) {}
}

/// Fewest products per output (input channels x phase taps) for which the phase convs
/// replace the GEMM (the direct conv's own floor).
const PHASE_MIN_DEPTH: usize = 32;

/// Output rows of a phase band whose phase planes (all channels of a call) stay near
/// L2 while they are interleaved: at most this many floats.
const PHASE_BAND_FLOATS: usize = 64 * 1024;

/// The phase convs of `s` with weights `w` (`[Cin, Cout, KH, KW]`) as one conv, when
/// they apply: one group, no dilation, kernels a whole number (at least 2) of strides of
/// 2 or more, leading pads under a kernel less one stride, a depth of at least
/// [`PHASE_MIN_DEPTH`] and a direct conv the table runs. `tiling`: the merged conv's
/// (None: the direct conv's choice).
fn phase_convs(s: &ConvShape, w: &[f32], tiling: Option<Tiling>) -> Option<Phases> {
    let whole = |k: usize, st: usize, p: usize| {
        st >= 2 && k.is_multiple_of(st) && k / st >= 2 && p + st <= k
    };
    let applies = s.group == 1
        && s.dh == 1
        && s.dw == 1
        && whole(s.kh, s.sh, s.ph)
        && whole(s.kw, s.sw, s.pw)
        && s.c_in * (s.kh / s.sh) * (s.kw / s.sw) >= PHASE_MIN_DEPTH
        && crate::kernels::isa::table().conv_tiles.is_some();
    if !applies {
        return None;
    }
    let (th, tw) = (s.kh / s.sh, s.kw / s.sw);
    // Per phase: output row s*i + a gets taps ky = ky0 + t*s from input row i + q0 - t;
    // as a conv (tap u = T-1-t): input row i - (T-1-q0) + u, i.e. leading pads
    // T-1-q0 (at most T-1).
    let mut at = Vec::new();
    let mut taps = Vec::new();
    for a in 0..s.sh.min(s.oh) {
        for b in 0..s.sw.min(s.ow) {
            let (qy, qx) = ((a + s.ph) / s.sh, (b + s.pw) / s.sw);
            let (ph, pw) = (th - 1 - qy.min(th - 1), tw - 1 - qx.min(tw - 1));
            at.push(PhaseAt {
                a,
                b,
                ow: (s.ow - b).div_ceil(s.sw),
                dy: ph,
                dx: pw,
            });
            taps.push(((a + s.ph) % s.sh, (b + s.pw) % s.sw));
        }
    }
    // The merged conv's leading pads are the largest; a phase with smaller ones starts
    // further in.
    let (mph, mpw) = (
        at.iter().map(|p| p.dy).max().unwrap_or(0),
        at.iter().map(|p| p.dx).max().unwrap_or(0),
    );
    for p in &mut at {
        (p.dy, p.dx) = (mph - p.dy, mpw - p.dx);
    }
    let np = at.len();
    let reach = |n: usize, st: usize, d: usize, q: usize| (n - q).div_ceil(st) + d;
    let ms = ConvShape {
        n: 1,
        c_in: s.c_in,
        h: s.h,
        w: s.w,
        c_out: s.c_out * np,
        oh: at
            .iter()
            .map(|p| reach(s.oh, s.sh, p.dy, p.a))
            .max()
            .unwrap_or(0),
        ow: at
            .iter()
            .map(|p| reach(s.ow, s.sw, p.dx, p.b))
            .max()
            .unwrap_or(0),
        kh: th,
        kw: tw,
        sh: 1,
        sw: 1,
        dh: 1,
        dw: 1,
        ph: mph,
        pw: mpw,
        group: 1,
    };
    if !direct::fits(&ms) {
        return None;
    }
    let mut cw = vec![0.0; ms.c_out * s.c_in * th * tw];
    for co in 0..s.c_out {
        for (q, &(ky0, kx0)) in taps.iter().enumerate() {
            for ci in 0..s.c_in {
                for u in 0..th {
                    for v in 0..tw {
                        let ky = ky0 + (th - 1 - u) * s.sh;
                        let kx = kx0 + (tw - 1 - v) * s.sw;
                        cw[(((co * np + q) * s.c_in + ci) * th + u) * tw + v] =
                            w[((ci * s.c_out + co) * s.kh + ky) * s.kw + kx];
                    }
                }
            }
        }
    }
    let tiling = tiling.unwrap_or_else(|| direct::tiling(&ms, 1));
    let w = direct::pack_weights(&ms, &cw, 1, |lo, _| lo, tiling);
    Some(Phases {
        at,
        s: ms,
        tiling,
        w,
    })
}

impl DeconvPlan {
    /// Packs `w` (`[Cin, Cout_g, KH, KW]`).
    pub fn new(s: ConvShape, w: &[f32]) -> DeconvPlan {
        if let Some(phases) = phase_convs(&s, w, None) {
            return DeconvPlan {
                s,
                packed: Vec::new(),
                phases: Some(phases),
            };
        }
        let (cin_g, cout_g) = (s.cin_g(), s.cout_g());
        let m = cout_g * s.kh * s.kw;
        let packed = (0..s.group)
            .map(|g| {
                let wg = &w[g * cin_g * m..(g + 1) * cin_g * m];
                let mut pa = vec![0.0; gemm::packed_a_len(m, cin_g)];
                gemm::pack_a(wg, 1, m, m, (cin_g, weights_depth(&s)), 1.0, &mut pa);
                pa
            })
            .collect();
        DeconvPlan {
            s,
            packed,
            phases: None,
        }
    }

    /// Input rows per block: their `cols` (`m` rows by the block's input positions) fit
    /// [`BLOCK_FLOATS`], so that the GEMM writes them and the scatter reads them back in
    /// cache.
    fn block_in_rows(&self) -> usize {
        let s = &self.s;
        let m_pad = (s.cout_g() * s.kh * s.kw).div_ceil(MR) * MR;
        (BLOCK_FLOATS / (m_pad * s.w).max(1)).clamp(1, s.h.max(1))
    }

    /// The input rows `[lo, hi)` that reach output rows `[oy0, oy1)`.
    fn input_rows(&self, oy0: usize, oy1: usize) -> (usize, usize) {
        let s = &self.s;
        let span = ((s.kh - 1) * s.dh) as isize;
        let lo = ceil_div(oy0 as isize + s.ph as isize - span, s.sh).max(0) as usize;
        let hi = (oy1 as isize - 1 + s.ph as isize).div_euclid(s.sh as isize) + 1;
        (lo.min(s.h), (hi.max(0) as usize).min(s.h))
    }

    /// True when every output pixel gets exactly one contribution (kernel = stride,
    /// no dilation, padding or output padding: the upsampling case), so the scatter
    /// stores instead of adding into a zeroed plane.
    fn covers_once(&self) -> bool {
        let s = &self.s;
        s.kh == s.sh
            && s.kw == s.sw
            && s.dh == 1
            && s.dw == 1
            && s.ph == 0
            && s.pw == 0
            && s.oh == s.h * s.sh
            && s.ow == s.w * s.sw
    }

    /// True when the plan runs one direct conv per output phase (not the GEMM and
    /// col2im).
    pub fn by_phases(&self) -> bool {
        self.phases.is_some()
    }

    /// Scratch floats a call needs.
    pub fn scratch_len(&self) -> usize {
        if let Some(p) = &self.phases {
            // The direct conv's planes, then its output plane (none for the row tiles,
            // which put their outputs straight into the output).
            return direct::scratch_len(&p.s, 1, p.tiling) + p.plane_len();
        }
        let s = &self.s;
        let n = self.block_in_rows() * s.w;
        let m = s.cout_g() * s.kh * s.kw;
        gemm::block_scratch_len(s.cin_g(), n) + m.div_ceil(MR) * MR * n
    }

    /// Computes output channels `[c_lo, c_hi)`, output rows `[oy_lo, oy_hi)` of `y`
    /// (`[N, Cout, OH, OW]`) from `x` (`[N, Cin, H, W]`), then runs the epilogue `epi`
    /// (bias, post-ops; residuals laid out like `y`) on them. The input rows that reach
    /// them go a block at a time, each computed once: the block's `cols` (the GEMM),
    /// their scatter-add into the output rows they reach (zeroed when first reached),
    /// and the epilogue of the rows no later block reaches, while they are in cache.
    /// Any cut of channels and rows gives the whole's result (within the rounding of
    /// the GEMM's row blocks and of the order of the scatter's adds).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        (c_lo, c_hi): (usize, usize),
        (oy_lo, oy_hi): (usize, usize),
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        if let Some(p) = &self.phases {
            self.run_phases(p, isa, x, y, (c_lo, c_hi), (oy_lo, oy_hi), epi, scratch);
            return;
        }
        let s = &self.s;
        let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
        let (cin_g, cout_g, khw) = (s.cin_g(), s.cout_g(), s.kh * s.kw);
        let m = cout_g * khw;
        let rows = self.block_in_rows();
        let epilogue = isa.table().epilogue;
        let once = self.covers_once();
        let (bscratch, cols) =
            scratch.split_at_mut(gemm::block_scratch_len(cin_g, self.block_in_rows() * s.w));
        for b in 0..s.n {
            let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
            let yb = &mut y[b * s.c_out * ohw..(b + 1) * s.c_out * ohw];
            let res_b = residual_slices(epi.residuals, b * s.c_out * ohw..(b + 1) * s.c_out * ohw);
            let epi_b = Epilogue {
                residuals: &res_b[..epi.residuals.len()],
                ..*epi
            };
            for g in c_lo / cout_g..c_hi.div_ceil(cout_g) {
                let lo = c_lo.max(g * cout_g) - g * cout_g;
                let hi = c_hi.min((g + 1) * cout_g) - g * cout_g;
                let xg = &xb[g * cin_g * hw..(g + 1) * cin_g * hw];
                let (r_lo, r_hi) = (lo * khw / MR * MR, hi * khw);
                // Input rows go a block at a time, each computed once: output rows are
                // zeroed when a block first reaches them, and get their epilogue once no
                // later input row reaches them.
                let (in_lo, in_hi) = self.input_rows(oy_lo, oy_hi);
                let (mut zeroed, mut done) = (oy_lo, oy_lo);
                let mut iy0 = in_lo;
                loop {
                    let iy1 = (iy0 + rows).min(in_hi);
                    let (reach, complete) = if iy1 < in_hi {
                        let reach = (iy1 - 1) * s.sh + (s.kh - 1) * s.dh + 1;
                        let complete = (iy1 * s.sh).saturating_sub(s.ph);
                        let complete = complete.clamp(oy_lo, oy_hi);
                        // Rows no input row reaches (kernel < stride) are zeroed too.
                        (reach.saturating_sub(s.ph).clamp(complete, oy_hi), complete)
                    } else {
                        (oy_hi, oy_hi)
                    };
                    if !once && zeroed < reach {
                        for co in lo..hi {
                            let c = g * cout_g + co;
                            yb[c * ohw + zeroed * s.ow..c * ohw + reach * s.ow].fill(0.0);
                        }
                        zeroed = reach;
                    }
                    if iy0 < iy1 {
                        let (j0, n) = (iy0 * s.w, (iy1 - iy0) * s.w);
                        let fill = |p: usize, j: usize, len: usize, _: &mut [f32]| {
                            Some(&xg[p * hw + j0 + j..p * hw + j0 + j + len])
                        };
                        gemm_packed(
                            isa,
                            m,
                            n,
                            (cin_g, weights_depth(&self.s)),
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
                            let src = &cols[co * khw * n..(co + 1) * khw * n];
                            if once {
                                self.interleave(src, out, (iy0, iy1), (done, oy_hi));
                            } else {
                                self.scatter(isa, src, out, (iy0, iy1), (done, oy_hi));
                            }
                        }
                    }
                    if !epi_b.is_empty() && done < complete {
                        let (j0, nj) = (done * s.ow, (complete - done) * s.ow);
                        epilogue(&epi_b, yb, ohw, g * cout_g + lo, hi - lo, j0, nj);
                    }
                    done = complete;
                    if iy1 >= in_hi {
                        break;
                    }
                    iy0 = iy1;
                }
            }
        }
    }

    /// [`Self::run`] by the phase convs: bands of merged rows, each computed for every
    /// phase (the row tiles put into the output rows, [`PhaseOut`]; the channel tiles
    /// into the phase plane, then interleaved), whose output rows then get the epilogue
    /// while in cache.
    #[allow(clippy::too_many_arguments)]
    fn run_phases(
        &self,
        ph: &Phases,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        (c_lo, c_hi): (usize, usize),
        (oy_lo, oy_hi): (usize, usize),
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let s = &self.s;
        let (chw, ohw) = (s.c_in * s.h * s.w, s.oh * s.ow);
        let (np, m) = (ph.at.len(), &ph.s);
        let cols = s.sw.min(s.ow);
        let mw = m.ow;
        let (conv_scratch, plane) = scratch.split_at_mut(scratch.len() - ph.plane_len());
        let epilogue = isa.table().epilogue;
        let nc = c_hi - c_lo;
        // The merged row output row `oy` reads (every column phase of its row phase).
        let row_of = |oy: usize| oy / s.sh + ph.at[oy % s.sh * cols].dy;
        let (r_lo, r_hi) = (oy_lo..oy_hi).fold((usize::MAX, 0), |(lo, hi), oy| {
            let r = row_of(oy);
            (lo.min(r), hi.max(r + 1))
        });
        let band = (PHASE_BAND_FLOATS / (nc * np * mw).max(1)).max(1);
        for bi in 0..s.n {
            let xb = &x[bi * chw..(bi + 1) * chw];
            let yb = &mut y[bi * s.c_out * ohw..(bi + 1) * s.c_out * ohw];
            let res_b =
                residual_slices(epi.residuals, bi * s.c_out * ohw..(bi + 1) * s.c_out * ohw);
            let epi_b = Epilogue {
                residuals: &res_b[..epi.residuals.len()],
                ..*epi
            };
            let mut r0 = r_lo;
            while r0 < r_hi {
                let r1 = (r0 + band).min(r_hi);
                let (chans, merged) = ((c_lo * np, c_hi * np), (r0 * mw, r1 * mw));
                let band_rows = || (oy_lo..oy_hi).filter(|&oy| (r0..r1).contains(&row_of(oy)));
                if ph.tiling == Tiling::Rows {
                    // The row tiles' outputs straight into the output rows.
                    let mut out = PhaseOut {
                        y: &mut *yb,
                        s,
                        at: &ph.at,
                        mw,
                        rows: (oy_lo, oy_hi),
                    };
                    direct::conv2d_f32_rows_into(
                        isa,
                        m,
                        &ph.w,
                        xb,
                        chans,
                        merged,
                        &mut out,
                        conv_scratch,
                    );
                } else {
                    let none = &Epilogue::NONE;
                    direct::conv2d_f32(
                        isa,
                        ph.tiling,
                        m,
                        &ph.w,
                        xb,
                        plane,
                        chans,
                        merged,
                        none,
                        conv_scratch,
                    );
                    for oy in band_rows() {
                        self.interleave_phases(ph, plane, &mut yb[oy * s.ow..], (c_lo, c_hi), oy);
                    }
                }
                if !epi_b.is_empty() {
                    for oy in band_rows() {
                        epilogue(&epi_b, yb, ohw, c_lo, nc, oy * s.ow, s.ow);
                    }
                }
                r0 = r1;
            }
        }
    }

    /// Output row `oy` of channels `c_lo..c_hi` (`y` from the row's start in channel
    /// 0) from the phase plane of [`Phases`]' merged conv: every column phase of its row
    /// phase interleaved.
    fn interleave_phases(
        &self,
        ph: &Phases,
        plane: &[f32],
        y: &mut [f32],
        (c_lo, c_hi): (usize, usize),
        oy: usize,
    ) {
        let s = &self.s;
        let (np, ohw, cols) = (ph.at.len(), s.oh * s.ow, s.sw.min(s.ow));
        let (mh, mw) = (ph.s.oh, ph.s.ow);
        let (i, a) = (oy / s.sh, oy % s.sh);
        // The column phases of row phase `a` (row phases outer).
        let row_phase = &ph.at[a * cols..(a + 1) * cols];
        for c in c_lo..c_hi {
            let orow = &mut y[c * ohw..][..s.ow];
            let src = |k: usize| {
                let (q, p) = (a * cols + k, &row_phase[k]);
                &plane[((c * np + q) * mh + i + p.dy) * mw + p.dx..][..p.ow]
            };
            if cols == 2 && s.sw == 2 {
                let (p0, p1) = (src(0), src(1));
                let pairs = zip_pairs(p0, p1, orow);
                // An odd width: the last column is phase 0's alone.
                if pairs < p0.len() {
                    orow[2 * pairs] = p0[pairs];
                }
            } else {
                for (k, p) in row_phase.iter().enumerate() {
                    let dst = orow[p.b..].iter_mut().step_by(s.sw);
                    for (o, v) in dst.zip(src(k)) {
                        *o = *v;
                    }
                }
            }
        }
    }

    /// Stores the `cols` rows of one output channel into output rows `oy0..oy1` when
    /// [`Self::covers_once`]: output row `iy * KH + ky` is the `KW` rows of tap row `ky`
    /// interleaved.
    fn interleave(
        &self,
        cols: &[f32],
        out: &mut [f32],
        (iy0, iy1): (usize, usize),
        (oy0, oy1): (usize, usize),
    ) {
        let s = &self.s;
        let (w, n) = (s.w, (iy1 - iy0) * s.w);
        for iy in iy0..iy1 {
            for ky in 0..s.kh {
                let oy = iy * s.kh + ky;
                if oy < oy0 || oy >= oy1 {
                    continue;
                }
                let orow = &mut out[oy * s.ow..(oy + 1) * s.ow];
                let tap = |kx: usize| &cols[(ky * s.kw + kx) * n + (iy - iy0) * w..][..w];
                if s.kw == 2 {
                    let (a, b) = (tap(0), tap(1));
                    for (o, (x0, x1)) in orow.chunks_exact_mut(2).zip(a.iter().zip(b)) {
                        o[0] = *x0;
                        o[1] = *x1;
                    }
                } else {
                    for kx in 0..s.kw {
                        for (o, v) in orow[kx..].iter_mut().step_by(s.kw).zip(tap(kx)) {
                            *o = *v;
                        }
                    }
                }
            }
        }
    }

    /// Adds the `cols` rows of one output channel (`KH*KW` rows of the positions of
    /// input rows `iy0..iy1`) into output rows `oy0..oy1` of its plane `out`.
    fn scatter(
        &self,
        isa: Isa,
        cols: &[f32],
        out: &mut [f32],
        (iy0, iy1): (usize, usize),
        (oy0, oy1): (usize, usize),
    ) {
        let s = &self.s;
        let n = (iy1 - iy0) * s.w;
        let add_pairs = isa.table().add_pairs;
        for ky in 0..s.kh {
            // Input rows whose output row `iy*sh + ky*dh - ph` is inside the plane, the
            // block's input rows and output rows `[oy0, oy1)`.
            let (y_lo, y_hi) = valid_range(s.h, s.sh, s.ph, ky * s.dh, s.oh);
            let off = s.ph as isize - (ky * s.dh) as isize;
            let r_lo = ceil_div(oy0 as isize + off, s.sh).max(0) as usize;
            let r_hi = ceil_div(oy1 as isize + off, s.sh).max(0) as usize;
            let (y_lo, y_hi) = (y_lo.max(iy0).max(r_lo), y_hi.min(iy1).min(r_hi));
            let tap = |kx: usize| &cols[(ky * s.kw + kx) * n..][..n];
            let range = |kx: usize| valid_range(s.w, s.sw, s.pw, kx * s.dw, s.ow);
            let mut kx = 0;
            // With stride 2 and no dilation, taps `kx` and `kx + 1` of an input position
            // land on adjacent output columns: over the input columns both reach, the
            // pair is one contiguous interleaved add; the few columns only one of them
            // reaches (the plane's edges) go tap by tap below.
            while s.sw == 2 && s.dw == 1 && kx + 2 <= s.kw {
                let ((a_lo, a_hi), (b_lo, b_hi)) = (range(kx), range(kx + 1));
                let (lo, hi) = (a_lo.max(b_lo), a_hi.min(b_hi));
                let (ta, tb) = (tap(kx), tap(kx + 1));
                for iy in y_lo..y_hi {
                    let oy = iy * s.sh + ky * s.dh - s.ph;
                    let orow = &mut out[oy * s.ow..(oy + 1) * s.ow];
                    let r = (iy - iy0) * s.w;
                    if lo < hi {
                        let ox0 = lo * 2 + kx - s.pw;
                        let o = &mut orow[ox0..ox0 + 2 * (hi - lo)];
                        add_pairs(o, &ta[r + lo..r + hi], &tb[r + lo..r + hi]);
                    }
                    for (j, t, (t_lo, t_hi)) in [(0, ta, (a_lo, a_hi)), (1, tb, (b_lo, b_hi))] {
                        // `[lo, hi)` lies inside `[t_lo, t_hi)` when not empty.
                        let (p_lo, p_hi) = if lo < hi { (lo, hi) } else { (t_hi, t_hi) };
                        for ix in (t_lo..p_lo).chain(p_hi..t_hi) {
                            orow[ix * 2 + kx + j - s.pw] += t[r + ix];
                        }
                    }
                }
                kx += 2;
            }
            for kx in kx..s.kw {
                let src = tap(kx);
                let (x_lo, x_hi) = range(kx);
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

/// `ceil(a / b)` for a signed `a` and a positive `b`.
fn ceil_div(a: isize, b: usize) -> isize {
    let b = b as isize;
    a.div_euclid(b) + isize::from(a.rem_euclid(b) != 0)
}

/// Depth of the K blocks of a transposed conv's packed weights: those of its whole
/// product over the input plane (input positions as columns), whichever band of rows a
/// GEMM call computes.
fn weights_depth(s: &ConvShape) -> usize {
    gemm::k_depth(s.cin_g(), s.h * s.w)
}

/// The plan of `s` by the phase convs with the merged conv in `tiling` (tests: both
/// tilings must give the same bits).
#[cfg(test)]
pub(super) fn by_phases_tiled(s: &ConvShape, w: &[f32], tiling: Tiling) -> DeconvPlan {
    DeconvPlan {
        s: s.clone(),
        packed: Vec::new(),
        phases: Some(phase_convs(s, w, Some(tiling)).expect("phase convs apply")),
    }
}

//! Winograd transforms, F(2x2, 3x3) and F(4x4, 3x3): generic bodies that each kernel
//! table compiles for its instruction set (the transforms work on [`NR`] tiles at once,
//! one lane per tile, so they vectorise over the lanes).
//!
//! * Input: for one block of tiles, every input channel's `P x P` patches (`P = T + 2`)
//!   are gathered (zeros outside the plane), transformed (`Bᵀ d B`) and written straight
//!   into the packed-B panels of the `P²` point GEMMs.
//! * Output: the `P²` GEMM results of each tile (`Aᵀ m A`) become its `T x T` outputs,
//!   written into the output planes (edge tiles clipped).
//!
//! Both bodies are deterministic functions of their inputs (no fused multiply-add is
//! introduced), so any split of channels or tile rows gives the same bits.

use crate::kernels::isa::{KC, NR};

/// `NR` lanes: one value per tile of a panel.
pub type Lanes = [f32; NR];

/// The geometry the transforms need: variant, input and output planes, tiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WinoGeom {
    /// Output tile side: 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3)).
    pub tile: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input plane height and width.
    pub h: usize,
    pub w: usize,
    /// Output plane height and width.
    pub oh: usize,
    pub ow: usize,
    /// Leading pads (top, left).
    pub ph: usize,
    pub pw: usize,
    /// Tiles across and down the output plane.
    pub tw: usize,
    pub th: usize,
}

impl WinoGeom {
    /// The geometry of conv `s` (3x3, stride 1) with output tiles of side `tile`.
    pub fn new(s: &super::ConvShape, tile: usize) -> WinoGeom {
        WinoGeom {
            tile,
            c_in: s.c_in,
            h: s.h,
            w: s.w,
            oh: s.oh,
            ow: s.ow,
            ph: s.ph,
            pw: s.pw,
            tw: s.ow.div_ceil(tile),
            th: s.oh.div_ceil(tile),
        }
    }

    /// Input patch side (`tile + 2`).
    pub fn patch(&self) -> usize {
        self.tile + 2
    }

    /// Transform points (GEMMs per block).
    pub fn points(&self) -> usize {
        self.patch() * self.patch()
    }
}

/// One block's GEMM results, as [`output_block`] reads them: point `p`, row `r` (output
/// channel `c_lo + r`), tile `j` of the block at `m[p * pstride + r * ldm + j]`.
#[derive(Clone, Copy)]
pub struct PointRows<'m> {
    /// The results.
    pub m: &'m [f32],
    /// Floats between two points.
    pub pstride: usize,
    /// Floats between two rows.
    pub ldm: usize,
}

/// Floats between two points' blocks of `len` floats (the transformed input's panels,
/// the GEMM results): `len` plus one cache line, so that the transforms' `P²` streams,
/// one per point, fall into different L1 sets (blocks of a multiple of 4 KiB would all
/// map to the same few sets and evict each other).
pub fn point_stride(len: usize) -> usize {
    len + POINT_SKEW
}

/// The skew of [`point_stride`]: one 64-byte line.
const POINT_SKEW: usize = 16;

/// Transforms tiles `[tb, tb + nb)` of one image `x` (`[Cin, H, W]`) into packed-B
/// panels: point `p`'s `Cin x nb` operand (zero-padded to whole panels) at
/// `v[p * plen..]`, `plen = point_stride(Cin * ceil(nb / NR) * NR)`.
#[inline(always)]
pub fn input_block(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
    input_block_with(g, x, tb, nb, v, |_, _, _, _| false)
}

/// A vector gather of F(4x4, 3x3) patches ([`input_block_with`]): given one input plane,
/// each lane's patch offset (or [`EDGE`]) and the border lanes' [`Clip`]s, writes
/// `d[r * 6 + c][lane]` for every lane of the panel (a border lane's inside part, 0
/// around it; 0 in the lanes past the block's tiles) and returns true; false leaves the
/// gather to the scalar loops.
pub trait PatchGather: Fn(&[f32], &Origins, &[Clip], &mut [Lanes; 36]) -> bool {}
impl<F: Fn(&[f32], &Origins, &[Clip], &mut [Lanes; 36]) -> bool> PatchGather for F {}

/// [`input_block`] with an ISA's vector gather of F(4x4, 3x3) patches (`gather`, called
/// per channel and panel; the edge lanes are then filled by the scalar loop). The
/// gathered values are the same, so the bits are too.
#[inline(always)]
pub fn input_block_with(
    g: &WinoGeom,
    x: &[f32],
    tb: usize,
    nb: usize,
    v: &mut [f32],
    gather: impl PatchGather,
) {
    input_block_hooks(g, x, tb, nb, v, gather, |_, _, _, _| false)
}

/// An ISA's F(4x4, 3x3) input transform of one channel's panel, stored in place: given
/// the gathered patches `d` (`d[r * 6 + c][lane]`), writes point `p`'s lanes of `Bᵀ d B`
/// at `v[p * plen + at..][..NR]` for every `p < 36` and returns true, computing each
/// value as [`input_block`] does (same operations in the same order, so the same bits);
/// false leaves it to the generic transform.
pub trait PanelTransform: Fn(&[Lanes; 36], &mut [f32], usize, usize) -> bool {}
impl<F: Fn(&[Lanes; 36], &mut [f32], usize, usize) -> bool> PanelTransform for F {}

/// [`input_block_with`] with an ISA's transform of each gathered panel straight into
/// the packed panels (`transform`, F(4x4, 3x3) only).
#[inline(always)]
pub fn input_block_hooks(
    g: &WinoGeom,
    x: &[f32],
    tb: usize,
    nb: usize,
    v: &mut [f32],
    gather: impl PatchGather,
    transform: impl PanelTransform,
) {
    if g.tile == 4 {
        input_block_t::<4, 6, 36>(
            g,
            x,
            tb,
            nb,
            v,
            |plane, inner, clips, d| {
                let d: &mut [Lanes; 36] = d.try_into().expect("36 points");
                gather(plane, inner, clips, d)
            },
            |d, v, at, plen| {
                let d: &[Lanes; 36] = d.try_into().expect("36 points");
                transform(d, v, at, plen)
            },
        )
    } else {
        input_block_t::<2, 4, 16>(g, x, tb, nb, v, |_, _, _, _| false, |_, _, _, _| false)
    }
}

/// What one output transform call covers: block `[tb, tb + nb)`'s tiles in `keep`
/// (`[k0, k1)`), channels `chans` (`[c_lo, c_hi)`, GEMM rows from 0), into output planes
/// that hold channels `y_c0..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutBlock {
    pub tb: usize,
    pub nb: usize,
    pub keep: (usize, usize),
    pub chans: (usize, usize),
    pub y_c0: usize,
}

/// Output transform of the tiles and channels `b` names from the GEMM results `m` into
/// the output planes `y`.
#[inline(always)]
pub fn output_block(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]) {
    output_block_with(g, m, b, y, |_, _, _, _| false)
}

/// Where a panel's F(4x4, 3x3) output tiles go ([`output_block_with`]): per lane, the
/// offset of its tile in the plane when the whole 4x4 tile is kept and inside it, else
/// [`EDGE`].
pub type TileDsts = [usize; NR];

/// A vector scatter of F(4x4, 3x3) output tiles: given a channel's transformed outputs
/// (`o[r * 4 + c][lane]`), each lane's [`TileDsts`] entry, the kept tiles the plane's
/// border cuts ([`Cut`]) and the plane, writes every lane's 4x4 tile that has an offset
/// and every cut tile's part inside the plane and returns true; false leaves every lane
/// to the scalar loops.
pub trait TileScatter: Fn(&[Lanes; 16], &TileDsts, &[Cut], &mut [f32]) -> bool {}
impl<F: Fn(&[Lanes; 16], &TileDsts, &[Cut], &mut [f32]) -> bool> TileScatter for F {}

/// A kept output tile the plane's border cuts: its lane, the plane offset of its first
/// output and the rows and columns of it inside the plane.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cut {
    /// The lane.
    pub lane: usize,
    /// Plane offset of the tile's first output.
    pub at: usize,
    /// Rows of the tile inside the plane.
    pub rows: usize,
    /// Columns of the tile inside the plane.
    pub cols: usize,
}

impl Cut {
    /// Writes the tile's part inside the plane (output rows `ow` apart) from `o`
    /// (`o[r * T + c][lane]`), one float at a time.
    #[inline(always)]
    pub fn scatter<const T: usize>(&self, o: &[Lanes], ow: usize, plane: &mut [f32]) {
        for r in 0..self.rows {
            let dst = &mut plane[self.at + r * ow..][..self.cols];
            for (cc, d) in dst.iter_mut().enumerate() {
                *d = o[r * T + cc][self.lane];
            }
        }
    }
}

/// [`output_block`] with an ISA's vector scatter of whole F(4x4, 3x3) tiles (`scatter`,
/// called per channel and panel). The stored values are the same, so the bits are too.
#[inline(always)]
pub fn output_block_with(
    g: &WinoGeom,
    m: &PointRows<'_>,
    b: &OutBlock,
    y: &mut [f32],
    scatter: impl TileScatter,
) {
    if g.tile == 4 {
        output_block_t::<4, 6, 36, 16>(g, m, b, y, |o, d, cuts, plane| {
            let o: &[Lanes; 16] = o.try_into().expect("16 outputs");
            scatter(o, d, cuts, plane)
        })
    } else {
        output_block_t::<2, 4, 16, 4>(g, m, b, y, |_, _, _, _| false)
    }
}

/// Patch or tile origin of each lane of a panel: its offset in the plane when the
/// whole patch (tile) lies inside it, else [`EDGE`].
pub type Origins = [usize; NR];

/// Marks a lane whose patch (tile) crosses the plane's border.
pub const EDGE: usize = usize::MAX;

#[inline(always)]
fn input_block_t<const T: usize, const P: usize, const Q: usize>(
    g: &WinoGeom,
    x: &[f32],
    tb: usize,
    nb: usize,
    v: &mut [f32],
    gather: impl Fn(&[f32], &Origins, &[Clip], &mut [Lanes]) -> bool,
    transform: impl Fn(&[Lanes], &mut [f32], usize, usize) -> bool,
) {
    let (ci, hw) = (g.c_in, g.h * g.w);
    let nbp = nb.div_ceil(NR) * NR;
    let plen = point_stride(ci * nbp);
    assert!(v.len() >= Q * plen && x.len() >= ci * hw, "short block");
    let mut d = [[0.0f32; NR]; Q];
    let mut out = [[0.0f32; NR]; Q];
    for gi in 0..nbp / NR {
        let pl = PanelLanes::new::<T, P>(g, tb + gi * NR, NR.min(nb - gi * NR));
        let (org, inner, lanes) = (&pl.org, &pl.inner, pl.lanes);
        let all_inner = pl.all_inner();
        // Lanes past the block's tiles stay zero for every channel.
        for row in d.iter_mut() {
            row.fill(0.0);
        }
        for c in 0..ci {
            let plane = &x[c * hw..(c + 1) * hw];
            if gather(plane, inner, pl.border_clips(), &mut d) {
                // Every lane gathered.
            } else if all_inner {
                for (l, &i) in inner.iter().enumerate() {
                    gather_inner::<P, Q>(g, plane, i, &mut d, l);
                }
            } else {
                for l in 0..lanes {
                    match inner[l] {
                        EDGE => gather_edge::<P, Q>(g, plane, org[l], &mut d, l),
                        i => gather_inner::<P, Q>(g, plane, i, &mut d, l),
                    }
                }
            }
            let at = packed_at(c, ci, nbp, gi);
            if transform(&d, v, at, plen) {
                continue;
            }
            input_transform::<P, Q>(&d, &mut out);
            for (p, o) in out.iter().enumerate() {
                v[p * plen + at..p * plen + at + NR].copy_from_slice(o);
            }
        }
    }
}

/// One panel's lanes, for the input transform: each lane's patch origin (row and column
/// of its first input, possibly outside the plane), its plane offset when the whole patch
/// lies inside ([`EDGE`] else) and the border lanes' [`Clip`]s (the first `borders`).
#[derive(Debug, Clone, Copy)]
pub struct PanelLanes {
    /// Patch origin of each lane (row, column); (0, 0) past `lanes`.
    pub org: [(isize, isize); NR],
    /// Plane offset of each lane's patch, [`EDGE`] for a border lane or past `lanes`.
    pub inner: Origins,
    /// The border lanes' clips, `borders` of them.
    pub clips: [Clip; NR],
    /// How many clips.
    pub borders: usize,
    /// Lanes holding tiles of the block (the rest are zero).
    pub lanes: usize,
}

impl PanelLanes {
    /// The lanes of the panel whose first tile is `t0`, `lanes` tiles (output tile side
    /// `T`, patch side `P`).
    #[inline(always)]
    pub fn new<const T: usize, const P: usize>(g: &WinoGeom, t0: usize, lanes: usize) -> Self {
        let mut org = [(0isize, 0isize); NR];
        let mut inner: Origins = [EDGE; NR];
        for (l, (o, i)) in org.iter_mut().zip(inner.iter_mut()).take(lanes).enumerate() {
            let t = t0 + l;
            let iy0 = ((t / g.tw) * T) as isize - g.ph as isize;
            let ix0 = ((t % g.tw) * T) as isize - g.pw as isize;
            *o = (iy0, ix0);
            if iy0 >= 0 && ix0 >= 0 && iy0 as usize + P <= g.h && ix0 as usize + P <= g.w {
                *i = iy0 as usize * g.w + ix0 as usize;
            }
        }
        let mut clips = [Clip::default(); NR];
        let mut borders = 0;
        for l in (0..lanes).filter(|&l| inner[l] == EDGE) {
            clips[borders] = Clip::of::<P>(g, org[l], l);
            borders += 1;
        }
        PanelLanes {
            org,
            inner,
            clips,
            borders,
            lanes,
        }
    }

    /// True when the panel is full and every patch lies inside the plane.
    #[inline(always)]
    pub fn all_inner(&self) -> bool {
        self.lanes == NR && self.inner.iter().all(|&i| i != EDGE)
    }

    /// The border lanes' clips.
    #[inline(always)]
    pub fn border_clips(&self) -> &[Clip] {
        &self.clips[..self.borders]
    }
}

/// Where channel `c`'s lanes of panel `gi` sit in each point's packed-B operand of a
/// block (`ci` channels, `nbp` padded tiles): channels in [`KC`] slices, panel after
/// panel within a slice.
#[inline(always)]
pub fn packed_at(c: usize, ci: usize, nbp: usize, gi: usize) -> usize {
    let k0 = c / KC * KC;
    let kc = KC.min(ci - k0);
    k0 * nbp + gi * NR * kc + (c - k0) * NR
}

/// Reads the `P x P` patch at offset `i` of `plane` (inside it) into lane `l` of `d`.
#[inline(always)]
fn gather_inner<const P: usize, const Q: usize>(
    g: &WinoGeom,
    plane: &[f32],
    i: usize,
    d: &mut [Lanes; Q],
    l: usize,
) {
    for r in 0..P {
        let src: &[f32; P] = plane[i + r * g.w..][..P].try_into().expect("patch row");
        for (c, v) in src.iter().enumerate() {
            d[r * P + c][l] = *v;
        }
    }
}

/// The part of a border lane's `P x P` patch that lies inside the plane: patch rows
/// `r0..r1` and columns `c0..c1`, the first of them at offset `at` of the plane.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clip {
    /// The lane.
    pub lane: usize,
    /// Patch rows `(r0, r1)` inside the plane (empty: none).
    pub rows: (usize, usize),
    /// Patch columns `(c0, c1)` inside the plane (empty: none).
    pub cols: (usize, usize),
    /// Plane offset of patch row `r0`, column `c0` (0 when the clip is empty).
    pub at: usize,
}

impl Clip {
    /// The clip of lane `l`'s patch at origin `(iy0, ix0)` (may be empty).
    #[inline(always)]
    fn of<const P: usize>(g: &WinoGeom, (iy0, ix0): (isize, isize), lane: usize) -> Clip {
        let span = |o: isize, n: usize| {
            let lo = (-o).clamp(0, P as isize) as usize;
            let hi = (n as isize - o).clamp(lo as isize, P as isize) as usize;
            (lo, hi)
        };
        let (rows, cols) = (span(iy0, g.h), span(ix0, g.w));
        let at = if rows.0 < rows.1 && cols.0 < cols.1 {
            (iy0 + rows.0 as isize) as usize * g.w + (ix0 + cols.0 as isize) as usize
        } else {
            0
        };
        Clip {
            lane,
            rows,
            cols,
            at,
        }
    }

    /// Writes the inside part of the lane's patch from `plane` into `d` (the rest of
    /// the lane is left as it is: 0 from the caller): the values [`gather_edge`] reads.
    #[inline(always)]
    pub fn gather<const P: usize, const Q: usize>(
        &self,
        g: &WinoGeom,
        plane: &[f32],
        d: &mut [Lanes; Q],
    ) {
        let ((r0, r1), (c0, c1)) = (self.rows, self.cols);
        for r in r0..r1 {
            let src = &plane[self.at + (r - r0) * g.w..][..c1 - c0];
            for (c, &v) in (c0..c1).zip(src) {
                d[r * P + c][self.lane] = v;
            }
        }
    }
}

/// Reads the `P x P` patch with origin `(iy0, ix0)` from `plane` into lane `l` of `d`,
/// zeros outside the plane.
#[inline(always)]
fn gather_edge<const P: usize, const Q: usize>(
    g: &WinoGeom,
    plane: &[f32],
    (iy0, ix0): (isize, isize),
    d: &mut [Lanes; Q],
    l: usize,
) {
    for r in 0..P {
        let iy = iy0 + r as isize;
        for c in 0..P {
            let ix = ix0 + c as isize;
            d[r * P + c][l] = if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w {
                plane[iy as usize * g.w + ix as usize]
            } else {
                0.0
            };
        }
    }
}

#[inline(always)]
fn output_block_t<const T: usize, const P: usize, const Q: usize, const TT: usize>(
    g: &WinoGeom,
    m: &PointRows<'_>,
    b: &OutBlock,
    y: &mut [f32],
    scatter: impl Fn(&[Lanes], &TileDsts, &[Cut], &mut [f32]) -> bool,
) {
    let (tb, nb, y_c0) = (b.tb, b.nb, b.y_c0);
    let ((k0, k1), (c_lo, c_hi)) = (b.keep, b.chans);
    let ohw = g.oh * g.ow;
    let mut mm = [[0.0f32; NR]; Q];
    let mut o = [[0.0f32; NR]; TT];
    for gi in 0..nb.div_ceil(NR) {
        let t0 = tb + gi * NR;
        let lanes = NR.min(nb - gi * NR);
        // Lane destinations, once per panel: (offset, rows, cols) of each kept tile.
        let mut dst = [(0usize, 0usize, 0usize); NR];
        for (l, d) in dst.iter_mut().enumerate().take(lanes) {
            let t = t0 + l;
            if t < k0 || t >= k1 {
                continue;
            }
            let (oy0, ox0) = ((t / g.tw) * T, (t % g.tw) * T);
            *d = (oy0 * g.ow + ox0, T.min(g.oh - oy0), T.min(g.ow - ox0));
        }
        // Whole kept tiles, for the vector scatter, and the cut ones.
        let mut whole: TileDsts = [EDGE; NR];
        let mut cuts = [Cut::default(); NR];
        let mut ncuts = 0;
        for (l, (w, &(at, rows, cols))) in whole.iter_mut().zip(&dst).enumerate() {
            if rows == T && cols == T {
                *w = at;
            } else if rows > 0 && cols > 0 {
                cuts[ncuts] = Cut {
                    lane: l,
                    at,
                    rows,
                    cols,
                };
                ncuts += 1;
            }
        }
        // Runs of whole tiles side by side in one tile row: (first lane, lanes).
        let mut runs = [(0usize, 0usize); NR];
        let mut nruns = 0;
        for l in (0..lanes).filter(|&l| whole[l] != EDGE) {
            if nruns > 0 && {
                let (l0, n) = runs[nruns - 1];
                l0 + n == l && whole[l - 1] + T == whole[l]
            } {
                runs[nruns - 1].1 += 1;
            } else {
                runs[nruns] = (l, 1);
                nruns += 1;
            }
        }
        for c in c_lo..c_hi {
            let plane = &mut y[(c - y_c0) * ohw..(c - y_c0 + 1) * ohw];
            let row = (c - c_lo) * m.ldm;
            for (p, mp) in mm.iter_mut().enumerate() {
                let at = p * m.pstride + row + gi * NR;
                mp.copy_from_slice(&m.m[at..at + NR]);
            }
            output_transform::<T, P, Q, TT>(&mm, &mut o);
            // The vector scatter (whole and cut tiles), or each output row of the
            // panel interleaved once (lane after lane) and copied run by run.
            if scatter(&o, &whole, &cuts[..ncuts], plane) {
                continue;
            }
            for r in 0..T {
                let mut line = [[0.0f32; T]; NR];
                for (l, v) in line.iter_mut().enumerate() {
                    for (cc, x) in v.iter_mut().enumerate() {
                        *x = o[r * T + cc][l];
                    }
                }
                let line = line.as_flattened();
                for &(l0, n) in &runs[..nruns] {
                    plane[whole[l0] + r * g.ow..][..n * T]
                        .copy_from_slice(&line[l0 * T..(l0 + n) * T]);
                }
            }
            // Tiles cut by the plane's border (whole ones were written above).
            for cut in &cuts[..ncuts] {
                cut.scatter::<T>(&o, g.ow, plane);
            }
        }
    }
}

/// `Bᵀ x` for `P` lane vectors (the 1-D input transform; row `k` is `x(k)`), into `o`.
/// The rows come one by one: taken as an array of references (or copies) they compiled
/// to gathers of pointer vectors.
#[inline(always)]
fn input_1d<'a, const P: usize>(x: impl Fn(usize) -> &'a Lanes, o: &mut [Lanes]) {
    if P == 6 {
        let (x0, x1, x2, x3, x4, x5) = (x(0), x(1), x(2), x(3), x(4), x(5));
        for l in 0..NR {
            let (d0, d1, d2, d3, d4, d5) = (x0[l], x1[l], x2[l], x3[l], x4[l], x5[l]);
            o[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
            o[1][l] = d3 + d4 - 4.0 * (d1 + d2);
            o[2][l] = d4 - d3 + 4.0 * (d1 - d2);
            o[3][l] = d4 - d2 + 2.0 * (d3 - d1);
            o[4][l] = d4 - d2 + 2.0 * (d1 - d3);
            o[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
        }
    } else {
        let (x0, x1, x2, x3) = (x(0), x(1), x(2), x(3));
        for l in 0..NR {
            let (d0, d1, d2, d3) = (x0[l], x1[l], x2[l], x3[l]);
            o[0][l] = d0 - d2;
            o[1][l] = d1 + d2;
            o[2][l] = d2 - d1;
            o[3][l] = d1 - d3;
        }
    }
}

/// `Bᵀ d B` of `NR` patches at once (`d[r * P + c][lane]`, `v` likewise).
#[inline(always)]
fn input_transform<const P: usize, const Q: usize>(d: &[Lanes; Q], v: &mut [Lanes; Q]) {
    // t = Bᵀ d, stored transposed (`t[c * P + r]`) so both passes read whole rows.
    let mut t = [[0.0f32; NR]; Q];
    for (c, tc) in t.chunks_exact_mut(P).enumerate() {
        input_1d::<P>(|r| &d[r * P + c], tc);
    }
    // v = t B: row r of t is column r of the stored transpose.
    for (r, vr) in v.chunks_exact_mut(P).enumerate() {
        input_1d::<P>(|c| &t[c * P + r], vr);
    }
}

/// `Aᵀ x` for `P` lane vectors (the 1-D output transform; row `k` is `x(k)`), into `o`
/// (`P - 2` rows); rows one by one, as in [`input_1d`].
#[inline(always)]
fn output_1d<'a, const P: usize>(x: impl Fn(usize) -> &'a Lanes, o: &mut [Lanes]) {
    if P == 6 {
        let (x0, x1, x2, x3, x4, x5) = (x(0), x(1), x(2), x(3), x(4), x(5));
        for l in 0..NR {
            let (m0, m1, m2, m3, m4, m5) = (x0[l], x1[l], x2[l], x3[l], x4[l], x5[l]);
            let (s12, d12, s34, d34) = (m1 + m2, m1 - m2, m3 + m4, m3 - m4);
            o[0][l] = m0 + s12 + s34;
            o[1][l] = d12 + 2.0 * d34;
            o[2][l] = s12 + 4.0 * s34;
            o[3][l] = d12 + 8.0 * d34 + m5;
        }
    } else {
        let (x0, x1, x2, x3) = (x(0), x(1), x(2), x(3));
        for l in 0..NR {
            let (m0, m1, m2, m3) = (x0[l], x1[l], x2[l], x3[l]);
            o[0][l] = m0 + m1 + m2;
            o[1][l] = m1 - m2 - m3;
        }
    }
}

/// F(2x2, 3x3)'s `Aᵀ x` of one column `(a, b, c, d)`: the two output rows, as
/// [`output_1d`] computes them.
#[inline(always)]
fn out_col4(a: &Lanes, b: &Lanes, c: &Lanes, d: &Lanes) -> (Lanes, Lanes) {
    let (mut o0, mut o1) = ([0.0; NR], [0.0; NR]);
    for l in 0..NR {
        o0[l] = a[l] + b[l] + c[l];
        o1[l] = b[l] - c[l] - d[l];
    }
    (o0, o1)
}

/// `Aᵀ m A` of `NR` tiles at once: `Q` points in, `T x T` outputs (`o[r * T + c][lane]`).
#[inline(always)]
fn output_transform<const T: usize, const P: usize, const Q: usize, const TT: usize>(
    m: &[Lanes; Q],
    o: &mut [Lanes; TT],
) {
    if P == 4 {
        // F(2x2): written out column by column; in the loop below LLVM vectorised
        // across the columns, with gathers of row pointers.
        let col = |c: usize| out_col4(&m[c], &m[4 + c], &m[8 + c], &m[12 + c]);
        let ((t00, t01), (t10, t11), (t20, t21), (t30, t31)) = (col(0), col(1), col(2), col(3));
        let ((o00, o01), (o10, o11)) = (
            out_col4(&t00, &t10, &t20, &t30),
            out_col4(&t01, &t11, &t21, &t31),
        );
        o[..4].copy_from_slice(&[o00, o01, o10, o11]);
        return;
    }
    // t = Aᵀ m (T x P), stored transposed (`t[c * T + r]`).
    let mut t = [[0.0f32; NR]; Q];
    for (c, tc) in t[..T * P].chunks_exact_mut(T).enumerate() {
        output_1d::<P>(|r| &m[r * P + c], tc);
    }
    // o = t A.
    for (r, orow) in o.chunks_exact_mut(T).enumerate() {
        output_1d::<P>(|c| &t[c * T + r], orow);
    }
}

/// `G g Gᵀ` of one 3x3 kernel `g` (row-major) for output tile side `tile`, in f64: the
/// `(tile + 2)²` transformed weights, row-major, in the first `(tile + 2)²` entries.
pub fn transform_weight(g: &[f32], tile: usize) -> [f64; 36] {
    let p = tile + 2;
    let col = |a: f64, b: f64, c: f64| -> [f64; 6] {
        if tile == 4 {
            [
                a / 4.0,
                -(a + b + c) / 6.0,
                -(a - b + c) / 6.0,
                a / 24.0 + b / 12.0 + c / 6.0,
                a / 24.0 - b / 12.0 + c / 6.0,
                c,
            ]
        } else {
            [a, (a + b + c) / 2.0, (a - b + c) / 2.0, c, 0.0, 0.0]
        }
    };
    let g: [f64; 9] = std::array::from_fn(|i| f64::from(g[i]));
    // t = G g (P x 3), one column of g at a time.
    let mut t = [[0.0f64; 3]; 6];
    for j in 0..3 {
        for (i, v) in col(g[j], g[3 + j], g[6 + j])
            .into_iter()
            .take(p)
            .enumerate()
        {
            t[i][j] = v;
        }
    }
    // u = t Gᵀ (P x P), one row of t at a time.
    let mut u = [0.0f64; 36];
    for (i, row) in t.iter().take(p).enumerate() {
        u[i * p..(i + 1) * p].copy_from_slice(&col(row[0], row[1], row[2])[..p]);
    }
    u
}

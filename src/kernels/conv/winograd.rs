//! Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution for dense 3x3, stride-1,
//! dilation-1 convs (any padding), f32, NCHW.
//!
//! The output plane is cut into `T x T` tiles (`T` = 4, or 2 on small planes where 4x4
//! tiles would leave the GEMM panels mostly padding, [`WinogradPlan::tile_for`]), each
//! computed from a `P x P` input patch (`P = T + 2`):
//! `Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A`. Summed over input channels, the element-wise
//! product becomes `P²` independent GEMMs, one per transform point `p`:
//! `M_p[Cout, tiles] = U_p[Cout, Cin] · V_p[Cin, tiles]`.
//!
//! * `U` (the transformed weights, `P²` packed A matrices) is computed once at plan time
//!   ([`WinogradPlan::new`]) and owned by the plan as one plain `Vec<f32>`.
//! * `V` (the transformed input) is written straight into packed-B panels, [`NR`] tiles
//!   per panel, by the kernel table's transform ([`body`]); the point GEMMs call the
//!   table's micro-kernel directly on those panels (no re-packing, no per-call set-up).
//! * Tiles are processed in blocks of `nt` (a multiple of `NR`) sized so that a block's
//!   `V` and `M` stay in L2; after each block the output transform writes the finished
//!   tiles and the fused epilogue runs on every output row that is now complete.
//!
//! A call computes output channels `[c_lo, c_hi)` for tile rows `[ty0, ty1)`. Channel
//! tiles of one image can share one transformed input ([`WinogradPlan::transform_input`],
//! laid out block after block from tile 0), so the input is transformed once per node.
//! Every output element is computed by the same operations whatever the split, so
//! channel and row tiles equal the whole bit for bit.
//!
//! bf16 ([`WinogradPlan::into_bf16`], module `bf16`): the point GEMMs on bf16 operands
//! with f32 accumulation; transforms, output and epilogue unchanged.
//!
//! Accuracy: the transforms use the points 0, ±1, ±2, ∞ (F(4x4)) or 0, ±1, ∞ (F(2x2));
//! the error is a small multiple of the direct conv's, relative to `Σ|x||w|` (see the
//! tests).

mod bf16;
pub(crate) mod body;

use super::ConvShape;
use crate::kernels::bf16::Bf16Table;
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::gemm::{self, Epilogue, KC, MR, NR};
use crate::kernels::isa::{Isa, TileWalk, WalkA, COLS_MAX};
use crate::kernels::packed::WeightBuf;
pub use bf16::Bf16Points;
pub use body::{OutBlock, PointRows, WinoGeom};

/// Floats of one block's transformed input and GEMM output together (about 384 KiB,
/// inside a per-core L2).
const BLOCK_FLOATS: usize = 96 * 1024;
/// Floats of GEMM results a channel chunk of a block holds (256 KiB).
const CHUNK_M_FLOATS: usize = 64 * 1024;
/// Tiles per block of a bf16 plan (at least).
const BF16_BLOCK_TILES: usize = 4 * NR;
/// Most tiles per block.
const MAX_BLOCK_TILES: usize = 8 * NR;
/// Rows of U swept over a block's B panels at a time (a multiple of [`MR`]).
const MC: usize = 72;

/// A planned Winograd conv: geometry, transformed weights and blocking.
#[derive(Debug, Clone)]
pub struct WinogradPlan {
    s: ConvShape,
    /// `points` packed A matrices (`Cout x Cin`), point after point: the conv's packed
    /// weights (owned, or borrowed from a compiled file's mapping).
    u: WeightBuf,
    /// Variant and tiling (boxed: the plan sits in the executor's kernel enum).
    g: Box<WinoGeom>,
    /// Tiles per block (a multiple of `NR`).
    nt: usize,
    /// The point GEMMs' operands in bf16, when the plan computes them in bf16
    /// ([`Self::into_bf16`]; boxed, as `g`).
    bf: Option<Box<Bf16Points>>,
}

/// Fewest input channels of a Winograd conv where the process's kernel table has a
/// direct f32 conv tile for the shallow convs.
const MIN_C_IN: usize = 16;

/// Fewest input channels of a Winograd conv where the table has no direct f32 tile
/// (AVX2): the alternative is an im2col GEMM of depth `9 * c_in`, bound by its stores
/// (Zen 3, one-conv models, min of 6 alternating runs: YOLOX's 12->24 3x3 stem at
/// 208x208 5.84 -> 4.59 ms, 8->16 at 224x224 3.97 -> 3.25 ms).
const MIN_C_IN_NO_DIRECT: usize = 8;

/// The fewest input channels of a Winograd conv on this process's kernel table.
fn min_c_in() -> usize {
    if crate::kernels::isa::table().conv_tiles.is_some() {
        MIN_C_IN
    } else {
        MIN_C_IN_NO_DIRECT
    }
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

    /// The output tile side this path uses on `s`: 4 (F(4x4, 3x3)), or 2 (F(2x2, 3x3))
    /// where the larger tiles would leave the GEMM panels mostly padding (small planes):
    /// the one with fewer point-GEMM multiply-accumulates over whole panels, counting the
    /// transforms (per tile, channel and point) as about 27 GEMM MACs (what the AVX2
    /// transforms measured against the micro-kernel).
    pub fn tile_for(s: &ConvShape) -> usize {
        let cost = |t: usize| {
            let tiles = s.oh.div_ceil(t) * s.ow.div_ceil(t);
            let p2 = (t + 2) * (t + 2);
            let padded = tiles.div_ceil(NR) * NR;
            p2 * padded * s.c_in * s.c_out.div_ceil(MR) * MR + 27 * p2 * tiles * (s.c_in + s.c_out)
        };
        if cost(2) < cost(4) {
            2
        } else {
            4
        }
    }

    /// Output tiles of `s` with tile side `t` (what the GEMMs run over).
    pub fn tiles(s: &ConvShape, t: usize) -> usize {
        s.oh.div_ceil(t) * s.ow.div_ceil(t)
    }

    /// True when this path may beat the im2col GEMM on `s` (the cost estimate,
    /// `compile::cost::winograd_wins`, then decides): enough channels for the GEMMs to
    /// dominate the transforms (see [`min_c_in`]), and enough tiles for one GEMM panel.
    /// The plane may be thin: a CRNN's 4x80 stage (256->256) takes 2.26 ms in F(4x4)
    /// against 4.35 in im2col (`winograd_bench`, Zen 3), which a rule that wanted six rows
    /// had sent to im2col. Edge tiles that overhang the plane are left to the estimate, which counts them: a
    /// rule that also wanted 3/4 of the computed outputs inside the plane sent YOLOX's
    /// 13x13 stages to im2col, 2.75x the time of F(4x4) there (192->192: 1.575 against
    /// 0.572 ms, `winograd_bench`, Zen 3).
    pub fn wins(s: &ConvShape) -> bool {
        if !Self::applies(s) {
            return false;
        }
        let tiles = Self::tiles(s, Self::tile_for(s));
        s.c_in >= min_c_in() && s.c_out >= 16 && tiles >= NR
    }

    /// Plans `s` (which must satisfy [`Self::applies`]) with weights `w`
    /// (`[Cout, Cin, 3, 3]`): transforms and packs them, with the tile side
    /// [`Self::tile_for`] picks.
    pub fn new(s: &ConvShape, w: &[f32]) -> WinogradPlan {
        Self::with_tile(s, w, Self::tile_for(s))
    }

    /// [`Self::new`] with output tile side `tile` (2 or 4), for tests and benches.
    #[doc(hidden)]
    pub fn with_tile(s: &ConvShape, w: &[f32], tile: usize) -> WinogradPlan {
        assert!(Self::applies(s), "not a 3x3 stride-1 dense conv");
        assert!(tile == 2 || tile == 4, "tile side 2 or 4");
        let (ci, co) = (s.c_in, s.c_out);
        assert!(w.len() >= co * ci * 9, "short weights");
        let points = (tile + 2) * (tile + 2);
        // U[p][co][ci] in f64, then each point packed as one GEMM A operand.
        let mut up = vec![0.0f32; points * co * ci];
        for o in 0..co {
            for i in 0..ci {
                let g = &w[(o * ci + i) * 9..(o * ci + i) * 9 + 9];
                let t = body::transform_weight(g, tile);
                for (p, v) in t[..points].iter().enumerate() {
                    up[(p * co + o) * ci + i] = *v as f32;
                }
            }
        }
        let alen = gemm::packed_a_len(co, ci);
        let mut u = vec![0.0f32; points * alen];
        for p in 0..points {
            gemm::pack_a(
                &up[p * co * ci..(p + 1) * co * ci],
                ci,
                1,
                co,
                // K blocks of KC: the point products' own loop over K.
                (ci, KC),
                1.0,
                &mut u[p * alen..(p + 1) * alen],
            );
        }
        Self::build(s, WeightBuf::owned(u), tile).expect("weights of the planned length")
    }

    /// Floats of the transformed weights of `s` ([`Self::weights`]).
    pub fn weights_len(s: &ConvShape) -> usize {
        let t = Self::tile_for(s);
        (t + 2) * (t + 2) * gemm::packed_a_len(s.c_out, s.c_in)
    }

    /// Plans `s` (which must satisfy [`Self::applies`]) with weights already transformed
    /// and packed (what [`Self::weights`] returned for the same shape and kernel table,
    /// e.g. stored in a compiled file); `None` when `u` has another length.
    pub fn with_weights(s: &ConvShape, u: WeightBuf) -> Option<WinogradPlan> {
        Self::build(s, u, Self::tile_for(s))
    }

    fn build(s: &ConvShape, u: WeightBuf, tile: usize) -> Option<WinogradPlan> {
        let points = (tile + 2) * (tile + 2);
        if !Self::applies(s) || u.len() != points * gemm::packed_a_len(s.c_out, s.c_in) {
            return None;
        }
        let (ci, co) = (s.c_in, s.c_out);
        let g = WinoGeom::new(s, tile);
        let mut p = WinogradPlan {
            s: s.clone(),
            u,
            g: Box::new(g),
            nt: NR,
            bf: None,
        };
        let fit = BLOCK_FLOATS / (points * (ci + co)) / NR * NR;
        p.set_block_tiles(fit.clamp(NR, MAX_BLOCK_TILES));
        Some(p)
    }

    /// Sets the tiles per block (rounded up to whole panels, at most the plane's), for
    /// benches tuning the blocking.
    #[doc(hidden)]
    pub fn set_block_tiles(&mut self, nt: usize) {
        let all = (self.g.tw * self.g.th).div_ceil(NR) * NR;
        self.nt = (nt.div_ceil(NR) * NR).clamp(NR, all);
    }

    /// This plan with its point GEMMs in bf16 through `tab` (the transformed weights
    /// converted to K pairs now, each block's transformed input when it is multiplied);
    /// transforms and epilogue stay f32.
    pub fn into_bf16(mut self, tab: &'static Bf16Table) -> WinogradPlan {
        let (co, ci) = (self.s.c_out, self.s.c_in);
        let b = Bf16Points::from_packed(tab, &self.u, self.g.points(), co, ci);
        self.bf = Some(Box::new(b));
        // Blocks of up to four panels: each bf16 weight pair then serves two two-panel
        // tiles (one-panel blocks ran the one-panel tile and streamed the weights once
        // per panel: 256 channels at 14x14, 1043 -> 912 us).
        self.set_block_tiles(self.nt.max(BF16_BLOCK_TILES));
        self
    }

    /// True when the point GEMMs run in bf16 ([`Self::into_bf16`]).
    pub fn is_bf16(&self) -> bool {
        self.bf.is_some()
    }

    /// The output tile side (2 or 4).
    pub fn tile(&self) -> usize {
        self.g.tile
    }

    /// The conv geometry.
    pub fn shape(&self) -> &ConvShape {
        &self.s
    }

    /// The transformed, packed weights (one packed A matrix per transform point).
    pub fn weights(&self) -> &[f32] {
        &self.u
    }

    /// Rows of tiles down the output plane (the unit of position tiles).
    pub fn tile_rows(&self) -> usize {
        self.g.th
    }

    /// Output channels per chunk of a block (a multiple of [`MR`]): the chunk's GEMM
    /// results over every point fill about [`CHUNK_M_FLOATS`].
    fn chunk_channels(&self) -> usize {
        let per_row = self.g.points() * self.nt;
        (CHUNK_M_FLOATS / per_row / MR * MR).max(MR)
    }

    /// Floats of one block's transformed input, for `nb` tiles.
    fn v_len(&self, nb: usize) -> usize {
        self.g.points() * body::point_stride(gemm::packed_b_len(self.s.c_in, nb))
    }

    /// Floats of one channel chunk's GEMM output (rows padded to whole [`MR`] panels).
    fn m_len(&self) -> usize {
        let rows = (self.s.c_out.div_ceil(MR) * MR).min(self.chunk_channels());
        self.g.points() * body::point_stride(rows * self.nt)
    }

    /// Floats of the whole transformed input of one image ([`Self::transform_input`]).
    pub fn input_len(&self) -> usize {
        let t = self.g.tw * self.g.th;
        (t / self.nt) * self.v_len(self.nt) + self.v_len(t % self.nt)
    }

    /// Floats (as dwords) of one block's transformed input in bf16 (none in f32).
    fn vb_len(&self) -> usize {
        match self.bf {
            Some(_) => self.g.points() * Bf16Points::v_stride(self.s.c_in, self.nt),
            None => 0,
        }
    }

    /// Scratch floats a [`Self::run`] call needs (without a shared transformed input).
    pub fn scratch_len(&self) -> usize {
        self.v_len(self.nt) + self.m_len() + self.vb_len()
    }

    /// Transforms the whole input plane set of one image `x` (`[Cin, H, W]`) into `v`
    /// ([`Self::input_len`] floats), block after block from tile 0, for [`Self::run`]'s
    /// `shared`. Runs the transforms of the process's kernel table ([`isa::table`]): every
    /// table's transforms give the same bits.
    ///
    /// [`isa::table`]: crate::kernels::isa::table
    pub fn transform_input(&self, x: &[f32], v: &mut [f32]) {
        self.transform_input_blocks(x, v, (0, self.input_blocks()));
    }

    /// Blocks of tiles one image's transformed input is made of ([`Self::transform_input`]
    /// writes them one after the other).
    pub fn input_blocks(&self) -> usize {
        self.plane_tiles().div_ceil(self.nt)
    }

    /// The plane tiles `[t0, t1)` of block `b` of the transformed input (blocks of
    /// [`Self::input_blocks`], aligned from tile 0).
    pub fn block_tiles(&self, b: usize) -> (usize, usize) {
        let t = self.plane_tiles();
        ((b * self.nt).min(t), ((b + 1) * self.nt).min(t))
    }

    /// Blocks `[b0, b1)` of [`Self::transform_input`] into their places in `v` (the same
    /// bits, whichever calls write the blocks).
    pub fn transform_input_blocks(&self, x: &[f32], v: &mut [f32], (b0, b1): (usize, usize)) {
        let isa = crate::kernels::isa::best_isa();
        let t = self.plane_tiles();
        for b in b0..b1.min(self.input_blocks()) {
            let tb = b * self.nt;
            let nb = self.nt.min(t - tb);
            // Every block before the last is full.
            let off = b * self.v_len(self.nt);
            let len = self.v_len(nb);
            self.transform_block(isa, x, tb, nb, &mut v[off..off + len]);
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
        let tiles = (ty0 * self.g.tw, ty1 * self.g.tw);
        self.run_into(isa, x, y, 0, (c_lo, c_hi), tiles, shared, epi, scratch);
    }

    /// Tiles of the output plane (row after row of [`Self::tile`]-sided tiles).
    pub fn plane_tiles(&self) -> usize {
        self.g.tw * self.g.th
    }

    /// Like [`Self::run`] for the tiles `[t0, t1)` (row-major over the plane, any range;
    /// a tile range cut at other points gives the same bits as the whole): the unit of
    /// an FC that cuts a large conv finer than its tile rows.
    #[allow(clippy::too_many_arguments)]
    pub fn run_tiles(
        &self,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        chans: (usize, usize),
        tiles: (usize, usize),
        shared: Option<&[f32]>,
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        self.run_into(isa, x, y, 0, chans, tiles, shared, epi, scratch);
    }

    /// Scratch floats a [`Self::run_chunk`] call needs.
    pub fn chunk_scratch_len(&self) -> usize {
        self.m_len() + self.vb_len()
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
        let tiles = (0, self.plane_tiles());
        self.run_into(
            isa,
            &[],
            y,
            c_lo,
            (c_lo, c_hi),
            tiles,
            Some(shared),
            epi,
            scratch,
        );
    }

    /// Tiles `[t0, t1)` of [`Self::run`] into `y` holding channels `y_c0..` of each image
    /// (`epi` likewise).
    #[allow(clippy::too_many_arguments)]
    fn run_into(
        &self,
        isa: Isa,
        x: &[f32],
        y: &mut [f32],
        y_c0: usize,
        (c_lo, c_hi): (usize, usize),
        (t0, t1): (usize, usize),
        shared: Option<&[f32]>,
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ) {
        let s = &self.s;
        let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
        let (ci, co) = (s.c_in, s.c_out);
        assert!(c_lo % MR == 0 && c_lo <= c_hi && c_hi <= co && t1 <= self.plane_tiles());
        assert!(
            y_c0 <= c_lo && y.len() >= s.n * (c_hi - y_c0) * ohw,
            "output too short"
        );
        assert!(
            shared.is_none() || s.n == 1,
            "a shared transformed input covers one image"
        );
        if c_lo == c_hi || t0 >= t1 {
            return;
        }
        let (vbuf, mbuf) = scratch.split_at_mut(if shared.is_some() {
            0
        } else {
            self.v_len(self.nt)
        });
        let points = self.g.points();
        // GEMM rows: whole MR panels from c_lo (the packed U has them, zero-padded).
        let c_end = c_hi.div_ceil(MR) * MR;
        // Channel chunks: each chunk's GEMM results (every point) stay in cache until its
        // output transform reads them; every chunk reuses the same rows.
        let chunk = self.chunk_channels();
        let pstride = body::point_stride((c_end - c_lo).min(chunk) * self.nt);
        let (mbuf, vbbuf) = mbuf.split_at_mut(points * pstride);
        let vbbuf: &mut [u32] = bytemuck::cast_slice_mut(&mut vbbuf[..self.vb_len()]);
        let alen = gemm::packed_a_len(co, ci);
        let per = y.len() / s.n;
        for b in 0..s.n {
            let yb = &mut y[b * per..(b + 1) * per];
            // Residuals are laid out like the output.
            let res_b = residual_slices(epi.residuals, b * per..(b + 1) * per);
            let epi_b = Epilogue {
                residuals: &res_b[..epi.residuals.len()],
                ..*epi
            };
            // Tiles to write; the GEMMs run on whole NR panels of blocks aligned from tile
            // 0, so that every tile is computed by the same kernels as in a whole run (a
            // range of tiles then equals the whole bit for bit).
            let tiles = self.plane_tiles();
            let a1 = (t1.div_ceil(NR) * NR).min(tiles);
            let mut tb = t0 / NR * NR;
            // Tiles written (and whose epilogue ran): [t0, done).
            let mut done = t0;
            while tb < a1 {
                // Tiles [tb, tb + nb): up to the next block boundary (blocks of `nt`
                // tiles aligned from tile 0, as the shared transformed input is laid out).
                let nb = ((tb / self.nt + 1) * self.nt).min(a1) - tb;
                // The block's transformed input, its padded width (the panels' stride)
                // and where tile `tb`'s panel starts in it.
                let (v, vnbp, j0): (&[f32], usize, usize) = match shared {
                    Some(sh) => {
                        let kb = tb / self.nt * self.nt;
                        let full = self.nt.min(tiles - kb);
                        let vlen = self.v_len(full);
                        let at = (kb / self.nt) * self.v_len(self.nt);
                        (&sh[at..at + vlen], full.div_ceil(NR) * NR, tb - kb)
                    }
                    None => {
                        let vlen = self.v_len(nb);
                        let xb = &x[b * ci * hw..(b + 1) * ci * hw];
                        self.transform_block(isa, xb, tb, nb, &mut vbuf[..vlen]);
                        (&vbuf[..vlen], nb.div_ceil(NR) * NR, 0)
                    }
                };
                let plen = v.len() / points;
                let panels = (j0, j0 + nb.div_ceil(NR) * NR);
                if let Some(bf) = &self.bf {
                    bf.convert_input(v, plen, points, ci, vnbp, panels, vbbuf);
                }
                let keep = (t0.max(tb), t1.min(tb + nb));
                let mut ca = c_lo;
                while ca < c_hi {
                    crate::kernels::yield_point::yield_point();
                    let cb = (ca + chunk).min(c_hi);
                    let rows = (ca, cb.div_ceil(MR) * MR);
                    // GEMM row `i - ca` holds channel `i`.
                    for p in 0..points {
                        let mp = &mut mbuf[p * pstride..(p + 1) * pstride];
                        if let Some(bf) = &self.bf {
                            let blen = crate::kernels::bf16::packed_a_len(co, ci);
                            let pbs = Bf16Points::v_stride(ci, vnbp);
                            let dims = (ci, co.div_ceil(MR) * MR, vnbp);
                            let (u, vb) = (&bf.u[p * blen..][..blen], &vbbuf[p * pbs..][..pbs]);
                            bf.gemm_point(u, vb, mp, self.nt, dims, panels, rows);
                        } else {
                            let (u, vp) = (&self.u[p * alen..][..alen], &v[p * plen..][..plen]);
                            let real = j0 + nb;
                            self.gemm_point(isa, u, vp, mp, vnbp, (panels, real), rows);
                        }
                    }
                    let m = PointRows {
                        m: &mbuf[j0..],
                        pstride,
                        ldm: self.nt,
                    };
                    let b = body::OutBlock {
                        tb,
                        nb,
                        keep,
                        chans: (ca, cb),
                        y_c0,
                    };
                    (isa.table().wino_output)(&self.g, &m, &b, &mut yb[..]);
                    ca = cb;
                }
                tb += nb;
                let now = tb.min(t1);
                if now > done && !epi.is_empty() {
                    self.epilogue_tiles(isa, &epi_b, yb, (c_lo - y_c0, c_hi - c_lo), (done, now));
                }
                done = done.max(now);
            }
        }
    }

    /// Runs `epi` on the output pixels of tiles `[ta, tb)` of one image's planes `yb`
    /// (channels `c0..c0 + nc` of them): whole output rows in one sweep, the pieces of a
    /// partly covered tile row row by row.
    fn epilogue_tiles(
        &self,
        isa: Isa,
        epi: &Epilogue<'_>,
        yb: &mut [f32],
        (c0, nc): (usize, usize),
        (ta, tb): (usize, usize),
    ) {
        let (tw, tile) = (self.g.tw, self.g.tile);
        let (oh, ow) = (self.s.oh, self.s.ow);
        let ohw = oh * ow;
        let mut t = ta;
        while t < tb {
            let ty = t / tw;
            if t == ty * tw && tb >= (ty + 1) * tw {
                let rows = (tb - t) / tw;
                let (oy0, oy1) = (ty * tile, ((ty + rows) * tile).min(oh));
                epi.apply(isa, yb, ohw, c0, nc, oy0 * ow, (oy1 - oy0) * ow);
                t += rows * tw;
            } else {
                let e = tb.min((ty + 1) * tw);
                let (ox0, ox1) = ((t - ty * tw) * tile, ((e - ty * tw) * tile).min(ow));
                for oy in ty * tile..(ty * tile + tile).min(oh) {
                    epi.apply(isa, yb, ohw, c0, nc, oy * ow + ox0, ox1 - ox0);
                }
                t = e;
            }
        }
    }

    /// Transforms tiles `[tb, tb + nb)` of one image `x` into packed-B panels: point `p`'s
    /// `Cin x nb` operand at `v[p * plen..]`.
    fn transform_block(&self, isa: Isa, x: &[f32], tb: usize, nb: usize, v: &mut [f32]) {
        (isa.table().wino_input)(&self.g, x, tb, nb, v)
    }

    /// The point GEMM `M[c0..c1, j0..j1] = U_p · V_p[.., j0..j1]` of one block (`c0`,
    /// `c1` multiples of [`MR`], `U_p` packed with `ceil(Cout / MR) * MR` rows; `V_p`
    /// packed `nbp` columns wide, `j0`, `j1` multiples of [`NR`]; columns from `real` on
    /// are padding and may be skipped): `m` row `i - c0` holds channel `i`, row stride
    /// `nt`. K blocks outermost, then [`MC`]-row blocks of U,
    /// each swept over the block's B panels while it stays in cache. A column's sums do
    /// not depend on the range: any panel range gives the whole block's bits.
    #[allow(clippy::too_many_arguments)]
    fn gemm_point(
        &self,
        isa: Isa,
        u: &[f32],
        v: &[f32],
        m: &mut [f32],
        nbp: usize,
        ((j0, j1), real): ((usize, usize), usize),
        (c0, c1): (usize, usize),
    ) {
        let t = isa.table();
        let (ci, nt) = (self.s.c_in, self.nt);
        let co_pad = self.s.c_out.div_ceil(MR) * MR;
        let mut k0 = 0;
        while k0 < ci {
            let kc = KC.min(ci - k0);
            let mut ic = c0;
            while ic < c1 {
                let ic_end = (ic + MC).min(c1);
                let mut j = j0;
                while j < j1 {
                    let bp = &v[k0 * nbp + j * kc..][..kc * NR];
                    // A last panel of at most COLS_MAX real tiles: only those columns,
                    // down the rows' panels (the same bits as the tile's).
                    let w = real.saturating_sub(j);
                    if j + NR == j1 && (1..=COLS_MAX).contains(&w) {
                        let ap = &u[k0 * co_pad + ic * kc..];
                        let cs = &mut m[(ic - c0) * nt + j..];
                        let (rows, panels) = (ic_end - ic, (ic_end - ic).div_ceil(MR));
                        (t.mm_cols)(kc, ap, panels, bp, w, cs, nt, rows, k0 > 0);
                        j += NR;
                        continue;
                    }
                    // Two strips at a time where the table pairs tiles (same bits).
                    if let (Some(pair), true) = (t.mm_tile_pair, j + 2 * NR <= j1) {
                        let bq = &v[k0 * nbp + (j + NR) * kc..][..kc * NR];
                        for i in (ic..ic_end).step_by(MR) {
                            let ap = &u[k0 * co_pad + i * kc..][..kc * MR];
                            let cs = &mut m[(i - c0) * nt + j..];
                            pair(kc, ap, [bp, bq], cs, nt, k0 > 0, None);
                        }
                        j += 2 * NR;
                        continue;
                    }
                    // One strip: down the block's panels in one walk where the table
                    // has walks (the same bits as a tile each).
                    if let Some(walk) = t.mm_tiles {
                        let ap = WalkA::Packed(&u[k0 * co_pad + ic * kc..]);
                        let cs = &mut m[(ic - c0) * nt + j..];
                        let count = (ic_end - ic).div_ceil(MR);
                        walk(kc, ap, bp, &[], cs, nt, k0 > 0, None, TileWalk::Down, count);
                        j += NR;
                        continue;
                    }
                    for i in (ic..ic_end).step_by(MR) {
                        let ap = &u[k0 * co_pad + i * kc..][..kc * MR];
                        (t.mm_tile)(kc, ap, bp, &mut m[(i - c0) * nt + j..], nt, k0 > 0);
                    }
                    j += NR;
                }
                ic = ic_end;
            }
            k0 += kc;
        }
    }
}

#[cfg(test)]
mod bf16_tests;
#[cfg(test)]
mod tests;

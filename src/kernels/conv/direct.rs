//! Direct dense convs without an im2col matrix, for f32 and (in K pairs) bf16. Each call
//! converts the input rows it needs into *phase planes*, on which every tap of the kernel
//! is one constant offset; the output, taken row-major over planes of width `wq`, is
//! then a sum over taps of shifted plane rows, computed by one batch-reduce tile per MR
//! output channels x [`TW`] positions (the f32 table's `conv_tile`, two at once where it
//! has a pair tile, the bf16 table's) or per [`CW`] channels x up to [`CN`] positions
//! (the channel tile, [`Tiling`]).
//!
//! Phase planes: for stride phase `(a, b)` (`a < sh`, `b < sw`) and channel group `p`
//! (`per` input channels: one in f32, a K pair in bf16), plane element `(i, j)` holds
//! input channels `p * per..` at row `(oh_lo + i) * sh + a - ph` and column
//! `j * sw + b - pw` (zeros outside the image and for a missing odd channel). Tap `(u, v)` reads phase
//! `(u * dh % sh, v * dw % sw)` at offset `(u * dh / sh, v * dw / sw)`, so output
//! `(oh, ow)` reads plane position `f + dy * wq + dx` with `f = (oh - oh_lo) * wq + ow`:
//! linear in `f`. Positions with `ow >= OW` are computed and dropped. The planes of one
//! phase are channel-group-major (each plane its positions in a row); the wide run's are
//! position-major instead (each position's groups together, padded to [`WIDE_KB`]), so
//! that a matrix tile of 16 positions starts a cache line on every row at every tap.
//!
//! Weights: MR-row panels of `cp * taps` elements, channel-group-major, then tap
//! (`t = u * KW + v`), as the tile reads them: im2col's K order, so that in f32 (one
//! channel per element) on AVX-512, whose GEMM tile also runs one fused chain per output
//! in K order, the direct conv gives exactly the im2col path's bits.
//!
//! Invariant: every output is the same sum in the same order (channel groups, then taps)
//! whatever channel or position range a call asks for, so disjoint ranges together equal
//! one whole call bit for bit.

use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::copy::copy_run;
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::{Isa, MR, NR};

/// Most taps (`KH * KW`) a direct conv takes (7x7); larger kernels use im2col.
const MAX_TAPS: usize = 49;
/// Largest stride a direct conv takes (each stride phase is a plane set).
const MAX_STRIDE: usize = 4;
/// Dwords of weights one block of panels holds, so that the block stays in L2 while
/// the position tiles sweep it.
const BLOCK_A_DWORDS: usize = 64 * 1024;
/// Position tiles per epilogue pass (the outputs are still in cache when it runs).
const CHUNK_TILES: usize = 8;
/// Positions per tile.
pub const TW: usize = 2 * NR;
/// Fewest depth elements (taps x channel groups) of a direct conv: below, storing and
/// copying each tile costs more than the products (a bf16 pointwise conv of 16 input
/// channels took 1.25x its im2col time).
const MIN_DEPTH: usize = 32;

/// Fewest depth elements of an f32 direct conv of stride 1, where im2col would copy the
/// input once per tap (U-Net's 3->16 3x3 conv at 224x224, depth 27: 895 -> 711 us; at
/// stride 2 such convs stay on im2col: 3->32 3x3/2 294 us there against 315 direct).
const MIN_DEPTH_S1: usize = 16;

/// Output channels per panel of the channel tile (two vectors).
pub const CW: usize = 2 * NR;
/// Most output positions one channel tile computes.
pub const CN: usize = 8;

/// How a direct conv tiles its outputs. Both tilings sum each output in the same order
/// (channel groups, then taps), so they give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiling {
    /// The row tile ([`ConvTile`]): MR channels x [`TW`] consecutive plane positions,
    /// the columns past the output width and the last tile's tail computed and dropped.
    Rows,
    /// The channel tile ([`ChanTile`]): [`CW`] channels x up to [`CN`] output positions
    /// anywhere in the planes, so nothing is computed past the output; for small
    /// outputs (ResNet's 7x7 stage computes 49 positions where the row tile computes 64).
    Chans,
    /// The matrix-engine run ([`WideRows`], bf16 pairs only): [`WIDE_ROWS`] channels x
    /// runs of [`WIDE_WIDTH`]-position row tiles, channel pairs padded to [`WIDE_KB`]
    /// (zero planes and weights); its own sums (the engine's, not the row tile's bits).
    Wide,
}

/// Output channels per panel of the wide run (two 16-row matrix tiles).
pub const WIDE_ROWS: usize = 32;
/// Positions per tile of the wide run (two 16-column matrix tiles).
pub const WIDE_WIDTH: usize = 32;
/// Channel groups per K step of the wide run (its channel groups round up to this).
pub const WIDE_KB: usize = 16;
/// Elements of one K step of a wide panel: [`WIDE_ROWS`] rows of [`WIDE_KB`] groups.
pub const WIDE_STEP: usize = WIDE_ROWS * WIDE_KB;

/// Index in a wide panel of `taps` taps of output row `r` (within the panel), channel
/// group `p` and tap `t`: K steps `(p / WIDE_KB) * taps + t` one after the other, each
/// two matrix tiles (rows 0-15, then 16-31) of [`WIDE_KB`] lines, line `p % WIDE_KB`
/// holding group `p` of the tile's 16 rows (the B operand of a position-major product).
pub fn wide_index(r: usize, p: usize, t: usize, taps: usize) -> usize {
    ((p / WIDE_KB) * taps + t) * WIDE_STEP + (r / 16) * 256 + (p % WIDE_KB) * 16 + r % 16
}

/// Fewest input channels of a conv the wide run takes (bf16 pairs): half of a K step,
/// so that padding at most doubles the products.
pub const WIDE_MIN_CIN: usize = WIDE_KB;

/// True when the wide run can compute conv `s` (in bf16 pairs): it [`fits`] and has at
/// least [`WIDE_MIN_CIN`] input channels.
pub fn wide_applies(s: &ConvShape) -> bool {
    fits(s) && s.c_in >= WIDE_MIN_CIN
}

/// A run of wide row tiles: `(a, b, offs, cp, (f0, tiles), c, ldc)`, [`WIDE_ROWS`]
/// channels x `tiles * WIDE_WIDTH` plane positions from `f0` into `c` at stride `ldc`:
/// `C[r][j] = Σ_p Σ_t A(r, p, t) · B[offs[t] + (f0 + j) * cp + p]`, weights laid out by
/// [`wide_index`], planes position-major (see `kernels::bf16::amx`).
#[allow(clippy::type_complexity)]
pub type WideRows<T> =
    fn(a: &[T], b: &[T], offs: &[usize], cp: usize, run: (usize, usize), c: &mut [f32], ldc: usize);

/// One block of position-major planes: `(rows, stride, n, dst, ld)`, `dst[j * ld + q]`
/// = the element of groups `q < 16` (channel rows `per * q..`, a `None` row zeros) at
/// column `j * stride` of its rows, for `j < n` (at most 16).
pub type PackBlock<T> =
    fn(rows: &[Option<&[f32]>; 32], stride: usize, n: usize, dst: &mut [T], ld: usize);

/// The wide run of a table and the packer of its position-major planes.
#[derive(Clone, Copy)]
pub struct Wide<T> {
    /// The row tiles ([`WideRows`]).
    pub rows: WideRows<T>,
    /// The row tiles stored straight into the output ([`WideStore`]), for planes
    /// whose rows are the output's (`wq == OW`).
    pub store: WideStore<T>,
    /// Blocks of 16 positions x 16 groups of two channels ([`PackBlock`]).
    pub pack: PackBlock<T>,
    /// The row tiles stored into a channels-last output ([`WideNhwc`]).
    pub nhwc: WideNhwc<T>,
    /// Contiguous floats into K pairs (`dst[q]` = floats `2q, 2q + 1`, a zero second
    /// half past the end): channels-last input positions into plane elements.
    pub pairs: fn(src: &[f32], dst: &mut [T]),
}

/// A run of wide row tiles stored into a channels-last output: `(a, b, offs, cp, (f0,
/// tiles), out)` computes what [`WideRows`] does and stores plane position `f` of panel
/// row `r` at output position `p = f / wq * OW + f % wq` (kept only for `f % wq < OW`
/// and `p` in `out.cols`), channel `out.chan0 + r`, through `out.epi` ([`NhwcOut`]).
pub type WideNhwc<T> =
    fn(a: &[T], b: &[T], offs: &[usize], cp: usize, run: (usize, usize), out: &mut NhwcOut<'_>);

/// Where a [`WideNhwc`] run writes: `y` `[positions][cout]` (a band of output rows of
/// one image, plane row 0 its first), `chans` channels from `chan0`.
pub struct NhwcOut<'a> {
    /// The band's outputs, channels last.
    pub y: &'a mut [f32],
    /// Channels per output position.
    pub cout: usize,
    /// Output width.
    pub ow: usize,
    /// Plane row width (at least `ow`).
    pub wq: usize,
    /// Output positions to store (band-local).
    pub cols: (usize, usize),
    /// The panel's first channel.
    pub chan0: usize,
    /// The panel's channels to store (at most [`WIDE_ROWS`]).
    pub chans: usize,
    /// The epilogue applied as the outputs are stored (bias by channel, residual laid
    /// out like `y`).
    pub epi: WideEpi<'a>,
}

impl NhwcOut<'_> {
    /// Panics unless every store (and bias or residual read) stays inside the operands.
    pub fn check(&self) {
        assert!(
            self.chans <= WIDE_ROWS && self.chan0 + self.chans <= self.cout,
            "nhwc out: bad channels"
        );
        assert!(
            self.ow <= self.wq,
            "nhwc out: plane narrower than the output"
        );
        let end = self.cols.1 * self.cout;
        assert!(
            self.cols.0 <= self.cols.1 && self.y.len() >= end,
            "nhwc out: short output"
        );
        let (b, r) = (self.epi.bias, self.epi.residual);
        assert!(
            b.is_none_or(|b| b.len() >= self.chan0 + self.chans),
            "nhwc out: short bias"
        );
        assert!(r.is_none_or(|r| r.len() >= end), "nhwc out: short residual");
    }
}

/// A run of wide row tiles stored into the output: `(a, b, offs, cp, (f0, tiles),
/// out)` computes what [`WideRows`] does and stores plane position `f` of panel row `r`
/// at output position `out.base + f` of channel `out.chan0 + r`, through `out.epi`
/// (only planes whose rows are as wide as the output's, so positions run on).
pub type WideStore<T> =
    fn(a: &[T], b: &[T], offs: &[usize], cp: usize, run: (usize, usize), out: &mut WideOut<'_>);

/// Where a [`WideStore`] run writes: channel planes of `ohw` floats in `y` (one
/// image's output), plane position `f` at output position `base + f`, only positions
/// in `cols` and panel rows in `rows`.
pub struct WideOut<'a> {
    /// The image's output, `[C, OH * OW]`.
    pub y: &'a mut [f32],
    /// Floats per channel plane.
    pub ohw: usize,
    /// Output position of plane position 0.
    pub base: usize,
    /// Output positions to store.
    pub cols: (usize, usize),
    /// The panel's first channel.
    pub chan0: usize,
    /// The panel's rows to store (at most [`WIDE_ROWS`]).
    pub rows: (usize, usize),
    /// The epilogue applied as the outputs are stored.
    pub epi: WideEpi<'a>,
}

/// A conv epilogue of the simple form ([`Epilogue::simple_form`]): channel `c`'s
/// outputs become `v + bias[c]`, plus the residual's element, clamped to `(lo, hi)`
/// (`min(max(v, lo), hi)`), each part where present.
#[derive(Clone, Copy, Default)]
pub struct WideEpi<'a> {
    /// Per-channel bias, by output channel.
    pub bias: Option<&'a [f32]>,
    /// A tensor laid out like the output, added element-wise.
    pub residual: Option<&'a [f32]>,
    /// `(lo, hi)`.
    pub clamp: Option<(f32, f32)>,
}

impl WideOut<'_> {
    /// Lanes of the 16 plane positions from `f` to store (bit `l`: position `f + l`),
    /// and the output position of lane 0.
    pub fn lanes(&self, f: usize) -> (u16, usize) {
        let q0 = self.base + f;
        let lo = self.cols.0.saturating_sub(q0).min(16);
        let hi = self.cols.1.saturating_sub(q0).min(16);
        let mask = if lo < hi {
            ((1u32 << hi) - (1u32 << lo)) as u16
        } else {
            0
        };
        (mask, q0)
    }

    /// Panics unless every store (and residual read) [`lanes`](Self::lanes) allows
    /// stays inside the operands.
    pub fn check(&self) {
        assert!(
            self.rows.0 <= self.rows.1 && self.rows.1 <= WIDE_ROWS,
            "wide out: bad rows"
        );
        assert!(
            self.cols.0 <= self.cols.1 && self.cols.1 <= self.ohw,
            "wide out: positions outside the plane"
        );
        if self.rows.0 == self.rows.1 {
            return;
        }
        let end = (self.chan0 + self.rows.1) * self.ohw;
        assert!(self.y.len() >= end, "wide out: short output");
        let (b, r) = (self.epi.bias, self.epi.residual);
        assert!(
            b.is_none_or(|b| b.len() >= self.chan0 + self.rows.1),
            "wide out: short bias"
        );
        assert!(r.is_none_or(|r| r.len() >= end), "wide out: short residual");
    }
}

/// Outputs a direct conv of `s` computes with `tiling` (`per` channels per element):
/// the channels rounded up to the panel, times the positions its tiles cover.
fn work(s: &ConvShape, per: usize, tiling: Tiling) -> usize {
    match tiling {
        Tiling::Rows => {
            let flat = s.oh * Geom::new(s, per).wq;
            s.c_out.div_ceil(MR) * MR * flat.div_ceil(TW) * TW
        }
        Tiling::Chans => s.c_out.div_ceil(CW) * CW * s.oh * s.ow,
        Tiling::Wide => {
            let g = Geom::with(s, per, tiling);
            let flat = s.oh * g.wq;
            s.c_out.div_ceil(WIDE_ROWS) * WIDE_ROWS * flat.div_ceil(WIDE_WIDTH) * WIDE_WIDTH
        }
    }
}

/// The tiling of a direct conv of `s`: the channel tile where it is expected to be
/// faster than the row tile (small outputs with 32k channels), else the row tile. In f32
/// the row tiles run in pairs (24 products per pair of plane loads against the channel
/// tile's 16 per ten loads, and no scatter of the outputs), so an output of the channel
/// tile costs about `1.1 + 50 / K` of one of the row tiles at depth `K` (fitted on
/// `kernels_bench -- plan`: 1.5x at K 144-147, 1.2x at 288-576, 1.0-1.15x at 1152-2304):
/// ResNet-18's 7x7/2 stem (6 % fewer outputs) 2600 us on the channel tile against 1790
/// on the row tiles, a 3x3/2 16->32 conv at 320x320 (12 % fewer) 4560-4670 against
/// 3460-3540, while the 3x3/2 128->256 one at 14x14 (13 % fewer, K 1152) is 11 % faster
/// on the channel tile. In bf16 (no pair tile) the channel tile must save 5 %.
pub fn tiling(s: &ConvShape, per: usize) -> Tiling {
    let (chans, rows) = (work(s, per, Tiling::Chans), work(s, per, Tiling::Rows));
    let k = depth(s, per);
    let faster = if per == 1 {
        chans * (11 * k + 500) < rows * 10 * k
    } else {
        chans * 20 <= rows * 19
    };
    if faster {
        Tiling::Chans
    } else {
        Tiling::Rows
    }
}

/// Rows of one weight panel under `tiling`.
fn panel_rows(tiling: Tiling) -> usize {
    match tiling {
        Tiling::Rows => MR,
        Tiling::Chans => CW,
        Tiling::Wide => WIDE_ROWS,
    }
}

/// One channel tile: `C[j * CW + r] = Σ_p Σ_t A[(p * taps + t) * CW + r] ·
/// B[pos[j] + offs[t] + p * cps]` for `j < pos.len()` (at most [`CN`]) and `r < CW`.
/// With `acc` the chain of each output resumes from the value C holds (a call over
/// channel groups `p0..p1` after one over `0..p0` gives the bits of one call over
/// `0..p1`), else it starts from zero.
pub type ChanTile<T> = fn(
    a: &[T],
    b: &[T],
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    acc: bool,
);

/// `$f::<N>(args)` for the position count `$n` (1 to [`CN`]) of a channel tile, `N` its
/// const generic; 0 (and past `CN`) calls nothing. The SIMD channel tiles' dispatch.
macro_rules! by_positions {
    ($n:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $n {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            8 => $f::<8>($($arg),*),
            _ => {}
        }
    };
}
pub(crate) use by_positions;

/// Panics unless a row-tile call ([`ConvTile`]) stays inside its operands: `a_len`
/// elements of A, `b_len` of B, `c_len` floats of C at stride `ldc`. The SIMD tiles
/// check this before their unchecked loops.
pub fn check_row_tile(
    (a_len, b_len, c_len): (usize, usize, usize),
    offs: &[usize],
    cp: usize,
    cps: usize,
    ldc: usize,
) {
    assert!(a_len >= offs.len() * cp * MR, "conv tile: short A panel");
    if cp > 0 {
        let far = offs.iter().max().map_or(0, |&o| o + (cp - 1) * cps + TW);
        assert!(b_len >= far, "conv tile: short planes");
    }
    assert!(
        ldc >= TW && c_len >= (MR - 1) * ldc + TW,
        "conv tile: short C"
    );
}

/// Panics unless a channel-tile call ([`ChanTile`]) stays inside its operands (as
/// [`check_row_tile`]; C holds `pos.len()` rows of [`CW`]).
pub fn check_chan_tile(
    (a_len, b_len, c_len): (usize, usize, usize),
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
) {
    let n = pos.len();
    assert!(n <= CN, "conv channel tile: more than {CN} positions");
    assert!(
        a_len >= offs.len() * cp * CW,
        "conv channel tile: short A panel"
    );
    if cp > 0 && n > 0 && !offs.is_empty() {
        let far = pos.iter().max().unwrap_or(&0) + offs.iter().max().unwrap_or(&0);
        assert!(
            b_len > far + (cp - 1) * cps,
            "conv channel tile: short planes"
        );
    }
    assert!(c_len >= n * CW, "conv channel tile: short C");
}

/// One tile: `C[r][j] = Σ_p Σ_t A[(p * taps + t) * MR + r] · B[offs[t] + p * cps + j]`
/// (`j < TW`), written to MR rows of `c` at stride `ldc`.
pub type ConvTile<T> =
    fn(a: &[T], b: &[T], offs: &[usize], cp: usize, cps: usize, c: &mut [f32], ldc: usize);

/// Plane elements from `per` input rows read at `stride`: `(lo, hi, stride, dst)`, `hi`
/// the second channel of a bf16 pair (`None` past the last channel; f32 ignores it).
pub type PackRow<T> = fn(lo: &[f32], hi: Option<&[f32]>, stride: usize, dst: &mut [T]);

/// True when the direct conv can compute `s` at all: dense, at most [`MAX_TAPS`] taps
/// and strides up to [`MAX_STRIDE`].
pub fn fits(s: &ConvShape) -> bool {
    s.group == 1
        && s.kh * s.kw <= MAX_TAPS
        && (1..=MAX_STRIDE).contains(&s.sh)
        && (1..=MAX_STRIDE).contains(&s.sw)
}

/// Depth of the direct conv of `s`: taps x channel groups of `per` channels.
fn depth(s: &ConvShape, per: usize) -> usize {
    s.kh * s.kw * s.c_in.div_ceil(per)
}

/// True when conv `s` runs as a direct conv with `per` input channels per plane
/// element: it [`fits`] and has a depth of at least [`MIN_DEPTH`] elements.
pub fn applies(s: &ConvShape, per: usize) -> bool {
    fits(s) && depth(s, per) >= MIN_DEPTH
}

/// The plane geometry of a direct conv.
pub(super) struct Geom {
    /// Input channel groups (plane elements per position).
    pub(super) cp: usize,
    /// Taps (`KH * KW`).
    pub(super) taps: usize,
    /// Plane row width: output width plus the largest tap column offset.
    pub(super) wq: usize,
    /// Largest tap row offset (plane rows past the last output row).
    pub(super) dy_max: usize,
    /// Largest tap column offset.
    dx_max: usize,
    /// Stride phases (`sh * sw`).
    pub(super) phases: usize,
    /// Bit `a * sw + b` set when some tap reads phase `(a, b)` (the others stay unset).
    pub(super) used: u32,
    /// Position-major planes (the wide run's layout): the `cp` elements of one plane
    /// position lie together, positions `cp` elements apart, so that a matrix tile of
    /// 16 positions x 16 groups starts a cache line at every tap (`cp` a multiple of
    /// 16 dwords) whatever the tap's column offset.
    interleaved: bool,
}

impl Geom {
    /// The geometry of `tiling`: for the wide run, channel groups padded to
    /// [`WIDE_KB`] and planes position-major (`interleaved`). A matrix-tile load
    /// whose rows cross cache lines took ~3x as long on a Xeon with AMX (566 against
    /// 1622 GMAC/s in a 2x2 tile loop); with one position per tile row, a tap's column
    /// offset moves whole lines.
    pub(super) fn with(s: &ConvShape, per: usize, tiling: Tiling) -> Geom {
        let mut g = Geom::new(s, per);
        if tiling == Tiling::Wide {
            g.cp = g.cp.div_ceil(WIDE_KB) * WIDE_KB;
            g.interleaved = true;
        }
        g
    }

    fn new(s: &ConvShape, per: usize) -> Geom {
        let dy_max = (s.kh - 1) * s.dh / s.sh;
        let dx_max = (s.kw - 1) * s.dw / s.sw;
        let mut used = 0;
        for u in 0..s.kh {
            for v in 0..s.kw {
                used |= 1 << ((u * s.dh % s.sh) * s.sw + v * s.dw % s.sw);
            }
        }
        Geom {
            used,
            cp: s.c_in.div_ceil(per),
            taps: s.kh * s.kw,
            wq: s.ow + dx_max,
            dy_max,
            dx_max,
            phases: s.sh * s.sw,
            interleaved: false,
        }
    }

    /// Dwords between two planes for `out_rows` output rows: the rows the taps read,
    /// the over-read of the last tile, rounded to an odd number of 64-byte lines (planes
    /// a multiple of 4 KiB apart would share cache sets).
    pub(super) fn plane_stride(&self, out_rows: usize) -> usize {
        let over = TW.max(WIDE_WIDTH);
        let x = ((out_rows + self.dy_max) * self.wq + self.dx_max + over).div_ceil(16) * 16;
        if (x / 16).is_multiple_of(2) {
            x + 16
        } else {
            x
        }
    }

    /// Offset of each tap's first read from a tile's position (from its first element
    /// when `interleaved`), planes `ps` positions apart.
    pub(super) fn offsets(&self, s: &ConvShape, ps: usize) -> [usize; MAX_TAPS] {
        let mut offs = [0; MAX_TAPS];
        for u in 0..s.kh {
            for v in 0..s.kw {
                let (ey, ex) = (u * s.dh, v * s.dw);
                let phase = (ey % s.sh) * s.sw + ex % s.sw;
                let at = ey / s.sh * self.wq + ex / s.sw;
                offs[u * s.kw + v] = if self.interleaved {
                    phase * self.cp * ps + at * self.cp
                } else {
                    phase * self.cp * ps + at
                };
            }
        }
        offs
    }
}

/// Output channels an FC tile of a direct f32 conv in `tiling` starts at a multiple of:
/// its weight panel (a pair of row-tile panels, a channel-tile panel), so that no tile
/// computes a panel only partly kept (a 6-channel cut through a 32-channel panel of the
/// channel tile computed all 32 twice).
pub fn channel_align(tiling: Tiling) -> usize {
    match tiling {
        Tiling::Rows => 2 * MR,
        Tiling::Chans => CW,
        Tiling::Wide => WIDE_ROWS,
    }
}

/// Plane elements of scratch a direct conv of `s` in `tiling` needs: the phase planes
/// of a whole image.
pub fn scratch_len(s: &ConvShape, per: usize, tiling: Tiling) -> usize {
    let g = Geom::with(s, per, tiling);
    g.phases * g.cp * g.plane_stride(s.oh)
}

/// Weights `w` (`[Cout, Cin, KH, KW]`) as `tiling`'s tile reads them (module doc, in
/// panels of MR or [`CW`] rows): `elem` makes one element from `per` weights (the
/// missing ones zero).
pub fn pack_weights<T: Copy + Default>(
    s: &ConvShape,
    w: &[f32],
    per: usize,
    elem: impl Fn(f32, f32) -> T,
    tiling: Tiling,
) -> Vec<T> {
    let g = Geom::with(s, per, tiling);
    let (kp, mr) = (g.taps * g.cp, panel_rows(tiling));
    // Row-tile panels in pairs (a zero panel after an odd last one), for pair tiles.
    let panels = match tiling {
        Tiling::Rows => s.c_out.div_ceil(2 * mr) * 2,
        _ => s.c_out.div_ceil(mr),
    };
    let mut out = vec![T::default(); panels * kp * mr];
    let at = |oc: usize, ci: usize, t: usize| {
        if ci < s.c_in {
            w[(oc * s.c_in + ci) * g.taps + t]
        } else {
            0.0
        }
    };
    for oc in 0..s.c_out {
        let panel = &mut out[oc / mr * kp * mr..][..kp * mr];
        for t in 0..g.taps {
            for p in 0..g.cp {
                let (lo, hi) = (at(oc, per * p, t), at(oc, per * p + per - 1, t));
                let i = match tiling {
                    Tiling::Wide => wide_index(oc % mr, p, t, g.taps),
                    _ => (p * g.taps + t) * mr + oc % mr,
                };
                panel[i] = elem(lo, if per == 2 { hi } else { 0.0 });
            }
        }
    }
    out
}

/// Converts the input rows that output rows `oh_lo..oh_lo + out_rows` read from image
/// `x` (`[Cin, H, W]`) into phase planes `ps` positions apart (position-major where
/// the geometry is `interleaved`).
#[allow(clippy::too_many_arguments)]
fn pack_planes<T: Copy + Default>(
    (pack, block): (PackRow<T>, Option<PackBlock<T>>),
    s: &ConvShape,
    (g, per): (&Geom, usize),
    x: &[f32],
    oh_lo: usize,
    out_rows: usize,
    ps: usize,
    planes: &mut [T],
) {
    let (hw, rows, wq) = (s.h * s.w, out_rows + g.dy_max, g.wq);
    for (a, b, phase) in used_phases(s, g) {
        let (j_lo, j_hi) = phase_cols(s, b, wq);
        // Input row of plane row i, if inside the image; the run of plane row i
        // of channel c from column j_lo.
        let in_row = |i: usize| {
            let ir = (oh_lo + i) * s.sh + a;
            (ir >= s.ph && ir - s.ph < s.h && j_lo < j_hi).then(|| ir - s.ph)
        };
        let run = |r: usize, c: usize| {
            let start = c * hw + r * s.w + j_lo * s.sw + b - s.pw;
            &x[start..c * hw + (r + 1) * s.w]
        };
        let set = &mut planes[phase * g.cp * ps..][..g.cp * ps];
        if g.interleaved {
            let k = (pack, block);
            pack_positions(k, s, (g, per), (j_lo, j_hi), rows, set, &in_row, &run);
            continue;
        }
        for (p, plane) in set.chunks_exact_mut(ps).enumerate() {
            if per * p >= s.c_in {
                // A padding group: zeros.
                plane.fill(T::default());
                continue;
            }
            let (body, tail) = plane.split_at_mut(rows * wq);
            tail.fill(T::default());
            for (i, row) in body.chunks_exact_mut(wq).enumerate() {
                let Some(r) = in_row(i) else {
                    row.fill(T::default());
                    continue;
                };
                row[..j_lo].fill(T::default());
                row[j_hi..].fill(T::default());
                let hi = (per == 2 && 2 * p + 1 < s.c_in).then(|| run(r, 2 * p + 1));
                pack(run(r, per * p), hi, s.sw, &mut row[j_lo..j_hi]);
            }
        }
    }
}

/// The stride phases `(a, b, a * sw + b)` some tap of `s` reads (geometry `g`).
pub(super) fn used_phases<'g>(
    s: &ConvShape,
    g: &'g Geom,
) -> impl Iterator<Item = (usize, usize, usize)> + 'g {
    let (sh, sw) = (s.sh, s.sw);
    (0..sh)
        .flat_map(move |a| (0..sw).map(move |b| (a, b, a * sw + b)))
        .filter(move |&(_, _, p)| g.used & (1 << p) != 0)
}

/// The plane columns `j_lo..j_hi` of column phase `b` (rows `wq` wide) whose input
/// column `j * sw + b - pw` is inside the image.
pub(super) fn phase_cols(s: &ConvShape, b: usize, wq: usize) -> (usize, usize) {
    let j_lo = s.pw.saturating_sub(b).div_ceil(s.sw).min(wq);
    let j_hi = if s.w + s.pw > b {
        ((s.w + s.pw - b - 1) / s.sw + 1).clamp(j_lo, wq)
    } else {
        j_lo
    };
    (j_lo, j_hi)
}

/// Groups per block of [`pack_positions`]: one matrix-tile line of dwords.
const POS_BLOCK: usize = 16;

/// One phase's position-major plane set `set` (`g.cp` elements per position, rows of
/// `g.wq` positions, `rows` of them, zeros after): plane columns `j_lo..j_hi` of row
/// `i` from `run(in_row(i), c)` (channel `c`'s input from column `j_lo`), zeros
/// elsewhere. Each block of 16 groups x 16 columns is packed as rows of the planar
/// layout into a local block and transposed into place.
#[allow(clippy::too_many_arguments)]
fn pack_positions<'x, T: Copy + Default>(
    (pack, block): (PackRow<T>, Option<PackBlock<T>>),
    s: &ConvShape,
    (g, per): (&Geom, usize),
    (j_lo, j_hi): (usize, usize),
    rows: usize,
    set: &mut [T],
    in_row: &dyn Fn(usize) -> Option<usize>,
    run: &dyn Fn(usize, usize) -> &'x [f32],
) {
    let (cp, wq) = (g.cp, g.wq);
    let (body, tail) = set.split_at_mut(rows * wq * cp);
    tail.fill(T::default());
    let mut local = [T::default(); POS_BLOCK * POS_BLOCK];
    for (i, row) in body.chunks_exact_mut(wq * cp).enumerate() {
        let Some(r) = in_row(i) else {
            row.fill(T::default());
            continue;
        };
        row[..j_lo * cp].fill(T::default());
        row[j_hi * cp..].fill(T::default());
        let mut j0 = j_lo;
        while j0 < j_hi {
            let n = POS_BLOCK.min(j_hi - j0);
            let skip = (j0 - j_lo) * s.sw;
            for p0 in (0..cp).step_by(POS_BLOCK) {
                if let Some(block) = block.filter(|_| per == 2) {
                    let mut src: [Option<&[f32]>; 32] = [None; 32];
                    for (c, d) in src.iter_mut().enumerate() {
                        let c = 2 * p0 + c;
                        *d = (c < s.c_in).then(|| &run(r, c)[skip..]);
                    }
                    block(&src, s.sw, n, &mut row[j0 * cp + p0..], cp);
                    continue;
                }
                for q in 0..POS_BLOCK {
                    let (p, line) = (p0 + q, &mut local[q * POS_BLOCK..][..n]);
                    if per * p >= s.c_in {
                        line.fill(T::default());
                        continue;
                    }
                    let hi = (per == 2 && 2 * p + 1 < s.c_in).then(|| &run(r, 2 * p + 1)[skip..]);
                    pack(&run(r, per * p)[skip..], hi, s.sw, line);
                }
                for j in 0..n {
                    let dst = &mut row[(j0 + j) * cp + p0..][..POS_BLOCK];
                    for (q, d) in dst.iter_mut().enumerate() {
                        *d = local[q * POS_BLOCK + j];
                    }
                }
            }
            j0 += n;
        }
    }
}

/// The tiles of a direct conv: one per [`Tiling`], and a pair of row tiles where the
/// table has one.
#[derive(Clone, Copy)]
pub struct Tiles<T> {
    /// The row tile ([`Tiling::Rows`]).
    pub rows: ConvTile<T>,
    /// Two row tiles at once: 2 * MR channels, A two consecutive MR-row panels
    /// (`offs.len() * cp * MR` elements each), C `2 * MR` rows; each output the same
    /// chain as [`Tiles::rows`] gives it. Each plane vector then feeds twice the
    /// products (YOLOX's 3x3/2 48->96 conv at 104x104 2274-2322 -> 1988-2031 us).
    pub pairs: Option<ConvTile<T>>,
    /// The channel tile ([`Tiling::Chans`]).
    pub chans: ChanTile<T>,
}

/// The element kernels of one direct conv: channels per plane element, the row packer
/// and the tiles.
pub struct Kernels<T> {
    /// Input channels per plane element (1 for f32, 2 for bf16 pairs).
    pub per: usize,
    /// Converts input rows into plane elements.
    pub pack: PackRow<T>,
    /// The tiles.
    pub tiles: Tiles<T>,
    /// The wide run and its packer, where the table has one ([`Tiling::Wide`] needs
    /// it).
    pub wide: Option<Wide<T>>,
}

/// What the tile loops of one image share: the planes, the tap offsets and the output
/// window.
struct Sweep<'a, T> {
    k: &'a Kernels<T>,
    g: &'a Geom,
    planes: &'a [T],
    ps: usize,
    offs: &'a [usize],
    /// First output row the planes hold.
    oh_lo: usize,
    /// Output channels and positions to write.
    chans: (usize, usize),
    cols: (usize, usize),
}

/// Forward conv of output channels `[c_lo, c_hi)` and output positions `[p_lo, p_hi)`
/// of `s` (a conv [`applies`] to) in `tiling` with weights from [`pack_weights`] for
/// the same tiling: `x` `[N, Cin, H, W]`, `y` `[N, Cout, OH, OW]`, residuals laid out
/// like `y`, then `epi` (through `isa`'s table). `scratch`: [`scratch_len`] elements.
#[allow(clippy::too_many_arguments)]
pub fn conv_direct<T: Copy + Default>(
    k: &Kernels<T>,
    tiling: Tiling,
    isa: Isa,
    s: &ConvShape,
    w: &[T],
    x: &[f32],
    y: &mut [f32],
    (c_lo, c_hi): (usize, usize),
    (p_lo, p_hi): (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [T],
) {
    if c_lo >= c_hi || p_lo >= p_hi {
        return;
    }
    let g = Geom::with(s, k.per, tiling);
    for_bands::<T>(s, &g, (c_lo, c_hi), (p_lo, p_hi), |cols| {
        conv_band(
            k,
            tiling,
            isa,
            s,
            &g,
            w,
            x,
            y,
            (c_lo, c_hi),
            cols,
            epi,
            scratch,
        )
    });
}

/// Calls `band` with the output positions of each band of [`band_rows`] rows that
/// output positions `p_lo..p_hi` of channels `c_lo..c_hi` take (elements `T`).
fn for_bands<T>(
    s: &ConvShape,
    g: &Geom,
    (c_lo, c_hi): (usize, usize),
    (p_lo, p_hi): (usize, usize),
    mut band: impl FnMut((usize, usize)),
) {
    let (oh_lo, oh_hi) = (p_lo / s.ow, (p_hi - 1) / s.ow + 1);
    let elem = std::mem::size_of::<T>();
    let weights = (c_hi - c_lo) * g.cp * g.taps * elem;
    let rows = band_rows(g, elem, oh_hi - oh_lo, weights);
    let mut r0 = oh_lo;
    while r0 < oh_hi {
        let r1 = (r0 + rows).min(oh_hi);
        band((p_lo.max(r0 * s.ow), p_hi.min(r1 * s.ow)));
        r0 = r1;
    }
}

/// Output channels x positions of one f32 image (`s.n == 1`) of the row tiles
/// ([`Tiling::Rows`], weights packed for it), as [`conv2d_f32`] computes them (the same
/// bits), handed to `sink` instead of stored into an output tensor. `scratch`:
/// [`scratch_len`] floats.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv2d_f32_rows_into(
    isa: Isa,
    s: &ConvShape,
    w: &[f32],
    x: &[f32],
    (c_lo, c_hi): (usize, usize),
    (p_lo, p_hi): (usize, usize),
    sink: &mut impl RowSink,
    scratch: &mut [f32],
) {
    assert_eq!(s.n, 1, "direct conv into a sink: one image");
    if c_lo >= c_hi || p_lo >= p_hi {
        return;
    }
    let k = f32_kernels(isa);
    let g = Geom::with(s, k.per, Tiling::Rows);
    for_bands::<f32>(s, &g, (c_lo, c_hi), (p_lo, p_hi), |cols| {
        let oh_lo = cols.0 / s.ow;
        let out_rows = (cols.1 - 1) / s.ow + 1 - oh_lo;
        let ps = g.plane_stride(out_rows);
        let planes = &mut scratch[..g.phases * g.cp * ps];
        let offs_all = g.offsets(s, ps);
        pack_planes(
            (k.pack, None),
            s,
            (&g, k.per),
            x,
            oh_lo,
            out_rows,
            ps,
            planes,
        );
        let sw = Sweep {
            k: &k,
            g: &g,
            planes,
            ps,
            offs: &offs_all[..g.taps],
            oh_lo,
            chans: (c_lo, c_hi),
            cols,
        };
        let run = |a: &[f32], f0: usize, n: usize, c: &mut [f32], ldc: usize, kept| {
            row_tiles(&sw, a, (f0, n), c, ldc, kept)
        };
        sweep_rows(&sw, s, w, sink, (row_panel(&k), TW), &run);
    });
}

/// The f32 kernels of `isa`'s table (the portable row tile where it has none).
fn f32_kernels(isa: Isa) -> Kernels<f32> {
    Kernels {
        per: 1,
        pack: pack_f32,
        tiles: isa.table().conv_tiles.unwrap_or(PORTABLE_F32),
        wide: None,
    }
}

/// Rows of the row tiles' panels: `2 * MR` with the table's pair tile.
fn row_panel<T>(k: &Kernels<T>) -> usize {
    if k.tiles.pairs.is_some() {
        2 * MR
    } else {
        MR
    }
}

/// `n` row tiles of one panel (weights `a`) from plane position `f0` into `c` at stride
/// `ldc`; with the table's pair tile, both halves of the panel at once where both hold
/// kept rows (`lo..hi`, relative), else the half that does.
fn row_tiles<T: Copy>(
    sw: &Sweep<'_, T>,
    a: &[T],
    (f0, n): (usize, usize),
    c: &mut [f32],
    ldc: usize,
    (lo, hi): (usize, usize),
) {
    let k = sw.k;
    let half = a.len() / 2;
    let (tile, a, c) = match k.tiles.pairs {
        Some(pair) if lo < MR && hi > MR => (pair, a, c),
        Some(_) if hi <= MR => (k.tiles.rows, &a[..half], c),
        Some(_) => (k.tiles.rows, &a[half..], &mut c[MR * ldc..]),
        None => (k.tiles.rows, a, c),
    };
    for i in 0..n {
        let b = &sw.planes[f0 + i * TW..];
        tile(a, b, sw.offs, sw.g.cp, sw.ps, &mut c[i * TW..], ldc);
    }
}

/// Bytes of phase planes one band of a direct conv packs and sweeps at most (a quarter
/// of a 2 MiB L2), so that a band's planes stay in L2 while every panel of weights
/// sweeps them: planes of a whole large plane, packed at once, came back from L3 once
/// per panel (YOLOv8n's 3x3/2 16->32 conv at 320x320: 5.9 ms whole, 2.9 ms in bands;
/// YOLOX's 3x3/2 32->64 at 208x208 4.3 -> 2.1 ms; bands of 256 KiB made ResNet-18's
/// deep convs 8 % slower in the network).
const BAND_BYTES: usize = 512 << 10;

/// Output rows per band of a direct conv over `rows` output rows whose planes take
/// `elem_bytes` per element and whose weights (for the call's channels) `weights` bytes:
/// all rows when their planes fit in [`BAND_BYTES`], else bands of about equal size, but
/// no more than the weights can be read again for (each band sweeps all of them: two
/// bands of YOLOX's 3x3/2 256->512 conv, 800 KB of planes and 4.7 MB of weights, took
/// 15 % longer than one). Each output is the same sum whatever range computes it (the
/// module's invariant), so bands change no bits.
fn band_rows(g: &Geom, elem_bytes: usize, rows: usize, weights: usize) -> usize {
    let planes = g.phases * g.cp * g.plane_stride(rows) * elem_bytes;
    let bands = planes
        .div_ceil(BAND_BYTES)
        .min(1 + planes / weights.max(1))
        .clamp(1, rows.max(1));
    rows.max(1).div_ceil(bands)
}

/// Bands of a whole call of conv `s` (`per` channels per element) under `tiling`.
#[cfg(test)]
pub(super) fn whole_bands(s: &ConvShape, per: usize, tiling: Tiling) -> usize {
    let g = Geom::with(s, per, tiling);
    let weights = s.c_out * g.cp * g.taps * 4;
    s.oh.div_ceil(band_rows(&g, 4, s.oh, weights))
}

/// [`conv_direct`] over one band of output rows (`p_lo..p_hi` within rows that
/// [`band_rows`] allows).
#[allow(clippy::too_many_arguments)]
fn conv_band<T: Copy + Default>(
    k: &Kernels<T>,
    tiling: Tiling,
    isa: Isa,
    s: &ConvShape,
    g: &Geom,
    w: &[T],
    x: &[f32],
    y: &mut [f32],
    (c_lo, c_hi): (usize, usize),
    (p_lo, p_hi): (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [T],
) {
    let (ohw, chw) = (s.oh * s.ow, s.c_in * s.h * s.w);
    let (oh_lo, oh_hi) = (p_lo / s.ow, (p_hi - 1) / s.ow + 1);
    let out_rows = oh_hi - oh_lo;
    let ps = g.plane_stride(out_rows);
    let planes = &mut scratch[..g.phases * g.cp * ps];
    let offs_all = g.offsets(s, ps);
    for bi in 0..s.n {
        let xb = &x[bi * chw..][..chw];
        let block = k.wide.map(|w| w.pack);
        pack_planes(
            (k.pack, block),
            s,
            (g, k.per),
            xb,
            oh_lo,
            out_rows,
            ps,
            planes,
        );
        let yb = &mut y[bi * s.c_out * ohw..][..s.c_out * ohw];
        let res = residual_slices(epi.residuals, bi * s.c_out * ohw..(bi + 1) * s.c_out * ohw);
        let epi_b = Epilogue {
            residuals: &res[..epi.residuals.len()],
            ..*epi
        };
        let sw = Sweep {
            k,
            g,
            planes,
            ps,
            offs: &offs_all[..g.taps],
            oh_lo,
            chans: (c_lo, c_hi),
            cols: (p_lo, p_hi),
        };
        let mut out = PlaneOut {
            isa,
            yb,
            ohw,
            epi: &epi_b,
        };
        match tiling {
            Tiling::Rows => {
                let run = |a: &[T], f0: usize, n: usize, c: &mut [f32], ldc: usize, kept| {
                    row_tiles(&sw, a, (f0, n), c, ldc, kept)
                };
                sweep_rows(&sw, s, w, &mut out, (row_panel(k), TW), &run)
            }
            Tiling::Wide if g.wq == s.ow => {
                let wide = k.wide.expect("direct conv: wide tiling without a wide run");
                sweep_store(&sw, isa, s, w, out.yb, &epi_b, wide.store)
            }
            Tiling::Wide => {
                let wide = k.wide.expect("direct conv: wide tiling without a wide run");
                let run = |a: &[T], f0: usize, n: usize, c: &mut [f32], ldc: usize, _| {
                    (wide.rows)(a, sw.planes, sw.offs, g.cp, (f0, n), c, ldc)
                };
                sweep_rows(&sw, s, w, &mut out, (WIDE_ROWS, WIDE_WIDTH), &run)
            }
            Tiling::Chans => sweep_chans(&sw, isa, s, w, out.yb, &epi_b),
        }
    }
}

/// Panels of `rows` rows (each `panel_len` elements) per block that stays in L2.
fn panels_per_block(panel_len: usize) -> usize {
    (BLOCK_A_DWORDS / panel_len.max(1)).max(1)
}

/// Floats of the chunk buffer [`sweep_rows`] fills: the widest panel's rows x a chunk
/// of the widest tiles.
const CHUNK_FLOATS: usize = WIDE_ROWS * CHUNK_TILES * WIDE_WIDTH;

/// A run of row tiles for [`sweep_rows`]: `(panel, f0, tiles, c, ldc)` computes
/// `tiles` consecutive tiles from plane position `f0` into `c` at stride `ldc`.
/// `(a, f0, n, c, ldc, rows)`: `n` tiles of one panel from plane position `f0` into `c`
/// at stride `ldc`; `rows` the panel rows (relative) the caller keeps, which a run may
/// compute alone.
type RowRun<'a, T> = dyn Fn(&[T], usize, usize, &mut [f32], usize, (usize, usize)) + 'a;

/// One step of [`walk_panels`].
pub(super) enum Walk<'w, T> {
    /// Panel `pi` (its weights `a`, its output channels `rows`) over tiles `tiles`.
    Panel {
        pi: usize,
        a: &'w [T],
        rows: (usize, usize),
        tiles: (usize, usize),
    },
    /// Every panel of the block (output channels `rows`) done over tiles `tiles`.
    Chunk {
        rows: (usize, usize),
        tiles: (usize, usize),
    },
}

/// The walk the row sweeps (planar and channels-last) take over output channels
/// `c_lo..c_hi` of a conv of geometry `g` in panels of `mr` rows: per block of panels
/// that stays in L2, tiles `t_lo..t_hi` in chunks of [`CHUNK_TILES`] (a yield point
/// before each), each panel of the block over the chunk, then the chunk as a whole (for
/// its epilogue).
pub(super) fn walk_panels<'w, T>(
    (g, (c_lo, c_hi)): (&Geom, (usize, usize)),
    w: &'w [T],
    mr: usize,
    (t_lo, t_hi): (usize, usize),
    step: &mut dyn FnMut(Walk<'w, T>),
) {
    let panel_len = g.taps * g.cp * mr;
    let per_block = panels_per_block(panel_len);
    let (pan_lo, pan_hi) = (c_lo / mr, c_hi.div_ceil(mr));
    let mut blk = pan_lo;
    while blk < pan_hi {
        let blk_hi = (blk + per_block).min(pan_hi);
        let mut t0 = t_lo;
        while t0 < t_hi {
            crate::kernels::yield_point::yield_point();
            let t1 = (t0 + CHUNK_TILES).min(t_hi);
            for pi in blk..blk_hi {
                step(Walk::Panel {
                    pi,
                    a: &w[pi * panel_len..][..panel_len],
                    rows: (c_lo.max(pi * mr), c_hi.min(pi * mr + mr)),
                    tiles: (t0, t1),
                });
            }
            step(Walk::Chunk {
                rows: (c_lo.max(blk * mr), c_hi.min(blk_hi * mr)),
                tiles: (t0, t1),
            });
            t0 = t1;
        }
        blk = blk_hi;
    }
}

/// Where [`sweep_rows`] puts the kept outputs of its tiles.
pub(super) trait RowSink {
    /// Output channels `rows.0..rows.1` at output positions `run.0..run.0 + run.1` (a run within
    /// one output row): channel `r`'s from `src[(r - rows.0) * ld..]`.
    fn put(&mut self, rows: (usize, usize), run: (usize, usize), src: &[f32], ld: usize);
    /// Output channels `rows.0..rows.1` at positions `q.0..q.1` are complete (each
    /// position's sum put once).
    fn done(&mut self, rows: (usize, usize), q: (usize, usize));
}

/// The sink of a conv into its output image (`[Cout, OH, OW]`, positions `ohw` a
/// channel): outputs copied in, each chunk through the epilogue when complete.
struct PlaneOut<'a, 'e> {
    isa: Isa,
    yb: &'a mut [f32],
    ohw: usize,
    epi: &'a Epilogue<'e>,
}

impl RowSink for PlaneOut<'_, '_> {
    #[inline(always)]
    fn put(&mut self, rows: (usize, usize), (q, len): (usize, usize), src: &[f32], ld: usize) {
        for r in rows.0..rows.1 {
            let dst = &mut self.yb[r * self.ohw + q..][..len];
            copy_run(dst, &src[(r - rows.0) * ld..]);
        }
    }

    fn done(&mut self, (r_lo, r_hi): (usize, usize), (q_lo, q_hi): (usize, usize)) {
        if !self.epi.is_empty() && q_lo < q_hi {
            let (isa, ohw) = (self.isa, self.ohw);
            self.epi
                .apply(isa, self.yb, ohw, r_lo, r_hi - r_lo, q_lo, q_hi - q_lo);
        }
    }
}

/// The row tiles of one image, `mr` channels x `tw` positions each (the row tile's or
/// the wide run's), walked by [`walk_panels`]: each chunk computed by `run` into a
/// buffer, kept positions put into `sink`, then the chunk marked complete.
fn sweep_rows<T: Copy + Default>(
    sw: &Sweep<'_, T>,
    s: &ConvShape,
    w: &[T],
    sink: &mut impl RowSink,
    (mr, tw): (usize, usize),
    run: &RowRun<'_, T>,
) {
    let (wq, ow) = (sw.g.wq, s.ow);
    let (p_lo, p_hi) = sw.cols;
    let out_rows = (p_hi - 1) / ow + 1 - sw.oh_lo;
    let flat = out_rows * wq;
    // The first output position at or after flattened position f.
    let pos = |f: usize| sw.oh_lo * ow + f / wq * ow + (f % wq).min(ow);
    let ldb = CHUNK_TILES * tw;
    assert!(
        mr * ldb <= CHUNK_FLOATS,
        "direct conv: tile larger than the chunk buffer"
    );
    let mut buf = [0.0f32; CHUNK_FLOATS];
    walk_panels(
        (sw.g, sw.chans),
        w,
        mr,
        (0, flat.div_ceil(tw)),
        &mut |step| match step {
            Walk::Panel { pi, a, rows, tiles } => {
                let (f_lo, f_hi) = (tiles.0 * tw, (tiles.1 * tw).min(flat));
                let kept = (rows.0 - pi * mr, rows.1 - pi * mr);
                run(a, f_lo, tiles.1 - tiles.0, &mut buf, ldb, kept);
                // The chunk's positions inside the image, one output row at a time.
                let mut f = f_lo;
                while f < f_hi {
                    let row_end = (f / wq * wq + ow).min(f_hi);
                    if f < row_end {
                        let q0 = pos(f);
                        let (q_lo, q_hi) = (q0.max(p_lo), (q0 + row_end - f).min(p_hi));
                        if q_lo < q_hi {
                            let src = &buf[(rows.0 - pi * mr) * ldb + f - f_lo + q_lo - q0..];
                            sink.put(rows, (q_lo, q_hi - q_lo), src, ldb);
                        }
                    }
                    f = (f / wq + 1) * wq;
                }
            }
            Walk::Chunk { rows, tiles } => {
                let (f_lo, f_hi) = (tiles.0 * tw, (tiles.1 * tw).min(flat));
                sink.done(rows, (pos(f_lo).max(p_lo), pos(f_hi).min(p_hi)));
            }
        },
    );
}

/// The wide run over one image whose plane rows are the output's (`wq == OW`, so plane
/// position `f` is output position `oh_lo * OW + f`), walked by [`walk_panels`] over the
/// tiles holding the wanted positions: stored straight into the output with the
/// epilogue where it has the simple form (else applied per chunk).
fn sweep_store<T: Copy + Default>(
    sw: &Sweep<'_, T>,
    isa: Isa,
    s: &ConvShape,
    w: &[T],
    yb: &mut [f32],
    epi: &Epilogue<'_>,
    store: WideStore<T>,
) {
    let (ohw, base) = (s.oh * s.ow, sw.oh_lo * s.ow);
    let (p_lo, p_hi) = sw.cols;
    let (mr, tw) = (WIDE_ROWS, WIDE_WIDTH);
    let tiles = ((p_lo - base) / tw, (p_hi - base).div_ceil(tw));
    let fused = epi.simple_form().map(|(slot, clamp)| WideEpi {
        bias: epi.bias.map(|b| &b[epi.channel_offset..]),
        residual: slot.map(|k| epi.residuals[k]),
        clamp,
    });
    walk_panels((sw.g, sw.chans), w, mr, tiles, &mut |step| match step {
        Walk::Panel { pi, a, rows, tiles } => {
            let mut out = WideOut {
                y: &mut *yb,
                ohw,
                base,
                cols: (p_lo, p_hi),
                chan0: pi * mr,
                rows: (rows.0 - pi * mr, rows.1 - pi * mr),
                epi: fused.unwrap_or_default(),
            };
            let run = (tiles.0 * tw, tiles.1 - tiles.0);
            store(a, sw.planes, sw.offs, sw.g.cp, run, &mut out);
        }
        Walk::Chunk { rows, tiles } => {
            let (q_lo, q_hi) = (
                (base + tiles.0 * tw).max(p_lo),
                (base + tiles.1 * tw).min(p_hi),
            );
            if fused.is_none() && !epi.is_empty() && q_lo < q_hi {
                epi.apply(isa, yb, ohw, rows.0, rows.1 - rows.0, q_lo, q_hi - q_lo);
            }
        }
    });
}

/// Bytes of a panel's weights in one K block of the channel tiles: they stay in L1 while
/// the chunk's position tiles sweep them, where a whole panel (hundreds of KB for 256+
/// input channels) came from L2 for every tile. Blocks of 8-16 channels of a 3x3 conv
/// took 5-10 % less time than unblocked on ResNet-18's and YOLO's stride-2 convs;
/// 4 channels were slower again (each block reloads the tile's sums).
const CHAN_BLOCK_BYTES: usize = 16 * 1024;

/// Channel groups per K block of the channel tiles of geometry `g` (at least one).
fn chan_block<T>(g: &Geom) -> usize {
    let group = g.taps * CW * std::mem::size_of::<T>();
    (CHAN_BLOCK_BYTES / group).clamp(1, g.cp.max(1))
}

/// The channel tiles of one image, walked by [`walk_panels`] in [`CW`]-row panels: the
/// positions in tiles of at most [`CN`] (as even as the count allows); each panel sums
/// a chunk's tiles K block by K block ([`chan_block`] channel groups, each tile's
/// chains resumed from the last block's), then the chunk's outputs go through the
/// epilogue.
fn sweep_chans<T: Copy + Default>(
    sw: &Sweep<'_, T>,
    isa: Isa,
    s: &ConvShape,
    w: &[T],
    yb: &mut [f32],
    epi: &Epilogue<'_>,
) {
    let (g, ohw, wq, ow) = (sw.g, s.oh * s.ow, sw.g.wq, s.ow);
    let ((c_lo, c_hi), (p_lo, p_hi)) = (sw.chans, sw.cols);
    let n = p_hi - p_lo;
    let tiles = n.div_ceil(CN);
    // Tile t covers positions p_lo + start(t)..p_lo + start(t + 1).
    let start = |t: usize| t * n / tiles;
    // Plane position of output position q.
    let plane_pos = |q: usize| (q / ow - sw.oh_lo) * wq + q % ow;
    let kb = chan_block::<T>(g);
    let mut acc = [0.0f32; CHUNK_TILES * CN * CW];
    let mut pos = [[0usize; CN]; CHUNK_TILES];
    walk_panels(
        (g, (c_lo, c_hi)),
        w,
        CW,
        (0, tiles),
        &mut |step| match step {
            Walk::Panel { pi, a, rows, tiles } => {
                let group = a.len() / g.cp.max(1);
                for (i, t) in (tiles.0..tiles.1).enumerate() {
                    let q_lo = p_lo + start(t);
                    for (j, d) in pos[i][..start(t + 1) - start(t)].iter_mut().enumerate() {
                        *d = plane_pos(q_lo + j);
                    }
                }
                for p0 in (0..g.cp).step_by(kb) {
                    let p1 = (p0 + kb).min(g.cp);
                    let a_k = &a[p0 * group..p1 * group];
                    let b_k = &sw.planes[p0 * sw.ps..];
                    for (i, t) in (tiles.0..tiles.1).enumerate() {
                        let m = start(t + 1) - start(t);
                        let c = &mut acc[i * CN * CW..][..m * CW];
                        let (offs, cps) = (sw.offs, sw.ps);
                        (sw.k.tiles.chans)(a_k, b_k, &pos[i][..m], offs, p1 - p0, cps, c, p0 > 0);
                    }
                }
                for (i, t) in (tiles.0..tiles.1).enumerate() {
                    let (q_lo, q_hi) = (p_lo + start(t), p_lo + start(t + 1));
                    let tile = &acc[i * CN * CW..];
                    for r in rows.0..rows.1 {
                        let dst = &mut yb[r * ohw + q_lo..r * ohw + q_hi];
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d = tile[j * CW + r - pi * CW];
                        }
                    }
                }
            }
            Walk::Chunk { rows, tiles } => {
                let (q_lo, q_hi) = (p_lo + start(tiles.0), p_lo + start(tiles.1));
                if !epi.is_empty() {
                    epi.apply(isa, yb, ohw, rows.0, rows.1 - rows.0, q_lo, q_hi - q_lo);
                }
            }
        },
    );
}

/// The portable f32 tile ([`ConvTile`]): each output a chain of fused multiply-adds
/// from zero, channel by channel and within a channel tap by tap (the AVX-512 tile's
/// order, and im2col's K order `(ci, kh, kw)`).
pub fn conv_tile_f32(
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let (a, taps) = (&a[..offs.len() * cp * MR], offs.len());
    for r in 0..MR {
        for j in 0..TW {
            let mut s = 0.0f32;
            for p in 0..cp {
                for (t, &o) in offs.iter().enumerate() {
                    s = a[(p * taps + t) * MR + r].mul_add(b[o + p * cps + j], s);
                }
            }
            c[r * ldc + j] = s;
        }
    }
}

/// The portable f32 channel tile ([`ChanTile`]): each output the chain of fused
/// multiply-adds of [`conv_tile_f32`], so both tilings give the same bits.
#[allow(clippy::too_many_arguments)]
pub fn conv_ctile_f32(
    a: &[f32],
    b: &[f32],
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    acc: bool,
) {
    let (a, taps) = (&a[..offs.len() * cp * CW], offs.len());
    for (j, &q) in pos.iter().enumerate() {
        for r in 0..CW {
            let mut s = if acc { c[j * CW + r] } else { 0.0f32 };
            for p in 0..cp {
                for (t, &o) in offs.iter().enumerate() {
                    s = a[(p * taps + t) * CW + r].mul_add(b[q + o + p * cps], s);
                }
            }
            c[j * CW + r] = s;
        }
    }
}

/// f32 plane elements: `dst[j] = lo[j * stride]` (one channel per element).
pub fn pack_f32(lo: &[f32], _hi: Option<&[f32]>, stride: usize, dst: &mut [f32]) {
    if stride == 1 {
        dst.copy_from_slice(&lo[..dst.len()]);
    } else {
        crate::kernels::body::conv::strided_copy(lo, stride, dst);
    }
}

/// True when the process's kernel table computes conv `s` direct in f32: the table has
/// an f32 tile (not the portable one, which serves as the reference), the conv takes it
/// ([`applies`], or [`fits`] with a depth of [`MIN_DEPTH_S1`] at stride 1) and is not a
/// 1x1 stride-1 unpadded conv (a GEMM reading its input in
/// place). One thread, on ResNet-like and YOLO shapes: 0.88-0.98x the im2col time
/// (e.g. 96->192 3x3/2 at 52x52 2115 against 2306 us).
///
/// Also, at most a tenth more outputs computed than kept under one of the tilings (the
/// row tile computes the columns past the output width and the last tile's tail, the
/// channel tile rounds the channels up to [`CW`]): a 13x13 output of 192 channels
/// computes 224 positions for 169 in row tiles, where im2col's panels compute 176
/// (1296 us direct, 1281 im2col); in channel tiles it computes 169. Which tiling then
/// runs is [`tiling`]'s choice (a shallow conv may run on the row tiles although the
/// channel tile computes fewer outputs: it is still the faster).
pub fn f32_wins(s: &ConvShape) -> bool {
    let t = crate::kernels::isa::table();
    let pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
    let kept = s.c_out.div_ceil(MR) * MR * s.oh * s.ow;
    t.conv_tiles.is_some()
        && t.isa != Isa::Portable
        && !pointwise
        && fits(s)
        && (depth(s, 1) >= MIN_DEPTH || (s.sh == 1 && s.sw == 1 && depth(s, 1) >= MIN_DEPTH_S1))
        && work(s, 1, Tiling::Rows).min(work(s, 1, Tiling::Chans)) * 10 <= kept * 11
}

/// The portable f32 tiles (the reference the SIMD ones are tested against).
pub const PORTABLE_F32: Tiles<f32> = Tiles {
    rows: conv_tile_f32,
    pairs: None,
    chans: conv_ctile_f32,
};

/// [`conv_direct`] in f32 through `isa`'s tiles (the portable ones where `isa`'s table
/// has none); `w` from [`pack_weights`] for `tiling` with one channel per element.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_f32(
    isa: Isa,
    tiling: Tiling,
    s: &ConvShape,
    w: &[f32],
    x: &[f32],
    y: &mut [f32],
    chans: (usize, usize),
    cols: (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    conv_direct(
        &f32_kernels(isa),
        tiling,
        isa,
        s,
        w,
        x,
        y,
        chans,
        cols,
        epi,
        scratch,
    );
}

/// Column taps folded into channels ("kw unfolding") for the wide run of convs with too
/// few input channels to fill its K steps (an RGB stem: 3 channels would be padded to
/// 32): the conv of `s` equals the conv of [`unfolded_shape`] on [`unfold_input`]'s
/// tensor with [`unfold_weights`]' weights, whose channel `c * KW + v` is input channel
/// `c` read at tap column `v` (width the output's, no column stride, pad or dilation).
/// True when `s` is such a conv: dense, it [`fits`], fewer than [`WIDE_MIN_CIN`] input
/// channels but at least that many unfolded ones (ResNet's 3->64 7x7/2 stem: 21, 966 us
/// on AMX against 1636 direct f32; MobileNetV2's 3->32 3x3/2 stem would have 9, padded
/// to 16: 337 us against 267 in f32).
pub fn unfold_applies(s: &ConvShape) -> bool {
    fits(s) && s.c_in < WIDE_MIN_CIN && s.c_in * s.kw >= WIDE_MIN_CIN
}

/// The shape of `s` with its tap columns folded into the channels (see
/// [`unfold_applies`]).
pub fn unfolded_shape(s: &ConvShape) -> ConvShape {
    ConvShape {
        c_in: s.c_in * s.kw,
        w: s.ow,
        kw: 1,
        sw: 1,
        dw: 1,
        pw: 0,
        ..s.clone()
    }
}

/// Floats of [`unfold_input`]'s tensor for `s`.
pub fn unfolded_len(s: &ConvShape) -> usize {
    s.n * s.c_in * s.kw * s.h * s.ow
}

/// `x` (`[N, Cin, H, W]`) with its tap columns folded into channels:
/// `dst[b][c * KW + v][r][j] = x[b][c][r][j * sw + v * dw - pw]` (zero outside the
/// image), [`unfolded_len`] floats.
pub fn unfold_input(s: &ConvShape, x: &[f32], dst: &mut [f32]) {
    let (hw, ow) = (s.h * s.w, s.ow);
    for (i, plane) in dst[..unfolded_len(s)]
        .chunks_exact_mut(s.h * ow)
        .enumerate()
    {
        let (bc, v) = (i / s.kw, i % s.kw);
        let src = &x[bc * hw..][..hw];
        let off = v * s.dw;
        // Output columns j whose input column j * sw + off - pw is inside the image.
        let j_lo = s.pw.saturating_sub(off).div_ceil(s.sw).min(ow);
        let j_hi = if s.w + s.pw > off {
            ((s.w + s.pw - off - 1) / s.sw + 1).clamp(j_lo, ow)
        } else {
            j_lo
        };
        for (r, row) in plane.chunks_exact_mut(ow).enumerate() {
            row[..j_lo].fill(0.0);
            row[j_hi..].fill(0.0);
            if j_lo < j_hi {
                let start = r * s.w + j_lo * s.sw + off - s.pw;
                let line = &src[start..(r + 1) * s.w];
                crate::kernels::body::conv::strided_copy(line, s.sw, &mut row[j_lo..j_hi]);
            }
        }
    }
}

/// Weights `w` (`[Cout, Cin, KH, KW]`) as the unfolded conv's (`[Cout, Cin * KW, KH, 1]`).
pub fn unfold_weights(s: &ConvShape, w: &[f32]) -> Vec<f32> {
    let (kh, kw) = (s.kh, s.kw);
    let mut out = vec![0.0; s.c_out * s.c_in * kw * kh];
    for oc in 0..s.c_out {
        for c in 0..s.c_in {
            for u in 0..kh {
                for v in 0..kw {
                    let src = ((oc * s.c_in + c) * kh + u) * kw + v;
                    out[((oc * s.c_in + c) * kw + v) * kh + u] = w[src];
                }
            }
        }
    }
    out
}

//! Kernel tables: one [`KernelTable`] of function pointers per instruction set (AVX-512
//! and AVX2/FMA on x86-64, portable everywhere), chosen once by runtime CPU detection.
//!
//! Layering: the tables are built from the generic bodies in `kernels::body` (compiled
//! once per ISA, inside `#[target_feature]` functions for the SIMD tables) and from
//! hand-written intrinsics kernels; the families (`conv`, `gemm`, `eltwise`, ...) reach
//! every ISA-specific routine through a table and never the other way round.
//!
//! Invariant: a SIMD table is only handed out ([`table`], [`tables`], [`Isa::table`])
//! after `is_x86_feature_detected!` confirmed its features, and its entries are private
//! wrappers reachable only through it; that is what makes calling the
//! `#[target_feature]` functions inside them sound.

use super::body::conv::ConvShape;
use super::body::eltwise::Bcast;
use super::body::epilogue::Epilogue;
use super::body::pool::PoolShape;
use super::body::resize::LinearTap;
use crate::ir::{BinaryOp, UnaryOp};
use crate::kernels::conv::{OutBlock, PointRows, WinoGeom};
use std::sync::OnceLock;

/// Builds a safe table entry `$name` that runs `$body` compiled with the target features
/// `$feat` enabled (the SIMD tables' generic bodies). Sound only for entries reachable
/// solely through a table handed out after detecting `$feat` (the invariant above).
#[cfg(target_arch = "x86_64")]
macro_rules! feature_build {
    ($feat:literal, $vis:vis $name:ident, $body:path, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn build($($arg: $ty),*) -> $ret {
                $body($($arg),*)
            }
            // SAFETY: this wrapper is reachable only through a table that is handed out
            // after detecting `$feat` (see the module invariant); the body indexes safely.
            unsafe { build($($arg),*) }
        }
    };
    ($feat:literal, $vis:vis $name:ident, $body:path, ($($arg:ident: $ty:ty),*)) => {
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) {
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn build($($arg: $ty),*) {
                $body($($arg),*)
            }
            // SAFETY: this wrapper is reachable only through a table that is handed out
            // after detecting `$feat` (see the module invariant); the body indexes safely.
            unsafe { build($($arg),*) }
        }
    };
}

pub(crate) mod portable;

/// True when the SIMD tables' math (`x86_64_avx512_math`, `x86_64_fma_math`) computes
/// `op` in registers; the other ops go through the generic bodies.
#[cfg(target_arch = "x86_64")]
fn has_lane_form(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Relu
            | UnaryOp::Clip { .. }
            | UnaryOp::Identity
            | UnaryOp::Sigmoid
            | UnaryOp::Silu
            | UnaryOp::HardSwish
            | UnaryOp::HardSigmoid { .. }
            | UnaryOp::LeakyRelu { .. }
            | UnaryOp::Exp
            | UnaryOp::Gelu { tanh_approx: false }
    )
}

/// True when every post-op of an epilogue has a lane form (unary ops per
/// [`has_lane_form`]; affine, PReLU and residual adds always).
#[cfg(target_arch = "x86_64")]
fn post_has_lane_form(post: &[super::body::unary::PostOpRt]) -> bool {
    use super::body::unary::PostOpRt;
    post.iter().all(|p| match p {
        PostOpRt::Unary(u) => has_lane_form(*u),
        PostOpRt::Affine { .. } | PostOpRt::PRelu { .. } | PostOpRt::AddInput { .. } => true,
    })
}

/// Softmax's optional row to add: `None` when `add` is empty, else its first `n` floats.
#[cfg(target_arch = "x86_64")]
fn softmax_add_row(add: &[f32], n: usize) -> Option<&[f32]> {
    (!add.is_empty()).then(|| &add[..n])
}
#[cfg(target_arch = "x86_64")]
mod x86_64_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_64_avx512_math;
#[cfg(target_arch = "x86_64")]
mod x86_64_cols;
#[cfg(target_arch = "x86_64")]
mod x86_64_direct;
#[cfg(target_arch = "x86_64")]
mod x86_64_dw;
#[cfg(target_arch = "x86_64")]
mod x86_64_dw_block;
#[cfg(target_arch = "x86_64")]
mod x86_64_dw_block_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_64_dw_flat;
#[cfg(target_arch = "x86_64")]
mod x86_64_dw_nhwc;
#[cfg(target_arch = "x86_64")]
mod x86_64_fma;
#[cfg(target_arch = "x86_64")]
mod x86_64_fma_math;
#[cfg(target_arch = "x86_64")]
mod x86_64_maxpool;
#[cfg(target_arch = "x86_64")]
mod x86_64_maxpool_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_64_qdw_block;
#[cfg(target_arch = "x86_64")]
mod x86_64_qdw_bytes;
#[cfg(target_arch = "x86_64")]
mod x86_64_transpose;
#[cfg(target_arch = "x86_64")]
mod x86_64_wino512;
#[cfg(target_arch = "x86_64")]
mod x86_64_wino_avx2;

/// Rows of one GEMM micro-tile (and of one packed A panel).
pub const MR: usize = 6;
/// Columns of one GEMM micro-tile (and of one packed B panel).
pub const NR: usize = 16;
/// Columns of the half-width micro-tile (`mm_half`).
pub const HALF: usize = NR / 2;
/// Rows (output pixels) one `KernelTable::mm_tile_segs` call takes at most: twice a
/// GEMM tile's, so that a table may hold twelve rows of one strip in registers (an image
/// stem of 16 channels: twelve FMA chains where six cannot keep two FMA ports busy).
pub const SEGS_ROWS: usize = 2 * MR;
/// Depth of one GEMM K block.
pub const KC: usize = 256;
/// Widest ragged last strip of C that `mm_cols` computes (wider ones take a tile).
pub const COLS_MAX: usize = 4;

/// Instruction set of a kernel table; a plan stores it and reaches the table with
/// [`Isa::table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, any target.
    Portable,
    /// x86-64 AVX2 with FMA.
    Avx2Fma,
    /// x86-64 AVX-512 F/BW/VL/DQ with VNNI (and AVX2, FMA).
    Avx512,
}

impl Isa {
    /// The table of this instruction set; the portable one when this CPU lacks it.
    #[inline]
    pub fn table(self) -> &'static KernelTable {
        match self {
            Isa::Portable => &portable::TABLE,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => x86_64_fma::table().unwrap_or(&portable::TABLE),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => x86_64_avx512::table().unwrap_or(&portable::TABLE),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2Fma | Isa::Avx512 => &portable::TABLE,
        }
    }
}

/// A conv epilogue fused into the store of one full MR x NR tile (table entries
/// `mm_tile_epi` / `mm_tile_rows_epi` / `mm_tile_strided_epi`): `v = tile (+ C when
/// accumulating) + bias[r]` (or `+ col_bias[j]` when the channel is the column), then
/// `+ residual` (MR rows of NR at the tile's stride, from the tile's origin), then
/// `min(max(v, lo), hi)` when `clamp` is set (ReLU is `(0, inf)`). The same lanes as the
/// `epilogue` entry run after the tile.
#[derive(Clone, Copy)]
pub struct TileEpi<'a> {
    /// Bias of each of the tile's rows (0 without bias).
    pub bias: [f32; MR],
    /// The bias of the tile's columns (at least [`NR`] floats) when the channel is the
    /// column (Gemm / MatMul); `bias` is then unused.
    pub col_bias: Option<&'a [f32]>,
    /// The residual at the tile's origin, laid out like C.
    pub residual: Option<&'a [f32]>,
    /// `(lo, hi)` of a ReLU / Clip.
    pub clamp: Option<(f32, f32)>,
}

impl TileEpi<'_> {
    /// Panics unless the column bias (if any) holds `cols` floats and the residual (if
    /// any) [`MR`] rows of `cols` at stride `ldc`: the fused tiles ([`NR`] columns, the
    /// half tile [`HALF`]) check it once before their unchecked stores.
    pub fn assert_fits(&self, ldc: usize, cols: usize) {
        if let Some(b) = self.col_bias {
            assert!(b.len() >= cols, "tile epilogue: column bias too short");
        }
        if let Some(r) = self.residual {
            assert!(
                r.len() >= (MR - 1) * ldc + cols,
                "tile epilogue: residual too short"
            );
        }
    }
}

/// How [`KernelTable::mm_tiles_strided`] goes from one full tile to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileWalk {
    /// Down a column of C: the next tile's A rows and C rows are [`MR`] further, B is
    /// the same panel.
    Down,
    /// Along a row of C: the same A rows, the next packed B panel (`kc * NR` floats
    /// further), C [`NR`] columns further; the walk's tiles along each of `rows`
    /// consecutive rows of tiles (the next row's A panel [`MR`] rows further, the same B
    /// panels, C [`MR`] rows further), so that one call covers a block of C.
    Right {
        /// Rows of tiles (at least 1).
        rows: usize,
    },
}

impl TileWalk {
    /// Rows of tiles the walk covers (1 down a column).
    pub fn rows(self) -> usize {
        match self {
            TileWalk::Down => 1,
            TileWalk::Right { rows } => rows,
        }
    }
}

/// The fused epilogue of a walk of tiles ([`KernelTable::mm_tiles_strided`]), given at
/// the first tile and moved along with it.
#[derive(Debug, Clone, Copy)]
pub struct WalkEpi<'a> {
    /// Bias of each row of C from the walk's first row, when the channel is the row.
    pub row_bias: Option<&'a [f32]>,
    /// Bias of each column of C from the walk's first column, when the channel is the
    /// column.
    pub col_bias: Option<&'a [f32]>,
    /// The residual at the first tile's origin, laid out like C.
    pub residual: Option<&'a [f32]>,
    /// `(lo, hi)` of a ReLU / Clip.
    pub clamp: Option<(f32, f32)>,
}

impl<'a> WalkEpi<'a> {
    /// The epilogue of the walk's row of tiles `p` ([`TileWalk::Right`]: its first
    /// tile is [`MR`] `* p` rows of C down).
    #[inline(always)]
    pub fn row(&self, p: usize, ldc: usize) -> WalkEpi<'a> {
        WalkEpi {
            row_bias: self.row_bias.map(|b| &b[p * MR..]),
            col_bias: self.col_bias,
            residual: self.residual.map(|r| &r[p * MR * ldc..]),
            clamp: self.clamp,
        }
    }

    /// The epilogue of tile `t` of a walk with steps `st` (any steps for the first).
    #[inline(always)]
    pub fn tile(&self, t: usize, st: &WalkSteps) -> TileEpi<'a> {
        let mut bias = [0.0; MR];
        if let Some(rb) = self.row_bias {
            bias.copy_from_slice(&rb[t * st.row_bias..t * st.row_bias + MR]);
        }
        TileEpi {
            bias,
            col_bias: self.col_bias.map(|cb| &cb[t * st.col_bias..]),
            residual: self.residual.map(|r| &r[t * st.c..]),
            clamp: self.clamp,
        }
    }
}

/// The A operand of a walk of tiles: packed panels of [`MR`] rows (`mm_tile`'s, one
/// after another), or rows read in place at stride `lda` (`mm_tile_strided`'s).
#[derive(Debug, Clone, Copy)]
pub enum WalkA<'a> {
    /// Packed A panels, the walk's first at the start.
    Packed(&'a [f32]),
    /// Rows in place, the walk's first row at the start.
    Rows {
        /// The rows.
        a: &'a [f32],
        /// Row stride.
        lda: usize,
    },
}

/// Floats each operand moves from one tile of a walk to the next, and the extent of
/// `count` tiles; panics unless every operand of the walk holds them (the tables' walk
/// kernels check this once before their unchecked loads and stores).
#[derive(Debug, Clone, Copy, Default)]
pub struct WalkSteps {
    /// A step (in-place rows).
    pub a: usize,
    /// B step (packed panels).
    pub b: usize,
    /// C (and residual) step.
    pub c: usize,
    /// Row-bias step.
    pub row_bias: usize,
    /// Column-bias step.
    pub col_bias: usize,
    /// A step from one row of tiles to the next ([`TileWalk::Right`]).
    pub a_row: usize,
}

impl WalkSteps {
    /// The steps of `walk` for depth `kc` and strides `lda`, `ldc`, checked against the
    /// operands of `count` tiles.
    #[allow(clippy::too_many_arguments)]
    pub fn checked(
        walk: TileWalk,
        count: usize,
        kc: usize,
        a: WalkA<'_>,
        b: &[f32],
        (c, ldc): (&[f32], usize),
        e: Option<&WalkEpi<'_>>,
    ) -> WalkSteps {
        // A's step down and the floats one tile reads.
        let (a, a_down, a_tile) = match a {
            WalkA::Packed(a) => (a, MR * kc, MR * kc),
            WalkA::Rows { a, lda } => (a, MR * lda, (MR - 1) * lda + kc),
        };
        let st = match walk {
            TileWalk::Down => WalkSteps {
                a: a_down,
                b: 0,
                c: MR * ldc,
                row_bias: MR,
                col_bias: 0,
                a_row: 0,
            },
            TileWalk::Right { .. } => WalkSteps {
                a: 0,
                b: kc * NR,
                c: NR,
                row_bias: 0,
                col_bias: NR,
                a_row: a_down,
            },
        };
        let last = count.saturating_sub(1);
        let rows = walk.rows();
        assert!(
            count > 0 && rows > 0 && ldc >= NR,
            "tile walk: no tiles or short C rows"
        );
        // The last row of tiles' offsets in A, C (and the residual) and the row bias.
        let (a_last, c_last, rb_last) =
            ((rows - 1) * a_down, (rows - 1) * MR * ldc, (rows - 1) * MR);
        assert!(
            a.len() >= a_last + last * st.a + a_tile,
            "tile walk: short A"
        );
        assert!(b.len() >= last * st.b + kc * NR, "tile walk: short B");
        let c_len = c_last + last * st.c + (MR - 1) * ldc + NR;
        assert!(c.len() >= c_len, "tile walk: short C");
        if let Some(e) = e {
            assert!(
                e.residual.is_none_or(|r| r.len() >= c_len),
                "tile walk: short residual"
            );
            let rb = rb_last + last * st.row_bias + MR;
            assert!(
                e.row_bias.is_none_or(|b| b.len() >= rb),
                "tile walk: short row bias"
            );
            let cb = last * st.col_bias + NR;
            assert!(
                e.col_bias.is_none_or(|b| b.len() >= cb),
                "tile walk: short column bias"
            );
        }
        st
    }
}

/// Panics unless a 6x16 tile's C (and the residual of `e`) hold [`MR`] rows of [`NR`]
/// at stride `ldc` and its A panel `kc` columns of [`MR`]: the SIMD tables' tiles check
/// this once before their unchecked loads and stores.
#[cfg(target_arch = "x86_64")]
fn assert_tile_fits(kc: usize, a: &[f32], c: &[f32], ldc: usize, e: Option<&TileEpi<'_>>) {
    assert!(a.len() >= kc * MR, "tile: short A panel");
    assert!(ldc >= NR && c.len() >= (MR - 1) * ldc + NR, "tile: short C");
    e.inspect(|e| e.assert_fits(ldc, NR));
}

/// Defines a SIMD table's `mm_cols` entry: checks the operands once
/// ([`assert_cols_fit`]) and runs the module's `$k::<N, T>` (`N` units of `$per` A
/// panels each: one panel, or a pair; `T` columns) over groups of at most 8, 6, 4 or 3
/// units for 1 to 4 columns, the most whose sums fit the registers (the same dispatch
/// in every table; only the kernel differs).
macro_rules! cols_entry {
    ($k:ident, $per:literal) => {
        /// `KernelTable::mm_cols`: this table's column kernel over groups of panels.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn mm_cols(
            kc: usize,
            a: &[f32],
            panels: usize,
            b: &[f32],
            t: usize,
            c: &mut [f32],
            ldc: usize,
            rows: usize,
            acc: bool,
        ) {
            super::assert_cols_fit(kc, a, panels, b, t, c, ldc, rows);
            let most = [8, 6, 4, 3][t - 1] * $per;
            let mut q = 0;
            while q < panels {
                let np = most.min(panels - q);
                let r = (rows - q * MR).min(np * MR);
                type Kernel =
                    unsafe fn(usize, *const f32, *const f32, *mut f32, usize, usize, bool);
                let kernel: Kernel = match (t, np.div_ceil($per)) {
                    (1, 1) => $k::<1, 1>,
                    (1, 2) => $k::<2, 1>,
                    (1, 3) => $k::<3, 1>,
                    (1, 4) => $k::<4, 1>,
                    (1, 5) => $k::<5, 1>,
                    (1, 6) => $k::<6, 1>,
                    (1, 7) => $k::<7, 1>,
                    (1, _) => $k::<8, 1>,
                    (2, 1) => $k::<1, 2>,
                    (2, 2) => $k::<2, 2>,
                    (2, 3) => $k::<3, 2>,
                    (2, 4) => $k::<4, 2>,
                    (2, 5) => $k::<5, 2>,
                    (2, _) => $k::<6, 2>,
                    (3, 1) => $k::<1, 3>,
                    (3, 2) => $k::<2, 3>,
                    (3, 3) => $k::<3, 3>,
                    (3, _) => $k::<4, 3>,
                    (_, 1) => $k::<1, 4>,
                    (_, 2) => $k::<2, 4>,
                    (_, _) => $k::<3, 4>,
                };
                // SAFETY: the table holding this entry is handed out only after its
                // features were detected; the panels q..q + np hold np * kc * MR floats
                // of `a`, B a kc x NR panel, and C rows q * MR..q * MR + r at stride ldc
                // with t columns (assert_cols_fit).
                unsafe {
                    kernel(
                        kc,
                        a.as_ptr().add(q * kc * MR),
                        b.as_ptr(),
                        c.as_mut_ptr().add(q * MR * ldc),
                        ldc,
                        r,
                        acc,
                    )
                };
                q += np;
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use cols_entry;

/// `Bᵀ x` of F(4x4, 3x3) on six vectors (`$x`, row `k` at `k`) with a table's vector
/// intrinsics (`$set1`, `$mul`, `$add`, `$sub`), as `winograd_body`'s `input_1d`
/// computes it: the same multiplications, additions and subtractions in the same order
/// (no fused multiply-add), so the same bits. Expands to the six result vectors; the
/// caller's features must cover the intrinsics.
#[cfg(target_arch = "x86_64")]
macro_rules! wino_input_1d {
    ($x:expr, $set1:ident, $mul:ident, $add:ident, $sub:ident) => {{
        let [d0, d1, d2, d3, d4, d5] = $x;
        let (two, four, five) = ($set1(2.0), $set1(4.0), $set1(5.0));
        [
            $add($sub($mul(four, d0), $mul(five, d2)), d4),
            $sub($add(d3, d4), $mul(four, $add(d1, d2))),
            $add($sub(d4, d3), $mul(four, $sub(d1, d2))),
            $add($sub(d4, d2), $mul(two, $sub(d3, d1))),
            $add($sub(d4, d2), $mul(two, $sub(d1, d3))),
            $add($sub($mul(four, d1), $mul(five, d3)), d5),
        ]
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use wino_input_1d;

/// Defines a SIMD table's `mm_tile_segs` entry: checks the operands once
/// ([`assert_segs_fit`]) and covers the rows and strips asked for with the pieces the
/// module's `segs_piece` computes (the same walk in every table; only the pieces
/// differ: how many rows and strips one piece holds in registers).
macro_rules! segs_entry {
    () => {
        /// `KernelTable::mm_tile_segs`: this table's pieces over the rows and strips.
        #[allow(clippy::too_many_arguments)]
        fn mm_tile_segs(
            kc: usize,
            a: &[f32],
            segs: &[usize],
            lda: usize,
            b: &[f32],
            c: &mut [f32],
            ldc: usize,
            (rows, strips): (usize, usize),
            e: Option<&TileEpi<'_>>,
        ) {
            super::assert_segs_fit(kc, a, segs, lda, b, c, ldc, (rows, strips), e);
            let panel = segs.len() * kc * NR;
            let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
            let mut q0 = 0;
            while q0 < strips {
                // Strip q0's column bias on.
                let eq = e.map(|e| TileEpi {
                    col_bias: e.col_bias.map(|cb| &cb[q0 * NR..]),
                    ..*e
                });
                let (mut r0, mut done) = (0, 1);
                while r0 < rows {
                    // SAFETY: the table holding this entry is handed out only after its
                    // features were detected; `assert_segs_fit` bounds every A row of
                    // every segment, the B panels of every strip, the rows and strips
                    // of C and the column bias, and a piece stays within the rows and
                    // strips it is given.
                    let (r, q) = unsafe {
                        segs_piece(
                            kc,
                            a.add(r0 * lda),
                            segs,
                            lda,
                            (b.add(q0 * panel), panel),
                            c.add(r0 * ldc + q0 * NR),
                            ldc,
                            (rows - r0, strips - q0),
                            eq.as_ref(),
                        )
                    };
                    r0 += r;
                    done = q;
                }
                q0 += done;
            }
        }
    };
}
pub(crate) use segs_entry;

/// Panics unless the operands of `mm_tile_segs` hold what it reads and writes (see
/// [`KernelTable::mm_tile_segs`]), so that kernels may index without checks afterwards.
#[allow(clippy::too_many_arguments)]
pub fn assert_segs_fit(
    kc: usize,
    a: &[f32],
    segs: &[usize],
    lda: usize,
    b: &[f32],
    c: &[f32],
    ldc: usize,
    (rows, strips): (usize, usize),
    e: Option<&TileEpi<'_>>,
) {
    assert!((1..=SEGS_ROWS).contains(&rows), "segs tile: {rows} rows");
    assert!(strips >= 1, "segs tile: no strip");
    for &s in segs {
        assert!(
            s + (rows - 1) * lda + kc <= a.len(),
            "segs tile: A segment past its source"
        );
    }
    assert!(
        b.len() >= strips * segs.len() * kc * NR,
        "segs tile: short B panels"
    );
    let cols = strips * NR;
    assert!(
        ldc >= cols && c.len() >= (rows - 1) * ldc + cols,
        "segs tile: short C"
    );
    if let Some(e) = e {
        assert!(e.residual.is_none(), "segs tile: no residual");
        assert!(
            e.col_bias.is_none_or(|b| b.len() >= cols),
            "segs tile: a column bias of strips x NR floats"
        );
    }
}

/// Panics unless the operands of `mm_part` (B packed: `panels` panels of `kc * NR`
/// floats) hold what it reads and writes (see [`KernelTable::mm_part`]); every table's
/// entry calls this first.
fn assert_panels_part_fits(
    kc: usize,
    (a, b): (&[f32], &[f32]),
    panels: usize,
    c: &[f32],
    ldc: usize,
    rows: usize,
) {
    assert_part_fits(kc, a, c, ldc, rows, panels);
    assert!(b.len() >= panels * kc * NR, "part tile: short B");
}

/// Panics unless the operands of a part tile over `panels` panels hold what it reads
/// and writes, but for B (checked by the caller: packed panels, see
/// [`assert_panels_part_fits`], or a [`RowBlock`]).
fn assert_part_fits(kc: usize, a: &[f32], c: &[f32], ldc: usize, rows: usize, panels: usize) {
    assert!((1..MR).contains(&rows), "part tile: {rows} rows");
    assert!(a.len() >= kc * MR, "part tile: short A");
    assert!(
        ldc >= panels * NR && c.len() >= (rows - 1) * ldc + panels * NR,
        "part tile: short C"
    );
}

/// Panics unless the operands of `mm_cols` hold what it reads and writes (see
/// [`KernelTable::mm_cols`]).
#[allow(clippy::too_many_arguments)]
fn assert_cols_fit(
    kc: usize,
    a: &[f32],
    panels: usize,
    b: &[f32],
    t: usize,
    c: &[f32],
    ldc: usize,
    rows: usize,
) {
    assert!((1..=COLS_MAX).contains(&t) && ldc >= t, "cols: bad width");
    assert!(
        rows > 0 && rows.div_ceil(MR) == panels,
        "cols: rows outside the panels"
    );
    assert!(
        a.len() >= panels * kc * MR && b.len() >= kc * NR,
        "cols: short A or B"
    );
    assert!(c.len() >= (rows - 1) * ldc + t, "cols: short C");
}

/// Up to [`KC`] rows of an unpacked B block, each a slice of at least `len` floats
/// starting at the block's first column: B row `p`, column `jc + j` is `rows[p][j]`.
/// Lets the micro-kernel read B straight from its source (conv input planes, im2col
/// rows) instead of from packed panels.
pub struct RowBlock<'r, 'b> {
    pub(crate) rows: &'r [&'b [f32]],
    pub(crate) len: usize,
}

impl<'r, 'b> RowBlock<'r, 'b> {
    /// Checks once that every row holds `len` floats.
    pub fn new(rows: &'r [&'b [f32]], len: usize) -> RowBlock<'r, 'b> {
        assert!(rows.iter().all(|r| r.len() >= len), "short B row");
        RowBlock { rows, len }
    }

    /// Rows in the block.
    pub fn depth(&self) -> usize {
        self.rows.len()
    }
}

/// Every ISA-specific routine, for one instruction set. All entries are safe to call
/// with any arguments: they check the bounds they rely on.
// The entries are plain kernel signatures; naming each as a type alias would only hide them.
#[allow(clippy::type_complexity)]
pub struct KernelTable {
    /// Name shown by `vnpu info` (e.g. `avx2+fma`).
    pub name: &'static str,
    /// The instruction set.
    pub isa: Isa,
    /// GEMM micro-tile rows (the packed A panel height).
    pub mr: usize,
    /// GEMM micro-tile columns (the packed B panel width).
    pub nr: usize,
    /// Vector width in f32 lanes (the channel block of blocked layouts).
    pub lanes: usize,
    /// One MR x NR tile: `C = A_panel · B_panel` (or `C +=` when `acc`), depth `kc`;
    /// `a` holds `kc * MR` floats, `b` `kc * NR`, `c` MR rows of stride `ldc`.
    pub mm_tile: fn(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool),
    /// Like `mm_tile`, with B read from columns `off..off + NR` of the rows of a
    /// [`RowBlock`] (depth `b.depth()`).
    pub mm_tile_rows:
        fn(a: &[f32], b: &RowBlock<'_, '_>, off: usize, c: &mut [f32], ldc: usize, acc: bool),
    /// Row 0 of a micro-tile only (the GEMV case): `c[..NR] = sum_p a[p*MR] * b[p*NR..]`.
    pub mm_row: fn(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]),
    /// The left [`HALF`] columns of a micro-tile into an MR x NR tile `c` (a ragged last
    /// panel); the right half of `c` is left as is.
    pub mm_half: fn(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]),
    /// `mm_half` with A's `MR` rows read in place (row `r` at `a[r * lda..]`): the
    /// narrow last strip of a GEMM whose A is not packed (channels-last 1x1 convs of 24
    /// outputs), the same sums as `mm_half`.
    pub mm_half_strided: fn(kc: usize, a: &[f32], lda: usize, b: &[f32], c: &mut [f32]),
    /// `mm_half_strided` straight into C (rows at stride `ldc`, `HALF` columns, added to
    /// C when `acc`), through the fused epilogue `e` (if any; its column bias and
    /// residual need `HALF` columns): the last, half-width strip of a GEMM whose width
    /// is a multiple of `HALF` (24-channel projections), with the same bits.
    #[allow(clippy::type_complexity)]
    pub mm_half_strided_epi: Option<
        fn(
            kc: usize,
            a: &[f32],
            lda: usize,
            b: &[f32],
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: Option<&TileEpi<'_>>,
        ),
    >,
    /// Where the table has one: the last full strip and the half strip after it at once
    /// (`NR + HALF` columns: 24-channel projections), A in place as `mm_tile_strided`,
    /// B the two packed panels `b[0]`, `b[1]` (only the first `HALF` columns of the
    /// second used), straight into C (added when `acc`) through the fused epilogue `e`
    /// (its column bias and residual need `NR + HALF` columns): `mm_tile_strided_epi`
    /// then `mm_half_strided_epi`, bit for bit, with twice the independent sums.
    #[allow(clippy::type_complexity)]
    pub mm_tile24_strided_epi: Option<
        fn(
            kc: usize,
            a: &[f32],
            lda: usize,
            b: [&[f32]; 2],
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: Option<&TileEpi<'_>>,
        ),
    >,
    /// Rows `0..rows` (`1..MR`) of `panels` full-width micro-tiles side by side (a
    /// ragged last A panel against B panels of `kc * NR` floats one after another, C
    /// columns `0..panels * NR`) straight into `c` (stride `ldc`), or `c +=` when `acc`:
    /// each element summed in the order of `mm_tile`, so the bits are the tile's. Several
    /// panels a call give a row or two enough independent sums to cover the FMA latency.
    #[allow(clippy::type_complexity)]
    pub mm_part: fn(
        kc: usize,
        a: &[f32],
        b: &[f32],
        panels: usize,
        c: &mut [f32],
        ldc: usize,
        rows: usize,
        acc: bool,
    ),
    /// Like `mm_part`, with B read from columns `off..off + NR` of the rows of a
    /// [`RowBlock`] (depth `b.depth()`), as `mm_tile_rows`.
    pub mm_part_rows: fn(
        a: &[f32],
        b: &RowBlock<'_, '_>,
        off: usize,
        c: &mut [f32],
        ldc: usize,
        rows: usize,
        acc: bool,
    ),
    /// Columns `0..t` (`1..=COLS_MAX`) of the C rows of `panels` consecutive packed A
    /// panels (panel `q` at `a[q * kc * MR..]`) times one packed B panel `b`: rows
    /// `0..rows` of `c` (stride `ldc`; `rows` ends in the last panel), or `c +=` when
    /// `acc`. Each element is summed in the order of `mm_tile`, so the bits are those of
    /// a tile; vectors run down the panels' rows, so a ragged last strip of a few columns
    /// costs its own columns, not a whole (or half) tile's.
    pub mm_cols: fn(
        kc: usize,
        a: &[f32],
        panels: usize,
        b: &[f32],
        t: usize,
        c: &mut [f32],
        ldc: usize,
        rows: usize,
        acc: bool,
    ),
    /// The 2-D transpose of 32-bit elements: `dst[c * ds + r] = src[r * ss + c]` for
    /// `r < rows`, `c < cols` (the inner transposes of Transpose and layout copies).
    pub transpose32:
        fn(src: &[u32], ss: usize, dst: &mut [u32], ds: usize, rows: usize, cols: usize),
    /// The strided gather of 32-bit elements: `dst[i] = src[i * stride]` (rows of
    /// Slice and other layout copies with a step; bit-exact moves).
    pub gather_words: fn(src: &[u32], stride: usize, dst: &mut [u32]),
    /// The fused epilogue on rows `i0..i0+mr`, columns `j0..j0+nr` of C (stride `ldc`).
    pub epilogue:
        fn(e: &Epilogue<'_>, c: &mut [f32], ldc: usize, i0: usize, mr: usize, j0: usize, nr: usize),
    /// An element-wise function in place.
    pub unary: fn(op: UnaryOp, x: &mut [f32]),
    /// An f32 binary op with broadcasting, output rows `lo..hi` of the outer dim.
    pub binary_f32:
        fn(op: BinaryOp, bc: &Bcast, a: &[f32], b: &[f32], out: &mut [f32], lo: usize, hi: usize),
    /// One depthwise conv plane (scratch: `depthwise_scratch_len` floats).
    pub depthwise_plane:
        fn(s: &ConvShape, w: &[f32], plane: &[f32], out: &mut [f32], scratch: &mut [f32]),
    /// Max pooling of one plane.
    pub max_pool_plane: fn(s: &PoolShape, x: &[f32], y: &mut [f32]),
    /// Max pooling over channels-last images: output rows `rows` of `N * OH` (`s.planes`
    /// = N) of `c` channels into `y` (those rows).
    pub max_pool_nhwc: fn(s: &PoolShape, c: usize, x: &[f32], y: &mut [f32], rows: (usize, usize)),
    /// `y[i] += sum_k w[i * ldw + k] * x[k]` for every row `i < y.len()` (`w` row-major
    /// with row stride `ldw >= x.len()`): the recurrent GEMV of RNN cells.
    pub gemv_acc: fn(w: &[f32], ldw: usize, x: &[f32], y: &mut [f32]),
    /// `x[i] = sigmoid(x[i])` in place (vectorised, same accuracy as the scalar form).
    pub sigmoid: fn(x: &mut [f32]),
    /// `x[i] = tanh(x[i])` in place (vectorised, within 1e-6 absolute).
    pub tanh: fn(x: &mut [f32]),
    /// The int8 kernels of this instruction set (`kernels::quant`).
    pub quant: &'static crate::kernels::quant::QuantTable,
    /// Softmax (LogSoftmax when `log`) of the contiguous row `x + add` into
    /// `y[..x.len()]`; `add` is empty (nothing added) or at least as long as `x` (a mask
    /// row, added in f32 first).
    pub softmax_row: fn(x: &[f32], add: &[f32], y: &mut [f32], log: bool),
    /// Softmax's first two passes over the row `x + add` (`add` as for `softmax_row`):
    /// `y[i] = e^(x[i] + add[i] - max)`; returns `(max, sum)`: the max (NaN ignored,
    /// `-inf` for an empty row) and the sum, which `softmax_row` would divide by
    /// (`y * (1 / sum)` are its bits).
    pub exp_row: fn(x: &[f32], add: &[f32], y: &mut [f32]) -> (f32, f32),
    /// LayerNorm of the contiguous row `x` into `y[..x.len()]` with per-element `scale`
    /// and `bias` (empty for 0).
    pub layer_norm_row: fn(x: &[f32], y: &mut [f32], scale: &[f32], bias: &[f32], eps: f32),
    /// Depthwise conv output channel `c` into `y` (`[C, OH*OW]`) with the epilogue fused,
    /// through this table's hand-written direct kernels where it has them for the shape
    /// (AVX2: 3x3 / 5x5, stride 1 / 2, dilation 1), else the generic body (scratch:
    /// `depthwise_scratch_len` floats).
    pub depthwise_fused: fn(
        s: &ConvShape,
        w: &[f32],
        plane: &[f32],
        y: &mut [f32],
        c: usize,
        epi: &Epilogue<'_>,
        scratch: &mut [f32],
    ),
    /// Where the table has one: depthwise conv of channels `c0..c0 + nc` (`1..=
    /// body::dw_block::BLOCK_LANES`) of one image `xb` (`[C, H, W]`, taps `w` `[C, KH*KW]`)
    /// into `yb` (`[C, OH*OW]`) across channels (small planes), with the epilogue
    /// (scratch: `body::dw_block::block_scratch_len` floats).
    pub depthwise_block: Option<
        fn(
            s: &ConvShape,
            w: &[f32],
            xb: &[f32],
            yb: &mut [f32],
            c0: usize,
            nc: usize,
            epi: &Epilogue<'_>,
            scratch: &mut [f32],
        ),
    >,
    /// Depthwise conv over channels-last images: output rows `r0..r1` (of `N * OH`) of
    /// `y` (`[N][OH][OW][C]`) from `x` (`[N][H][W][C]`), taps `[KH*KW][C]`
    /// (`body::dw_nhwc::pack_taps`), per-channel `bias`, then `act` (`body::dw_nhwc`).
    #[allow(clippy::type_complexity)]
    pub depthwise_nhwc: fn(
        s: &ConvShape,
        taps: &[f32],
        bias: &[f32],
        act: super::body::dw_nhwc::Act,
        x: &[f32],
        y: &mut [f32],
        r0: usize,
        r1: usize,
    ),
    /// Where the table has one: `mm_tile` with the epilogue `e` fused into the store.
    #[allow(clippy::type_complexity)]
    pub mm_tile_epi: Option<
        fn(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool, e: &TileEpi<'_>),
    >,
    /// Where the table has one: `mm_tile_strided` with the epilogue `e` fused into the
    /// store.
    #[allow(clippy::type_complexity)]
    pub mm_tile_strided_epi: Option<
        fn(
            kc: usize,
            a: &[f32],
            lda: usize,
            b: &[f32],
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: &TileEpi<'_>,
        ),
    >,
    /// Where the table has one: `count` full tiles (operands of `mm_tile` or
    /// `mm_tile_strided` for the first, as `a` says), each as that tile (`e` None) or its
    /// `_epi` form computes it, the next one as `walk` says: one call for a column or
    /// row of tiles, so that small-depth products do not pay a dispatch a tile.
    /// `ahead` (may be empty) is B the caller reads next (the next strips' panels of
    /// weights that come from memory): a walk along a row brings it into L2 as it goes,
    /// spread over its steps; a hint, which a table may leave unused.
    #[allow(clippy::type_complexity)]
    pub mm_tiles: Option<
        fn(
            kc: usize,
            a: WalkA<'_>,
            b: &[f32],
            ahead: &[f32],
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: Option<&WalkEpi<'_>>,
            walk: TileWalk,
            count: usize,
        ),
    >,
    /// Where the table has one: two horizontally adjacent full tiles sharing one A
    /// panel, C of the second at `c[NR..]`: `mm_tile` (or `mm_tile_epi` with `e[q]`) on
    /// `b[0]` then `b[1]`, each element's sum in the same order, so bit for bit the two
    /// calls (twice the independent accumulators: for cores whose FMA latency times
    /// ports exceeds one tile's rows).
    #[allow(clippy::type_complexity)]
    pub mm_tile_pair: Option<
        fn(
            kc: usize,
            a: &[f32],
            b: [&[f32]; 2],
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: Option<[&TileEpi<'_>; 2]>,
        ),
    >,
    /// Where the table has one: `mm_tile_rows` with the epilogue `e` fused into the store.
    #[allow(clippy::type_complexity)]
    pub mm_tile_rows_epi: Option<
        fn(
            a: &[f32],
            b: &RowBlock<'_, '_>,
            off: usize,
            c: &mut [f32],
            ldc: usize,
            acc: bool,
            e: &TileEpi<'_>,
        ),
    >,
    /// Where the table has one: the int8 depthwise conv of channels `c0..c0 + nc` (`1..=
    /// quant::dw_exact::LANES`) of one image `xb` (`[C, H, W]` u8 with zero point `x_zp`,
    /// taps `w`) into `yb` (`[C, OH*OW]` u8) requantised by `rq`, on exact f32 sums
    /// (`kernels::quant::dw_exact`): the bits of the integer path. Returns false, writing
    /// nothing, where it does not take the block (sums that might not be exact, kernel
    /// taller than `dw_exact::KH_MAX`, scratch shorter than `dw_exact::scratch_len`).
    /// Records in `ties` the outputs within `quant::conv::TIE_EPS` of a rounding boundary.
    #[allow(clippy::type_complexity)]
    pub qdepthwise_block: Option<
        fn(
            s: &ConvShape,
            xb: &[u8],
            x_zp: u8,
            w: &crate::kernels::quant::dw_exact::DwTaps,
            rq: &crate::kernels::quant::Requant<'_>,
            yb: &mut [u8],
            c0: usize,
            nc: usize,
            scratch: &mut [f32],
            ties: &mut crate::kernels::quant::dw_exact::NearTies<'_>,
        ) -> bool,
    >,
    /// Like `mm_tile` with A read in place: row `r`, step `p` at `a[r * lda + p]`
    /// (`a` holds `(MR - 1) * lda + kc` floats), B a packed `kc x NR` panel.
    pub mm_tile_strided:
        fn(kc: usize, a: &[f32], lda: usize, b: &[f32], c: &mut [f32], ldc: usize, acc: bool),
    /// Rows `0..rows` (`1..=SEGS_ROWS`) of `strips` `NR`-column strips of a sum over
    /// segments (a batch-reduce GEMM: a channels-last conv reading its kernel rows'
    /// inputs in place, `kernels::conv::dense_nhwc`): for segment `s`, A row `r`, step
    /// `p < kc` at `a[segs[s] + r * lda + p]` times row `s * kc + p` of strip `q`'s
    /// packed panel (`segs.len() * kc * NR` floats at `b[q * segs.len() * kc * NR..]`);
    /// each element one sum in segment then step order, whatever `rows` and `strips`.
    /// Stored into `c` (rows at stride `ldc`, strip `q` at column `q * NR`) through the
    /// fused epilogue `e` (a column bias of `strips * NR` floats, if any, and a clamp;
    /// no residual), if any. Checked by `assert_segs_fit`.
    #[allow(clippy::type_complexity)]
    pub mm_tile_segs: fn(
        kc: usize,
        a: &[f32],
        segs: &[usize],
        lda: usize,
        b: &[f32],
        c: &mut [f32],
        ldc: usize,
        rows_strips: (usize, usize),
        e: Option<&TileEpi<'_>>,
    ),

    // Winograd conv transforms (`kernels::conv::winograd`).
    /// Input transform of tiles `[tb, tb + nb)` of one image `x` into the packed-B panels
    /// of the point GEMMs (`v`).
    pub wino_input: fn(g: &WinoGeom, x: &[f32], tb: usize, nb: usize, v: &mut [f32]),
    /// Output transform of the tiles and channels `b` names, from the point GEMM results
    /// `m` into the output planes `y`.
    pub wino_output: fn(g: &WinoGeom, m: &PointRows<'_>, b: &OutBlock, y: &mut [f32]),
    // -- pooling and conv packing (issue 12, im2col helper) --
    /// Average pooling of one plane (`count_include_pad` as in `kernels::pool::avg_pool`).
    pub avg_pool_plane: fn(s: &PoolShape, count_include_pad: bool, x: &[f32], y: &mut [f32]),
    /// Rows `k0..k0 + kc`, columns `j0..j0 + n` of the im2col matrix of one image and
    /// group `x` written straight into packed B panels (`kernels::body::im2col`).
    pub im2col_panels:
        fn(s: &ConvShape, x: &[f32], k0: usize, kc: usize, j0: usize, n: usize, out: &mut [f32]),
    /// ConvTranspose col2im of two stride-2 taps (`body::conv::add_pairs`):
    /// `o[2i] += a[i]`, `o[2i + 1] += b[i]`.
    pub add_pairs: fn(o: &mut [f32], a: &[f32], b: &[f32]),
    /// 2x-width bilinear resize (`body::resize::bilinear_up2x`): taps `ty`, `tx`, input
    /// planes `h x w`, planes `[lo, hi)`, scratch of `4w` floats.
    pub bilinear_up2x: fn(
        ty: &[LinearTap],
        tx: &[LinearTap],
        h: usize,
        w: usize,
        x: &[f32],
        y: &mut [f32],
        planes: (usize, usize),
        scratch: &mut [f32],
    ),
    /// The tiles of a direct conv (`kernels::conv::direct`, f32 planes of one channel
    /// per element), or `None` where im2col is faster (AVX2: its 16 registers cannot
    /// hold the tiles' accumulators).
    pub conv_tiles: Option<crate::kernels::conv::direct::Tiles<f32>>,
}

/// The table the process uses (chosen once): the best this CPU supports, or the one
/// named by the setting `VNPU_KERNEL_TABLE` (e.g. `portable`, see `crate::config`) when this CPU
/// has it, so that whole-model tests can run with every table.
pub fn table() -> &'static KernelTable {
    static CHOSEN: OnceLock<&'static KernelTable> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let mut all = tables();
        // A malformed value was refused when set; from the environment it falls back to
        // the best table (the CLI and C calls report it through `config::choice`).
        let wanted = crate::config::choice("VNPU_KERNEL_TABLE").ok().flatten();
        match wanted.and_then(|n| all.iter().position(|t| t.name == n)) {
            Some(i) => all[i],
            None => all.pop().unwrap_or(&portable::TABLE),
        }
    })
}

/// Whether this CPU's cores load one 512-bit vector a cycle rather than two (AMD family
/// 19h, Zen 4, which splits 512-bit operations into two 256-bit halves; Intel's AVX-512
/// cores and Zen 5 load two). Kernels whose best loop order depends on the load rate
/// (`x86_64_dw_nhwc`) read it; it changes no result, only the order of the same sums.
/// Detected once from CPUID (vendor string, family).
pub fn one_wide_load_per_cycle() -> bool {
    static ONE: OnceLock<bool> = OnceLock::new();
    *ONE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let (l0, l1) = (std::arch::x86_64::__cpuid(0), std::arch::x86_64::__cpuid(1));
            let amd = (l0.ebx, l0.edx, l0.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            // Family 0Fh plus the extended family: 19h for Zen 3 and Zen 4.
            let family = ((l1.eax >> 8) & 0xf) + ((l1.eax >> 20) & 0xff);
            amd && family == 0x19
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Every table usable on this CPU, portable first, best last.
pub fn tables() -> Vec<&'static KernelTable> {
    #[allow(unused_mut)]
    let mut v: Vec<&'static KernelTable> = vec![&portable::TABLE];
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = x86_64_fma::table() {
        v.push(t);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = x86_64_avx512::table() {
        v.push(t);
    }
    v
}

/// The instruction set of [`table`] (what a plan stores).
pub fn best_isa() -> Isa {
    table().isa
}

/// The instruction sets of [`tables`] (for tests and benches comparing twins).
pub fn available_isas() -> Vec<Isa> {
    tables().iter().map(|t| t.isa).collect()
}

/// Defines the test `$name`: `$body`, a non-capturing closure that runs a family's
/// kernels over its edge sizes with one table and returns every output as one
/// `Vec<f32>`, runs with each table usable on this CPU and must match the portable
/// table's result within `$tol` (relative, see `testutil::assert_close`).
#[cfg(test)]
macro_rules! twin_test {
    ($name:ident, $tol:expr, $body:expr) => {
        #[test]
        fn $name() {
            let run: fn(&'static $crate::kernels::isa::KernelTable) -> Vec<f32> = $body;
            let want = run($crate::kernels::isa::Isa::Portable.table());
            assert!(!want.is_empty(), "twin test produced no output");
            for t in $crate::kernels::isa::tables() {
                let got = run(t);
                assert_eq!(got.len(), want.len(), "table {}: output length", t.name);
                for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (x - y).abs() <= $tol * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()),
                        "table {}: element {i}: got {x}, portable {y}",
                        t.name
                    );
                }
            }
        }
    };
}
#[cfg(test)]
pub(crate) use twin_test;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_table_is_last_and_named() {
        let all = tables();
        assert_eq!(all[0].isa, Isa::Portable);
        if std::env::var_os("VNPU_KERNEL_TABLE").is_none() {
            assert!(std::ptr::eq(table(), *all.last().expect("portable")));
        }
        for t in &all {
            assert!(!t.name.is_empty());
            assert_eq!((t.mr, t.nr), (MR, NR), "packing assumes one geometry");
            assert!(std::ptr::eq(t.isa.table(), *t));
        }
    }
}

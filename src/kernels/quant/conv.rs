//! Int8 convolution on NCHW u8 activations with s8 weights: any stride, padding,
//! dilation and group count.
//!
//! * Dense / grouped conv: per group, `Y_g[Cout_g, OH*OW] = W_g · im2col(X_g)` by the int8
//!   GEMM (`super::gemm`): the weights are the A side (packed once by
//!   [`QConvWeights::pack`], in K pairs or K quads, [`QLayout`]), the im2col matrix is
//!   generated [`QNC`] columns at a time straight into B panels of the same layout in
//!   scratch (a 1x1, stride-1, unpadded conv reads the input planes directly). In K
//!   quads any other conv runs on the *wide* grid (`wide_geom`): the input planes
//!   are padded and split into stride phases once, and every im2col row is a slice of
//!   them, so nothing is gathered per row; the few extra columns per output row are
//!   computed and dropped. Padding reads the input zero point, so that the zero point
//!   correction `- x_zp * sum_k w` (folded into the bias, [`QConvWeights::fold_bias`]) is
//!   exact at the borders too.
//! * Depthwise conv (one input and one output channel per group): a u8 output through
//!   the kernel table's `qdepthwise_block` where it has one (AVX-512: s8 taps on a
//!   channel's byte plane with VNNI, or 16 channels at a time on exact f32 sums,
//!   [`super::dw_exact`], the same bits); else, and for channels whose sums might not be
//!   exact in f32, direct: each channel plane padded once with
//!   the zero point, each tap accumulated over output rows (`QuantTable::dw_taps`) on the
//!   phase-split plane ([`dw_phases`]).
//!
//! A call computes output channels `chans` (any range) of every image.
//!
//! Near-ties ([`qconv_u8_ties`]): where the exact requantised value lies within
//! [`TIE_EPS`] of a rounding boundary, the f32 rounding noise of the float reference
//! (the QDQ graph run in float by onnxruntime) decides which way it rounds, and one
//! flipped step early in a network grows through everything after it. Those few
//! outputs are recomputed the way the reference computes them (MLAS's SGEMM over the
//! im2col matrix): dequantised f32 operands in im2col order; with several output
//! channels per group one FMA chain per block of K values ([`ref_block_k`]: 128, more
//! when the output plane is narrower than K) with the block sums added in order; with
//! one (depthwise) rounded products summed four at a time (MLAS's one-row kernel, no
//! FMA); then the bias, then `v / y_scale` rounded half to even. The depthwise block
//! kernel lists its near-ties as it requantises (`dw_exact::NearTies`) and they are
//! settled after the block.

use super::body::REF_LANES;
use super::gemm::{fold, gemm_block, pack_a, pack_a4, packed_a_len};
use super::gemm::{scatter_b_pair, scatter_b_row, QMC, QNC};
use super::table::{QLayout, QuadOffsets, TileDst, TilePost, Q4MR, Q4NR, QNR};
use super::{QScratch, Requant};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::valid_range;
use crate::kernels::isa::Isa;

/// Conv weights (`[Cout, Cin/group, KH, KW]` s8, or wider values with their zero point
/// removed) packed for the int8 conv, with per output channel sums.
#[derive(Debug, Clone)]
pub struct QConvWeights {
    cout: usize,
    cin_g: usize,
    kh: usize,
    kw: usize,
    group: usize,
    panels: ConvPanels,
    col_sums: Vec<i32>,
}

/// Packed conv weights.
#[derive(Debug, Clone)]
enum ConvPanels {
    /// K-pair A panels per group (dense).
    Pairs(Vec<Vec<i16>>),
    /// K-quad A panels per group (dense).
    Quads(Vec<Vec<i8>>),
    /// `[Cout, KH*KW]` i16, and as f32 for the block kernel.
    Depthwise(Vec<i16>, Box<super::dw_exact::DwTaps>),
}

impl QConvWeights {
    /// Packs s8 weights `w` (`[cout, cin_per_group, kh, kw]`) for a dense conv in
    /// `layout` (the kernel table's, `QuantTable::layout`; any layout runs with any
    /// table). A depthwise conv ignores `layout`.
    pub fn pack(
        layout: QLayout,
        w: &[i8],
        cout: usize,
        cin_per_group: usize,
        kh: usize,
        kw: usize,
        group: usize,
    ) -> QConvWeights {
        let wide: Vec<i16> = w.iter().map(|&v| v as i16).collect();
        let mut q = Self::pack_wide(&wide, cout, cin_per_group, kh, kw, group);
        if layout == QLayout::Quads && matches!(q.panels, ConvPanels::Pairs(_)) {
            // K quads in the order of the conv's B quads (`conv_quads`): with channel
            // quads, per group of four input channels, per tap, the four channels (zero
            // past the last channel); else K in order.
            let khw = kh * kw;
            let k = cin_per_group * khw;
            let by_channel = channel_quads(cin_per_group, khw);
            let k4 = if by_channel {
                cin_per_group.div_ceil(4) * 4 * khw
            } else {
                k
            };
            let mg = cout / group;
            let groups = (0..group)
                .map(|g| {
                    let wg = &w[g * mg * k..(g + 1) * mg * k];
                    let mut pa = vec![0i8; QLayout::Quads.a_len(mg, k4)];
                    pack_a4(mg, k4, &mut pa, |i, p| {
                        if !by_channel {
                            return wg[i * k + p];
                        }
                        let (ci4, tap, e) = (p / 4 / khw, p / 4 % khw, p % 4);
                        let ci = ci4 * 4 + e;
                        if ci < cin_per_group {
                            wg[i * k + ci * khw + tap]
                        } else {
                            0
                        }
                    });
                    pa
                })
                .collect();
            q.panels = ConvPanels::Quads(groups);
        }
        q
    }

    /// Packs weights of values in `[-255, 255]` (`w - w_zp` of weights with a zero
    /// point): always K pairs for a dense conv (quads hold s8 only).
    pub fn pack_wide(
        w: &[i16],
        cout: usize,
        cin_per_group: usize,
        kh: usize,
        kw: usize,
        group: usize,
    ) -> QConvWeights {
        let k = cin_per_group * kh * kw;
        assert!(
            group > 0 && cout.is_multiple_of(group),
            "QConvWeights: cout must divide into groups"
        );
        assert_eq!(
            w.len(),
            cout * k,
            "QConvWeights: w holds cout * cin_g * kh * kw values"
        );
        assert!(
            w.iter().all(|v| (-255..=255).contains(v)),
            "weight out of [-255, 255]"
        );
        let col_sums = w
            .chunks(k.max(1))
            .take(cout)
            .map(|r| r.iter().map(|&v| v as i32).sum())
            .collect();
        let mg = cout / group;
        let depthwise = group > 1 && cin_per_group == 1 && mg == 1;
        let panels = if depthwise {
            ConvPanels::Depthwise(
                w.to_vec(),
                Box::new(super::dw_exact::DwTaps::new(w, cout, k)),
            )
        } else {
            ConvPanels::Pairs(
                (0..group)
                    .map(|g| {
                        let wg = &w[g * mg * k..(g + 1) * mg * k];
                        let mut pa = vec![0i16; packed_a_len(mg, k)];
                        pack_a(mg, k, &mut pa, |i, p| wg[i * k + p]);
                        pa
                    })
                    .collect(),
            )
        };
        let col_sums = if k == 0 { vec![0; cout] } else { col_sums };
        QConvWeights {
            cout,
            cin_g: cin_per_group,
            kh,
            kw,
            group,
            panels,
            col_sums,
        }
    }

    /// The layout of the dense panels (pairs for a depthwise conv's plain weights).
    pub fn layout(&self) -> QLayout {
        match self.panels {
            ConvPanels::Quads(_) => QLayout::Quads,
            ConvPanels::Pairs(_) | ConvPanels::Depthwise(..) => QLayout::Pairs,
        }
    }

    /// `sum` of each output channel's weights.
    pub fn col_sums(&self) -> &[i32] {
        &self.col_sums
    }

    /// The bias a kernel call takes: `bias[c] - x_zp * col_sums[c]` (`bias` absent: 0).
    pub fn fold_bias(&self, bias: Option<&[i32]>, x_zp: u8) -> Vec<i32> {
        fold(bias, x_zp, &self.col_sums)
    }

    fn check(&self, s: &ConvShape) {
        assert!(
            s.c_out == self.cout
                && s.group == self.group
                && s.c_in == self.cin_g * self.group
                && s.kh == self.kh
                && s.kw == self.kw,
            "QConvWeights packed for another conv shape"
        );
    }
}

/// Distance (in output steps) from a rounding boundary under which an output is
/// recomputed like the float reference (see the module doc): the f32 requantisation
/// is good to ~5e-5 steps, the reference's own f32 noise was seen up to ~1e-5 steps.
/// About 2 * TIE_EPS of the outputs are recomputed (K FMAs each).
pub const TIE_EPS: f32 = 1.0 / 8192.0;

/// Near-ties [`FloatTies::settle`] runs together at most (a block collects that many in
/// a [`TieBatch`] before settling them).
const TIE_BATCH: usize = 32;

/// Operand floats of one pass of [`FloatTies::settle`]: [`REF_LANES`] chains of up to
/// [`REF_BLOCK_K`] steps.
const GROUP_K: usize = REF_LANES * REF_BLOCK_K;

/// K values summed per FMA chain by the float reference (MLAS SGEMM's K stride) where
/// the GEMM has at least as many columns as K values ([`ref_block_k`]).
pub const REF_BLOCK_K: usize = 128;

/// K values per FMA chain of the float reference's SGEMM over `n` columns and `k` K
/// values: MLAS starts from strides of 128 columns and [`REF_BLOCK_K`] K values and,
/// when the GEMM is narrower than it is deep, halves the column stride (not below 16)
/// while half of it still covers the columns, doubling the K stride each time (at most
/// `8 * REF_BLOCK_K`).
pub fn ref_block_k(n: usize, k: usize) -> usize {
    let (mut stride_n, mut stride_k) = (128, REF_BLOCK_K);
    if n < k {
        while stride_n > 16 && stride_n / 2 >= n {
            stride_n /= 2;
            stride_k *= 2;
        }
    }
    stride_k
}

/// What the float reference of a conv needs to settle near-ties
/// ([`qconv_u8_ties`]): the s8 weights with their scales, the dequantised bias, the
/// input and output scales.
#[derive(Debug, Clone)]
pub struct FloatTies {
    /// `[Cout, K]` s8 weights as given to [`QConvWeights::pack`].
    w: Vec<i8>,
    w_scale: Vec<f32>,
    /// `b[c] * x_scale * w_scale[c]` in f32 (the dequantised i32 bias), 0 without bias.
    bias: Vec<f32>,
    x_scale: f32,
    y_scale: f32,
    /// Offset of K value `p` in the group's input planes from the window's first pixel
    /// (`ci * H*W + ky * dh * W + kx * dw`).
    taps: Vec<u32>,
}

impl FloatTies {
    /// The reference of a conv of shape `s` with s8 weights `w` (`[cout, K]`, per
    /// channel `w_scale`), i32 `bias` in `x_scale * w_scale[c]` units (before the zero
    /// point correction), input scale `x_scale` and output scale `y_scale`.
    pub fn new(
        s: &ConvShape,
        w: &[i8],
        w_scale: &[f32],
        bias: Option<&[i32]>,
        x_scale: f32,
        y_scale: f32,
    ) -> Self {
        let cout = w_scale.len();
        assert!(
            cout > 0 && w.len().is_multiple_of(cout),
            "FloatTies: weights per channel"
        );
        assert!(
            bias.is_none_or(|b| b.len() == cout),
            "FloatTies: one bias per channel"
        );
        let bias = (0..cout)
            .map(|c| bias.map_or(0.0, |b| b[c] as f32 * (x_scale * w_scale[c])))
            .collect();
        let (hw, khw) = (s.h * s.w, s.kh * s.kw);
        let taps = (0..s.k())
            .map(|p| (p / khw) * hw + (p / s.kw % s.kh) * s.dh * s.w + (p % s.kw) * s.dw)
            .map(|t| u32::try_from(t).expect("FloatTies: input group over 4 GiB"))
            .collect();
        FloatTies {
            w: w.to_vec(),
            w_scale: w_scale.to_vec(),
            bias,
            x_scale,
            y_scale,
            taps,
        }
    }

    /// The reference's pre-quantisation values `v / y_scale` of the near-ties `ties`
    /// (output channel, output position; `xg`: their group of input planes), handed to
    /// `put` with their index in `ties`. The K values of each are walked in im2col
    /// order into blocks of [`ref_block_k`] (the GEMM's columns are the output plane)
    /// whose FMA chains run [`REF_LANES`] side by side, blocks of any of the near-ties
    /// together (`QuantTable::ref_chains`, up to [`REF_BLOCK_K`] steps a call); each
    /// one's block sums are added in order, as the reference does.
    pub(super) fn settle(
        &self,
        t: &super::table::QuantTable,
        s: &ConvShape,
        (xg, zp): (&[u8], u8),
        ties: &[(usize, usize)],
        mut put: impl FnMut(usize, f32),
    ) {
        if s.cout_g() == 1 {
            for (i, &(c, j)) in ties.iter().enumerate() {
                put(i, self.value_m1(s, xg, zp, c, j));
            }
            return;
        }
        if ties.is_empty() {
            return;
        }
        let k = s.k();
        let bk = ref_block_k(s.oh * s.ow, k);
        let blocks = k.div_ceil(bk);
        // Lane l of a pass at l * stride of the operand buffers (on the stack: nothing
        // is allocated while a model runs).
        let stride = REF_BLOCK_K.min(bk).min(k);
        let (mut xs, mut wv) = ([0f32; GROUP_K], [0f32; GROUP_K]);
        for (n0, batch) in ties.chunks(TIE_BATCH).enumerate() {
            // Each near-tie's block sums, added in block order as the passes end.
            let mut totals = [0f32; TIE_BATCH];
            // Item `i`: block `i % blocks` of near-tie `i / blocks`.
            let items = batch.len() * blocks;
            let mut i0 = 0;
            while i0 < items {
                let lanes = REF_LANES.min(items - i0);
                let mut chains = [0f32; REF_LANES];
                let mut t0 = 0;
                while t0 < bk {
                    // K values of lane l in this call: from `q0(l)`, `len(l)` of them.
                    let q0 = |l: usize| (i0 + l) % blocks * bk + t0;
                    let len = |l: usize| REF_BLOCK_K.min(bk - t0).min(k.saturating_sub(q0(l)));
                    let steps = (0..lanes).map(len).max().unwrap_or(0);
                    if steps == 0 {
                        break;
                    }
                    for l in 0..lanes {
                        let lane = l * stride..l * stride + steps;
                        let (x, w) = (&mut xs[lane.clone()], &mut wv[lane]);
                        let n = len(l);
                        // A short block's tail steps add 0 to its chain; the chains of
                        // lanes past the pass's items are never read, whatever their
                        // operands.
                        x[n..].fill(0.0);
                        w[n..].fill(0.0);
                        if n > 0 {
                            let tie = batch[(i0 + l) / blocks];
                            self.operands(t, s, (xg, zp), tie, q0(l), (&mut x[..n], &mut w[..n]));
                        }
                    }
                    (t.ref_chains)(&xs, &wv, stride, steps, &mut chains);
                    t0 += REF_BLOCK_K;
                }
                for (l, &chain) in chains[..lanes].iter().enumerate() {
                    let (tie, b) = ((i0 + l) / blocks, (i0 + l) % blocks);
                    totals[tie] = if b == 0 { chain } else { totals[tie] + chain };
                }
                i0 += lanes;
            }
            for (i, &(c, _)) in batch.iter().enumerate() {
                put(
                    n0 * TIE_BATCH + i,
                    (totals[i] + self.bias[c]) / self.y_scale,
                );
            }
        }
    }

    /// The float reference's operands of K values `q0..q0 + x.len()` of the near-tie
    /// `(c, j)` (output channel, output position): dequantised inputs into `x`, weights
    /// into `w`, walking im2col with running indices.
    fn operands(
        &self,
        t: &super::table::QuantTable,
        s: &ConvShape,
        (xg, zp): (&[u8], u8),
        (c, j): (usize, usize),
        q0: usize,
        (xs, wv): (&mut [f32], &mut [f32]),
    ) {
        let (k, n) = (s.k(), xs.len());
        let ws = self.w_scale[c];
        for (d, &wq) in wv.iter_mut().zip(&self.w[c * k + q0..c * k + q0 + n]) {
            *d = f32::from(wq) * ws;
        }
        let (oy, ox) = (j / s.ow, j % s.ow);
        let (hw, khw) = (s.h * s.w, s.kh * s.kw);
        // The window's first input pixel, and whether the whole window is inside.
        let ix0 = (ox * s.sw) as isize - s.pw as isize;
        let iy0 = (oy * s.sh) as isize - s.ph as isize;
        let cols_inside = ix0 >= 0 && ix0 as usize + (s.kw - 1) * s.dw < s.w;
        let inside = cols_inside && iy0 >= 0 && iy0 as usize + (s.kh - 1) * s.dh < s.h;
        if inside {
            // No padding under the window: every value at its tap offset.
            let x = &xg[iy0 as usize * s.w + ix0 as usize..];
            (t.ref_gather)(x, &self.taps[q0..q0 + n], zp, self.x_scale, xs);
            return;
        }
        let deq = |v: u8| (i32::from(v) - i32::from(zp)) as f32 * self.x_scale;
        if khw == 1 {
            // One value per input plane.
            let inside = iy0 >= 0 && (iy0 as usize) < s.h && cols_inside;
            for (i, d) in xs.iter_mut().enumerate() {
                let at = (q0 + i) * hw + iy0.max(0) as usize * s.w + ix0.max(0) as usize;
                *d = if inside { deq(xg[at]) } else { 0.0 };
            }
            return;
        }
        // A kernel row (`kw` values) at a time.
        let mut p = q0;
        while p < q0 + n {
            let (ci, ky, kx0) = (p / khw, p / s.kw % s.kh, p % s.kw);
            let cnt = (s.kw - kx0).min(q0 + n - p);
            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
            let dst = &mut xs[p - q0..p - q0 + cnt];
            if iy < 0 || iy >= s.h as isize {
                dst.fill(0.0);
            } else {
                let row = &xg[(ci * s.h + iy as usize) * s.w..][..s.w];
                if cols_inside {
                    let at = ix0 as usize + kx0 * s.dw;
                    let src = row[at..].iter().step_by(s.dw);
                    dst.iter_mut().zip(src).for_each(|(d, &v)| *d = deq(v));
                } else {
                    for (t, d) in dst.iter_mut().enumerate() {
                        let ix = ix0 + ((kx0 + t) * s.dw) as isize;
                        let inside = ix >= 0 && (ix as usize) < s.w;
                        *d = if inside { deq(row[ix as usize]) } else { 0.0 };
                    }
                }
            }
            p += cnt;
        }
    }
}

impl FloatTies {
    /// The dequantised input under tap `(ky, kx)` of input plane `ci` of output pixel
    /// `(oy, ox)` (0 in the padding).
    #[inline(always)]
    fn x_at(
        &self,
        s: &ConvShape,
        (xg, zp): (&[u8], u8),
        (oy, ox): (usize, usize),
        (ci, ky, kx): (usize, usize, usize),
    ) -> f32 {
        let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
        let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
        if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
            return 0.0;
        }
        let v = xg[(ci * s.h + iy as usize) * s.w + ix as usize];
        (i32::from(v) - i32::from(zp)) as f32 * self.x_scale
    }

    /// The reference's value `v / y_scale` (as [`FloatTies::settle`]) of output position
    /// `j` of channel `c` of a conv with one output channel per group (depthwise):
    /// the reference's SGEMM has one row, which MLAS runs without FMAs: each product
    /// rounded, summed four K values at a time (`((p0 + p1) + p2) + p3`) and each such
    /// sum added to the running total, then a last pair and a last single value, then
    /// the bias.
    fn value_m1(&self, s: &ConvShape, xg: &[u8], zp: u8, c: usize, j: usize) -> f32 {
        let k = s.k();
        let w = &self.w[c * k..(c + 1) * k];
        let ws = self.w_scale[c];
        let (oy, ox) = (j / s.ow, j % s.ow);
        let product = |p: usize| {
            let at = (p / (s.kh * s.kw), p / s.kw % s.kh, p % s.kw);
            self.x_at(s, (xg, zp), (oy, ox), at) * (f32::from(w[p]) * ws)
        };
        let mut total = 0f32;
        let mut p = 0;
        while p + 4 <= k {
            total += ((product(p) + product(p + 1)) + product(p + 2)) + product(p + 3);
            p += 4;
        }
        if k - p >= 2 {
            total += product(p) + product(p + 1);
            p += 2;
        }
        if p < k {
            total += product(p);
        }
        (total + self.bias[c]) / self.y_scale
    }
}

/// Near-ties waiting to be settled together ([`FloatTies::settle`]), at most
/// [`TIE_BATCH`]: output channel and position, and the byte of the output each goes to.
pub(super) struct TieBatch {
    ties: [(usize, usize); TIE_BATCH],
    at: [usize; TIE_BATCH],
    n: usize,
}

impl TieBatch {
    /// An empty batch.
    pub(super) fn new() -> Self {
        TieBatch {
            ties: [(0, 0); TIE_BATCH],
            at: [0; TIE_BATCH],
            n: 0,
        }
    }

    /// Adds near-tie `tie` (channel, output position) whose byte is `out[at]`, settling
    /// the batch into `out` first when it is full.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &mut self,
        ref_: (&FloatTies, &super::table::QuantTable, &ConvShape),
        x: (&[u8], u8),
        rq: &Requant<'_>,
        (tie, at): ((usize, usize), usize),
        out: &mut [u8],
    ) {
        if self.n == TIE_BATCH {
            self.settle(ref_, x, rq, out);
        }
        (self.ties[self.n], self.at[self.n]) = (tie, at);
        self.n += 1;
    }

    /// Settles the near-ties held (inputs `x`: the group's planes and zero point) into
    /// `out`, requantised like `rq`, and empties the batch.
    pub(super) fn settle(
        &mut self,
        (ties, t, s): (&FloatTies, &super::table::QuantTable, &ConvShape),
        x: (&[u8], u8),
        rq: &Requant<'_>,
        out: &mut [u8],
    ) {
        if self.n == 0 {
            return;
        }
        let (minv, maxv) = super::body::bounds(rq.lo, rq.hi, rq.y_zp);
        let at = &self.at;
        ties.settle(t, s, x, &self.ties[..self.n], |i, v| {
            out[at[i]] = super::body::clamp_round(v, minv, maxv, rq.y_zp);
        });
        self.n = 0;
    }
}

/// Where a conv's finished i32 rows go.
enum ConvOut<'o> {
    U8(&'o Requant<'o>, &'o mut [u8], Option<&'o FloatTies>),
    I32(&'o [i32], &'o mut [i32]),
}

impl ConvOut<'_> {
    fn len(&self) -> usize {
        match self {
            ConvOut::U8(_, o, _) => o.len(),
            ConvOut::I32(_, o) => o.len(),
        }
    }

    /// Writes the sums `acc` of channel `c` at `out[at..]`.
    #[inline]
    fn put(&mut self, t: &super::table::QuantTable, c: usize, acc: &[i32], at: usize) {
        match self {
            ConvOut::U8(rq, o, _) => (t.requant_scalar)(
                acc,
                rq.bias[c],
                rq.mult[c],
                rq.y_zp,
                rq.lo,
                rq.hi,
                &mut o[at..at + acc.len()],
            ),
            ConvOut::I32(bias, o) => {
                for (d, &s) in o[at..at + acc.len()].iter_mut().zip(acc) {
                    *d = s.wrapping_add(bias[c]);
                }
            }
        }
    }
}

impl ConvOut<'_> {
    /// Writes the sums `acc` of channel `c` (output positions `j0..`) at `out[at..]`,
    /// their near-ties settled like the float reference when it is attached: one pass
    /// requantises and finds the first near-tie, the rare rest are found from there.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn put_seg(
        &mut self,
        t: &super::table::QuantTable,
        s: &ConvShape,
        xg: &[u8],
        zp: u8,
        c: usize,
        acc: &[i32],
        j0: usize,
        at: usize,
    ) {
        let ConvOut::U8(rq, o, Some(ties)) = self else {
            return self.put(t, c, acc, at);
        };
        let (bias, mult) = (rq.bias[c], rq.mult[c]);
        let (minv, maxv) = super::body::bounds(rq.lo, rq.hi, rq.y_zp);
        let out = &mut o[at..at + acc.len()];
        let (zp_out, lo, hi) = (rq.y_zp, rq.lo, rq.hi);
        let mut i = (t.requant_near_tie)(acc, bias, mult, zp_out, lo, hi, TIE_EPS, out);
        if i == acc.len() {
            return;
        }
        let mut near = TieBatch::new();
        while i < acc.len() {
            near.push((ties, t, s), (xg, zp), rq, ((c, j0 + i), i), out);
            i += 1;
            i += (t.first_near_tie)(&acc[i..], bias, mult, (minv, maxv), TIE_EPS);
        }
        near.settle((ties, t, s), (xg, zp), rq, out);
    }
}

/// Int8 conv of output channels `chans` (`[lo, hi)`) of every image: `x` is `[N, Cin, H,
/// W]` u8 with zero point `x_zp`, `out` `[N, Cout, OH, OW]` u8, requantised by `rq`
/// (one multiplier and bias per output channel; the bias includes the zero point
/// correction, [`QConvWeights::fold_bias`]).
#[allow(clippy::too_many_arguments)]
pub fn qconv_u8(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    rq: &Requant<'_>,
    out: &mut [u8],
    chans: (usize, usize),
    scratch: &mut QScratch,
) {
    rq.check(s.c_out);
    qconv(
        isa,
        s,
        x,
        x_zp,
        w,
        ConvOut::U8(rq, out, None),
        chans,
        scratch,
    )
}

/// [`qconv_u8`] with the near-ties settled like the float reference `ties` (see the
/// module doc).
#[allow(clippy::too_many_arguments)]
pub fn qconv_u8_ties(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    rq: &Requant<'_>,
    ties: &FloatTies,
    out: &mut [u8],
    chans: (usize, usize),
    scratch: &mut QScratch,
) {
    rq.check(s.c_out);
    assert!(
        ties.w_scale.len() == s.c_out
            && ties.w.len() == s.c_out * s.k()
            && ties.taps.len() == s.k()
            && ties
                .taps
                .last()
                .is_none_or(|&t| (t as usize) < s.cin_g() * s.h * s.w),
        "qconv_u8_ties: reference of another conv shape"
    );
    qconv(
        isa,
        s,
        x,
        x_zp,
        w,
        ConvOut::U8(rq, out, Some(ties)),
        chans,
        scratch,
    )
}

/// Like [`qconv_u8`], writing the raw i32 sums plus `bias` (one per output channel,
/// zero point correction included): the S32 output form.
#[allow(clippy::too_many_arguments)]
pub fn qconv_i32(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    bias: &[i32],
    out: &mut [i32],
    chans: (usize, usize),
    scratch: &mut QScratch,
) {
    assert_eq!(
        bias.len(),
        s.c_out,
        "qconv_i32: one bias per output channel"
    );
    qconv(isa, s, x, x_zp, w, ConvOut::I32(bias, out), chans, scratch)
}

#[allow(clippy::too_many_arguments)]
fn qconv(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    mut dst: ConvOut<'_>,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    w.check(s);
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    assert!(x.len() >= s.n * s.c_in * hw, "qconv: x too short");
    assert!(dst.len() >= s.n * s.c_out * ohw, "qconv: out too short");
    assert!(c_lo <= c_hi && c_hi <= s.c_out, "qconv: channel range");
    if ohw == 0 || c_lo == c_hi {
        return;
    }
    let t = isa.table().quant;
    for b in 0..s.n {
        let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
        let ob = b * s.c_out * ohw;
        match &w.panels {
            ConvPanels::Depthwise(wd, taps) => {
                let (kt, w) = (isa.table(), (&wd[..], &**taps));
                depthwise(kt, s, xb, x_zp, w, &mut dst, ob, (c_lo, c_hi), scratch)
            }
            ConvPanels::Pairs(wp) => {
                let wd = DenseW::Pairs(wp);
                dense(t, s, xb, x_zp, wd, &mut dst, ob, (c_lo, c_hi), scratch)
            }
            ConvPanels::Quads(wq) if wide_geom(s).is_some() => {
                dense_wide(t, s, xb, x_zp, wq, &mut dst, ob, (c_lo, c_hi), scratch)
            }
            ConvPanels::Quads(wq) => {
                let wd = DenseW::Quads(wq);
                dense(t, s, xb, x_zp, wd, &mut dst, ob, (c_lo, c_hi), scratch)
            }
        }
    }
}

/// The packed A panels of a dense conv, per group.
#[derive(Clone, Copy)]
enum DenseW<'w> {
    Pairs(&'w [Vec<i16>]),
    Quads(&'w [Vec<i8>]),
}

/// Dense (or grouped) conv of channels `[c_lo, c_hi)` of one image (`xb`), written at
/// `ob` of the output.
#[allow(clippy::too_many_arguments)]
fn dense(
    t: &super::table::QuantTable,
    s: &ConvShape,
    xb: &[u8],
    x_zp: u8,
    w: DenseW<'_>,
    dst: &mut ConvOut<'_>,
    ob: usize,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    let (mg, k, cig) = (s.cout_g(), s.k(), s.cin_g());
    let lay = match w {
        DenseW::Pairs(_) => QLayout::Pairs,
        DenseW::Quads(_) => QLayout::Quads,
    };
    let (mr, nr, kgs) = (lay.mr(), lay.nr(), lay.groups(k));
    for g in c_lo / mg..c_hi.div_ceil(mg) {
        let m_lo = c_lo.max(g * mg) - g * mg;
        let m_hi = c_hi.min((g + 1) * mg) - g * mg;
        let xg = &xb[g * cig * hw..(g + 1) * cig * hw];
        let (ip_lo, ip_hi) = (m_lo / mr, m_hi.div_ceil(mr));
        let nc_max = QNC.min(ohw.div_ceil(nr) * nr);
        let mc_max = QMC.min((ip_hi - ip_lo) * mr);
        // Quads (here a pointwise conv, whose im2col rows are the input planes): the
        // planes interleaved four at a time once, each tile reading its B quads in place.
        let quads = lay == QLayout::Quads;
        let b_len = if quads {
            pointwise_b_len(s)
        } else {
            lay.b_len(k, nc_max)
        };
        let (rows_len, offs_len) = if quads {
            (0, kgs)
        } else {
            (lay.kg() * nc_max, 0)
        };
        let bufs = scratch.bufs(lay, b_len, mc_max * nc_max, rows_len, offs_len);
        let (pb16, pb8, cblk, rows) = (bufs.p16, bufs.p8, bufs.c, bufs.row);
        if quads {
            interleave_planes(t, xg, (cig, hw), pb8);
        }
        for (q, o) in bufs.offs.iter_mut().enumerate() {
            *o = u32::try_from(q * hw * 4)
                .expect("int8 conv input group over 4 GiB (refused by the plan)");
        }
        let at = QuadOffsets::new(bufs.offs);
        let mut jc = 0;
        while jc < ohw {
            let nc = QNC.min(ohw - jc);
            let b_panels = nc.div_ceil(nr);
            let ldb = b_panels * nr;
            if !quads {
                let pb_len = lay.b_len(k, ldb);
                pack_im2col(s, xg, x_zp, jc, nc, &mut pb16[..pb_len], rows);
            }
            let mut ip = ip_lo;
            while ip < ip_hi {
                let ip_end = ip_hi.min(ip + QMC / mr);
                let a_range = ip * kgs * mr * lay.kg()..ip_end * kgs * mr * lay.kg();
                if let DenseW::Quads(wq) = w {
                    let blk = QuadBlock {
                        pa: &wq[g][a_range.clone()],
                        panels: (ip, ip_end),
                        rows: (m_lo, m_hi),
                        c_base: g * mg,
                        pb: &pb8[jc * 4..],
                        b_step: Q4NR * 4,
                        at,
                        b_panels,
                        kq: kgs,
                        cols: nc,
                    };
                    if let ConvOut::U8(rq, o, ties) = dst {
                        let out = BlockOut {
                            out: o,
                            base: ob + (g * mg + ip * mr) * ohw + jc,
                            ldo: ohw,
                            pos: |j| Some(jc + j),
                        };
                        blk.run_u8(t, (s, xg, x_zp), (rq, *ties), out);
                        ip = ip_end;
                        continue;
                    }
                    blk.run_i32(t, cblk, ldb);
                }
                if let DenseW::Pairs(wp) = w {
                    let pa = &wp[g][a_range];
                    gemm_block(t, kgs, pa, ip_end - ip, pb16, b_panels, cblk, ldb)
                }
                for i in m_lo.max(ip * mr)..m_hi.min(ip_end * mr) {
                    let r = i - ip * mr;
                    let c = g * mg + i;
                    let acc = &cblk[r * ldb..r * ldb + nc];
                    dst.put_seg(t, s, xg, x_zp, c, acc, jc, ob + c * ohw + jc);
                }
                ip = ip_end;
            }
            jc += nc;
        }
    }
}

/// One block of a dense conv on quad panels: A panels `panels` of `pa` (from the
/// block's first), rows `rows` of the group's output channels (from `c_base`), times the
/// `b_panels` im2col panels of `kq` quads: block columns `0..cols`.
struct QuadBlock<'a> {
    pa: &'a [i8],
    panels: (usize, usize),
    rows: (usize, usize),
    c_base: usize,
    /// B: panel `jp`'s quads at `pb[jp * b_step..]` plus their offsets `at`.
    pb: &'a [u8],
    b_step: usize,
    at: QuadOffsets<'a>,
    b_panels: usize,
    kq: usize,
    cols: usize,
}

/// Where [`QuadBlock::run_u8`] writes: row `i` of the group's output channels (`i` from
/// the block's first panel row `i0`) at `out[base + (i - i0) * ldo..]`, one byte per block
/// column; `pos(j)` is block column `j`'s position in the output plane (`None`: a column
/// that is no output, whose near-ties need no settling).
struct BlockOut<'o, P: Fn(usize) -> Option<usize>> {
    out: &'o mut [u8],
    base: usize,
    ldo: usize,
    pos: P,
}

impl QuadBlock<'_> {
    /// The block's i32 sums into `c` (rows from the block's first panel, stride `ldc`).
    fn run_i32(&self, t: &super::table::QuantTable, c: &mut [i32], ldc: usize) {
        let asz = self.kq * Q4MR * 4;
        for jp in 0..self.b_panels {
            let bp = &self.pb[jp * self.b_step..];
            for k in 0..self.panels.1 - self.panels.0 {
                let a = &self.pa[k * asz..(k + 1) * asz];
                let cp = &mut c[k * Q4MR * ldc + jp * Q4NR..];
                (t.quad_tile_su)(self.kq, a, bp, &self.at, cp, ldc);
            }
        }
    }

    /// The block requantised by `rq` into `dst`, each tile as it is computed
    /// (`quad_tile_su_u8`), its near-ties settled like the float reference `ties` when
    /// one is attached.
    fn run_u8<P: Fn(usize) -> Option<usize>>(
        &self,
        t: &super::table::QuantTable,
        (s, xg, zp): (&ConvShape, &[u8], u8),
        (rq, ties): (&Requant<'_>, Option<&FloatTies>),
        dst: BlockOut<'_, P>,
    ) {
        let asz = self.kq * Q4MR * 4;
        let (m_lo, m_hi) = self.rows;
        let i0 = self.panels.0 * Q4MR;
        let mut posts = [TilePost::default(); QMC / Q4MR];
        // The block's near-ties (channel, output position) and their bytes in `dst`,
        // settled together at the end.
        let mut near = TieBatch::new();
        for (ip, post) in (self.panels.0..self.panels.1).zip(posts.iter_mut()) {
            post.y_zp = rq.y_zp;
            (post.lo, post.hi) = (rq.lo, rq.hi);
            for r in 0..Q4MR {
                let i = ip * Q4MR + r;
                if (m_lo..m_hi).contains(&i) {
                    let c = self.c_base + i;
                    (post.bias[r], post.mult[r]) = (rq.bias[c], rq.mult[c]);
                }
            }
        }
        for jp in 0..self.b_panels {
            let bp = &self.pb[jp * self.b_step..];
            let j0 = jp * Q4NR;
            let cols = Q4NR.min(self.cols - j0);
            for (k, ip) in (self.panels.0..self.panels.1).enumerate() {
                let lo = m_lo.max(ip * Q4MR) - ip * Q4MR;
                let hi = m_hi.min((ip + 1) * Q4MR) - ip * Q4MR;
                let row_at = |r: usize| dst.base + (ip * Q4MR + r - i0) * dst.ldo + j0;
                let tile = TileDst {
                    post: &posts[k],
                    lo,
                    hi,
                    cols,
                    out: &mut dst.out[row_at(lo)..],
                    ldo: dst.ldo,
                    eps: TIE_EPS,
                };
                let a = &self.pa[k * asz..(k + 1) * asz];
                let masks = (t.quad_tile_su_u8)(self.kq, (a, bp, &self.at), tile);
                let Some(ties) = ties else { continue };
                for (r, &mask) in masks.iter().enumerate().skip(lo) {
                    let mut m = mask;
                    while m != 0 {
                        let j = m.trailing_zeros() as usize;
                        m &= m - 1;
                        if let Some(at) = (dst.pos)(j0 + j) {
                            let tie = ((self.c_base + ip * Q4MR + r, at), row_at(r) + j);
                            near.push((ties, t, s), (xg, zp), rq, tie, dst.out);
                        }
                    }
                }
            }
        }
        if let Some(ties) = ties {
            near.settle((ties, t, s), (xg, zp), rq, dst.out);
        }
    }
}

/// Geometry `(wps, cplen)` of the padded, phase-split planes of a conv computed on the
/// *wide* grid ([`dense_wide`]), or `None` for a plain pointwise conv (whose im2col rows
/// are the input planes already). Each input plane padded with the zero point is split
/// into `sh * sw` phases of rows of `wps` ([`dw_phases`]); `cplen` bytes per channel.
pub(crate) fn wide_geom(s: &ConvShape) -> Option<(usize, usize)> {
    let pointwise = s.kh == 1
        && s.kw == 1
        && s.sh == 1
        && s.sw == 1
        && s.ph == 0
        && s.pw == 0
        && s.oh * s.ow == s.h * s.w;
    if pointwise || s.oh == 0 || s.ow == 0 {
        return None;
    }
    let (_, wps, plen) = dw_phases(s);
    Some((wps, s.sh * s.sw * plen))
}

/// Dense conv in K quads on the wide grid: each input plane of the group is padded
/// once with the zero point and split into stride phases (rows of `wps`,
/// [`wide_geom`]), and the GEMM runs over `oh * wps` columns, where im2col row `(ci, ky,
/// kx)` is phase `(ky * dh % sh, kx * dw % sw)` of plane `ci` read from row `ky * dh /
/// sh`, column `kx * dw / sw` on: no im2col copy. Columns `ox >= ow` of each row are
/// computed and dropped.
#[allow(clippy::too_many_arguments)]
fn dense_wide(
    t: &super::table::QuantTable,
    s: &ConvShape,
    xb: &[u8],
    x_zp: u8,
    wq: &[Vec<i8>],
    dst: &mut ConvOut<'_>,
    ob: usize,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    let Some((wp, cplen)) = wide_geom(s) else {
        return;
    };
    let plen = cplen / (s.sh * s.sw);
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let (mg, cig) = (s.cout_g(), s.cin_g());
    let (mr, nr, kq) = (Q4MR, Q4NR, conv_quads(s));
    let nw = s.oh * wp;
    // Offset of tap `ky * kw + kx` in a plane's phases: phase (ky * dh % sh, kx * dw %
    // sw), row ky * dh / sh, column kx * dw / sw.
    let tap_off = |i: usize| {
        let (ky, kx) = (i / s.kw, i % s.kw);
        let (qy, ry) = ((ky * s.dh) % s.sh, (ky * s.dh) / s.sh);
        let (qx, rx) = ((kx * s.dw) % s.sw, (kx * s.dw) / s.sw);
        (qy * s.sw + qx) * plen + ry * wp + rx
    };
    for g in c_lo / mg..c_hi.div_ceil(mg) {
        let m_lo = c_lo.max(g * mg) - g * mg;
        let m_hi = c_hi.min((g + 1) * mg) - g * mg;
        let xg = &xb[g * cig * hw..(g + 1) * cig * hw];
        let (ip_lo, ip_hi) = (m_lo / mr, m_hi.div_ceil(mr));
        let nc_max = QNC.min(nw.div_ceil(nr) * nr);
        let mc_max = QMC.min((ip_hi - ip_lo) * mr);
        let b_len = wide_b_len(s, cplen, nc_max);
        let bufs = scratch.bufs(QLayout::Quads, b_len, mc_max * nc_max, cig * cplen, kq);
        let (bbuf, cblk, pad) = (bufs.p8, bufs.c, bufs.row);
        pad_phases(t, s, (xg, x_zp), (wp, plen), pad);
        let by_channel = channel_quads(cig, khw);
        if by_channel {
            // Four planes at a time interleaved, so that B quad (channels 4c..4c + 4, tap
            // t) of wide column j is the four bytes at (c * cplen + tap_off(t) + j) * 4:
            // every tile reads its B quads in place.
            interleave_planes(t, pad, (cig, cplen), bbuf);
        }
        for (q, o) in bufs.offs.iter_mut().enumerate() {
            let off = if by_channel {
                (q / khw * cplen + tap_off(q % khw)) * 4
            } else {
                q * nr * 4
            };
            *o =
                u32::try_from(off).expect("int8 conv input group over 4 GiB (refused by the plan)");
        }
        let at = QuadOffsets::new(bufs.offs);
        let mut jc = 0;
        while jc < nw {
            let nc = QNC.min(nw - jc);
            let b_panels = nc.div_ceil(nr);
            let ldb = b_panels * nr;
            let (pb, b_step) = if by_channel {
                (&bbuf[jc * 4..], nr * 4)
            } else {
                let pb = &mut bbuf[..QLayout::Quads.b_len(s.k(), ldb)];
                pack_wide_block(t, s, (pad, cplen), tap_off, (jc, nc), pb);
                (&pb[..], kq * nr * 4)
            };
            let mut ip = ip_lo;
            while ip < ip_hi {
                let ip_end = ip_hi.min(ip + QMC / mr);
                let blk = QuadBlock {
                    pa: &wq[g][ip * kq * mr * 4..ip_end * kq * mr * 4],
                    panels: (ip, ip_end),
                    rows: (m_lo, m_hi),
                    c_base: g * mg,
                    pb,
                    b_step,
                    at,
                    b_panels,
                    kq,
                    cols: nc,
                };
                if let ConvOut::U8(rq, o, ties) = dst {
                    // Requantised tile by tile into a wide byte block, whose output
                    // columns are then copied row by row.
                    let stage: &mut [u8] = bytemuck::cast_slice_mut(&mut cblk[..]);
                    let out = BlockOut {
                        out: &mut *stage,
                        base: 0,
                        ldo: ldb,
                        pos: |j| {
                            let (oy, ox) = ((jc + j) / wp, (jc + j) % wp);
                            (ox < s.ow).then_some(oy * s.ow + ox)
                        },
                    };
                    blk.run_u8(t, (s, xg, x_zp), (rq, *ties), out);
                    for i in m_lo.max(ip * mr)..m_hi.min(ip_end * mr) {
                        let c = g * mg + i;
                        let row = &stage[(i - ip * mr) * ldb..][..nc];
                        copy_wide(t, s, row, (jc, wp), &mut o[ob + c * ohw..][..ohw]);
                    }
                } else {
                    blk.run_i32(t, cblk, ldb);
                    for i in m_lo.max(ip * mr)..m_hi.min(ip_end * mr) {
                        let c = g * mg + i;
                        let r = i - ip * mr;
                        let acc = &cblk[r * ldb..r * ldb + nc];
                        put_wide(t, s, (xg, x_zp), dst, c, acc, (jc, wp), ob + c * ohw);
                    }
                }
                ip = ip_end;
            }
            jc += nc;
        }
    }
}

/// Packs wide columns `jc..jc + nc` of the im2col matrix of one group, K in order, into
/// B panels `pb`: row `p` = (input channel `p / khw`, tap `p % khw`) is the channel's
/// padded phase planes (`cplen` bytes each in `pad`) from the tap's offset `tap_off`.
fn pack_wide_block(
    t: &super::table::QuantTable,
    s: &ConvShape,
    (pad, cplen): (&[u8], usize),
    tap_off: impl Fn(usize) -> usize,
    (jc, nc): (usize, usize),
    pb: &mut [u8],
) {
    let (k, khw) = (s.k(), s.kh * s.kw);
    if !k.is_multiple_of(4) || !nc.is_multiple_of(Q4NR) {
        pb.fill(0);
    }
    for p in (0..k).step_by(4) {
        let mut src: [&[u8]; 4] = [&[]; 4];
        let cnt = (k - p).min(4);
        for (i, r) in src.iter_mut().take(cnt).enumerate() {
            let (ci, tap) = ((p + i) / khw, (p + i) % khw);
            let at = ci * cplen + tap_off(tap) + jc;
            *r = &pad[at..at + nc];
        }
        (t.scatter_quads)(k, p, &src[..cnt], pb);
    }
}

/// Bytes of B of a pointwise conv on quad panels ([`dense`]): its input planes of one
/// group interleaved four at a time ([`interleave_planes`]), and one panel's width more,
/// which the last tiles read past the last plane.
pub(crate) fn pointwise_b_len(s: &ConvShape) -> usize {
    (s.cin_g().div_ceil(4) * s.h * s.w + Q4NR) * 4
}

/// Interleaves the `cin` planes of `len` bytes in `x` four at a time into `out`: byte
/// `e` of position `j` of plane group `c` at `(c * len + j) * 4 + e` (the last group's
/// missing planes left as they are: their weights are 0).
fn interleave_planes(
    t: &super::table::QuantTable,
    x: &[u8],
    (cin, len): (usize, usize),
    out: &mut [u8],
) {
    for (c4, dst) in out.chunks_mut(4 * len).take(cin.div_ceil(4)).enumerate() {
        let mut src: [&[u8]; 4] = [&[]; 4];
        let cnt = (cin - 4 * c4).min(4);
        for (e, r) in src.iter_mut().take(cnt).enumerate() {
            *r = &x[(4 * c4 + e) * len..][..len];
        }
        (t.scatter_quads)(4, 0, &src[..cnt], dst);
    }
}

/// True when an int8 conv with `cin_g` input channels per group and `khw` taps groups
/// its K quads by channel: per group of four input channels (the last one zero-padded),
/// one quad per tap, so that a conv on the wide grid reads its B quads in place from
/// interleaved planes ([`dense_wide`]). Few channels not a multiple of four (an RGB
/// stem) would pad K by up to a third: those keep K in order (channel-major, taps
/// inside), packed per block. A 1x1 conv's two orders are the same.
pub(crate) fn channel_quads(cin_g: usize, khw: usize) -> bool {
    khw > 1 && (cin_g.is_multiple_of(4) || cin_g >= 32)
}

/// K quads of an int8 conv on quad panels (`QConvWeights::pack`'s order,
/// [`channel_quads`]).
pub(crate) fn conv_quads(s: &ConvShape) -> usize {
    let khw = s.kh * s.kw;
    if channel_quads(s.cin_g(), khw) {
        s.cin_g().div_ceil(4) * khw
    } else {
        (s.cin_g() * khw).div_ceil(4)
    }
}

/// Bytes of B of a conv on the wide grid ([`dense_wide`]) with column blocks of `nc`
/// columns at most: with channel quads, the interleaved padded planes (four channels'
/// phase-split planes of `cplen` bytes side by side per group of four, and one panel's
/// width more, which the last tiles read past the last plane); else one block's packed
/// panels.
pub(crate) fn wide_b_len(s: &ConvShape, cplen: usize, nc: usize) -> usize {
    if channel_quads(s.cin_g(), s.kh * s.kw) {
        (s.cin_g().div_ceil(4) * cplen + Q4NR) * 4
    } else {
        QLayout::Quads.b_len(s.k(), nc)
    }
}

/// Writes the wide sums `acc` (wide columns `jc..`) of channel `c`: the `ow` valid
/// columns of each output row they cover, at `at + oy * ow + ox`.
#[allow(clippy::too_many_arguments)]
fn put_wide(
    t: &super::table::QuantTable,
    s: &ConvShape,
    (xg, x_zp): (&[u8], u8),
    dst: &mut ConvOut<'_>,
    c: usize,
    acc: &[i32],
    (jc, wp): (usize, usize),
    at: usize,
) {
    let t_end = jc + acc.len();
    let mut oy = jc / wp;
    while oy < s.oh && oy * wp < t_end {
        let (a, b) = ((oy * wp).max(jc), (oy * wp + s.ow).min(t_end));
        if a < b {
            let j0 = oy * s.ow + (a - oy * wp);
            let seg = &acc[a - jc..b - jc];
            dst.put_seg(t, s, xg, x_zp, c, seg, j0, at + j0);
        }
        oy += 1;
    }
}

/// Copies the output columns of one channel's wide row block `row` (wide columns `jc..`)
/// into its output plane `plane`: of each output row it covers, the `ow` first columns.
fn copy_wide(
    t: &super::table::QuantTable,
    s: &ConvShape,
    row: &[u8],
    (jc, wp): (usize, usize),
    plane: &mut [u8],
) {
    let end = jc + row.len();
    let mut oy = jc / wp;
    while oy < s.oh && oy * wp < end {
        let (a, b) = ((oy * wp).max(jc), (oy * wp + s.ow).min(end));
        // Whole output rows from here on: one call for all of them.
        let whole = (oy..s.oh)
            .take_while(|&r| (r * wp).max(jc) == r * wp && r * wp + s.ow <= end)
            .count();
        let (rows, len) = if whole > 0 {
            (whole, s.ow)
        } else {
            (1, b.saturating_sub(a))
        };
        if len > 0 {
            let j0 = oy * s.ow + (a - oy * wp);
            (t.copy_rows)(&row[a - jc..], wp, &mut plane[j0..], s.ow, (rows, len));
        }
        oy += rows;
    }
}

/// The planes of one group (`xg`) padded with `zp` and split into phases in `pad`
/// (`sh * sw` phases of `plen` bytes per plane, rows of `wps`; see [`dw_phases`]).
fn pad_phases(
    t: &super::table::QuantTable,
    s: &ConvShape,
    (xg, zp): (&[u8], u8),
    (wps, plen): (usize, usize),
    pad: &mut [u8],
) {
    let hw = s.h * s.w;
    let cplen = s.sh * s.sw * plen;
    for (ci, planes) in pad.chunks_exact_mut(cplen).take(s.cin_g()).enumerate() {
        let src = &xg[ci * hw..(ci + 1) * hw];
        for (q, ph) in planes.chunks_exact_mut(plen).enumerate() {
            let (qy, qx) = (q / s.sw, q % s.sw);
            ph.fill(zp);
            // Phase columns cc with 0 <= cc * sw + qx - pw < w.
            let (lo, hi) = valid_range(wps, s.sw, s.pw, qx, s.w);
            if lo >= hi {
                continue;
            }
            let ix0 = lo * s.sw + qx - s.pw;
            for (r, row) in ph.chunks_exact_mut(wps).enumerate() {
                let iy = (r * s.sh + qy) as isize - s.ph as isize;
                if iy < 0 || iy >= s.h as isize {
                    continue;
                }
                let line = &src[iy as usize * s.w..(iy as usize + 1) * s.w];
                let d = &mut row[lo..hi];
                if s.sw == 1 {
                    d.copy_from_slice(&line[ix0..ix0 + d.len()]);
                } else if s.sw == 2 {
                    (t.take_even)(&line[ix0..ix0 + 2 * d.len() - 1], d);
                } else {
                    for (o, v) in d.iter_mut().zip(line[ix0..].iter().step_by(s.sw)) {
                        *o = *v;
                    }
                }
            }
        }
    }
}

/// Packs columns `jc..jc + nc` of the im2col matrix of one group into B panels `pb`
/// (`rows`: scratch of `2 * nc` bytes).
fn pack_im2col(
    s: &ConvShape,
    xg: &[u8],
    zp: u8,
    jc: usize,
    nc: usize,
    pb: &mut [i16],
    rows: &mut [u8],
) {
    let k = s.k();
    if k % 2 == 1 || !nc.is_multiple_of(QNR) {
        pb.fill(0);
    }
    let (r0buf, r1buf) = rows[..2 * nc].split_at_mut(nc);
    let mut p = 0;
    while p + 1 < k {
        let r0 = im2col_row(s, xg, zp, p, jc, r0buf);
        let r1 = im2col_row(s, xg, zp, p + 1, jc, r1buf);
        scatter_b_pair(k, p, r0, r1, pb);
        p += 2;
    }
    if p < k {
        let r0 = im2col_row(s, xg, zp, p, jc, r0buf);
        scatter_b_row(k, p, r0, pb);
    }
}

/// Columns `j0..j0 + buf.len()` of im2col row `p = (ci, ky, kx)` (columns are output
/// positions `oy * OW + ox`), padding read as `zp`: a slice of the input plane for a
/// pointwise conv, else written into `buf`.
fn im2col_row<'a>(
    s: &ConvShape,
    xg: &'a [u8],
    zp: u8,
    p: usize,
    j0: usize,
    buf: &'a mut [u8],
) -> &'a [u8] {
    let (hw, khw) = (s.h * s.w, s.kh * s.kw);
    let (ci, ky, kx) = (p / khw, (p % khw) / s.kw, p % s.kw);
    let plane = &xg[ci * hw..(ci + 1) * hw];
    let pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
    if pointwise && s.oh * s.ow == hw {
        return &plane[j0..j0 + buf.len()];
    }
    let (vlo, vhi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
    let mut j = j0;
    let end = j0 + buf.len();
    while j < end {
        let (oy, ox0) = (j / s.ow, j % s.ow);
        let ox1 = s.ow.min(ox0 + (end - j));
        let seg = &mut buf[j - j0..j - j0 + (ox1 - ox0)];
        j += ox1 - ox0;
        let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
        let (lo, hi) = (vlo.clamp(ox0, ox1), vhi.clamp(ox0, ox1));
        if iy < 0 || iy >= s.h as isize || lo >= hi {
            seg.fill(zp);
            continue;
        }
        let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
        seg[..lo - ox0].fill(zp);
        seg[hi - ox0..].fill(zp);
        let ix0 = lo * s.sw + kx * s.dw - s.pw;
        let d = &mut seg[lo - ox0..hi - ox0];
        if s.sw == 1 {
            d.copy_from_slice(&src[ix0..ix0 + d.len()]);
        } else {
            for (o, v) in d.iter_mut().zip(src[ix0..].iter().step_by(s.sw)) {
                *o = *v;
            }
        }
    }
    buf
}

/// `d[i] = src[i * step]` widened to i16 (a plain loop for step 1 and 2, which
/// vectorise; `src` holds at least `(d.len() - 1) * step + 1` bytes).
#[inline]
fn widen_strided(src: &[u8], step: usize, d: &mut [i16]) {
    match step {
        1 => {
            let n = d.len();
            for (o, &v) in d.iter_mut().zip(&src[..n]) {
                *o = v as i16;
            }
        }
        2 if !d.is_empty() => {
            let n = d.len();
            for (o, c) in d[..n - 1].iter_mut().zip(src.chunks_exact(2)) {
                *o = c[0] as i16;
            }
            d[n - 1] = src[2 * (n - 1)] as i16;
        }
        _ => {
            for (o, &v) in d.iter_mut().zip(src.iter().step_by(step)) {
                *o = v as i16;
            }
        }
    }
}

/// Geometry of the phase-split padded plane of a depthwise conv: `(hps, wps, plen)`.
/// The plane padded with the zero point is split into `sh * sw` phases (phase `(qy, qx)`
/// holds padded rows `qy, qy + sh, ..` and columns `qx, qx + sw, ..`), so that every tap
/// reads a phase at stride 1 and the sums run over whole rows of `wps` (the first `ow`
/// of each are kept). Each phase has one spare row for the last row's overrun.
pub(crate) fn dw_phases(s: &ConvShape) -> (usize, usize, usize) {
    let hp = (s.oh.max(1) - 1) * s.sh + (s.kh - 1) * s.dh + 1;
    let wp = (s.ow.max(1) - 1) * s.sw + (s.kw - 1) * s.dw + 1;
    let (hps, wps) = (hp.div_ceil(s.sh), wp.div_ceil(s.sw));
    (hps, wps, (hps + 1) * wps)
}

/// Depthwise conv of channels `[c_lo, c_hi)` of one image: a u8 output block by block
/// through the table's `qdepthwise_block` (exact f32 sums, [`super::dw_exact`]) where it
/// has one and takes the block, else (and an i32 output) [`depthwise_int`].
#[allow(clippy::too_many_arguments)]
fn depthwise(
    kt: &crate::kernels::isa::KernelTable,
    s: &ConvShape,
    xb: &[u8],
    zp: u8,
    (w, taps): (&[i16], &super::dw_exact::DwTaps),
    dst: &mut ConvOut<'_>,
    ob: usize,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    let t = kt.quant;
    let block = kt
        .qdepthwise_block
        .filter(|_| matches!(dst, ConvOut::U8(..)));
    let Some(block) = block else {
        return depthwise_int(t, s, xb, zp, w, dst, ob, (c_lo, c_hi), scratch);
    };
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    let mut c0 = c_lo;
    while c0 < c_hi {
        let nc = super::dw_exact::LANES.min(c_hi - c0);
        let done = match dst {
            ConvOut::U8(rq, o, ties) => {
                let yb = &mut o[ob..ob + s.c_out * ohw];
                let (sc, list) = scratch.dw_bufs(super::dw_exact::scratch_len(s));
                let list = if ties.is_some() { list } else { &mut [] };
                let mut near = super::dw_exact::NearTies::new(list);
                let done = block(s, xb, zp, taps, rq, yb, c0, nc, sc, &mut near);
                match (ties, near.list()) {
                    (Some(ties), Some(list)) if done => {
                        // The near-ties the block found, settled like the reference.
                        let (minv, maxv) = super::body::bounds(rq.lo, rq.hi, rq.y_zp);
                        for &i in list {
                            let (c, j) = (i as usize / ohw, i as usize % ohw);
                            let plane = &xb[c * hw..(c + 1) * hw];
                            let r = ties.value_m1(s, plane, zp, c, j);
                            yb[i as usize] = super::body::clamp_round(r, minv, maxv, rq.y_zp);
                        }
                        true
                    }
                    // Too many near-ties to list: the integer path settles them.
                    (Some(_), None) => false,
                    _ => done,
                }
            }
            ConvOut::I32(..) => false,
        };
        if !done {
            depthwise_int(t, s, xb, zp, w, dst, ob, (c0, c0 + nc), scratch);
        }
        c0 += nc;
    }
}

/// Depthwise conv of channels `[c_lo, c_hi)` of one image on i32 sums (`dw_taps`).
#[allow(clippy::too_many_arguments)]
fn depthwise_int(
    t: &super::table::QuantTable,
    s: &ConvShape,
    xb: &[u8],
    zp: u8,
    w: &[i16],
    dst: &mut ConvOut<'_>,
    ob: usize,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let (hps, wps, plen) = dw_phases(s);
    let (phases, acc) = scratch.conv_bufs(s.sh * s.sw * plen, s.oh * wps + ohw);
    let (full, acc) = acc.split_at_mut(s.oh * wps);
    let mut offs = [0usize; 64];
    let many: Vec<usize>;
    let tap = |ky: usize, kx: usize| {
        let (qy, ry) = ((ky * s.dh) % s.sh, (ky * s.dh) / s.sh);
        let (qx, rx) = ((kx * s.dw) % s.sw, (kx * s.dw) / s.sw);
        (qy * s.sw + qx) * plen + ry * wps + rx
    };
    let offs: &[usize] = if khw <= offs.len() {
        for (i, o) in offs[..khw].iter_mut().enumerate() {
            *o = tap(i / s.kw, i % s.kw);
        }
        &offs[..khw]
    } else {
        many = (0..khw).map(|i| tap(i / s.kw, i % s.kw)).collect();
        &many
    };
    for c in c_lo..c_hi {
        let plane = &xb[c * hw..(c + 1) * hw];
        for qy in 0..s.sh {
            for qx in 0..s.sw {
                let ph = &mut phases[(qy * s.sw + qx) * plen..][..plen];
                ph.fill(zp as i16);
                for r in 0..hps {
                    let iy = (r * s.sh + qy) as isize - s.ph as isize;
                    if iy < 0 || iy >= s.h as isize {
                        continue;
                    }
                    let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
                    // Phase columns cc with 0 <= cc * sw + qx - pw < w.
                    let (lo, hi) =
                        crate::kernels::body::pool::valid_range(wps, s.sw, s.pw, qx, s.w);
                    let row = &mut ph[r * wps..(r + 1) * wps];
                    if lo >= hi {
                        continue;
                    }
                    let ix0 = lo * s.sw + qx - s.pw;
                    widen_strided(&src[ix0..], s.sw, &mut row[lo..hi]);
                }
            }
        }
        (t.dw_taps)(offs, &w[c * khw..(c + 1) * khw], phases, full);
        for (a, f) in acc.chunks_exact_mut(s.ow).zip(full.chunks_exact(wps)) {
            a.copy_from_slice(&f[..s.ow]);
        }
        dst.put_seg(t, s, plane, zp, c, acc, 0, ob + c * ohw);
    }
}

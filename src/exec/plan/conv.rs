//! Conv family (Conv, ConvTranspose): planning (geometry checked, weights packed, fused
//! post-ops resolved, intra-op chunks cut) and running, whole, by tiles or on intra-op
//! helper threads.
//!
//! A dense conv's tiles split its output positions when the plane is larger than the
//! channel count, else its output channels; depthwise / grouped convs and ConvTranspose
//! split channels. Channel tiles of a dense one-image conv share one packed im2col
//! matrix, packed by tile 0 and kept in the state for the following tiles.
//!
//! Intra-op chunks (a node run whole on several threads, `exec::pool`): dense and
//! depthwise one-image convs are cut into output-channel ranges, each a conv of its own
//! over disjoint outputs with the same kernels (bit-identical to one thread), as many as
//! the threads allow while each chunk keeps [`pool::MIN_CHUNK_US`] of estimated work.

use super::ctx::{expand_channel, geom2, nchw, Ctx};
use super::errors::{bad_attr, shape_err, unsup};
use super::post::{conv_epilogue, post_ops, residual_inputs, MAX_RESIDUALS};
use super::{out_f32, units_done, units_stale, FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::exec::pool;
use crate::exec::Line;
use crate::huge_pages::HugeVec;
use crate::ir::{self, Elems, PostOp, TensorData};
use crate::kernels::bf16::{self, Bf16ConvWeights, Bf16Table};
use crate::kernels::conv::{self, direct, ConvShape, ConvWeights, DeconvPlan, WinogradPlan};
use crate::kernels::gemm::{self, Epilogue, NR};
use crate::kernels::packed::WeightBuf;
use crate::kernels::simd::Isa;
use crate::kernels::unary::PostOpRt;

/// Channels of a depthwise chunk are a multiple of this (but the last): whole blocks of
/// the across-channels kernel (`kernels::body::dw_block`).
const DW_CHUNK_ALIGN: usize = crate::kernels::body::dw_block::BLOCK_LANES;

/// Output channels `[c0, c1)` of a conv as a conv of their own, for one intra-op thread,
/// with weights `W`: dense, the same input and the rows `c0..c1` of the weights packed
/// separately; depthwise, input channels `c0..c1` and their taps (borrowed from the
/// whole).
#[derive(Debug)]
pub(crate) struct Chunk<W> {
    c0: usize,
    c1: usize,
    s: ConvShape,
    w: W,
}

/// An f32 conv's intra-op chunk.
pub(crate) type ConvChunk = Chunk<ConvWeights>;

/// A bf16 conv's intra-op chunk (weights in K pairs).
pub(crate) type Bf16ConvChunk = Chunk<Bf16ConvWeights>;

/// The intra-op chunks of a dense conv (one image: the ranges [`conv_chunk_ranges`]
/// cuts), each with rows `c0..c1` of the flat weights `wt` packed on their own by
/// `pack`.
fn dense_chunks<W>(
    s: &ConvShape,
    wt: &[f32],
    threads: usize,
    pack: impl Fn(&ConvShape, &[f32]) -> W,
) -> Vec<Chunk<W>> {
    let k = s.k();
    conv_chunk_ranges(s, threads)
        .into_iter()
        .map(|(c0, c1)| {
            let sc = ConvShape {
                c_out: c1 - c0,
                ..s.clone()
            };
            let w = pack(&sc, &wt[c0 * k..c1 * k]);
            Chunk { c0, c1, s: sc, w }
        })
        .collect()
}

/// A planned Conv or ConvTranspose.
#[derive(Debug)]
pub(crate) enum ConvKernel {
    Conv {
        s: ConvShape,
        w: ConvWeights,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
        by_cols: bool,
        /// Output-channel chunks run on parallel threads when the node runs whole
        /// (intra-op threads); empty = one thread.
        par: Vec<ConvChunk>,
    },
    /// A ConvTranspose. Its FC tiles cut the output rows (every channel of a row in one
    /// tile: a tile's GEMM then covers all output channels of its own input rows, so
    /// tiles cost no more than the whole, and a one-channel upsampling head splits).
    Deconv {
        p: DeconvPlan,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
    },
    /// A dense 3x3 stride-1 conv by Winograd F(4x4, 3x3) or F(2x2, 3x3). Its FC tiles
    /// cut the plane's tiles into ranges (each transforms only its own input patches)
    /// while there are enough tile panels, else output channels (sharing one
    /// transformed input): see [`wino_tile_panels`].
    Winograd {
        p: WinogradPlan,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
        /// Output-channel chunks `[c0, c1)` run on intra-op threads over one shared
        /// transformed input when the node runs whole; empty = one thread.
        par: Vec<(usize, usize)>,
    },
    /// A dense or grouped conv computed in bf16 (`PlanOptions::precision`): weights in K
    /// pairs, im2col converted per block, f32 epilogue. Tiles as [`ConvKernel::Conv`].
    Bf16 {
        s: ConvShape,
        w: Bf16ConvWeights,
        tab: &'static Bf16Table,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
        by_cols: bool,
        /// Output-channel chunks for intra-op threads when the node runs whole (as
        /// [`ConvKernel::Conv`]'s, each with its own weights); empty = one thread.
        par: Vec<Bf16ConvChunk>,
    },
    /// A dense conv computed direct in f32 (`kernels::conv::direct`: phase planes, no
    /// im2col matrix), one thread. Tiles as [`ConvKernel::Conv`].
    Direct {
        s: ConvShape,
        /// Weights in the panels of `tiling`'s tile.
        w: Vec<f32>,
        tiling: direct::Tiling,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
        by_cols: bool,
    },
    /// A dense conv of planar tensors computed channels-last band by band
    /// (`kernels::conv::dense_nhwc_io` with [`conv::NhwcIo::Planar`]), one thread: each
    /// band's input rows transposed in, its outputs transposed back. Its FC tiles cut
    /// the output rows of all images.
    PlanarNhwc {
        s: ConvShape,
        /// Weights packed as the kernel's B ([`conv::pack_dense_nhwc`]).
        w: Vec<f32>,
        bias: Option<Vec<f32>>,
        post: Vec<PostOpRt>,
        res: Vec<usize>,
    },
}

/// What Conv and ConvTranspose plan alike: the geometry, the weights and the bias.
struct ConvParts<'a> {
    s: ConvShape,
    /// top, left, bottom, right
    pads: [usize; 4],
    /// The weights constant, borrowed (not copied: it may be a large mapped tensor).
    wt: &'a [f32],
    /// The weights constant when it is borrowed from a compiled file.
    wt_mapped: Option<&'a ir::SharedBytes>,
    bias: Option<Vec<f32>>,
}

/// Checks input, weights, output and attributes of a conv (`transposed`: ConvTranspose,
/// weights `[Cin, Cout/group, k...]`; else `[Cout, Cin/group, k...]`).
fn conv_parts<'a>(
    c: &Ctx<'a>,
    geom: &ir::ConvGeom,
    group: usize,
    transposed: bool,
) -> Result<ConvParts<'a>> {
    let n = c.n;
    c.outputs_typed(ir::DType::F32)?;
    c.require_f32(0)?;
    let xs = c.ishape(0)?;
    let ws = c.ishape(1)?;
    let os = c.oshape(0)?;
    let [nb, cin, h, w] = nchw(n, xs)?;
    let [onb, cout, oh, ow] = nchw(n, os)?;
    if ws.len() != xs.len() {
        return Err(shape_err(
            n,
            format!("weights {ws:?} and input {xs:?} ranks differ"),
        ));
    }
    if os.len() != xs.len() || onb != nb {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit input {xs:?}"),
        ));
    }
    let (wt, wt_mapped) = match c.konst(1) {
        Some(t) => match (t.elems(), &t.data) {
            (Elems::F32(v), TensorData::Mapped { bytes, .. }) => (v, Some(bytes)),
            (Elems::F32(v), _) => (v, None),
            _ => return Err(unsup(n, "weight W must be f32")),
        },
        None => return Err(unsup(n, "weight W must be a constant")),
    };
    let ge = geom2(n, geom, xs.len() - 2, &ws[2..])?;
    if !geom.kernel.is_empty() && geom.kernel[..] != ws[2..] {
        return Err(bad_attr(
            n,
            "kernel_shape",
            format!("{:?} differs from the weights {ws:?}", geom.kernel),
        ));
    }
    let (w0, w1) = if transposed { (cin, cout) } else { (cout, cin) };
    if group == 0 || cin % group != 0 || cout % group != 0 || ws[0] != w0 || ws[1] * group != w1 {
        return Err(shape_err(
            n,
            format!("weights {ws:?} do not fit input {xs:?} with group {group}"),
        ));
    }
    let s = ge.conv_shape(nb, [cin, h, w], [cout, oh, ow], group);
    let bias = if c.has(2) {
        Some(expand_channel(n, &c.const_f32(2, "bias B")?, cout, "bias")?)
    } else {
        None
    };
    Ok(ConvParts {
        s,
        pads: ge.p,
        wt,
        wt_mapped,
        bias,
    })
}

/// Floats of a conv's weights as the kernel reads them ([`ConvWeights`]): the flat
/// weights for a depthwise conv, else one packed A per group.
fn packed_len(s: &ConvShape) -> usize {
    if s.is_depthwise() {
        s.c_out * s.kh * s.kw
    } else {
        s.group * gemm::packed_a_len(s.cout_g(), s.k())
    }
}

/// The weights of a conv as the kernel reads them: `pre` (packed when the compiled file
/// was written) when given, the mapped constant itself for a depthwise conv, else packed
/// now. Borrowed buffers are cut into groups without copying.
fn conv_weights(
    c: &Ctx<'_>,
    s: &ConvShape,
    parts: &ConvParts<'_>,
    pre: Option<&WeightBuf>,
) -> Result<ConvWeights> {
    let flat = match pre {
        Some(p) if p.len() != packed_len(s) => {
            return Err(shape_err(
                c.n,
                format!(
                    "packed weights hold {} floats, the conv needs {}",
                    p.len(),
                    packed_len(s)
                ),
            ))
        }
        Some(p) => Some(p.clone()),
        None if s.is_depthwise() => parts.wt_mapped.and_then(|b| WeightBuf::shared(b.clone())),
        None => None,
    };
    let Some(flat) = flat else {
        return Ok(ConvWeights::pack(s, parts.wt));
    };
    if s.is_depthwise() {
        return Ok(ConvWeights { groups: vec![flat] });
    }
    let per = gemm::packed_a_len(s.cout_g(), s.k());
    let groups = (0..s.group)
        .map(|g| flat.slice(g * per..(g + 1) * per))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| shape_err(c.n, "packed weights do not split into groups"))?;
    Ok(ConvWeights { groups })
}

/// The weights of a planned conv as they would be stored packed in a compiled file
/// (what [`conv_weights`] takes as `pre`); `None` when there are none worth storing
/// (a depthwise conv borrows its constant, a ConvTranspose packs at load).
pub(super) fn stored_weights(k: &ConvKernel) -> Option<Vec<&[f32]>> {
    match k {
        ConvKernel::Conv { s, w, .. } if !s.is_depthwise() => {
            Some(w.groups.iter().map(|g| &g[..]).collect())
        }
        ConvKernel::Winograd { p, .. } => Some(vec![p.weights()]),
        _ => None,
    }
}

/// Plans a Conv with its fused post-ops.
pub(crate) fn plan_conv(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
    pre: Option<&WeightBuf>,
) -> Result<Planned> {
    let parts = conv_parts(c, geom, group, false)?;
    let (s, pads) = (&parts.s, parts.pads);
    let want = |i: usize, k: usize, st: usize, d: usize, pb: usize, pe: usize| {
        i.checked_add(pb)?
            .checked_add(pe)?
            .checked_sub(d.checked_mul(k - 1)?.checked_add(1)?)
            .map(|v| v / st + 1)
    };
    if want(s.h, s.kh, s.sh, s.dh, pads[0], pads[2]) != Some(s.oh)
        || want(s.w, s.kw, s.sw, s.dw, pads[1], pads[3]) != Some(s.ow)
    {
        return Err(shape_err(
            c.n,
            format!("output {}x{} does not match the conv geometry", s.oh, s.ow),
        ));
    }
    let (post, res) = post_ops(c, post, s.c_out)?;
    if let Some(tab) = c.bf16.filter(|t| bf16_conv_wins(t, s)) {
        let ConvParts { s, wt, bias, .. } = parts;
        let by_cols = s.group == 1 && s.oh * s.ow > s.c_out;
        let scratch = bf16::conv_scratch_len(tab, &s);
        let par = bf16_conv_chunks(tab, &s, wt, c.threads);
        let helper = if par.is_empty() { 0 } else { scratch };
        let k = ConvKernel::Bf16 {
            w: Bf16ConvWeights::pack(tab, &s, wt),
            s,
            tab,
            bias,
            post,
            res,
            by_cols,
            par,
        };
        return Ok(Planned::new(k).scratch(scratch).helper_scratch(helper));
    }
    if crate::compile::cost::winograd_wins(s) {
        let ConvParts { s, wt, bias, .. } = parts;
        let bf16 = c.bf16;
        let ws = WinoSource { wt, pre, bf16 };
        return Ok(plan_winograd(&s, ws, bias, post, res, c.threads));
    }
    // One thread: strided convs channels-last band by band.
    if c.threads <= 1 && pre.is_none() && conv::planar_nhwc_wins(s) {
        let ConvParts { s, wt, bias, .. } = parts;
        let scratch = conv::dense_nhwc_io_scratch_len(&s, conv::NhwcIo::Planar);
        let k = ConvKernel::PlanarNhwc {
            w: conv::pack_dense_nhwc(&s, wt),
            s,
            bias,
            post,
            res,
        };
        return Ok(Planned::new(k).scratch(scratch));
    }
    // One thread: the direct f32 conv where the table has its tile (intra-op threads
    // keep the im2col path, whose channel chunks they share; so does a compiled file
    // that stored im2col-packed weights for the node).
    if c.threads <= 1 && pre.is_none() && direct::f32_wins(s) {
        let ConvParts { s, wt, bias, .. } = parts;
        let by_cols = s.oh * s.ow > s.c_out;
        let tiling = direct::tiling(&s, 1);
        let scratch = direct::scratch_len(&s, 1, tiling);
        let k = ConvKernel::Direct {
            w: direct::pack_weights(&s, wt, 1, |lo, _| lo, tiling),
            tiling,
            s,
            bias,
            post,
            res,
            by_cols,
        };
        return Ok(Planned::new(k).scratch(scratch));
    }
    let wts = conv_weights(c, s, &parts, pre)?;
    let ConvParts { s, wt, bias, .. } = parts;
    let mut scratch = s.scratch_len();
    // Tiles split whichever GEMM dimension is larger, so that what each tile repeats
    // (packing B for channel tiles, streaming A for position tiles) stays negligible.
    let by_cols = !s.is_depthwise() && s.group == 1 && s.oh * s.ow > s.c_out;
    if conv_shares_b(&s, by_cols) {
        scratch += conv::full_b_len(&s);
    }
    let par = conv_chunks(&s, wt, &wts, c.threads);
    let helper = par.iter().map(|ch| ch.s.scratch_len()).max().unwrap_or(0);
    let k = ConvKernel::Conv {
        s,
        w: wts,
        bias,
        post,
        res,
        by_cols,
        par,
    };
    Ok(Planned::new(k).scratch(scratch).helper_scratch(helper))
}

/// Output channels per group from which a 1x1 stride-1 unpadded conv runs in bf16
/// through im2col: with fewer, converting its input (which the f32 path reads in place)
/// costs more than the faster products save. Pointwise convs the direct bf16 conv takes
/// (64+ input channels) run in bf16 whatever their width (MobileNetV2's 144->24 at 56x56:
/// 171 us against 234 in f32).
const BF16_POINTWISE_MIN_COUT: usize = 96;

/// True when a bf16 plan computes conv `s` through `tab` in bf16. With a wide (AMX)
/// run: the convs it takes, and no other (on a Xeon with AMX, the AVX512_BF16 tiles
/// took 1.2-4.2x the best f32 time on every ResNet-18 and MobileNetV2 conv shape, e.g.
/// the 7x7 stem 2681 us against 1636 direct f32; the wide run 0.13-0.5x on 3x3 convs).
/// Without: every dense or grouped conv but those the f32 Winograd path computes faster
/// (in ResNet-18 on Zen 4, its 3x3 stride-1 convs ran 0.3-1.8 ms slower per inference
/// as direct bf16 convs) and narrow pointwise ones.
fn bf16_conv_wins(tab: &Bf16Table, s: &ConvShape) -> bool {
    if tab.wide.is_some() {
        return !s.is_depthwise() && bf16::runs_wide(tab, s);
    }
    let pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
    !s.is_depthwise()
        && !crate::compile::cost::winograd_wins(s)
        && (!pointwise || s.cout_g() >= BF16_POINTWISE_MIN_COUT || bf16::direct_applies(tab, s))
}

/// The intra-op chunks of a bf16 conv (dense, one image: the ranges
/// [`conv_chunk_ranges`] cuts), each with its weights packed on their own; `wt` the flat
/// weights. Every output is computed by the same tile arithmetic as in the whole conv
/// (its weight row, the same im2col blocks), so the chunks equal one thread bit for bit.
fn bf16_conv_chunks(
    tab: &Bf16Table,
    s: &ConvShape,
    wt: &[f32],
    threads: usize,
) -> Vec<Bf16ConvChunk> {
    dense_chunks(s, wt, threads, |s, w| Bf16ConvWeights::pack(tab, s, w))
}

/// Runs a bf16 conv's chunks on this thread and the intra-op helper pool.
#[allow(clippy::too_many_arguments)]
fn run_bf16_chunks(
    tab: &Bf16Table,
    isa: Isa,
    par: &[Bf16ConvChunk],
    x: &[f32],
    y: &mut [f32],
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
    helpers: &mut [HugeVec<Line>],
) {
    run_chunks(par, y, epi, scratch, helpers, &|ch, e, part, scratch| {
        let (chans, cols) = ((0, ch.c1 - ch.c0), (0, ch.s.oh * ch.s.ow));
        bf16::conv2d_bf16(tab, isa, &ch.s, &ch.w, x, part, chans, cols, e, scratch);
    });
}

/// One chunk's conv for [`run_chunks`]: `(chunk, epilogue, output part, scratch)`.
type ChunkConv<'a, W> = dyn Fn(&Chunk<W>, &Epilogue<'_>, &mut [f32], &mut [f32]) + Sync + 'a;

/// Runs the chunks of a conv on this thread and the intra-op helper pool
/// (`exec::pool`), each writing its own disjoint block of output channels with its own
/// scratch: `conv(ch, e, part, scratch)` computes chunk `ch` into `part` with `e`, the
/// epilogue of its channels (its slice of each residual, its channel offset).
fn run_chunks<W: Sync>(
    par: &[Chunk<W>],
    y: &mut [f32],
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
    helpers: &mut [HugeVec<Line>],
    conv: &ChunkConv<'_, W>,
) {
    let ohw = par.first().map_or(0, |ch| ch.s.oh * ch.s.ow);
    let run = |ch: &Chunk<W>, part: &mut [f32], scratch: &mut [f32]| {
        // Residuals are laid out like the output: take this chunk's channels.
        let mut rc: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        for (d, r) in rc.iter_mut().zip(epi.residuals) {
            *d = &r[ch.c0 * ohw..ch.c1 * ohw];
        }
        let e = Epilogue {
            channel_offset: ch.c0,
            residuals: &rc[..epi.residuals.len()],
            ..*epi
        };
        conv(ch, &e, part, scratch);
    };
    let mut parts = crate::exec::pool::chunk_parts(
        par.iter().map(|ch| (ch.c1 - ch.c0) * ohw),
        y,
        scratch,
        helpers,
    );
    crate::exec::pool::global().run(&mut parts[..par.len()], &|i, slot| {
        if let Some((part, s)) = slot.take() {
            run(&par[i], part, s);
        }
    });
}

/// Where a Winograd plan's weights come from.
struct WinoSource<'a> {
    /// The conv's weights (`[Cout, Cin, 3, 3]`).
    wt: &'a [f32],
    /// Transformed weights a compiled file stored, when it did.
    pre: Option<&'a WeightBuf>,
    /// The bf16 table when the plan computes its point GEMMs in bf16.
    bf16: Option<&'static Bf16Table>,
}

/// True when a bf16 plan computes the point GEMMs of Winograd plan `p` in bf16: with
/// F(2x2, 3x3) tiles (small planes) only. In bf16, F(4x4, 3x3)'s transforms (points ±2,
/// output weights up to 8) amplify the operands' rounding about 20x (ResNet-18's logits:
/// 3.3e-2 of their range off f32 against 4.3e-3 with those convs in f32), and F(2x2) on
/// the larger planes is slower than f32 F(4x4) (more points per output); on 7x7 planes
/// F(2x2) in bf16 takes 0.67x the f32 time at the same accuracy as the rest of the plan.
fn wino_bf16_wins(p: &WinogradPlan) -> bool {
    p.tile() == 2
}

/// F(4x4)'s f32 transformed weights from which a bf16 plan runs the conv as F(2x2) in
/// bf16 instead: past this they stream from memory on every inference (ResNet-18's
/// 256-channel 14x14 convs, 9.4 MB each: 1.10 ms in f32 F(4x4) against 0.84-0.91 ms in
/// bf16 F(2x2), caches flushed between runs; the 128-channel 28x28 ones, 2.4 MB, stay
/// faster in F(4x4)).
const BF16_F2_MIN_F4_BYTES: usize = 4 << 20;

/// True when a bf16 plan runs Winograd conv `s` as F(2x2) in bf16 rather than the
/// F(4x4) in f32 the f32 planner picks ([`BF16_F2_MIN_F4_BYTES`]).
fn bf16_f2_beats_f4(s: &ConvShape) -> bool {
    WinogradPlan::tile_for(s) == 4 && 36 * s.c_in * s.c_out * 4 >= BF16_F2_MIN_F4_BYTES
}

/// Plans a conv the Winograd path computes (one thread): channel tiles of one image share
/// its transformed input, packed by tile 0 and kept in the state like an im2col matrix.
fn plan_winograd(
    s: &ConvShape,
    WinoSource { wt, pre, bf16 }: WinoSource<'_>,
    bias: Option<Vec<f32>>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
    threads: usize,
) -> Planned {
    // Transformed weights stored by the compiled file for this kernel table, else
    // transformed now.
    let p = pre
        .and_then(|u| WinogradPlan::with_weights(s, u.clone()))
        .unwrap_or_else(|| WinogradPlan::new(s, wt));
    let p = match bf16 {
        Some(tab) if wino_bf16_wins(&p) => p.into_bf16(tab),
        Some(tab) if bf16_f2_beats_f4(s) => WinogradPlan::with_tile(s, wt, 2).into_bf16(tab),
        _ => p,
    };
    // Output-channel chunks for intra-op threads, as the im2col path cuts them.
    let par: Vec<(usize, usize)> = conv_chunk_ranges(s, threads);
    // A shared transformed input for channel tiles (only where the plane has fewer tile
    // panels than the conv has channel panels) and for intra-op chunks.
    let channel_tiles = wino_units(&p) > wino_tile_panels(&p);
    let shared = if (channel_tiles || !par.is_empty()) && s.n == 1 {
        p.input_len()
    } else {
        0
    };
    let scratch = p.scratch_len() + shared;
    let helper = if par.is_empty() {
        0
    } else {
        p.chunk_scratch_len()
    };
    let k = ConvKernel::Winograd {
        p,
        bias,
        post,
        res,
        par,
    };
    Planned::new(k).scratch(scratch).helper_scratch(helper)
}

/// NR-wide panels of a Winograd conv's output tiles: an FC cut into at most this many
/// tiles takes ranges of the plane's tiles; one cut finer takes output channels. Tile
/// ranges cost nothing over the whole node (each range transforms only its own patches,
/// and the whole node streams the transformed weights once per block of tiles anyway),
/// and they reach any FC size on a large plane; channel tiles serve small planes.
fn wino_tile_panels(p: &WinogradPlan) -> usize {
    p.plane_tiles().div_ceil(gemm::NR)
}

/// Units of work of a Winograd conv cut finer than its tile panels: for one image, its
/// output channels' MR panels on each block of plane tiles, block after block (the
/// order of the whole node's loop, so that a tile reads the block's transformed input
/// that it or the tile before it made, in L2, and streams the weights of its channels
/// once per block as the whole node does); for a batch, the channel panels only.
fn wino_units(p: &WinogradPlan) -> usize {
    let cblocks = p.shape().c_out.div_ceil(gemm::MR);
    if p.shape().n == 1 {
        p.input_blocks() * cblocks
    } else {
        cblocks
    }
}

/// The output-channel ranges [`conv_chunks`] cuts from a dense one-image conv, aligned to
/// the GEMM row panel (empty = one thread).
fn conv_chunk_ranges(s: &ConvShape, threads: usize) -> Vec<(usize, usize)> {
    if threads < 2 || s.n != 1 || s.group != 1 {
        return Vec::new();
    }
    let us = s.macs() / pool::DENSE_MACS_PER_US;
    pool::chunk_ranges(s.c_out, gemm::MR, us, threads)
}

/// The channel ranges [`conv_chunks`] cuts from a depthwise one-image conv (empty = one
/// thread); every range keeps two channels or more, so it stays a depthwise conv.
fn dw_chunk_ranges(s: &ConvShape, threads: usize) -> Vec<(usize, usize)> {
    if threads < 2 || s.n != 1 || !s.is_depthwise() {
        return Vec::new();
    }
    let us = s.macs() / pool::DEPTHWISE_MACS_PER_US;
    let r = pool::chunk_ranges(s.c_out, DW_CHUNK_ALIGN, us, threads);
    if r.iter().any(|&(c0, c1)| c1 - c0 < 2) {
        return Vec::new();
    }
    r
}

/// Runs a Winograd conv's channel chunks on this thread and the intra-op helper pool
/// (`exec::pool`) over the transformed input `v`, each writing its own block of channels.
#[allow(clippy::too_many_arguments)]
fn run_winograd_chunks(
    isa: Isa,
    p: &WinogradPlan,
    par: &[(usize, usize)],
    v: &[f32],
    y: &mut [f32],
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
    helpers: &mut [HugeVec<Line>],
) {
    let ohw = p.shape().oh * p.shape().ow;
    let run = |(c0, c1): (usize, usize), part: &mut [f32], scratch: &mut [f32]| {
        let mut rc: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        for (d, r) in rc.iter_mut().zip(epi.residuals) {
            *d = &r[c0 * ohw..c1 * ohw];
        }
        let e = Epilogue {
            channel_offset: c0,
            residuals: &rc[..epi.residuals.len()],
            ..*epi
        };
        p.run_chunk(isa, v, part, (c0, c1), &e, scratch);
    };
    let mut parts = crate::exec::pool::chunk_parts(
        par.iter().map(|&(c0, c1)| (c1 - c0) * ohw),
        y,
        scratch,
        helpers,
    );
    crate::exec::pool::global().run(&mut parts[..par.len()], &|i, slot| {
        if let Some((part, s)) = slot.take() {
            run(par[i], part, s);
        }
    });
}

/// Plans a ConvTranspose (output padding and shape are already in the output shape).
pub(crate) fn plan_deconv(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
) -> Result<Planned> {
    let ConvParts { s, wt, bias, .. } = conv_parts(c, geom, group, true)?;
    let (post, res) = post_ops(c, post, s.c_out)?;
    let p = DeconvPlan::new(s, wt);
    let scratch = p.scratch_len();
    Ok(Planned::new(ConvKernel::Deconv { p, bias, post, res }).scratch(scratch))
}

/// Runs an f32 conv's chunks on this thread and the intra-op helper pool (a depthwise
/// chunk reads only its own input channels).
fn run_conv_chunks(
    isa: Isa,
    par: &[ConvChunk],
    x: &[f32],
    y: &mut [f32],
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
    helpers: &mut [HugeVec<Line>],
) {
    let hw = par.first().map_or(0, |ch| ch.s.h * ch.s.w);
    run_chunks(par, y, epi, scratch, helpers, &|ch, e, part, scratch| {
        let x = if ch.s.is_depthwise() {
            &x[ch.c0 * hw..ch.c1 * hw]
        } else {
            x
        };
        let (c_out, ohw) = (ch.c1 - ch.c0, ch.s.oh * ch.s.ow);
        conv::conv2d(
            isa,
            &ch.s,
            &ch.w,
            x,
            part,
            0,
            c_out,
            (0, ohw),
            None,
            e,
            scratch,
        );
    });
}

/// Splits a large single-image conv into up to `threads` output-channel chunks: a dense
/// one by ranges aligned to the GEMM row panel, each with its own packed weights (`w`,
/// the flat weights); a depthwise one by channel ranges borrowing their taps from `wts`.
fn conv_chunks(s: &ConvShape, w: &[f32], wts: &ConvWeights, threads: usize) -> Vec<ConvChunk> {
    if s.is_depthwise() {
        let khw = s.kh * s.kw;
        let chunk = |(c0, c1): (usize, usize)| {
            let c = c1 - c0;
            let taps = wts.groups.first()?.slice(c0 * khw..c1 * khw)?;
            Some(ConvChunk {
                c0,
                c1,
                s: ConvShape {
                    c_in: c,
                    c_out: c,
                    group: c,
                    ..s.clone()
                },
                w: ConvWeights { groups: vec![taps] },
            })
        };
        return dw_chunk_ranges(s, threads)
            .into_iter()
            .map(chunk)
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
    }
    dense_chunks(s, w, threads, ConvWeights::pack)
}

/// True when channel tiles of this conv share one packed im2col matrix (dense conv,
/// one image, split by channels).
fn conv_shares_b(s: &ConvShape, by_cols: bool) -> bool {
    !by_cols && !s.is_depthwise() && s.group == 1 && s.n == 1
}

impl FamilyKernel for ConvKernel {
    fn tiles(&self) -> usize {
        match self {
            ConvKernel::Conv { s, by_cols, .. } | ConvKernel::Bf16 { s, by_cols, .. } => {
                if *by_cols {
                    (s.oh * s.ow).div_ceil(NR)
                } else {
                    s.c_out.div_ceil(conv::channel_align(s))
                }
            }
            ConvKernel::Direct {
                s, by_cols, tiling, ..
            } => {
                if *by_cols {
                    (s.oh * s.ow).div_ceil(NR)
                } else {
                    s.c_out.div_ceil(direct::channel_align(*tiling))
                }
            }
            ConvKernel::PlanarNhwc { s, .. } => s.n * s.oh,
            ConvKernel::Deconv { p, .. } => p.s.oh.div_ceil(p.s.sh),
            ConvKernel::Winograd { p, .. } => wino_tile_panels(p).max(wino_units(p)),
        }
    }

    fn macs(&self) -> usize {
        match self {
            ConvKernel::Conv { s, .. }
            | ConvKernel::Bf16 { s, .. }
            | ConvKernel::Direct { s, .. }
            | ConvKernel::PlanarNhwc { s, .. } => s.macs(),
            ConvKernel::Winograd { p, .. } => p.shape().macs(),
            ConvKernel::Deconv { p, .. } => {
                p.s.n * p.s.c_in * p.s.h * p.s.w * p.s.cout_g() * p.s.kh * p.s.kw
            }
        }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (tile, io) = (r.tile, r.io);
        match self {
            ConvKernel::Conv {
                s,
                w,
                bias,
                post,
                res,
                by_cols,
                par,
            } => {
                let ((lo, hi), cols) = tile_span(s, (*by_cols, conv::channel_align(s)), tile);
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let x = io.f32(0);
                let y = out_f32(r.out, r.outs, 0);
                if tile.count == 1 && !par.is_empty() && r.helpers.len() + 1 >= par.len() {
                    run_conv_chunks(r.isa, par, x, y, &epi, r.scratch, r.helpers);
                } else if tile.count > 1 && conv_shares_b(s, *by_cols) {
                    // Channel tiles of one image share its im2col matrix: tile 0 packs it.
                    let (full, rest) = r.scratch.split_at_mut(conv::full_b_len(s));
                    if tile.index == 0 || *r.bcache != Some(r.index) {
                        conv::pack_b_full_on(r.isa, s, x, full);
                        *r.bcache = Some(r.index);
                    }
                    conv::conv2d(r.isa, s, w, x, y, lo, hi, cols, Some(full), &epi, rest);
                } else {
                    conv::conv2d(r.isa, s, w, x, y, lo, hi, cols, None, &epi, r.scratch);
                }
            }
            ConvKernel::Bf16 {
                s,
                w,
                tab,
                bias,
                post,
                res,
                by_cols,
                par,
            } => {
                let (chans, cols) = tile_span(s, (*by_cols, conv::channel_align(s)), tile);
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let (x, y) = (io.f32(0), out_f32(r.out, r.outs, 0));
                if tile.count == 1 && !par.is_empty() && r.helpers.len() + 1 >= par.len() {
                    run_bf16_chunks(tab, r.isa, par, x, y, &epi, r.scratch, r.helpers);
                } else {
                    bf16::conv2d_bf16(tab, r.isa, s, w, x, y, chans, cols, &epi, r.scratch);
                }
            }
            ConvKernel::Direct {
                s,
                w,
                tiling,
                bias,
                post,
                res,
                by_cols,
            } => {
                let align = direct::channel_align(*tiling);
                let (chans, cols) = tile_span(s, (*by_cols, align), tile);
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let (x, y) = (io.f32(0), out_f32(r.out, r.outs, 0));
                direct::conv2d_f32(r.isa, *tiling, s, w, x, y, chans, cols, &epi, r.scratch);
            }
            ConvKernel::PlanarNhwc {
                s,
                w,
                bias,
                post,
                res,
            } => {
                let rows = tile.range(s.n * s.oh, 1);
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let (x, y) = (io.f32(0), out_f32(r.out, r.outs, 0));
                let planar = conv::NhwcIo::Planar;
                conv::dense_nhwc_io(r.isa, planar, s, w, x, y, rows, &epi, r.scratch);
            }
            ConvKernel::Deconv { p, bias, post, res } => {
                // Cuts at multiples of the stride, so that no input row is computed twice
                // when the kernel does not overlap (kernel = stride, the upsampling case).
                let rows = tile.range(p.s.oh, p.s.sh);
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let y = out_f32(r.out, r.outs, 0);
                p.run(r.isa, io.f32(0), y, (0, p.s.c_out), rows, &epi, r.scratch);
            }
            ConvKernel::Winograd {
                p,
                bias,
                post,
                res,
                par,
            } => {
                let s = p.shape();
                let by_tiles = tile.count <= wino_tile_panels(p);
                let (chans, tiles) = if by_tiles {
                    ((0, s.c_out), tile.range(p.plane_tiles(), gemm::NR))
                } else {
                    (tile.range(s.c_out, gemm::MR), (0, p.plane_tiles()))
                };
                let resid = residual_inputs(io, res);
                let epi = conv_epilogue(bias.as_deref(), post, &resid[..res.len()]);
                let (x, y) = (io.f32(0), out_f32(r.out, r.outs, 0));
                if tile.count == 1 && !par.is_empty() && r.helpers.len() + 1 >= par.len() {
                    let (v, rest) = r.scratch.split_at_mut(p.input_len());
                    p.transform_input(x, v);
                    *r.bcache = Some(r.index);
                    run_winograd_chunks(r.isa, p, par, v, y, &epi, rest, r.helpers);
                } else if !by_tiles && s.n == 1 {
                    // Units: channel panels on each block of plane tiles (`wino_units`).
                    // A block's transformed input goes to its place in the scratch when
                    // the tile meets the block first; a tile that starts inside a block
                    // finds it there when it follows this node's previous tile.
                    let panels = s.c_out.div_ceil(gemm::MR);
                    let (u0, u1) = tile.range(wino_units(p), 1);
                    let (v, rest) = r.scratch.split_at_mut(p.input_len());
                    let mut made = (u0 % panels != 0 && !units_stale(r.bcache, r.index, u0))
                        .then_some(u0 / panels);
                    let mut u = u0;
                    while u < u1 {
                        let b = u / panels;
                        let end = ((b + 1) * panels).min(u1);
                        if made != Some(b) {
                            p.transform_input_blocks(x, v, (b, b + 1));
                            made = Some(b);
                        }
                        let chans = ((u - b * panels) * gemm::MR, (end - b * panels) * gemm::MR);
                        let chans = (chans.0, chans.1.min(s.c_out));
                        p.run_tiles(r.isa, x, y, chans, p.block_tiles(b), Some(v), &epi, rest);
                        u = end;
                    }
                    units_done(r.bcache, r.index, u1);
                } else {
                    p.run_tiles(r.isa, x, y, chans, tiles, None, &epi, r.scratch);
                }
            }
        }
        Ok(())
    }
}

/// The output channels and columns (output positions) FC tile `tile` of a dense conv
/// computes: a column range of every channel when `by_cols`, else a channel range (in
/// blocks of `align` channels: the conv's alignment, a direct conv's weight panel) of
/// every column.
fn tile_span(
    s: &ConvShape,
    (by_cols, align): (bool, usize),
    tile: crate::exec::Tile,
) -> ((usize, usize), (usize, usize)) {
    let ohw = s.oh * s.ow;
    if by_cols {
        ((0, s.c_out), tile.range(ohw, NR))
    } else {
        (tile.range(s.c_out, align), (0, ohw))
    }
}

#[cfg(test)]
mod chunk_tests;

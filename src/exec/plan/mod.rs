//! Plan construction and kernel dispatch, by op family.
//!
//! Each family file (`conv`, `gemm`, `elementwise`, ...; the same names as the importer,
//! the shape rules and the kernels) holds its ops' planning and their run code: a plan
//! function per op that checks the node, resolves every attribute, reads every constant
//! operand and packs weights, and a family kernel type whose [`FamilyKernel::run`] only
//! moves data between already-checked slices. This file holds the two registration
//! points: `families!` (one line per family kernel) and `plan_kernel` (one line per
//! op). Shared planning lives in [`ctx`] (the node in its graph), [`post`] (fused
//! post-ops), [`memory`] (the arena layout) and [`errors`].
//!
//! Invariant: a node that plans cannot panic or index out of bounds when run on inputs of
//! its planned sizes; every assumption a family's `run` makes (ranks, lengths, axes,
//! tile ranges) is checked by its plan, which fails with a plan error otherwise.

#[cfg(test)]
mod concat_tests;
#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod tests;

mod ctx;
mod errors;
mod memory;
mod packed;
mod post;

mod attention;
mod conv;
mod dense_nhwc;
mod dw_nhwc;
mod dw_project;
mod elementwise;
mod expand_dw;
mod gemm;
mod generate;
mod image;
mod index;
mod layout;
mod norm;
mod pool;
mod quant;
mod reduce;
mod resize;
mod rnn;
#[cfg(feature = "test-ops")]
mod testing;

pub(crate) use memory::{plan_memory, Layout};
pub use packed::{PackGeometry, PackedWeights};

use super::{Inputs, Loc, Tile};
use crate::error::Result;
use crate::ir::{Graph, Node, Op};
use crate::kernels::bf16::Bf16Table;
use crate::kernels::packed::WeightBuf;
use crate::kernels::simd::Isa;
use ctx::Ctx;
use errors::shape_err;

/// Elements per tile for element-wise ops split by element ranges.
const ELEMS_PER_TILE: usize = 16384;
/// Most tiles any node offers.
const MAX_TILES: usize = 256;

/// One planned node.
#[derive(Debug)]
pub(crate) struct NodePlan {
    pub kernel: Kernel,
    pub inputs: Vec<Option<Loc>>,
    pub out_off: usize,
    pub out_len: usize,
    /// (offset in the output block, byte length) per output.
    pub outs: Vec<(usize, usize)>,
    pub scratch: usize,
    pub iscratch: usize,
    /// Scratch floats each intra-op helper thread needs (0 = the node runs on one thread).
    pub helper_scratch: usize,
}

/// A family's plan of one node: its kernel and the scratch memory a run needs.
pub(crate) struct Planned {
    kernel: Kernel,
    /// Scratch floats.
    scratch: usize,
    /// Scratch indices.
    iscratch: usize,
    /// Scratch floats of each intra-op helper thread.
    helper_scratch: usize,
}

impl Planned {
    /// A kernel that needs no scratch.
    fn new(kernel: impl Into<Kernel>) -> Planned {
        Planned {
            kernel: kernel.into(),
            scratch: 0,
            iscratch: 0,
            helper_scratch: 0,
        }
    }

    /// With `floats` scratch floats.
    fn scratch(mut self, floats: usize) -> Planned {
        self.scratch = floats;
        self
    }

    /// With `n` scratch indices.
    fn iscratch(mut self, n: usize) -> Planned {
        self.iscratch = n;
        self
    }

    /// With `floats` scratch floats for each intra-op helper thread.
    fn helper_scratch(mut self, floats: usize) -> Planned {
        self.helper_scratch = floats;
        self
    }
}

/// One call of a node's kernel: the tile to compute, its inputs, its output block and the
/// state's scratch memory.
pub(crate) struct Run<'a> {
    pub isa: Isa,
    pub node: &'a Node,
    /// Index of the node in the graph.
    pub index: usize,
    pub tile: Tile,
    pub io: &'a Inputs<'a>,
    /// The node's output block.
    pub out: &'a mut [u8],
    /// (offset in `out`, byte length) per output.
    pub outs: &'a [(usize, usize)],
    pub scratch: &'a mut [f32],
    pub iscratch: &'a mut [usize],
    /// What `scratch` holds across a node's tiles (a conv's packed B or transformed
    /// input, a recurrent layer's states): a tag whose low half ([`bcache_node`]) is the
    /// node's index; `run_node` clears it when another node runs.
    pub bcache: &'a mut Option<usize>,
    /// Scratch of the intra-op helper threads.
    pub helpers: &'a mut [crate::huge_pages::HugeVec<crate::exec::Line>],
}

/// The node a `bcache` tag belongs to (its low half of the bits).
pub(crate) fn bcache_node(tag: usize) -> usize {
    tag & ((1 << (usize::BITS / 2)) - 1)
}

/// The `bcache` tag of node `index` having run its units of work `[0, done)` into the
/// scratch (`done >= 1`, so never a plain node index, which the im2col conv stores;
/// below 2^(bits / 2) nodes and units).
fn units_tag(index: usize, done: usize) -> usize {
    (done << (usize::BITS / 2)) | index
}

/// For a tile of node `index` that runs its units `[u0, ..)` on what the units before
/// it left in the scratch (a recurrent layer's states, a Winograd conv's transformed
/// input): true when the scratch does not hold units `[0, u0)` of this node, so the
/// caller rebuilds them first.
pub(crate) fn units_stale(bcache: &Option<usize>, index: usize, u0: usize) -> bool {
    u0 > 0 && *bcache != Some(units_tag(index, u0))
}

/// Records that the scratch holds units `[0, u1)` of node `index` (see [`units_stale`]).
pub(crate) fn units_done(bcache: &mut Option<usize>, index: usize, u1: usize) {
    *bcache = Some(units_tag(index, u1));
}

impl Run<'_> {
    /// The bytes of output `k`.
    fn out_bytes(&mut self, k: usize) -> &mut [u8] {
        out_bytes(self.out, self.outs, k)
    }

    /// Output `k` as f32.
    fn out_f32(&mut self, k: usize) -> &mut [f32] {
        out_f32(self.out, self.outs, k)
    }
}

/// The bytes of output `k` in a node's output block.
fn out_bytes<'o>(out: &'o mut [u8], outs: &[(usize, usize)], k: usize) -> &'o mut [u8] {
    let (o, l) = outs[k];
    &mut out[o..o + l]
}

/// Output `k` of a node's output block as f32.
fn out_f32<'o>(out: &'o mut [u8], outs: &[(usize, usize)], k: usize) -> &'o mut [f32] {
    bytemuck::cast_slice_mut(out_bytes(out, outs, k))
}

/// What every family's kernel offers.
pub(crate) trait FamilyKernel {
    /// Most tiles the kernel can be split into (before the global clamp).
    fn tiles(&self) -> usize;
    /// Multiply-accumulates of the kernel (0 for memory-bound ones).
    fn macs(&self) -> usize {
        0
    }
    /// Runs one tile.
    fn run(&self, r: Run<'_>) -> Result<()>;
}

impl<T: FamilyKernel> FamilyKernel for Box<T> {
    fn tiles(&self) -> usize {
        (**self).tiles()
    }
    fn macs(&self) -> usize {
        (**self).macs()
    }
    fn run(&self, r: Run<'_>) -> Result<()> {
        (**self).run(r)
    }
}

/// Declares [`Kernel`], one variant per family kernel, and its dispatch.
macro_rules! families {
    ($($(#[$m:meta])* $family:ident($ty:ty),)*) => {
        /// A node's kernel with everything resolved: the kernel of its op's family.
        #[derive(Debug)]
        pub(crate) enum Kernel {
            $($(#[$m])* $family($ty),)*
        }

        $($(#[$m])* impl From<$ty> for Kernel {
            fn from(k: $ty) -> Kernel {
                Kernel::$family(k)
            }
        })*

        impl Kernel {
            fn family(&self) -> &dyn FamilyKernel {
                match self {
                    $($(#[$m])* Kernel::$family(k) => k,)*
                }
            }
        }
    };
}

families! {
    Conv(conv::ConvKernel),
    DwNhwc(dw_nhwc::DwNhwcKernel),
    ExpandDw(expand_dw::ExpandDwKernel),
    DwProject(Box<dw_project::DwProjectKernel>),
    DenseNhwc(dense_nhwc::DenseNhwcKernel),
    Gemm(Box<gemm::GemmPlan>),
    Attention(attention::AttentionPlan),
    Elementwise(elementwise::EltKernel),
    Norm(norm::NormKernel),
    Pool(pool::PoolKernel),
    Reduce(reduce::ReduceKernel),
    Layout(layout::LayoutKernel),
    Index(index::IndexKernel),
    Generate(generate::GenKernel),
    Resize(resize::ResizeKernel),
    Rnn(rnn::RnnKernel),
    Image(image::ImageKernel),
    Quant(quant::QuantKernel),
    #[cfg(feature = "test-ops")]
    Testing(testing::TestKernel),
}

impl Kernel {
    /// Most tiles this kernel can be split into.
    pub fn tiles(&self) -> usize {
        self.family().tiles().clamp(1, MAX_TILES)
    }

    /// Multiply-accumulates of the kernel (0 for memory-bound ones).
    pub fn macs(&self) -> usize {
        self.family().macs()
    }

    /// Runs one tile.
    pub fn run(&self, r: Run<'_>) -> Result<()> {
        self.family().run(r)
    }

    /// Inputs the kernel does not copy because their producers wrote them in place.
    pub fn inputs_in_place(&self) -> usize {
        match self {
            Kernel::Layout(k) => k.inputs_in_place(),
            _ => 0,
        }
    }
}

/// Plans node `i`; `pre`: its weights packed ahead (see [`packed`]), to borrow instead of
/// packing them.
pub(crate) fn plan_node(
    g: &Graph,
    i: usize,
    n: &Node,
    layout: &Layout,
    (threads, bf16): (usize, Option<&'static Bf16Table>),
    pre: Option<&WeightBuf>,
) -> Result<NodePlan> {
    let c = Ctx {
        g,
        n,
        threads,
        bf16,
    };
    let mut inputs = Vec::with_capacity(n.inputs.len());
    for v in &n.inputs {
        inputs.push(match v {
            Some(v) => Some(layout.val_loc[*v].clone().ok_or_else(|| {
                shape_err(
                    n,
                    format!(
                        "input '{}' is not produced by any earlier node",
                        g.values[*v].name
                    ),
                )
            })?),
            None => None,
        });
    }
    // Inputs must come from earlier nodes (topological order).
    for v in n.inputs.iter().flatten() {
        if let Some(p) = layout.producers[*v] {
            if p >= i {
                return Err(shape_err(n, "graph is not topologically ordered"));
            }
        }
    }
    let mut p = plan_kernel(&c, pre)?;
    if !layout.in_place[i].is_empty() {
        // Concats get inputs in place (their producers already wrote them), views their
        // one data input (their outputs are its bytes).
        let skipped = match &mut p.kernel {
            Kernel::Layout(k) => k.skip_inputs(&layout.in_place[i]),
            _ => false,
        };
        if !skipped {
            return Err(shape_err(n, "inputs in place for a node that copies none"));
        }
    }
    if pre.is_some() && packed_of(&p.kernel).is_none() {
        return Err(shape_err(
            n,
            "packed weights given for a node that packs none",
        ));
    }
    let (out_off, out_len) = layout.node_block[i];
    Ok(NodePlan {
        kernel: p.kernel,
        inputs,
        out_off,
        out_len,
        outs: layout.node_outs[i].clone(),
        // The calling thread runs the first chunk in its own scratch.
        scratch: p.scratch.max(p.helper_scratch),
        iscratch: p.iscratch,
        helper_scratch: p.helper_scratch,
    })
}

/// The weights of a planned node as a compiled file stores them packed (the `pre` of
/// [`plan_node`]), in parts to be stored one after another; `None` for a node that packs
/// no weights worth storing.
pub(crate) fn packed_of(k: &Kernel) -> Option<Vec<&[f32]>> {
    match k {
        Kernel::Conv(c) => conv::stored_weights(c),
        Kernel::Gemm(g) => gemm::stored_weights(g),
        _ => None,
    }
}

/// Plans a node by its op: one registration line per op, naming its family's planner.
/// `pre` (weights packed ahead) is passed to the families that pack weights.
fn plan_kernel(c: &Ctx<'_>, pre: Option<&WeightBuf>) -> Result<Planned> {
    match &c.n.op {
        Op::Conv { geom, group, post } => conv::plan_conv(c, geom, *group, post, pre),
        Op::ConvNhwc { geom, group, post } if *group == 1 => {
            dense_nhwc::plan_dense_nhwc(c, geom, post)
        }
        Op::ConvNhwc { geom, group, post } => dw_nhwc::plan_depthwise_nhwc(c, geom, *group, post),
        Op::ExpandConvNhwc {
            expand,
            geom,
            group,
            post,
        } => expand_dw::plan_expand_dw(c, expand, geom, *group, post),
        Op::DwProjectNhwc {
            expand,
            geom,
            group,
            post,
            project,
        } => dw_project::plan_dw_project(c, expand.as_deref(), geom, *group, (post, project)),
        Op::ConvTranspose {
            geom, group, post, ..
        } => conv::plan_deconv(c, geom, *group, post),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            post,
        } => gemm::plan_gemm(c, *alpha, *beta, *trans_a, *trans_b, post, pre),
        Op::MatMul { post } => gemm::plan_matmul(c, post, pre),
        Op::Attention => attention::plan_attention(c),
        Op::Unary(u) => elementwise::plan_unary(c, *u),
        Op::Binary(op) => elementwise::plan_binary(c, *op),
        Op::Where => elementwise::plan_where(c),
        Op::ClipDynamic => elementwise::plan_clip(c),
        Op::Cast { to } => elementwise::plan_cast(c, *to),
        Op::BatchNorm { epsilon } => norm::plan_batchnorm(c, *epsilon),
        Op::InstanceNorm { epsilon } => norm::plan_instance_norm(c, *epsilon),
        Op::LayerNorm { axis, epsilon } => norm::plan_layer_norm(c, *axis, *epsilon),
        Op::Softmax { axis } => norm::plan_softmax(c, *axis, false),
        Op::LogSoftmax { axis } => norm::plan_softmax(c, *axis, true),
        Op::MaskedSoftmax => norm::plan_masked_softmax(c),
        Op::MaxPool { geom, .. } => pool::plan_pool(c, geom, None),
        Op::MaxPoolNhwc { geom, .. } => pool::plan_max_pool_nhwc(c, geom),
        Op::AveragePool {
            geom,
            count_include_pad,
            ..
        } => pool::plan_pool(c, geom, Some(*count_include_pad)),
        Op::GlobalAveragePool => pool::plan_global_pool(c, true),
        Op::GlobalMaxPool => pool::plan_global_pool(c, false),
        Op::Reduce {
            op,
            axes,
            noop_with_empty_axes,
            ..
        } => reduce::plan_reduce(c, *op, axes.as_deref(), *noop_with_empty_axes),
        Op::ArgMax {
            axis,
            select_last_index,
            ..
        } => reduce::plan_arg(c, *axis, true, *select_last_index),
        Op::ArgMin {
            axis,
            select_last_index,
            ..
        } => reduce::plan_arg(c, *axis, false, *select_last_index),
        Op::CumSum { exclusive, reverse } => reduce::plan_cumsum(c, *exclusive, *reverse),
        Op::Concat { axis } => layout::plan_concat(c, *axis),
        Op::Split { axis, .. } => layout::plan_split(c, *axis),
        Op::Slice => layout::plan_slice(c),
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            layout::plan_reshape(c)
        }
        Op::Transpose { perm } => layout::plan_transpose(c, perm.as_deref()),
        Op::Expand => layout::plan_expand(c),
        Op::Tile => layout::plan_tile(c),
        Op::DepthToSpace {
            blocksize,
            crd_mode,
        } => layout::plan_depth_to_space(c, *blocksize, *crd_mode),
        Op::SpaceToDepth { blocksize } => layout::plan_space_to_depth(c, *blocksize),
        Op::Pad { mode } => layout::plan_pad(c, *mode),
        Op::Gather { axis } => index::plan_gather(c, *axis),
        Op::GatherElements { axis } => index::plan_gather_elements(c, *axis),
        Op::GatherND { batch_dims } => index::plan_gather_nd(c, *batch_dims),
        Op::TopK { axis, largest, .. } => index::plan_top_k(c, *axis, *largest),
        Op::NonMaxSuppression { .. } => index::plan_nms(c),
        Op::Shape { start, end } => generate::plan_shape(c, *start, *end),
        Op::ConstantOfShape { value } => generate::plan_constant_of_shape(c, value),
        Op::Range => generate::plan_range(c),
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            ..
        } => resize::plan_resize(
            c,
            *mode,
            *coord,
            *nearest,
            (*cubic_coeff_a, *exclude_outside),
        ),
        Op::Lstm {
            hidden_size,
            direction,
            layout,
        } => rnn::plan_rnn(c, *hidden_size, *direction, *layout),
        Op::Gru {
            hidden_size,
            direction,
            layout,
            ..
        } => rnn::plan_rnn(c, *hidden_size, *direction, *layout),
        Op::Preprocess {
            format,
            nhwc,
            mean,
            scale,
            to_bgr,
        } => image::plan_preprocess(c, *format, *nhwc, mean, scale, *to_bgr),
        Op::QuantizeLinear { axis, dtype } => quant::plan_quantize(c, *axis, *dtype),
        Op::DequantizeLinear { axis } => quant::plan_dequantize(c, *axis),
        Op::QConv {
            geom,
            group,
            x,
            w_scale,
            y,
            lo,
            hi,
        } => quant::plan_qconv(c, geom, *group, (*x, w_scale, *y), (*lo, *hi)),
        Op::QGemm {
            x,
            w_scale,
            y,
            lo,
            hi,
        } => quant::plan_qgemm(c, (*x, w_scale, *y), (*lo, *hi)),
        Op::QAdd { a, b, y, lo, hi } => quant::plan_qadd(c, *a, *b, *y, *lo, *hi),
        Op::QRequant { x, y } => quant::plan_qrequant(c, *x, *y),
        Op::QMaxPool { geom, .. } => quant::plan_qmaxpool(c, geom),
        Op::QLut { table } => quant::plan_qlut(c, table),
        Op::QMul { a, b, y } => quant::plan_qmul(c, *a, *b, *y),
        Op::QSoftmax { axis, x, y } => quant::plan_qsoftmax(c, *axis, *x, *y),
        Op::QAvgPool {
            geom,
            count_include_pad,
            x,
            y,
            ..
        } => quant::plan_qavgpool(c, geom, *count_include_pad, *x, *y),
        Op::QGlobalAvgPool { x, y } => quant::plan_qglobal_avgpool(c, *x, *y),
        Op::QResize { coord, x, y } => quant::plan_qresize(c, *coord, *x, *y),
        #[cfg(feature = "test-ops")]
        Op::Spin { micros } => testing::plan_spin(c, *micros),
        #[cfg(feature = "test-ops")]
        Op::Fail { panic } => testing::plan_fail(c, *panic),
    }
}

//! Plan construction: memory layout of the whole graph and one [`Kernel`] per node, with
//! every attribute resolved, every constant operand read and weights packed. Running a
//! kernel ([`Kernel::run`]) only moves data between already-checked slices.

use super::memplan::{self, Buffer, ALIGN};
use super::{Inputs, Loc, Tile};
use crate::error::{Error, Result};
use crate::ir::{self, BinaryOp, DType, Graph, Node, Op, PostOp, ReduceOp, RnnDirection, UnaryOp};
use crate::kernels::conv::{self, ConvShape, ConvWeights, DeconvPlan};
use crate::kernels::eltwise::{self, Bcast};
use crate::kernels::gemm::{self, Epilogue, NR};
use crate::kernels::image::Preprocess;
use crate::kernels::nd::{contiguous_strides, IndexMapCopy, StridedCopy, FILL, MAX_RANK};
use crate::kernels::pool::{self, PoolShape};
use crate::kernels::reduce::{self, AxisView, ReducePlan};
use crate::kernels::resize;
use crate::kernels::rnn::{self, Cell, RnnOutputs, RnnParams, RnnShape, RnnWeights};
use crate::kernels::simd::Isa;
use crate::kernels::unary::{apply_unary, PostOpRt};

/// Most residual inputs one fused epilogue may reference.
const MAX_RESIDUALS: usize = 4;
/// Elements per tile for element-wise ops split by element ranges.
const ELEMS_PER_TILE: usize = 16384;
/// Most tiles any node offers.
const MAX_TILES: usize = 256;

/// Where every value lives.
pub(crate) struct Layout {
    pub arena_bytes: usize,
    pub inputs: Vec<(usize, usize)>,
    pub outputs: Vec<Loc>,
    val_loc: Vec<Option<Loc>>,
    node_block: Vec<(usize, usize)>,
    node_outs: Vec<Vec<(usize, usize)>>,
}

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

/// Per-call context.
pub(crate) struct RunCtx<'a> {
    pub isa: Isa,
    pub node: &'a Node,
    /// Index of the node in the graph.
    pub index: usize,
    pub tile: Tile,
}

fn value_bytes(g: &Graph, v: usize) -> Result<usize> {
    let val = &g.values[v];
    let shape = val.shape.as_ref().ok_or_else(|| Error::Shape {
        node: String::new(),
        op: String::new(),
        reason: format!("value '{}' has no static shape", val.name),
    })?;
    Ok(shape.iter().product::<usize>() * val.dtype.size())
}

fn align_up(x: usize) -> usize {
    x.div_ceil(ALIGN) * ALIGN
}

/// Plans the arena: graph inputs and outputs get slots live for the whole run; each
/// node's outputs form one block live from the node to its last reader.
pub(crate) fn plan_memory(g: &Graph) -> Result<Layout> {
    let nv = g.values.len();
    let mut last_use = vec![0usize; nv];
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in n.inputs.iter().flatten() {
            if v >= nv {
                return Err(Error::shape(
                    &n.name,
                    n.op.name(),
                    format!("input value {v} does not exist"),
                ));
            }
            last_use[v] = i;
        }
        for &v in &n.outputs {
            if v >= nv {
                return Err(Error::shape(
                    &n.name,
                    n.op.name(),
                    format!("output value {v} does not exist"),
                ));
            }
        }
    }
    let pinned: Vec<bool> = {
        let mut p = vec![false; nv];
        for &v in g.inputs.iter().chain(&g.outputs) {
            if v < nv {
                p[v] = true;
            }
        }
        p
    };
    let mut bufs = Vec::new();
    let mut input_buf = Vec::new();
    for &v in &g.inputs {
        if v >= nv {
            return Err(Error::InvalidArgument {
                name: "graph input".into(),
                reason: format!("value {v} does not exist"),
            });
        }
        input_buf.push(bufs.len());
        bufs.push(Buffer {
            size: value_bytes(g, v)?,
            first: 0,
            last: usize::MAX,
        });
    }
    let mut node_buf = Vec::new();
    let mut node_outs = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let mut off = 0;
        let mut outs = Vec::new();
        let mut last = i;
        let mut pin = false;
        for &v in &n.outputs {
            let b = value_bytes(g, v).map_err(|_| {
                Error::shape(
                    &n.name,
                    n.op.name(),
                    format!("output '{}' has no static shape", g.values[v].name),
                )
            })?;
            outs.push((off, b));
            off += align_up(b);
            last = last.max(last_use[v]);
            pin |= pinned[v];
        }
        node_buf.push(bufs.len());
        node_outs.push(outs);
        let (first, last) = if pin { (0, usize::MAX) } else { (i, last) };
        bufs.push(Buffer {
            size: off,
            first,
            last,
        });
    }
    let (offsets, total) = memplan::assign(&bufs);
    let mut val_loc: Vec<Option<Loc>> = vec![None; nv];
    for (v, val) in g.values.iter().enumerate() {
        if let Some(k) = &val.konst {
            val_loc[v] = Some(Loc::Const(k.clone()));
        }
    }
    let mut inputs = Vec::new();
    for (k, &v) in g.inputs.iter().enumerate() {
        let (off, len) = (offsets[input_buf[k]], bufs[input_buf[k]].size);
        val_loc[v] = Some(Loc::Arena { off, len });
        inputs.push((off, len));
    }
    let mut node_block = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let base = offsets[node_buf[i]];
        node_block.push((base, bufs[node_buf[i]].size));
        for (k, &v) in n.outputs.iter().enumerate() {
            let (o, len) = node_outs[i][k];
            val_loc[v] = Some(Loc::Arena { off: base + o, len });
        }
    }
    let outputs = g
        .outputs
        .iter()
        .map(|&v| {
            val_loc
                .get(v)
                .cloned()
                .flatten()
                .ok_or_else(|| Error::InvalidArgument {
                    name: "graph output".into(),
                    reason: format!("value {v} is neither produced, an input nor a constant"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Layout {
        arena_bytes: total.max(ALIGN),
        inputs,
        outputs,
        val_loc,
        node_block,
        node_outs,
    })
}

/// Output channels `[c0, c1)` of a dense conv as a conv of their own (same input, the
/// rows `c0..c1` of the weights packed separately), for one intra-op thread.
#[derive(Debug)]
pub(crate) struct ConvChunk {
    c0: usize,
    c1: usize,
    s: ConvShape,
    w: ConvWeights,
}

/// Smallest conv (multiply-accumulates) worth splitting over intra-op threads: below,
/// starting the helper threads costs more than they save.
const PAR_MIN_MACS: usize = 4_000_000;

/// A node's kernel with everything resolved.
#[derive(Debug)]
pub(crate) enum Kernel {
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
    Deconv {
        p: DeconvPlan,
        bias: Option<Vec<f32>>,
    },
    Gemm(Box<GemmPlan>),
    Affine {
        c: usize,
        inner: usize,
        planes: usize,
        scale: Vec<f32>,
        shift: Vec<f32>,
    },
    InstanceNorm {
        c: usize,
        inner: usize,
        planes: usize,
        eps: f32,
        scale: Vec<f32>,
        bias: Vec<f32>,
    },
    LayerNorm {
        len: usize,
        rows: usize,
        eps: f32,
        scale: Vec<f32>,
        bias: Vec<f32>,
    },
    Unary {
        op: UnaryOp,
        t: DType,
        n: usize,
    },
    Binary {
        op: BinaryOp,
        t: DType,
        bc: Bcast,
    },
    Where {
        bc: Bcast,
        elem: usize,
    },
    ClipDyn {
        n: usize,
    },
    MaxPool(PoolShape),
    AvgPool(PoolShape, bool),
    GlobalPool {
        avg: bool,
        planes: usize,
        len: usize,
    },
    /// (input index, output index, copy)
    Copies(Vec<(usize, usize, StridedCopy)>),
    MapCopy(IndexMapCopy),
    Bilinear {
        ty: Vec<(usize, usize, f32)>,
        tx: Vec<(usize, usize, f32)>,
        h: usize,
        w: usize,
        planes: usize,
    },
    Bicubic {
        ty: Vec<resize::CubicTaps>,
        tx: Vec<resize::CubicTaps>,
        h: usize,
        w: usize,
        planes: usize,
    },
    Softmax {
        v: AxisView,
        log: bool,
    },
    Reduce {
        op: ReduceOp,
        p: ReducePlan,
        t: DType,
    },
    Arg {
        v: AxisView,
        max: bool,
        last: bool,
    },
    TopK {
        v: AxisView,
        k: usize,
        largest: bool,
    },
    Gather {
        outer: usize,
        axis_len: usize,
        inner: usize,
        n_idx: usize,
        elem: usize,
        idx_t: DType,
    },
    GatherElements {
        dims: Vec<usize>,
        in_dims: Vec<usize>,
        axis: usize,
        elem: usize,
        idx_t: DType,
    },
    Cast {
        from: DType,
        to: DType,
        n: usize,
    },
    CumSum {
        v: AxisView,
        exclusive: bool,
        reverse: bool,
        t: DType,
    },
    Range {
        t: DType,
        n: usize,
    },
    Fill {
        elem: Vec<u8>,
        n: usize,
    },
    ConstOut(Vec<u8>),
    Rnn {
        s: RnnShape,
        gru: bool,
        lbr: bool,
        wts: Option<RnnWeights>,
    },
    Preprocess(Preprocess),
    Spin {
        micros: u64,
    },
    Fail {
        panic: bool,
    },
}

/// Gemm / MatMul resolved: per batch `C[m,n] = alpha * A · B (+ bias / addend)`.
#[derive(Debug)]
pub(crate) struct GemmPlan {
    m: usize,
    n: usize,
    k: usize,
    /// Element offsets of A and B per batch.
    batches: Vec<(usize, usize)>,
    a_rs: usize,
    a_cs: usize,
    b_rs: usize,
    b_cs: usize,
    alpha: f32,
    b_packed: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    addend: Option<Vec<f32>>,
    addend_input: Option<usize>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
}

impl GemmPlan {
    /// Tiles split rows of C (else columns).
    fn by_rows(&self) -> bool {
        self.m > self.n
    }

    fn scratch(&self) -> usize {
        gemm::packed_a_len(self.m, self.k)
            + if self.b_packed.is_some() {
                0
            } else {
                gemm::block_scratch_len(self.k, self.n)
            }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn unsup(n: &Node, detail: impl Into<String>) -> Error {
    Error::UnsupportedOp {
        node: n.name.clone(),
        op: n.op.name().into(),
        detail: detail.into(),
    }
}

fn bad_attr(n: &Node, attr: &str, reason: impl Into<String>) -> Error {
    Error::BadAttribute {
        node: n.name.clone(),
        op: n.op.name().into(),
        attr: attr.into(),
        reason: reason.into(),
    }
}

fn shape_err(n: &Node, reason: impl Into<String>) -> Error {
    Error::shape(&n.name, n.op.name(), reason)
}

struct Ctx<'a> {
    g: &'a Graph,
    n: &'a Node,
    /// Intra-op threads of the plan.
    threads: usize,
}

impl<'a> Ctx<'a> {
    fn has(&self, i: usize) -> bool {
        matches!(self.n.inputs.get(i), Some(Some(_)))
    }
    fn vin(&self, i: usize) -> Result<&'a ir::Value> {
        match self.n.inputs.get(i) {
            Some(Some(v)) => Ok(&self.g.values[*v]),
            _ => Err(shape_err(self.n, format!("missing input {i}"))),
        }
    }
    fn ishape(&self, i: usize) -> Result<&'a [usize]> {
        let v = self.vin(i)?;
        v.shape
            .as_deref()
            .ok_or_else(|| shape_err(self.n, format!("input '{}' has no static shape", v.name)))
    }
    fn itype(&self, i: usize) -> Result<DType> {
        Ok(self.vin(i)?.dtype)
    }
    fn oshape(&self, k: usize) -> Result<&'a [usize]> {
        let v = self
            .n
            .outputs
            .get(k)
            .ok_or_else(|| shape_err(self.n, format!("missing output {k}")))?;
        self.g.values[*v]
            .shape
            .as_deref()
            .ok_or_else(|| shape_err(self.n, "output has no static shape"))
    }
    fn otype(&self, k: usize) -> Result<DType> {
        let v = self
            .n
            .outputs
            .get(k)
            .ok_or_else(|| shape_err(self.n, format!("missing output {k}")))?;
        Ok(self.g.values[*v].dtype)
    }
    fn konst(&self, i: usize) -> Option<&'a ir::Tensor> {
        self.g.const_input(self.n, i).map(|t| &**t)
    }
    fn const_f32(&self, i: usize, what: &str) -> Result<Vec<f32>> {
        match self.konst(i) {
            Some(t) if t.dtype() == DType::F32 => Ok(t.to_f32_vec()),
            Some(_) => Err(unsup(self.n, format!("{what} must be f32"))),
            None => Err(unsup(self.n, format!("{what} must be a constant"))),
        }
    }
    fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        self.konst(i)
            .and_then(|t| t.to_i64_vec())
            .ok_or_else(|| unsup(self.n, format!("{what} must be a constant integer tensor")))
    }
    fn require_f32(&self, i: usize) -> Result<()> {
        let t = self.itype(i)?;
        if t != DType::F32 {
            return Err(unsup(
                self.n,
                format!("input {i} has dtype {}; only f32 is supported", t.name()),
            ));
        }
        Ok(())
    }
    fn same_numel(&self, i: usize, k: usize) -> Result<usize> {
        let a: usize = self.ishape(i)?.iter().product();
        let b: usize = self.oshape(k)?.iter().product();
        if a != b {
            return Err(shape_err(
                self.n,
                format!("input has {a} elements, output {b}"),
            ));
        }
        Ok(a)
    }
}

fn norm_axis(n: &Node, axis: i64, rank: usize) -> Result<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a >= rank as i64 {
        return Err(bad_attr(
            n,
            "axis",
            format!("{axis} out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

fn expand_channel(n: &Node, v: &[f32], c: usize, what: &str) -> Result<Vec<f32>> {
    match v.len() {
        1 => Ok(vec![v[0]; c]),
        l if l == c => Ok(v.to_vec()),
        l => Err(shape_err(
            n,
            format!("{what} has {l} values for {c} channels"),
        )),
    }
}

/// Converts fused post-ops; returns the runtime list and the node inputs of residuals.
fn post_ops(c: &Ctx<'_>, post: &[PostOp], channels: usize) -> Result<(Vec<PostOpRt>, Vec<usize>)> {
    let mut out = Vec::new();
    let mut res = Vec::new();
    let oshape = c.oshape(0)?;
    for p in post {
        out.push(match p {
            PostOp::Unary(u) => PostOpRt::Unary(*u),
            PostOp::ChannelAffine { scale, shift } => PostOpRt::Affine {
                scale: expand_channel(c.n, scale, channels, "ChannelAffine scale")?,
                shift: expand_channel(c.n, shift, channels, "ChannelAffine shift")?,
            },
            PostOp::ChannelPRelu { slope } => PostOpRt::PRelu {
                slope: expand_channel(c.n, slope, channels, "ChannelPRelu slope")?,
            },
            PostOp::AddInput { input } => {
                if res.len() == MAX_RESIDUALS {
                    return Err(unsup(
                        c.n,
                        format!("more than {MAX_RESIDUALS} fused residual inputs"),
                    ));
                }
                c.require_f32(*input)?;
                if c.ishape(*input)? != oshape {
                    return Err(shape_err(
                        c.n,
                        format!("fused residual input {input} does not have the output shape"),
                    ));
                }
                res.push(*input);
                PostOpRt::AddInput {
                    slot: res.len() - 1,
                }
            }
        });
    }
    Ok((out, res))
}

fn geom_vals(v: &[usize], rank: usize, default: usize) -> Vec<usize> {
    if v.is_empty() {
        vec![default; rank]
    } else {
        v.to_vec()
    }
}

/// Spatial geometry (kernel, strides, dilations, pads) normalised to 2-D.
struct Geom2 {
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    /// top, left, bottom, right
    p: [usize; 4],
}

fn geom2(n: &Node, geom: &ir::ConvGeom, spatial: usize, kernel: &[usize]) -> Result<Geom2> {
    if let Some(ap) = &geom.auto_pad {
        if ap != "NOTSET" && ap != "VALID" {
            return Err(bad_attr(
                n,
                "auto_pad",
                format!("'{ap}' must be resolved into pads by the compiler"),
            ));
        }
    }
    if !(1..=2).contains(&spatial) {
        return Err(unsup(
            n,
            format!("{spatial}-D spatial input (only 1-D and 2-D)"),
        ));
    }
    let k = if geom.kernel.is_empty() {
        kernel.to_vec()
    } else {
        geom.kernel.clone()
    };
    let s = geom_vals(&geom.strides, spatial, 1);
    let d = geom_vals(&geom.dilations, spatial, 1);
    let p = geom_vals(&geom.pads, 2 * spatial, 0);
    if k.len() != spatial || s.len() != spatial || d.len() != spatial || p.len() != 2 * spatial {
        return Err(bad_attr(
            n,
            "kernel/strides/dilations/pads",
            "length does not match the spatial rank",
        ));
    }
    if s.iter().chain(&d).chain(&k).any(|&x| x == 0) {
        return Err(bad_attr(n, "kernel/strides/dilations", "must be positive"));
    }
    Ok(if spatial == 1 {
        Geom2 {
            k: [1, k[0]],
            s: [1, s[0]],
            d: [1, d[0]],
            p: [0, p[0], 0, p[1]],
        }
    } else {
        Geom2 {
            k: [k[0], k[1]],
            s: [s[0], s[1]],
            d: [d[0], d[1]],
            p: [p[0], p[1], p[2], p[3]],
        }
    })
}

/// `(N, C, H, W)` of an NCHW or NCL shape.
fn nchw(n: &Node, s: &[usize]) -> Result<[usize; 4]> {
    match s.len() {
        3 => Ok([s[0], s[1], 1, s[2]]),
        4 => Ok([s[0], s[1], s[2], s[3]]),
        r => Err(unsup(n, format!("rank-{r} input (expects NCHW or NCL)"))),
    }
}

// ---------------------------------------------------------------------------------------
// Per-op planning
// ---------------------------------------------------------------------------------------

/// Plans node `i`.
pub(crate) fn plan_node(
    g: &Graph,
    i: usize,
    n: &Node,
    layout: &Layout,
    threads: usize,
) -> Result<NodePlan> {
    let c = Ctx { g, n, threads };
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
    let producers = g.producers();
    for v in n.inputs.iter().flatten() {
        if let Some(p) = producers[*v] {
            if p >= i {
                return Err(shape_err(n, "graph is not topologically ordered"));
            }
        }
    }
    let (kernel, scratch, iscratch) = plan_kernel(&c)?;
    let (out_off, out_len) = layout.node_block[i];
    let helper_scratch = match &kernel {
        Kernel::Conv { par, .. } => par.iter().map(|ch| ch.s.scratch_len()).max().unwrap_or(0),
        _ => 0,
    };
    Ok(NodePlan {
        kernel,
        inputs,
        out_off,
        out_len,
        outs: layout.node_outs[i].clone(),
        // The calling thread runs the first chunk in its own scratch.
        scratch: scratch.max(helper_scratch),
        iscratch,
        helper_scratch,
    })
}

/// Checks the declared output dtypes against what the kernel writes, so a graph whose
/// outputs are typed differently fails at plan time instead of being misread later.
fn check_output_types(c: &Ctx<'_>) -> Result<()> {
    let n = c.n;
    let want: Option<DType> = match &n.op {
        Op::Conv { .. }
        | Op::ConvTranspose { .. }
        | Op::Gemm { .. }
        | Op::MatMul { .. }
        | Op::BatchNorm { .. }
        | Op::InstanceNorm { .. }
        | Op::LayerNorm { .. }
        | Op::ClipDynamic
        | Op::MaxPool { .. }
        | Op::AveragePool { .. }
        | Op::GlobalAveragePool
        | Op::GlobalMaxPool
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::Lstm { .. }
        | Op::Gru { .. }
        | Op::Preprocess { .. } => Some(DType::F32),
        Op::Split { .. }
        | Op::Slice
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Transpose { .. }
        | Op::Expand
        | Op::Tile
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. }
        | Op::Pad { .. }
        | Op::Resize { .. }
        | Op::Reduce { .. }
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::CumSum { .. }
        | Op::Unary(_)
        | Op::Spin { .. } => Some(c.itype(0)?),
        Op::Where => Some(c.itype(1)?),
        Op::Cast { to } => Some(*to),
        _ => None,
    };
    if let Some(t) = want {
        // TopK's second output (indices) is checked where it is planned.
        let outs = if matches!(n.op, Op::TopK { .. }) {
            1
        } else {
            n.outputs.len()
        };
        for k in 0..outs {
            let got = c.otype(k)?;
            if got != t {
                return Err(unsup(
                    n,
                    format!(
                        "output {k} declared {}, the kernel produces {}",
                        got.name(),
                        t.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn plan_kernel(c: &Ctx<'_>) -> Result<(Kernel, usize, usize)> {
    let n = c.n;
    check_output_types(c)?;
    let k = match &n.op {
        Op::Conv { geom, group, post } => return plan_conv(c, geom, *group, post),
        Op::ConvTranspose {
            geom,
            group,
            output_padding: _,
            output_shape: _,
        } => return plan_deconv(c, geom, *group),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            post,
        } => {
            let g = plan_gemm(c, *alpha, *beta, *trans_a, *trans_b, post)?;
            let s = g.scratch();
            return Ok((Kernel::Gemm(Box::new(g)), s, 0));
        }
        Op::MatMul { post } => {
            let g = plan_matmul(c, post)?;
            let s = g.scratch();
            return Ok((Kernel::Gemm(Box::new(g)), s, 0));
        }
        Op::BatchNorm { epsilon } => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            if s.len() < 2 {
                return Err(shape_err(n, "BatchNorm input needs rank >= 2"));
            }
            let ch = s[1];
            let scale = c.const_f32(1, "scale")?;
            let b = c.const_f32(2, "B")?;
            let mean = c.const_f32(3, "mean")?;
            let var = c.const_f32(4, "var")?;
            if [scale.len(), b.len(), mean.len(), var.len()]
                .iter()
                .any(|&l| l != ch)
            {
                return Err(shape_err(n, "BatchNorm parameters must have C elements"));
            }
            let sc: Vec<f32> = (0..ch)
                .map(|j| scale[j] / (var[j] + epsilon).sqrt())
                .collect();
            let sh: Vec<f32> = (0..ch).map(|j| b[j] - mean[j] * sc[j]).collect();
            c.same_numel(0, 0)?;
            Kernel::Affine {
                c: ch,
                inner: s[2..].iter().product(),
                planes: s[0] * ch,
                scale: sc,
                shift: sh,
            }
        }
        Op::InstanceNorm { epsilon } => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            if s.len() < 3 {
                return Err(shape_err(n, "InstanceNorm input needs rank >= 3"));
            }
            let scale = c.const_f32(1, "scale")?;
            let bias = c.const_f32(2, "B")?;
            if scale.len() != s[1] || bias.len() != s[1] {
                return Err(shape_err(n, "InstanceNorm parameters must have C elements"));
            }
            Kernel::InstanceNorm {
                c: s[1],
                inner: s[2..].iter().product(),
                planes: s[0] * s[1],
                eps: *epsilon,
                scale,
                bias,
            }
        }
        Op::LayerNorm { axis, epsilon } => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            let len: usize = s[a..].iter().product();
            let scale = c.const_f32(1, "scale")?;
            let bias = if c.has(2) {
                c.const_f32(2, "B")?
            } else {
                Vec::new()
            };
            let scale = expand_channel(n, &scale, len, "scale")?;
            let bias = if bias.is_empty() {
                bias
            } else {
                expand_channel(n, &bias, len, "B")?
            };
            Kernel::LayerNorm {
                len,
                rows: s[..a].iter().product(),
                eps: *epsilon,
                scale,
                bias,
            }
        }
        Op::Unary(u) => {
            let t = c.itype(0)?;
            let ok = match t {
                DType::F32 => true,
                DType::Bool => matches!(u, UnaryOp::Not | UnaryOp::Identity),
                DType::I64 | DType::I32 => {
                    matches!(
                        u,
                        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Identity | UnaryOp::Sign
                    )
                }
                _ => matches!(u, UnaryOp::Identity),
            };
            if !ok || c.otype(0)? != t {
                return Err(unsup(n, format!("{} on {}", u.name(), t.name())));
            }
            Kernel::Unary {
                op: *u,
                t,
                n: c.same_numel(0, 0)?,
            }
        }
        Op::Binary(op) => {
            let (ta, tb) = (c.itype(0)?, c.itype(1)?);
            let out_t = eltwise::binary_types(*op, ta);
            if ta != tb || out_t != Some(c.otype(0)?) {
                return Err(unsup(
                    n,
                    format!("{} on {} and {}", op.name(), ta.name(), tb.name()),
                ));
            }
            let bc = Bcast::new(&[c.ishape(0)?, c.ishape(1)?], c.oshape(0)?)
                .filter(|b| b.dims.len() <= MAX_RANK)
                .ok_or_else(|| shape_err(n, "inputs do not broadcast to the output"))?;
            Kernel::Binary { op: *op, t: ta, bc }
        }
        Op::Where => {
            if c.itype(0)? != DType::Bool || c.itype(1)? != c.itype(2)? {
                return Err(unsup(n, "condition must be bool and X, Y of one dtype"));
            }
            let bc = Bcast::new(&[c.ishape(0)?, c.ishape(1)?, c.ishape(2)?], c.oshape(0)?)
                .filter(|b| b.dims.len() <= MAX_RANK)
                .ok_or_else(|| shape_err(n, "inputs do not broadcast to the output"))?;
            Kernel::Where {
                bc,
                elem: c.itype(1)?.size(),
            }
        }
        Op::ClipDynamic => {
            c.require_f32(0)?;
            for i in [1, 2] {
                if c.has(i) {
                    c.require_f32(i)?;
                    if c.ishape(i)?.iter().product::<usize>() != 1 {
                        return Err(shape_err(n, "Clip bounds must be scalars"));
                    }
                }
            }
            Kernel::ClipDyn {
                n: c.same_numel(0, 0)?,
            }
        }
        Op::MaxPool { geom, ceil_mode: _ }
        | Op::AveragePool {
            geom, ceil_mode: _, ..
        } => {
            c.require_f32(0)?;
            let [nb, ch, h, w] = nchw(n, c.ishape(0)?)?;
            let [_, _, oh, ow] = nchw(n, c.oshape(0)?)?;
            let ge = geom2(n, geom, c.ishape(0)?.len() - 2, &[])?;
            let s = PoolShape {
                planes: nb * ch,
                h,
                w,
                oh,
                ow,
                kh: ge.k[0],
                kw: ge.k[1],
                sh: ge.s[0],
                sw: ge.s[1],
                dh: ge.d[0],
                dw: ge.d[1],
                pads: ge.p,
            };
            if n.outputs.len() > 1 {
                return Err(unsup(n, "MaxPool Indices output"));
            }
            match &n.op {
                Op::AveragePool {
                    count_include_pad, ..
                } => {
                    if ge.d != [1, 1] {
                        return Err(unsup(n, "AveragePool with dilations"));
                    }
                    Kernel::AvgPool(s, *count_include_pad)
                }
                _ => Kernel::MaxPool(s),
            }
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            if s.len() < 3 {
                return Err(shape_err(n, "global pool input needs rank >= 3"));
            }
            Kernel::GlobalPool {
                avg: matches!(n.op, Op::GlobalAveragePool),
                planes: s[0] * s[1],
                len: s[2..].iter().product(),
            }
        }
        Op::Concat { axis } => plan_concat(c, *axis)?,
        Op::Split { axis, .. } => plan_split(c, *axis)?,
        Op::Slice => plan_slice(c)?,
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            let numel = c.same_numel(0, 0)?;
            let e = c.itype(0)?.size();
            Kernel::Copies(vec![(
                0,
                0,
                StridedCopy::new(e, &[numel], &[1], 0, &[1], 0),
            )])
        }
        Op::Transpose { perm } => {
            let s = c.ishape(0)?;
            let perm: Vec<usize> = perm.clone().unwrap_or_else(|| (0..s.len()).rev().collect());
            let mut seen = vec![false; s.len()];
            if perm.len() != s.len()
                || perm
                    .iter()
                    .any(|&p| p >= s.len() || std::mem::replace(&mut seen[p], true))
            {
                return Err(bad_attr(
                    n,
                    "perm",
                    format!("{perm:?} is not a permutation of rank {}", s.len()),
                ));
            }
            let st = contiguous_strides(s);
            let dims: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            let ss: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
            copy1(c, &dims, &ss, 0)?
        }
        Op::Expand => {
            let (s, o) = (c.ishape(0)?, c.oshape(0)?);
            let bc = Bcast::new(&[s], o)
                .ok_or_else(|| shape_err(n, "input does not broadcast to the output"))?;
            copy1(c, &bc.dims, &bc.strides[0], 0)?
        }
        Op::Tile => {
            let s = c.ishape(0)?;
            let reps = c.const_ints(1, "repeats")?;
            if reps.len() != s.len() || reps.iter().any(|&r| r < 0) {
                return Err(shape_err(
                    n,
                    "repeats must have one non-negative entry per dim",
                ));
            }
            let st = contiguous_strides(s);
            let mut dims = Vec::new();
            let mut ss = Vec::new();
            for d in 0..s.len() {
                dims.extend([reps[d] as usize, s[d]]);
                ss.extend([0, st[d]]);
            }
            copy1(c, &dims, &ss, 0)?
        }
        Op::DepthToSpace {
            blocksize,
            crd_mode,
        } => {
            let [nb, ch, h, w] = nchw(n, c.ishape(0)?)?;
            let b = *blocksize;
            if b == 0 || ch % (b * b) != 0 || c.ishape(0)?.len() != 4 {
                return Err(shape_err(n, "channels must be a multiple of blocksize^2"));
            }
            let cp = ch / (b * b);
            let hw = (h * w) as isize;
            let (sc, sb1, sb2) = if *crd_mode {
                (b as isize * b as isize * hw, b as isize * hw, hw)
            } else {
                (hw, b as isize * cp as isize * hw, cp as isize * hw)
            };
            let dims = [nb, cp, h, b, w, b];
            let ss = [ch as isize * hw, sc, w as isize, sb1, 1, sb2];
            copy1(c, &dims, &ss, 0)?
        }
        Op::SpaceToDepth { blocksize } => {
            let [nb, ch, h, w] = nchw(n, c.ishape(0)?)?;
            let b = *blocksize;
            if b == 0 || h % b != 0 || w % b != 0 || c.ishape(0)?.len() != 4 {
                return Err(shape_err(
                    n,
                    "height and width must be multiples of blocksize",
                ));
            }
            let dims = [nb, b, b, ch, h / b, w / b];
            let ss = [
                (ch * h * w) as isize,
                w as isize,
                1,
                (h * w) as isize,
                (b * w) as isize,
                b as isize,
            ];
            copy1(c, &dims, &ss, 0)?
        }
        Op::Pad { mode } => plan_pad(c, *mode)?,
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            ..
        } => plan_resize(
            c,
            *mode,
            *coord,
            *nearest,
            (*cubic_coeff_a, *exclude_outside),
        )?,
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            Kernel::Softmax {
                v: AxisView::new(s, a),
                log: matches!(n.op, Op::LogSoftmax { .. }),
            }
        }
        Op::Reduce {
            op,
            axes,
            noop_with_empty_axes,
            ..
        } => {
            let s = c.ishape(0)?;
            let t = c.itype(0)?;
            let ok = match t {
                DType::F32 => true,
                DType::I64 => matches!(
                    op,
                    ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean
                ),
                _ => false,
            };
            if !ok {
                return Err(unsup(n, format!("{} on {}", op.name(), t.name())));
            }
            let raw: Vec<i64> = match axes {
                Some(a) => a.clone(),
                None if c.has(1) => c.const_ints(1, "axes")?,
                None => Vec::new(),
            };
            let mut ax: Vec<usize> = raw
                .iter()
                .map(|&a| norm_axis(n, a, s.len()))
                .collect::<Result<_>>()?;
            ax.sort_unstable();
            ax.dedup();
            if ax.is_empty() {
                if *noop_with_empty_axes {
                    let numel = c.same_numel(0, 0)?;
                    return Ok((
                        Kernel::Copies(vec![(
                            0,
                            0,
                            StridedCopy::new(t.size(), &[numel], &[1], 0, &[1], 0),
                        )]),
                        0,
                        0,
                    ));
                }
                ax = (0..s.len()).collect();
            }
            let p = ReducePlan::new(s, &ax);
            if p.dims.len() > MAX_RANK {
                return Err(unsup(n, "reduction of rank > 8 after coalescing"));
            }
            let outn: usize = c.oshape(0)?.iter().product();
            if outn * p.count != s.iter().product::<usize>() {
                return Err(shape_err(n, "output size does not match the reduction"));
            }
            return Ok((Kernel::Reduce { op: *op, p, t }, outn, 0));
        }
        Op::ArgMax {
            axis,
            select_last_index,
            ..
        }
        | Op::ArgMin {
            axis,
            select_last_index,
            ..
        } => {
            c.require_f32(0)?;
            if c.otype(0)? != DType::I64 {
                return Err(unsup(n, "output must be i64"));
            }
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            Kernel::Arg {
                v: AxisView::new(s, a),
                max: matches!(n.op, Op::ArgMax { .. }),
                last: *select_last_index,
            }
        }
        Op::TopK { axis, largest, .. } => {
            c.require_f32(0)?;
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            let kk = c.const_ints(1, "K")?;
            let k = *kk.first().ok_or_else(|| shape_err(n, "K is empty"))?;
            if k < 0 || k as usize > s[a] {
                return Err(shape_err(
                    n,
                    format!("K = {k} out of range for axis length {}", s[a]),
                ));
            }
            if n.outputs.len() != 2 || c.otype(1)? != DType::I64 {
                return Err(unsup(n, "TopK needs f32 values and i64 indices outputs"));
            }
            let v = AxisView::new(s, a);
            return Ok((
                Kernel::TopK {
                    v,
                    k: k as usize,
                    largest: *largest,
                },
                0,
                v.len,
            ));
        }
        Op::Gather { axis } => {
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            let idx_t = c.itype(1)?;
            if !matches!(idx_t, DType::I64 | DType::I32) {
                return Err(unsup(n, "indices must be i64 or i32"));
            }
            Kernel::Gather {
                outer: s[..a].iter().product(),
                axis_len: s[a],
                inner: s[a + 1..].iter().product(),
                n_idx: c.ishape(1)?.iter().product(),
                elem: c.itype(0)?.size(),
                idx_t,
            }
        }
        Op::GatherElements { axis } => {
            let s = c.ishape(0)?;
            let a = norm_axis(n, *axis, s.len())?;
            let idx_t = c.itype(1)?;
            let is = c.ishape(1)?;
            if !matches!(idx_t, DType::I64 | DType::I32)
                || is.len() != s.len()
                || is.len() > MAX_RANK
            {
                return Err(unsup(n, "indices must be i64/i32 of the data rank"));
            }
            Kernel::GatherElements {
                dims: is.to_vec(),
                in_dims: s.to_vec(),
                axis: a,
                elem: c.itype(0)?.size(),
                idx_t,
            }
        }
        Op::Cast { to } => Kernel::Cast {
            from: c.itype(0)?,
            to: *to,
            n: c.same_numel(0, 0)?,
        },
        Op::CumSum { exclusive, reverse } => {
            let t = c.itype(0)?;
            if !matches!(t, DType::F32 | DType::I64) {
                return Err(unsup(n, format!("CumSum on {}", t.name())));
            }
            let s = c.ishape(0)?;
            let ax = c.const_ints(1, "axis")?;
            let a = norm_axis(
                n,
                *ax.first().ok_or_else(|| shape_err(n, "axis is empty"))?,
                s.len(),
            )?;
            Kernel::CumSum {
                v: AxisView::new(s, a),
                exclusive: *exclusive,
                reverse: *reverse,
                t,
            }
        }
        Op::Range => {
            let t = c.otype(0)?;
            if !matches!(t, DType::F32 | DType::I64 | DType::I32)
                || (0..3).any(|i| c.itype(i).ok() != Some(t))
            {
                return Err(unsup(
                    n,
                    "Range needs start/limit/delta of the output dtype (f32, i64, i32)",
                ));
            }
            Kernel::Range {
                t,
                n: c.oshape(0)?.iter().product(),
            }
        }
        Op::ConstantOfShape { value } => {
            if value.dtype() != c.otype(0)? || value.numel() != 1 {
                return Err(bad_attr(
                    n,
                    "value",
                    "must be one element of the output dtype",
                ));
            }
            Kernel::Fill {
                elem: super::const_bytes(value).to_vec(),
                n: c.oshape(0)?.iter().product(),
            }
        }
        Op::Shape { start, end } => {
            let s = c.ishape(0)?;
            let r = s.len() as i64;
            let clampi = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r) as usize;
            let (lo, hi) = (clampi(*start), clampi(end.unwrap_or(r)));
            let dims: Vec<i64> = s[lo..hi.max(lo)].iter().map(|&d| d as i64).collect();
            if c.otype(0)? != DType::I64 || c.oshape(0)?.iter().product::<usize>() != dims.len() {
                return Err(shape_err(
                    n,
                    "output must be an i64 vector of the selected dims",
                ));
            }
            Kernel::ConstOut(bytemuck::cast_slice(&dims).to_vec())
        }
        Op::Lstm {
            hidden_size,
            direction,
            layout,
        }
        | Op::Gru {
            hidden_size,
            direction,
            layout,
            ..
        } => {
            return plan_rnn(c, *hidden_size, *direction, *layout);
        }
        Op::Preprocess {
            format,
            nhwc,
            mean,
            scale,
            to_bgr,
        } => {
            if c.itype(0)? != DType::U8 || c.otype(0)? != DType::F32 {
                return Err(unsup(n, "Preprocess maps u8 to f32"));
            }
            let o = c.oshape(0)?;
            if o.len() != 4 || !(o[1] == 1 || o[1] == 3) {
                return Err(shape_err(n, "Preprocess output must be [N, 1|3, H, W]"));
            }
            let ch = |v: &[f32], d: f32| -> Result<[f32; 3]> {
                match v.len() {
                    0 => Ok([d; 3]),
                    1 => Ok([v[0]; 3]),
                    3 => Ok([v[0], v[1], v[2]]),
                    l => Err(bad_attr(
                        n,
                        "mean/scale",
                        format!("{l} values (need 0, 1 or 3)"),
                    )),
                }
            };
            let p = Preprocess {
                format: *format,
                nhwc: *nhwc,
                n: o[0],
                h: o[2],
                w: o[3],
                c_out: o[1],
                mean: ch(mean, 0.0)?,
                scale: ch(scale, 1.0)?,
                to_bgr: *to_bgr,
            };
            let inb: usize = c.ishape(0)?.iter().product();
            if inb != p.input_len() {
                return Err(shape_err(
                    n,
                    format!(
                        "raw input has {inb} bytes, the image needs {}",
                        p.input_len()
                    ),
                ));
            }
            Kernel::Preprocess(p)
        }
        Op::Spin { micros } => {
            c.same_numel(0, 0)?;
            if c.itype(0)? != c.otype(0)? {
                return Err(shape_err(n, "output dtype must equal the input dtype"));
            }
            Kernel::Spin { micros: *micros }
        }
        Op::Fail { panic } => Kernel::Fail { panic: *panic },
        Op::NonMaxSuppression { .. } => {
            return Err(unsup(
                n,
                "NonMaxSuppression has a data-dependent output shape",
            ))
        }
    };
    Ok((k, 0, 0))
}

fn copy1(c: &Ctx<'_>, dims: &[usize], src_strides: &[isize], src_off: isize) -> Result<Kernel> {
    let numel: usize = dims.iter().product();
    if numel != c.oshape(0)?.iter().product::<usize>() {
        return Err(shape_err(
            c.n,
            "output size does not match the input layout",
        ));
    }
    let e = c.itype(0)?.size();
    let sc = StridedCopy::new(e, dims, src_strides, src_off, &contiguous_strides(dims), 0);
    if !sc.rank_ok() {
        return Err(unsup(c.n, "layout of rank > 8 after coalescing"));
    }
    Ok(Kernel::Copies(vec![(0, 0, sc)]))
}

fn plan_conv(
    c: &Ctx<'_>,
    geom: &ir::ConvGeom,
    group: usize,
    post: &[PostOp],
) -> Result<(Kernel, usize, usize)> {
    let n = c.n;
    c.require_f32(0)?;
    let xs = c.ishape(0)?;
    let ws = c.ishape(1)?;
    let [nb, cin, h, w] = nchw(n, xs)?;
    let [_, cout, oh, ow] = nchw(n, c.oshape(0)?)?;
    if ws.len() != xs.len() {
        return Err(shape_err(
            n,
            format!("weights {ws:?} and input {xs:?} ranks differ"),
        ));
    }
    let wt = c.const_f32(1, "weight W")?;
    let ge = geom2(n, geom, xs.len() - 2, &ws[2..])?;
    if group == 0 || cin % group != 0 || cout % group != 0 || ws[0] != cout || ws[1] * group != cin
    {
        return Err(shape_err(
            n,
            format!("weights {ws:?} do not fit input {xs:?} with group {group}"),
        ));
    }
    let s = ConvShape {
        n: nb,
        c_in: cin,
        h,
        w,
        c_out: cout,
        oh,
        ow,
        kh: ge.k[0],
        kw: ge.k[1],
        sh: ge.s[0],
        sw: ge.s[1],
        dh: ge.d[0],
        dw: ge.d[1],
        ph: ge.p[0],
        pw: ge.p[1],
        group,
    };
    let want = |i: usize, k: usize, st: usize, d: usize, pb: usize, pe: usize| {
        (i + pb + pe)
            .checked_sub(d * (k - 1) + 1)
            .map(|v| v / st + 1)
    };
    if want(h, s.kh, s.sh, s.dh, ge.p[0], ge.p[2]) != Some(oh)
        || want(w, s.kw, s.sw, s.dw, ge.p[1], ge.p[3]) != Some(ow)
    {
        return Err(shape_err(
            n,
            format!("output {oh}x{ow} does not match the conv geometry"),
        ));
    }
    let bias = if c.has(2) {
        Some(expand_channel(n, &c.const_f32(2, "bias B")?, cout, "bias")?)
    } else {
        None
    };
    let (post, res) = post_ops(c, post, cout)?;
    let wts = ConvWeights::pack(&s, &wt);
    let mut scratch = s.scratch_len();
    // Tiles split whichever GEMM dimension is larger, so that what each tile repeats
    // (packing B for channel tiles, streaming A for position tiles) stays negligible.
    let by_cols = !s.is_depthwise() && s.group == 1 && s.oh * s.ow > s.c_out;
    if conv_shares_b(&s, by_cols) {
        scratch += conv::full_b_len(&s);
    }
    let par = conv_chunks(&s, &wt, c.threads);
    Ok((
        Kernel::Conv {
            s,
            w: wts,
            bias,
            post,
            res,
            by_cols,
            par,
        },
        scratch,
        0,
    ))
}

/// Runs the chunks of a conv on scoped helper threads (the first on this thread), each
/// writing its own disjoint block of output channels with its own scratch.
#[allow(clippy::too_many_arguments)]
fn run_conv_chunks(
    isa: Isa,
    par: &[ConvChunk],
    x: &[f32],
    y: &mut [f32],
    epi: &Epilogue<'_>,
    resid: &[&[f32]],
    scratch: &mut [f32],
    helpers: &mut [Vec<f32>],
) {
    let run = |ch: &ConvChunk, part: &mut [f32], scratch: &mut [f32]| {
        let ohw = ch.s.oh * ch.s.ow;
        // Residuals are laid out like the output: take this chunk's channels.
        let mut rc: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        for (d, r) in rc.iter_mut().zip(resid) {
            *d = &r[ch.c0 * ohw..ch.c1 * ohw];
        }
        let e = Epilogue {
            channel_offset: ch.c0,
            residuals: &rc[..resid.len()],
            ..*epi
        };
        let c_out = ch.c1 - ch.c0;
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
            &e,
            scratch,
        );
    };
    std::thread::scope(|sc| {
        let (first, rest) = par.split_first().expect("chunks");
        let ohw = first.s.oh * first.s.ow;
        let (y0, mut tail) = y.split_at_mut((first.c1 - first.c0) * ohw);
        for (ch, h) in rest.iter().zip(helpers.iter_mut()) {
            let (part, t) = std::mem::take(&mut tail).split_at_mut((ch.c1 - ch.c0) * ohw);
            tail = t;
            let run = &run;
            sc.spawn(move || run(ch, part, h));
        }
        run(first, y0, scratch);
    });
}

/// Splits a large dense single-image conv into up to `threads` output-channel chunks
/// aligned to the GEMM row panel, each with its own packed weights.
fn conv_chunks(s: &ConvShape, w: &[f32], threads: usize) -> Vec<ConvChunk> {
    if threads < 2 || s.n != 1 || s.group != 1 || s.is_depthwise() || s.macs() < PAR_MIN_MACS {
        return Vec::new();
    }
    let panels = s.c_out.div_ceil(gemm::MR);
    let per = panels.div_ceil(threads.min(panels));
    if per >= panels {
        return Vec::new();
    }
    let k = s.k();
    (0..panels)
        .step_by(per)
        .map(|p0| {
            let (c0, c1) = (p0 * gemm::MR, ((p0 + per) * gemm::MR).min(s.c_out));
            let sc = ConvShape {
                c_out: c1 - c0,
                ..s.clone()
            };
            let wc = ConvWeights::pack(&sc, &w[c0 * k..c1 * k]);
            ConvChunk {
                c0,
                c1,
                s: sc,
                w: wc,
            }
        })
        .collect()
}

/// True when channel tiles of this conv share one packed im2col matrix (dense conv,
/// one image, split by channels).
fn conv_shares_b(s: &ConvShape, by_cols: bool) -> bool {
    !by_cols && !s.is_depthwise() && s.group == 1 && s.n == 1
}

fn plan_deconv(c: &Ctx<'_>, geom: &ir::ConvGeom, group: usize) -> Result<(Kernel, usize, usize)> {
    let n = c.n;
    c.require_f32(0)?;
    let xs = c.ishape(0)?;
    let ws = c.ishape(1)?;
    let [nb, cin, h, w] = nchw(n, xs)?;
    let [_, cout, oh, ow] = nchw(n, c.oshape(0)?)?;
    if ws.len() != xs.len() {
        return Err(shape_err(
            n,
            format!("weights {ws:?} and input {xs:?} ranks differ"),
        ));
    }
    let wt = c.const_f32(1, "weight W")?;
    let ge = geom2(n, geom, xs.len() - 2, &ws[2..])?;
    if group == 0 || cin % group != 0 || ws[0] != cin || ws[1] * group != cout {
        return Err(shape_err(
            n,
            format!("weights {ws:?} do not fit input {xs:?} with group {group}"),
        ));
    }
    let s = ConvShape {
        n: nb,
        c_in: cin,
        h,
        w,
        c_out: cout,
        oh,
        ow,
        kh: ge.k[0],
        kw: ge.k[1],
        sh: ge.s[0],
        sw: ge.s[1],
        dh: ge.d[0],
        dw: ge.d[1],
        ph: ge.p[0],
        pw: ge.p[1],
        group,
    };
    let bias = if c.has(2) {
        Some(expand_channel(n, &c.const_f32(2, "bias B")?, cout, "bias")?)
    } else {
        None
    };
    let p = DeconvPlan::new(s, &wt);
    let scratch = p.scratch_len();
    Ok((Kernel::Deconv { p, bias }, scratch, 0))
}

fn plan_gemm(
    c: &Ctx<'_>,
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
    post: &[PostOp],
) -> Result<GemmPlan> {
    let n = c.n;
    c.require_f32(0)?;
    c.require_f32(1)?;
    let (asz, bsz) = (c.ishape(0)?, c.ishape(1)?);
    if asz.len() != 2 || bsz.len() != 2 {
        return Err(shape_err(n, "Gemm inputs must be 2-D"));
    }
    let (m, k) = if ta {
        (asz[1], asz[0])
    } else {
        (asz[0], asz[1])
    };
    let (k2, nn) = if tb {
        (bsz[1], bsz[0])
    } else {
        (bsz[0], bsz[1])
    };
    if k != k2 || c.oshape(0)? != [m, nn] {
        return Err(shape_err(
            n,
            format!(
                "A {asz:?} x B {bsz:?} does not give output {:?}",
                c.oshape(0)?
            ),
        ));
    }
    let (a_rs, a_cs) = if ta { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if tb { (1, k) } else { (nn, 1) };
    let b_packed = c.konst(1).map(|t| {
        let mut pb = vec![0.0; gemm::packed_b_len(k, nn)];
        let mut row = vec![0.0; nn];
        gemm::pack_b(&t.to_f32_vec(), b_rs, b_cs, k, nn, alpha, &mut pb, &mut row);
        pb
    });
    let (mut bias, mut addend, mut addend_input) = (None, None, None);
    if c.has(2) && beta != 0.0 {
        c.require_f32(2)?;
        let cs = c.ishape(2)?;
        match c.konst(2) {
            Some(t) => {
                let v = t.to_f32_vec();
                if cs.iter().product::<usize>() == nn && cs.last() == Some(&nn) {
                    bias = Some(v.iter().map(|x| x * beta).collect());
                } else {
                    let bc = Bcast::new(&[cs, &[]], &[m, nn])
                        .ok_or_else(|| shape_err(n, "C does not broadcast to [M, N]"))?;
                    let mut full = vec![0.0f32; m * nn];
                    eltwise::map2(&bc, &v, &[0.0f32], &mut full, 0, bc.outer(), |x, _| {
                        x * beta
                    });
                    addend = Some(full);
                }
            }
            None => {
                if cs != [m, nn] || beta != 1.0 {
                    return Err(unsup(n, "a non-constant C must be [M, N] with beta = 1"));
                }
                addend_input = Some(2);
            }
        }
    }
    let (post, res) = post_ops(c, post, nn)?;
    Ok(GemmPlan {
        m,
        n: nn,
        k,
        batches: vec![(0, 0)],
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        alpha: if b_packed.is_some() { 1.0 } else { alpha },
        b_packed,
        bias,
        addend,
        addend_input,
        post,
        res,
    })
}

fn plan_matmul(c: &Ctx<'_>, post: &[PostOp]) -> Result<GemmPlan> {
    let n = c.n;
    c.require_f32(0)?;
    c.require_f32(1)?;
    let (a0, b0) = (c.ishape(0)?, c.ishape(1)?);
    if a0.is_empty() || b0.is_empty() {
        return Err(shape_err(n, "MatMul inputs must have rank >= 1"));
    }
    let a: Vec<usize> = if a0.len() == 1 {
        vec![1, a0[0]]
    } else {
        a0.to_vec()
    };
    let b: Vec<usize> = if b0.len() == 1 {
        vec![b0[0], 1]
    } else {
        b0.to_vec()
    };
    let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
    let (k2, nn) = (b[b.len() - 2], b[b.len() - 1]);
    if k != k2 {
        return Err(shape_err(n, format!("inner dims differ: {a0:?} x {b0:?}")));
    }
    let (ab, bb) = (&a[..a.len() - 2], &b[..b.len() - 2]);
    let r = ab.len().max(bb.len());
    let mut batch = vec![0usize; r];
    for i in 0..r {
        let da = if i + ab.len() >= r {
            ab[i + ab.len() - r]
        } else {
            1
        };
        let db = if i + bb.len() >= r {
            bb[i + bb.len() - r]
        } else {
            1
        };
        batch[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(shape_err(
                n,
                format!("batch dims do not broadcast: {a0:?} x {b0:?}"),
            ));
        };
    }
    let nbatch: usize = batch.iter().product();
    if c.oshape(0)?.iter().product::<usize>() != nbatch * m * nn {
        return Err(shape_err(n, "output size does not match the product"));
    }
    let b_const = c.konst(1);
    let fold = b_const.is_some() && bb.iter().product::<usize>() == 1;
    let (post, res) = post_ops(c, post, nn)?;
    if fold {
        // B is one constant matrix: every batch of A is more rows of one GEMM.
        let mm = nbatch * m;
        let mut pb = vec![0.0; gemm::packed_b_len(k, nn)];
        let mut row = vec![0.0; nn];
        let bv = b_const.map(|t| t.to_f32_vec()).unwrap_or_default();
        gemm::pack_b(&bv, nn, 1, k, nn, 1.0, &mut pb, &mut row);
        return Ok(GemmPlan {
            m: mm,
            n: nn,
            k,
            batches: vec![(0, 0)],
            a_rs: k,
            a_cs: 1,
            b_rs: nn,
            b_cs: 1,
            alpha: 1.0,
            b_packed: Some(pb),
            bias: None,
            addend: None,
            addend_input: None,
            post,
            res,
        });
    }
    let sa = broadcast_batch_strides(ab, &batch, m * k);
    let sb = broadcast_batch_strides(bb, &batch, k * nn);
    let mut batches = Vec::with_capacity(nbatch);
    let mut idx = vec![0usize; r];
    for _ in 0..nbatch {
        let (mut oa, mut ob) = (0, 0);
        for d in 0..r {
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        batches.push((oa, ob));
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(GemmPlan {
        m,
        n: nn,
        k,
        batches,
        a_rs: k,
        a_cs: 1,
        b_rs: nn,
        b_cs: 1,
        alpha: 1.0,
        b_packed: None,
        bias: None,
        addend: None,
        addend_input: None,
        post,
        res,
    })
}

/// Element strides of each broadcast batch dim of an operand (0 where broadcast).
fn broadcast_batch_strides(dims: &[usize], batch: &[usize], mat: usize) -> Vec<usize> {
    let r = batch.len();
    let mut out = vec![0usize; r];
    let mut acc = mat;
    for i in (0..dims.len()).rev() {
        let o = r - dims.len() + i;
        out[o] = if dims[i] == 1 { 0 } else { acc };
        acc *= dims[i];
    }
    out
}

fn plan_concat(c: &Ctx<'_>, axis: i64) -> Result<Kernel> {
    let n = c.n;
    let o = c.oshape(0)?;
    let a = norm_axis(n, axis, o.len())?;
    let ost = contiguous_strides(o);
    let t = c.otype(0)?;
    let mut copies = Vec::new();
    let mut pos = 0usize;
    for i in 0..n.inputs.len() {
        if !c.has(i) {
            continue;
        }
        let s = c.ishape(i)?;
        if c.itype(i)? != t || s.len() != o.len() || (0..o.len()).any(|d| d != a && s[d] != o[d]) {
            return Err(shape_err(
                n,
                format!("input {i} {s:?} does not fit output {o:?}"),
            ));
        }
        if s.iter().product::<usize>() > 0 {
            let sc = StridedCopy::new(
                t.size(),
                s,
                &contiguous_strides(s),
                0,
                &ost,
                (pos as isize) * ost[a],
            );
            if !sc.rank_ok() {
                return Err(unsup(n, "rank > 8"));
            }
            copies.push((i, 0, sc));
        }
        pos += s[a];
    }
    if pos != o[a] {
        return Err(shape_err(n, "input extents do not add up to the output"));
    }
    Ok(Kernel::Copies(copies))
}

fn plan_split(c: &Ctx<'_>, axis: i64) -> Result<Kernel> {
    let n = c.n;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let ist = contiguous_strides(s);
    let t = c.itype(0)?;
    let mut copies = Vec::new();
    let mut pos = 0usize;
    for k in 0..n.outputs.len() {
        let o = c.oshape(k)?;
        if o.len() != s.len() || (0..s.len()).any(|d| d != a && s[d] != o[d]) {
            return Err(shape_err(
                n,
                format!("output {k} {o:?} does not fit input {s:?}"),
            ));
        }
        if o.iter().product::<usize>() > 0 {
            let sc = StridedCopy::new(
                t.size(),
                o,
                &ist,
                (pos as isize) * ist[a],
                &contiguous_strides(o),
                0,
            );
            if !sc.rank_ok() {
                return Err(unsup(n, "rank > 8"));
            }
            copies.push((0, k, sc));
        }
        pos += o[a];
    }
    if pos != s[a] {
        return Err(shape_err(n, "output extents do not add up to the input"));
    }
    Ok(Kernel::Copies(copies))
}

fn plan_slice(c: &Ctx<'_>) -> Result<Kernel> {
    let n = c.n;
    let s = c.ishape(0)?;
    let starts = c.const_ints(1, "starts")?;
    let ends = c.const_ints(2, "ends")?;
    let axes: Vec<i64> = if c.has(3) {
        c.const_ints(3, "axes")?
    } else {
        (0..starts.len() as i64).collect()
    };
    let steps: Vec<i64> = if c.has(4) {
        c.const_ints(4, "steps")?
    } else {
        vec![1; starts.len()]
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(shape_err(n, "starts/ends/axes/steps lengths differ"));
    }
    let st = contiguous_strides(s);
    let mut dims = s.to_vec();
    let mut ss = st.clone();
    let mut off = 0isize;
    for j in 0..starts.len() {
        let a = norm_axis(n, axes[j], s.len())?;
        let d = s[a] as i64;
        let step = steps[j];
        if step == 0 {
            return Err(bad_attr(n, "steps", "must not be 0"));
        }
        let fix = |x: i64| if x < 0 { x + d } else { x };
        let (b, e) = (fix(starts[j]), fix(ends[j]));
        let (b, e) = if step > 0 {
            (b.clamp(0, d), e.clamp(0, d))
        } else {
            (b.clamp(0, d - 1), e.clamp(-1, d - 1))
        };
        let len = if step > 0 {
            (e - b + step - 1).div_euclid(step)
        } else {
            (b - e + (-step) - 1).div_euclid(-step)
        };
        dims[a] = len.max(0) as usize;
        off += b.max(0) as isize * st[a];
        ss[a] = st[a] * step as isize;
    }
    if dims != c.oshape(0)? {
        return Err(shape_err(
            n,
            format!("slice gives {dims:?}, output is {:?}", c.oshape(0)?),
        ));
    }
    if dims.iter().product::<usize>() == 0 {
        return Ok(Kernel::Copies(Vec::new()));
    }
    copy1(c, &dims, &ss, off)
}

fn plan_pad(c: &Ctx<'_>, mode: ir::PadMode) -> Result<Kernel> {
    let n = c.n;
    let s = c.ishape(0)?;
    let r = s.len();
    let pads = c.const_ints(1, "pads")?;
    let axes: Vec<usize> = if c.has(3) {
        c.const_ints(3, "axes")?
            .iter()
            .map(|&a| norm_axis(n, a, r))
            .collect::<Result<_>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() || r > MAX_RANK || r == 0 {
        return Err(shape_err(
            n,
            "pads must hold begins and ends for every axis",
        ));
    }
    let mut pb = vec![0i64; r];
    let mut pe = vec![0i64; r];
    for (j, &a) in axes.iter().enumerate() {
        pb[a] = pads[j];
        pe[a] = pads[j + axes.len()];
    }
    let t = c.itype(0)?;
    let fill = match c.konst(2) {
        Some(v) if c.has(2) => {
            if v.dtype() != t || v.numel() != 1 {
                return Err(shape_err(
                    n,
                    "constant_value must be one element of the data dtype",
                ));
            }
            super::const_bytes(v).to_vec()
        }
        None if c.has(2) => return Err(unsup(n, "constant_value must be a constant")),
        _ => vec![0u8; t.size()],
    };
    let o = c.oshape(0)?;
    let st = contiguous_strides(s);
    let mut maps = Vec::new();
    for d in 0..r {
        let len = s[d] as i64 + pb[d] + pe[d];
        if len != o[d] as i64 {
            return Err(shape_err(n, "output shape does not match the pads"));
        }
        let nd = s[d] as i64;
        let map: Vec<isize> = (0..len)
            .map(|oi| {
                let i = oi - pb[d];
                let src = if (0..nd).contains(&i) {
                    Some(i)
                } else {
                    match mode {
                        ir::PadMode::Constant => None,
                        ir::PadMode::Edge => Some(i.clamp(0, nd - 1)),
                        ir::PadMode::Wrap => Some(i.rem_euclid(nd)),
                        ir::PadMode::Reflect => {
                            if nd == 1 {
                                Some(0)
                            } else {
                                let p = 2 * (nd - 1);
                                let m = i.rem_euclid(p);
                                Some(if m >= nd { p - m } else { m })
                            }
                        }
                    }
                };
                src.map_or(FILL, |v| v as isize * st[d])
            })
            .collect();
        maps.push(map);
    }
    if mode != ir::PadMode::Constant && s.contains(&0) {
        return Err(shape_err(n, "cannot reflect/edge/wrap-pad an empty dim"));
    }
    index_map(c, o, maps, fill)
}

fn index_map(c: &Ctx<'_>, o: &[usize], mut maps: Vec<Vec<isize>>, fill: Vec<u8>) -> Result<Kernel> {
    let mut dims = o.to_vec();
    while dims.len() < 2 {
        dims.insert(0, 1);
        maps.insert(0, vec![0]);
    }
    if dims.len() > MAX_RANK {
        return Err(unsup(c.n, "rank > 8"));
    }
    Ok(Kernel::MapCopy(IndexMapCopy {
        elem: c.itype(0)?.size(),
        dims,
        maps,
        fill,
    }))
}

fn plan_resize(
    c: &Ctx<'_>,
    mode: ir::ResizeMode,
    coord: ir::CoordMode,
    nearest: ir::NearestMode,
    (cubic_a, exclude_outside): (f32, bool),
) -> Result<Kernel> {
    let n = c.n;
    let s = c.ishape(0)?;
    let o = c.oshape(0)?;
    if s.len() != o.len() || s.is_empty() {
        return Err(shape_err(n, "input and output ranks differ"));
    }
    if coord == ir::CoordMode::TfCropAndResize {
        return Err(unsup(
            n,
            "coordinate_transformation_mode tf_crop_and_resize",
        ));
    }
    let scales: Vec<f32> = if c.has(2) {
        c.const_f32(2, "scales")?
    } else {
        Vec::new()
    };
    let scale = |d: usize| -> f32 {
        if scales.len() == s.len() {
            scales[d]
        } else {
            o[d] as f32 / s[d].max(1) as f32
        }
    };
    match mode {
        ir::ResizeMode::Nearest => {
            let st = contiguous_strides(s);
            let maps = (0..s.len())
                .map(|d| {
                    (0..o[d])
                        .map(|oi| {
                            let x = resize::source_coord(coord, oi, scale(d), s[d], o[d]);
                            resize::nearest_index(nearest, x, s[d]) as isize * st[d]
                        })
                        .collect()
                })
                .collect();
            index_map(c, o, maps, vec![0u8; c.itype(0)?.size()])
        }
        ir::ResizeMode::Linear | ir::ResizeMode::Cubic => {
            c.require_f32(0)?;
            let r = s.len();
            if r < 2 || s[..r - 2] != o[..r - 2] || s.contains(&0) {
                return Err(unsup(
                    n,
                    "linear/cubic resize of dims other than the two innermost",
                ));
            }
            let (h, w, planes) = (s[r - 2], s[r - 1], s[..r - 2].iter().product());
            if mode == ir::ResizeMode::Cubic {
                let taps = |d: usize| {
                    resize::cubic_taps(coord, scale(d), s[d], o[d], cubic_a, exclude_outside)
                };
                return Ok(Kernel::Bicubic {
                    ty: taps(r - 2),
                    tx: taps(r - 1),
                    h,
                    w,
                    planes,
                });
            }
            Ok(Kernel::Bilinear {
                ty: resize::linear_taps(coord, scale(r - 2), s[r - 2], o[r - 2]),
                tx: resize::linear_taps(coord, scale(r - 1), s[r - 1], o[r - 1]),
                h,
                w,
                planes,
            })
        }
    }
}

fn plan_rnn(
    c: &Ctx<'_>,
    hidden: usize,
    dir: RnnDirection,
    layout: i64,
) -> Result<(Kernel, usize, usize)> {
    let n = c.n;
    let gru = matches!(n.op, Op::Gru { .. });
    let lbr = matches!(
        n.op,
        Op::Gru {
            linear_before_reset: true,
            ..
        }
    );
    let gates = if gru { 3 } else { 4 };
    for i in [0, 1, 2] {
        c.require_f32(i)?;
    }
    let xs = c.ishape(0)?;
    if xs.len() != 3 || !(layout == 0 || layout == 1) {
        return Err(unsup(n, "X must be 3-D and layout 0 or 1"));
    }
    let batch_major = layout == 1;
    let (seq, batch) = if batch_major {
        (xs[1], xs[0])
    } else {
        (xs[0], xs[1])
    };
    let dirs = if dir == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let s = RnnShape {
        seq,
        batch,
        input: xs[2],
        hidden,
        dirs,
        reverse: dir == RnnDirection::Reverse,
        batch_major,
    };
    let expect = |i: usize, want: &[usize]| -> Result<()> {
        if c.has(i) && c.ishape(i)? != want {
            return Err(shape_err(
                n,
                format!("input {i} must be {want:?}, is {:?}", c.ishape(i)?),
            ));
        }
        if c.has(i) {
            c.require_f32(i)?;
        }
        Ok(())
    };
    expect(1, &[dirs, gates * hidden, s.input])?;
    expect(2, &[dirs, gates * hidden, hidden])?;
    if c.has(3) {
        expect(3, &[dirs, 2 * gates * hidden])?;
    }
    if c.has(4) {
        let lens = c.const_ints(4, "sequence_lens")?;
        if lens.iter().any(|&l| l != seq as i64) {
            return Err(unsup(n, "sequence_lens shorter than the sequence"));
        }
    }
    let st = if batch_major {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    expect(5, &st)?;
    if !gru {
        expect(6, &st)?;
        if c.has(7) {
            expect(7, &[dirs, 3 * hidden])?;
        }
    }
    let cell = if gru {
        Cell::Gru {
            linear_before_reset: lbr,
        }
    } else {
        Cell::Lstm
    };
    let wts = match c.konst(1) {
        Some(t) if t.dtype() == DType::F32 => Some(RnnWeights::pack(&s, cell, &t.to_f32_vec())),
        _ => None,
    };
    let scratch = if wts.is_some() {
        s.packed_scratch_len(gates)
    } else {
        s.scratch_len(gates)
    };
    Ok((Kernel::Rnn { s, gru, lbr, wts }, scratch, 0))
}

// ---------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------

fn out_bytes<'o>(out: &'o mut [u8], outs: &[(usize, usize)], k: usize) -> &'o mut [u8] {
    let (o, l) = outs[k];
    &mut out[o..o + l]
}

fn out_f32<'o>(out: &'o mut [u8], outs: &[(usize, usize)], k: usize) -> &'o mut [f32] {
    bytemuck::cast_slice_mut(out_bytes(out, outs, k))
}

fn run_err(n: &Node, reason: impl Into<String>) -> Error {
    Error::RunFailed {
        model: String::new(),
        reason: format!("node '{}' ({}): {}", n.name, n.op.name(), reason.into()),
    }
}

fn read_index(t: DType, b: &[u8], i: usize) -> i64 {
    match t {
        DType::I32 => {
            i32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]) as i64
        }
        _ => {
            let s = &b[8 * i..8 * i + 8];
            i64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
        }
    }
}

fn scalar_f64(t: DType, b: &[u8]) -> f64 {
    match t {
        DType::F32 => f32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as f64,
        _ => read_index(t, b, 0) as f64,
    }
}

impl Kernel {
    /// Most tiles this kernel can be split into.
    pub fn tiles(&self) -> usize {
        let t = match self {
            Kernel::Conv { s, by_cols, .. } => {
                if *by_cols {
                    (s.oh * s.ow).div_ceil(NR)
                } else {
                    s.c_out.div_ceil(conv::channel_align(s))
                }
            }
            Kernel::Deconv { p, .. } => p.s.c_out,
            Kernel::Gemm(g) => {
                if g.by_rows() {
                    g.m.div_ceil(gemm::MR)
                } else {
                    g.n.div_ceil(NR)
                }
            }
            Kernel::Affine { planes, .. } | Kernel::InstanceNorm { planes, .. } => *planes,
            Kernel::LayerNorm { rows, .. } => *rows,
            Kernel::Unary { n, .. } | Kernel::ClipDyn { n } | Kernel::Cast { n, .. } => {
                n.div_ceil(ELEMS_PER_TILE)
            }
            Kernel::Binary { bc, .. } | Kernel::Where { bc, .. } => bc.outer(),
            Kernel::MaxPool(s) | Kernel::AvgPool(s, _) => s.planes,
            Kernel::GlobalPool { planes, .. } => *planes,
            Kernel::Copies(v) if v.len() == 1 => v[0].2.outer(),
            Kernel::MapCopy(m) => m.dims[0],
            Kernel::Bilinear { planes, .. } | Kernel::Bicubic { planes, .. } => *planes,
            Kernel::Softmax { v, .. } => v.outer,
            Kernel::Preprocess(p) => p.n * p.h,
            _ => 1,
        };
        t.clamp(1, MAX_TILES)
    }

    /// Multiply-accumulates of the kernel (0 for memory-bound ones).
    pub fn macs(&self) -> usize {
        match self {
            Kernel::Conv { s, .. } => s.macs(),
            Kernel::Deconv { p, .. } => {
                p.s.n * p.s.c_in * p.s.h * p.s.w * p.s.cout_g() * p.s.kh * p.s.kw
            }
            Kernel::Gemm(g) => g.batches.len() * g.m * g.n * g.k,
            _ => 0,
        }
    }

    /// Runs one tile.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        ctx: &RunCtx<'_>,
        io: &Inputs<'_>,
        out: &mut [u8],
        outs: &[(usize, usize)],
        scratch: &mut [f32],
        iscratch: &mut [usize],
        bcache: &mut Option<usize>,
        helpers: &mut [Vec<f32>],
    ) -> Result<()> {
        let tile = ctx.tile;
        let node = ctx.node;
        match self {
            Kernel::Conv {
                s,
                w,
                bias,
                post,
                res,
                by_cols,
                par,
            } => {
                let ohw = s.oh * s.ow;
                let ((lo, hi), cols) = if *by_cols {
                    ((0, s.c_out), tile.range(ohw, NR))
                } else {
                    (tile.range(s.c_out, conv::channel_align(s)), (0, ohw))
                };
                let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
                for (d, &i) in resid.iter_mut().zip(res) {
                    *d = io.f32(i);
                }
                let epi = Epilogue {
                    bias: bias.as_deref(),
                    channel_is_row: true,
                    channel_offset: 0,
                    addend: None,
                    post,
                    residuals: &resid[..res.len()],
                };
                let x = io.f32(0);
                if tile.count == 1 && !par.is_empty() && helpers.len() + 1 >= par.len() {
                    let y = out_f32(out, outs, 0);
                    let resid = &resid[..res.len()];
                    run_conv_chunks(ctx.isa, par, x, y, &epi, resid, scratch, helpers);
                } else if tile.count > 1 && conv_shares_b(s, *by_cols) {
                    // Channel tiles of one image share its im2col matrix: tile 0 packs it.
                    let (full, rest) = scratch.split_at_mut(conv::full_b_len(s));
                    if tile.index == 0 || *bcache != Some(ctx.index) {
                        conv::pack_b_full(s, x, full);
                        *bcache = Some(ctx.index);
                    }
                    let y = out_f32(out, outs, 0);
                    conv::conv2d(ctx.isa, s, w, x, y, lo, hi, cols, Some(full), &epi, rest);
                } else {
                    let y = out_f32(out, outs, 0);
                    conv::conv2d(ctx.isa, s, w, x, y, lo, hi, cols, None, &epi, scratch);
                }
            }
            Kernel::Deconv { p, bias } => {
                let (lo, hi) = tile.range(p.s.c_out, 1);
                p.run(
                    ctx.isa,
                    io.f32(0),
                    bias.as_deref(),
                    out_f32(out, outs, 0),
                    lo,
                    hi,
                    scratch,
                );
            }
            Kernel::Gemm(g) => run_gemm(ctx, g, io, out_f32(out, outs, 0), scratch),
            Kernel::Affine {
                c,
                inner,
                planes,
                scale,
                shift,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                crate::kernels::norm::channel_affine(
                    *c,
                    *inner,
                    scale,
                    shift,
                    io.f32(0),
                    out_f32(out, outs, 0),
                    lo,
                    hi,
                );
            }
            Kernel::InstanceNorm {
                c,
                inner,
                planes,
                eps,
                scale,
                bias,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                crate::kernels::norm::instance_norm(
                    *c,
                    *inner,
                    *eps,
                    scale,
                    bias,
                    io.f32(0),
                    out_f32(out, outs, 0),
                    lo,
                    hi,
                );
            }
            Kernel::LayerNorm {
                len,
                rows,
                eps,
                scale,
                bias,
            } => {
                let (lo, hi) = tile.range(*rows, 1);
                crate::kernels::norm::layer_norm(
                    *len,
                    *eps,
                    scale,
                    bias,
                    io.f32(0),
                    out_f32(out, outs, 0),
                    lo,
                    hi,
                );
            }
            Kernel::Unary { op, t, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                run_unary(*op, *t, io.bytes(0), out_bytes(out, outs, 0), lo, hi);
            }
            Kernel::Binary { op, t, bc } => {
                let (lo, hi) = tile.range(bc.outer(), 1);
                let (a, b) = (io.bytes(0), io.bytes(1));
                let o = out_bytes(out, outs, 0);
                use BinaryOp::*;
                let cmp = matches!(op, Equal | Less | LessOrEqual | Greater | GreaterOrEqual);
                match t {
                    DType::F32 if cmp => eltwise::compare(*op, bc, io.f32(0), io.f32(1), o, lo, hi),
                    DType::F32 => eltwise::binary_f32(
                        ctx.isa,
                        *op,
                        bc,
                        io.f32(0),
                        io.f32(1),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    DType::I64 if cmp => {
                        eltwise::compare::<i64>(*op, bc, io.i64(0), io.i64(1), o, lo, hi)
                    }
                    DType::I64 => eltwise::binary_int::<i64>(
                        *op,
                        bc,
                        io.i64(0),
                        io.i64(1),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    DType::I32 if cmp => eltwise::compare::<i32>(
                        *op,
                        bc,
                        bytemuck::cast_slice(a),
                        bytemuck::cast_slice(b),
                        o,
                        lo,
                        hi,
                    ),
                    DType::I32 => eltwise::binary_int::<i32>(
                        *op,
                        bc,
                        bytemuck::cast_slice(a),
                        bytemuck::cast_slice(b),
                        bytemuck::cast_slice_mut(o),
                        lo,
                        hi,
                    ),
                    _ => eltwise::logic(*op, bc, a, b, o, lo, hi),
                }
            }
            Kernel::Where { bc, elem } => {
                let (lo, hi) = tile.range(bc.outer(), 1);
                eltwise::where_select(
                    bc,
                    *elem,
                    io.bytes(0),
                    io.bytes(1),
                    io.bytes(2),
                    out_bytes(out, outs, 0),
                    lo,
                    hi,
                );
            }
            Kernel::ClipDyn { n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let min = io
                    .opt(1)
                    .map_or(f32::NEG_INFINITY, |b| bytemuck::cast_slice::<u8, f32>(b)[0]);
                let max = io
                    .opt(2)
                    .map_or(f32::INFINITY, |b| bytemuck::cast_slice::<u8, f32>(b)[0]);
                let y = &mut out_f32(out, outs, 0)[lo..hi];
                y.copy_from_slice(&io.f32(0)[lo..hi]);
                apply_unary(UnaryOp::Clip { min, max }, y);
            }
            Kernel::MaxPool(s) => {
                let (lo, hi) = tile.range(s.planes, 1);
                pool::max_pool(ctx.isa, s, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::AvgPool(s, inc) => {
                let (lo, hi) = tile.range(s.planes, 1);
                pool::avg_pool(s, *inc, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::GlobalPool { avg, planes, len } => {
                let (lo, hi) = tile.range(*planes, 1);
                pool::global_pool(*avg, *len, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::Copies(v) => {
                for (i, k, sc) in v {
                    let (lo, hi) = if v.len() == 1 {
                        tile.range(sc.outer(), 1)
                    } else {
                        (0, sc.outer())
                    };
                    sc.run(io.bytes(*i), out_bytes(out, outs, *k), lo, hi);
                }
            }
            Kernel::MapCopy(m) => {
                let (lo, hi) = tile.range(m.dims[0], 1);
                m.run(io.bytes(0), out_bytes(out, outs, 0), lo, hi);
            }
            Kernel::Bilinear {
                ty,
                tx,
                h,
                w,
                planes,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                resize::bilinear(ty, tx, *h, *w, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::Bicubic {
                ty,
                tx,
                h,
                w,
                planes,
            } => {
                let (lo, hi) = tile.range(*planes, 1);
                resize::bicubic(ty, tx, *h, *w, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::Softmax { v, log } => {
                let (lo, hi) = tile.range(v.outer, 1);
                reduce::softmax(*v, *log, io.f32(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::Reduce { op, p, t } => match t {
                DType::I64 => reduce::reduce_i64(
                    *op,
                    p,
                    io.i64(0),
                    bytemuck::cast_slice_mut(out_bytes(out, outs, 0)),
                ),
                _ => reduce::reduce_f32(*op, p, io.f32(0), out_f32(out, outs, 0), scratch),
            },
            Kernel::Arg { v, max, last } => {
                reduce::arg_extreme(
                    *v,
                    *max,
                    *last,
                    io.f32(0),
                    bytemuck::cast_slice_mut(out_bytes(out, outs, 0)),
                );
            }
            Kernel::TopK { v, k, largest } => {
                let (ob, ib) = (outs[0], outs[1]);
                let (first, second) = out.split_at_mut(ib.0);
                let vals: &mut [f32] = bytemuck::cast_slice_mut(&mut first[ob.0..ob.0 + ob.1]);
                let idx: &mut [i64] = bytemuck::cast_slice_mut(&mut second[..ib.1]);
                reduce::top_k(*v, *k, *largest, io.f32(0), vals, idx, iscratch);
            }
            Kernel::Gather {
                outer,
                axis_len,
                inner,
                n_idx,
                elem,
                idx_t,
            } => {
                let (data, ib) = (io.bytes(0), io.bytes(1));
                let o = out_bytes(out, outs, 0);
                let row = inner * elem;
                for j in 0..*n_idx {
                    let mut ix = read_index(*idx_t, ib, j);
                    if ix < 0 {
                        ix += *axis_len as i64;
                    }
                    if ix < 0 || ix >= *axis_len as i64 {
                        return Err(run_err(
                            node,
                            format!(
                                "index {} out of range for axis length {axis_len}",
                                read_index(*idx_t, ib, j)
                            ),
                        ));
                    }
                    for p in 0..*outer {
                        let s = (p * axis_len + ix as usize) * row;
                        let d = (p * n_idx + j) * row;
                        o[d..d + row].copy_from_slice(&data[s..s + row]);
                    }
                }
            }
            Kernel::GatherElements {
                dims,
                in_dims,
                axis,
                elem,
                idx_t,
            } => {
                let (data, ib) = (io.bytes(0), io.bytes(1));
                let o = out_bytes(out, outs, 0);
                let ist = contiguous_strides(in_dims.as_slice());
                let total: usize = dims.iter().product();
                let r = dims.len();
                let mut coord = [0usize; MAX_RANK];
                for flat in 0..total {
                    let mut ix = read_index(*idx_t, ib, flat);
                    if ix < 0 {
                        ix += in_dims[*axis] as i64;
                    }
                    if ix < 0 || ix >= in_dims[*axis] as i64 {
                        return Err(run_err(
                            node,
                            format!("index out of range for axis length {}", in_dims[*axis]),
                        ));
                    }
                    let mut src = 0isize;
                    for d in 0..r {
                        let cd = if d == *axis { ix as usize } else { coord[d] };
                        src += cd as isize * ist[d];
                    }
                    let (s, d) = (src as usize * elem, flat * elem);
                    o[d..d + elem].copy_from_slice(&data[s..s + elem]);
                    for d in (0..r).rev() {
                        coord[d] += 1;
                        if coord[d] < dims[d] {
                            break;
                        }
                        coord[d] = 0;
                    }
                }
            }
            Kernel::Cast { from, to, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                eltwise::cast(*from, *to, io.bytes(0), out_bytes(out, outs, 0), lo, hi);
            }
            Kernel::CumSum {
                v,
                exclusive,
                reverse,
                t,
            } => match t {
                DType::I64 => reduce::cumsum(
                    *v,
                    *exclusive,
                    *reverse,
                    io.i64(0),
                    bytemuck::cast_slice_mut(out_bytes(out, outs, 0)),
                ),
                _ => reduce::cumsum(*v, *exclusive, *reverse, io.f32(0), out_f32(out, outs, 0)),
            },
            Kernel::Range { t, n } => {
                let start = scalar_f64(*t, io.bytes(0));
                let delta = scalar_f64(*t, io.bytes(2));
                // Integer ranges are computed in i64 (exact beyond 2^53).
                let (istart, idelta) = if *t == DType::F32 {
                    (0, 0)
                } else {
                    (
                        read_index(*t, io.bytes(0), 0),
                        read_index(*t, io.bytes(2), 0),
                    )
                };
                let o = out_bytes(out, outs, 0);
                match t {
                    DType::F32 => {
                        let y: &mut [f32] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = (start + i as f64 * delta) as f32;
                        }
                    }
                    DType::I64 => {
                        let y: &mut [i64] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = istart.wrapping_add((i as i64).wrapping_mul(idelta));
                        }
                    }
                    _ => {
                        let y: &mut [i32] = bytemuck::cast_slice_mut(o);
                        for (i, v) in y.iter_mut().enumerate().take(*n) {
                            *v = (istart as i32)
                                .wrapping_add((i as i32).wrapping_mul(idelta as i32));
                        }
                    }
                }
            }
            Kernel::Fill { elem, n } => {
                let o = out_bytes(out, outs, 0);
                for i in 0..*n {
                    o[i * elem.len()..(i + 1) * elem.len()].copy_from_slice(elem);
                }
            }
            Kernel::ConstOut(b) => out_bytes(out, outs, 0).copy_from_slice(b),
            Kernel::Rnn { s, gru, lbr, wts } => {
                let prm = RnnParams {
                    w: io.f32(1),
                    r: io.f32(2),
                    b: io.opt(3).map_or(&[][..], bytemuck::cast_slice),
                    h0: io.opt(5).map_or(&[][..], bytemuck::cast_slice),
                    c0: if *gru {
                        &[]
                    } else {
                        io.opt(6).map_or(&[][..], bytemuck::cast_slice)
                    },
                    p: if *gru {
                        &[]
                    } else {
                        io.opt(7).map_or(&[][..], bytemuck::cast_slice)
                    },
                };
                // Outputs are laid out in order inside the block.
                let mut rest: &mut [u8] = out;
                let mut base = 0;
                let mut parts: [&mut [f32]; 3] = [&mut [], &mut [], &mut []];
                for (k, &(o, l)) in outs.iter().enumerate().take(3) {
                    let tail = std::mem::take(&mut rest);
                    let (_, tail) = tail.split_at_mut(o - base);
                    let (mine, tail) = tail.split_at_mut(l);
                    parts[k] = bytemuck::cast_slice_mut(mine);
                    rest = tail;
                    base = o + l;
                }
                let [y, yh, yc] = parts;
                let mut o = RnnOutputs { y, yh, yc };
                let cell = if *gru {
                    Cell::Gru {
                        linear_before_reset: *lbr,
                    }
                } else {
                    Cell::Lstm
                };
                rnn::run(s, cell, wts.as_ref(), io.f32(0), &prm, &mut o, scratch);
            }
            Kernel::Preprocess(p) => {
                let (lo, hi) = tile.range(p.n * p.h, 1);
                p.run(io.bytes(0), out_f32(out, outs, 0), lo, hi);
            }
            Kernel::Spin { micros } => {
                let t0 = std::time::Instant::now();
                let d = std::time::Duration::from_micros(*micros);
                while t0.elapsed() < d {
                    std::hint::spin_loop();
                }
                out_bytes(out, outs, 0).copy_from_slice(io.bytes(0));
            }
            Kernel::Fail { panic } => {
                if *panic {
                    panic!(
                        "node '{}': Fail operator executed (panic = true)",
                        node.name
                    );
                }
                return Err(run_err(node, "Fail operator executed"));
            }
        }
        Ok(())
    }
}

fn run_unary(op: UnaryOp, t: DType, x: &[u8], y: &mut [u8], lo: usize, hi: usize) {
    let e = t.size();
    match t {
        DType::F32 => {
            let (x, y): (&[f32], &mut [f32]) =
                (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(y));
            y[lo..hi].copy_from_slice(&x[lo..hi]);
            apply_unary(op, &mut y[lo..hi]);
        }
        DType::Bool if op == UnaryOp::Not => {
            for (d, s) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = (*s == 0) as u8;
            }
        }
        DType::I64 => {
            let (x, y): (&[i64], &mut [i64]) =
                (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(y));
            for (d, s) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = match op {
                    UnaryOp::Neg => s.wrapping_neg(),
                    UnaryOp::Abs => s.wrapping_abs(),
                    UnaryOp::Sign => s.signum(),
                    _ => *s,
                };
            }
        }
        DType::I32 => {
            let (x, y): (&[i32], &mut [i32]) =
                (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(y));
            for (d, s) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = match op {
                    UnaryOp::Neg => s.wrapping_neg(),
                    UnaryOp::Abs => s.wrapping_abs(),
                    UnaryOp::Sign => s.signum(),
                    _ => *s,
                };
            }
        }
        _ => y[lo * e..hi * e].copy_from_slice(&x[lo * e..hi * e]),
    }
}

fn run_gemm(ctx: &RunCtx<'_>, g: &GemmPlan, io: &Inputs<'_>, c: &mut [f32], scratch: &mut [f32]) {
    // Tiles split rows of C when there are more rows than columns, else columns (see
    // `GemmPlan::by_rows`); a row tile packs only its own rows of A.
    let ((r0, r1), (lo, hi)) = if g.by_rows() {
        (ctx.tile.range(g.m, gemm::MR), (0, g.n))
    } else {
        ((0, g.m), ctx.tile.range(g.n, NR))
    };
    let rows = r1 - r0;
    let a = io.f32(0);
    let b = io.f32(1);
    let (pa, rest) = scratch.split_at_mut(gemm::packed_a_len(g.m, g.k));
    let mn = g.m * g.n;
    let sub = r0 * g.n..r1 * g.n;
    for (bi, &(ao, bo)) in g.batches.iter().enumerate() {
        gemm::pack_a(
            &a[ao + r0 * g.a_rs..],
            g.a_rs,
            g.a_cs,
            rows,
            g.k,
            g.alpha,
            pa,
        );
        let bm = &b[bo..];
        let (rs, cs) = (g.b_rs, g.b_cs);
        let fill = |p: usize, j0: usize, len: usize, row: &mut [f32]| {
            if cs == 1 {
                return Some(&bm[p * rs + j0..p * rs + j0 + len]);
            }
            for (j, d) in row[..len].iter_mut().enumerate() {
                *d = bm[p * rs + (j0 + j) * cs];
            }
            None
        };
        let bsrc = match &g.b_packed {
            Some(p) => gemm::BSource::Packed(p),
            None => gemm::BSource::Rows(&fill),
        };
        let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        for (d, &i) in resid.iter_mut().zip(&g.res) {
            *d = &io.f32(i)[bi * mn..(bi + 1) * mn][sub.clone()];
        }
        let addend = match (&g.addend, g.addend_input) {
            (Some(v), _) => Some(&v[sub.clone()]),
            (None, Some(i)) => Some(&io.f32(i)[sub.clone()]),
            _ => None,
        };
        let epi = Epilogue {
            bias: g.bias.as_deref(),
            channel_is_row: false,
            channel_offset: 0,
            addend,
            post: &g.post,
            residuals: &resid[..g.res.len()],
        };
        let cb = &mut c[bi * mn..(bi + 1) * mn][sub.clone()];
        gemm::gemm_packed(
            ctx.isa,
            rows,
            g.n,
            g.k,
            pa,
            bsrc,
            rest,
            cb,
            g.n,
            (0, rows),
            (lo, hi),
            &epi,
        );
    }
}

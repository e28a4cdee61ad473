//! Shape and type inference for every operator of the IR: one rule per op, grouped in
//! files by op family (the same family names as the importer, plans and kernels).
//!
//! A rule is graph-free: [`infer`] takes the op and, per input, an [`Input`] (type,
//! static shape and, when constant, its content) and returns each output's type and
//! shape. [`infer_node`] / [`infer_graph`] feed it from a [`Graph`]; constant folding
//! (`exec::eval_node`) feeds it from tensors. Ops read the *constant* content of some
//! inputs (Reshape's shape, Slice's starts/ends/axes/steps, Resize's scales/sizes, Pad's
//! pads, TopK's k, Expand's shape, Split's sizes, Tile's repeats, Range's bounds,
//! ConstantOfShape's shape, Squeeze/Unsqueeze/Reduce axes, NonMaxSuppression's box
//! limit); the compiler folds constants and infers node by node in topological order, so
//! those inputs are constant by then; when one is not, the error says which input must be.
//!
//! Conventions follow ONNX (opset 13+ semantics for axes; numpy broadcasting). Conv and
//! pooling output sizes honour `auto_pad` and `ceil_mode` (a ceil-mode window that would
//! start inside the right padding is dropped, as onnxruntime does). NonMaxSuppression's
//! output is data dependent: its static shape is the upper bound
//! `[batch * classes * min(max_output_boxes_per_class, boxes), 3]`.
//!
//! Invariant: every returned shape has an element count that fits in `usize`.

mod conv;
mod elementwise;
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

pub use conv::{resolve_auto_pad, resolve_conv_transpose_pads};
pub use elementwise::binary_type;

use super::{DType, Graph, Node, Op, PostOp, Tensor};
use crate::{Error, Result};

/// An output type and static shape.
pub type TypedShape = (DType, Vec<usize>);

/// What a shape rule knows about one input of a node.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The value's name (for error messages).
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: &'a [usize],
    /// The content, when the input is constant.
    pub konst: Option<&'a Tensor>,
}

impl<'a> Input<'a> {
    /// A constant input described by its tensor.
    pub fn constant(name: &'a str, t: &'a Tensor) -> Input<'a> {
        Input {
            name,
            dtype: t.dtype(),
            shape: &t.shape,
            konst: Some(t),
        }
    }
}

/// Output types and shapes of op `op` of node `node` (the name is for error messages),
/// given its inputs (`None` for an omitted optional input).
pub fn infer(node: &str, op: &Op, inputs: &[Option<Input<'_>>]) -> Result<Vec<TypedShape>> {
    let cx = Cx {
        node,
        op,
        ins: inputs,
    };
    let outs = cx.infer()?;
    for (_, s) in &outs {
        if s.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_none()
        {
            return Err(cx.err(format!("output shape {s:?} is too large")));
        }
    }
    Ok(outs)
}

/// Output types and shapes of `node`, one entry per output, given the input shapes (and
/// constant inputs) recorded in `graph`.
pub fn infer_node(graph: &Graph, node: &Node) -> Result<Vec<TypedShape>> {
    let err = |r: String| Error::shape(&node.name, node.op.name(), r);
    let inputs = node
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let Some(v) = *v else { return Ok(None) };
            let val = graph
                .values
                .get(v)
                .ok_or_else(|| err(format!("input #{i} refers to a missing value")))?;
            let konst = val.konst.as_deref();
            let shape = val
                .shape
                .as_deref()
                .or(konst.map(|t| &t.shape[..]))
                .ok_or_else(|| err(format!("input #{i} ('{}') has no shape yet", val.name)))?;
            Ok(Some(Input {
                name: &val.name,
                dtype: val.dtype,
                shape,
                konst,
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = infer(&node.name, &node.op, &inputs)?;
    if outs.len() != node.outputs.len() {
        return Err(err(format!(
            "produces {} outputs but the node has {}",
            outs.len(),
            node.outputs.len()
        )));
    }
    Ok(outs)
}

/// Infers every node of `graph` in order and records the output dtypes and shapes.
/// Stops at the first error (e.g. a shape argument that is not constant yet).
pub fn infer_graph(graph: &mut Graph) -> Result<()> {
    for i in 0..graph.nodes.len() {
        let outs = infer_node(graph, &graph.nodes[i])?;
        let ids = graph.nodes[i].outputs.clone();
        for (id, (dt, shape)) in ids.into_iter().zip(outs) {
            graph.values[id].dtype = dt;
            graph.values[id].shape = Some(shape);
        }
    }
    Ok(())
}

/// Numpy-style multidirectional broadcast of two shapes; `None` when incompatible.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Normalises a possibly negative axis against `rank`; `None` when out of range.
/// True when `m` is the trailing dims of `x` with leading dims 1 (at least the last one):
/// one mask added to every group of rows of `x` it matches.
pub fn is_trailing_mask(m: &[usize], x: &[usize]) -> bool {
    let Some(first) = m.iter().position(|&d| d != 1) else {
        return !x.is_empty() && m.len() <= x.len() && !m.is_empty() && x[x.len() - 1] == 1;
    };
    m.len() <= x.len() && !x.is_empty() && m[first..] == x[x.len() - (m.len() - first)..]
}

pub fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// One output of one type.
fn one(dt: DType, s: Vec<usize>) -> Result<Vec<TypedShape>> {
    Ok(vec![(dt, s)])
}

/// The node a rule is applied to: its name, op and inputs.
struct Cx<'a> {
    node: &'a str,
    op: &'a Op,
    ins: &'a [Option<Input<'a>>],
}

impl<'a> Cx<'a> {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::shape(self.node, self.op.name(), reason)
    }

    fn input(&self, i: usize) -> Option<Input<'a>> {
        self.ins.get(i).copied().flatten()
    }

    /// Type and shape of optional input `i`.
    fn opt(&self, i: usize) -> Result<Option<(DType, &'a [usize])>> {
        Ok(self.input(i).map(|x| (x.dtype, x.shape)))
    }

    /// Type and shape of required input `i`.
    fn req(&self, i: usize) -> Result<(DType, &'a [usize])> {
        self.opt(i)?
            .ok_or_else(|| self.err(format!("required input #{i} is missing")))
    }

    fn shape(&self, i: usize) -> Result<&'a [usize]> {
        Ok(self.req(i)?.1)
    }

    /// Constant content of optional input `i` (`None` when the input is absent).
    fn opt_const(&self, i: usize, what: &str) -> Result<Option<&'a Tensor>> {
        let Some(x) = self.input(i) else {
            return Ok(None);
        };
        match x.konst {
            Some(t) => Ok(Some(t)),
            None => Err(self.err(format!(
                "input #{i} ({what}, '{}') must be a constant; vnpu needs static shapes",
                x.name
            ))),
        }
    }

    fn req_const(&self, i: usize, what: &str) -> Result<&'a Tensor> {
        self.opt_const(i, what)?
            .ok_or_else(|| self.err(format!("required input #{i} ({what}) is missing")))
    }

    fn ints(&self, t: &Tensor, what: &str) -> Result<Vec<i64>> {
        t.to_i64_vec()
            .ok_or_else(|| self.err(format!("{what} must be an integer tensor")))
    }

    fn opt_ints(&self, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
        match self.opt_const(i, what)? {
            None => Ok(None),
            Some(t) => self.ints(t, what).map(Some),
        }
    }

    fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        norm_axis(axis, rank)
            .ok_or_else(|| self.err(format!("axis {axis} is out of range for rank {rank}")))
    }

    fn dim(&self, v: i64, what: &str) -> Result<usize> {
        usize::try_from(v).map_err(|_| self.err(format!("{what} {v} must be non-negative")))
    }

    fn bcast(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
        broadcast(a, b).ok_or_else(|| self.err(format!("shapes {a:?} and {b:?} do not broadcast")))
    }

    fn check_post(&self, post: &[PostOp], out: &[usize], channels: usize) -> Result<()> {
        for p in post {
            match p {
                PostOp::Unary(_) => {}
                PostOp::ChannelAffine { scale, shift } => {
                    if scale.len() != channels || shift.len() != channels {
                        return Err(self.err(format!(
                            "fused scale/shift have {}/{} entries for {channels} channels",
                            scale.len(),
                            shift.len()
                        )));
                    }
                }
                PostOp::ChannelPRelu { slope } => {
                    if slope.len() != channels {
                        return Err(self.err(format!(
                            "fused PRelu has {} slopes for {channels} channels",
                            slope.len()
                        )));
                    }
                }
                PostOp::AddInput { input } => {
                    let r = self.shape(*input)?;
                    if r != out {
                        return Err(self.err(format!(
                            "fused residual input #{input} has shape {r:?}, output is {out:?}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Dispatches to the op's family rule.
    fn infer(&self) -> Result<Vec<TypedShape>> {
        match self.op {
            Op::Conv { geom, group, post } => self.conv_node(geom, group, post),
            Op::ConvNhwc { geom, group, post } => self.conv_nhwc_node(geom, *group, post),
            Op::ExpandConvNhwc {
                expand,
                geom,
                group,
                post,
            } => self.expand_conv_nhwc_node(expand, geom, *group, post),
            Op::DwProjectNhwc {
                expand,
                geom,
                group,
                post,
                project,
            } => self.dw_project_nhwc_node(expand.as_deref(), geom, *group, (post, project)),
            Op::ConvTranspose {
                geom,
                group,
                output_padding,
                output_shape,
                ..
            } => self.conv_transpose(geom, *group, output_padding, output_shape),
            Op::Gemm {
                trans_a,
                trans_b,
                post,
                ..
            } => self.gemm(trans_a, trans_b, post),
            Op::MatMul { post } => self.matmul_node(post),
            Op::Attention => self.attention(),
            Op::BatchNorm { .. } | Op::InstanceNorm { .. } => self.channel_norm(),
            Op::LayerNorm { axis, .. } => self.layer_norm(axis),
            Op::Softmax { axis } | Op::LogSoftmax { axis } => self.softmax(axis),
            Op::MaskedSoftmax => self.masked_softmax(),
            Op::Unary(u) => self.unary(u),
            Op::Binary(b) => self.binary(b),
            Op::Where => self.where_op(),
            Op::ClipDynamic => self.clip_dynamic(),
            Op::Cast { to } => self.cast(*to),
            Op::MaxPool { geom, ceil_mode }
            | Op::AveragePool {
                geom, ceil_mode, ..
            } => self.pool_node(geom, ceil_mode),
            Op::MaxPoolNhwc { geom, ceil_mode } => self.pool_nhwc(geom, *ceil_mode),
            Op::GlobalAveragePool | Op::GlobalMaxPool => self.global_pool(),
            Op::Concat { axis } => self.concat(axis),
            Op::Split {
                axis,
                split,
                num_outputs,
            } => self.split(*axis, split.as_deref(), *num_outputs),
            Op::Slice => self.slice(),
            Op::Reshape { allowzero } => self.reshape_node(allowzero),
            Op::Flatten { axis } => self.flatten(axis),
            Op::Squeeze { axes } => self.squeeze(axes),
            Op::Unsqueeze { axes } => self.unsqueeze(axes),
            Op::Transpose { perm } => self.transpose(perm),
            Op::Pad { .. } => self.pad(),
            Op::Expand => self.expand(),
            Op::Tile => self.tile(),
            Op::DepthToSpace { blocksize, .. } => self.depth_to_space(blocksize),
            Op::SpaceToDepth { blocksize } => self.space_to_depth(blocksize),
            Op::Reduce {
                axes,
                keepdims,
                noop_with_empty_axes,
                ..
            } => self.reduce(axes, keepdims, noop_with_empty_axes),
            Op::ArgMax { axis, keepdims, .. } | Op::ArgMin { axis, keepdims, .. } => {
                self.arg_reduce(axis, keepdims)
            }
            Op::CumSum { .. } => self.cumsum(),
            Op::TopK { axis, .. } => self.topk(axis),
            Op::Gather { axis } => self.gather(axis),
            Op::GatherElements { axis } => self.gather_elements(axis),
            Op::GatherND { batch_dims } => self.gather_nd(*batch_dims),
            Op::NonMaxSuppression { .. } => self.nms(),
            Op::Shape { start, end } => self.shape_of(start, end),
            Op::ConstantOfShape { value } => self.constant_of_shape(value),
            Op::Range => self.range(),
            Op::Resize { .. } => self.resize(),
            Op::Lstm {
                hidden_size,
                direction,
                layout,
            } => self.rnn(*hidden_size, *direction, *layout, 4, 3),
            Op::Gru {
                hidden_size,
                direction,
                layout,
                ..
            } => self.rnn(*hidden_size, *direction, *layout, 3, 2),
            Op::Preprocess { format, nhwc, .. } => self.preprocess(format, nhwc),
            Op::QuantizeLinear { axis, dtype } => self.quantize_linear(*axis, *dtype),
            Op::DequantizeLinear { axis } => self.dequantize_linear(*axis),
            Op::QConv {
                geom,
                group,
                w_scale,
                y,
                ..
            } => self.qconv(geom, *group, w_scale, y),
            Op::QGemm { w_scale, y, .. } => self.qgemm(w_scale, y),
            Op::QAdd { .. } => self.qadd(),
            Op::QRequant { .. } => self.qrequant(),
            Op::QLut { table } => self.qlut(table),
            Op::QMul { .. } => self.qadd(),
            Op::QSoftmax { axis, .. } => self.qsoftmax(*axis),
            Op::QMaxPool { geom, ceil_mode } => self.qmaxpool(geom, *ceil_mode),
            Op::QAvgPool {
                geom, ceil_mode, ..
            } => self.qmaxpool(geom, *ceil_mode),
            Op::QGlobalAvgPool { .. } => self.qglobal_avgpool(),
            Op::QResize { .. } => self.qresize(),
            #[cfg(feature = "test-ops")]
            Op::Spin { .. } | Op::Fail { .. } => self.pass_through(),
        }
    }
}

#[cfg(test)]
mod tests;

//! Shape and type inference for every operator of the IR.
//!
//! [`infer_node`] computes the element type and static shape of each output of one node
//! from its input shapes and, where the op needs them, the *constant* content of some
//! inputs (Reshape's shape, Slice's starts/ends/axes/steps, Resize's scales/sizes, Pad's
//! pads, TopK's k, Expand's shape, Split's sizes, Tile's repeats, Range's bounds,
//! ConstantOfShape's shape, Squeeze/Unsqueeze/Reduce axes, NonMaxSuppression's box limit).
//! The compiler folds constants and calls it node by node in topological order, so those
//! inputs are constant by then; when one is not, the error says which input must be.
//!
//! Conventions follow ONNX (opset 13+ semantics for axes; numpy broadcasting). Conv and
//! pooling output sizes honour `auto_pad` and `ceil_mode` (a ceil-mode window that would
//! start inside the right padding is dropped, as onnxruntime does). NonMaxSuppression's
//! output is data dependent: its static shape is the upper bound
//! `[batch * classes * min(max_output_boxes_per_class, boxes), 3]`.
//!
//! Invariant: every returned shape has an element count that fits in `usize`.

use super::{ConvGeom, DType, Graph, ImageFormat, Node, Op, PostOp, RnnDirection, Tensor};
use crate::{Error, Result};

/// An output type and static shape.
pub type TypedShape = (DType, Vec<usize>);

/// Output types and shapes of `node`, one entry per output, given the input shapes (and
/// constant inputs) recorded in `graph`.
pub fn infer_node(graph: &Graph, node: &Node) -> Result<Vec<TypedShape>> {
    let cx = Cx { g: graph, n: node };
    let outs = cx.infer()?;
    if outs.len() != node.outputs.len() {
        return Err(cx.err(format!(
            "produces {} outputs but the node has {}",
            outs.len(),
            node.outputs.len()
        )));
    }
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

/// Turns `SAME_UPPER`/`SAME_LOWER`/`VALID` into explicit pads for an input of spatial
/// size `input_spatial` (Conv and pooling), and clears `auto_pad`. A geometry without
/// `auto_pad` is left as it is; so is one whose rank differs from `input_spatial`
/// (`infer_node` reports that mismatch as a shape error).
pub fn resolve_auto_pad(geom: &mut ConvGeom, input_spatial: &[usize]) {
    let Some(mode) = geom.auto_pad.clone() else {
        return;
    };
    let ns = input_spatial.len();
    if geom.kernel.len() != ns || geom.strides.len() != ns || geom.dilations.len() != ns {
        return;
    }
    let mut pads = vec![0usize; 2 * ns];
    if mode != "VALID" {
        for i in 0..ns {
            let (k, s, d, x) = (
                geom.kernel[i],
                geom.strides[i].max(1),
                geom.dilations[i],
                input_spatial[i],
            );
            let eff = d.saturating_mul(k.saturating_sub(1)).saturating_add(1);
            let out = x.div_ceil(s);
            let total = out
                .saturating_sub(1)
                .saturating_mul(s)
                .saturating_add(eff)
                .saturating_sub(x);
            let (small, big) = (total / 2, total - total / 2);
            if mode == "SAME_LOWER" {
                pads[i] = big;
                pads[i + ns] = small;
            } else {
                pads[i] = small;
                pads[i + ns] = big;
            }
        }
    }
    geom.pads = pads;
    geom.auto_pad = None;
}

/// For ConvTranspose: turns `output_shape` and/or `auto_pad` into explicit pads for an
/// input of spatial size `input_spatial`, clears `auto_pad`, and returns the spatial
/// output size. After this the output is `s*(x-1) + output_padding + eff - pads`, so a
/// kernel only needs explicit pads. `node` names the node in errors.
pub fn resolve_conv_transpose_pads(
    node: &str,
    geom: &mut ConvGeom,
    output_padding: &[usize],
    output_shape: &[usize],
    input_spatial: &[usize],
) -> Result<Vec<usize>> {
    let ns = input_spatial.len();
    let err = |r: String| Error::shape(node, "ConvTranspose", r);
    if geom.kernel.len() != ns
        || geom.strides.len() != ns
        || geom.dilations.len() != ns
        || geom.pads.len() != 2 * ns
        || output_padding.len() != ns
        || !(output_shape.is_empty() || output_shape.len() == ns)
    {
        return Err(err(format!(
            "geometry does not match the {ns} spatial dims of the input"
        )));
    }
    let mut out = Vec::with_capacity(ns);
    let mode = geom.auto_pad.take();
    for i in 0..ns {
        let s = geom.strides[i] as i128;
        let eff = (geom.dilations[i] as i128) * (geom.kernel[i] as i128 - 1) + 1;
        let x = input_spatial[i] as i128;
        let full = s * (x - 1) + output_padding[i] as i128 + eff;
        let target = if !output_shape.is_empty() {
            Some(output_shape[i] as i128)
        } else if mode.as_deref().is_some_and(|m| m != "VALID") {
            Some(x * s)
        } else {
            None
        };
        match target {
            Some(t) => {
                let total = full - t;
                if total < 0 {
                    return Err(err(format!(
                        "output size {t} in dim {i} exceeds the {full} the kernel can produce"
                    )));
                }
                let (small, big) = ((total / 2) as usize, (total - total / 2) as usize);
                if mode.as_deref() == Some("SAME_UPPER") {
                    geom.pads[i] = small;
                    geom.pads[i + ns] = big;
                } else {
                    geom.pads[i] = big;
                    geom.pads[i + ns] = small;
                }
                out.push(t as usize);
            }
            None => {
                if mode.as_deref() == Some("VALID") {
                    geom.pads[i] = 0;
                    geom.pads[i + ns] = 0;
                }
                let o = full - geom.pads[i] as i128 - geom.pads[i + ns] as i128;
                if o <= 0 {
                    return Err(err(format!("pads leave no output in spatial dim {i}")));
                }
                out.push(usize::try_from(o).map_err(|_| err("output too large".into()))?);
            }
        }
    }
    Ok(out)
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
pub fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

struct Cx<'a> {
    g: &'a Graph,
    n: &'a Node,
}

impl<'a> Cx<'a> {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::shape(&self.n.name, self.n.op.name(), reason)
    }

    fn value_name(&self, i: usize) -> &str {
        self.n
            .inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|v| self.g.values.get(v))
            .map_or("<missing>", |v| v.name.as_str())
    }

    /// Type and shape of optional input `i`.
    fn opt(&self, i: usize) -> Result<Option<(DType, &'a [usize])>> {
        let Some(v) = self.n.inputs.get(i).copied().flatten() else {
            return Ok(None);
        };
        let val = self
            .g
            .values
            .get(v)
            .ok_or_else(|| self.err(format!("input #{i} refers to a missing value")))?;
        let shape = val
            .shape
            .as_deref()
            .ok_or_else(|| self.err(format!("input #{i} ('{}') has no shape yet", val.name)))?;
        Ok(Some((val.dtype, shape)))
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
        if self.n.inputs.get(i).copied().flatten().is_none() {
            return Ok(None);
        }
        match self.g.const_input(self.n, i) {
            Some(t) => Ok(Some(t)),
            None => Err(self.err(format!(
                "input #{i} ({what}, '{}') must be a constant; vnpu needs static shapes",
                self.value_name(i)
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

    fn infer(&self) -> Result<Vec<TypedShape>> {
        let one = |dt: DType, s: Vec<usize>| Ok(vec![(dt, s)]);
        match &self.n.op {
            Op::Conv { geom, group, post } => {
                let s = self.conv(geom, *group)?;
                let ch = s[1];
                self.check_post(post, &s, ch)?;
                one(DType::F32, s)
            }
            Op::ConvTranspose {
                geom,
                group,
                output_padding,
                output_shape,
            } => self.conv_transpose(geom, *group, output_padding, output_shape),
            Op::Gemm {
                trans_a,
                trans_b,
                post,
                ..
            } => {
                let a = self.shape(0)?;
                let b = self.shape(1)?;
                if a.len() != 2 || b.len() != 2 {
                    return Err(self.err(format!("Gemm needs 2-D inputs, got {a:?} and {b:?}")));
                }
                let (m, ka) = if *trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
                let (kb, nn) = if *trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
                if ka != kb {
                    return Err(self.err(format!("inner dims differ: A {a:?}, B {b:?}")));
                }
                let out = vec![m, nn];
                if let Some((_, c)) = self.opt(2)? {
                    if self.bcast(&out, c)? != out {
                        return Err(self.err(format!("C {c:?} does not broadcast to {out:?}")));
                    }
                }
                self.check_post(post, &out, nn)?;
                one(self.req(0)?.0, out)
            }
            Op::MatMul { post } => {
                let (dt, a) = self.req(0)?;
                let b = self.shape(1)?;
                let out = self.matmul(a, b)?;
                let ch = out.last().copied().unwrap_or(1);
                self.check_post(post, &out, ch)?;
                one(dt, out)
            }
            Op::BatchNorm { .. } | Op::InstanceNorm { .. } => {
                let (dt, x) = self.req(0)?;
                if x.len() < 2 {
                    return Err(self.err(format!("input {x:?} needs a channel dim")));
                }
                let last = if matches!(self.n.op, Op::BatchNorm { .. }) {
                    4
                } else {
                    2
                };
                for i in 1..=last {
                    let p = self.shape(i)?;
                    if p != [x[1]] {
                        return Err(self.err(format!(
                            "parameter #{i} has shape {p:?}, expected [{}]",
                            x[1]
                        )));
                    }
                }
                one(dt, x.to_vec())
            }
            Op::LayerNorm { axis, .. } => {
                let (dt, x) = self.req(0)?;
                let ax = self.axis(*axis, x.len())?;
                for i in 1..=2 {
                    if let Some((_, p)) = self.opt(i)? {
                        if self.bcast(&x[ax..], p)? != x[ax..] {
                            return Err(self
                                .err(format!("parameter #{i} {p:?} does not fit {:?}", &x[ax..])));
                        }
                    }
                }
                one(dt, x.to_vec())
            }
            Op::Unary(u) => {
                let (dt, x) = self.req(0)?;
                let dt = if matches!(u, super::UnaryOp::Not) {
                    DType::Bool
                } else {
                    dt
                };
                one(dt, x.to_vec())
            }
            Op::Binary(b) => {
                use super::BinaryOp as B;
                let (dt, a) = self.req(0)?;
                let bs = self.shape(1)?;
                if *b == B::PRelu {
                    if self.bcast(a, bs)? != a {
                        return Err(self.err(format!("slope {bs:?} does not broadcast to {a:?}")));
                    }
                    return one(dt, a.to_vec());
                }
                let out = self.bcast(a, bs)?;
                let dt = match b {
                    B::Equal
                    | B::Less
                    | B::LessOrEqual
                    | B::Greater
                    | B::GreaterOrEqual
                    | B::And
                    | B::Or
                    | B::Xor => DType::Bool,
                    _ => dt,
                };
                one(dt, out)
            }
            Op::Where => {
                let c = self.shape(0)?;
                let (dt, x) = self.req(1)?;
                let y = self.shape(2)?;
                let xy = self.bcast(x, y)?;
                one(dt, self.bcast(c, &xy)?)
            }
            Op::ClipDynamic => {
                let (dt, x) = self.req(0)?;
                for i in 1..=2 {
                    if let Some((_, b)) = self.opt(i)? {
                        if b.iter().product::<usize>() != 1 {
                            return Err(
                                self.err(format!("bound #{i} must be a scalar, has shape {b:?}"))
                            );
                        }
                    }
                }
                one(dt, x.to_vec())
            }
            Op::MaxPool { geom, ceil_mode }
            | Op::AveragePool {
                geom, ceil_mode, ..
            } => {
                let (dt, x) = self.req(0)?;
                one(dt, self.pool(geom, *ceil_mode, x)?)
            }
            Op::GlobalAveragePool | Op::GlobalMaxPool => {
                let (dt, x) = self.req(0)?;
                if x.len() < 3 {
                    return Err(self.err(format!("input {x:?} needs N, C and spatial dims")));
                }
                let mut s = x[..2].to_vec();
                s.extend(std::iter::repeat(1).take(x.len() - 2));
                one(dt, s)
            }
            Op::Concat { axis } => {
                let (dt, first) = self.req(0)?;
                let ax = self.axis(*axis, first.len())?;
                let mut out = first.to_vec();
                for i in 1..self.n.inputs.len() {
                    let s = self.shape(i)?;
                    if s.len() != first.len()
                        || s.iter()
                            .zip(first)
                            .enumerate()
                            .any(|(d, (a, b))| d != ax && a != b)
                    {
                        return Err(self.err(format!(
                            "input #{i} {s:?} does not concat with {first:?} on axis {ax}"
                        )));
                    }
                    out[ax] += s[ax];
                }
                one(dt, out)
            }
            Op::Split {
                axis,
                split,
                num_outputs,
            } => self.split(*axis, split.as_deref(), *num_outputs),
            Op::Slice => self.slice(),
            Op::Reshape { allowzero } => {
                let (dt, x) = self.req(0)?;
                let target = self.ints(self.req_const(1, "shape")?, "shape")?;
                one(dt, self.reshape(x, &target, *allowzero)?)
            }
            Op::Flatten { axis } => {
                let (dt, x) = self.req(0)?;
                let r = i64::try_from(x.len()).map_err(|_| self.err("rank too large"))?;
                let a = if *axis < 0 { axis + r } else { *axis };
                if !(0..=r).contains(&a) {
                    return Err(self.err(format!("axis {axis} out of range for rank {r}")));
                }
                let a = a as usize;
                one(dt, vec![x[..a].iter().product(), x[a..].iter().product()])
            }
            Op::Squeeze { axes } => {
                let (dt, x) = self.req(0)?;
                let axes = match axes {
                    Some(a) => Some(a.clone()),
                    None => self.opt_ints(1, "axes")?,
                };
                let out = match axes {
                    None => x.iter().copied().filter(|&d| d != 1).collect(),
                    Some(axes) => {
                        let mut drop = vec![false; x.len()];
                        for a in axes {
                            let ax = self.axis(a, x.len())?;
                            if x[ax] != 1 {
                                return Err(
                                    self.err(format!("cannot squeeze dim {ax} of size {}", x[ax]))
                                );
                            }
                            drop[ax] = true;
                        }
                        x.iter()
                            .zip(drop)
                            .filter(|(_, d)| !d)
                            .map(|(&v, _)| v)
                            .collect()
                    }
                };
                one(dt, out)
            }
            Op::Unsqueeze { axes } => {
                let (dt, x) = self.req(0)?;
                let axes = match axes {
                    Some(a) => a.clone(),
                    None => self.ints(self.req_const(1, "axes")?, "axes")?,
                };
                let r = x.len() + axes.len();
                let mut ones = vec![false; r];
                for a in axes {
                    let ax = self.axis(a, r)?;
                    if ones[ax] {
                        return Err(self.err(format!("axis {a} given twice")));
                    }
                    ones[ax] = true;
                }
                let mut it = x.iter();
                let out = ones
                    .iter()
                    .map(|&o| {
                        if o {
                            1
                        } else {
                            it.next().copied().unwrap_or(1)
                        }
                    })
                    .collect();
                one(dt, out)
            }
            Op::Transpose { perm } => {
                let (dt, x) = self.req(0)?;
                let p: Vec<usize> = match perm {
                    Some(p) => p.clone(),
                    None => (0..x.len()).rev().collect(),
                };
                let mut seen = vec![false; x.len()];
                if p.len() != x.len()
                    || p.iter()
                        .any(|&i| i >= x.len() || std::mem::replace(&mut seen[i], true))
                {
                    return Err(self.err(format!(
                        "perm {p:?} is not a permutation of rank {}",
                        x.len()
                    )));
                }
                one(dt, p.iter().map(|&i| x[i]).collect())
            }
            Op::Pad { .. } => self.pad(),
            Op::Resize { .. } => self.resize(),
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                let (dt, x) = self.req(0)?;
                self.axis(*axis, x.len())?;
                one(dt, x.to_vec())
            }
            Op::Reduce {
                axes,
                keepdims,
                noop_with_empty_axes,
                ..
            } => {
                let (dt, x) = self.req(0)?;
                let axes = match axes {
                    Some(a) => a.clone(),
                    None => self.opt_ints(1, "axes")?.unwrap_or_default(),
                };
                if axes.is_empty() && *noop_with_empty_axes {
                    return one(dt, x.to_vec());
                }
                let mut red = vec![axes.is_empty(); x.len()];
                for a in axes {
                    red[self.axis(a, x.len())?] = true;
                }
                one(dt, reduce_shape(x, &red, *keepdims))
            }
            Op::ArgMax { axis, keepdims, .. } | Op::ArgMin { axis, keepdims, .. } => {
                let x = self.shape(0)?;
                let ax = self.axis(*axis, x.len())?;
                let mut red = vec![false; x.len()];
                red[ax] = true;
                one(DType::I64, reduce_shape(x, &red, *keepdims))
            }
            Op::TopK { axis, .. } => {
                let (dt, x) = self.req(0)?;
                let ax = self.axis(*axis, x.len())?;
                let k = self.ints(self.req_const(1, "k")?, "k")?;
                let [k] = k[..] else {
                    return Err(self.err("k must hold one value"));
                };
                let k = self.dim(k, "k")?;
                if k > x[ax] {
                    return Err(self.err(format!("k = {k} exceeds dim {ax} of size {}", x[ax])));
                }
                let mut s = x.to_vec();
                s[ax] = k;
                Ok(vec![(dt, s.clone()), (DType::I64, s)])
            }
            Op::Gather { axis } => {
                let (dt, x) = self.req(0)?;
                let (it, idx) = self.req(1)?;
                if !matches!(it, DType::I32 | DType::I64) {
                    return Err(self.err("indices must be int32 or int64"));
                }
                let ax = self.axis(*axis, x.len())?;
                let mut s = x[..ax].to_vec();
                s.extend_from_slice(idx);
                s.extend_from_slice(&x[ax + 1..]);
                one(dt, s)
            }
            Op::GatherElements { axis } => {
                let (dt, x) = self.req(0)?;
                let idx = self.shape(1)?;
                self.axis(*axis, x.len())?;
                if idx.len() != x.len() {
                    return Err(self.err(format!(
                        "indices rank {} differs from data rank {}",
                        idx.len(),
                        x.len()
                    )));
                }
                one(dt, idx.to_vec())
            }
            Op::Expand => {
                let (dt, x) = self.req(0)?;
                let s = self.ints(self.req_const(1, "shape")?, "shape")?;
                let s = s
                    .iter()
                    .map(|&d| self.dim(d, "shape value"))
                    .collect::<Result<Vec<_>>>()?;
                one(dt, self.bcast(x, &s)?)
            }
            Op::Cast { to } => one(*to, self.shape(0)?.to_vec()),
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
            Op::DepthToSpace { blocksize, .. } => {
                let (dt, x) = self.req(0)?;
                let b = *blocksize;
                match *x {
                    [n, c, h, w] if b > 0 && c % (b * b) == 0 => {
                        one(dt, vec![n, c / (b * b), h * b, w * b])
                    }
                    _ => Err(self.err(format!(
                        "input {x:?} is not 4-D with channels divisible by {b}²"
                    ))),
                }
            }
            Op::SpaceToDepth { blocksize } => {
                let (dt, x) = self.req(0)?;
                let b = *blocksize;
                match *x {
                    [n, c, h, w] if b > 0 && h % b == 0 && w % b == 0 => {
                        one(dt, vec![n, c * b * b, h / b, w / b])
                    }
                    _ => {
                        Err(self.err(format!("input {x:?} is not 4-D with H, W divisible by {b}")))
                    }
                }
            }
            Op::Shape { start, end } => {
                let x = self.shape(0)?;
                let r = x.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r);
                let s = clamp(*start);
                let e = clamp(end.unwrap_or(r));
                one(DType::I64, vec![(e - s).max(0) as usize])
            }
            Op::ConstantOfShape { value } => {
                let s = self.ints(self.req_const(0, "shape")?, "shape")?;
                let s = s
                    .iter()
                    .map(|&d| self.dim(d, "shape value"))
                    .collect::<Result<Vec<_>>>()?;
                one(value.dtype(), s)
            }
            Op::Range => self.range(),
            Op::Tile => {
                let (dt, x) = self.req(0)?;
                let reps = self.ints(self.req_const(1, "repeats")?, "repeats")?;
                if reps.len() != x.len() {
                    return Err(self.err(format!("{} repeats for rank {}", reps.len(), x.len())));
                }
                let s = x
                    .iter()
                    .zip(&reps)
                    .map(|(&d, &r)| {
                        let r = self.dim(r, "repeat")?;
                        d.checked_mul(r)
                            .ok_or_else(|| self.err("tiled shape overflows"))
                    })
                    .collect::<Result<_>>()?;
                one(dt, s)
            }
            Op::CumSum { .. } => {
                let (dt, x) = self.req(0)?;
                let a = self.shape(1)?;
                if a.iter().product::<usize>() != 1 {
                    return Err(self.err(format!("axis must be a scalar, has shape {a:?}")));
                }
                one(dt, x.to_vec())
            }
            Op::NonMaxSuppression { .. } => {
                let b = self.shape(0)?;
                let s = self.shape(1)?;
                let (&[nb, ns, 4], &[sb, nc, ss]) = (b, s) else {
                    return Err(self.err(format!(
                        "boxes {b:?} / scores {s:?} are not [B,N,4] / [B,C,N]"
                    )));
                };
                if nb != sb || ns != ss {
                    return Err(self.err(format!("boxes {b:?} and scores {s:?} disagree")));
                }
                let max_out = match self.opt_ints(2, "max_output_boxes_per_class")? {
                    None => 0,
                    Some(v) => v.first().copied().unwrap_or(0).max(0),
                };
                let per = usize::try_from(max_out).unwrap_or(usize::MAX).min(ns);
                let rows = nb
                    .checked_mul(nc)
                    .and_then(|x| x.checked_mul(per))
                    .ok_or_else(|| self.err("output bound overflows"))?;
                one(DType::I64, vec![rows, 3])
            }
            Op::Preprocess { format, nhwc, .. } => {
                let (dt, x) = self.req(0)?;
                if dt != DType::U8 {
                    return Err(self.err(format!("raw image input must be u8, is {}", dt.name())));
                }
                let out = match (format, x) {
                    (ImageFormat::Nv12, &[n, rows, w]) => {
                        if rows % 3 != 0 || (rows / 3 * 2) % 2 != 0 || w % 2 != 0 {
                            return Err(self.err(format!(
                                "NV12 input {x:?} needs [N, H*3/2, W] with even H and W"
                            )));
                        }
                        vec![n, 3, rows / 3 * 2, w]
                    }
                    (ImageFormat::Nv12, _) => {
                        return Err(self.err(format!("NV12 input {x:?} must be [N, H*3/2, W]")))
                    }
                    (f, &[n, a, b, c]) => {
                        let want = if *f == ImageFormat::Gray { 1 } else { 3 };
                        let (ch, h, w) = if *nhwc { (c, a, b) } else { (a, b, c) };
                        if ch != want {
                            return Err(
                                self.err(format!("{f:?} input {x:?} needs {want} channels"))
                            );
                        }
                        vec![n, ch, h, w]
                    }
                    (f, _) => return Err(self.err(format!("{f:?} input {x:?} must be 4-D"))),
                };
                one(DType::F32, out)
            }
            Op::Spin { .. } | Op::Fail { .. } => {
                let (dt, x) = self.req(0)?;
                one(dt, x.to_vec())
            }
        }
    }

    fn spatial_check(&self, geom: &ConvGeom, x: &[usize]) -> Result<usize> {
        let ns = geom.kernel.len();
        if x.len() != ns + 2 {
            return Err(self.err(format!("input {x:?} is not [N, C] + {ns} spatial dims")));
        }
        if geom.strides.len() != ns || geom.dilations.len() != ns || geom.pads.len() != 2 * ns {
            return Err(self.err("strides/dilations/pads do not match the kernel rank"));
        }
        if geom.strides.contains(&0) || geom.dilations.contains(&0) || geom.kernel.contains(&0) {
            return Err(self.err("kernel, strides and dilations must be positive"));
        }
        Ok(ns)
    }

    /// Spatial output sizes of a Conv/pool window.
    fn window(&self, geom: &ConvGeom, ceil_mode: bool, x: &[usize]) -> Result<Vec<usize>> {
        let ns = self.spatial_check(geom, x)?;
        let mut g = geom.clone();
        resolve_auto_pad(&mut g, &x[2..]);
        let mut out = Vec::with_capacity(ns);
        for i in 0..ns {
            let (k, s, d) = (
                g.kernel[i] as u128,
                g.strides[i] as u128,
                g.dilations[i] as u128,
            );
            let (pb, pe, xi) = (g.pads[i] as u128, g.pads[i + ns] as u128, x[i + 2] as u128);
            let eff = d * (k - 1) + 1;
            let total = xi + pb + pe;
            if total < eff {
                return Err(self.err(format!(
                    "spatial dim {i}: padded input {total} is smaller than the kernel extent {eff}"
                )));
            }
            let num = total - eff;
            let mut o = if ceil_mode {
                num.div_ceil(s) + 1
            } else {
                num / s + 1
            };
            if ceil_mode && (o - 1) * s >= xi + pb {
                o -= 1;
            }
            out.push(usize::try_from(o).map_err(|_| self.err("output too large"))?);
        }
        Ok(out)
    }

    fn conv(&self, geom: &ConvGeom, group: usize) -> Result<Vec<usize>> {
        let x = self.shape(0)?;
        let w = self.shape(1)?;
        let ns = self.spatial_check(geom, x)?;
        if w.len() != ns + 2 || w[2..] != geom.kernel[..] {
            return Err(self.err(format!(
                "weights {w:?} do not match kernel {:?}",
                geom.kernel
            )));
        }
        if group == 0 || w[0] % group != 0 || x[1] != w[1] * group {
            return Err(self.err(format!(
                "input channels {} do not match weights {w:?} with group {group}",
                x[1]
            )));
        }
        if let Some((_, b)) = self.opt(2)? {
            if b != [w[0]] {
                return Err(self.err(format!(
                    "bias {b:?} does not match {} output channels",
                    w[0]
                )));
            }
        }
        let mut out = vec![x[0], w[0]];
        out.extend(self.window(geom, false, x)?);
        Ok(out)
    }

    fn pool(&self, geom: &ConvGeom, ceil_mode: bool, x: &[usize]) -> Result<Vec<usize>> {
        let mut out = x[..2.min(x.len())].to_vec();
        out.extend(self.window(geom, ceil_mode, x)?);
        Ok(out)
    }

    fn conv_transpose(
        &self,
        geom: &ConvGeom,
        group: usize,
        output_padding: &[usize],
        output_shape: &[usize],
    ) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let w = self.shape(1)?;
        let ns = self.spatial_check(geom, x)?;
        if w.len() != ns + 2 || w[2..] != geom.kernel[..] {
            return Err(self.err(format!(
                "weights {w:?} do not match kernel {:?}",
                geom.kernel
            )));
        }
        if group == 0 || w[0] != x[1] || x[1] % group != 0 {
            return Err(self.err(format!(
                "input channels {} do not match weights {w:?} with group {group}",
                x[1]
            )));
        }
        let m = w[1] * group;
        if let Some((_, b)) = self.opt(2)? {
            if b != [m] {
                return Err(self.err(format!("bias {b:?} does not match {m} output channels")));
            }
        }
        let mut g = geom.clone();
        let sp = resolve_conv_transpose_pads(
            &self.n.name,
            &mut g,
            output_padding,
            output_shape,
            &x[2..],
        )?;
        let mut out = vec![x[0], m];
        out.extend(sp);
        Ok(vec![(DType::F32, out)])
    }

    fn matmul(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
        if a.is_empty() || b.is_empty() {
            return Err(self.err("MatMul inputs must be at least 1-D"));
        }
        let a2: Vec<usize> = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2: Vec<usize> = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (ra, rb) = (a2.len(), b2.len());
        if a2[ra - 1] != b2[rb - 2] {
            return Err(self.err(format!("inner dims differ: {a:?} x {b:?}")));
        }
        let mut out = self.bcast(&a2[..ra - 2], &b2[..rb - 2])?;
        if a.len() > 1 {
            out.push(a2[ra - 2]);
        }
        if b.len() > 1 {
            out.push(b2[rb - 1]);
        }
        Ok(out)
    }

    fn split(&self, axis: i64, split: Option<&[i64]>, n: usize) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let ax = self.axis(axis, x.len())?;
        let d = x[ax];
        let sizes: Vec<usize> = match split
            .map(<[i64]>::to_vec)
            .map(Some)
            .unwrap_or(self.opt_ints(1, "split")?)
        {
            Some(s) => s
                .iter()
                .map(|&v| self.dim(v, "split size"))
                .collect::<Result<_>>()?,
            None => {
                if n == 0 {
                    return Err(self.err("split into zero outputs"));
                }
                let chunk = d.div_ceil(n);
                (0..n)
                    .map(|i| chunk.min(d.saturating_sub(i * chunk)))
                    .collect()
            }
        };
        if sizes.len() != n || sizes.iter().sum::<usize>() != d {
            return Err(self.err(format!(
                "split sizes {sizes:?} do not cover dim {ax} of size {d} in {n} parts"
            )));
        }
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut v = x.to_vec();
                v[ax] = s;
                (dt, v)
            })
            .collect())
    }

    fn slice(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let starts = self.ints(self.req_const(1, "starts")?, "starts")?;
        let ends = self.ints(self.req_const(2, "ends")?, "ends")?;
        let r = x.len();
        let axes = self
            .opt_ints(3, "axes")?
            .unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = self
            .opt_ints(4, "steps")?
            .unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(self.err("starts, ends, axes and steps differ in length"));
        }
        let mut out = x.to_vec();
        let mut seen = vec![false; r];
        for i in 0..starts.len() {
            let ax = self.axis(axes[i], r)?;
            if std::mem::replace(&mut seen[ax], true) {
                return Err(self.err(format!("axis {ax} sliced twice")));
            }
            let step = steps[i];
            if step == 0 {
                return Err(self.err("slice step must not be 0"));
            }
            out[ax] = slice_len(x[ax] as i64, starts[i], ends[i], step);
        }
        Ok(vec![(dt, out)])
    }

    fn reshape(&self, x: &[usize], target: &[i64], allowzero: bool) -> Result<Vec<usize>> {
        let total: usize = x.iter().product();
        let mut out = Vec::with_capacity(target.len());
        let mut infer = None;
        for (i, &t) in target.iter().enumerate() {
            match t {
                -1 => {
                    if infer.replace(i).is_some() {
                        return Err(self.err("shape has more than one -1"));
                    }
                    out.push(1);
                }
                0 if !allowzero => out.push(*x.get(i).ok_or_else(|| {
                    self.err(format!("shape copies dim {i} the input does not have"))
                })?),
                t => out.push(self.dim(t, "shape value")?),
            }
        }
        let known = out
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| self.err("shape overflows"))?;
        if let Some(i) = infer {
            if known == 0 || total % known != 0 {
                return Err(self.err(format!("cannot reshape {x:?} into {target:?}")));
            }
            out[i] = total / known;
        } else if known != total {
            return Err(self.err(format!(
                "cannot reshape {x:?} ({total} elements) into {target:?}"
            )));
        }
        Ok(out)
    }

    fn pad(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let pads = self.ints(self.req_const(1, "pads")?, "pads")?;
        let r = x.len();
        let axes: Vec<usize> = match self.opt_ints(3, "axes")? {
            Some(a) => a.iter().map(|&v| self.axis(v, r)).collect::<Result<_>>()?,
            None => (0..r).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(self.err(format!("{} pads for {} axes", pads.len(), axes.len())));
        }
        if let Some((_, c)) = self.opt(2)? {
            if c.iter().product::<usize>() != 1 {
                return Err(self.err(format!("constant_value must be a scalar, has shape {c:?}")));
            }
        }
        let mut out = x.to_vec();
        let k = axes.len();
        for (i, &ax) in axes.iter().enumerate() {
            let v = out[ax] as i128 + pads[i] as i128 + pads[i + k] as i128;
            if v < 0 {
                return Err(self.err(format!("pads make dim {ax} negative")));
            }
            out[ax] = usize::try_from(v).map_err(|_| self.err("padded dim too large"))?;
        }
        Ok(vec![(dt, out)])
    }

    fn resize(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let scales = self.opt_const(2, "scales")?.filter(|t| t.numel() > 0);
        let sizes = self.opt_const(3, "sizes")?.filter(|t| t.numel() > 0);
        let out = match (scales, sizes) {
            (Some(_), Some(_)) => return Err(self.err("give scales or sizes, not both")),
            (Some(s), None) => {
                let s = s.as_f32().ok_or_else(|| self.err("scales must be float"))?;
                if s.len() != x.len() {
                    return Err(self.err(format!("{} scales for rank {}", s.len(), x.len())));
                }
                x.iter()
                    .zip(s)
                    .map(|(&d, &f)| {
                        let v = (d as f32 * f).floor();
                        if f > 0.0 && v.is_finite() && v < 1e15 {
                            Ok(v as usize)
                        } else {
                            Err(self.err(format!("scale {f} is not a positive finite factor")))
                        }
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            (None, Some(s)) => {
                let s = self.ints(s, "sizes")?;
                if s.len() != x.len() {
                    return Err(self.err(format!("{} sizes for rank {}", s.len(), x.len())));
                }
                s.iter()
                    .map(|&v| self.dim(v, "size"))
                    .collect::<Result<_>>()?
            }
            (None, None) => return Err(self.err("needs scales or sizes")),
        };
        Ok(vec![(dt, out)])
    }

    fn range(&self) -> Result<Vec<TypedShape>> {
        let s = self.req_const(0, "start")?;
        let l = self.req_const(1, "limit")?;
        let d = self.req_const(2, "delta")?;
        for t in [s, l, d] {
            if t.numel() != 1 {
                return Err(self.err("start, limit and delta must be scalars"));
            }
        }
        let n = match (s.to_i64_vec(), l.to_i64_vec(), d.to_i64_vec()) {
            (Some(s), Some(l), Some(d)) => {
                let (s, l, d) = (s[0] as i128, l[0] as i128, d[0] as i128);
                if d == 0 {
                    return Err(self.err("delta must not be 0"));
                }
                let span = l - s;
                let q = span / d + i128::from(span % d != 0 && (span < 0) == (d < 0));
                q.max(0)
            }
            _ => {
                let (s, l, d) = (
                    s.to_f32_vec()[0] as f64,
                    l.to_f32_vec()[0] as f64,
                    d.to_f32_vec()[0] as f64,
                );
                if d == 0.0 || !((l - s) / d).is_finite() {
                    return Err(self.err("delta must be non-zero and the range finite"));
                }
                ((l - s) / d).ceil().max(0.0) as i128
            }
        };
        let n = usize::try_from(n).map_err(|_| self.err("range too long"))?;
        Ok(vec![(s.dtype(), vec![n])])
    }

    fn rnn(
        &self,
        h: usize,
        dir: RnnDirection,
        layout: i64,
        gates: usize,
        nout: usize,
    ) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let [a, b, input] = *x else {
            return Err(self.err(format!("X {x:?} must be 3-D")));
        };
        let (seq, batch) = if layout == 0 { (a, b) } else { (b, a) };
        let nd = if dir == RnnDirection::Bidirectional {
            2
        } else {
            1
        };
        let w = self.shape(1)?;
        let r = self.shape(2)?;
        if w != [nd, gates * h, input] || r != [nd, gates * h, h] {
            return Err(self.err(format!(
                "W {w:?} / R {r:?} do not match [{nd}, {}, {input}] / [{nd}, {}, {h}]",
                gates * h,
                gates * h
            )));
        }
        let (y, yh) = if layout == 0 {
            (vec![seq, nd, batch, h], vec![nd, batch, h])
        } else {
            (vec![batch, seq, nd, h], vec![batch, nd, h])
        };
        let mut out = vec![(dt, y), (dt, yh.clone())];
        if nout == 3 {
            out.push((dt, yh));
        }
        Ok(out)
    }
}

/// Output shape of a reduction over the flagged axes.
fn reduce_shape(x: &[usize], red: &[bool], keepdims: bool) -> Vec<usize> {
    x.iter()
        .zip(red)
        .filter_map(|(&d, &r)| match (r, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Number of elements ONNX Slice takes from a dim of size `d` (clamping per the spec).
fn slice_len(d: i64, start: i64, end: i64, step: i64) -> usize {
    let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (norm(start), norm(end));
    let (s, e) = if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(-1, d - 1), e.clamp(-1, d - 1))
    };
    let n = if step > 0 {
        (e - s + step - 1).div_euclid(step)
    } else {
        (s - e + (-step) - 1).div_euclid(-step)
    };
    n.max(0) as usize
}

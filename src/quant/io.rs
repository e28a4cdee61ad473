//! Quantised tensors at the model boundary (issue 16 items 4 and 5).
//!
//! Outputs: the compiled graph always computes an output in its own type (f32 for a
//! float model); an output declared S8/S16/S32 carries an [`OutputQuant`] in its
//! [`IoSpec`] and is converted when it is copied out to the caller, as the last step of
//! the plan: `q = saturate(round_half_even(x / scale[c]) + zero_point[c])` with `c` the
//! index along `axis`. The scales come from, in this order:
//! 1. the graph: an output produced by a `DequantizeLinear` (its scale and zero point);
//! 2. calibration: the max-abs per channel over the calibration samples,
//!    `scale = max_abs / qmax` (symmetric; qmax 127, 32767, and 2^24 for S32);
//! 3. otherwise a compile error naming the output and what is missing.
//!
//! Scales are always reported per channel of the output's channel axis (a per-tensor
//! scale is repeated), because board applications index `scaleData[c]` by channel.
//!
//! Inputs: an image or feature-map input declared `s8` takes signed bytes,
//! `byte = pixel - 128`. That is done in the graph: the raw input becomes an i8 value
//! followed by `Cast(f32) → Add(128) [→ Cast(u8)]` in front of the preprocessing, so the
//! plan, the executor and every API see one consistent input type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::compile::config::{OutputParams, OutputType, ALL_OUTPUTS};
use crate::compile::{CompileOptions, CompiledModel, IoKind, IoLayout, IoSpec};
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, DType, Graph, ImageFormat, Node, Op, Tensor, Value, ValueId};

/// Element type of a quantised boundary tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QType {
    /// Signed 8-bit.
    S8,
    /// Signed 16-bit.
    S16,
    /// Signed 32-bit.
    S32,
}

impl QType {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            QType::S8 => 1,
            QType::S16 => 2,
            QType::S32 => 4,
        }
    }

    /// Largest value.
    pub fn max(self) -> i64 {
        match self {
            QType::S8 => i8::MAX as i64,
            QType::S16 => i16::MAX as i64,
            QType::S32 => i32::MAX as i64,
        }
    }

    /// Smallest value.
    pub fn min(self) -> i64 {
        -self.max() - 1
    }

    /// The name used in files and messages (`s8`, `s16`, `s32`).
    pub fn name(self) -> &'static str {
        match self {
            QType::S8 => "s8",
            QType::S16 => "s16",
            QType::S32 => "s32",
        }
    }

    /// The type of a name written by [`QType::name`].
    pub fn from_name(s: &str) -> Option<QType> {
        match s {
            "s8" => Some(QType::S8),
            "s16" => Some(QType::S16),
            "s32" => Some(QType::S32),
            _ => None,
        }
    }
}

/// How a quantised output is handed to the caller: `real = (q - zero_point[c]) *
/// scale[c]` along `axis` (`hbDNNQuantiScale`, `quantiType = SCALE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputQuant {
    /// Element type of the caller's buffer.
    pub qtype: QType,
    /// The axis of the scales in the output's shape (`quantizeAxis`).
    pub axis: usize,
    /// One scale per index of `axis` (or one for a tensor without that axis).
    pub scale: Vec<f32>,
    /// Zero points, as many as scales; empty when symmetric.
    pub zero_point: Vec<i8>,
}

impl OutputQuant {
    /// Checks the description against the output's shape (what a file may be wrong
    /// about): axis in range, one scale per channel (or one), scales finite and > 0.
    pub fn check(&self, shape: &[usize]) -> std::result::Result<(), String> {
        let channels = match shape.get(self.axis) {
            Some(&c) => c,
            None if shape.is_empty() && self.axis == 0 => 1,
            None => {
                return Err(format!(
                    "quantize axis {} is outside the shape {shape:?}",
                    self.axis
                ))
            }
        };
        if self.scale.len() != channels && self.scale.len() != 1 {
            return Err(format!(
                "{} scales for {channels} channels along axis {}",
                self.scale.len(),
                self.axis
            ));
        }
        if let Some(s) = self.scale.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!("scale {s} is not a finite positive number"));
        }
        if !self.zero_point.is_empty() && self.zero_point.len() != self.scale.len() {
            return Err(format!(
                "{} zero points for {} scales",
                self.zero_point.len(),
                self.scale.len()
            ));
        }
        Ok(())
    }

    /// Bytes of a buffer of `shape`.
    pub fn byte_size(&self, shape: &[usize]) -> usize {
        shape.iter().product::<usize>() * self.qtype.size()
    }
}

/// Quantises `src` (row-major, `shape`) into `out` (native-endian elements of
/// `q.qtype`): `saturate(round_half_even(x / scale[c]) + zero_point[c])`; NaN gives the
/// zero point. The caller checked `q` against `shape` ([`OutputQuant::check`]) and the
/// buffer sizes.
pub fn quantize_f32(q: &OutputQuant, shape: &[usize], src: &[f32], out: &mut [u8]) {
    let channels = shape.get(q.axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(q.axis + 1..).map_or(1, |s| s.iter().product());
    let (lo, hi) = (q.qtype.min() as f64, q.qtype.max() as f64);
    let es = q.qtype.size();
    let per_channel = q.scale.len() > 1;
    for (i, &x) in src.iter().enumerate() {
        let c = if per_channel {
            (i / inner.max(1)) % channels
        } else {
            0
        };
        let zp = q.zero_point.get(c).copied().unwrap_or(0) as f64;
        // In f64: exact for every i32, and x / scale is then correctly rounded.
        let v = (x as f64 / q.scale[c] as f64).round_ties_even() + zp;
        let v = if v.is_nan() { zp } else { v.clamp(lo, hi) } as i64;
        let d = &mut out[i * es..(i + 1) * es];
        match q.qtype {
            QType::S8 => d[0] = v as i8 as u8,
            QType::S16 => d.copy_from_slice(&(v as i16).to_ne_bytes()),
            QType::S32 => d.copy_from_slice(&(v as i32).to_ne_bytes()),
        }
    }
}

/// Writes one output for the caller: `src` are the graph output's bytes (native
/// endian); with a quantised spec they are converted, otherwise copied.
pub fn write_output(spec: &IoSpec, src: &[u8], out: &mut [u8]) -> Result<()> {
    let mismatch = |expected: usize| Error::TensorMismatch {
        name: spec.name.clone(),
        field: "byte size".into(),
        expected: expected.to_string(),
        actual: out.len().to_string(),
    };
    let Some(q) = &spec.quant else {
        if out.len() != src.len() {
            return Err(mismatch(src.len()));
        }
        out.copy_from_slice(src);
        return Ok(());
    };
    let want = q.byte_size(&spec.shape);
    if out.len() != want || src.len() != want / q.qtype.size() * 4 || spec.dtype != DType::F32 {
        return Err(mismatch(want));
    }
    match bytemuck::try_cast_slice::<u8, f32>(src) {
        Ok(x) => quantize_f32(q, &spec.shape, x, out),
        Err(_) => {
            let x: Vec<f32> = src
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            quantize_f32(q, &spec.shape, &x, out)
        }
    }
    Ok(())
}

/// Copies output `i` of a finished run into the caller's buffer `out` (exactly the
/// boundary size of `m.outputs[i]`), converting a quantised output.
pub fn read_output(
    m: &CompiledModel,
    plan: &crate::exec::ModelPlan,
    st: &crate::exec::ExecState,
    i: usize,
    out: &mut [u8],
) -> Result<()> {
    let spec = m.outputs.get(i).ok_or_else(|| Error::InvalidArgument {
        name: "output index".into(),
        reason: format!("{i} out of range (model has {})", m.outputs.len()),
    })?;
    let src = plan
        .output_bytes(st, i)
        .ok_or_else(|| Error::InvalidArgument {
            name: "output index".into(),
            reason: format!("{i} out of range of the plan"),
        })?;
    write_output(spec, src, out)
}

/// The element type, quantisation and element size a boundary tensor is reported with
/// (`elem` is what its graph type alone gives).
pub fn boundary_desc(
    spec: &IoSpec,
    elem: crate::runtime::ElemType,
) -> (crate::runtime::ElemType, crate::runtime::Quant, usize) {
    use crate::runtime::{ElemType, Quant};
    match &spec.quant {
        None => (
            elem,
            Quant::None,
            match spec.kind {
                IoKind::Image(_) => 1,
                IoKind::Tensor => spec.dtype.size(),
            },
        ),
        Some(q) => (
            match q.qtype {
                QType::S8 => ElemType::S8,
                QType::S16 => ElemType::S16,
                QType::S32 => ElemType::S32,
            },
            Quant::Scale {
                axis: q.axis as i32,
                scale: q.scale.clone(),
                zero_point: q.zero_point.clone(),
            },
            q.qtype.size(),
        ),
    }
}

/// Bytes of output `spec`'s buffer at the API boundary.
pub fn boundary_bytes(spec: &IoSpec) -> usize {
    spec.quant
        .as_ref()
        .map_or(spec.byte_size, |q| q.byte_size(&spec.shape))
}

/// The layout an output really has: a 4-D output made by a `Transpose` with perm
/// `[0, 2, 3, 1]` (possibly followed by element-wise ops or Q/DQ) is NHWC.
pub fn output_layout(g: &Graph, v: ValueId, default: IoLayout) -> IoLayout {
    if default == IoLayout::None {
        return default;
    }
    let producers = g.producers();
    let mut cur = v;
    for _ in 0..g.nodes.len() {
        let Some(n) = producers[cur].map(|p| &g.nodes[p]) else {
            break;
        };
        match &n.op {
            Op::Transpose { perm: Some(p) } if p == &[0, 2, 3, 1] => return IoLayout::Nhwc,
            Op::Transpose { perm: Some(p) } if p == &[0, 3, 1, 2] => return IoLayout::Nchw,
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::QuantizeLinear { .. }
            | Op::DequantizeLinear { .. } => match n.inputs.first().copied().flatten() {
                Some(i) => cur = i,
                None => break,
            },
            _ => break,
        }
    }
    default
}

/// The channel axis of a layout (`None` when the output has no channel axis).
fn channel_axis(layout: IoLayout, rank: usize) -> Option<usize> {
    match (layout, rank) {
        (IoLayout::Nhwc, 4) => Some(3),
        (IoLayout::Nchw, 4) => Some(1),
        _ => None,
    }
}

/// Scales and zero points the graph itself gives an output, with their axis (`None` =
/// per tensor).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphScale {
    /// Scales (one, or one per index of `axis`).
    pub scale: Vec<f32>,
    /// Zero points in the signed domain (empty = symmetric).
    pub zero_point: Vec<i32>,
    /// Axis of per-channel scales.
    pub axis: Option<usize>,
}

/// The scale, zero point and axis of a `DequantizeLinear` node (zero points moved to
/// the signed domain: a u8 tensor is read as `u - 128`).
fn dq_scale(g: &Graph, n: &Node) -> Option<GraphScale> {
    let Op::DequantizeLinear { axis } = n.op else {
        return None;
    };
    let x = n.inputs.first().copied().flatten()?;
    let scale = g.const_input(n, 1)?.to_f32_vec();
    let shift = if g.values[x].dtype == DType::U8 {
        128
    } else {
        0
    };
    let zero_point = match g.const_input(n, 2) {
        Some(z) => z
            .to_i64_vec()?
            .iter()
            .map(|&z| (z - shift) as i32)
            .collect(),
        None => vec![-shift as i32; scale.len()],
    };
    Some(GraphScale {
        axis: if scale.len() > 1 { axis } else { None },
        scale,
        zero_point,
    })
}

/// The per-channel accumulator scale `x_scale * w_scale[c]` of a Conv / Gemm / MatMul
/// whose input and weight are DequantizeLinear outputs (int8 in, float out), along its
/// output channel axis; the epilogue may only clamp (Relu / Clip keep the scale).
fn accumulator_scale(g: &Graph, n: &Node, producers: &[Option<usize>]) -> Option<GraphScale> {
    use crate::ir::{PostOp, UnaryOp};
    let post = n.op.post_ops()?;
    let (w_axis, out_axis) = match &n.op {
        Op::Conv { .. } => (0, 1),
        Op::Gemm { trans_b, .. } => (usize::from(!*trans_b), 1),
        Op::MatMul { .. } => (1, g.shape(n.outputs[0])?.len().checked_sub(1)?),
        _ => return None,
    };
    let clamp_only = post.iter().all(|p| {
        matches!(
            p,
            PostOp::Unary(UnaryOp::Relu) | PostOp::Unary(UnaryOp::Clip { .. })
        )
    });
    if !clamp_only {
        return None;
    }
    let dq_of = |i: usize| -> Option<GraphScale> {
        let v = n.inputs.get(i).copied().flatten()?;
        dq_scale(g, &g.nodes[producers[v]?])
    };
    let x = dq_of(0)?;
    let w = dq_of(1)?;
    if x.scale.len() != 1 {
        return None;
    }
    if w.scale.len() > 1 && w.axis != Some(w_axis) {
        return None;
    }
    Some(GraphScale {
        scale: w.scale.iter().map(|&s| s * x.scale[0]).collect(),
        zero_point: vec![],
        axis: (w.scale.len() > 1).then_some(out_axis),
    })
}

/// The scale the graph gives output value `v`: walking back through ops that keep
/// quantised values exact (Identity, Relu, Transpose — which moves the axis — and, for a
/// per-tensor scale, reshapes) to a `DequantizeLinear`, or for S32 to an int8 Conv /
/// Gemm / MatMul's accumulator.
fn graph_scale(g: &Graph, v: ValueId, qtype: QType) -> Option<GraphScale> {
    use crate::ir::UnaryOp;
    let producers = g.producers();
    let mut cur = v;
    // Axis moves of the Transposes passed on the way back, outermost last.
    let mut perms: Vec<Vec<usize>> = Vec::new();
    let mut reshaped = false;
    let found = loop {
        let n = &g.nodes[producers[cur]?];
        match &n.op {
            Op::DequantizeLinear { .. } => break dq_scale(g, n)?,
            Op::Conv { .. } | Op::Gemm { .. } | Op::MatMul { .. } if qtype == QType::S32 => {
                break accumulator_scale(g, n, &producers)?
            }
            Op::Unary(UnaryOp::Identity) | Op::Unary(UnaryOp::Relu) => {}
            Op::Transpose { perm: Some(p) } => perms.push(p.clone()),
            Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                reshaped = true
            }
            _ => return None,
        }
        cur = n.inputs.first().copied().flatten()?;
    };
    let mut axis = found.axis;
    if let Some(mut a) = axis {
        if reshaped {
            return None;
        }
        for p in perms.iter().rev() {
            a = p.iter().position(|&q| q == a)?;
        }
        axis = Some(a);
    }
    Some(GraphScale { axis, ..found })
}

/// For each graph output, the scale the graph gives it (see [`graph_scale`]) when the
/// options declare it quantised. Computed before the constant weights' DequantizeLinear
/// nodes are folded away (the accumulator scale needs them).
pub fn graph_output_scales(g: &Graph, opts: &CompileOptions) -> Vec<Option<GraphScale>> {
    g.outputs
        .iter()
        .map(|&v| {
            let p = requested(&opts.outputs, &g.values[v].name)?;
            graph_scale(g, v, qtype_of(p.output_type)?)
        })
        .collect()
}

/// Per output: the max-abs per index of its axis, for the outputs calibration was asked
/// about.
pub type CalibrationRanges = Vec<Option<Vec<f32>>>;

/// Calibrates a compiled model's outputs along the axes asked (`None` = not needed).
pub type Calibrate<'a> = dyn Fn(&CompiledModel, &[Option<usize>]) -> Result<CalibrationRanges> + 'a;

/// Runs graph `g` on the samples and collects, for each output `i` with `axes[i]` =
/// `Some(axis)`, the max-abs per index of `axis` (one value when the output has no such
/// axis). Each sample holds one native-endian byte buffer per graph input.
pub fn collect_output_ranges(
    g: &Graph,
    axes: &[Option<usize>],
    samples: &[Vec<Vec<u8>>],
) -> Result<CalibrationRanges> {
    let plan =
        crate::exec::ModelPlan::new(Arc::new(g.clone()), &crate::exec::PlanOptions::default())?;
    let mut st = plan.new_state();
    let shape = |i: usize| g.values[g.outputs[i]].shape.clone().unwrap_or_default();
    let mut ranges: CalibrationRanges = axes
        .iter()
        .enumerate()
        .map(|(i, a)| a.map(|a| vec![0f32; shape(i).get(a).copied().unwrap_or(1)]))
        .collect();
    let bad = |reason: String| Error::CompileOption {
        option: "calibration_data".into(),
        reason,
    };
    for (k, sample) in samples.iter().enumerate() {
        if sample.len() != g.inputs.len() {
            return Err(bad(format!(
                "sample {k} has {} inputs, model '{}' takes {}",
                sample.len(),
                g.name,
                g.inputs.len()
            )));
        }
        for (i, bytes) in sample.iter().enumerate() {
            plan.set_input(&mut st, i, bytes).map_err(|e| {
                bad(format!(
                    "sample {k}, input '{}': {e}",
                    g.values[g.inputs[i]].name
                ))
            })?;
        }
        for n in 0..g.nodes.len() {
            plan.run_node(&mut st, n, crate::exec::Tile::WHOLE)?;
        }
        for (i, r) in ranges.iter_mut().enumerate() {
            let (Some(r), Some(axis)) = (r.as_mut(), axes[i]) else {
                continue;
            };
            if g.values[g.outputs[i]].dtype != DType::F32 {
                continue;
            }
            let bytes = plan.output_bytes(&st, i).unwrap_or_default();
            let inner: usize = shape(i).get(axis + 1..).map_or(1, |s| s.iter().product());
            let c_n = r.len();
            for (j, c) in bytes.chunks_exact(4).enumerate() {
                let x = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]).abs();
                let ch = if c_n > 1 { (j / inner.max(1)) % c_n } else { 0 };
                if x.is_finite() && x > r[ch] {
                    r[ch] = x;
                }
            }
        }
    }
    Ok(ranges)
}

/// The integer the calibrated max-abs maps to. S8 and S16 use their whole range; S32
/// uses 2^24 — the precision of the f32 values it comes from — which leaves 128×
/// headroom above the calibrated range instead of saturating on values slightly larger
/// than the samples gave (calibration runs the unfused float graph, whose results differ
/// from the compiled model's in the last bits).
fn calibrated_qmax(t: QType) -> f64 {
    match t {
        QType::S32 => (1u32 << 24) as f64,
        _ => t.max() as f64,
    }
}

/// The requested type of output `name` (the last matching entry wins; `all` matches
/// every output).
fn requested<'a>(params: &'a [OutputParams], name: &str) -> Option<&'a OutputParams> {
    params
        .iter()
        .rev()
        .find(|p| p.name == name || p.name == ALL_OUTPUTS)
}

fn qtype_of(t: OutputType) -> Option<QType> {
    match t {
        OutputType::F32 => None,
        OutputType::S8 => Some(QType::S8),
        OutputType::S16 => Some(QType::S16),
        OutputType::S32 => Some(QType::S32),
    }
}

fn option_err(reason: String) -> Error {
    Error::CompileOption {
        option: "output_type".into(),
        reason,
    }
}

/// Sets the real layout of every output and the [`OutputQuant`] of every output
/// declared quantised. `calibrate` runs the model over the calibration samples (when
/// the options name some) and returns the max-abs ranges for the axes asked.
pub fn assign_output_types(
    m: &mut CompiledModel,
    opts: &CompileOptions,
    graph_scales: &[Option<GraphScale>],
    calibrate: Option<&Calibrate>,
) -> Result<()> {
    for p in &opts.outputs {
        if p.name != ALL_OUTPUTS && !m.outputs.iter().any(|o| o.name == p.name) {
            return Err(option_err(format!(
                "model '{}' has no output '{}' (outputs: {})",
                m.name,
                p.name,
                m.outputs
                    .iter()
                    .map(|o| o.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    for o in m.outputs.iter_mut() {
        o.layout = output_layout(&m.graph, o.value, o.layout);
    }
    // What each quantised output needs: type, axis, and a graph scale when there is one.
    let mut plan: Vec<Option<(QType, usize, Option<GraphScale>)>> = Vec::new();
    for (i, o) in m.outputs.iter().enumerate() {
        let Some(p) = requested(&opts.outputs, &o.name) else {
            plan.push(None);
            continue;
        };
        let Some(qtype) = qtype_of(p.output_type) else {
            plan.push(None);
            continue;
        };
        if o.dtype != DType::F32 {
            if p.name == ALL_OUTPUTS {
                plan.push(None);
                continue;
            }
            return Err(option_err(format!(
                "output '{}' is {}, not f32: only float outputs can be quantised",
                o.name,
                o.dtype.name()
            )));
        }
        let gs = graph_scales.get(i).cloned().flatten();
        let axis = p
            .axis
            .or(gs.as_ref().and_then(|g| g.axis))
            .or(channel_axis(o.layout, o.shape.len()))
            .unwrap_or(0);
        if axis >= o.shape.len().max(1) {
            return Err(option_err(format!(
                "quantize axis {axis} is outside output '{}' of shape {:?}",
                o.name, o.shape
            )));
        }
        plan.push(Some((qtype, axis, gs)));
    }
    let need_calib: Vec<Option<usize>> = plan
        .iter()
        .map(|e| match e {
            Some((_, axis, None)) => Some(*axis),
            _ => None,
        })
        .collect();
    let ranges = if need_calib.iter().any(Option::is_some) {
        let Some(cal) = calibrate else {
            let missing: Vec<&str> = need_calib
                .iter()
                .zip(&m.outputs)
                .filter(|(a, _)| a.is_some())
                .map(|(_, o)| o.name.as_str())
                .collect();
            return Err(option_err(format!(
                "output(s) {} of model '{}' are declared quantised but have no scale: they \
                 are not made by a DequantizeLinear, and no calibration data was given \
                 (--calibration-data DIR, or calibration_parameters.cal_data_dir)",
                missing.join(", "),
                m.name
            )));
        };
        cal(m, &need_calib)?
    } else {
        vec![None; m.outputs.len()]
    };
    for (i, e) in plan.into_iter().enumerate() {
        let Some((qtype, axis, gs)) = e else {
            continue;
        };
        let o = &m.outputs[i];
        let channels = o.shape.get(axis).copied().unwrap_or(1);
        let per_channel = |v: Vec<f32>| -> Vec<f32> {
            if v.len() == 1 && channel_axis(o.layout, o.shape.len()) == Some(axis) {
                vec![v[0]; channels]
            } else {
                v
            }
        };
        let (scale, zero_point) = match gs {
            Some(g) => {
                let zp = g
                    .zero_point
                    .iter()
                    .map(|&z| {
                        i8::try_from(z).map_err(|_| {
                            option_err(format!(
                                "output '{}': zero point {z} does not fit the int8 \
                                 zeroPointData of hbDNN",
                                o.name
                            ))
                        })
                    })
                    .collect::<Result<Vec<i8>>>()?;
                let zp = if zp.iter().all(|&z| z == 0) {
                    vec![]
                } else if zp.len() == 1 && g.scale.len() == 1 {
                    vec![zp[0]; per_channel(g.scale.clone()).len()]
                } else {
                    zp
                };
                (per_channel(g.scale), zp)
            }
            None => {
                let r = ranges.get(i).cloned().flatten().ok_or_else(|| {
                    option_err(format!("output '{}': calibration gave no range", o.name))
                })?;
                let qmax = calibrated_qmax(qtype);
                let s = r
                    .iter()
                    .map(|&a| {
                        if a > 0.0 {
                            (a as f64 / qmax) as f32
                        } else {
                            1.0
                        }
                    })
                    .map(|s| if s > 0.0 { s } else { f32::MIN_POSITIVE })
                    .collect();
                (per_channel(s), vec![])
            }
        };
        let q = OutputQuant {
            qtype,
            axis,
            scale,
            zero_point,
        };
        q.check(&o.shape)
            .map_err(|e| option_err(format!("output '{}': {e}", o.name)))?;
        let o = &mut m.outputs[i];
        o.quant = Some(q);
    }
    Ok(())
}

/// Makes the inputs named in `opts.signed_inputs` take signed bytes: the graph input
/// becomes i8 and `Cast(f32) → Add(128) [→ Cast(u8)]` restores what the model took
/// before. Runs after the image conversions were inserted (`specs` are their boundary
/// descriptions, updated here).
pub fn insert_signed_inputs(
    g: &mut Graph,
    specs: &mut [IoSpec],
    opts: &CompileOptions,
) -> Result<()> {
    let bad = |reason: String| Error::CompileOption {
        option: "input_data_type".into(),
        reason,
    };
    let mut new_nodes = Vec::new();
    for want in &opts.signed_inputs {
        let k = if want.is_empty() && specs.len() == 1 {
            0
        } else {
            specs.iter().position(|s| &s.name == want).ok_or_else(|| {
                bad(format!(
                    "model has no input '{want}' (inputs: {})",
                    specs
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?
        };
        let spec = &mut specs[k];
        if spec.dtype == DType::I8 {
            continue;
        }
        match spec.kind {
            IoKind::Image(ImageFormat::Nv12) => {
                return Err(bad(format!(
                    "input '{}' is nv12, which stays unsigned (as on the board); s8 is for \
                     rgb, bgr, yuv444, gray and featuremap inputs",
                    spec.name
                )))
            }
            IoKind::Image(_) if spec.dtype == DType::U8 => {}
            IoKind::Tensor if spec.dtype == DType::F32 => {}
            _ => {
                return Err(bad(format!(
                    "input '{}' is a {} tensor; s8 applies to image and f32 feature-map inputs",
                    spec.name,
                    spec.dtype.name()
                )))
            }
        }
        let old = spec.value;
        let (old_dtype, shape) = (g.values[old].dtype, g.values[old].shape.clone());
        let numel: usize = shape.as_deref().map_or(0, |s| s.iter().product());
        let name = g.values[old].name.clone();
        let value = |g: &mut Graph, suffix: &str, dtype: DType| {
            g.add_value(Value {
                name: format!("{name}__s8{suffix}"),
                dtype,
                shape: shape.clone(),
                declared: None,
                konst: None,
            })
        };
        let raw = value(g, "", DType::I8);
        g.values[raw].name = name.clone();
        g.values[old].name = format!("{name}__unsigned");
        let as_f32 = value(g, "_f32", DType::F32);
        let offset = g.add_const(
            format!("{name}__s8_offset"),
            Tensor::from_f32(vec![], vec![128.0]),
        );
        let node = |name: String, op: Op, inputs: Vec<ValueId>, out: ValueId| Node {
            name,
            op,
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![out],
            absorbed: vec![],
            placement: None,
        };
        new_nodes.push(node(
            format!("{name}__s8_cast"),
            Op::Cast { to: DType::F32 },
            vec![raw],
            as_f32,
        ));
        if old_dtype == DType::U8 {
            let shifted = value(g, "_shifted", DType::F32);
            new_nodes.push(node(
                format!("{name}__s8_offset"),
                Op::Binary(BinaryOp::Add),
                vec![as_f32, offset],
                shifted,
            ));
            new_nodes.push(node(
                format!("{name}__s8_to_u8"),
                Op::Cast { to: DType::U8 },
                vec![shifted],
                old,
            ));
        } else {
            new_nodes.push(node(
                format!("{name}__s8_offset"),
                Op::Binary(BinaryOp::Add),
                vec![as_f32, offset],
                old,
            ));
        }
        for gi in g.inputs.iter_mut().filter(|v| **v == old) {
            *gi = raw;
        }
        spec.value = raw;
        spec.dtype = DType::I8;
        spec.byte_size = numel;
    }
    new_nodes.append(&mut g.nodes);
    g.nodes = new_nodes;
    Ok(())
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;

//! Operators as file records: each IR [`Op`] becomes an op type name plus named, typed
//! attributes ([`AttrRecord`]) and back, one file per op family.
//!
//! The op type names and attribute names written here are part of the file format:
//! never rename one; a new op gets a new name. Registration: [`encode_op`] is an
//! exhaustive `match` that sends each op to its family (a new IR op does not compile
//! until it is registered there), and [`FAMILIES`] lists each family's decoder.

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

pub(super) use image::{image_format_from_name, image_format_name};

use super::schema::{AttrRecord, InlineTensorRecord, PostOpRecord};
use crate::ir::{ConvGeom, DType, Op, PostOp, Tensor};

/// A family's decoder: `None` when the op type name is not one of the family's.
type Decoder = fn(&str, &AttrsIn) -> Option<Result<Op, String>>;

/// Every family's decoder (the registration point for decoding).
const FAMILIES: &[(&str, Decoder)] = &[
    ("conv", conv::decode),
    ("gemm", gemm::decode),
    ("elementwise", elementwise::decode),
    ("norm", norm::decode),
    ("pool", pool::decode),
    ("reduce", reduce::decode),
    ("layout", layout::decode),
    ("index", index::decode),
    ("generate", generate::decode),
    ("resize", resize::decode),
    ("rnn", rnn::decode),
    ("image", image::decode),
    ("quant", quant::decode),
    #[cfg(feature = "test-ops")]
    ("testing", testing::decode),
];

/// The record form of an op: its type name and attributes.
pub(super) fn encode_op(op: &Op) -> Result<(String, Vec<AttrRecord>), String> {
    let mut a = AttrsOut::default();
    // Exhaustive on purpose: the registration point for encoding.
    #[allow(unreachable_patterns)]
    let name = match op {
        Op::Conv { .. }
        | Op::ConvNhwc { .. }
        | Op::ExpandConvNhwc { .. }
        | Op::DwProjectNhwc { .. }
        | Op::ConvTranspose { .. } => conv::encode(op, &mut a),
        Op::Gemm { .. } | Op::MatMul { .. } | Op::Attention => gemm::encode(op, &mut a),
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::ClipDynamic | Op::Cast { .. } => {
            elementwise::encode(op, &mut a)
        }
        Op::BatchNorm { .. }
        | Op::InstanceNorm { .. }
        | Op::LayerNorm { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::MaskedSoftmax => norm::encode(op, &mut a),
        Op::MaxPool { .. }
        | Op::MaxPoolNhwc { .. }
        | Op::AveragePool { .. }
        | Op::GlobalAveragePool
        | Op::GlobalMaxPool => pool::encode(op, &mut a),
        Op::Reduce { .. } | Op::ArgMax { .. } | Op::ArgMin { .. } | Op::CumSum { .. } => {
            reduce::encode(op, &mut a)
        }
        Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Transpose { .. }
        | Op::Pad { .. }
        | Op::Expand
        | Op::Tile
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. } => layout::encode(op, &mut a),
        Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::TopK { .. }
        | Op::NonMaxSuppression { .. } => index::encode(op, &mut a),
        Op::Shape { .. } | Op::ConstantOfShape { .. } | Op::Range => generate::encode(op, &mut a),
        Op::Resize { .. } => resize::encode(op, &mut a),
        Op::Lstm { .. } | Op::Gru { .. } => rnn::encode(op, &mut a),
        Op::Preprocess { .. } => image::encode(op, &mut a),
        Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. }
        | Op::QConv { .. }
        | Op::QGemm { .. }
        | Op::QAdd { .. }
        | Op::QRequant { .. }
        | Op::QMaxPool { .. }
        | Op::QLut { .. }
        | Op::QMul { .. }
        | Op::QSoftmax { .. }
        | Op::QAvgPool { .. }
        | Op::QGlobalAvgPool { .. }
        | Op::QResize { .. } => quant::encode(op, &mut a),
        #[cfg(feature = "test-ops")]
        Op::Spin { .. } | Op::Fail { .. } => testing::encode(op, &mut a),
        // Test-only ops exist in the IR of a build without `test-ops` only while the IR
        // does not gate them itself; such a build cannot write them.
        _ => None,
    };
    let name = name.ok_or_else(|| format!("operator {} has no file record", op.name()))?;
    Ok((name.to_string(), a.0))
}

/// The op of a record; an unknown op type or a bad attribute is an error.
pub(super) fn decode_op(op_type: &str, attrs: &[AttrRecord]) -> Result<Op, String> {
    let a = AttrsIn { op: op_type, attrs };
    for (_, decode) in FAMILIES {
        if let Some(r) = decode(op_type, &a) {
            return r;
        }
    }
    Err(format!("unknown operator type '{op_type}'"))
}

/// Attributes being written for one op.
#[derive(Default)]
pub(super) struct AttrsOut(pub(super) Vec<AttrRecord>);

impl AttrsOut {
    fn push(&mut self, name: &str, f: impl FnOnce(&mut AttrRecord)) {
        let mut r = AttrRecord {
            name: name.to_string(),
            ..Default::default()
        };
        f(&mut r);
        self.0.push(r);
    }

    /// An integer.
    pub(super) fn int(&mut self, name: &str, v: i64) {
        self.push(name, |r| r.i = v);
    }

    /// A count or size.
    pub(super) fn usize(&mut self, name: &str, v: usize) {
        self.int(name, v as i64);
    }

    /// A boolean (0/1).
    pub(super) fn bool(&mut self, name: &str, v: bool) {
        self.int(name, i64::from(v));
    }

    /// A float.
    pub(super) fn float(&mut self, name: &str, v: f32) {
        self.push(name, |r| r.f = v);
    }

    /// A string.
    pub(super) fn string(&mut self, name: &str, v: &str) {
        self.push(name, |r| r.s = v.to_string());
    }

    /// An integer list.
    pub(super) fn ints(&mut self, name: &str, v: &[i64]) {
        self.push(name, |r| r.ints = v.to_vec());
    }

    /// A list of counts or sizes.
    pub(super) fn usizes(&mut self, name: &str, v: &[usize]) {
        self.push(name, |r| r.ints = v.iter().map(|&x| x as i64).collect());
    }

    /// A float list.
    pub(super) fn floats(&mut self, name: &str, v: &[f32]) {
        self.push(name, |r| r.floats = v.to_vec());
    }

    /// A small tensor, inline.
    pub(super) fn tensor(&mut self, name: &str, t: &Tensor) {
        self.push(name, |r| {
            r.tensor = Some(InlineTensorRecord {
                dtype: t.dtype().onnx_code(),
                shape: t.shape.iter().map(|&d| d as u64).collect(),
                raw: le_bytes(t),
            })
        });
    }

    /// A fused epilogue.
    pub(super) fn post(&mut self, name: &str, post: &[PostOp]) {
        let recs = post.iter().map(encode_post).collect();
        self.push(name, |r| r.post = recs);
    }

    /// Convolution / pooling geometry.
    pub(super) fn geom(&mut self, g: &ConvGeom) {
        self.usizes("kernel_shape", &g.kernel);
        self.usizes("strides", &g.strides);
        self.usizes("dilations", &g.dilations);
        self.usizes("pads", &g.pads);
        if let Some(p) = &g.auto_pad {
            self.string("auto_pad", p);
        }
    }
}

/// The attributes of one op record being read.
pub(super) struct AttrsIn<'a> {
    op: &'a str,
    attrs: &'a [AttrRecord],
}

impl AttrsIn<'_> {
    /// The attribute, if present.
    pub(super) fn get(&self, name: &str) -> Option<&AttrRecord> {
        self.attrs.iter().find(|a| a.name == name)
    }

    fn req(&self, name: &str) -> Result<&AttrRecord, String> {
        self.get(name)
            .ok_or_else(|| format!("{}: attribute '{name}' is missing", self.op))
    }

    fn bad(&self, name: &str, what: &str) -> String {
        format!("{}: attribute '{name}' {what}", self.op)
    }

    /// An integer.
    pub(super) fn int(&self, name: &str) -> Result<i64, String> {
        Ok(self.req(name)?.i)
    }

    /// An integer, if present.
    pub(super) fn opt_int(&self, name: &str) -> Option<i64> {
        self.get(name).map(|a| a.i)
    }

    /// A count or size (non-negative).
    pub(super) fn usize(&self, name: &str) -> Result<usize, String> {
        usize::try_from(self.int(name)?).map_err(|_| self.bad(name, "is negative"))
    }

    /// A boolean (0 or 1).
    pub(super) fn bool(&self, name: &str) -> Result<bool, String> {
        match self.int(name)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.bad(name, "is not 0 or 1")),
        }
    }

    /// A float.
    pub(super) fn float(&self, name: &str) -> Result<f32, String> {
        Ok(self.req(name)?.f)
    }

    /// A string.
    pub(super) fn string(&self, name: &str) -> Result<&str, String> {
        Ok(&self.req(name)?.s)
    }

    /// An integer list, if present.
    pub(super) fn opt_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }

    /// A list of counts or sizes.
    pub(super) fn usizes(&self, name: &str) -> Result<Vec<usize>, String> {
        self.req(name)?
            .ints
            .iter()
            .map(|&x| usize::try_from(x).map_err(|_| self.bad(name, "has a negative entry")))
            .collect()
    }

    /// A float list.
    pub(super) fn floats(&self, name: &str) -> Result<Vec<f32>, String> {
        Ok(self.req(name)?.floats.clone())
    }

    /// An element type.
    pub(super) fn dtype(&self, name: &str) -> Result<DType, String> {
        let code = i32::try_from(self.int(name)?).map_err(|_| self.bad(name, "is out of range"))?;
        DType::from_onnx_code(code).ok_or_else(|| self.bad(name, "is not a supported type"))
    }

    /// A small inline tensor.
    pub(super) fn tensor(&self, name: &str) -> Result<Tensor, String> {
        let t = self.req(name)?.tensor.as_ref();
        let t = t.ok_or_else(|| self.bad(name, "holds no tensor"))?;
        let dtype =
            DType::from_onnx_code(t.dtype).ok_or_else(|| self.bad(name, "has a bad type"))?;
        let shape = to_usizes(&t.shape).ok_or_else(|| self.bad(name, "has a bad shape"))?;
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if numel.and_then(|n| n.checked_mul(dtype.size())) != Some(t.raw.len()) {
            return Err(self.bad(name, "has a size that does not match its shape"));
        }
        Ok(Tensor::from_le_bytes(dtype, shape, &t.raw))
    }

    /// A fused epilogue.
    pub(super) fn post(&self, name: &str) -> Result<Vec<PostOp>, String> {
        self.req(name)?.post.iter().map(decode_post).collect()
    }

    /// Convolution / pooling geometry.
    pub(super) fn geom(&self) -> Result<ConvGeom, String> {
        Ok(ConvGeom {
            kernel: self.usizes("kernel_shape")?,
            strides: self.usizes("strides")?,
            dilations: self.usizes("dilations")?,
            pads: self.usizes("pads")?,
            auto_pad: self.get("auto_pad").map(|a| a.s.clone()),
        })
    }
}

/// Dimensions from the file, each fitting `usize`.
pub(super) fn to_usizes(v: &[u64]) -> Option<Vec<usize>> {
    v.iter().map(|&d| usize::try_from(d).ok()).collect()
}

/// The elements of a tensor as little-endian bytes.
fn le_bytes(t: &Tensor) -> Vec<u8> {
    let b = t.bytes();
    if cfg!(target_endian = "little") {
        return b.to_vec();
    }
    let w = t.dtype().size();
    b.chunks_exact(w)
        .flat_map(|c| c.iter().rev().copied())
        .collect()
}

fn encode_post(p: &PostOp) -> PostOpRecord {
    let mut a = AttrsOut::default();
    let name = match p {
        PostOp::Unary(u) => elementwise::encode_unary(u, &mut a),
        PostOp::ChannelAffine { scale, shift } => {
            a.floats("scale", scale);
            a.floats("shift", shift);
            "ChannelAffine"
        }
        PostOp::ChannelPRelu { slope } => {
            a.floats("slope", slope);
            "ChannelPRelu"
        }
        PostOp::AddInput { input } => {
            a.usize("input", *input);
            "AddInput"
        }
    };
    PostOpRecord {
        op_type: name.to_string(),
        attrs: a.0,
    }
}

fn decode_post(r: &PostOpRecord) -> Result<PostOp, String> {
    let a = AttrsIn {
        op: &r.op_type,
        attrs: &r.attrs,
    };
    Ok(match r.op_type.as_str() {
        "ChannelAffine" => PostOp::ChannelAffine {
            scale: a.floats("scale")?,
            shift: a.floats("shift")?,
        },
        "ChannelPRelu" => PostOp::ChannelPRelu {
            slope: a.floats("slope")?,
        },
        "AddInput" => PostOp::AddInput {
            input: a.usize("input")?,
        },
        other => match elementwise::decode_unary(other, &a) {
            Some(u) => PostOp::Unary(u?),
            None => return Err(format!("unknown epilogue step '{other}'")),
        },
    })
}

#[cfg(test)]
mod tests;

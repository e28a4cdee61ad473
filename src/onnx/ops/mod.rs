//! The op importers, one file per op family (the family names every layer uses), and
//! the one registration table, [`REGISTRY`], that maps `(domain, op_type)` to the
//! function importing it.
//!
//! Adding an operator: its import function in its family file, plus one line in
//! [`REGISTRY`]. An import function gets the node as a [`NodeCx`], reads and validates
//! its attributes, and adds one IR node (or a short chain) through the importer's
//! node-building API (`Importer::emit`, `check` + `add`, `push`, `temp`, `add_const`).
//!
//! Invariants: every attribute a function does not read or explicitly ignore is rejected
//! by `Attrs::finish` (called by `Importer::check`); a function never panics on any
//! input; a node name or value name it makes up comes from `Importer::fresh`/`temp`.

mod conv;
mod elementwise;
mod gemm;
mod generate;
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

use std::collections::HashMap;
use std::sync::OnceLock;

use super::attrs::Attrs;
use super::import::Importer;
use super::proto::NodeProto;
use crate::ir::{BinaryOp, ReduceOp, UnaryOp, ValueId};
use crate::Result;

/// One ONNX node on its way into the graph: what an import function receives.
pub(super) struct NodeCx<'c> {
    /// The node as written in the file.
    pub(super) n: &'c NodeProto,
    /// Its unique name in the imported graph.
    pub(super) name: &'c str,
    /// Its attributes.
    pub(super) a: Attrs<'c>,
    /// Its inputs (`None` for an omitted optional input).
    pub(super) ins: Vec<Option<ValueId>>,
}

impl NodeCx<'_> {
    /// The node's `op_type`.
    pub(super) fn op_type(&self) -> &str {
        &self.n.op_type
    }

    /// Input `i` when present.
    pub(super) fn input(&self, i: usize) -> Option<ValueId> {
        self.ins.get(i).copied().flatten()
    }
}

/// Imports one node into the graph.
pub(super) type ImportFn = fn(&mut Importer<'_>, NodeCx<'_>) -> Result<()>;

/// The default ONNX domain (also spelled `ai.onnx`).
const ONNX: &str = "";

/// Every operator vnpu imports: `(domain, op_type, import function)`.
#[rustfmt::skip]
static REGISTRY: &[(&str, &str, ImportFn)] = &[
    // conv
    (ONNX, "Conv", conv::conv),
    (ONNX, "ConvTranspose", conv::conv_transpose),
    // gemm
    (ONNX, "Gemm", gemm::gemm),
    (ONNX, "MatMul", gemm::matmul),
    // elementwise: unary
    (ONNX, "Relu", |i, c| elementwise::unary(i, c, UnaryOp::Relu)),
    (ONNX, "Sigmoid", |i, c| elementwise::unary(i, c, UnaryOp::Sigmoid)),
    (ONNX, "HardSwish", |i, c| elementwise::unary(i, c, UnaryOp::HardSwish)),
    (ONNX, "Tanh", |i, c| elementwise::unary(i, c, UnaryOp::Tanh)),
    (ONNX, "Erf", |i, c| elementwise::unary(i, c, UnaryOp::Erf)),
    (ONNX, "Softplus", |i, c| elementwise::unary(i, c, UnaryOp::Softplus)),
    (ONNX, "Exp", |i, c| elementwise::unary(i, c, UnaryOp::Exp)),
    (ONNX, "Log", |i, c| elementwise::unary(i, c, UnaryOp::Log)),
    (ONNX, "Abs", |i, c| elementwise::unary(i, c, UnaryOp::Abs)),
    (ONNX, "Neg", |i, c| elementwise::unary(i, c, UnaryOp::Neg)),
    (ONNX, "Sqrt", |i, c| elementwise::unary(i, c, UnaryOp::Sqrt)),
    (ONNX, "Reciprocal", |i, c| elementwise::unary(i, c, UnaryOp::Reciprocal)),
    (ONNX, "Floor", |i, c| elementwise::unary(i, c, UnaryOp::Floor)),
    (ONNX, "Ceil", |i, c| elementwise::unary(i, c, UnaryOp::Ceil)),
    (ONNX, "Round", |i, c| elementwise::unary(i, c, UnaryOp::Round)),
    (ONNX, "Sign", |i, c| elementwise::unary(i, c, UnaryOp::Sign)),
    (ONNX, "Not", |i, c| elementwise::unary(i, c, UnaryOp::Not)),
    (ONNX, "Sin", |i, c| elementwise::unary(i, c, UnaryOp::Sin)),
    (ONNX, "Cos", |i, c| elementwise::unary(i, c, UnaryOp::Cos)),
    (ONNX, "Identity", |i, c| elementwise::unary(i, c, UnaryOp::Identity)),
    (ONNX, "LeakyRelu", elementwise::leaky_relu),
    (ONNX, "Elu", elementwise::elu),
    (ONNX, "Selu", elementwise::selu),
    (ONNX, "HardSigmoid", elementwise::hard_sigmoid),
    (ONNX, "Gelu", elementwise::gelu),
    (ONNX, "Clip", elementwise::clip),
    (ONNX, "Dropout", elementwise::dropout),
    // elementwise: binary
    (ONNX, "Add", |i, c| elementwise::binary(i, c, BinaryOp::Add)),
    (ONNX, "Sub", |i, c| elementwise::binary(i, c, BinaryOp::Sub)),
    (ONNX, "Mul", |i, c| elementwise::binary(i, c, BinaryOp::Mul)),
    (ONNX, "Div", |i, c| elementwise::binary(i, c, BinaryOp::Div)),
    (ONNX, "Pow", |i, c| elementwise::binary(i, c, BinaryOp::Pow)),
    (ONNX, "Equal", |i, c| elementwise::binary(i, c, BinaryOp::Equal)),
    (ONNX, "Less", |i, c| elementwise::binary(i, c, BinaryOp::Less)),
    (ONNX, "LessOrEqual", |i, c| elementwise::binary(i, c, BinaryOp::LessOrEqual)),
    (ONNX, "Greater", |i, c| elementwise::binary(i, c, BinaryOp::Greater)),
    (ONNX, "GreaterOrEqual", |i, c| elementwise::binary(i, c, BinaryOp::GreaterOrEqual)),
    (ONNX, "And", |i, c| elementwise::binary(i, c, BinaryOp::And)),
    (ONNX, "Or", |i, c| elementwise::binary(i, c, BinaryOp::Or)),
    (ONNX, "Xor", |i, c| elementwise::binary(i, c, BinaryOp::Xor)),
    (ONNX, "PRelu", |i, c| elementwise::binary(i, c, BinaryOp::PRelu)),
    (ONNX, "Mod", elementwise::modulo),
    (ONNX, "Sum", |i, c| elementwise::variadic(i, c, BinaryOp::Add, false)),
    (ONNX, "Mean", |i, c| elementwise::variadic(i, c, BinaryOp::Add, true)),
    (ONNX, "Max", |i, c| elementwise::variadic(i, c, BinaryOp::Max, false)),
    (ONNX, "Min", |i, c| elementwise::variadic(i, c, BinaryOp::Min, false)),
    // elementwise: other
    (ONNX, "Where", elementwise::where_),
    (ONNX, "Cast", elementwise::cast),
    (ONNX, "CastLike", elementwise::cast_like),
    // norm
    (ONNX, "BatchNormalization", norm::batch_norm),
    (ONNX, "InstanceNormalization", norm::instance_norm),
    (ONNX, "LayerNormalization", norm::layer_norm),
    (ONNX, "Softmax", |i, c| norm::softmax(i, c, false)),
    (ONNX, "LogSoftmax", |i, c| norm::softmax(i, c, true)),
    // pool
    (ONNX, "MaxPool", pool::max_pool),
    (ONNX, "AveragePool", pool::average_pool),
    (ONNX, "GlobalAveragePool", pool::global_average_pool),
    (ONNX, "GlobalMaxPool", pool::global_max_pool),
    // reduce
    (ONNX, "ReduceMean", |i, c| reduce::reduce(i, c, ReduceOp::Mean)),
    (ONNX, "ReduceSum", |i, c| reduce::reduce(i, c, ReduceOp::Sum)),
    (ONNX, "ReduceMax", |i, c| reduce::reduce(i, c, ReduceOp::Max)),
    (ONNX, "ReduceMin", |i, c| reduce::reduce(i, c, ReduceOp::Min)),
    (ONNX, "ReduceProd", |i, c| reduce::reduce(i, c, ReduceOp::Prod)),
    (ONNX, "ReduceL1", |i, c| reduce::reduce(i, c, ReduceOp::L1)),
    (ONNX, "ReduceL2", |i, c| reduce::reduce(i, c, ReduceOp::L2)),
    (ONNX, "ReduceSumSquare", |i, c| reduce::reduce(i, c, ReduceOp::SumSquare)),
    (ONNX, "ReduceLogSumExp", |i, c| reduce::reduce(i, c, ReduceOp::LogSumExp)),
    (ONNX, "ArgMax", |i, c| reduce::arg_extreme(i, c, true)),
    (ONNX, "ArgMin", |i, c| reduce::arg_extreme(i, c, false)),
    (ONNX, "CumSum", reduce::cum_sum),
    // layout
    (ONNX, "Concat", layout::concat),
    (ONNX, "Split", layout::split),
    (ONNX, "Slice", layout::slice),
    (ONNX, "Reshape", layout::reshape),
    (ONNX, "Flatten", layout::flatten),
    (ONNX, "Squeeze", layout::squeeze),
    (ONNX, "Unsqueeze", layout::unsqueeze),
    (ONNX, "Transpose", layout::transpose),
    (ONNX, "Pad", layout::pad),
    (ONNX, "Expand", layout::expand),
    (ONNX, "Tile", layout::tile),
    (ONNX, "DepthToSpace", layout::depth_to_space),
    (ONNX, "SpaceToDepth", layout::space_to_depth),
    // index
    (ONNX, "Gather", index::gather),
    (ONNX, "GatherElements", index::gather_elements),
    (ONNX, "GatherND", index::gather_nd),
    (ONNX, "TopK", index::top_k),
    (ONNX, "NonMaxSuppression", index::non_max_suppression),
    // generate
    (ONNX, "Shape", generate::shape),
    (ONNX, "ConstantOfShape", generate::constant_of_shape),
    (ONNX, "Range", generate::range),
    // resize
    (ONNX, "Resize", resize::resize),
    (ONNX, "Upsample", resize::upsample),
    // rnn
    (ONNX, "LSTM", rnn::lstm),
    (ONNX, "GRU", rnn::gru),
    // quant
    (ONNX, "QuantizeLinear", quant::quantize_linear),
    (ONNX, "DequantizeLinear", quant::dequantize_linear),
    (ONNX, "QLinearConv", quant::qlinear_conv),
    (ONNX, "QLinearMatMul", quant::qlinear_matmul),
    (ONNX, "ConvInteger", quant::conv_integer),
    (ONNX, "MatMulInteger", quant::matmul_integer),
    // testing (cargo feature `test-ops`)
    #[cfg(feature = "test-ops")]
    (super::TEST_DOMAIN, "Spin", testing::spin),
    #[cfg(feature = "test-ops")]
    (super::TEST_DOMAIN, "Fail", testing::fail),
];

/// The import function registered for `(domain, op_type)`; `ai.onnx` is the default
/// domain.
pub(super) fn lookup(domain: &str, op_type: &str) -> Option<ImportFn> {
    static TABLE: OnceLock<HashMap<(&'static str, &'static str), ImportFn>> = OnceLock::new();
    let table = TABLE.get_or_init(|| REGISTRY.iter().map(|&(d, o, f)| ((d, o), f)).collect());
    let domain = if domain == "ai.onnx" { ONNX } else { domain };
    table.get(&(domain, op_type)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_no_duplicate_entries() {
        let mut seen = std::collections::HashSet::new();
        for &(d, o, _) in REGISTRY {
            assert!(seen.insert((d, o)), "{d}::{o} registered twice");
        }
        assert!(lookup("ai.onnx", "Conv").is_some());
        assert!(lookup("", "Conv").is_some());
        assert!(lookup("com.microsoft", "Conv").is_none());
        assert!(lookup("", "Constant").is_none(), "Constant is graph-level");
    }
}

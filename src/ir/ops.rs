//! Typed operators of the graph IR.
//!
//! Each variant carries the ONNX attributes it needs, already validated by the importer.
//! Parameters that ONNX passes as *inputs* (Reshape's shape, Slice's starts, Resize's
//! scales, Pad's pads, TopK's k, Clip's bounds, ...) stay inputs here; once the compiler
//! has folded them they are constant values of the graph, which shape inference and the
//! execution planner read from there.

/// Element-wise single-input functions. Also used as fused epilogue steps.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UnaryOp {
    Relu,
    LeakyRelu {
        alpha: f32,
    },
    /// Clamp to `[min, max]` (Clip with constant bounds; ReLU6 is `Clip{0,6}`).
    Clip {
        min: f32,
        max: f32,
    },
    Sigmoid,
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Tanh,
    /// Gelu; `tanh_approx` selects the tanh approximation.
    Gelu {
        tanh_approx: bool,
    },
    Erf,
    Softplus,
    Exp,
    Log,
    Abs,
    Neg,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
    Round,
    Sign,
    Not,
    Sin,
    Cos,
    Identity,
    /// `x * sigmoid(x)` (SiLU / Swish-1): what a `Sigmoid` + `Mul` pair becomes when
    /// compiled (added last: compiled files index variants).
    Silu,
}

/// Element-wise two-input functions with numpy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    /// Integer/float remainder (`fmod` selects C fmod semantics).
    Mod {
        fmod: bool,
    },
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    /// PRelu: `x if x >= 0 else x * slope`, slope broadcast.
    PRelu,
}

/// Reductions over axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReduceOp {
    Mean,
    Sum,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSumExp,
}

/// One step of a fused epilogue, applied to each output element of a Conv/Gemm/MatMul
/// right after the accumulation (and bias), in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PostOp {
    /// An element-wise function.
    Unary(UnaryOp),
    /// `y = y * scale[c] + shift[c]` per output channel (channel = dim 1 for Conv,
    /// the last dim for Gemm/MatMul).
    ChannelAffine { scale: Vec<f32>, shift: Vec<f32> },
    /// PRelu with one slope per output channel.
    ChannelPRelu { slope: Vec<f32> },
    /// `y = y + residual`, where the residual is node input number `input` (same shape
    /// as the output).
    AddInput { input: usize },
}

/// Convolution geometry shared by Conv, ConvTranspose and pooling (spatial dims only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvGeom {
    /// Kernel size per spatial dim.
    pub kernel: Vec<usize>,
    /// Strides per spatial dim.
    pub strides: Vec<usize>,
    /// Dilations per spatial dim.
    pub dilations: Vec<usize>,
    /// Padding: begins of every spatial dim, then ends (ONNX order), explicit even when
    /// the model used `auto_pad` (resolved once shapes are known).
    pub pads: Vec<usize>,
    /// Unresolved ONNX `auto_pad` (`SAME_UPPER`, `SAME_LOWER`, `VALID`); `None` once
    /// resolved into `pads` or when the model used explicit pads.
    pub auto_pad: Option<String>,
}

/// Resize interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// Resize `coordinate_transformation_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CoordMode {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
    HalfPixelSymmetric,
}

/// Resize `nearest_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Pad mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// RNN direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RnnDirection {
    Forward,
    Reverse,
    Bidirectional,
}

/// Colour format of a raw image input, for the preprocessing node the compiler inserts
/// when the compile config declares an image input type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ImageFormat {
    Nv12,
    Yuv444,
    Rgb,
    Bgr,
    Gray,
}

/// Quantisation parameters of a u8 activation tensor inside a compiled plan ("u8
/// domain": an ONNX s8 tensor is stored as `s + 128` with `zp + 128`):
/// `real = (q - zp) * scale`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QParam {
    /// Step between two quantised values.
    pub scale: f32,
    /// The quantised value of real 0.
    pub zp: u8,
}

/// An operator with its attributes. Inputs are positional as in ONNX (optional inputs
/// absent are `None` in [`crate::ir::Node::inputs`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// inputs: X, W, [B], then residuals referenced by `post`.
    Conv {
        geom: ConvGeom,
        group: usize,
        post: Vec<PostOp>,
    },
    /// 2-D conv over channels-last images, placed by the compiler's layout pass
    /// (`compile::layout`) for depthwise convs (`group` = channels; the only grouping
    /// the planner takes). inputs: X `[N, H, W, Cin]`, W `[Cout, Cin / group, KH, KW]`,
    /// [B `[Cout]`], then residuals referenced by `post`, channels-last like the output
    /// `[N, OH, OW, Cout]`.
    ConvNhwc {
        geom: ConvGeom,
        group: usize,
        post: Vec<PostOp>,
    },
    /// A channels-last 1x1 expansion feeding a depthwise conv, fused by the compiler
    /// (`compile::band`) so that the expanded image, the largest tensor of an inverted
    /// residual block, is computed band by band into scratch and never written whole.
    /// Same values as `MatMul { post: expand }` then `ConvNhwc { geom, group, post }`.
    /// inputs: X `[N, H, W, Cin]`, W1 `[Cin, Ce]` (the expansion's B), W `[Ce, 1, KH,
    /// KW]`, [B `[Ce]`], then residuals referenced by `post`; output `[N, OH, OW, Ce]`.
    /// `expand` is the expansion's epilogue (no residuals).
    ExpandConvNhwc {
        expand: Vec<PostOp>,
        geom: ConvGeom,
        group: usize,
        post: Vec<PostOp>,
    },
    /// A depthwise `ConvNhwc` (with its expansion where `expand` is some: the pair of
    /// `ExpandConvNhwc`) whose output only a channels-last 1x1 projection reads, fused by
    /// the compiler (`compile::band`) so that the depthwise output is computed band by
    /// band into scratch and projected from there, never written whole. Same values as
    /// the nodes apart (`MatMul { post: project }` by W2 last).
    /// inputs: X `[N, H, W, Cin]`, [W1 `[Cin, C]` with `expand`], W `[C, 1, KH, KW]`,
    /// [B `[C]`], W2 `[C, Cout]`, then residuals referenced by `project`; output `[N, OH,
    /// OW, Cout]`. `post` (the depthwise conv's) adds no residual.
    DwProjectNhwc {
        expand: Option<Vec<PostOp>>,
        geom: ConvGeom,
        group: usize,
        post: Vec<PostOp>,
        project: Vec<PostOp>,
    },
    /// inputs: X, W, [B], then residuals referenced by `post`.
    ConvTranspose {
        geom: ConvGeom,
        group: usize,
        output_padding: Vec<usize>,
        output_shape: Vec<usize>,
        post: Vec<PostOp>,
    },
    /// inputs: A, B, [C], then residuals.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
        post: Vec<PostOp>,
    },
    /// inputs: A, B, then residuals. A bias folded into MatMul is a `ChannelAffine` post-op.
    MatMul {
        post: Vec<PostOp>,
    },
    /// Scaled-dot-product attention fused by the compiler from `MatMul(q, kt)`, the softmax
    /// over the last axis (with an optional additive mask) and `MatMul(p, v)`. inputs: q
    /// `[..., M, K]`, kt `[..., K, N]`, [mask] (trailing dims of the `[..., M, N]` scores,
    /// leading dims 1), v `[..., N, D]`; output `[..., M, D]`. Batch dims are equal (no
    /// broadcasting); any scale is a separate node before it.
    Attention,
    /// inputs: X, scale, B, mean, var.
    BatchNorm {
        epsilon: f32,
    },
    /// inputs: X, scale, B.
    InstanceNorm {
        epsilon: f32,
    },
    /// inputs: X, scale, [B].
    LayerNorm {
        axis: i64,
        epsilon: f32,
    },
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// inputs: condition, X, Y.
    Where,
    /// inputs: X, [min], [max] (opset ≥ 11) — folded to `Unary(Clip)` when constant.
    ClipDynamic,
    MaxPool {
        geom: ConvGeom,
        ceil_mode: bool,
    },
    AveragePool {
        geom: ConvGeom,
        ceil_mode: bool,
        count_include_pad: bool,
    },
    /// 2-D MaxPool over channels-last images, placed by the compiler's layout pass
    /// (`compile::layout`) between channels-last convs. inputs: X `[N, H, W, C]`; output
    /// `[N, OH, OW, C]`.
    MaxPoolNhwc {
        geom: ConvGeom,
        ceil_mode: bool,
    },
    GlobalAveragePool,
    GlobalMaxPool,
    Concat {
        axis: i64,
    },
    /// inputs: X, [split] (opset ≥ 13); `split` attribute for older opsets.
    Split {
        axis: i64,
        split: Option<Vec<i64>>,
        num_outputs: usize,
    },
    /// inputs: data, starts, ends, [axes], [steps] (opset ≥ 10).
    Slice,
    /// inputs: data, shape. Also what Flatten/Squeeze/Unsqueeze become once shapes are known.
    Reshape {
        allowzero: bool,
    },
    Flatten {
        axis: i64,
    },
    /// inputs: data, [axes] (opset ≥ 13); `axes` attribute for older opsets.
    Squeeze {
        axes: Option<Vec<i64>>,
    },
    Unsqueeze {
        axes: Option<Vec<i64>>,
    },
    Transpose {
        perm: Option<Vec<usize>>,
    },
    /// inputs: data, pads, [constant_value], [axes].
    Pad {
        mode: PadMode,
    },
    /// inputs: X, [roi], [scales], [sizes]. (`Upsample` imports as Resize.)
    Resize {
        mode: ResizeMode,
        coord: CoordMode,
        nearest: NearestMode,
        cubic_coeff_a: f32,
        exclude_outside: bool,
        extrapolation_value: f32,
    },
    Softmax {
        axis: i64,
    },
    LogSoftmax {
        axis: i64,
    },
    /// Softmax over the last axis of `x + mask` (inputs: x, mask), where `mask` holds the
    /// trailing dims of `x` (leading dims 1) and is added to every row group it matches:
    /// an attention mask `Add` fused by the compiler (one pass over the scores).
    MaskedSoftmax,
    /// inputs: data, [axes] (opset ≥ 18, 13 for ReduceSum); `axes` attribute before.
    Reduce {
        op: ReduceOp,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
    ArgMax {
        axis: i64,
        keepdims: bool,
        select_last_index: bool,
    },
    ArgMin {
        axis: i64,
        keepdims: bool,
        select_last_index: bool,
    },
    /// inputs: X, K.
    TopK {
        axis: i64,
        largest: bool,
        sorted: bool,
    },
    /// inputs: data, indices.
    Gather {
        axis: i64,
    },
    GatherElements {
        axis: i64,
    },
    /// inputs: data, indices (int64; the last dim indexes the first dims of data after
    /// the `batch_dims` leading dims, which data and indices share).
    GatherND {
        batch_dims: i64,
    },
    /// inputs: input, shape.
    Expand,
    Cast {
        to: crate::ir::DType,
    },
    /// inputs: X, W, R, [B], [sequence_lens], [initial_h], [initial_c], [P].
    Lstm {
        hidden_size: usize,
        direction: RnnDirection,
        layout: i64,
    },
    /// inputs: X, W, R, [B], [sequence_lens], [initial_h].
    Gru {
        hidden_size: usize,
        direction: RnnDirection,
        linear_before_reset: bool,
        layout: i64,
    },
    DepthToSpace {
        blocksize: usize,
        crd_mode: bool,
    },
    SpaceToDepth {
        blocksize: usize,
    },
    /// inputs: X. Output: 1-D i64 shape (folded to a constant once shapes are static).
    Shape {
        start: i64,
        end: Option<i64>,
    },
    /// inputs: shape. Output filled with `value`.
    ConstantOfShape {
        value: crate::ir::Tensor,
    },
    /// inputs: start, limit, delta.
    Range,
    /// inputs: X, repeats.
    Tile,
    /// inputs: X, [axis] — cumulative sum.
    CumSum {
        exclusive: bool,
        reverse: bool,
    },
    /// Non-maximum suppression (CPU). inputs: boxes, scores, [max_out], [iou_thr], [score_thr].
    NonMaxSuppression {
        center_point_box: bool,
    },
    /// Colour conversion + normalisation of a raw image input into an NCHW f32 tensor
    /// (inserted by the compiler for image input types). input: the raw u8 image in
    /// `layout` (NHWC or NCHW; NV12 is a single plane Y then interleaved UV).
    Preprocess {
        format: ImageFormat,
        nhwc: bool,
        mean: Vec<f32>,
        scale: Vec<f32>,
        to_bgr: bool,
    },
    /// ONNX QuantizeLinear. inputs: x (f32), y_scale, [y_zero_point] (both constant by
    /// compile time). `axis`: `None` for a per-tensor scale, else the (normalised) axis a
    /// 1-D scale runs along. `dtype`: the output type (U8 or I8; I32 only for the
    /// integer-output ops ConvInteger / MatMulInteger rewrite to, with scale 1).
    QuantizeLinear {
        axis: Option<usize>,
        dtype: crate::ir::DType,
    },
    /// ONNX DequantizeLinear. inputs: x (u8, i8 or i32), x_scale, [x_zero_point]
    /// (constant by compile time); output f32. `axis` as for `QuantizeLinear`.
    DequantizeLinear {
        axis: Option<usize>,
    },
    /// Int8 convolution, lowered from `DQ(x), DQ(w) [, DQ(b)] → Conv [→ Relu/Clip] → Q`.
    /// inputs: x (u8, quantised by `x`), w (i8 constant `[cout, cin/group, k...]`,
    /// symmetric, per output channel scales `w_scale`), [bias (i32 constant `[cout]` in
    /// units of `x.scale * w_scale[c]`)]. Output: u8 requantised to `y` and clamped to
    /// `[lo, hi]` (a fused ReLU/Clip), or, when `y` is `None`, the raw i32 accumulator
    /// plus bias.
    QConv {
        geom: ConvGeom,
        group: usize,
        x: QParam,
        w_scale: Vec<f32>,
        y: Option<QParam>,
        lo: u8,
        hi: u8,
    },
    /// Int8 matrix product, lowered from Gemm / MatMul between DQ and Q. inputs: a (u8,
    /// `[.., m, k]`, rows flattened), b (i8 constant `[k, n]`, per column scales
    /// `w_scale`), [bias (i32 constant `[n]`)]. Output as for `QConv`.
    QGemm {
        x: QParam,
        w_scale: Vec<f32>,
        y: Option<QParam>,
        lo: u8,
        hi: u8,
    },
    /// Int8 element-wise add of two u8 tensors, lowered from `DQ(a), DQ(b) → Add [→
    /// Relu] → Q`; computed as the float reference does (dequantise, add, requantise),
    /// clamped to `[lo, hi]`. Input 0 has the output shape; input 1 has it too or
    /// broadcasts to it as one block of its dims (`kernels::quant::QBcast`: a scalar,
    /// `[C, 1, 1]`, trailing dims).
    QAdd {
        a: QParam,
        b: QParam,
        y: QParam,
        lo: u8,
        hi: u8,
    },
    /// u8 → u8 change of quantisation parameters (`Q(DQ(x))` with different params).
    QRequant {
        x: QParam,
        y: QParam,
    },
    /// u8 → u8 through a 256-entry table: an element-wise function between DQ and Q
    /// (`table[q] = Q(f(DQ(q)))`, computed at compile time).
    QLut {
        table: Vec<u8>,
    },
    /// Int8 element-wise multiply of two u8 tensors, lowered from `DQ(a), DQ(b) → Mul →
    /// Q`; computed as the float reference does. Shapes as for `QAdd`.
    QMul {
        a: QParam,
        b: QParam,
        y: QParam,
    },
    /// Softmax of a u8 tensor along `axis` (normalised), lowered from
    /// `DQ(x) → Softmax → Q`: dequantise, `exp(x - max)` correctly rounded to f32, f32
    /// sum, multiply by its reciprocal, quantise.
    QSoftmax {
        axis: usize,
        x: QParam,
        y: QParam,
    },
    /// MaxPool on a u8 tensor (max commutes with the monotonic (de)quantisation; input
    /// and output share their parameters).
    QMaxPool {
        geom: ConvGeom,
        ceil_mode: bool,
    },
    /// AveragePool on a u8 tensor, lowered from `DQ(x) → AveragePool → Q`: the
    /// window's dequantised values summed in f32, divided by the count, quantised to `y`
    /// (what the float reference computes).
    QAvgPool {
        geom: ConvGeom,
        ceil_mode: bool,
        count_include_pad: bool,
        x: QParam,
        y: QParam,
    },
    /// GlobalAveragePool on a u8 tensor, lowered from `DQ(x) → GlobalAveragePool → Q`:
    /// per plane the exact integer sum `s` of `n` values, then `Q(((s - n * x.zp) *
    /// x.scale) / n)` in f32.
    QGlobalAvgPool {
        x: QParam,
        y: QParam,
    },
    /// Linear Resize of the two innermost dims of a u8 tensor, lowered from `DQ(x) →
    /// Resize(linear) → Q`; inputs as Resize (X, [roi], [scales], [sizes]). Each output
    /// interpolates the dequantised neighbours in f32 and is quantised to `y`.
    QResize {
        coord: CoordMode,
        x: QParam,
        y: QParam,
    },
    /// Test-only operator (domain `ai.vnpu.test`, op `Spin`): copies its input to its
    /// output after busy-waiting `micros`. Lets scheduling tests build FCs of known length.
    #[cfg(feature = "test-ops")]
    Spin {
        micros: u64,
    },
    /// Test-only operator (domain `ai.vnpu.test`, op `Fail`): fails (`panic = false`) or
    /// panics when executed, to test fault containment.
    #[cfg(feature = "test-ops")]
    Fail {
        panic: bool,
    },
}

impl Op {
    /// The ONNX-style operator name, used in messages, `vnpu info` and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Conv { .. } => "Conv",
            Op::ConvTranspose { .. } => "ConvTranspose",
            Op::ConvNhwc { .. } => "ConvNhwc",
            Op::ExpandConvNhwc { .. } => "ExpandConvNhwc",
            Op::DwProjectNhwc { .. } => "DwProjectNhwc",
            Op::Gemm { .. } => "Gemm",
            Op::MatMul { .. } => "MatMul",
            Op::Attention => "Attention",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::InstanceNorm { .. } => "InstanceNormalization",
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "Where",
            Op::ClipDynamic => "Clip",
            Op::MaxPool { .. } => "MaxPool",
            Op::MaxPoolNhwc { .. } => "MaxPoolNhwc",
            Op::AveragePool { .. } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::GlobalMaxPool => "GlobalMaxPool",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice => "Slice",
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Squeeze { .. } => "Squeeze",
            Op::Unsqueeze { .. } => "Unsqueeze",
            Op::Transpose { .. } => "Transpose",
            Op::Pad { .. } => "Pad",
            Op::Resize { .. } => "Resize",
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::MaskedSoftmax => "MaskedSoftmax",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgMax { .. } => "ArgMax",
            Op::ArgMin { .. } => "ArgMin",
            Op::TopK { .. } => "TopK",
            Op::Gather { .. } => "Gather",
            Op::GatherElements { .. } => "GatherElements",
            Op::GatherND { .. } => "GatherND",
            Op::Expand => "Expand",
            Op::Cast { .. } => "Cast",
            Op::Lstm { .. } => "LSTM",
            Op::Gru { .. } => "GRU",
            Op::DepthToSpace { .. } => "DepthToSpace",
            Op::SpaceToDepth { .. } => "SpaceToDepth",
            Op::Shape { .. } => "Shape",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Range => "Range",
            Op::Tile => "Tile",
            Op::CumSum { .. } => "CumSum",
            Op::NonMaxSuppression { .. } => "NonMaxSuppression",
            Op::Preprocess { .. } => "Preprocess",
            Op::QuantizeLinear { .. } => "QuantizeLinear",
            Op::DequantizeLinear { .. } => "DequantizeLinear",
            Op::QConv { .. } => "QConv",
            Op::QGemm { .. } => "QGemm",
            Op::QAdd { .. } => "QAdd",
            Op::QRequant { .. } => "QRequant",
            Op::QMaxPool { .. } => "QMaxPool",
            Op::QLut { .. } => "QLut",
            Op::QMul { .. } => "QMul",
            Op::QSoftmax { .. } => "QSoftmax",
            Op::QAvgPool { .. } => "QAvgPool",
            Op::QGlobalAvgPool { .. } => "QGlobalAvgPool",
            Op::QResize { .. } => "QResize",
            #[cfg(feature = "test-ops")]
            Op::Spin { .. } => "Spin",
            #[cfg(feature = "test-ops")]
            Op::Fail { .. } => "Fail",
        }
    }

    /// The fused epilogue of a Conv/Gemm/MatMul, if this op has one.
    pub fn post_ops(&self) -> Option<&Vec<PostOp>> {
        match self {
            Op::Conv { post, .. }
            | Op::ConvTranspose { post, .. }
            | Op::ConvNhwc { post, .. }
            | Op::ExpandConvNhwc { post, .. }
            | Op::DwProjectNhwc { project: post, .. }
            | Op::Gemm { post, .. }
            | Op::MatMul { post } => Some(post),
            _ => None,
        }
    }

    /// Mutable access to the fused epilogue of a Conv/ConvTranspose/Gemm/MatMul.
    pub fn post_ops_mut(&mut self) -> Option<&mut Vec<PostOp>> {
        match self {
            Op::Conv { post, .. }
            | Op::ConvTranspose { post, .. }
            | Op::ConvNhwc { post, .. }
            | Op::ExpandConvNhwc { post, .. }
            | Op::DwProjectNhwc { project: post, .. }
            | Op::Gemm { post, .. }
            | Op::MatMul { post } => Some(post),
            _ => None,
        }
    }
}

impl UnaryOp {
    /// ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::LeakyRelu { .. } => "LeakyRelu",
            UnaryOp::Clip { .. } => "Clip",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::HardSigmoid { .. } => "HardSigmoid",
            UnaryOp::HardSwish => "HardSwish",
            UnaryOp::Silu => "Silu",
            UnaryOp::Elu { .. } => "Elu",
            UnaryOp::Selu { .. } => "Selu",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Gelu { .. } => "Gelu",
            UnaryOp::Erf => "Erf",
            UnaryOp::Softplus => "Softplus",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Abs => "Abs",
            UnaryOp::Neg => "Neg",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Reciprocal => "Reciprocal",
            UnaryOp::Floor => "Floor",
            UnaryOp::Ceil => "Ceil",
            UnaryOp::Round => "Round",
            UnaryOp::Sign => "Sign",
            UnaryOp::Not => "Not",
            UnaryOp::Sin => "Sin",
            UnaryOp::Cos => "Cos",
            UnaryOp::Identity => "Identity",
        }
    }
}

impl BinaryOp {
    /// ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
            BinaryOp::Mod { .. } => "Mod",
            BinaryOp::Equal => "Equal",
            BinaryOp::Less => "Less",
            BinaryOp::LessOrEqual => "LessOrEqual",
            BinaryOp::Greater => "Greater",
            BinaryOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryOp::And => "And",
            BinaryOp::Or => "Or",
            BinaryOp::Xor => "Xor",
            BinaryOp::PRelu => "PRelu",
        }
    }
}

impl ReduceOp {
    /// ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            ReduceOp::Mean => "ReduceMean",
            ReduceOp::Sum => "ReduceSum",
            ReduceOp::Max => "ReduceMax",
            ReduceOp::Min => "ReduceMin",
            ReduceOp::Prod => "ReduceProd",
            ReduceOp::L1 => "ReduceL1",
            ReduceOp::L2 => "ReduceL2",
            ReduceOp::SumSquare => "ReduceSumSquare",
            ReduceOp::LogSumExp => "ReduceLogSumExp",
        }
    }
}

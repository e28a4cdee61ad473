//! The manifest schema of the compiled file (format version 2): tagged protobuf records
//! declared by hand with `prost` derives.
//!
//! The records are independent of the in-memory IR: enums are written as stable names
//! or explicit integer codes, operators as an op type name plus named, typed attributes
//! (like ONNX `NodeProto`), converted to and from [`crate::ir::Op`] by the family files
//! in [`super::ops`]. Rules that keep old files readable: a field tag is never reused or
//! renumbered, a new field gets a new tag and a default that means "absent", and a
//! change of meaning is a new `FORMAT_VERSION`.

/// The whole manifest: every model of the file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ManifestRecord {
    /// The vnpu version that wrote the file (informational).
    #[prost(string, tag = "1")]
    pub vnpu_version: String,
    /// The models, in pack order.
    #[prost(message, repeated, tag = "2")]
    pub models: Vec<ModelRecord>,
}

/// One compiled model.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelRecord {
    /// Model name (unique in the file).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Name of the compiled graph.
    #[prost(string, tag = "2")]
    pub graph_name: String,
    /// Every value of the graph, indexed by position.
    #[prost(message, repeated, tag = "3")]
    pub values: Vec<ValueRecord>,
    /// Nodes in execution order.
    #[prost(message, repeated, tag = "4")]
    pub nodes: Vec<NodeRecord>,
    /// Graph input value indices.
    #[prost(uint64, repeated, tag = "5")]
    pub graph_inputs: Vec<u64>,
    /// Graph output value indices.
    #[prost(uint64, repeated, tag = "6")]
    pub graph_outputs: Vec<u64>,
    /// Model inputs at the API boundary.
    #[prost(message, repeated, tag = "7")]
    pub inputs: Vec<IoRecord>,
    /// Model outputs at the API boundary.
    #[prost(message, repeated, tag = "8")]
    pub outputs: Vec<IoRecord>,
    /// Segments in execution order.
    #[prost(message, repeated, tag = "9")]
    pub segments: Vec<SegmentRecord>,
    /// The `max_time_per_fc` the model was compiled with (µs).
    #[prost(uint64, tag = "10")]
    pub max_time_per_fc: u64,
    /// Measured whole-node times (µs) by node index.
    #[prost(double, repeated, tag = "11")]
    pub node_est_us: Vec<f64>,
    /// Steps over the FC limit that could not be tiled.
    #[prost(message, repeated, tag = "12")]
    pub over_limit: Vec<OverLimitRecord>,
    /// Conv / GEMM weights packed for one kernel table. Optional and redundant (derived
    /// from the constants): a reader that does not know the field, or runs another
    /// table, packs the weights from the constants instead.
    #[prost(message, optional, tag = "13")]
    pub packed: Option<PackedWeightsRecord>,
    /// The precision the node and FC times were measured in: empty (absent) = f32, or
    /// `bf16`.
    #[prost(string, tag = "14")]
    pub precision: String,
}

/// Weights packed as one kernel table's GEMM wants them, stored in the weights section.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PackedWeightsRecord {
    /// Kernel table name (e.g. `avx2+fma`).
    #[prost(string, tag = "1")]
    pub table: String,
    /// Rows of a packed A panel.
    #[prost(uint64, tag = "2")]
    pub mr: u64,
    /// Columns of a packed B panel.
    #[prost(uint64, tag = "3")]
    pub nr: u64,
    /// Depth of a K block.
    #[prost(uint64, tag = "4")]
    pub kc: u64,
    /// One buffer per node that has packed weights, by increasing node index.
    #[prost(message, repeated, tag = "5")]
    pub blobs: Vec<PackedBlobRecord>,
    /// Revision of the planner's packing choices the buffers follow
    /// (`exec::plan::packed::PACK_REVISION`; 0 in files written before the field).
    #[prost(uint64, tag = "6")]
    pub revision: u64,
}

/// One node's packed weights (f32, little-endian) in the weights section.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PackedBlobRecord {
    /// Node index (a Conv, Gemm or MatMul).
    #[prost(uint64, tag = "1")]
    pub node: u64,
    /// Byte offset in the weights section (a multiple of `WEIGHT_ALIGN`).
    #[prost(uint64, tag = "2")]
    pub offset: u64,
    /// Byte length (a multiple of 4).
    #[prost(uint64, tag = "3")]
    pub len: u64,
}

/// A graph value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueRecord {
    /// Name (unique in the graph).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Element type as an ONNX `TensorProto.DataType` code.
    #[prost(int32, tag = "2")]
    pub dtype: i32,
    /// True when the value has a static shape (`shape` then holds it; empty = scalar).
    #[prost(bool, tag = "3")]
    pub has_shape: bool,
    /// The static shape.
    #[prost(uint64, repeated, tag = "4")]
    pub shape: Vec<u64>,
    /// True when the model declared a shape with symbolic dims (`declared` holds it).
    #[prost(bool, tag = "5")]
    pub has_declared: bool,
    /// Declared dims; -1 for a symbolic one.
    #[prost(int64, repeated, tag = "6")]
    pub declared: Vec<i64>,
    /// Where the constant content lives, for constants.
    #[prost(message, optional, tag = "7")]
    pub konst: Option<ConstRecord>,
}

/// Where a constant's bytes live in the weights section.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConstRecord {
    /// Element type (ONNX code).
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// Dimensions.
    #[prost(uint64, repeated, tag = "2")]
    pub shape: Vec<u64>,
    /// Byte offset in the weights section (a multiple of `WEIGHT_ALIGN`).
    #[prost(uint64, tag = "3")]
    pub offset: u64,
    /// Byte length (`numel * dtype size`).
    #[prost(uint64, tag = "4")]
    pub len: u64,
}

/// One operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeRecord {
    /// Node name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Operator type name (see [`super::ops`]).
    #[prost(string, tag = "2")]
    pub op_type: String,
    /// Operator attributes.
    #[prost(message, repeated, tag = "3")]
    pub attrs: Vec<AttrRecord>,
    /// Positional inputs as value indices; -1 for an omitted optional input.
    #[prost(int64, repeated, tag = "4")]
    pub inputs: Vec<i64>,
    /// Output value indices.
    #[prost(uint64, repeated, tag = "5")]
    pub outputs: Vec<u64>,
    /// Original ONNX node names this node stands for.
    #[prost(string, repeated, tag = "6")]
    pub absorbed: Vec<String>,
    /// Placement: 0 none, 1 BPU, 2 CPU.
    #[prost(int32, tag = "7")]
    pub placement: i32,
}

/// A named, typed attribute. Exactly the field its reader expects is used; the others
/// stay empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrRecord {
    /// Attribute name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Integer (also booleans as 0/1 and enum codes).
    #[prost(int64, tag = "2")]
    pub i: i64,
    /// Float.
    #[prost(float, tag = "3")]
    pub f: f32,
    /// String.
    #[prost(string, tag = "4")]
    pub s: String,
    /// Integer list.
    #[prost(int64, repeated, tag = "5")]
    pub ints: Vec<i64>,
    /// Float list.
    #[prost(float, repeated, tag = "6")]
    pub floats: Vec<f32>,
    /// A small inline tensor (e.g. ConstantOfShape's value).
    #[prost(message, optional, tag = "7")]
    pub tensor: Option<InlineTensorRecord>,
    /// Fused epilogue steps.
    #[prost(message, repeated, tag = "8")]
    pub post: Vec<PostOpRecord>,
}

/// A small tensor held in the manifest itself (little-endian bytes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InlineTensorRecord {
    /// Element type (ONNX code).
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// Dimensions.
    #[prost(uint64, repeated, tag = "2")]
    pub shape: Vec<u64>,
    /// Elements, little-endian.
    #[prost(bytes = "vec", tag = "3")]
    pub raw: Vec<u8>,
}

/// One step of a fused epilogue: a unary op type name with its attributes, or
/// `ChannelAffine` / `ChannelPRelu` / `AddInput`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PostOpRecord {
    /// Step type name.
    #[prost(string, tag = "1")]
    pub op_type: String,
    /// Step attributes.
    #[prost(message, repeated, tag = "2")]
    pub attrs: Vec<AttrRecord>,
}

/// A model input or output at the API boundary.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IoRecord {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Graph value index.
    #[prost(uint64, tag = "2")]
    pub value: u64,
    /// "tensor", or an image format name ("nv12", "yuv444", "rgb", "bgr", "gray").
    #[prost(string, tag = "3")]
    pub kind: String,
    /// Element type of the buffer (ONNX code).
    #[prost(int32, tag = "4")]
    pub dtype: i32,
    /// "NCHW", "NHWC" or "NONE".
    #[prost(string, tag = "5")]
    pub layout: String,
    /// Logical shape.
    #[prost(uint64, repeated, tag = "6")]
    pub shape: Vec<u64>,
    /// Bytes of the buffer.
    #[prost(uint64, tag = "7")]
    pub byte_size: u64,
    /// A quantised output (absent: the graph value's own type).
    #[prost(message, optional, tag = "8")]
    pub quant: Option<OutputQuantRecord>,
}

/// The quantised type of an output at the API boundary (`quantiType = SCALE`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OutputQuantRecord {
    /// "s8", "s16" or "s32".
    #[prost(string, tag = "1")]
    pub qtype: String,
    /// Axis of the scales in the output's shape.
    #[prost(uint64, tag = "2")]
    pub axis: u64,
    /// Scales (one per index of `axis`, or one).
    #[prost(float, repeated, tag = "3")]
    pub scale: Vec<f32>,
    /// Zero points (int8 range), as many as scales; empty = symmetric.
    #[prost(sint32, repeated, tag = "4")]
    pub zero_point: Vec<i32>,
}

/// One segment.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SegmentRecord {
    /// Placement: 1 BPU, 2 CPU.
    #[prost(int32, tag = "1")]
    pub kind: i32,
    /// First node index.
    #[prost(uint64, tag = "2")]
    pub start: u64,
    /// One past the last node index.
    #[prost(uint64, tag = "3")]
    pub end: u64,
    /// The FCs.
    #[prost(message, repeated, tag = "4")]
    pub fcs: Vec<FcRecord>,
}

/// One function call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FcRecord {
    /// Steps in order.
    #[prost(message, repeated, tag = "1")]
    pub steps: Vec<StepRecord>,
    /// Estimated time (µs).
    #[prost(double, tag = "2")]
    pub est_us: f64,
}

/// One step of an FC: a node, or one tile of it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StepRecord {
    /// Node index.
    #[prost(uint64, tag = "1")]
    pub node: u64,
    /// Tile index.
    #[prost(uint32, tag = "2")]
    pub tile: u32,
    /// Number of tiles.
    #[prost(uint32, tag = "3")]
    pub tiles: u32,
}

/// A step over the FC limit.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OverLimitRecord {
    /// Node index.
    #[prost(uint64, tag = "1")]
    pub node: u64,
    /// Estimated µs of its largest step.
    #[prost(double, tag = "2")]
    pub est_us: f64,
}

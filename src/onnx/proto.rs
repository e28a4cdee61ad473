//! The subset of the ONNX protobuf schema (`onnx.proto`, IR version ≤ 10) that the
//! importer reads, declared by hand with `prost` derives so no `protoc` runs at build
//! time.
//!
//! Invariants: every field keeps the official ONNX field number, so any conforming
//! `.onnx` file decodes; fields we do not declare (training info, functions, sparse
//! initializers, quantization annotations) are skipped by the decoder.

/// `TensorProto.DataType` codes.
pub mod data_type {
    /// IEEE 754 single precision.
    pub const FLOAT: i32 = 1;
    /// Unsigned 8-bit integer.
    pub const UINT8: i32 = 2;
    /// Signed 8-bit integer.
    pub const INT8: i32 = 3;
    /// Unsigned 16-bit integer.
    pub const UINT16: i32 = 4;
    /// Signed 16-bit integer.
    pub const INT16: i32 = 5;
    /// Signed 32-bit integer.
    pub const INT32: i32 = 6;
    /// Signed 64-bit integer.
    pub const INT64: i32 = 7;
    /// UTF-8 string.
    pub const STRING: i32 = 8;
    /// Boolean.
    pub const BOOL: i32 = 9;
    /// IEEE 754 half precision.
    pub const FLOAT16: i32 = 10;
    /// IEEE 754 double precision.
    pub const DOUBLE: i32 = 11;
    /// Unsigned 32-bit integer.
    pub const UINT32: i32 = 12;
    /// Unsigned 64-bit integer.
    pub const UINT64: i32 = 13;
    /// Brain floating point (upper half of an f32).
    pub const BFLOAT16: i32 = 16;

    /// The ONNX name of a data type code, for messages.
    pub fn name(code: i32) -> &'static str {
        match code {
            FLOAT => "float",
            UINT8 => "uint8",
            INT8 => "int8",
            UINT16 => "uint16",
            INT16 => "int16",
            INT32 => "int32",
            INT64 => "int64",
            STRING => "string",
            BOOL => "bool",
            FLOAT16 => "float16",
            DOUBLE => "double",
            UINT32 => "uint32",
            UINT64 => "uint64",
            14 => "complex64",
            15 => "complex128",
            BFLOAT16 => "bfloat16",
            17..=20 => "float8",
            21 | 22 => "int4",
            _ => "unknown",
        }
    }
}

/// `AttributeProto.AttributeType` codes.
pub mod attr_type {
    /// Unset.
    pub const UNDEFINED: i32 = 0;
    /// `f`.
    pub const FLOAT: i32 = 1;
    /// `i`.
    pub const INT: i32 = 2;
    /// `s`.
    pub const STRING: i32 = 3;
    /// `t`.
    pub const TENSOR: i32 = 4;
    /// `g`.
    pub const GRAPH: i32 = 5;
    /// `floats`.
    pub const FLOATS: i32 = 6;
    /// `ints`.
    pub const INTS: i32 = 7;
    /// `strings`.
    pub const STRINGS: i32 = 8;
    /// `tensors`.
    pub const TENSORS: i32 = 9;
    /// `graphs`.
    pub const GRAPHS: i32 = 10;
    /// `sparse_tensor`.
    pub const SPARSE_TENSOR: i32 = 11;
    /// `sparse_tensors`.
    pub const SPARSE_TENSORS: i32 = 12;
    /// `tp`.
    pub const TYPE_PROTO: i32 = 13;
    /// `type_protos`.
    pub const TYPE_PROTOS: i32 = 14;
}

/// `TensorProto.DataLocation`: tensor data stored in an external file.
pub const DATA_LOCATION_EXTERNAL: i32 = 1;

/// A whole model: metadata, operator set imports and the main graph.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// IR version of the file format.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// Operator sets the model relies on.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// Tool that produced the model.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Version of that tool.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// Reverse-DNS namespace of the model.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// Model version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Free documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The main graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// Named metadata.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// One operator set import: a domain and its version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// Domain (`""` or `"ai.onnx"` for the default operator set).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Operator set version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// A key/value string pair.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A computation graph: nodes, initializers, inputs and outputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// Nodes (topologically sorted in a conforming file, but not trusted to be).
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// Graph name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors (weights).
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Free documentation.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// Graph inputs (may also list initializers).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types/shapes of intermediate values, when the producer recorded them.
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
    /// Named metadata.
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// One operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names (`""` for an omitted optional input).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names (`""` for an omitted optional output).
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// Node name (optional in ONNX).
    #[prost(string, tag = "3")]
    pub name: String,
    /// Operator name.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Operator domain (`""` = default).
    #[prost(string, tag = "7")]
    pub domain: String,
    /// Function overload id.
    #[prost(string, tag = "8")]
    pub overload: String,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Free documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// Named metadata.
    #[prost(message, repeated, tag = "9")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A named attribute of a node; `type` says which value field is in use.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// Attribute name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Reference to a function attribute (only inside functions).
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    /// Free documentation.
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// One of [`attr_type`].
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    /// Float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// Integer value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// String value (UTF-8 bytes).
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// Tensor value.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// Graph value (control-flow bodies).
    #[prost(message, optional, boxed, tag = "6")]
    pub g: Option<Box<GraphProto>>,
    /// Sparse tensor value.
    #[prost(message, optional, tag = "22")]
    pub sparse_tensor: Option<SparseTensorProto>,
    /// Type value.
    #[prost(message, optional, tag = "14")]
    pub tp: Option<TypeProto>,
    /// Float list.
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    /// Integer list.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// String list.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// Tensor list.
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    /// Graph list.
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    /// Sparse tensor list.
    #[prost(message, repeated, tag = "23")]
    pub sparse_tensors: Vec<SparseTensorProto>,
    /// Type list.
    #[prost(message, repeated, tag = "15")]
    pub type_protos: Vec<TypeProto>,
}

/// A dense tensor: dims, element type and the elements in one of several encodings.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Dimensions.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// One of [`data_type`].
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// Segment of a chunked tensor (unsupported; rejected when present).
    #[prost(message, optional, tag = "3")]
    pub segment: Option<tensor_proto::Segment>,
    /// Elements of FLOAT (and COMPLEX64) tensors.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// Elements of INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16 and BFLOAT16 tensors.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// Elements of STRING tensors.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    /// Elements of INT64 tensors.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// Tensor name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Free documentation.
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// Elements as little-endian bytes (any fixed-size type).
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// Location of external data (`location`, `offset`, `length`, `checksum`).
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// `0` = in this message, [`DATA_LOCATION_EXTERNAL`] = in `external_data`.
    #[prost(int32, tag = "14")]
    pub data_location: i32,
    /// Elements of DOUBLE (and COMPLEX128) tensors.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// Elements of UINT32 and UINT64 tensors.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    /// Named metadata.
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// Nested messages of [`TensorProto`].
pub mod tensor_proto {
    /// A chunk range of a segmented tensor.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Segment {
        /// First element.
        #[prost(int64, tag = "1")]
        pub begin: i64,
        /// One past the last element.
        #[prost(int64, tag = "2")]
        pub end: i64,
    }
}

/// A sparse tensor (only decoded to be rejected with a clear message).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseTensorProto {
    /// Non-zero values.
    #[prost(message, optional, tag = "1")]
    pub values: Option<TensorProto>,
    /// Their indices.
    #[prost(message, optional, tag = "2")]
    pub indices: Option<TensorProto>,
    /// Dense shape.
    #[prost(int64, repeated, tag = "3")]
    pub dims: Vec<i64>,
}

/// A named, typed value (graph input, output or intermediate).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// Value name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Free documentation.
    #[prost(string, tag = "3")]
    pub doc_string: String,
    /// Named metadata.
    #[prost(message, repeated, tag = "4")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A value type. Only the tensor case is declared; sequence, map, optional and sparse
/// types decode as `tensor_type: None` and are rejected where a tensor is required.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// The tensor type (field 1 of the `value` oneof).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<type_proto::Tensor>,
    /// Denotation of the type.
    #[prost(string, tag = "6")]
    pub denotation: String,
}

/// Nested messages of [`TypeProto`].
pub mod type_proto {
    /// A tensor type: element type and (optional) shape.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        /// One of [`super::data_type`].
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        /// The shape; absent means unknown rank.
        #[prost(message, optional, tag = "2")]
        pub shape: Option<super::TensorShapeProto>,
    }
}

/// A tensor shape: one entry per dimension.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// The dimensions.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

/// Nested messages of [`TensorShapeProto`].
pub mod tensor_shape_proto {
    /// One dimension: a number, a symbol, or neither (unknown).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dimension {
        /// Static size.
        #[prost(int64, optional, tag = "1")]
        pub dim_value: Option<i64>,
        /// Symbolic name.
        #[prost(string, optional, tag = "2")]
        pub dim_param: Option<String>,
        /// Denotation of the dimension.
        #[prost(string, tag = "3")]
        pub denotation: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn attribute_roundtrip_keeps_every_kind() {
        let a = AttributeProto {
            name: "x".into(),
            r#type: attr_type::INTS,
            ints: vec![1, -2, 3],
            floats: vec![0.5],
            s: b"abc".to_vec(),
            t: Some(TensorProto {
                dims: vec![2],
                data_type: data_type::FLOAT,
                float_data: vec![1.0, 2.0],
                ..Default::default()
            }),
            g: Some(Box::new(GraphProto {
                name: "body".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let bytes = a.encode_to_vec();
        let b = AttributeProto::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(a, b);
    }

    #[test]
    fn field_numbers_match_onnx() {
        // A NodeProto with op_type "Relu" (field 4) and domain "d" (field 7), hand-encoded.
        let bytes = [0x22, 4, b'R', b'e', b'l', b'u', 0x3a, 1, b'd'];
        let n = NodeProto::decode(&bytes[..]).expect("decodes");
        assert_eq!(n.op_type, "Relu");
        assert_eq!(n.domain, "d");
        // dim_param is field 2 of Dimension.
        let d = tensor_shape_proto::Dimension::decode(&[0x12, 1, b'N'][..]).expect("decodes");
        assert_eq!(d.dim_param.as_deref(), Some("N"));
        assert_eq!(d.dim_value, None);
    }
}

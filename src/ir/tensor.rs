//! Element types and constant tensors held by the graph (weights, folded shapes).

use std::sync::Arc;

/// Element type of a tensor value. The numeric codes are ONNX's `TensorProto.DataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    F32,
    U8,
    I8,
    I32,
    I64,
    Bool,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
            DType::U8 | DType::I8 | DType::Bool => 1,
        }
    }

    /// The ONNX `TensorProto.DataType` code of this type.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
        }
    }

    /// The type for an ONNX `TensorProto.DataType` code, if we support it.
    pub fn from_onnx_code(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            _ => return None,
        })
    }

    /// Lower-case name used in messages and `vnpu info`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
}

/// The elements of a constant tensor, one vector per element type.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TensorData {
    F32(Vec<f32>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    /// Booleans stored as 0/1 bytes.
    Bool(Vec<u8>),
}

impl TensorData {
    /// Element type of the data.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::U8(_) => DType::U8,
            TensorData::I8(_) => DType::I8,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::U8(v) | TensorData::Bool(v) => v.len(),
            TensorData::I8(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::I64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A constant tensor: shape plus elements. Shared (`Arc`) between graph, plans and passes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tensor {
    /// Dimensions, outermost first; empty for a scalar.
    pub shape: Vec<usize>,
    /// The elements, row-major.
    pub data: TensorData,
}

impl Tensor {
    /// A new tensor; the caller guarantees `data.len()` equals the product of `shape`.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor { shape, data }
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor::new(shape, TensorData::F32(v))
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        Tensor::new(shape, TensorData::I64(v))
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements widened to i64 (integer and bool tensors), e.g. for shape arguments.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match &self.data {
            TensorData::I64(v) => v.clone(),
            TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U8(v) | TensorData::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::F32(_) => return None,
        })
    }

    /// The elements converted to f32 (any type).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            TensorData::F32(v) => v.clone(),
            TensorData::I64(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::U8(v) | TensorData::Bool(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// A shared constant.
pub type ConstRef = Arc<Tensor>;

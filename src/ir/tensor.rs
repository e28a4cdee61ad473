//! Element types and constant tensors held by the graph (weights, folded shapes).
//!
//! A constant's elements are either owned vectors or a view into bytes shared with an
//! owner (the memory map of a compiled file): loading borrows weights instead of copying
//! them. A view is made only by [`Tensor::mapped`], which checks length, alignment and
//! byte order first, so the typed accessors never fail on it.

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

/// Bytes borrowed from a shared owner (e.g. a read-only memory map), kept alive by it.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// The bytes `range` of `owner`; `None` when the range is not inside it.
    pub fn new(
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        range: std::ops::Range<usize>,
    ) -> Option<SharedBytes> {
        let len = range.end.checked_sub(range.start)?;
        ((*owner).as_ref().get(range.clone()))
            .is_some()
            .then_some(SharedBytes {
                owner,
                start: range.start,
                len,
            })
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // In range: checked by `new`, and the owner is immutable.
        (*self.owner)
            .as_ref()
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

/// A typed view of a tensor's elements, whatever their storage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Elems<'a> {
    F32(&'a [f32]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    /// Booleans as 0/1 bytes.
    Bool(&'a [u8]),
}

/// The elements of a constant tensor, one vector per element type, or a view into
/// shared bytes (little-endian, aligned and sized for `dtype`: see [`Tensor::mapped`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum TensorData {
    F32(Vec<f32>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    /// Booleans stored as 0/1 bytes.
    Bool(Vec<u8>),
    /// Elements borrowed from a compiled file's memory map (never serialised).
    #[serde(skip)]
    Mapped {
        dtype: DType,
        bytes: SharedBytes,
    },
}

impl PartialEq for TensorData {
    fn eq(&self, other: &Self) -> bool {
        self.elems() == other.elems()
    }
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
            TensorData::Mapped { dtype, .. } => *dtype,
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
            TensorData::Mapped { dtype, bytes } => bytes.as_bytes().len() / dtype.size(),
        }
    }

    /// The elements, typed, whatever their storage.
    pub fn elems(&self) -> Elems<'_> {
        match self {
            TensorData::F32(v) => Elems::F32(v),
            TensorData::U8(v) => Elems::U8(v),
            TensorData::Bool(v) => Elems::Bool(v),
            TensorData::I8(v) => Elems::I8(v),
            TensorData::I32(v) => Elems::I32(v),
            TensorData::I64(v) => Elems::I64(v),
            // Length and alignment were checked by `Tensor::mapped`; a failed cast would
            // only give an empty view.
            TensorData::Mapped { dtype, bytes } => {
                let b = bytes.as_bytes();
                match dtype {
                    DType::F32 => Elems::F32(bytemuck::try_cast_slice(b).unwrap_or(&[])),
                    DType::U8 => Elems::U8(b),
                    DType::Bool => Elems::Bool(b),
                    DType::I8 => Elems::I8(bytemuck::cast_slice(b)),
                    DType::I32 => Elems::I32(bytemuck::try_cast_slice(b).unwrap_or(&[])),
                    DType::I64 => Elems::I64(bytemuck::try_cast_slice(b).unwrap_or(&[])),
                }
            }
        }
    }

    /// The elements' bytes in native byte order.
    pub fn bytes(&self) -> &[u8] {
        match self.elems() {
            Elems::F32(v) => bytemuck::cast_slice(v),
            Elems::U8(v) | Elems::Bool(v) => v,
            Elems::I8(v) => bytemuck::cast_slice(v),
            Elems::I32(v) => bytemuck::cast_slice(v),
            Elems::I64(v) => bytemuck::cast_slice(v),
        }
    }

    /// True when the elements are borrowed from shared bytes rather than owned.
    pub fn is_mapped(&self) -> bool {
        matches!(self, TensorData::Mapped { .. })
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

    /// A tensor viewing `bytes` (little-endian elements of `dtype`) without copying;
    /// `None` when the length does not match `shape`, the bytes are not aligned for
    /// `dtype`, or this host is big-endian (the caller then copies with
    /// [`Tensor::from_le_bytes`]).
    pub fn mapped(shape: Vec<usize>, dtype: DType, bytes: SharedBytes) -> Option<Tensor> {
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
        let b = bytes.as_bytes();
        let fits = numel.checked_mul(dtype.size()) == Some(b.len())
            && (b.as_ptr() as usize).is_multiple_of(dtype.size())
            && cfg!(target_endian = "little");
        fits.then_some(Tensor {
            shape,
            data: TensorData::Mapped { dtype, bytes },
        })
    }

    /// A tensor copied from little-endian bytes; the caller guarantees
    /// `b.len() == numel * dtype.size()` (extra bytes are ignored).
    pub fn from_le_bytes(dtype: DType, shape: Vec<usize>, b: &[u8]) -> Tensor {
        fn words<const N: usize, T>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        let data = match dtype {
            DType::F32 => TensorData::F32(words(b, f32::from_le_bytes)),
            DType::U8 => TensorData::U8(b.to_vec()),
            DType::Bool => TensorData::Bool(b.to_vec()),
            DType::I8 => TensorData::I8(b.iter().map(|&x| x as i8).collect()),
            DType::I32 => TensorData::I32(words(b, i32::from_le_bytes)),
            DType::I64 => TensorData::I64(words(b, i64::from_le_bytes)),
        };
        Tensor { shape, data }
    }

    /// The elements, typed, whatever their storage.
    pub fn elems(&self) -> Elems<'_> {
        self.data.elems()
    }

    /// The elements' bytes in native byte order.
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
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
        match self.elems() {
            Elems::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements widened to i64 (integer and bool tensors), e.g. for shape arguments.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match self.elems() {
            Elems::I64(v) => v.to_vec(),
            Elems::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Elems::U8(v) | Elems::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            Elems::I8(v) => v.iter().map(|&x| x as i64).collect(),
            Elems::F32(_) => return None,
        })
    }

    /// The elements converted to f32 (any type).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self.elems() {
            Elems::F32(v) => v.to_vec(),
            Elems::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Elems::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Elems::U8(v) | Elems::Bool(v) => v.iter().map(|&x| x as f32).collect(),
            Elems::I8(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// A shared constant.
pub type ConstRef = Arc<Tensor>;

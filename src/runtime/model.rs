//! Loaded models and their tensor descriptions (what the C API reports).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};

/// `hbDNNTensorLayout` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum TensorLayout {
    Nhwc = 0,
    Nchw = 2,
    None = 255,
}

/// `hbDNNDataType` values (image types first, then tensor types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ElemType {
    ImgY = 0,
    ImgNv12 = 1,
    ImgNv12Separate = 2,
    ImgYuv444 = 3,
    ImgRgb = 4,
    ImgBgr = 5,
    S8 = 8,
    U8 = 9,
    F32 = 13,
    S32 = 14,
    S64 = 17,
}

/// Quantisation of a tensor (`hbDNNQuantiType` + its parameters).
#[derive(Debug, Clone, PartialEq)]
pub enum Quant {
    /// Not quantised.
    None,
    /// real = (q - zero_point[i]) * scale[i] along `axis` (len 1 = per tensor).
    Scale {
        axis: i32,
        scale: Vec<f32>,
        zero_point: Vec<i8>,
    },
}

/// Everything the C API reports about one model input or output.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    /// Tensor name.
    pub name: String,
    /// Logical shape.
    pub valid_shape: Vec<i32>,
    /// Padded shape (equal to `valid_shape` on this host).
    pub aligned_shape: Vec<i32>,
    /// Layout.
    pub layout: TensorLayout,
    /// Element / image type.
    pub elem: ElemType,
    /// Quantisation.
    pub quant: Quant,
    /// Bytes the caller allocates for this tensor.
    pub aligned_byte_size: usize,
    /// Byte step of each `valid_shape` dim (0 for NV12-style image inputs).
    pub stride: Vec<i32>,
}

/// One loaded model: its description plus the immutable execution plan.
#[derive(Debug)]
pub struct Model {
    /// Model name (unique in its packed model).
    pub name: String,
    /// Inputs in model order.
    pub inputs: Vec<TensorDesc>,
    /// Outputs in model order.
    pub outputs: Vec<TensorDesc>,
}

impl Model {
    /// The current latency estimate of one inference, in microseconds (measured moving
    /// average once the model has run, the compiler's estimate before).
    pub fn estimate_latency_us(&self) -> u64 {
        0
    }
}

/// One or more models loaded together (`hbPackedDNNHandle_t`).
#[derive(Debug)]
pub struct PackedModel {
    /// The models, in file order.
    pub models: Vec<Arc<Model>>,
}

impl PackedModel {
    /// Loads compiled model files (`.bin` from `vnpu compile`) and/or `.onnx` files
    /// (compiled on load, cached under `VNPU_CACHE_DIR` when set).
    pub fn load_files(paths: &[PathBuf]) -> Result<PackedModel> {
        let _ = paths;
        Err(Error::ApiUse("model loading is not built yet".into()))
    }

    /// Loads compiled models (or ONNX bytes) from memory.
    pub fn load_bytes(blobs: &[&[u8]]) -> Result<PackedModel> {
        let _ = blobs;
        Err(Error::ApiUse("model loading is not built yet".into()))
    }

    /// Model names in order.
    pub fn model_names(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.name.as_str()).collect()
    }

    /// The model with this name.
    pub fn model(&self, name: &str) -> Result<Arc<Model>> {
        self.models
            .iter()
            .find(|m| m.name == name)
            .cloned()
            .ok_or_else(|| Error::UnknownModel {
                name: name.into(),
                available: self.model_names().join(", "),
            })
    }
}

//! Loaded models and their tensor descriptions (what the C API reports).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::loader::{self, LoadSource};
use crate::compile::{CompileOptions, CompiledModel, IoKind, IoLayout, IoSpec};
use crate::error::{Error, Result};
use crate::exec::{ExecState, ModelPlan, PlanOptions};
use crate::ir::{DType, ImageFormat};

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
    S16 = 11,
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

/// One loaded model: its description plus the immutable execution plan, and a pool of
/// per-task execution states so that steady-state inference allocates nothing.
pub struct Model {
    /// Model name (unique in its packed model).
    pub name: String,
    /// Inputs in model order.
    pub inputs: Vec<TensorDesc>,
    /// Outputs in model order.
    pub outputs: Vec<TensorDesc>,
    /// The compiled model (graph, segments, FCs).
    pub compiled: Arc<CompiledModel>,
    /// The execution plan (packed weights, memory plan).
    pub plan: Arc<ModelPlan>,
    /// Process-unique id (the scheduler's estimator key).
    pub id: u64,
    states: Mutex<Vec<ExecState>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(1);

impl Model {
    /// Builds the execution plan of a compiled model.
    pub fn new(compiled: CompiledModel) -> Result<Model> {
        let graph = Arc::new(compiled.graph.clone());
        let opts = PlanOptions::for_model(compiled.precision)?;
        let plan = ModelPlan::with_packed(graph, &opts, &compiled.packed)?;
        crate::format::validate::validate_tiles(&compiled, |n| plan.tiles_for(n)).map_err(
            |reason| Error::ModelFormat {
                path: format!("model '{}'", compiled.name),
                reason,
            },
        )?;
        let inputs = compiled.inputs.iter().map(desc_of).collect();
        let outputs = compiled.outputs.iter().map(desc_of).collect();
        Ok(Model {
            name: compiled.name.clone(),
            inputs,
            outputs,
            compiled: Arc::new(compiled),
            plan: Arc::new(plan),
            id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
            states: Mutex::new(Vec::new()),
        })
    }

    /// The compiler's estimate of one inference, in microseconds.
    pub fn estimate_latency_us(&self) -> u64 {
        self.compiled.est_us().round() as u64
    }

    /// Takes an execution state from the pool (or makes one).
    pub fn take_state(&self) -> ExecState {
        self.states
            .lock()
            .pop()
            .unwrap_or_else(|| self.plan.new_state())
    }

    /// Returns an execution state to the pool.
    pub fn put_state(&self, st: ExecState) {
        let mut pool = self.states.lock();
        if pool.len() < 64 {
            pool.push(st);
        }
    }
}

/// The user-facing description of a boundary tensor.
fn desc_of(s: &IoSpec) -> TensorDesc {
    let (elem, layout) = match s.kind {
        IoKind::Image(fmt) => {
            let e = match fmt {
                ImageFormat::Nv12 => ElemType::ImgNv12,
                ImageFormat::Yuv444 => ElemType::ImgYuv444,
                ImageFormat::Rgb => ElemType::ImgRgb,
                ImageFormat::Bgr => ElemType::ImgBgr,
                ImageFormat::Gray => ElemType::ImgY,
            };
            (e, s.layout)
        }
        IoKind::Tensor => {
            let e = match s.dtype {
                DType::F32 => ElemType::F32,
                DType::U8 | DType::Bool => ElemType::U8,
                DType::I8 => ElemType::S8,
                DType::I32 => ElemType::S32,
                DType::I64 => ElemType::S64,
            };
            (e, s.layout)
        }
    };
    let layout = match layout {
        IoLayout::Nchw => TensorLayout::Nchw,
        IoLayout::Nhwc => TensorLayout::Nhwc,
        IoLayout::None => TensorLayout::None,
    };
    let (elem, quant, elem_size) = crate::quant::io::boundary_desc(s, elem);
    let shape: Vec<i32> = s.shape.iter().map(|&d| d as i32).collect();
    let stride = if s.kind == IoKind::Image(ImageFormat::Nv12) {
        vec![0; shape.len()]
    } else {
        let mut st = vec![0i32; shape.len()];
        let mut acc = elem_size as i64;
        for i in (0..shape.len()).rev() {
            st[i] = acc as i32;
            acc *= shape[i] as i64;
        }
        st
    };
    TensorDesc {
        name: s.name.clone(),
        valid_shape: shape.clone(),
        aligned_shape: shape,
        layout,
        elem,
        quant,
        aligned_byte_size: crate::quant::io::boundary_bytes(s),
        stride,
    }
}

/// `c` with its constants and packed weights in one buffer on huge pages when
/// `VNPU_HUGE_PAGES` is on, `c` holds no packed weights (compiled in this process: the
/// compiler gathered its constants on huge pages to measure, but keeps no packed
/// weights) and plans in f32: written in the file format and read back, as a compiled
/// file loads. Else (or where `c` cannot be written) `c` itself.
fn on_huge_pages(c: CompiledModel) -> Result<CompiledModel> {
    if !c.packed.is_empty() || !crate::huge_pages::for_weights()? {
        return Ok(c);
    }
    // A bf16 plan packs its own weights (on huge pages already): the f32 ones a file
    // stores would only take memory.
    if PlanOptions::for_model(c.precision)?.precision != crate::exec::Precision::F32 {
        return Ok(c);
    }
    let Ok(bytes) = crate::format::write_models(std::slice::from_ref(&c)) else {
        return Ok(c);
    };
    match crate::format::read_models(&bytes, &c.name) {
        Ok(mut ms) if ms.len() == 1 => Ok(ms.remove(0)),
        _ => Ok(c),
    }
}

/// One or more models loaded together (`hbPackedDNNHandle_t`).
#[derive(Debug)]
pub struct PackedModel {
    /// The models, in file order.
    pub models: Vec<Arc<Model>>,
    /// How each file was obtained (compiled file, compiled now, cache).
    pub sources: Vec<LoadSource>,
}

impl PackedModel {
    /// Loads compiled model files (`.bin` from `vnpu compile`) and/or `.onnx` files
    /// (compiled on load, cached under `VNPU_CACHE_DIR` when set).
    pub fn load_files(paths: &[PathBuf]) -> Result<PackedModel> {
        Self::load_files_with(paths, &CompileOptions::default())
    }

    /// As [`PackedModel::load_files`], with compile options for ONNX files.
    pub fn load_files_with(paths: &[PathBuf], opts: &CompileOptions) -> Result<PackedModel> {
        if paths.is_empty() {
            return Err(Error::InvalidArgument {
                name: "modelFileNames".into(),
                reason: "no model file given".into(),
            });
        }
        let mut compiled = Vec::new();
        let mut sources = Vec::new();
        for p in paths {
            let (ms, src) = loader::load_path(p, opts)?;
            compiled.extend(ms);
            sources.push(src);
        }
        Self::from_compiled(compiled, sources)
    }

    /// Loads compiled models (or ONNX bytes) from memory.
    pub fn load_bytes(blobs: &[&[u8]]) -> Result<PackedModel> {
        if blobs.is_empty() {
            return Err(Error::InvalidArgument {
                name: "modelData".into(),
                reason: "no model given".into(),
            });
        }
        let mut compiled = Vec::new();
        let mut sources = Vec::new();
        for (i, b) in blobs.iter().enumerate() {
            let (ms, src) = loader::load_bytes(b, i, &CompileOptions::default())?;
            compiled.extend(ms);
            sources.push(src);
        }
        Self::from_compiled(compiled, sources)
    }

    /// Wraps compiled models; names must be unique.
    pub fn from_compiled(
        compiled: Vec<CompiledModel>,
        sources: Vec<LoadSource>,
    ) -> Result<PackedModel> {
        let mut models = Vec::new();
        for c in compiled {
            if models.iter().any(|m: &Arc<Model>| m.name == c.name) {
                return Err(Error::ModelFormat {
                    path: "packed model".into(),
                    reason: format!("two models are named '{}'; compile one with --name", c.name),
                });
            }
            models.push(Arc::new(Model::new(on_huge_pages(c)?)?));
        }
        Ok(PackedModel { models, sources })
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

//! Calibration data: the samples post-training quantisation runs the f32 model on.
//!
//! Layout of the calibration directory DIR (samples are matched across inputs by file
//! stem and taken in sorted order):
//! - one-input model: `DIR/NNN.npy` (or `DIR/NNN.png|jpg` for an image input), or the
//!   same files under `DIR/INPUT_NAME/`;
//! - several inputs: `DIR/INPUT_NAME/NNN.npy` (images likewise) for every input.
//!
//! A `.npy` sample holds the ONNX input tensor (shape as the model declares it, or
//! without its leading batch dimension of 1; f64 is narrowed to f32), or — for an input
//! the compile config declares as an image (`input_type_rt`) — the raw runtime image
//! bytes (u8, the compiled model's input shape). Image files need such a declaration:
//! they are decoded, resized and converted by the same preprocessing node the compiled
//! model runs. Every sample is returned as the ONNX input tensors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::image;
use super::npy;
use crate::compile::{CompileOptions, InputParams, InputType};
use crate::error::{Error, Result};
use crate::ir::{DType, Graph, ImageFormat, Node, Op, Tensor, Value};

/// One model input as calibration sees it.
#[derive(Debug, Clone)]
pub struct CalibInput {
    /// Input name.
    pub name: String,
    /// Element type of the ONNX input.
    pub dtype: DType,
    /// Static shape of the ONNX input.
    pub shape: Vec<usize>,
    /// Runtime image settings from the compile config, when the input takes images.
    pub image: Option<InputParams>,
}

/// One calibration sample: a tensor per model input, in model input order.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The file stem the sample came from.
    pub name: String,
    /// The ONNX input tensors.
    pub inputs: Vec<Tensor>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::CompileOption {
        option: "calibration_data".into(),
        reason: reason.into(),
    }
}

/// The calibration view of the inputs of an imported (not yet compiled) graph, with the
/// image settings of `opts`. Every input must have a static shape.
pub fn calib_inputs(g: &Graph, opts: &CompileOptions) -> Result<Vec<CalibInput>> {
    g.inputs
        .iter()
        .map(|&v| {
            let val = &g.values[v];
            let shape = val.shape.clone().ok_or_else(|| {
                bad(format!(
                    "input '{}' has no static shape; fix it with input_shape",
                    val.name
                ))
            })?;
            let image = opts
                .inputs
                .iter()
                .find(|p| p.name == val.name && matches!(p.input_type, InputType::Image(_)))
                .cloned();
            Ok(CalibInput {
                name: val.name.clone(),
                dtype: val.dtype,
                shape,
                image,
            })
        })
        .collect()
}

/// The raw runtime shape of an image input whose ONNX tensor is `[n, c, h, w]`.
fn raw_shape(fmt: ImageFormat, nhwc: bool, s: &[usize]) -> Vec<usize> {
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    match fmt {
        ImageFormat::Nv12 => vec![n, h * 3 / 2, w],
        _ if nhwc => vec![n, h, w, c],
        _ => vec![n, c, h, w],
    }
}

/// Runs the preprocessing node the compiled model would run on raw image bytes.
fn preprocess(inp: &CalibInput, p: &InputParams, raw: Vec<u8>) -> Result<Tensor> {
    let InputType::Image(format) = p.input_type else {
        return Err(bad(format!("input '{}' is not an image input", inp.name)));
    };
    let rs = raw_shape(format, p.nhwc, &inp.shape);
    let mut g = Graph {
        name: "calibration_preprocess".into(),
        ..Graph::default()
    };
    let xt = Tensor::from_le_bytes(DType::U8, rs.clone(), &raw);
    let x = g.add_value(Value {
        name: format!("{}__raw", inp.name),
        dtype: DType::U8,
        shape: Some(rs),
        declared: None,
        konst: None,
    });
    let y = g.add_value(Value {
        name: inp.name.clone(),
        dtype: DType::F32,
        shape: Some(inp.shape.clone()),
        declared: None,
        konst: None,
    });
    let node = Node {
        name: format!("{}__preprocess", inp.name),
        op: Op::Preprocess {
            format,
            nhwc: p.nhwc,
            mean: p.mean.clone(),
            scale: p.scale.clone(),
            to_bgr: p.train_bgr,
        },
        inputs: vec![Some(x)],
        outputs: vec![y],
        absorbed: vec![],
        placement: None,
    };
    let mut out = crate::exec::eval_node(&g, &node, &[Some(&xt)])?;
    out.pop()
        .ok_or_else(|| bad(format!("preprocessing of '{}' gave no output", inp.name)))
}

/// Reads one sample file for `inp`.
fn load_file(path: &Path, inp: &CalibInput) -> Result<Tensor> {
    let dims = |s: &[usize]| {
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x")
    };
    if image::is_image(path) {
        let Some(p) = &inp.image else {
            return Err(bad(format!(
                "{}: an image file, but input '{}' takes a {:?} tensor {}; declare the \
                 input as an image (input_type_rt: rgb|bgr|nv12|yuv444|gray, with \
                 norm_type/mean_value/scale_value) or give .npy files",
                path.display(),
                inp.name,
                inp.dtype,
                dims(&inp.shape)
            )));
        };
        let InputType::Image(fmt) = p.input_type else {
            return Err(bad(format!("input '{}' is not an image input", inp.name)));
        };
        if inp.shape.len() != 4 || inp.shape[0] != 1 {
            return Err(bad(format!(
                "{}: input '{}' has shape {}; an image sample needs 1xCxHxW",
                path.display(),
                inp.name,
                dims(&inp.shape)
            )));
        }
        let raw = image::image_bytes(path, fmt, p.nhwc, inp.shape[2], inp.shape[3])?;
        return preprocess(inp, p, raw);
    }
    let t = npy::read_npy(path)?;
    let no_batch = inp.shape.first() == Some(&1) && t.shape.as_slice() == &inp.shape[1..];
    if t.dtype() == inp.dtype && (t.shape == inp.shape || no_batch) {
        return Ok(Tensor::new(inp.shape.clone(), t.data));
    }
    let mut expected = format!("{:?} {}", inp.dtype, dims(&inp.shape));
    if let Some(p) = &inp.image {
        if let InputType::Image(fmt) = p.input_type {
            let rs = raw_shape(fmt, p.nhwc, &inp.shape);
            let raw_no_batch = rs[0] == 1 && t.shape.as_slice() == &rs[1..];
            if t.dtype() == DType::U8 && (t.shape == rs || raw_no_batch) {
                let raw = t.bytes().to_vec();
                return preprocess(inp, p, raw);
            }
            expected += &format!(" or raw {fmt:?} image bytes U8 {}", dims(&rs));
        }
    }
    Err(bad(format!(
        "{}: {:?} {} does not match input '{}': expected {expected}",
        path.display(),
        t.dtype(),
        dims(&t.shape),
        inp.name
    )))
}

/// The sample files of one directory by stem; anything but `.npy` and images is an
/// error (hidden files are skipped).
fn list_samples(dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::Io {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut out = BTreeMap::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::Io {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let path = ent.path();
        let fname = ent.file_name().to_string_lossy().into_owned();
        if fname.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            return Err(bad(format!(
                "{}: unexpected directory among the samples of {}",
                path.display(),
                dir.display()
            )));
        }
        let is_npy = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npy"));
        if !is_npy && !image::is_image(&path) {
            return Err(bad(format!(
                "{}: not a calibration sample (expected .npy, or .png/.jpg for an image input)",
                path.display()
            )));
        }
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(prev) = out.insert(stem.clone(), path.clone()) {
            return Err(bad(format!(
                "{} and {} are the same sample '{stem}'",
                prev.display(),
                path.display()
            )));
        }
    }
    Ok(out)
}

/// Loads every sample of `dir` for the model inputs `inputs` (see the module doc).
pub fn load_samples(dir: &Path, inputs: &[CalibInput]) -> Result<Vec<Sample>> {
    if !dir.is_dir() {
        return Err(bad(format!("{} is not a directory", dir.display())));
    }
    let mut per_input = Vec::with_capacity(inputs.len());
    for inp in inputs {
        let sub = dir.join(&inp.name);
        let files = if sub.is_dir() {
            list_samples(&sub)?
        } else if inputs.len() == 1 {
            list_samples(dir)?
        } else {
            return Err(bad(format!(
                "{}: the model has {} inputs ({}); put each input's samples in DIR/INPUT_NAME/NNN.npy (no folder '{}')",
                dir.display(),
                inputs.len(),
                inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", "),
                inp.name
            )));
        };
        if files.is_empty() {
            return Err(bad(format!(
                "{} holds no calibration samples (NNN.npy{})",
                if sub.is_dir() {
                    sub.display()
                } else {
                    dir.display()
                },
                if inp.image.is_some() {
                    " or images"
                } else {
                    ""
                }
            )));
        }
        per_input.push(files);
    }
    let stems: Vec<String> = per_input[0].keys().cloned().collect();
    for (k, files) in per_input.iter().enumerate().skip(1) {
        if let Some(s) = stems.iter().find(|s| !files.contains_key(*s)) {
            return Err(bad(format!(
                "sample '{s}' of input '{}' has no file for input '{}'",
                inputs[0].name, inputs[k].name
            )));
        }
        if files.len() != stems.len() {
            return Err(bad(format!(
                "input '{}' has {} samples, input '{}' has {}",
                inputs[0].name,
                stems.len(),
                inputs[k].name,
                files.len()
            )));
        }
    }
    stems
        .into_iter()
        .map(|stem| {
            let tensors = inputs
                .iter()
                .zip(&per_input)
                .map(|(inp, files)| load_file(&files[&stem], inp))
                .collect::<Result<Vec<_>>>()?;
            Ok(Sample {
                name: stem,
                inputs: tensors,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;

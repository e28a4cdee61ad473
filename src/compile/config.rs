//! Compile options: from CLI flags or a toolchain-style YAML file.
//!
//! YAML sections (all optional but `model_parameters.onnx_model` when compiling from the
//! file alone):
//! ```yaml
//! model_parameters:
//!   onnx_model: model.onnx
//!   output_model_file_prefix: model      # -> model.bin
//!   run_on_cpu: [node_a, node_b]         # or "node_a;node_b"
//!   run_on_bpu: [node_c]
//! input_parameters:
//!   input_name: images                   # several inputs: "a;b" and per-input lists
//!   input_shape: 1x3x224x224
//!   input_type_rt: nv12                  # nv12|yuv444|rgb|bgr|gray|featuremap
//!   input_layout_rt: NCHW                # NHWC|NCHW
//!   input_type_train: rgb                # rgb|bgr: channel order the model was trained on
//!   norm_type: data_mean_and_scale       # no_preprocess|data_mean|data_scale|data_mean_and_scale
//!   mean_value: 123.675 116.28 103.53
//!   scale_value: 0.01712 0.01751 0.01743
//!   input_data_type: s8                  # s8: signed pixels (byte = pixel - 128); not nv12
//! output_parameters:
//!   output_name: "boxes;scores"          # or "all"; per-output lists like input_parameters
//!   output_type_rt: "s32;f32"            # f32 (dequantised, default) | s8 | s16 | s32
//!   quantize_axis: 3                     # optional: the per-channel axis of the scales
//!   cal_data_dir: calib/                 # samples giving quantised outputs their scales
//! compiler_parameters:
//!   max_time_per_fc: 1000
//!   optimize_level: O2                   # O0 = no fusion passes
//!   precision: bf16                      # f32 (default) | bf16: FCs timed and cut for it
//! calibration_parameters:                # post-training int8 quantisation (optional)
//!   cal_data_dir: calib/                 # NNN.npy, INPUT/NNN.npy or images
//!   calibration_type: max                # max | percentile | kl
//!   percentile: 99.99                    # for calibration_type percentile
//!   per_channel: true                    # weights per output channel (default true)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::exec::Precision;
use crate::ir::ImageFormat;

/// Runtime input type of one model input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputType {
    /// Raw tensor of the model's own type (f32 for images).
    FeatureMap,
    /// An image format; the compiled model converts and normalises it itself.
    Image(ImageFormat),
}

/// Per-input settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputParams {
    /// Input name.
    pub name: String,
    /// Fixed shape (overrides dynamic dims).
    pub shape: Option<Vec<usize>>,
    /// Runtime input type.
    pub input_type: InputType,
    /// Runtime layout: `true` = NHWC.
    pub nhwc: bool,
    /// The channel order the model expects (`true` = BGR).
    pub train_bgr: bool,
    /// Per-channel mean subtracted from pixels (empty = none).
    pub mean: Vec<f32>,
    /// Per-channel scale applied after the mean (empty = none).
    pub scale: Vec<f32>,
}

/// Element type of a model output at the API boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputType {
    /// Dequantised float (the default).
    F32,
    /// Signed 8-bit, `quantiType = SCALE`.
    S8,
    /// Signed 16-bit, `quantiType = SCALE`.
    S16,
    /// Signed 32-bit, `quantiType = SCALE`.
    S32,
}

/// The requested boundary type of one output (or of every output: name `all`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputParams {
    /// Output name, or `all`.
    pub name: String,
    /// Requested element type.
    pub output_type: OutputType,
    /// The per-channel axis of the scales (default: the channel axis of a 4-D output,
    /// per tensor otherwise).
    pub axis: Option<usize>,
}

/// Name standing for every output in [`OutputParams::name`].
pub const ALL_OUTPUTS: &str = "all";

/// How activation ranges are chosen from the calibration statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum CalibrationType {
    /// The observed minimum and maximum.
    Max,
    /// The given percentile of |x| (e.g. 99.99), clipped to the observed range.
    Percentile(f32),
    /// The threshold minimising the KL divergence between the histogram and its
    /// quantised version (TensorRT's / onnxruntime's entropy calibration).
    Kl,
}

/// Default percentile of `calibration_type: percentile`.
pub const DEFAULT_PERCENTILE: f32 = 99.99;

/// Post-training quantisation settings (`--quantize int8` / `calibration_parameters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizeOptions {
    /// Directory of calibration samples (see `vnpu::quant::data`).
    pub cal_data_dir: PathBuf,
    /// Range selection.
    pub calibration_type: CalibrationType,
    /// Weights with one scale per output channel (`true`) or one per tensor.
    pub per_channel: bool,
}

/// Parses a calibration type name (`max`, `percentile`, `kl`; also `entropy`, and
/// `percentile:99.9` with the percentile inline).
pub fn parse_calibration_type(s: &str, percentile: Option<f32>) -> Result<CalibrationType> {
    let s = s.trim().to_ascii_lowercase();
    let (name, inline) = match s.split_once([':', '=']) {
        Some((n, p)) => (n.to_string(), Some(p.to_string())),
        None => (s.clone(), None),
    };
    let pct = |v: Option<f32>| -> Result<f32> {
        let p = match inline.as_deref() {
            Some(t) => t.trim().parse::<f32>().map_err(|_| Error::CompileOption {
                option: "calibration_type".into(),
                reason: format!("'{t}' is not a percentile"),
            })?,
            None => v.unwrap_or(DEFAULT_PERCENTILE),
        };
        if p > 0.0 && p <= 100.0 {
            Ok(p)
        } else {
            Err(Error::CompileOption {
                option: "percentile".into(),
                reason: format!("{p} is not in (0, 100]"),
            })
        }
    };
    match name.as_str() {
        "max" | "minmax" => Ok(CalibrationType::Max),
        "percentile" => Ok(CalibrationType::Percentile(pct(percentile)?)),
        "kl" | "entropy" => Ok(CalibrationType::Kl),
        other => Err(Error::CompileOption {
            option: "calibration_type".into(),
            reason: format!("'{other}' is not one of max, percentile, kl"),
        }),
    }
}

/// Parses a boolean option (`true/false`, `yes/no`, `1/0`, `on/off`).
pub fn parse_bool(option: &str, s: &str) -> Result<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Ok(true),
        "false" | "no" | "0" | "off" => Ok(false),
        other => Err(Error::CompileOption {
            option: option.into(),
            reason: format!("'{other}' is not true or false"),
        }),
    }
}

/// Everything that changes how a model compiles. Part of the cache key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileOptions {
    /// Model name in the compiled file (default: the ONNX file stem).
    pub name: Option<String>,
    /// FC time limit in µs: 0 or 1000..=4294967295.
    pub max_time_per_fc: u64,
    /// Fixed shapes for inputs with dynamic dims.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// Per-input runtime type / layout / normalisation.
    pub inputs: Vec<InputParams>,
    /// Node names forced onto the CPU pool.
    pub run_on_cpu: Vec<String>,
    /// Node names forced onto the cores.
    pub run_on_bpu: Vec<String>,
    /// 0 = no fusion passes; ≥ 1 = all passes (default 2).
    pub optimize_level: u8,
    /// Inputs taking signed bytes (`byte = pixel - 128`); an empty name = the only input.
    pub signed_inputs: Vec<String>,
    /// Outputs of a quantised type (later entries override earlier ones).
    pub outputs: Vec<OutputParams>,
    /// Calibration samples for quantised outputs of a float model (`--calibration-data`
    /// without `--quantize`, `output_parameters.cal_data_dir`); when unset, those of
    /// `quantize` are used.
    pub calibration_data: Option<PathBuf>,
    /// Post-training int8 quantisation from calibration data (`None` = f32 model).
    pub quantize: Option<QuantizeOptions>,
    /// The precision node times are measured in, so that FCs are cut for it (`bf16`
    /// needs a CPU with AVX512_BF16); also the precision the model loads in when
    /// `VNPU_PRECISION` is unset and the CPU has it.
    pub precision: Precision,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            name: None,
            max_time_per_fc: 0,
            input_shapes: BTreeMap::new(),
            inputs: Vec::new(),
            run_on_cpu: Vec::new(),
            run_on_bpu: Vec::new(),
            optimize_level: 2,
            signed_inputs: Vec::new(),
            outputs: Vec::new(),
            calibration_data: None,
            quantize: None,
            precision: Precision::F32,
        }
    }
}

/// The compile precision named `v` (`f32` or `bf16`), or an
/// [`Error::CompileOption`] naming `precision`.
pub fn parse_precision(v: &str) -> Result<Precision> {
    Precision::parse(v).ok_or_else(|| Error::CompileOption {
        option: "precision".into(),
        reason: format!("'{v}' is not f32 or bf16"),
    })
}

/// Largest accepted `max_time_per_fc`.
pub const MAX_TIME_PER_FC_MAX: u64 = 4_294_967_295;
/// Smallest non-zero `max_time_per_fc`.
pub const MAX_TIME_PER_FC_MIN: u64 = 1000;

/// Checks `max_time_per_fc` against `0 | 1000..=4294967295`.
pub fn check_max_time_per_fc(v: u64) -> Result<()> {
    if v == 0 || (MAX_TIME_PER_FC_MIN..=MAX_TIME_PER_FC_MAX).contains(&v) {
        Ok(())
    } else {
        Err(Error::CompileOption {
            option: "max_time_per_fc".into(),
            reason: format!("{v} is out of range: use 0 (no limit) or 1000..=4294967295 (µs)"),
        })
    }
}

/// Parses an image/feature type name.
pub fn parse_input_type(s: &str) -> Result<InputType> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "nv12" => InputType::Image(ImageFormat::Nv12),
        "yuv444" => InputType::Image(ImageFormat::Yuv444),
        "rgb" => InputType::Image(ImageFormat::Rgb),
        "bgr" => InputType::Image(ImageFormat::Bgr),
        "gray" => InputType::Image(ImageFormat::Gray),
        "featuremap" => InputType::FeatureMap,
        other => {
            return Err(Error::CompileOption {
                option: "input_type_rt".into(),
                reason: format!("'{other}' is not one of nv12, yuv444, rgb, bgr, gray, featuremap"),
            })
        }
    })
}

/// Parses an output type name (`f32`, `s8`, `s16`, `s32`; `float32`, `int8`, ... too).
pub fn parse_output_type(s: &str) -> Result<OutputType> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "f32" | "float" | "float32" => OutputType::F32,
        "s8" | "int8" => OutputType::S8,
        "s16" | "int16" => OutputType::S16,
        "s32" | "int32" => OutputType::S32,
        other => {
            return Err(Error::CompileOption {
                option: "output_type".into(),
                reason: format!("'{other}' is not one of f32, s8, s16, s32"),
            })
        }
    })
}

/// Parses `NAME=TYPE` (the `--output-type` flag; NAME may be `all`).
pub fn parse_output_flag(s: &str) -> Result<OutputParams> {
    let (name, ty) = s.rsplit_once('=').ok_or_else(|| Error::CompileOption {
        option: "output_type".into(),
        reason: format!("'{s}' is not NAME=TYPE (e.g. boxes=s32, all=s8)"),
    })?;
    if name.trim().is_empty() {
        return Err(Error::CompileOption {
            option: "output_type".into(),
            reason: format!("'{s}' names no output (use NAME=TYPE or all=TYPE)"),
        });
    }
    Ok(OutputParams {
        name: name.trim().to_string(),
        output_type: parse_output_type(ty)?,
        axis: None,
    })
}

/// Parses an input data type: `true` for `s8` (signed pixels), `false` for the default
/// (`u8` images, `f32` feature maps).
pub fn parse_input_data_type(s: &str) -> Result<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "s8" | "int8" => Ok(true),
        "u8" | "uint8" | "f32" | "float32" | "default" => Ok(false),
        other => Err(Error::CompileOption {
            option: "input_data_type".into(),
            reason: format!("'{other}' is not s8 or u8 (images) / f32 (featuremap)"),
        }),
    }
}

/// Parses a layout name; returns `true` for NHWC.
pub fn parse_layout(s: &str) -> Result<bool> {
    match s.trim().to_ascii_uppercase().as_str() {
        "NHWC" => Ok(true),
        "NCHW" => Ok(false),
        other => Err(Error::CompileOption {
            option: "input_layout_rt".into(),
            reason: format!("'{other}' is not NHWC or NCHW"),
        }),
    }
}

/// Parses a shape written `1x3x224x224` or `1,3,224,224`.
pub fn parse_shape(s: &str) -> Result<Vec<usize>> {
    s.split(['x', ',', 'X'])
        .map(|d| {
            d.trim().parse::<usize>().map_err(|_| Error::CompileOption {
                option: "input_shape".into(),
                reason: format!("'{s}' is not a shape like 1x3x224x224"),
            })
        })
        .collect()
}

/// Parses numbers separated by spaces, commas or semicolons.
pub fn parse_floats(option: &str, s: &str) -> Result<Vec<f32>> {
    s.split([' ', ',', ';'])
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<f32>().map_err(|_| Error::CompileOption {
                option: option.into(),
                reason: format!("'{t}' is not a number"),
            })
        })
        .collect()
}

/// A config file read from YAML: the options plus the model paths it names.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Options to compile with.
    pub options: CompileOptions,
    /// `model_parameters.onnx_model`, relative to the config file.
    pub onnx_model: Option<PathBuf>,
    /// `model_parameters.output_model_file_prefix`.
    pub output_prefix: Option<String>,
}

fn yaml_str(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        serde_yaml::Value::Sequence(items) => Some(
            items
                .iter()
                .filter_map(yaml_str)
                .collect::<Vec<_>>()
                .join(";"),
        ),
        _ => None,
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(';')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// Keys accepted in `model_parameters`.
const MODEL_KEYS: &[&str] = &[
    "onnx_model",
    "output_model_file_prefix",
    "run_on_cpu",
    "run_on_bpu",
];
/// Keys accepted in `input_parameters`.
const INPUT_KEYS: &[&str] = &[
    "input_name",
    "input_shape",
    "input_type_rt",
    "input_layout_rt",
    "input_type_train",
    "norm_type",
    "mean_value",
    "scale_value",
    "input_data_type",
];
/// Keys accepted in `output_parameters`.
const OUTPUT_KEYS: &[&str] = &[
    "output_name",
    "output_type_rt",
    "quantize_axis",
    "cal_data_dir",
];
/// Keys accepted in `compiler_parameters`.
const COMPILER_KEYS: &[&str] = &["max_time_per_fc", "optimize_level", "precision"];
/// Keys accepted in `calibration_parameters`.
const CALIBRATION_KEYS: &[&str] = &[
    "cal_data_dir",
    "calibration_type",
    "percentile",
    "per_channel",
];

/// Edit distance between two short keys (typo suggestions).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The valid key closest to `key` (by edit distance).
pub fn closest_key<'a>(key: &str, valid: &[&'a str]) -> Option<&'a str> {
    valid
        .iter()
        .min_by_key(|v| edit_distance(&key.to_ascii_lowercase(), v))
        .copied()
}

/// Rejects keys of a YAML mapping that are not in `valid`, naming the closest valid one.
/// `section` is empty for the top level.
fn check_keys(map: &serde_yaml::Value, section: &str, valid: &[&str]) -> Result<()> {
    let Some(map) = map.as_mapping() else {
        return Ok(());
    };
    for k in map.keys() {
        let k = yaml_str(k).unwrap_or_default();
        if valid.contains(&k.as_str()) {
            continue;
        }
        let place = if section.is_empty() {
            "unknown section".to_string()
        } else {
            format!("unknown key in {section}:")
        };
        let hint = closest_key(&k, valid)
            .map(|c| format!("; did you mean '{c}'?"))
            .unwrap_or_default();
        return Err(Error::CompileOption {
            option: "config".into(),
            reason: format!("{place} '{k}'{hint} (valid: {})", valid.join(", ")),
        });
    }
    Ok(())
}

/// Reads a YAML compile config.
pub fn load_config(path: &Path) -> Result<ConfigFile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    parse_config(&text, path.parent().unwrap_or(Path::new(".")))
}

/// Parses YAML config text; relative paths resolve against `base`.
pub fn parse_config(text: &str, base: &Path) -> Result<ConfigFile> {
    let bad = |key: &str, reason: String| Error::CompileOption {
        option: key.into(),
        reason,
    };
    let root: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| bad("config", e.to_string()))?;
    let section = |name: &str| root.get(name).cloned().unwrap_or(serde_yaml::Value::Null);
    let get = |sec: &serde_yaml::Value, key: &str| sec.get(key).and_then(yaml_str);
    let known = [
        "model_parameters",
        "input_parameters",
        "output_parameters",
        "calibration_parameters",
        "compiler_parameters",
        "calibration_parameters",
    ];
    check_keys(&root, "", &known)?;
    for (sec, keys) in [
        ("model_parameters", MODEL_KEYS),
        ("input_parameters", INPUT_KEYS),
        ("output_parameters", OUTPUT_KEYS),
        ("calibration_parameters", CALIBRATION_KEYS),
        ("compiler_parameters", COMPILER_KEYS),
        ("calibration_parameters", CALIBRATION_KEYS),
    ] {
        check_keys(&section(sec), sec, keys)?;
    }
    let mut o = CompileOptions::default();
    let mp = section("model_parameters");
    let onnx_model = get(&mp, "onnx_model").map(|p| base.join(p));
    let output_prefix = get(&mp, "output_model_file_prefix");
    o.run_on_cpu = get(&mp, "run_on_cpu")
        .map(|s| split_list(&s))
        .unwrap_or_default();
    o.run_on_bpu = get(&mp, "run_on_bpu")
        .map(|s| split_list(&s))
        .unwrap_or_default();

    let ip = section("input_parameters");
    let names = get(&ip, "input_name")
        .map(|s| split_list(&s))
        .unwrap_or_default();
    let per =
        |key: &str| -> Vec<String> { get(&ip, key).map(|s| split_list(&s)).unwrap_or_default() };
    let (shapes, types, layouts, train) = (
        per("input_shape"),
        per("input_type_rt"),
        per("input_layout_rt"),
        per("input_type_train"),
    );
    let (norms, means, scales) = (per("norm_type"), per("mean_value"), per("scale_value"));
    let data_types = per("input_data_type");
    for (i, name) in names.iter().enumerate() {
        let pick = |v: &Vec<String>| {
            v.get(i)
                .or(if v.len() == 1 { v.first() } else { None })
                .cloned()
        };
        let shape = pick(&shapes).map(|s| parse_shape(&s)).transpose()?;
        if let Some(s) = &shape {
            o.input_shapes.insert(name.clone(), s.clone());
        }
        let input_type = pick(&types)
            .map(|s| parse_input_type(&s))
            .transpose()?
            .unwrap_or(InputType::FeatureMap);
        let nhwc = pick(&layouts)
            .map(|s| parse_layout(&s))
            .transpose()?
            .unwrap_or(false);
        let train_bgr = match pick(&train).map(|s| s.to_ascii_lowercase()) {
            None => false,
            Some(s) if s == "rgb" || s == "featuremap" => false,
            Some(s) if s == "bgr" => true,
            Some(s) => return Err(bad("input_type_train", format!("'{s}' is not rgb or bgr"))),
        };
        if pick(&data_types)
            .map(|s| parse_input_data_type(&s))
            .transpose()?
            .unwrap_or(false)
        {
            o.signed_inputs.push(name.clone());
        }
        let norm = pick(&norms).unwrap_or_else(|| "no_preprocess".into());
        let mean = pick(&means)
            .map(|s| parse_floats("mean_value", &s))
            .transpose()?
            .unwrap_or_default();
        let scale = pick(&scales)
            .map(|s| parse_floats("scale_value", &s))
            .transpose()?
            .unwrap_or_default();
        let (mean, scale) = match norm.as_str() {
            "no_preprocess" => (vec![], vec![]),
            "data_mean" => (mean, vec![]),
            "data_scale" => (vec![], scale),
            "data_mean_and_scale" => (mean, scale),
            other => {
                return Err(bad(
                    "norm_type",
                    format!(
                    "'{other}' is not no_preprocess, data_mean, data_scale or data_mean_and_scale"
                ),
                ))
            }
        };
        o.inputs.push(InputParams {
            name: name.clone(),
            shape,
            input_type,
            nhwc,
            train_bgr,
            mean,
            scale,
        });
    }
    o.outputs = output_params(&section("output_parameters"))?;
    o.calibration_data = get(&section("output_parameters"), "cal_data_dir").map(|p| base.join(p));
    let cp = section("compiler_parameters");
    if let Some(v) = get(&cp, "max_time_per_fc") {
        let n: u64 = v
            .trim()
            .parse()
            .map_err(|_| bad("max_time_per_fc", format!("'{v}' is not a number")))?;
        check_max_time_per_fc(n)?;
        o.max_time_per_fc = n;
    }
    if let Some(v) = get(&cp, "optimize_level") {
        o.optimize_level = match v.trim().trim_start_matches(['O', 'o']).parse::<u8>() {
            Ok(n) if n <= 3 => n,
            _ => return Err(bad("optimize_level", format!("'{v}' is not O0..O3"))),
        };
    }
    if let Some(v) = get(&cp, "precision") {
        o.precision = parse_precision(&v)?;
    }
    let cal = section("calibration_parameters");
    if !cal.is_null() {
        let dir = get(&cal, "cal_data_dir").ok_or_else(|| {
            bad(
                "cal_data_dir",
                "calibration_parameters needs cal_data_dir (the calibration samples)".into(),
            )
        })?;
        let percentile = get(&cal, "percentile")
            .map(|p| {
                p.trim()
                    .parse::<f32>()
                    .map_err(|_| bad("percentile", format!("'{p}' is not a number")))
            })
            .transpose()?;
        let calibration_type = match get(&cal, "calibration_type") {
            Some(t) => parse_calibration_type(&t, percentile)?,
            None if percentile.is_some() => parse_calibration_type("percentile", percentile)?,
            None => CalibrationType::Max,
        };
        let per_channel = get(&cal, "per_channel")
            .map(|v| parse_bool("per_channel", &v))
            .transpose()?
            .unwrap_or(true);
        o.quantize = Some(QuantizeOptions {
            cal_data_dir: base.join(dir),
            calibration_type,
            per_channel,
        });
    }
    Ok(ConfigFile {
        options: o,
        onnx_model,
        output_prefix,
    })
}

/// The `output_parameters` section: per-output lists (`a;b`), one value for all.
fn output_params(sec: &serde_yaml::Value) -> Result<Vec<OutputParams>> {
    let per = |key: &str| -> Vec<String> {
        sec.get(key)
            .and_then(yaml_str)
            .map(|s| split_list(&s))
            .unwrap_or_default()
    };
    let (names, types, axes) = (
        per("output_name"),
        per("output_type_rt"),
        per("quantize_axis"),
    );
    if names.is_empty() && !(types.is_empty() && axes.is_empty()) {
        return Err(Error::CompileOption {
            option: "output_name".into(),
            reason: "output_parameters needs output_name (an output name list, or all)".into(),
        });
    }
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let pick = |v: &Vec<String>| {
            v.get(i)
                .or(if v.len() == 1 { v.first() } else { None })
                .cloned()
        };
        let output_type = pick(&types)
            .map(|s| parse_output_type(&s))
            .transpose()?
            .unwrap_or(OutputType::F32);
        let axis = pick(&axes)
            .map(|s| {
                s.trim().parse::<usize>().map_err(|_| Error::CompileOption {
                    option: "quantize_axis".into(),
                    reason: format!("'{s}' is not an axis number"),
                })
            })
            .transpose()?;
        out.push(OutputParams {
            name: name.clone(),
            output_type,
            axis,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config_parses() {
        let text = r#"
model_parameters:
  onnx_model: m.onnx
  output_model_file_prefix: out
  run_on_cpu: [a, b]
  run_on_bpu: "c"
input_parameters:
  input_name: images
  input_shape: 1x3x224x224
  input_type_rt: nv12
  input_layout_rt: NCHW
  norm_type: data_mean_and_scale
  mean_value: 123.675 116.28 103.53
  scale_value: 0.01712 0.01751 0.01743
compiler_parameters:
  max_time_per_fc: 1000
  optimize_level: O2
  precision: bf16
"#;
        let c = parse_config(text, Path::new("/tmp")).unwrap();
        assert_eq!(c.onnx_model, Some(PathBuf::from("/tmp/m.onnx")));
        assert_eq!(c.output_prefix.as_deref(), Some("out"));
        assert_eq!(c.options.run_on_cpu, vec!["a", "b"]);
        assert_eq!(c.options.run_on_bpu, vec!["c"]);
        assert_eq!(c.options.max_time_per_fc, 1000);
        assert_eq!(c.options.precision, Precision::Bf16);
        let i = &c.options.inputs[0];
        assert_eq!(i.input_type, InputType::Image(ImageFormat::Nv12));
        assert_eq!(i.mean.len(), 3);
        assert_eq!(c.options.input_shapes["images"], vec![1, 3, 224, 224]);
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = parse_config(
            "compiler_parameters:\n  max_time_per_fc: 500\n",
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.to_string().contains("1000..=4294967295"), "{e}");
        let e = parse_config(
            "input_parameters:\n  input_name: x\n  input_type_rt: jpeg\n",
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.to_string().contains("input_type_rt"), "{e}");
        let e =
            parse_config("compiler_parameters:\n  precision: fp16\n", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("precision"), "{e}");
        let e = parse_config("bogus: 1\n", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn unknown_keys_name_the_closest_valid_one() {
        let e = parse_config(
            "compiler_parameters:\n  max_time_per_fcc: 1000\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'max_time_per_fcc'"), "{e}");
        assert!(e.contains("did you mean 'max_time_per_fc'"), "{e}");
        let e = parse_config("input_paramters:\n  input_name: x\n", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'input_parameters'"), "{e}");
        let e = parse_config("input_parameters:\n  mean_values: 1 2 3\n", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'mean_value'"), "{e}");
    }

    #[test]
    fn output_and_input_types_parse() {
        let text = "input_parameters:\n  input_name: images\n  input_type_rt: rgb\n  \
                    input_data_type: s8\noutput_parameters:\n  output_name: [boxes, scores]\n  \
                    output_type_rt: s32;f32\n  quantize_axis: 3\n";
        let c = parse_config(text, Path::new(".")).unwrap();
        assert_eq!(c.options.signed_inputs, vec!["images"]);
        let cal = parse_config(
            "output_parameters:\n  output_name: all\n  output_type_rt: s8\n  cal_data_dir: cal\n",
            Path::new("/m"),
        )
        .unwrap();
        assert_eq!(cal.options.calibration_data, Some(PathBuf::from("/m/cal")));
        assert!(cal.options.quantize.is_none());
        assert_eq!(
            c.options.outputs,
            vec![
                OutputParams {
                    name: "boxes".into(),
                    output_type: OutputType::S32,
                    axis: Some(3)
                },
                OutputParams {
                    name: "scores".into(),
                    output_type: OutputType::F32,
                    axis: Some(3)
                },
            ]
        );
        let e = parse_config("output_parameters:\n  output_typ_rt: s8\n", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'output_type_rt'"), "{e}");
        let e = parse_config("output_parameters:\n  output_type_rt: s8\n", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output_name"), "{e}");
        let e = parse_config(
            "output_parameters:\n  output_name: all\n  output_type_rt: u4\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'u4'") && e.contains("s32"), "{e}");
        let p = parse_output_flag("all=S8").unwrap();
        assert_eq!((p.name.as_str(), p.output_type), ("all", OutputType::S8));
        assert!(parse_output_flag("s32").is_err());
        assert!(parse_output_flag("=s32").is_err());
        assert!(parse_input_data_type("s8").unwrap());
        assert!(!parse_input_data_type("u8").unwrap());
        assert!(parse_input_data_type("s4").is_err());
    }

    #[test]
    fn calibration_parameters_parse() {
        let c = parse_config(
            "calibration_parameters:\n  cal_data_dir: cal\n  calibration_type: percentile\n  percentile: 99.9\n  per_channel: false\n",
            Path::new("/m"),
        )
        .unwrap();
        let q = c.options.quantize.unwrap();
        assert_eq!(q.cal_data_dir, PathBuf::from("/m/cal"));
        assert_eq!(q.calibration_type, CalibrationType::Percentile(99.9));
        assert!(!q.per_channel);
        let c = parse_config(
            "calibration_parameters:\n  cal_data_dir: /abs\n  calibration_type: kl\n",
            Path::new("/m"),
        )
        .unwrap();
        let q = c.options.quantize.unwrap();
        assert_eq!(q.cal_data_dir, PathBuf::from("/abs"));
        assert_eq!(q.calibration_type, CalibrationType::Kl);
        assert!(q.per_channel);
        let e = parse_config(
            "calibration_parameters:\n  calibration_type: kl\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cal_data_dir"), "{e}");
        let e = parse_config(
            "calibration_parameters:\n  cal_data_dir: x\n  calibration_typ: kl\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("did you mean 'calibration_type'"), "{e}");
        let e = parse_config(
            "calibration_parameters:\n  cal_data_dir: x\n  calibration_type: mse\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("max, percentile, kl"), "{e}");
        assert_eq!(
            parse_calibration_type("percentile:99.5", None).unwrap(),
            CalibrationType::Percentile(99.5)
        );
        assert!(parse_calibration_type("percentile", Some(120.0)).is_err());
    }

    #[test]
    fn max_time_range() {
        assert!(check_max_time_per_fc(0).is_ok());
        assert!(check_max_time_per_fc(1000).is_ok());
        assert!(check_max_time_per_fc(4_294_967_295).is_ok());
        assert!(check_max_time_per_fc(999).is_err());
        assert!(check_max_time_per_fc(4_294_967_296).is_err());
    }
}

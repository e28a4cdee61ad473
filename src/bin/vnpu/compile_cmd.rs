//! `vnpu compile` and `vnpu info`.

use std::path::{Path, PathBuf};

use vnpu::compile::{self, config, CompileOptions, InputParams, InputType};
use vnpu::format;

use crate::args::Args;

const COMPILE_VALUED: &[&str] = &[
    "o",
    "output",
    "config",
    "max_time_per_fc",
    "input_shape",
    "input_name",
    "input_type_rt",
    "input_layout_rt",
    "input_type_train",
    "mean",
    "mean_value",
    "scale",
    "scale_value",
    "name",
    "run_on_cpu",
    "run_on_bpu",
    "optimize_level",
    "precision",
    "output_type",
    "input_data_type",
    "quantize",
    "calibration_data",
    "calibration_type",
    "percentile",
    "per_channel",
];

/// Compile options from flags (on top of a YAML config when given).
fn options_from(a: &Args, opts: &mut CompileOptions) -> Result<(), String> {
    let e = |e: vnpu::Error| e.to_string();
    if let Some(v) = a.get("max_time_per_fc") {
        let n: u64 = v
            .parse()
            .map_err(|_| format!("--max-time-per-fc expects a number of µs, got '{v}'"))?;
        config::check_max_time_per_fc(n).map_err(e)?;
        opts.max_time_per_fc = n;
    }
    if let Some(v) = a.get("optimize_level") {
        opts.optimize_level = v
            .trim_start_matches(['O', 'o'])
            .parse()
            .map_err(|_| format!("--optimize-level: '{v}' is not O0..O3"))?;
    }
    if let Some(n) = a.get("name") {
        opts.name = Some(n.to_string());
    }
    if let Some(v) = a.get("precision") {
        opts.precision = config::parse_precision(v).map_err(e)?;
    }
    for v in a.all("output_type") {
        opts.outputs.push(config::parse_output_flag(&v).map_err(e)?);
    }
    if let Some(v) = a.get("input_data_type") {
        // `NAME=s8` or `s8` (the --input-name input, else the model's only input).
        let (name, ty) = match v.split_once('=') {
            Some((n, t)) => (n.to_string(), t),
            None => (a.get("input_name").unwrap_or("").to_string(), v),
        };
        opts.signed_inputs.retain(|n| n != &name);
        if config::parse_input_data_type(ty).map_err(e)? {
            opts.signed_inputs.push(name);
        }
    }
    quantize_from(a, opts)?;
    opts.run_on_cpu.extend(a.list("run_on_cpu"));
    opts.run_on_bpu.extend(a.list("run_on_bpu"));
    for s in a.all("input_shape") {
        match s.split_once('=') {
            Some((name, shape)) => {
                opts.input_shapes
                    .insert(name.to_string(), config::parse_shape(shape).map_err(e)?);
            }
            None => {
                let name = a
                    .get("input_name")
                    .ok_or("--input-shape without NAME= needs --input-name")?;
                opts.input_shapes
                    .insert(name.to_string(), config::parse_shape(&s).map_err(e)?);
            }
        }
    }
    let wants_input = [
        "input_type_rt",
        "input_layout_rt",
        "mean",
        "mean_value",
        "scale",
        "scale_value",
        "input_type_train",
    ]
    .iter()
    .any(|k| a.get(k).is_some());
    if wants_input {
        let name = match a.get("input_name") {
            Some(n) => n.to_string(),
            None => String::new(), // resolved to the model's only input below
        };
        let input_type = a
            .get("input_type_rt")
            .map(config::parse_input_type)
            .transpose()
            .map_err(e)?
            .unwrap_or(InputType::FeatureMap);
        let nhwc = a
            .get("input_layout_rt")
            .map(config::parse_layout)
            .transpose()
            .map_err(e)?
            .unwrap_or(false);
        let mean = a
            .get("mean")
            .or(a.get("mean_value"))
            .map(|s| config::parse_floats("mean", s))
            .transpose()
            .map_err(e)?
            .unwrap_or_default();
        let scale = a
            .get("scale")
            .or(a.get("scale_value"))
            .map(|s| config::parse_floats("scale", s))
            .transpose()
            .map_err(e)?
            .unwrap_or_default();
        let train_bgr =
            matches!(a.get("input_type_train"), Some(t) if t.eq_ignore_ascii_case("bgr"));
        opts.inputs.retain(|p| p.name != name);
        opts.inputs.push(InputParams {
            name,
            shape: None,
            input_type,
            nhwc,
            train_bgr,
            mean,
            scale,
        });
    }
    Ok(())
}

/// `--quantize int8 --calibration-data DIR [--calibration-type T] [--percentile P]
/// [--per-channel B]`, on top of a YAML `calibration_parameters` section.
fn quantize_from(a: &Args, opts: &mut CompileOptions) -> Result<(), String> {
    let e = |e: vnpu::Error| e.to_string();
    match a.get("quantize").map(|q| q.to_ascii_lowercase()) {
        None => {}
        Some(q) if q == "int8" => {}
        Some(q) if q == "none" || q == "f32" => {
            opts.quantize = None;
            return Ok(());
        }
        Some(q) => return Err(format!("--quantize: '{q}' is not int8 (or none)")),
    }
    let cal_flags = [
        "calibration_data",
        "calibration_type",
        "percentile",
        "per_channel",
    ];
    let any_cal_flag = cal_flags.iter().any(|k| a.get(k).is_some());
    if a.get("quantize").is_none() {
        let only_data = cal_flags[1..].iter().all(|k| a.get(k).is_none());
        if any_cal_flag && only_data && opts.quantize.is_none() && !opts.outputs.is_empty() {
            // A float model whose quantised outputs (--output-type) are calibrated.
            opts.calibration_data = a.get("calibration_data").map(PathBuf::from);
            return Ok(());
        }
        if any_cal_flag && opts.quantize.is_none() {
            return Err(
                "--calibration-data/--calibration-type/--per-channel need --quantize int8 (or, \
                 --calibration-data alone, --output-type)"
                    .into(),
            );
        }
        if !any_cal_flag {
            return Ok(());
        }
    }
    let dir = a
        .get("calibration_data")
        .map(PathBuf::from)
        .or_else(|| opts.quantize.as_ref().map(|q| q.cal_data_dir.clone()))
        .ok_or(
            "--quantize int8 needs --calibration-data DIR (NNN.npy per sample, INPUT/NNN.npy \
             for several inputs, or images for an image input), or calibration_parameters \
             in the --config YAML",
        )?;
    let percentile = a
        .get("percentile")
        .map(|p| {
            p.parse::<f32>()
                .map_err(|_| format!("--percentile: '{p}' is not a number"))
        })
        .transpose()?;
    let calibration_type = match (a.get("calibration_type"), &opts.quantize) {
        (Some(t), _) => config::parse_calibration_type(t, percentile).map_err(e)?,
        (None, _) if percentile.is_some() => {
            config::parse_calibration_type("percentile", percentile).map_err(e)?
        }
        (None, Some(q)) => q.calibration_type,
        (None, None) => config::CalibrationType::Max,
    };
    let per_channel = match a.get("per_channel") {
        Some(v) => config::parse_bool("per_channel", v).map_err(e)?,
        None => opts.quantize.as_ref().is_none_or(|q| q.per_channel),
    };
    opts.quantize = Some(config::QuantizeOptions {
        cal_data_dir: dir,
        calibration_type,
        per_channel,
    });
    Ok(())
}

/// Points a dynamic-dimension error at the flag that fixes it.
fn explain_import_error(e: vnpu::Error) -> String {
    let msg = e.to_string();
    if msg.contains("is dynamic") || msg.contains("has no shape") {
        format!("{msg}; give its shape with --input-shape NAME=1x3x224x224 (or input_shape in the --config YAML)")
    } else {
        msg
    }
}

/// Imports the ONNX file once before compiling: fills an empty input name with the
/// model's only input name and reports inputs whose dynamic batch dim is fixed to 1.
fn inspect_inputs(path: &Path, opts: &mut CompileOptions) -> Result<(), String> {
    let bytes = vnpu::onnx::read_model_file(path, vnpu::onnx::MAX_ONNX_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    let g = vnpu::onnx::import_model(
        &bytes,
        &vnpu::onnx::ImportOptions {
            base_dir: path.parent().map(|p| p.to_path_buf()),
            input_shapes: opts.input_shapes.clone().into_iter().collect(),
            model_name: None,
            ..Default::default()
        },
    )
    .map_err(explain_import_error)?;
    for &v in &g.inputs {
        let val = &g.values[v];
        let dynamic_batch = val
            .declared
            .as_ref()
            .is_some_and(|d| d.first().is_some_and(|d0| d0.is_none()));
        if dynamic_batch && !opts.input_shapes.contains_key(&val.name) {
            let shape = val
                .shape
                .as_ref()
                .map(|s| {
                    s.iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join("x")
                })
                .unwrap_or_default();
            eprintln!(
                "note: input '{}' has a dynamic batch dimension; compiled with batch 1 (shape {shape}); \
                 choose another with --input-shape {}=<N>x...",
                val.name, val.name
            );
        }
    }
    if !opts.inputs.iter().any(|p| p.name.is_empty())
        && !opts.signed_inputs.iter().any(|n| n.is_empty())
    {
        return Ok(());
    }
    if g.inputs.len() != 1 {
        return Err(format!(
            "{} has {} inputs; name one with --input-name",
            path.display(),
            g.inputs.len()
        ));
    }
    let name = g.values[g.inputs[0]].name.clone();
    for p in opts.inputs.iter_mut().filter(|p| p.name.is_empty()) {
        p.name = name.clone();
    }
    for n in opts.signed_inputs.iter_mut().filter(|n| n.is_empty()) {
        *n = name.clone();
    }
    Ok(())
}

/// `vnpu compile MODEL.onnx [MODEL2.onnx ...] -o OUT.bin [options]`
pub fn run_compile(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, COMPILE_VALUED, &["quiet", "O0"])?;
    let mut opts = CompileOptions::default();
    let mut models: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    let mut out = a.get("o").or(a.get("output")).map(PathBuf::from);
    if let Some(cfg) = a.get("config") {
        let c = config::load_config(Path::new(cfg)).map_err(|e| e.to_string())?;
        opts = c.options;
        if models.is_empty() {
            models.extend(c.onnx_model);
        }
        if out.is_none() {
            out = c.output_prefix.map(|p| PathBuf::from(format!("{p}.bin")));
        }
    }
    if a.has("O0") {
        opts.optimize_level = 0;
    }
    options_from(&a, &mut opts)?;
    if models.is_empty() {
        return Err("no ONNX model given (vnpu compile MODEL.onnx -o OUT.bin)".into());
    }
    if models.len() > 1 && opts.name.is_some() {
        return Err(
            "--name applies to one model; compile several models with their file names".into(),
        );
    }
    let out = out.ok_or("no output file given (-o OUT.bin)")?;
    let mut compiled = Vec::new();
    for m in &models {
        let mut o = opts.clone();
        inspect_inputs(m, &mut o)?;
        let t0 = std::time::Instant::now();
        let c = compile::compile_onnx_file(m, &o).map_err(explain_import_error)?;
        if !a.has("quiet") {
            if let Some(q) = &o.quantize {
                eprintln!(
                    "quantised to int8 with calibration data {} ({:?}, per_channel {})",
                    q.cal_data_dir.display(),
                    q.calibration_type,
                    q.per_channel
                );
            }
            let fcs: usize = c.segments.iter().map(|s| s.fcs.len()).sum();
            eprintln!(
                "compiled {} -> model '{}': {} nodes, {} segments, {} FCs, estimated {:.0} us ({:.1} s)",
                m.display(),
                c.name,
                c.graph.nodes.len(),
                c.segments.len(),
                fcs,
                c.est_us(),
                t0.elapsed().as_secs_f64()
            );
            for o in &c.over_limit {
                eprintln!(
                    "  warning: node {} cannot be split below the FC limit ({:.0} us)",
                    c.graph.nodes[o.node].name, o.est_us
                );
            }
        }
        if compiled
            .iter()
            .any(|p: &compile::CompiledModel| p.name == c.name)
        {
            // A packed file with two models of one name could not be loaded.
            return Err(format!(
                "{} gives a second model named '{}': the models of one file need unique names \
                 (they come from the file names; rename one file)",
                m.display(),
                c.name
            ));
        }
        compiled.push(c);
    }
    format::save_models(&out, &compiled).map_err(|e| e.to_string())?;
    if !a.has("quiet") {
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// `vnpu info FILE [--json]` (FILE may also be an .onnx, compiled on the fly). A compiled
/// file is checked whole, weights checksum included (loading leaves that out, see
/// vnpu::format), so `info` is also the integrity check of a file.
pub fn run_info(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(argv, &["model_name", "model_file"], &["json"])?;
    let file = a
        .get("model_file")
        .map(|s| s.to_string())
        .or_else(|| a.positional.first().cloned())
        .ok_or("usage: vnpu info FILE [--json]")?;
    let path = PathBuf::from(&file);
    let (mut models, src) = vnpu::runtime::loader::load_path(&path, &CompileOptions::default())
        .map_err(|e| e.to_string())?;
    if src == vnpu::runtime::LoadSource::Compiled {
        format::verify_file(&path).map_err(|e| e.to_string())?;
    }
    if let Some(name) = a.get("model_name") {
        let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
        models.retain(|m| m.name == name);
        if models.is_empty() {
            return Err(format!(
                "no model named '{name}' in {file} (have: {})",
                names.join(", ")
            ));
        }
    }
    if a.has("json") {
        let j = format::info::file_json(&models);
        println!(
            "{}",
            serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", format::info::file_text(&models));
    }
    Ok(())
}

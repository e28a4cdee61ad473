//! The `vnpu` command line: happy paths and every error case of the CLI issue, on the
//! small models committed under `models/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn vnpu() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vnpu"))
}

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vnpu-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run vnpu")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An error is one clear `vnpu: error:` line, non-zero exit, no panic.
fn assert_clean_error(o: &Output, needle: &str) {
    let e = stderr(o);
    assert!(!o.status.success(), "expected failure, stderr: {e}");
    assert!(
        !e.contains("panicked") && !e.contains("RUST_BACKTRACE"),
        "panic leaked: {e}"
    );
    let lines: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("vnpu: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "want one error line, got: {e}");
    assert!(
        e.to_lowercase().contains(&needle.to_lowercase()),
        "error '{e}' should mention '{needle}'"
    );
}

fn compile(model: &str, out: &Path, extra: &[&str]) -> Output {
    run(vnpu()
        .arg("compile")
        .arg(models().join(model))
        .arg("-o")
        .arg(out)
        .args(extra))
}

fn info_json(file: &Path) -> serde_json::Value {
    let o = run(vnpu().arg("info").arg(file).arg("--json"));
    assert!(o.status.success(), "info failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("info --json is JSON")
}

#[test]
fn compile_with_fc_limit_gives_fcs_within_the_limit() {
    let d = tmp("limit");
    // The smallest limit the compiler takes; whether the model needs several FCs under
    // it depends on this host's estimate of the whole (compiled without a limit).
    let whole = d.join("whole.bin");
    let o = compile("tiny_detector.onnx", &whole, &["--max-time-per-fc", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let total = info_json(&whole)["models"][0]["est_us"].as_f64().unwrap();
    let out = d.join("det.bin");
    let o = compile("tiny_detector.onnx", &out, &["--max-time-per-fc", "1000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = info_json(&out);
    let m = &j["models"][0];
    assert_eq!(m["max_time_per_fc"], 1000);
    let limit = 1000.0;
    let mut fcs = 0;
    for seg in m["segments"].as_array().unwrap() {
        if seg["kind"] != "BPU" {
            continue;
        }
        for fc in seg["fcs"].as_array().unwrap() {
            fcs += 1;
            let est = fc["est_us"].as_f64().unwrap();
            assert!(
                est <= limit || fc["over_limit"] == true,
                "fc over the limit {limit}: {fc}"
            );
        }
    }
    if total > 1.5 * limit {
        assert!(
            fcs >= 2,
            "{total} us in all: expected several FCs, got {fcs}"
        );
    } else {
        assert!(fcs >= 1, "no FC");
    }
    // Node names of the ONNX model survive as absorbed names.
    let absorbed: usize = m["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["absorbed"].as_array().unwrap().len())
        .sum();
    assert!(absorbed >= m["nodes"].as_array().unwrap().len());
}

#[test]
fn no_limit_gives_one_fc_per_bpu_segment() {
    let d = tmp("nolimit");
    let out = d.join("det.bin");
    let o = compile("tiny_detector.onnx", &out, &["--max-time-per-fc", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = info_json(&out);
    for seg in j["models"][0]["segments"].as_array().unwrap() {
        assert_eq!(seg["fcs"].as_array().unwrap().len(), 1, "{seg}");
    }
}

#[test]
fn out_of_range_fc_limit_names_the_range() {
    let d = tmp("range");
    let o = compile(
        "tiny_classifier.onnx",
        &d.join("x.bin"),
        &["--max-time-per-fc", "500"],
    );
    assert_clean_error(&o, "1000..=4294967295");
}

#[test]
fn packed_file_holds_both_models_and_text_info_works() {
    let d = tmp("pack");
    let out = d.join("pack.bin");
    let o = run(vnpu()
        .arg("compile")
        .arg(models().join("tiny_detector.onnx"))
        .arg(models().join("tiny_classifier.onnx"))
        .arg("-o")
        .arg(&out));
    assert!(o.status.success(), "{}", stderr(&o));
    let j = info_json(&out);
    let names: Vec<&str> = j["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["tiny_detector", "tiny_classifier"]);
    let o = run(vnpu()
        .args(["model_info", "--model_file"])
        .arg(&out)
        .args(["--model_name", "tiny_classifier"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("model tiny_classifier") && !text.contains("model tiny_detector"),
        "{text}"
    );
    let o = run(vnpu()
        .args(["model_info", "--model_file"])
        .arg(&out)
        .args(["--model_name", "nope"]));
    assert_clean_error(&o, "nope");
}

#[test]
fn corrupt_files_fail_cleanly() {
    let d = tmp("corrupt");
    let good = d.join("good.bin");
    assert!(compile("tiny_classifier.onnx", &good, &[]).status.success());
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("bitflip", {
            let mut b = bytes.clone();
            let i = b.len() / 3;
            b[i] ^= 0x40;
            b
        }),
        (
            "random",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("vendor", b"HBM\x00\x01\x02 vendor model".to_vec()),
    ];
    for (name, data) in cases {
        let f = d.join(format!("{name}.bin"));
        std::fs::write(&f, data).unwrap();
        let o = run(vnpu().arg("info").arg(&f));
        assert_clean_error(&o, "invalid model file");
    }
    let o = run(vnpu().arg("info").arg(d.join("missing.bin")));
    assert_clean_error(&o, "cannot open");
}

#[test]
fn infer_dumps_outputs_and_rejects_bad_inputs() {
    let d = tmp("infer");
    let model = d.join("cls.bin");
    assert!(compile("tiny_classifier.onnx", &model, &[])
        .status
        .success());
    // 1x3x64x64 f32 input.
    let input = d.join("in.bin");
    let vals: Vec<f32> = (0..3 * 64 * 64).map(|i| (i % 17) as f32 / 17.0).collect();
    std::fs::write(&input, bytemuck::cast_slice(&vals)).unwrap();
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(&model)
        .arg("--input_file")
        .arg(&input)
        .args(["--enable_dump", "--dump_format", "txt", "--dump_path"])
        .arg(&d));
    assert!(o.status.success(), "{}", stderr(&o));
    let dumped = std::fs::read_to_string(d.join("tiny_classifier_output_0.txt")).unwrap();
    let probs: Vec<f32> = dumped.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(probs.len(), 10);
    assert!(
        (probs.iter().sum::<f32>() - 1.0).abs() < 1e-4,
        "softmax output sums to 1: {probs:?}"
    );
    let short = d.join("short.bin");
    std::fs::write(&short, [0u8; 100]).unwrap();
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(&model)
        .arg("--input_file")
        .arg(&short));
    assert_clean_error(&o, "bytes");
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(&model)
        .args(["--model_name", "other"]));
    assert_clean_error(&o, "other");
}

#[test]
fn perf_runs_two_models_and_writes_a_profile() {
    let d = tmp("perf");
    let pack = d.join("pack.bin");
    let o = run(vnpu()
        .arg("compile")
        .arg(models().join("tiny_detector.onnx"))
        .arg(models().join("tiny_classifier.onnx"))
        .args(["--max-time-per-fc", "1000", "-o"])
        .arg(&pack));
    assert!(o.status.success(), "{}", stderr(&o));
    // A packed file with several models needs --model_name (as hrt_model_exec).
    let o = run(vnpu()
        .args(["perf", "--model_file"])
        .arg(&pack)
        .args(["--frame_count", "1"]));
    assert_clean_error(&o, "--model_name");
    let o = run(vnpu().args(["infer", "--model_file"]).arg(&pack));
    assert_clean_error(&o, "--model_name");
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(&pack)
        .args(["--model_name", "tiny_classifier"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(vnpu()
        .args(["perf", "--model_file"])
        .arg(&pack)
        .args([
            "--model_name",
            "tiny_detector,tiny_classifier",
            "--priority",
            "0,255",
            "--frame_count",
            "20",
            "--profile_path",
        ])
        .arg(&d));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("tiny_detector") && out.contains("tiny_classifier") && out.contains("p99"),
        "{out}"
    );
    // perf says what its latency measures and splits it into pending and running.
    assert!(
        out.contains("latency (closed loop") && out.contains("pend p50") && out.contains("run p99"),
        "{out}"
    );
    let prof: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("profiler.log")).unwrap()).unwrap();
    let ms = prof["models"].as_array().unwrap();
    assert_eq!(ms.len(), 2);
    assert_eq!(ms[0]["running_condition"]["frame_count"], 20);
    assert!(!ms[1]["model_latency"].as_array().unwrap().is_empty());
}

#[test]
fn demo_prints_the_table_and_writes_trace_and_picture() {
    let d = tmp("demo");
    let o = run(vnpu()
        .args(["demo", "--seconds", "1", "--out"])
        .arg(&d)
        .env("VNPU_CORES", "2"));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("classifier alone")
            && out.contains("BPLAT_CORELIMIT=0")
            && out.contains("BPLAT_CORELIMIT=1"),
        "{out}"
    );
    // The background is a chain of many short FCs, and the output says which run the
    // trace and the timeline come from.
    let fcs: usize = out
        .split("each task = ")
        .nth(1)
        .and_then(|r| r.split(" frames = ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(fcs >= 8, "background tasks of many FCs: {out}");
    assert!(
        out.contains("trace (from the BPLAT_CORELIMIT=1 run)")
            && out.contains("timeline (same run"),
        "{out}"
    );
    let svg = std::fs::read_to_string(d.join("demo_timeline.svg")).unwrap();
    // When the demo reports an overtaking, the picture marks it.
    assert_eq!(
        out.contains("centred on"),
        svg.contains(r#"class="overtake""#),
        "{out}"
    );
    let doc = roxmltree::Document::parse(&svg).expect("SVG is XML");
    let lanes: Vec<String> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("lane"))
        .map(|n| n.attribute("data-lane").unwrap_or("").to_string())
        .collect();
    let core_lanes = lanes
        .iter()
        .filter(|l| l.to_lowercase().contains("core"))
        .count();
    assert_eq!(core_lanes, 2, "one lane per core: {lanes:?}");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("demo_trace.json")).unwrap()).unwrap();
    assert!(!trace["traceEvents"].as_array().unwrap().is_empty());
    // `vnpu trace` renders the same file.
    let svg2 = d.join("again.svg");
    let o = run(vnpu()
        .arg("trace")
        .arg(d.join("demo_trace.json"))
        .arg("-o")
        .arg(&svg2));
    assert!(o.status.success(), "{}", stderr(&o));
    roxmltree::Document::parse(&std::fs::read_to_string(svg2).unwrap()).unwrap();
}

#[test]
fn usage_errors_are_one_line() {
    assert_clean_error(&run(vnpu().arg("bogus")), "unknown command");
    assert_clean_error(
        &run(vnpu().args(["compile", "--max-time-per-fc"])),
        "needs a value",
    );
    assert_clean_error(
        &run(vnpu()
            .args(["perf", "--model_file"])
            .arg(models().join("tiny_classifier.onnx"))
            .args(["--perf_time", "x"])),
        "number",
    );
}

#[test]
fn infer_takes_png_images_for_image_and_tensor_inputs() {
    let d = tmp("png");
    let png_path = d.join("photo.png");
    {
        let (w, h) = (80u32, 60u32);
        let f = std::fs::File::create(&png_path).unwrap();
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        let data: Vec<u8> = (0..w * h)
            .flat_map(|i| [(i % 256) as u8, (i / 80 * 4) as u8, 128])
            .collect();
        wr.write_image_data(&data).unwrap();
    }
    for extra in [vec![], vec!["--input-type-rt", "nv12"]] {
        let model = d.join("cls.bin");
        let o = compile("tiny_classifier.onnx", &model, &extra);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run(vnpu()
            .args(["infer", "--model_file"])
            .arg(&model)
            .arg("--input_file")
            .arg(&png_path));
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("output probs"));
    }
    let bad = d.join("bad.png");
    std::fs::write(&bad, b"not a png").unwrap();
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(d.join("cls.bin"))
        .arg("--input_file")
        .arg(&bad));
    assert_clean_error(&o, "png");
}

#[test]
fn help_exits_zero_for_vnpu_and_every_subcommand() {
    for args in [
        vec!["--help"],
        vec!["help"],
        vec!["-h"],
        vec!["help", "perf"],
    ] {
        let o = run(vnpu().args(&args));
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("usage: vnpu"));
    }
    for cmd in [
        "compile",
        "info",
        "model_info",
        "infer",
        "perf",
        "trace",
        "demo",
    ] {
        for flag in ["--help", "-h"] {
            let o = run(vnpu().args([cmd, flag]));
            assert!(o.status.success(), "{cmd} {flag}: {}", stderr(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.starts_with("usage: vnpu"), "{cmd}: {out}");
            assert!(
                out.contains(cmd.trim_start_matches("model_")),
                "{cmd}: {out}"
            );
        }
    }
}

#[test]
fn out_of_range_values_say_the_range() {
    let model = models().join("tiny_classifier.onnx");
    let infer = |extra: &[&str]| {
        run(vnpu()
            .args(["infer", "--model_file"])
            .arg(&model)
            .args(extra))
    };
    assert_clean_error(&infer(&["--priority", "300"]), "must be 0..=255");
    assert_clean_error(&infer(&["--priority", "-1"]), "must be 0..=255");
    assert_clean_error(&infer(&["--priority", "high"]), "not a number");
    assert_clean_error(&infer(&["--core_id", "-2"]), "0..=4294967295");
    let o = run(vnpu().args(["perf", "--model_file"]).arg(&model).args([
        "--priority",
        "0,256",
        "--frame_count",
        "1",
    ]));
    assert_clean_error(&o, "must be 0..=255");
    let o = run(vnpu().args(["perf", "--model_file"]).arg(&model).args([
        "--thread_num",
        "0",
        "--frame_count",
        "1",
    ]));
    assert_clean_error(&o, "must be 1..=1024");
}

/// Writes a one-Relu ONNX model with the given input dims (None = symbolic).
fn relu_model(dir: &Path, dims: &[Option<usize>]) -> PathBuf {
    use vnpu::ir::DType;
    use vnpu::onnx::builder::ModelBuilder;
    let bytes = ModelBuilder::new("relu", 13)
        .input_dynamic("x", DType::F32, dims)
        .node("Relu", "r", &["x"], &["y"], vec![])
        .output("y")
        .to_bytes();
    let p = dir.join("relu.onnx");
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn dynamic_dims_name_the_input_shape_flag_and_dynamic_batch_is_reported() {
    let d = tmp("dyn");
    let m = relu_model(&d, &[Some(1), Some(3), None]);
    let o = run(vnpu().arg("compile").arg(&m).arg("-o").arg(d.join("r.bin")));
    assert_clean_error(&o, "--input-shape");
    let o = run(vnpu()
        .arg("compile")
        .arg(&m)
        .args(["--input-shape", "x=1x3x5", "-o"])
        .arg(d.join("r.bin")));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("dynamic batch"), "{}", stderr(&o));

    let m = relu_model(&d, &[None, Some(3), Some(4)]);
    let o = run(vnpu().arg("compile").arg(&m).arg("-o").arg(d.join("b.bin")));
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("'x' has a dynamic batch dimension")
            && e.contains("batch 1")
            && e.contains("--input-shape x="),
        "{e}"
    );
}

#[test]
fn unknown_yaml_keys_name_the_closest_valid_key() {
    let d = tmp("yaml");
    let cfg = d.join("cfg.yaml");
    std::fs::write(
        &cfg,
        format!(
            "model_parameters:\n  onnx_model: {}\n  output_model_file_prefix: {}\ncompiler_parameters:\n  max_time_per_fcc: 1000\n",
            models().join("tiny_classifier.onnx").display(),
            d.join("out").display()
        ),
    )
    .unwrap();
    let o = run(vnpu().arg("compile").arg("--config").arg(&cfg));
    assert_clean_error(&o, "'max_time_per_fcc'");
    assert_clean_error(&o, "did you mean 'max_time_per_fc'");
    std::fs::write(&cfg, "model_paramters:\n  onnx_model: a.onnx\n").unwrap();
    let o = run(vnpu().arg("compile").arg("--config").arg(&cfg));
    assert_clean_error(&o, "did you mean 'model_parameters'");
}

#[test]
fn infer_without_input_file_says_what_input_it_used() {
    let o = run(vnpu()
        .args(["infer", "--model_file"])
        .arg(models().join("tiny_classifier.onnx")));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("no --input_file")
            && out.contains("test pattern")
            && out.contains("[1, 3, 64, 64]"),
        "{out}"
    );
}

#[test]
fn progress_bars_only_on_a_terminal() {
    // stderr is a pipe here: a 1.5 s perf run (long enough for a bar) draws none.
    let o = run(vnpu()
        .args(["perf", "--model_file"])
        .arg(models().join("tiny_classifier.onnx"))
        .args(["--perf_time", "1.5"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains('\r') && !e.contains("[#"), "{e:?}");
}

#[test]
fn info_names_the_kernel_table_in_use() {
    let file = models().join("tiny_classifier.onnx");
    let j = info_json(&file);
    let name = j["kernel_table"]["name"]
        .as_str()
        .expect("kernel_table.name");
    assert!(
        ["portable", "avx2+fma", "avx512"].contains(&name),
        "unknown table {name}"
    );
    assert_eq!(j["kernel_table"]["nr"], 16);
    let bf16 = &j["bf16_kernels"];
    assert!(
        bf16.is_null() || ["avx512-bf16", "amx-bf16"].contains(&bf16.as_str().unwrap_or("")),
        "unknown bf16 kernels {bf16}"
    );
    // The setting picks the portable table, and the text says so.
    let o = run(vnpu()
        .env("VNPU_KERNEL_TABLE", "portable")
        .arg("info")
        .arg(&file));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("kernel table on this host: portable (GEMM tile 6x16, 1 f32 lanes)"),
        "{text}"
    );
    // The bf16 setting names its kernels (where this CPU has them).
    let o = run(vnpu()
        .env("VNPU_BF16_KERNELS", "avx512-bf16")
        .arg("info")
        .arg(&file));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text.lines().nth(1).unwrap_or("");
    assert!(
        line == "bf16 kernels (VNPU_PRECISION=bf16): avx512-bf16"
            || line == "bf16 kernels (VNPU_PRECISION=bf16): none on this CPU",
        "{text}"
    );
}

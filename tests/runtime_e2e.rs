//! End to end through the Rust runtime: compile → file → load → scheduler → outputs.
//! Image inputs converted by the compiled model, compile-on-load with the cache, tasks of
//! several models, and CPU segments in the middle of a model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vnpu::compile::{compile_graph, compile_onnx_bytes, CompileOptions, InputParams, InputType};
use vnpu::ir::{DType, ImageFormat, Placement, Tensor};
use vnpu::onnx::builder::{attr, ModelBuilder};
use vnpu::runtime::{CtrlParams, IoBuffer, LoadSource, Model, ModelRequest, PackedModel, Runtime};

fn classifier_onnx() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny_classifier.onnx"))
        .unwrap()
}

fn load(c: vnpu::compile::CompiledModel) -> Arc<Model> {
    // Through the file format, as an application loads it.
    let bytes = vnpu::format::write_models(&[c]).unwrap();
    PackedModel::load_bytes(&[&bytes]).unwrap().models[0].clone()
}

fn run(rt: &Runtime, m: &Arc<Model>, inputs: &mut [Vec<u8>], prio: u8) -> Vec<Vec<u8>> {
    let mut outs: Vec<Vec<u8>> = (0..m.outputs.len())
        .map(|i| vec![0u8; m.plan.output_len(i)])
        .collect();
    let req = ModelRequest {
        model: m.clone(),
        inputs: inputs
            .iter_mut()
            .map(|b| vec![IoBuffer::from_slice(b)])
            .collect(),
        outputs: outs.iter_mut().map(|b| IoBuffer::from_slice(b)).collect(),
        rois: vec![],
    };
    let t = rt
        .submit(
            vec![req],
            CtrlParams {
                priority: prio,
                ..Default::default()
            },
        )
        .unwrap();
    t.wait(None).unwrap();
    t.release().unwrap();
    outs
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
}

fn runtime() -> Runtime {
    let mut cfg = vnpu::sched::SchedConfig::from_lookup(|_| None).unwrap();
    cfg.cores = 2;
    Runtime::with_config(cfg).unwrap()
}

#[test]
fn nv12_input_is_converted_and_normalised_by_the_model() {
    let (h, w) = (64usize, 64usize);
    let mean = [123.675f32, 116.28, 103.53];
    let scale = [0.01712f32, 0.01751, 0.01743];
    let nv12_opts = CompileOptions {
        inputs: vec![InputParams {
            name: "images".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Nv12),
            nhwc: false,
            train_bgr: false,
            mean: mean.to_vec(),
            scale: scale.to_vec(),
        }],
        ..Default::default()
    };
    let with_pre =
        load(compile_onnx_bytes(&classifier_onnx(), None, "cls_nv12", &nv12_opts).unwrap());
    let plain = load(
        compile_onnx_bytes(&classifier_onnx(), None, "cls", &CompileOptions::default()).unwrap(),
    );
    let d = &with_pre.inputs[0];
    assert_eq!(d.elem, vnpu::runtime::ElemType::ImgNv12);
    assert_eq!(d.valid_shape, vec![1, 3, 64, 64]);
    assert_eq!(d.aligned_byte_size, h * w * 3 / 2);
    // A smooth synthetic NV12 frame.
    let mut nv12 = vec![0u8; h * w * 3 / 2];
    for y in 0..h {
        for x in 0..w {
            nv12[y * w + x] = (16 + (x * 3 + y * 2) % 220) as u8;
        }
    }
    for i in 0..(h / 2) * (w / 2) {
        nv12[h * w + 2 * i] = (90 + i % 70) as u8;
        nv12[h * w + 2 * i + 1] = (160 - i % 60) as u8;
    }
    // Reference conversion (BT.601 full range) in the test, then the plain model.
    let mut rgb = vec![0f32; 3 * h * w];
    for y in 0..h {
        for x in 0..w {
            let yy = nv12[y * w + x] as f32;
            let uv = h * w + (y / 2) * w + (x / 2) * 2;
            let (u, v) = (nv12[uv] as f32 - 128.0, nv12[uv + 1] as f32 - 128.0);
            let px = [
                yy + 1.402 * v,
                yy - 0.344136 * u - 0.714136 * v,
                yy + 1.772 * u,
            ];
            for c in 0..3 {
                rgb[c * h * w + y * w + x] = (px[c].clamp(0.0, 255.0) - mean[c]) * scale[c];
            }
        }
    }
    let rt = runtime();
    let got = run(&rt, &with_pre, &mut [nv12], 0);
    let want = run(&rt, &plain, &mut [bytemuck::cast_slice(&rgb).to_vec()], 0);
    assert_close(&f32s(&got[0]), &f32s(&want[0]), 1e-4);
}

#[test]
fn onnx_loads_compile_once_then_come_from_the_cache() {
    let dir = std::env::temp_dir().join(format!("vnpu-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let model_dir = dir.join("models");
    std::fs::create_dir_all(&model_dir).unwrap();
    let path = model_dir.join("cls.onnx");
    std::fs::write(&path, classifier_onnx()).unwrap();
    let cache = dir.join("cache");
    let opts = CompileOptions::default();
    let (m1, s1) =
        vnpu::runtime::loader::compile_cached(&classifier_onnx(), None, "cls", &opts, Some(&cache))
            .unwrap();
    assert_eq!(s1, LoadSource::CompiledNow);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
    let (m2, s2) =
        vnpu::runtime::loader::compile_cached(&classifier_onnx(), None, "cls", &opts, Some(&cache))
            .unwrap();
    assert_eq!(s2, LoadSource::Cache);
    assert_eq!(m1[0].segments, m2[0].segments);
    // Other options are another entry.
    let o2 = CompileOptions {
        max_time_per_fc: 1000,
        ..Default::default()
    };
    let (_, s3) =
        vnpu::runtime::loader::compile_cached(&classifier_onnx(), None, "cls", &o2, Some(&cache))
            .unwrap();
    assert_eq!(s3, LoadSource::CompiledNow);
    // A corrupted entry is recompiled, not trusted.
    for e in std::fs::read_dir(&cache).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b[n - 1] ^= 0xff;
        std::fs::write(&p, b).unwrap();
    }
    let (_, s4) =
        vnpu::runtime::loader::compile_cached(&classifier_onnx(), None, "cls", &opts, Some(&cache))
            .unwrap();
    assert_eq!(s4, LoadSource::CompiledNow);
    // Loading the .onnx file through the packed-model API works too.
    let pack = PackedModel::load_files(&[PathBuf::from(&path)]).unwrap();
    assert_eq!(pack.model_names(), vec!["cls"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_task_of_two_models_gives_each_its_own_outputs() {
    let a = load(
        compile_onnx_bytes(&classifier_onnx(), None, "a", &CompileOptions::default()).unwrap(),
    );
    let b = load(
        compile_onnx_bytes(
            &classifier_onnx(),
            None,
            "b",
            &CompileOptions {
                max_time_per_fc: 1000,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let rt = runtime();
    let mut in_a: Vec<f32> = (0..3 * 64 * 64).map(|i| (i % 13) as f32 / 13.0).collect();
    let mut in_b: Vec<f32> = (0..3 * 64 * 64).map(|i| (i % 7) as f32 / 7.0).collect();
    let want_a = run(&rt, &a, &mut [bytemuck::cast_slice(&in_a).to_vec()], 0);
    let want_b = run(&rt, &b, &mut [bytemuck::cast_slice(&in_b).to_vec()], 0);
    let mut out_a = vec![0u8; a.plan.output_len(0)];
    let mut out_b = vec![0u8; b.plan.output_len(0)];
    let reqs = vec![
        ModelRequest {
            model: a.clone(),
            inputs: vec![vec![IoBuffer::from_slice(bytemuck::cast_slice_mut(
                &mut in_a,
            ))]],
            outputs: vec![IoBuffer::from_slice(&mut out_a)],
            rois: vec![],
        },
        ModelRequest {
            model: b.clone(),
            inputs: vec![vec![IoBuffer::from_slice(bytemuck::cast_slice_mut(
                &mut in_b,
            ))]],
            outputs: vec![IoBuffer::from_slice(&mut out_b)],
            rois: vec![],
        },
    ];
    let t = rt.submit(reqs, CtrlParams::default()).unwrap();
    t.wait(None).unwrap();
    assert_eq!(out_a, want_a[0]);
    assert_eq!(out_b, want_b[0]);
    t.release().unwrap();
}

/// conv → ArgMax (CPU) → Cast → Mul, built in Rust: a CPU segment in the middle.
fn cpu_middle_model() -> Vec<u8> {
    let w = Tensor::from_f32(
        vec![4, 1, 3, 3],
        (0..36)
            .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.4)
            .collect(),
    );
    let two = Tensor::from_f32(vec![], vec![2.0]);
    ModelBuilder::new("cpu_mid", 13)
        .input("x", DType::F32, &[1, 1, 8, 8])
        .initializer("w", &w)
        .initializer("two", &two)
        .node(
            "Conv",
            "conv",
            &["x", "w"],
            &["c"],
            vec![attr::ints("pads", &[1, 1, 1, 1])],
        )
        .node(
            "ArgMax",
            "argmax",
            &["c"],
            &["am"],
            vec![attr::int("axis", 1)],
        )
        .node("Cast", "cast", &["am"], &["amf"], vec![attr::int("to", 1)])
        .node("Mul", "mul", &["amf", "two"], &["y"], vec![])
        .output("y")
        .to_bytes()
}

#[test]
fn cpu_segment_in_the_middle_runs_on_the_cpu_pool() {
    let c = compile_onnx_bytes(
        &cpu_middle_model(),
        None,
        "cpu_mid",
        &CompileOptions::default(),
    )
    .unwrap();
    let kinds: Vec<Placement> = c.segments.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, vec![Placement::Bpu, Placement::Cpu, Placement::Bpu]);
    // Same graph, everything forced onto the cores, gives the same answer.
    let all_bpu = compile_graph(
        vnpu::onnx::import_model(&cpu_middle_model(), &Default::default()).unwrap(),
        &CompileOptions {
            run_on_bpu: vec!["argmax".into()],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(all_bpu.segments.iter().all(|s| s.kind == Placement::Bpu));
    let (m1, m2) = (load(c), load(all_bpu));
    let rt = runtime();
    let x: Vec<f32> = (0..64).map(|i| ((i * 5) % 9) as f32 - 4.0).collect();
    let a = run(&rt, &m1, &mut [bytemuck::cast_slice(&x).to_vec()], 3);
    let b = run(&rt, &m2, &mut [bytemuck::cast_slice(&x).to_vec()], 3);
    assert_eq!(a, b);
    let y = f32s(&a[0]);
    assert!(y.iter().all(|v| [0.0, 2.0, 4.0, 6.0].contains(v)), "{y:?}");
}

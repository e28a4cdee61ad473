//! Quantised outputs and signed image inputs through the C API: tensor properties
//! (type, SCALE, per-channel scales along the axis, strides, sizes, pointers stable while
//! loaded) and the values a caller reads, against the same model with f32 outputs.

mod capi_support;

use std::path::Path;
use std::ptr::null_mut;

use capi_support::{ctrl, props, tensor};
use vnpu::compile::config::{parse_output_flag, InputParams, InputType};
use vnpu::compile::{compile_onnx_bytes, CompileOptions};
use vnpu::ffi::*;
use vnpu::ir::ImageFormat;
use vnpu::runtime::PackedModel;

fn detector_onnx() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny_detector.onnx")).unwrap()
}

fn pixel(c: usize, y: usize, x: usize) -> u8 {
    ((x * (3 + c) + y * 5 + 40 * c + (x * y % 7) * 9) & 0xff) as u8
}

/// A packed handle over the detector compiled with `opts`, and its one model handle.
fn load(opts: &CompileOptions) -> (hbPackedDNNHandle_t, hbDNNHandle_t) {
    let c = compile_onnx_bytes(&detector_onnx(), None, "det", opts).expect("compile");
    let bytes = vnpu::format::write_models(&[c]).unwrap();
    let p = packed_handle(PackedModel::load_bytes(&[&bytes]).unwrap()).unwrap();
    let mut h = null_mut();
    let name = c"det";
    // SAFETY: valid out-pointer and NUL-terminated name.
    assert_eq!(unsafe { hbDNNGetModelHandle(&mut h, p, name.as_ptr()) }, 0);
    (p, h)
}

/// Runs one inference with `input` and returns the outputs' bytes.
fn infer(h: hbDNNHandle_t, input: &mut [u8]) -> Vec<Vec<u8>> {
    let mut outs: Vec<Vec<u8>> = (0..3)
        .map(|i| vec![0u8; props(h, true, i).alignedByteSize as usize])
        .collect();
    let mut ot: Vec<hbDNNTensor> = outs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| tensor(props(h, true, i as i32), b))
        .collect();
    let it = tensor(props(h, false, 0), input);
    let mut task = null_mut();
    let mut optr = ot.as_mut_ptr();
    let mut ctrl = ctrl(0, 0);
    // SAFETY: tensors point at live buffers of the sizes their properties give.
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut optr, &it, h, &mut ctrl), 0);
        assert_eq!(hbDNNWaitTaskDone(task, 0), 0);
        assert_eq!(hbDNNReleaseTask(task), 0);
    }
    outs
}

#[test]
fn quantised_outputs_and_signed_rgb_through_the_c_api() {
    let rgb = InputParams {
        name: "images".into(),
        shape: None,
        input_type: InputType::Image(ImageFormat::Rgb),
        nhwc: false,
        train_bgr: false,
        mean: vec![],
        scale: vec![1.0 / 255.0],
    };
    let f32_opts = CompileOptions {
        inputs: vec![rgb.clone()],
        ..Default::default()
    };
    let (pf, hf) = load(&f32_opts);
    // Calibration on the same image the test feeds.
    let dir = std::env::temp_dir().join(format!("vnpu_quant_io_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pixels: Vec<u8> = (0..3 * 128 * 128)
        .map(|k| pixel(k / (128 * 128), k / 128 % 128, k % 128))
        .collect();
    let header = "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3, 128, 128), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let pad = 64 - (10 + header.len() + 1) % 64;
    let h = format!("{header}{}\n", " ".repeat(pad % 64));
    npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
    npy.extend_from_slice(h.as_bytes());
    npy.extend_from_slice(&pixels);
    std::fs::write(dir.join("000.npy"), npy).unwrap();
    let q_opts = CompileOptions {
        inputs: vec![rgb],
        signed_inputs: vec!["images".into()],
        outputs: ["all=s8", "out_s16=s16", "out_s32=s32"]
            .iter()
            .map(|s| parse_output_flag(s).unwrap())
            .collect(),
        calibration_data: Some(dir.clone()),
        ..Default::default()
    };
    let (pq, hq) = load(&q_opts);
    let _ = std::fs::remove_dir_all(&dir);

    let ip = props(hq, false, 0);
    assert_eq!(ip.tensorType, hbDNNDataType::HB_DNN_IMG_TYPE_RGB as i32);
    assert_eq!(
        ip.tensorLayout,
        hbDNNTensorLayout::HB_DNN_LAYOUT_NCHW as i32
    );
    assert_eq!(ip.alignedByteSize, 3 * 128 * 128);
    let types = [
        (hbDNNDataType::HB_DNN_TENSOR_TYPE_S8, 1usize),
        (hbDNNDataType::HB_DNN_TENSOR_TYPE_S16, 2),
        (hbDNNDataType::HB_DNN_TENSOR_TYPE_S32, 4),
    ];
    for (i, (ty, es)) in types.iter().enumerate() {
        let p = props(hq, true, i as i32);
        assert_eq!(p.tensorType, *ty as i32, "output {i}");
        assert_eq!(p.quantiType, hbDNNQuantiType::SCALE as i32);
        assert_eq!(p.quantizeAxis, 1);
        assert_eq!(p.scale.scaleLen, 24);
        assert!(!p.scale.scaleData.is_null());
        assert_eq!(
            (p.scale.zeroPointLen, p.scale.zeroPointData),
            (0, null_mut())
        );
        assert_eq!(p.stride[3], *es as i32);
        let n: i32 = p.validShape.dimensionSize[..4].iter().product();
        assert_eq!(p.alignedByteSize, n * *es as i32);
        // The same pointers on every call while the model is loaded.
        assert_eq!(props(hq, true, i as i32).scale.scaleData, p.scale.scaleData);
    }

    let want = infer(hf, &mut pixels.clone());
    let mut signed: Vec<u8> = pixels.iter().map(|&p| p ^ 0x80).collect();
    let got = infer(hq, &mut signed);
    for (i, (ty, es)) in types.iter().enumerate() {
        let p = props(hq, true, i as i32);
        // SAFETY: scaleData holds scaleLen floats while the model is loaded.
        let scales = unsafe { std::slice::from_raw_parts(p.scale.scaleData, 24) };
        let inner = (p.validShape.dimensionSize[2] * p.validShape.dimensionSize[3]) as usize;
        let reference: Vec<f32> = want[i]
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        for (k, (c, r)) in got[i].chunks_exact(*es).zip(&reference).enumerate() {
            let q = match ty {
                hbDNNDataType::HB_DNN_TENSOR_TYPE_S8 => c[0] as i8 as f64,
                hbDNNDataType::HB_DNN_TENSOR_TYPE_S16 => i16::from_ne_bytes([c[0], c[1]]) as f64,
                _ => i32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as f64,
            };
            let s = scales[k / inner % 24] as f64;
            let err = (q * s - *r as f64).abs() / s;
            assert!(err <= 0.5 + 1e-3, "output {i}[{k}]: {q} * {s} vs {r}");
        }
    }
    // SAFETY: handles from packed_handle, released once.
    unsafe {
        assert_eq!(hbDNNRelease(pf), 0);
        assert_eq!(hbDNNRelease(pq), 0);
    }
}

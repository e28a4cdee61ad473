//! Compiling for a precision: node times measured with the plan of that precision,
//! recorded in the model, and the precision a load picks by default.

use super::*;
use crate::ir::Tensor;
use crate::onnx::builder::{attr, ModelBuilder};

/// A 3x3 conv of 32 channels at 28x28 (the bf16 kernels take it).
fn conv_model() -> Vec<u8> {
    let w: Vec<f32> = (0..32 * 32 * 9)
        .map(|i| ((i % 17) as f32 - 8.0) / 64.0)
        .collect();
    ModelBuilder::new("conv", 17)
        .input("x", DType::F32, &[1, 32, 28, 28])
        .initializer("w", &Tensor::from_f32(vec![32, 32, 3, 3], w))
        .node(
            "Conv",
            "conv",
            &["x", "w"],
            &["y"],
            vec![attr::ints("pads", &[1, 1, 1, 1])],
        )
        .output("y")
        .to_bytes()
}

#[test]
fn a_bf16_compile_records_its_precision_or_names_the_option() {
    let opts = CompileOptions {
        precision: Precision::Bf16,
        ..Default::default()
    };
    let r = compile_onnx_bytes(&conv_model(), None, "conv", &opts);
    if !Precision::Bf16.available() {
        match r {
            Err(Error::CompileOption { option, .. }) => assert_eq!(option, "precision"),
            other => panic!("bf16 compile without bf16 kernels: {other:?}"),
        }
        return;
    }
    let m = r.expect("bf16 compile");
    assert_eq!(m.precision, Precision::Bf16);
    assert!(m.node_est_us.iter().all(|&t| t > 0.0));
    // Through the file, and loaded in bf16 unless the environment says otherwise.
    let bytes = crate::format::write_models(std::slice::from_ref(&m)).expect("write");
    let back = crate::format::read_models(&bytes, "mem").expect("read");
    assert_eq!(back[0].precision, Precision::Bf16);
    let o = PlanOptions::for_model_with(back[0].precision, |_| None).expect("options");
    assert_eq!(o.precision, Precision::Bf16);
    // The default compile stays f32.
    let f = compile_onnx_bytes(&conv_model(), None, "conv", &CompileOptions::default())
        .expect("f32 compile");
    assert_eq!(f.precision, Precision::F32);
}

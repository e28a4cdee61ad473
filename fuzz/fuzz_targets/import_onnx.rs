//! Fuzzes the ONNX importer: any bytes must give `Ok` or a clean error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vnpu::onnx::import_model(data, &vnpu::onnx::ImportOptions::default());
});

//! Generates the C header from `src/ffi/` into OUT_DIR (cargo's rule: build scripts
//! write only there). Only `src/ffi/` is parsed, so nothing outside the C ABI leaks into the
//! header. The committed `include/vnpu.h` is compared against it by `tests/header_drift.rs`.
fn main() {
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // A versioned SONAME (libvnpu.so.MAJOR), so that programs linked against libvnpu.so
    // (or the libdnn.so alias CMake installs) record it rather than a build path.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvnpu.so.{major}");
    }
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    let config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new()
        .with_src(format!("{crate_dir}/src/ffi/mod.rs"))
        .with_config(config)
        .generate()
    {
        Ok(bindings) => {
            bindings.write_to_file(format!("{out_dir}/vnpu.h"));
        }
        Err(e) => {
            println!("cargo:warning=cbindgen failed: {e}");
        }
    }
}

//! Model loading: compiled files (mmap + validation) and ONNX files compiled on load,
//! with an optional on-disk cache of compiled files.
//!
//! Cache key: hash of (ONNX bytes, compile options, vnpu version). The cache directory
//! comes from `VNPU_CACHE_DIR`; a failing cache write is logged, never fatal, and a
//! corrupt cache entry is recompiled and replaced.

use std::path::{Path, PathBuf};

use crate::compile::{self, CompileOptions, CompiledModel};
use crate::error::{Error, Result};
use crate::format;

/// True when the bytes look like an ONNX model rather than a compiled file (ONNX starts
/// with a protobuf field tag: `ir_version` (0x08) or another small field number).
pub fn looks_like_onnx(path: Option<&Path>, bytes: &[u8]) -> bool {
    if format::is_compiled(bytes) {
        return false;
    }
    if let Some(ext) = path.and_then(|p| p.extension()).and_then(|e| e.to_str()) {
        return ext.eq_ignore_ascii_case("onnx");
    }
    bytes.first() == Some(&0x08)
}

/// The cache file name for these inputs.
pub fn cache_key(onnx: &[u8], opts: &CompileOptions) -> String {
    let opt_bytes = format!("{opts:?}");
    let h1 = format::checksum(onnx);
    let h2 = format::checksum(opt_bytes.as_bytes());
    let h3 = format::checksum(crate::VERSION.as_bytes());
    format!("{:016x}{:016x}.vnpu", h1, h2 ^ h3.rotate_left(17))
}

/// Where compiled ONNX models are cached (`VNPU_CACHE_DIR`), if configured.
pub fn cache_dir() -> Option<PathBuf> {
    crate::config::cache_dir()
}

/// How a model was obtained, for `vnpu` output and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// A compiled file.
    Compiled,
    /// ONNX compiled now (and stored in the cache if one is configured).
    CompiledNow,
    /// ONNX whose compiled form came from the cache.
    Cache,
}

/// Compiles ONNX bytes, going through the cache directory when given.
pub fn compile_cached(
    bytes: &[u8],
    base_dir: Option<&Path>,
    name: &str,
    opts: &CompileOptions,
    cache: Option<&Path>,
) -> Result<(Vec<CompiledModel>, LoadSource)> {
    let mut opts = opts.clone();
    if opts.name.is_none() {
        opts.name = Some(name.to_string());
    }
    if let Some(dir) = cache {
        let file = dir.join(cache_key(bytes, &opts));
        if file.exists() {
            match format::load_file(&file) {
                Ok(models) => return Ok((models, LoadSource::Cache)),
                Err(e) => eprintln!(
                    "vnpu: warning: ignoring bad cache entry {}: {e}",
                    file.display()
                ),
            }
        }
        let model = compile::compile_onnx_bytes(bytes, base_dir, name, &opts)?;
        let out = format::write_models(std::slice::from_ref(&model))?;
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        let stored = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(&tmp, &out))
            .and_then(|_| std::fs::rename(&tmp, &file));
        if let Err(e) = stored {
            eprintln!(
                "vnpu: warning: cannot write cache entry {}: {e}",
                file.display()
            );
        }
        return Ok((vec![model], LoadSource::CompiledNow));
    }
    let model = compile::compile_onnx_bytes(bytes, base_dir, name, &opts)?;
    Ok((vec![model], LoadSource::CompiledNow))
}

/// Loads the models of one file: a compiled file, or an ONNX file compiled on load.
pub fn load_path(path: &Path, opts: &CompileOptions) -> Result<(Vec<CompiledModel>, LoadSource)> {
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if looks_like_onnx(Some(path), &bytes) {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        return compile_cached(&bytes, path.parent(), &name, opts, cache_dir().as_deref());
    }
    drop(bytes);
    Ok((format::load_file(path)?, LoadSource::Compiled))
}

/// Loads models from bytes in memory (compiled, or ONNX compiled on load).
pub fn load_bytes(
    bytes: &[u8],
    index: usize,
    opts: &CompileOptions,
) -> Result<(Vec<CompiledModel>, LoadSource)> {
    if looks_like_onnx(None, bytes) {
        let name = format!("model{index}");
        return compile_cached(bytes, None, &name, opts, cache_dir().as_deref());
    }
    Ok((
        format::read_models(bytes, &format!("<memory #{index}>"))?,
        LoadSource::Compiled,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_key_changes_with_inputs() {
        let o = CompileOptions::default();
        let mut o2 = o.clone();
        o2.max_time_per_fc = 1000;
        assert_ne!(cache_key(b"a", &o), cache_key(b"b", &o));
        assert_ne!(cache_key(b"a", &o), cache_key(b"a", &o2));
        assert_eq!(cache_key(b"a", &o), cache_key(b"a", &o.clone()));
    }

    #[test]
    fn onnx_detection() {
        assert!(looks_like_onnx(Some(Path::new("m.onnx")), b"\x08\x07"));
        assert!(!looks_like_onnx(Some(Path::new("m.bin")), b"\x08\x07"));
        assert!(looks_like_onnx(None, b"\x08\x07"));
        assert!(!looks_like_onnx(None, b"VNPUMODL...."));
    }
}

//! Model loading: compiled files (mmap + validation) and ONNX files compiled on load,
//! with an optional on-disk cache of compiled files.
//!
//! Model files are opened once, checked on the open descriptor (regular files only: no
//! device, FIFO or directory; size bounded) and never read whole before that; compiled
//! files are mapped, not read.
//!
//! Cache (`VNPU_CACHE_DIR`): key = hash of (ONNX bytes, compile options, vnpu version).
//! 1. The folder is created private (0700). It must be a real directory (not a link)
//!    owned by this user; group/other permission bits are removed when it is ours,
//!    otherwise the cache is not used (a warning says why) and the model is compiled.
//! 2. An entry is opened without following links and used only if it is a regular file
//!    owned by this user that passes full verification (both checksums, every model);
//!    anything else (foreign, tampered, truncated) is recompiled and replaced.
//! 3. A new entry is written to a temporary file created exclusively
//!    (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600) under an unpredictable name, then
//!    renamed over the entry atomically. A failing cache write is a warning, never fatal.

use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::compile::{self, CompileOptions, CompiledModel};
use crate::error::{Error, Result};
use crate::format;

/// Largest ONNX model file accepted (protobuf caps a message at 2 GiB).
pub const MAX_ONNX_LEN: u64 = 2 << 30;

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

fn cache_err(dir: &Path, reason: impl Into<String>) -> Error {
    Error::Io {
        path: dir.to_path_buf(),
        reason: format!("compile cache: {}", reason.into()),
    }
}

/// Makes sure `dir` is a private cache folder of this user (step 1 of the module doc).
#[cfg(unix)]
pub fn prepare_cache_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(cache_err(dir, format!("cannot create the folder: {e}")));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| cache_err(dir, e.to_string()))?;
    if !meta.file_type().is_dir() {
        return Err(cache_err(
            dir,
            "not a directory (a symbolic link or a file)",
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(cache_err(
            dir,
            format!("owned by uid {}, not by this user ({me})", meta.uid()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| cache_err(dir, format!("cannot make the folder private: {e}")))?;
    }
    Ok(())
}

/// Makes sure `dir` exists (no ownership model on this platform).
#[cfg(not(unix))]
pub fn prepare_cache_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| cache_err(dir, e.to_string()))
}

/// Opens a cache entry without following links; `None` when it is missing or is not a
/// regular file of this user (step 2).
fn open_entry(file: &Path) -> Option<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let f = o.open(file).ok()?;
    let meta = f.metadata().ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.mode() & 0o022 != 0 {
            return None;
        }
    }
    meta.file_type().is_file().then_some(f)
}

/// A temporary file name nobody can guess: SipHash keyed by the OS's randomness
/// (`RandomState`) over the process id, the time and a counter.
fn unpredictable_name(key: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut words = [0u64; 2];
    for w in &mut words {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(nanos);
        h.write_u64(n);
        *w = h.finish();
    }
    format!(".{key}.{:016x}{:016x}.tmp", words[0], words[1])
}

/// Writes `bytes` to `file` through an exclusive temporary file and an atomic rename
/// (step 3).
fn store_entry(dir: &Path, file: &Path, key: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(unpredictable_name(key));
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let written = o.open(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&tmp, file));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
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
    let cache = cache.filter(|dir| match prepare_cache_dir(dir) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("vnpu: warning: not using the compile cache: {e}");
            false
        }
    });
    let Some(dir) = cache else {
        let model = compile::compile_onnx_bytes(bytes, base_dir, name, &opts)?;
        return Ok((vec![model], LoadSource::CompiledNow));
    };
    let key = cache_key(bytes, &opts);
    let file = dir.join(&key);
    if let Some(f) = open_entry(&file) {
        let len = f.metadata().map_or(0, |m| m.len());
        match format::load_opened(&f, len, &file, true) {
            Ok(models) => return Ok((models, LoadSource::Cache)),
            Err(e) => eprintln!(
                "vnpu: warning: recompiling bad cache entry {}: {e}",
                file.display()
            ),
        }
    }
    let model = compile::compile_onnx_bytes(bytes, base_dir, name, &opts)?;
    let out = format::write_models(std::slice::from_ref(&model))?;
    if let Err(e) = store_entry(dir, &file, &key, &out) {
        eprintln!(
            "vnpu: warning: cannot write cache entry {}: {e}",
            file.display()
        );
    }
    Ok((vec![model], LoadSource::CompiledNow))
}

/// Loads the models of one file: a compiled file (mapped), or an ONNX file compiled on
/// load. The file is opened once and checked on its descriptor before anything is read.
pub fn load_path(path: &Path, opts: &CompileOptions) -> Result<(Vec<CompiledModel>, LoadSource)> {
    let (file, len) = format::open_regular(path, format::MAX_FILE_LEN)?;
    let io = |e: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut head = Vec::with_capacity(8);
    (&file).take(8).read_to_end(&mut head).map_err(io)?;
    if !looks_like_onnx(Some(path), &head) {
        return Ok((
            format::load_opened(&file, len, path, false)?,
            LoadSource::Compiled,
        ));
    }
    if len > MAX_ONNX_LEN {
        return Err(Error::OnnxFormat {
            model: path.display().to_string(),
            reason: format!("{len} bytes is larger than an ONNX model can be ({MAX_ONNX_LEN})"),
        });
    }
    let mut bytes = head;
    bytes
        .try_reserve_exact(len as usize)
        .map_err(|e| Error::Io {
            path: path.to_path_buf(),
            reason: format!("cannot hold {len} bytes: {e}"),
        })?;
    // Reads at most the size checked above (the file may not grow meanwhile).
    (&file)
        .take(len.saturating_sub(8))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    compile_cached(&bytes, path.parent(), &name, opts, cache_dir().as_deref())
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

    fn tiny_onnx() -> Vec<u8> {
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny_classifier.onnx"))
            .expect("models/tiny_classifier.onnx")
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vnpu_loader_{tag}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[cfg(unix)]
    #[test]
    fn cache_folder_is_private_and_links_are_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("cache");
        let dir = root.join("c");
        let o = CompileOptions::default();
        let (_, s) = compile_cached(&tiny_onnx(), None, "t", &o, Some(&dir)).unwrap();
        assert_eq!(s, LoadSource::CompiledNow);
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Entries are 0600 and no temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let m = std::fs::metadata(&names[0]).unwrap().permissions().mode();
        assert_eq!(m & 0o777, 0o600);
        let (_, s) = compile_cached(&tiny_onnx(), None, "t", &o, Some(&dir)).unwrap();
        assert_eq!(s, LoadSource::Cache);
        // A world-writable folder of ours is made private again.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let (_, s) = compile_cached(&tiny_onnx(), None, "t", &o, Some(&dir)).unwrap();
        assert_eq!(s, LoadSource::Cache);
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // An entry replaced by a link to a valid compiled file elsewhere is not followed:
        // recompiled, and the link replaced (its target untouched).
        let outside = root.join("outside.vnpu");
        std::fs::copy(&names[0], &outside).unwrap();
        std::fs::remove_file(&names[0]).unwrap();
        std::os::unix::fs::symlink(&outside, &names[0]).unwrap();
        let before = std::fs::read(&outside).unwrap();
        let (_, s) = compile_cached(&tiny_onnx(), None, "t", &o, Some(&dir)).unwrap();
        assert_eq!(s, LoadSource::CompiledNow);
        assert!(!std::fs::symlink_metadata(&names[0])
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&outside).unwrap(), before);
        // A cache folder that is a link is refused (the model still compiles).
        let link = root.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = prepare_cache_dir(&link).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let (_, s) = compile_cached(&tiny_onnx(), None, "t", &o, Some(&link)).unwrap();
        assert_eq!(s, LoadSource::CompiledNow);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn temporary_names_are_unpredictable() {
        let a = unpredictable_name("k");
        let b = unpredictable_name("k");
        assert_ne!(a, b);
        assert!(
            a.starts_with(".k.") && a.ends_with(".tmp") && a.len() > 36,
            "{a}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_refused_before_reading() {
        let o = CompileOptions::default();
        for p in ["/dev/zero", "/dev/urandom"] {
            let e = load_path(Path::new(p), &o).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{p}: {e}");
        }
        let root = scratch("fifo");
        std::fs::create_dir_all(&root).unwrap();
        let fifo = root.join("m.onnx");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = load_path(&fifo, &o).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

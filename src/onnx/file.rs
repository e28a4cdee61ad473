//! Opening the files a model names — the model file itself and its external data —
//! as untrusted input.
//!
//! Invariants: every file is opened non-blocking (a FIFO never blocks `open`) and
//! checked on the open descriptor (`fstat`) to be a regular file before anything is
//! read, so devices (`/dev/zero`), FIFOs and directories are refused; its size is
//! compared with the caller's limit before memory is taken, and the read is bounded by
//! that size even if the file grows meanwhile. External data is resolved with its
//! symlinks and must stay inside the model's folder; the resolved path is opened without
//! following a final symlink (`O_NOFOLLOW`), so a link swapped in afterwards is refused.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Largest ONNX file accepted: protobuf messages are limited to 2 GiB (larger models
/// keep their weights in external data files).
pub const MAX_ONNX_FILE_BYTES: u64 = 2 << 30;

/// What a non-regular file is, for messages.
fn kind(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` read-only and non-blocking (and, with `nofollow`, refusing a final
/// symlink), and checks on the descriptor that it is a regular file. Errors are
/// `Error::Io` naming the path.
pub(crate) fn open_regular(path: &Path, nofollow: bool) -> Result<(File, u64)> {
    let io = |reason: String| Error::Io {
        path: path.to_path_buf(),
        reason,
    };
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if nofollow && e.raw_os_error() == Some(libc::ELOOP) {
                io("is a symbolic link (refused)".into())
            } else {
                io(e.to_string())
            }
        })?;
    // `File::metadata` is fstat on the open descriptor: no race with the path.
    let m = f.metadata().map_err(|e| io(e.to_string()))?;
    if !m.file_type().is_file() {
        return Err(io(format!("{}; only regular files are read", kind(&m))));
    }
    Ok((f, m.len()))
}

/// Reads `len` bytes (already checked against a limit) from `f` at the current position,
/// with a fallible allocation and never more than `len`; fewer bytes (a file that shrank
/// since `fstat`) is an error.
pub(crate) fn read_exactly(f: &mut File, len: u64, path: &Path) -> Result<Vec<u8>> {
    let io = |reason: String| Error::Io {
        path: path.to_path_buf(),
        reason,
    };
    let n = usize::try_from(len).map_err(|_| io(format!("{len} bytes do not fit in memory")))?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n)
        .map_err(|_| Error::OutOfMemory(format!("{n} bytes for {}", path.display())))?;
    f.take(len)
        .read_to_end(&mut buf)
        .map_err(|e| io(e.to_string()))?;
    if buf.len() as u64 != len {
        return Err(io(format!(
            "ended after {} of {len} bytes (changed while being read)",
            buf.len()
        )));
    }
    Ok(buf)
}

/// Reads a model file whose size is at most `max_bytes` (e.g. [`MAX_ONNX_FILE_BYTES`]):
/// regular files only, the size checked before anything is read.
///
/// Errors: `Error::Io` when the file cannot be opened or is not a regular file
/// (FIFO, device, directory); `Error::ModelFormat` when it is larger than `max_bytes`.
pub fn read_model_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let (mut f, len) = open_regular(path, false)?;
    if len > max_bytes {
        return Err(Error::ModelFormat {
            path: path.display().to_string(),
            reason: format!("the file is {len} bytes, over the limit of {max_bytes} bytes"),
        });
    }
    read_exactly(&mut f, len, path)
}

/// Resolves external-data location `rel` (already checked to be a relative path of
/// normal components) against the model folder `base`, following symlinks, and
/// requires the result to stay inside `base`. Returns the resolved path, or a reason.
pub(crate) fn resolve_inside(base: &Path, rel: &Path) -> std::result::Result<PathBuf, String> {
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let root = base
        .canonicalize()
        .map_err(|e| format!("model folder '{}': {e}", base.display()))?;
    let real = base
        .join(rel)
        .canonicalize()
        .map_err(|e| format!("'{}': {e}", rel.display()))?;
    if !real.starts_with(&root) {
        return Err(format!(
            "'{}' resolves to '{}', outside the model folder '{}'",
            rel.display(),
            real.display(),
            root.display()
        ));
    }
    Ok(real)
}

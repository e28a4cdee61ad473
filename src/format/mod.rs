//! The compiled model file: write, load (mmap) and validate.
//!
//! Layout (little-endian), format version 2:
//! ```text
//! 0   magic      8  b"VNPUMODL"
//! 8   version    4  FORMAT_VERSION
//! 12  header     4  HEADER_LEN (64)
//! 16  manifest   8+8 offset, length   (protobuf records of `schema`: names, graphs
//!                                      without weights, segments, FCs)
//! 32  weights    8+8 offset, length   (every constant, each WEIGHT_ALIGN-aligned)
//! 48  manifest checksum  8  hash of header bytes [0, 48), the manifest and the zero
//!                           padding up to the weights
//! 56  weights checksum   8  hash of the weights section
//! ```
//! A file holds one or more models (a packed model). Loading checks, in order: size,
//! magic, version, header fields, section bounds, the manifest checksum; then decodes
//! the manifest records and validates every model semantically ([`validate`]: indices,
//! topological order, shapes re-inferred and compared, segments, FCs, boundary specs,
//! constants' ranges, alignment and sizes) before any slice of the weights is made.
//! A mapped file is untrusted input: no path panics on it, and no file that loads breaks
//! an invariant the executor relies on.
//!
//! Constants are not copied: each becomes a view into the shared read-only map
//! ([`crate::ir::TensorData::Mapped`]). Conv and GEMM weights are also stored packed as
//! the writing host's kernel table wants them (an optional manifest record, see
//! [`schema::PackedWeightsRecord`]); a plan for the same table borrows them from the map
//! instead of packing, so loading touches no weight page at all.
//!
//! Why an optional record and not a format version bump: the packed weights are
//! redundant (derived from the constants, which stay), so a reader that ignores them
//! still computes the same outputs; prost skips the unknown field, and the files
//! written before it (the golden file among them) keep loading, packing at load.
//!
//! Why the weights have their own checksum, checked by [`verify_file`] (`vnpu info
//! --verify`, and the compile cache) rather than on every load: hashing ~45 MB of
//! weights costs several milliseconds, more than the whole load-time budget, while a
//! changed weight cannot break any invariant (every constant's range, size and
//! alignment is validated structurally); it can only change the numbers a model
//! computes, like editing the ONNX file would. Everything that steers execution
//! (header, manifest) is checksummed on every load.

pub mod info;
mod manifest;
mod ops;
pub mod schema;
pub mod validate;

use std::path::Path;
use std::sync::Arc;

use prost::Message;

use crate::compile::CompiledModel;
use crate::error::{Error, Result};
use crate::exec::{PackGeometry, PackedWeights};

/// File magic.
pub const MAGIC: &[u8; 8] = b"VNPUMODL";
/// Current format version: older files are refused with a request to recompile, newer
/// ones as incompatible.
pub const FORMAT_VERSION: u32 = 2;
/// Header size in bytes.
pub const HEADER_LEN: usize = 64;
/// Alignment of every constant in the weights section.
pub const WEIGHT_ALIGN: usize = 64;
/// Largest compiled file accepted (checked before mapping).
pub const MAX_FILE_LEN: u64 = 1 << 40;

/// A 64-bit hash over the bytes: four independent multiply-xorshift lanes over 32-byte
/// blocks (so the multiplies pipeline), folded together with the tail and the length.
pub fn checksum(data: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes: [u64; 4] = [
        0xCBF2_9CE4_8422_2325,
        0x8422_2325_CBF2_9CE4,
        0x2545_F491_4F6C_DD1D,
        0x4F6C_DD1D_2545_F491,
    ];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (l, c) in lanes.iter_mut().zip(b.chunks_exact(8)) {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            *l = (*l ^ w).wrapping_mul(K);
            *l ^= *l >> 31;
        }
    }
    let mut h = (data.len() as u64).wrapping_mul(K);
    for l in lanes {
        h = (h ^ l).wrapping_mul(K);
        h ^= h >> 29;
    }
    for &b in blocks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    h ^ (h >> 29)
}

/// The manifest checksum: header fields before it, the manifest, and the padding.
fn manifest_checksum(bytes: &[u8], weights_off: usize) -> u64 {
    checksum(&bytes[..48]) ^ checksum(&bytes[HEADER_LEN..weights_off]).rotate_left(23)
}

/// The packed weights a file stores for `m`: those it holds when they were packed for
/// this host's kernel table, else those its plan packs now. A model the executor cannot
/// plan is stored without (loading it fails at planning anyway).
fn packed_for_file(m: &CompiledModel) -> PackedWeights {
    let isa = crate::kernels::simd::best_isa();
    if !m.packed.is_empty() && m.packed.geometry == PackGeometry::of(isa) {
        return m.packed.clone();
    }
    let opts = crate::exec::PlanOptions::default();
    match crate::exec::ModelPlan::new(Arc::new(m.graph.clone()), &opts) {
        Ok(p) => p.packed_weights(),
        Err(_) => PackedWeights::default(),
    }
}

/// Serialises models into the file format; conv and GEMM weights are also stored packed
/// for this host's kernel table (see [`schema::PackedWeightsRecord`]).
pub fn write_models(models: &[CompiledModel]) -> Result<Vec<u8>> {
    let mut weights: Vec<u8> = Vec::new();
    let mut records = Vec::with_capacity(models.len());
    for m in models {
        let packed = packed_for_file(m);
        let r = manifest::encode_model(m, &packed, &mut weights).map_err(|reason| {
            Error::ModelFormat {
                path: "<memory>".into(),
                reason: format!("model '{}' cannot be written: {reason}", m.name),
            }
        })?;
        records.push(r);
    }
    let mbytes = schema::ManifestRecord {
        vnpu_version: crate::VERSION.to_string(),
        models: records,
    }
    .encode_to_vec();
    let manifest_off = HEADER_LEN;
    let weights_off = (manifest_off + mbytes.len()).div_ceil(WEIGHT_ALIGN) * WEIGHT_ALIGN;
    let mut out = vec![0u8; weights_off + weights.len()];
    out[manifest_off..manifest_off + mbytes.len()].copy_from_slice(&mbytes);
    out[weights_off..].copy_from_slice(&weights);
    out[0..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&(manifest_off as u64).to_le_bytes());
    out[24..32].copy_from_slice(&(mbytes.len() as u64).to_le_bytes());
    out[32..40].copy_from_slice(&(weights_off as u64).to_le_bytes());
    out[40..48].copy_from_slice(&(weights.len() as u64).to_le_bytes());
    let msum = manifest_checksum(&out, weights_off);
    out[48..56].copy_from_slice(&msum.to_le_bytes());
    let wsum = checksum(&out[weights_off..]);
    out[56..64].copy_from_slice(&wsum.to_le_bytes());
    Ok(out)
}

/// Recomputes both checksums of a file image in place (after its manifest or weights
/// were edited without changing section sizes): what a deliberate editor would do. For
/// tests and fuzzing; a header too short or inconsistent is left as it is.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_LEN {
        return;
    }
    let woff = u64_at(bytes, 32);
    if woff < HEADER_LEN as u64 || woff > bytes.len() as u64 {
        return;
    }
    let woff = woff as usize;
    let msum = manifest_checksum(bytes, woff);
    bytes[48..56].copy_from_slice(&msum.to_le_bytes());
    let wsum = checksum(&bytes[woff..]);
    bytes[56..64].copy_from_slice(&wsum.to_le_bytes());
}

/// Writes models to a file.
pub fn save_models(path: &Path, models: &[CompiledModel]) -> Result<()> {
    let bytes = write_models(models)?;
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// True when the bytes start with our magic.
pub fn is_compiled(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[..8] == MAGIC
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Recognisable foreign formats, for a better message.
fn foreign_kind(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"HBM")
        || bytes.starts_with(b"HORIZON")
        || bytes.windows(7).take(256).any(|w| w == b"HORIZON")
    {
        return Some(
            "a vendor NPU model (.bin/.hbm); recompile the ONNX model with `vnpu compile`",
        );
    }
    if bytes.starts_with(b"\x7fELF") {
        return Some("an ELF binary");
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return Some("a zip archive");
    }
    None
}

/// Where the sections of a checked header are.
struct Sections {
    manifest: std::ops::Range<usize>,
    weights: std::ops::Range<usize>,
}

/// Checks size, magic, version, header fields, section bounds and the manifest
/// checksum (and the weights checksum when `verify_weights`).
fn check_header(bytes: &[u8], path: &str, verify_weights: bool) -> Result<Sections> {
    let bad = |reason: String| Error::ModelFormat {
        path: path.to_string(),
        reason,
    };
    if bytes.is_empty() {
        return Err(bad("the file is empty".into()));
    }
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        let what = foreign_kind(bytes).unwrap_or("not a vnpu compiled model (bad magic)");
        return Err(bad(what.into()));
    }
    if bytes.len() < 12 {
        return Err(bad(format!("truncated: {} bytes", bytes.len())));
    }
    let version = u32_at(bytes, 8);
    if version > FORMAT_VERSION {
        return Err(Error::IncompatibleModel {
            path: path.to_string(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if (1..FORMAT_VERSION).contains(&version) {
        return Err(bad(format!(
            "older format version {version}: recompile with `vnpu compile` (this vnpu reads \
             version {FORMAT_VERSION})"
        )));
    }
    if bytes.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, the header alone is {HEADER_LEN}",
            bytes.len()
        )));
    }
    if version == 0 || u32_at(bytes, 12) as usize != HEADER_LEN {
        return Err(bad("corrupted header".into()));
    }
    let (moff, mlen) = (u64_at(bytes, 16), u64_at(bytes, 24));
    let (woff, wlen) = (u64_at(bytes, 32), u64_at(bytes, 40));
    let total = bytes.len() as u64;
    let end_of = |off: u64, len: u64| off.checked_add(len).filter(|&e| e <= total);
    let (Some(mend), Some(wend)) = (end_of(moff, mlen), end_of(woff, wlen)) else {
        return Err(bad(format!(
            "truncated: sections end past the file's {total} bytes"
        )));
    };
    if moff != HEADER_LEN as u64 || woff < mend || wend != total || woff % WEIGHT_ALIGN as u64 != 0
    {
        return Err(bad("corrupted header: inconsistent section offsets".into()));
    }
    // All offsets are now within the file, whose length is a usize.
    let (mend, woff, wend) = (mend as usize, woff as usize, wend as usize);
    if manifest_checksum(bytes, woff) != u64_at(bytes, 48) {
        return Err(bad(
            "manifest checksum mismatch: the file is corrupted".into()
        ));
    }
    if bytes[mend..woff].iter().any(|&b| b != 0) {
        return Err(bad("corrupted padding before the weights".into()));
    }
    if verify_weights && checksum(&bytes[woff..wend]) != u64_at(bytes, 56) {
        return Err(bad(
            "weights checksum mismatch: the file is corrupted".into()
        ));
    }
    Ok(Sections {
        manifest: HEADER_LEN..mend,
        weights: woff..wend,
    })
}

/// Decodes and validates every model of a file held by `owner`; constants become views
/// into `owner`.
fn read_shared(
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    path: &str,
    verify_weights: bool,
) -> Result<Vec<CompiledModel>> {
    let bad = |reason: String| Error::ModelFormat {
        path: path.to_string(),
        reason,
    };
    let bytes: &[u8] = (*owner).as_ref();
    let sec = check_header(bytes, path, verify_weights)?;
    let rec = schema::ManifestRecord::decode(&bytes[sec.manifest.clone()])
        .map_err(|e| bad(format!("manifest cannot be decoded: {e}")))?;
    if rec.models.is_empty() {
        return Err(bad("manifest holds no model".into()));
    }
    let weights = manifest::Weights {
        owner: owner.clone(),
        range: sec.weights,
    };
    let mut models: Vec<CompiledModel> = Vec::with_capacity(rec.models.len());
    for r in rec.models {
        let name = r.name.clone();
        if models.iter().any(|m| m.name == name) {
            return Err(bad(format!(
                "two models are named '{name}' (names must be unique in a file)"
            )));
        }
        let m = manifest::decode_model(r, &weights)
            .and_then(|m| validate::validate_model(&m).map(|()| m))
            .map_err(|reason| bad(format!("model '{name}': {reason}")))?;
        models.push(m);
    }
    Ok(models)
}

/// Loads and validates models from file bytes in memory, checking both checksums;
/// `path` is used in messages only. The bytes are copied once into a cache-line-aligned
/// buffer (on huge pages where it spans whole ones) that the constants then borrow.
pub fn read_models(bytes: &[u8], path: &str) -> Result<Vec<CompiledModel>> {
    // Header checks first, so junk is refused before any copy.
    check_header(bytes, path, true)?;
    let owner = Arc::new(crate::huge_pages::HugeBytes::copy_of(bytes));
    read_shared(owner, path, false)
}

/// Opens a model file for reading: a regular file (checked on the open descriptor, so
/// devices, FIFOs and directories are refused without blocking or reading) no larger
/// than `max_len`. Returns the file and its length.
pub fn open_regular(path: &Path, max_len: u64) -> Result<(std::fs::File, u64)> {
    let io = |e: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking open: a FIFO would otherwise block until a writer appears.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let bad = |reason: String| Error::ModelFormat {
        path: path.display().to_string(),
        reason,
    };
    if !meta.file_type().is_file() {
        return Err(bad(
            "not a regular file (a device, FIFO or directory)".into()
        ));
    }
    if meta.len() > max_len {
        return Err(bad(format!(
            "{} bytes is larger than any model this vnpu accepts ({max_len})",
            meta.len()
        )));
    }
    Ok((file, meta.len()))
}

/// Maps and validates an opened compiled file (see [`open_regular`]) of length `len`;
/// `verify_weights` also checks the weights checksum.
pub fn load_opened(
    file: &std::fs::File,
    len: u64,
    path: &Path,
    verify_weights: bool,
) -> Result<Vec<CompiledModel>> {
    let shown = path.display().to_string();
    if len < HEADER_LEN as u64 {
        // Too short to hold a header: always an error, with the precise reason.
        let mut bytes = Vec::new();
        use std::io::Read;
        file.take(HEADER_LEN as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::Io {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        return check_header(&bytes, &shown, true).map(|_| Vec::new());
    }
    let mut opts = memmap2::MmapOptions::new();
    if verify_weights {
        // Every page is read by the checksum anyway: map them all at once.
        opts.populate();
    }
    // SAFETY: the map is read-only; its bytes are treated as untrusted input and fully
    // validated before use. A concurrent truncation of the file by another process could
    // fault; compiled files (and cache entries, written by atomic rename) are not
    // modified in place.
    let map = unsafe { opts.map(file) }.map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if map.len() as u64 != len {
        return Err(Error::ModelFormat {
            path: shown,
            reason: "the file changed while loading".into(),
        });
    }
    // With huge pages, the file's bytes are copied off the map into memory on 2 MiB
    // pages (the weights are read every run; a TLB miss per 4 KiB page of them is dear
    // in a VM: a CRNN's weight-heavy nodes 10-15 % faster on a Xeon VM); else they are
    // read in place.
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = if crate::huge_pages::for_weights()? {
        Arc::new(crate::huge_pages::HugeBytes::copy_of(&map))
    } else {
        Arc::new(map)
    };
    read_shared(owner, &shown, verify_weights)
}

fn load_impl(path: &Path, verify_weights: bool) -> Result<Vec<CompiledModel>> {
    let (file, len) = open_regular(path, MAX_FILE_LEN)?;
    load_opened(&file, len, path, verify_weights)
}

/// Maps and validates a compiled model file. Header and manifest are checksummed; the
/// weights are validated structurally and borrowed from the map (see the module doc for
/// why their checksum is left to [`verify_file`]).
pub fn load_file(path: &Path) -> Result<Vec<CompiledModel>> {
    load_impl(path, false)
}

/// As [`load_file`], also checking the weights checksum (`vnpu info --verify`, the
/// compile cache).
pub fn load_file_verified(path: &Path) -> Result<Vec<CompiledModel>> {
    load_impl(path, true)
}

/// Checks a compiled file completely (both checksums and every model) without keeping it.
pub fn verify_file(path: &Path) -> Result<()> {
    load_file_verified(path).map(|_| ())
}

#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod tests;

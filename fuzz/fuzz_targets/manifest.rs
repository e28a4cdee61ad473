//! Fuzzes the compiled-file manifest past its checksum: the input is a manifest and a
//! weights section (`u32` LE manifest length, manifest bytes, weights bytes); the target
//! wraps them in a well-formed header and recomputes both checksums (what a deliberate
//! editor would do), so every mutation reaches the protobuf decoder and the semantic
//! validation (`format::validate`). A file that loads then gets its execution plan and
//! one inference on zero inputs, FC by FC and tile by tile as the runtime runs it: each
//! step must return `Ok` or an error, never panic.
//!
//! The corpus seeds were made from compiled `.vnpu` files by `fuzz/seed_manifest.py`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vnpu::exec::Tile;
use vnpu::format::{reseal, FORMAT_VERSION, HEADER_LEN, MAGIC, WEIGHT_ALIGN};
use vnpu::runtime::Model;

/// Builds a file image around `manifest` and `weights` (checksums recomputed).
fn file_image(manifest: &[u8], weights: &[u8]) -> Vec<u8> {
    let woff = (HEADER_LEN + manifest.len()).div_ceil(WEIGHT_ALIGN) * WEIGHT_ALIGN;
    let mut out = vec![0u8; woff + weights.len()];
    out[0..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&(HEADER_LEN as u64).to_le_bytes());
    out[24..32].copy_from_slice(&(manifest.len() as u64).to_le_bytes());
    out[32..40].copy_from_slice(&(woff as u64).to_le_bytes());
    out[40..48].copy_from_slice(&(weights.len() as u64).to_le_bytes());
    out[HEADER_LEN..HEADER_LEN + manifest.len()].copy_from_slice(manifest);
    out[woff..].copy_from_slice(weights);
    reseal(&mut out);
    out
}

/// Runs one inference of `m` on zero inputs the way the runtime does: every FC of every
/// segment, each step with its recorded tile, then every output read back.
fn infer_zeros(m: &Model) -> vnpu::Result<()> {
    let plan = &m.plan;
    let mut st = plan.new_state();
    for i in 0..m.inputs.len() {
        plan.set_input(&mut st, i, &vec![0u8; plan.input_len(i)])?;
    }
    for seg in &m.compiled.segments {
        for fc in &seg.fcs {
            for step in &fc.steps {
                let tile = Tile {
                    index: step.tile as usize,
                    count: step.tiles as usize,
                };
                plan.run_node(&mut st, step.node, tile)?;
            }
        }
    }
    for i in 0..m.outputs.len() {
        let mut out = vec![0u8; plan.output_len(i)];
        plan.read_output(&st, i, &mut out)?;
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let mlen = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
    let rest = &data[4..];
    let mlen = mlen.min(rest.len());
    let image = file_image(&rest[..mlen], &rest[mlen..]);
    let Ok(models) = vnpu::format::read_models(&image, "fuzz") else {
        return;
    };
    for compiled in models {
        if let Ok(m) = Model::new(compiled) {
            let _ = infer_zeros(&m);
        }
    }
});

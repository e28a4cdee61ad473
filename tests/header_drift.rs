//! The committed `include/vnpu.h` must equal the header cbindgen generates from
//! `src/ffi/` in `build.rs` (into OUT_DIR). On drift, the failure message gives the
//! command that regenerates the committed copy.

#[test]
fn committed_header_matches_generated() {
    let generated_path = concat!(env!("OUT_DIR"), "/vnpu.h");
    let committed_path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/vnpu.h");
    let generated = std::fs::read_to_string(generated_path)
        .unwrap_or_else(|e| panic!("{generated_path}: {e} (did cbindgen fail in build.rs?)"));
    let committed =
        std::fs::read_to_string(committed_path).unwrap_or_else(|e| panic!("{committed_path}: {e}"));
    if generated != committed {
        let line = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the length".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "include/vnpu.h is out of date (first difference at {line}).\n\
             Regenerate it with:\n    cargo build && cp {generated_path} {committed_path}"
        );
    }
}

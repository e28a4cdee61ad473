//! Winograd with bf16 point GEMMs: the AVX512_BF16 tiles give the portable emulation's
//! bits, ranges of tiles and channels (and intra-op chunks) give the whole's bits, and
//! the error against the direct conv stays within the bound bf16 operands allow.

use super::tests::{cases, direct};
use super::*;
use crate::kernels::bf16;
use crate::kernels::testutil::rand_vec;

/// Runs `p` whole (one image after another, no shared input) with a bias.
fn run_whole(p: &WinogradPlan, isa: Isa, x: &[f32], bias: &[f32]) -> Vec<f32> {
    let s = p.shape();
    let epi = Epilogue {
        bias: Some(bias),
        ..Epilogue::NONE
    };
    let mut scratch = vec![f32::NAN; p.scratch_len()];
    let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
    let th = p.tile_rows();
    p.run(
        isa,
        x,
        &mut y,
        (0, s.c_out),
        (0, th),
        None,
        &epi,
        &mut scratch,
    );
    y
}

/// Largest `|got - want| / Σ|x||w|` over the outputs.
fn worst(got: &[f32], want: &[f64], mag: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .zip(mag)
        .map(|((g, w), m)| (f64::from(*g) - w).abs() / m.max(1e-30))
        .fold(0.0, f64::max)
}

/// The bf16 tables to compare: the portable emulation and, where the CPU has it, the
/// AVX512_BF16 one.
fn tables() -> Vec<&'static bf16::Bf16Table> {
    std::iter::once(bf16::portable())
        .chain(bf16::native())
        .collect()
}

/// Error bounds relative to `Σ|x||w|`. Each bf16 operand (transformed weight, transformed
/// input) is rounded with a relative error of at most 2^-9, so a point product is off by
/// at most 2^-8 of `|U_p||V_p|`; relative to `Σ|x||w|` that grows with the transforms'
/// weights. F(2x2): input and output transforms add up to 3 terms of weight 1 each way
/// and the weight transform halves, which the measured worst (6.4e-3 over these shapes,
/// 8e-8 in f32) stays well inside at 2^-6. F(4x4): points ±2 and output weights up to 8
/// (measured worst 0.13, the reason the planner keeps F(4x4) in f32 under bf16): 2^-2.
fn tol(tile: usize) -> f64 {
    if tile == 2 {
        2f64.powi(-6)
    } else {
        2f64.powi(-2)
    }
}

#[test]
fn bf16_winograd_matches_portable_and_direct() {
    for (s, tile) in cases().into_iter().flat_map(|s| [(s.clone(), 4), (s, 2)]) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 1);
        let w = rand_vec(s.c_out * s.c_in * 9, 2);
        let bias = rand_vec(s.c_out, 3);
        let (want, mag) = direct(&s, &x, &w, &bias);
        let reference = {
            let p = WinogradPlan::with_tile(&s, &w, tile).into_bf16(bf16::portable());
            assert!(p.is_bf16());
            run_whole(&p, Isa::Portable, &x, &bias)
        };
        let err = worst(&reference, &want, &mag);
        assert!(err <= tol(tile), "{s:?} F({tile}) bf16 error {err:e}");
        // The bf16 path ran: the f32 path's error is orders of magnitude smaller.
        assert!(
            s.c_in * 9 < 16 || err > 1e-5,
            "{s:?} F({tile}) gave f32 accuracy"
        );
        for tab in tables() {
            let p = WinogradPlan::with_tile(&s, &w, tile).into_bf16(tab);
            for isa in crate::kernels::isa::available_isas() {
                let y = run_whole(&p, isa, &x, &bias);
                assert!(y == reference, "{s:?} F({tile}) {} {isa:?}", tab.name);
            }
        }
    }
}

#[test]
fn bf16_winograd_ranges_equal_the_whole() {
    let isa = crate::kernels::isa::best_isa();
    let tab = bf16::native().unwrap_or(bf16::portable());
    for (s, tile) in cases().into_iter().flat_map(|s| [(s.clone(), 4), (s, 2)]) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 4);
        let w = rand_vec(s.c_out * s.c_in * 9, 5);
        let bias = rand_vec(s.c_out, 6);
        let mut p = WinogradPlan::with_tile(&s, &w, tile).into_bf16(tab);
        if s.oh * s.ow > 300 {
            p.set_block_tiles(NR);
        }
        let whole = run_whole(&p, isa, &x, &bias);
        let epi = Epilogue {
            bias: Some(&bias),
            ..Epilogue::NONE
        };
        let mut scratch = vec![f32::NAN; p.scratch_len()];
        let mut y = vec![f32::NAN; whole.len()];
        // Tile ranges cut mid row, mid panel and mid block, without a shared input.
        let t = p.plane_tiles();
        let mut bounds = vec![0];
        bounds.extend([1, t / 3, NR + 3].into_iter().filter(|&c| c > 1 && c < t));
        bounds.sort_unstable();
        bounds.dedup();
        bounds.push(t);
        for r in bounds.windows(2) {
            let ch = (0, s.c_out);
            p.run_tiles(isa, &x, &mut y, ch, (r[0], r[1]), None, &epi, &mut scratch);
        }
        assert!(y == whole, "{s:?} F({tile}) tile ranges {bounds:?}");
        if s.n != 1 {
            continue;
        }
        // Channel chunks from a shared transformed input (the intra-op split), each into
        // its own block of channels, with scratch of `chunk_scratch_len` only.
        let mut v = vec![f32::NAN; p.input_len()];
        p.transform_input(&x, &mut v);
        let ohw = s.oh * s.ow;
        let m = (s.c_out / 2 / MR * MR).max(MR).min(s.c_out);
        let mut cs = vec![f32::NAN; p.chunk_scratch_len()];
        for (c0, c1) in [(0, m), (m, s.c_out)].into_iter().filter(|c| c.0 < c.1) {
            let e = Epilogue {
                bias: Some(&bias),
                channel_offset: c0,
                ..Epilogue::NONE
            };
            let part = &mut y[c0 * ohw..c1 * ohw];
            part.fill(f32::NAN);
            p.run_chunk(isa, &v, part, (c0, c1), &e, &mut cs);
        }
        assert!(y == whole, "{s:?} F({tile}) channel chunks");
    }
}

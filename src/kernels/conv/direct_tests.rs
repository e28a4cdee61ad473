//! The f32 direct conv: the AVX-512 tiles against the portable ones bit for bit, whole
//! convs in both tilings against the naive conv (strides, pads, dilation, odd channels,
//! batches) and against each other, and channel / position ranges with the epilogue
//! against the whole call.

use super::direct::{self, conv2d_f32, conv_ctile_f32, conv_tile_f32, Tiles, Tiling};
use super::direct::{CN, CW, TW};
use super::tests::{conv_naive, shape};
use crate::ir::UnaryOp;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::unary::PostOpRt;
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::{available_isas, Isa, MR};
use crate::kernels::testutil::rand_vec;

/// Direct shapes: 3x3 stride 1 and 2, a 7x7 stride-2 stem on 3 channels, 1x1 stride 2,
/// dilation 2, asymmetric pads and strides, odd channel counts, a batch of 2.
pub(crate) fn shapes() -> Vec<ConvShape> {
    vec![
        shape(1, 12, (9, 11), 13, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 16, (10, 10), 8, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 3, (23, 21), 7, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
        shape(1, 70, (9, 9), 6, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
        shape(1, 9, (12, 13), 5, (3, 3), (1, 1), (2, 2), (2, 2, 2, 1), 1),
        shape(1, 11, (8, 15), 19, (3, 5), (1, 2), (1, 1), (0, 2, 1, 1), 1),
        shape(2, 24, (7, 7), 12, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 65, (5, 5), 20, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
        // Shallow: 3 channels, 3x3 (f32 depth 27, under the bf16 direct conv's minimum).
        shape(1, 3, (10, 12), 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        // A 7x7 output of 64 channels (which the channel tile takes), and one of 40.
        shape(1, 40, (14, 14), 64, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 34, (7, 7), 40, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        // Rows of 16 positions or more (a tile's vectors across plane rows, two whole
        // pair panels and a ragged one): stride 1 at 37 wide, stride 2 at 17 wide, a
        // batch of 2 at 16 wide.
        shape(1, 12, (20, 37), 26, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 8, (12, 34), 24, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(2, 10, (6, 16), 12, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ]
}

/// Every ISA whose table has f32 tiles, with the tiles.
fn tiles() -> Vec<(Isa, Tiles<f32>)> {
    available_isas()
        .into_iter()
        .filter_map(|i| i.table().conv_tiles.map(|t| (i, t)))
        .collect()
}

/// Both tilings.
pub(crate) const TILINGS: [Tiling; 2] = [Tiling::Rows, Tiling::Chans];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn f32_tiles_match_the_portable_tile_bit_for_bit() {
    let offs = [0usize, 5, 37, 100, 3];
    for cp in [0usize, 1, 3, 8] {
        for taps in [1, 2, 5] {
            let (o, cps) = (&offs[..taps], 41);
            let a = rand_vec(taps * cp * MR, cp as u64 + 3);
            let b = rand_vec(100 + cp.saturating_sub(1) * cps + TW, taps as u64 + 11);
            let run = |t: super::direct::ConvTile<f32>| {
                let ldc = TW + 5;
                let mut c = vec![f32::NAN; MR * ldc];
                t(&a, &b, o, cp, cps, &mut c, ldc);
                (0..MR)
                    .flat_map(|r| c[r * ldc..r * ldc + TW].to_vec())
                    .collect::<Vec<_>>()
            };
            let want = run(conv_tile_f32);
            // One lane of the reference against the chain written out.
            let mut s = 0.0f32;
            for p in 0..cp {
                for (t, &off) in o.iter().enumerate() {
                    s = a[(p * taps + t) * MR + 2].mul_add(b[off + p * cps + 9], s);
                }
            }
            assert_eq!(want[2 * TW + 9].to_bits(), s.to_bits());
            for (isa, t) in tiles() {
                assert_eq!(
                    bits(&run(t.rows)),
                    bits(&want),
                    "{isa:?} cp {cp} taps {taps}"
                );
            }
        }
    }
}

#[test]
fn f32_pair_tiles_match_two_row_tiles_bit_for_bit() {
    let offs = [0usize, 5, 37, 100, 3];
    for cp in [0usize, 1, 3, 8] {
        for taps in [1, 2, 5] {
            let (o, cps, half) = (&offs[..taps], 41, taps * cp * MR);
            // Two MR-row panels back to back, exactly as long as the pair reads.
            let a = rand_vec(2 * half, cp as u64 + 5);
            let b = rand_vec(100 + cp.saturating_sub(1) * cps + TW, taps as u64 + 13);
            let ldc = TW + 5;
            let mut want = vec![f32::NAN; 2 * MR * ldc];
            conv_tile_f32(&a[..half], &b, o, cp, cps, &mut want, ldc);
            conv_tile_f32(&a[half..], &b, o, cp, cps, &mut want[MR * ldc..], ldc);
            for (isa, t) in tiles() {
                let Some(pair) = t.pairs else { continue };
                let mut got = vec![f32::NAN; 2 * MR * ldc];
                pair(&a, &b, o, cp, cps, &mut got, ldc);
                for r in 0..2 * MR {
                    let row = |v: &[f32]| bits(&v[r * ldc..r * ldc + TW]);
                    assert_eq!(row(&got), row(&want), "{isa:?} cp {cp} taps {taps} row {r}");
                    assert!(got[r * ldc + TW..(r + 1) * ldc].iter().all(|v| v.is_nan()));
                }
            }
        }
    }
}

#[test]
fn f32_channel_tiles_match_the_portable_tile_bit_for_bit() {
    let offs = [0usize, 5, 37, 100, 3];
    let pos_all = [3usize, 0, 17, 18, 40, 9, 1, 64];
    for cp in [0usize, 1, 3, 8] {
        for taps in [1, 2, 5] {
            for n in 0..=CN {
                let (o, cps, pos) = (&offs[..taps], 41, &pos_all[..n]);
                let a = rand_vec(taps * cp * CW, cp as u64 + 3);
                // Exactly as long as the farthest read (64 + 100 + (cp - 1) * cps).
                let b = rand_vec(165 + cp.saturating_sub(1) * cps, taps as u64 + 11);
                let run = |t: super::direct::ChanTile<f32>| {
                    let mut c = vec![f32::NAN; n * CW + 3];
                    t(&a, &b, pos, o, cp, cps, &mut c, false);
                    c
                };
                // The same sums in two K blocks: groups 0..h from zero, then h..cp
                // resumed from what C holds.
                let split = |t: super::direct::ChanTile<f32>| {
                    let (h, mut c) = (cp / 2, vec![f32::NAN; n * CW + 3]);
                    t(&a, &b, pos, o, h, cps, &mut c, false);
                    let (a2, b2) = (&a[h * taps * CW..], &b[h * cps..]);
                    t(a2, b2, pos, o, cp - h, cps, &mut c, h > 0);
                    c
                };
                let want = run(conv_ctile_f32);
                assert!(want[n * CW..].iter().all(|v| v.is_nan()), "wrote past C");
                if n > 2 {
                    // One lane of the reference against the chain written out.
                    let mut s = 0.0f32;
                    for p in 0..cp {
                        for (t, &off) in o.iter().enumerate() {
                            s = a[(p * taps + t) * CW + 19].mul_add(b[pos[2] + off + p * cps], s);
                        }
                    }
                    assert_eq!(want[2 * CW + 19].to_bits(), s.to_bits());
                }
                assert_eq!(bits(&split(conv_ctile_f32)), bits(&want), "split cp {cp}");
                for (isa, t) in tiles() {
                    let got = run(t.chans);
                    assert_eq!(bits(&got), bits(&want), "{isa:?} cp {cp} taps {taps} n {n}");
                    let got = split(t.chans);
                    assert_eq!(bits(&got), bits(&want), "{isa:?} split cp {cp} taps {taps}");
                }
            }
        }
    }
}

fn run(isa: Isa, t: Tiling, s: &ConvShape, w: &[f32], x: &[f32], epi: &Epilogue<'_>) -> Vec<f32> {
    let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
    let mut scratch = vec![f32::NAN; direct::scratch_len(s, 1, Tiling::Rows)];
    let (chans, cols) = ((0, s.c_out), (0, s.oh * s.ow));
    conv2d_f32(isa, t, s, w, x, &mut y, chans, cols, epi, &mut scratch);
    y
}

/// Weights for `t` with one channel per element.
fn pack(s: &ConvShape, w: &[f32], t: Tiling) -> Vec<f32> {
    direct::pack_weights(s, w, 1, |lo, _| lo, t)
}

#[test]
fn f32_direct_conv_matches_the_naive_conv_in_both_tilings() {
    for s in shapes().into_iter().filter(direct::fits) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 5);
        let w = rand_vec(s.c_out * s.k(), 6);
        let bias = vec![0.0; s.c_out];
        let want = conv_naive(&s, &x, &w, &bias);
        let abs = |v: &[f32]| -> Vec<f32> { v.iter().map(|a| a.abs()).collect() };
        let mag = conv_naive(&s, &abs(&x), &abs(&w), &bias);
        let rows = pack(&s, &w, Tiling::Rows);
        let base = run(Isa::Portable, Tiling::Rows, &s, &rows, &x, &Epilogue::NONE);
        for (i, (&g, (&e, &m))) in base.iter().zip(want.iter().zip(&mag)).enumerate() {
            assert!(
                (g - e).abs() <= 1e-5 * m + 1e-30,
                "{s:?} output {i}: {g} vs {e}"
            );
        }
        // Every table and tiling gives the same bits.
        for t in TILINGS {
            let dw = pack(&s, &w, t);
            let none = &Epilogue::NONE;
            let portable = run(Isa::Portable, t, &s, &dw, &x, none);
            assert_eq!(bits(&portable), bits(&base), "portable {t:?}");
            for (isa, _) in tiles() {
                assert_eq!(
                    bits(&run(isa, t, &s, &dw, &x, none)),
                    bits(&base),
                    "{isa:?} {t:?}"
                );
            }
        }
    }
}

/// A conv run: `(chans, cols, epi, y)` computes those channels and positions into `y`.
pub(crate) type RangeRun<'a> =
    dyn Fn((usize, usize), (usize, usize), &Epilogue<'_>, &mut [f32]) + 'a;

/// Runs `conv` whole with a bias + residual + ReLU epilogue and without, checks the
/// epilogue's f32 arithmetic, then checks that channel cuts off the MR grid and position
/// cuts inside and across output rows together equal the whole call bit for bit.
pub(crate) fn check_ranges(s: &ConvShape, conv: &RangeRun<'_>, what: &str) {
    let ohw = s.oh * s.ow;
    let bias = rand_vec(s.c_out, 10);
    let resid = rand_vec(s.n * s.c_out * ohw, 11);
    let rs = [&resid[..]];
    let post = [
        PostOpRt::AddInput { slot: 0 },
        PostOpRt::Unary(UnaryOp::Relu),
    ];
    let epi = Epilogue {
        bias: Some(&bias),
        post: &post,
        residuals: &rs,
        ..Epilogue::NONE
    };
    let all = ((0, s.c_out), (0, ohw));
    let mut whole = vec![f32::NAN; s.n * s.c_out * ohw];
    conv(all.0, all.1, &epi, &mut whole);
    let mut plain = vec![f32::NAN; whole.len()];
    conv(all.0, all.1, &Epilogue::NONE, &mut plain);
    for (i, (&g, &p)) in whole.iter().zip(&plain).enumerate() {
        let c = i / ohw % s.c_out;
        assert_eq!(
            g,
            (p + bias[c] + resid[i]).max(0.0),
            "{what} {s:?} epilogue {i}"
        );
    }
    let c_cuts = [0, 5.min(s.c_out), s.c_out];
    let p_cuts = [
        0,
        (ohw / 3).clamp(1, ohw),
        (ohw / 3 + s.ow + 2).min(ohw),
        ohw,
    ];
    let mut parts = vec![f32::NAN; whole.len()];
    for c in c_cuts.windows(2) {
        for p in p_cuts.windows(2) {
            conv((c[0], c[1]), (p[0], p[1]), &epi, &mut parts);
        }
    }
    assert_eq!(bits(&parts), bits(&whole), "{what} {s:?} ranges");
}

#[test]
fn f32_direct_ranges_equal_the_whole_call_with_the_epilogue() {
    for s in shapes().into_iter().filter(direct::fits) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 8);
        let w = rand_vec(s.c_out * s.k(), 9);
        for t in TILINGS {
            let dw = pack(&s, &w, t);
            for (isa, _) in tiles() {
                let conv = |chans, cols, epi: &Epilogue<'_>, y: &mut [f32]| {
                    let mut scratch = vec![f32::NAN; direct::scratch_len(&s, 1, Tiling::Rows)];
                    conv2d_f32(isa, t, &s, &dw, &x, y, chans, cols, epi, &mut scratch);
                };
                check_ranges(&s, &conv, &format!("{isa:?} {t:?}"));
            }
        }
    }
}

/// Planes too large for one band (a 3x3/2 conv at 150x150, 1.4 MB of planes) run in
/// bands of output rows: the whole call gives the naive conv's values and, cut by
/// channels and positions, the same bits; a deep conv whose weights outweigh its planes
/// runs in one band (each band reads all the weights again).
#[test]
fn f32_direct_conv_in_bands_matches_the_naive_conv_and_its_ranges() {
    let deep = shape(
        1,
        256,
        (26, 26),
        512,
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1, 1, 1),
        1,
    );
    assert_eq!(direct::whole_bands(&deep, 1, Tiling::Rows), 1);
    let s = shape(
        1,
        16,
        (150, 150),
        8,
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1, 1, 1),
        1,
    );
    for t in TILINGS {
        assert!(direct::whole_bands(&s, 1, t) >= 2, "{t:?}");
    }
    let x = rand_vec(s.c_in * s.h * s.w, 12);
    let w = rand_vec(s.c_out * s.k(), 13);
    let bias = vec![0.0; s.c_out];
    let want = conv_naive(&s, &x, &w, &bias);
    let abs = |v: &[f32]| -> Vec<f32> { v.iter().map(|a| a.abs()).collect() };
    let mag = conv_naive(&s, &abs(&x), &abs(&w), &bias);
    for t in TILINGS {
        let dw = pack(&s, &w, t);
        for (isa, _) in tiles() {
            let got = run(isa, t, &s, &dw, &x, &Epilogue::NONE);
            for (i, (&g, (&e, &m))) in got.iter().zip(want.iter().zip(&mag)).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-5 * m + 1e-30,
                    "{isa:?} {t:?} output {i}: {g} vs {e}"
                );
            }
            let conv = |chans, cols, epi: &Epilogue<'_>, y: &mut [f32]| {
                let mut scratch = vec![f32::NAN; direct::scratch_len(&s, 1, Tiling::Rows)];
                conv2d_f32(isa, t, &s, &dw, &x, y, chans, cols, epi, &mut scratch);
            };
            check_ranges(&s, &conv, &format!("bands {isa:?} {t:?}"));
        }
    }
}

#[test]
fn f32_direct_conv_gives_the_avx512_im2col_bits() {
    // The AVX-512 GEMM tile runs one fused chain per output in K order, and the direct
    // tiles sum in the same order (channel, then tap): within one K block of the GEMM
    // the paths are interchangeable. (Past it, im2col's edge tiles add per-block partial
    // sums: a 40-channel 3x3 conv to 64 channels at 7x7 differs in its last bits.)
    let mut checked = 0;
    let one_block = |s: &ConvShape| s.k() <= super::weights_depth(s);
    for s in shapes().into_iter().filter(direct::fits).filter(one_block) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 12);
        let w = rand_vec(s.c_out * s.k(), 13);
        let packed = super::ConvWeights::pack(&s, &w);
        for (isa, _) in tiles().into_iter().filter(|(i, _)| *i == Isa::Avx512) {
            let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
            let mut scratch = vec![f32::NAN; s.scratch_len()];
            let (cols, none) = ((0, s.oh * s.ow), &Epilogue::NONE);
            super::conv2d(
                isa,
                &s,
                &packed,
                &x,
                &mut y,
                0,
                s.c_out,
                cols,
                None,
                none,
                &mut scratch,
            );
            for t in TILINGS {
                let got = run(isa, t, &s, &pack(&s, &w, t), &x, none);
                assert_eq!(bits(&got), bits(&y), "{s:?} {t:?}");
            }
            checked += 1;
        }
    }
    if crate::kernels::isa::available_isas().contains(&Isa::Avx512) {
        assert!(checked > 0, "no shape checked");
    }
}

#[test]
fn tile_bounds_checks_accept_exact_operands_and_refuse_short_ones() {
    use super::direct::{check_chan_tile, check_row_tile};
    use std::panic::catch_unwind;
    let (offs, cp, cps, ldc) = ([0usize, 5, 37], 3, 41, TW + 2);
    // Exactly what the tiles read and write.
    let (a, b, c) = (3 * cp * MR, 37 + (cp - 1) * cps + TW, (MR - 1) * ldc + TW);
    check_row_tile((a, b, c), &offs, cp, cps, ldc);
    for short in [(a - 1, b, c), (a, b - 1, c), (a, b, c - 1)] {
        assert!(catch_unwind(|| check_row_tile(short, &offs, cp, cps, ldc)).is_err());
    }
    let pos = [3usize, 0, 17];
    let (a, b, c) = (3 * cp * CW, 17 + 37 + (cp - 1) * cps + 1, pos.len() * CW);
    check_chan_tile((a, b, c), &pos, &offs, cp, cps);
    for short in [(a - 1, b, c), (a, b - 1, c), (a, b, c - 1)] {
        assert!(catch_unwind(|| check_chan_tile(short, &pos, &offs, cp, cps)).is_err());
    }
    let nine = [0usize; CN + 1];
    assert!(catch_unwind(|| check_chan_tile((a, b, 9 * CW), &nine, &offs, cp, cps)).is_err());
}

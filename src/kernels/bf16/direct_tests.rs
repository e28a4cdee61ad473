//! The direct bf16 conv: its two table entries against the portable emulation bit for
//! bit, whole convs against an f64 conv of the bf16-rounded operands (strides, pads,
//! dilation, odd channels, batches, the epilogue), and channel / position ranges
//! against the whole call; the wide (AMX) run, where the CPU has it, against the same
//! f64 conv to its rounding and its ranges against its whole call (with the others).

use super::{conv2d_bf16, conv_scratch_len, from_bf16, native, portable, to_bf16};
use super::{Bf16ConvWeights, Bf16Table, NR};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::conv::direct::Tiling;
use crate::kernels::conv::direct_tests::{check_ranges, shapes, TILINGS};
use crate::kernels::conv::tests::{conv_naive, shape};
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::Isa;
use crate::kernels::testutil::rand_vec;

fn tables() -> Vec<&'static Bf16Table> {
    let mut v = vec![portable()];
    v.extend(native());
    v
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn conv_tile_matches_the_emulation_bit_for_bit() {
    use super::MR;
    let offs = [0usize, 5, 37, 100, 3];
    for scale in [0, -62] {
        for cp in [0usize, 1, 3, 8] {
            for taps in [1, 2, 5] {
                let (o, cps) = (&offs[..taps], 41);
                let blen = 100 + cp.saturating_sub(1) * cps + 2 * NR;
                let pairs = |n: usize, seed: u64| -> Vec<u32> {
                    rand_vec(2 * n, seed)
                        .chunks(2)
                        .map(|p| super::pair(p[0] * 2f32.powi(scale), p[1] * 2f32.powi(scale)))
                        .collect()
                };
                let a = pairs(taps * cp * MR, cp as u64 + 3);
                let b = pairs(blen, taps as u64 + 11);
                let run = |t: &Bf16Table| {
                    let ldc = 2 * NR + 5;
                    let mut c = vec![f32::NAN; MR * ldc];
                    (t.conv_tiles.rows)(&a, &b, o, cp, cps, &mut c, ldc);
                    (0..MR)
                        .flat_map(|r| c[r * ldc..r * ldc + 2 * NR].to_vec())
                        .collect::<Vec<f32>>()
                };
                let want = run(portable());
                // The emulation itself: one lane against the sum written out.
                let mut s = 0.0;
                for p in 0..cp {
                    for (t, &off) in o.iter().enumerate() {
                        s = super::portable::dp_pair(
                            s,
                            a[(p * taps + t) * MR + 1],
                            b[off + p * cps + 7],
                        );
                    }
                }
                assert_eq!(want[2 * NR + 7].to_bits(), s.to_bits());
                for t in tables() {
                    assert_eq!(
                        bits(&run(t)),
                        bits(&want),
                        "table {} cp {cp} taps {taps}",
                        t.name
                    );
                }
            }
        }
    }
}

#[test]
fn channel_tile_matches_the_emulation_bit_for_bit() {
    use crate::kernels::conv::direct::{CN, CW};
    let offs = [0usize, 5, 37, 100, 3];
    let pos_all = [3usize, 0, 17, 18, 40, 9, 1, 64];
    for scale in [0, -62] {
        for cp in [0usize, 1, 3, 8] {
            for taps in [1, 2, 5] {
                for n in 0..=CN {
                    let (o, cps, pos) = (&offs[..taps], 41, &pos_all[..n]);
                    let pairs = |n: usize, seed: u64| -> Vec<u32> {
                        rand_vec(2 * n, seed)
                            .chunks(2)
                            .map(|p| super::pair(p[0] * 2f32.powi(scale), p[1] * 2f32.powi(scale)))
                            .collect()
                    };
                    let a = pairs(taps * cp * CW, cp as u64 + 3);
                    // Exactly as long as the farthest read.
                    let b = pairs(165 + cp.saturating_sub(1) * cps, taps as u64 + 11);
                    let run = |t: &Bf16Table| {
                        let mut c = vec![f32::NAN; n * CW + 3];
                        (t.conv_tiles.chans)(&a, &b, pos, o, cp, cps, &mut c, false);
                        c
                    };
                    // Two K blocks: groups 0..h from zero, then h..cp resumed.
                    let split = |t: &Bf16Table| {
                        let (h, mut c) = (cp / 2, vec![f32::NAN; n * CW + 3]);
                        (t.conv_tiles.chans)(&a, &b, pos, o, h, cps, &mut c, false);
                        let (a2, b2) = (&a[h * taps * CW..], &b[h * cps..]);
                        (t.conv_tiles.chans)(a2, b2, pos, o, cp - h, cps, &mut c, h > 0);
                        c
                    };
                    let want = run(portable());
                    assert!(want[n * CW..].iter().all(|v| v.is_nan()), "wrote past C");
                    if n > 2 {
                        let mut s = 0.0;
                        for p in 0..cp {
                            for (t, &off) in o.iter().enumerate() {
                                let (wa, xb) =
                                    (a[(p * taps + t) * CW + 19], b[pos[2] + off + p * cps]);
                                s = super::portable::dp_pair(s, wa, xb);
                            }
                        }
                        assert_eq!(want[2 * CW + 19].to_bits(), s.to_bits());
                    }
                    for t in tables() {
                        assert_eq!(
                            bits(&run(t)),
                            bits(&want),
                            "table {} cp {cp} taps {taps} n {n}",
                            t.name
                        );
                        assert_eq!(
                            bits(&split(t)),
                            bits(&want),
                            "table {} split cp {cp} taps {taps} n {n}",
                            t.name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn pack_pairs_matches_the_emulation_bit_for_bit() {
    // Awkward values too: ties, denormals, NaNs, infinities.
    let mut src: Vec<f32> = rand_vec(200, 3);
    for (i, u) in [
        0x3f80_8000u32,
        0x0000_0001,
        0x7fc0_0000,
        0xff80_0000,
        0x7f7f_ffff,
    ]
    .into_iter()
    .enumerate()
    {
        src[7 * i + 1] = f32::from_bits(u);
    }
    let hi_src: Vec<f32> = src.iter().rev().copied().collect();
    for stride in 1..=3 {
        for n in 0..=40 {
            // Sources exactly as long as the reads need: no over-read is allowed.
            let len = if n == 0 { 0 } else { (n - 1) * stride + 1 };
            for with_hi in [false, true] {
                let hi = with_hi.then(|| &hi_src[..len]);
                let run = |t: &Bf16Table| {
                    let mut d = vec![0xdead_beefu32; n + 3];
                    (t.pack_pairs)(&src[..len], hi, stride, &mut d[..n]);
                    d
                };
                let want = run(portable());
                for j in 0..n {
                    let h = hi.map_or(0.0, |h| h[j * stride]);
                    assert_eq!(want[j] & 0xffff, u32::from(to_bf16(src[j * stride])));
                    assert_eq!(want[j] >> 16, u32::from(to_bf16(h)));
                }
                assert_eq!(&want[n..], &[0xdead_beef; 3]);
                for t in tables() {
                    assert_eq!(run(t), want, "table {} stride {stride} n {n}", t.name);
                }
            }
        }
    }
}

/// The conv (in f64, rounded once) of the bf16-rounded operands, and the same conv of
/// their magnitudes (what bounds the rounding of an f32 sum).
fn reference(s: &ConvShape, x: &[f32], w: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let r = |v: &[f32]| -> Vec<f32> { v.iter().map(|&a| from_bf16(to_bf16(a))).collect() };
    let abs = |v: &[f32]| -> Vec<f32> { v.iter().map(|a| a.abs()).collect() };
    let (xr, wr, bias) = (r(x), r(w), vec![0.0; s.c_out]);
    let y = conv_naive(s, &xr, &wr, &bias);
    let mag = conv_naive(s, &abs(&xr), &abs(&wr), &bias);
    (y, mag)
}

/// Scratch for every layout of `s` (the wide run's too, whatever the table).
fn scratch_len(t: &Bf16Table, s: &ConvShape) -> usize {
    let direct = [Tiling::Rows, Tiling::Wide].map(|d| super::direct::scratch_len(s, d));
    conv_scratch_len(t, s).max(direct[0]).max(direct[1])
}

fn run(
    t: &Bf16Table,
    s: &ConvShape,
    wts: &Bf16ConvWeights,
    x: &[f32],
    epi: &Epilogue<'_>,
) -> Vec<f32> {
    let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
    let mut scratch = vec![f32::NAN; scratch_len(t, s)];
    let (chans, cols) = ((0, s.c_out), (0, s.oh * s.ow));
    conv2d_bf16(
        t,
        Isa::Portable,
        s,
        wts,
        x,
        &mut y,
        chans,
        cols,
        epi,
        &mut scratch,
    );
    y
}

#[test]
fn direct_conv_matches_the_rounded_conv() {
    for s in shapes() {
        if !super::direct::applies(portable(), &s) {
            continue;
        }
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 5);
        let w = rand_vec(s.c_out * s.k(), 6);
        let wts = Bf16ConvWeights::with_layout(&s, &w, Some(Tiling::Rows));
        assert_eq!(wts.direct, Some(Tiling::Rows));
        let (want, mag) = reference(&s, &x, &w);
        let base = run(portable(), &s, &wts, &x, &Epilogue::NONE);
        for (i, (&g, (&e, &m))) in base.iter().zip(want.iter().zip(&mag)).enumerate() {
            let tol = 1e-5 * m + 1e-30;
            assert!((g - e).abs() <= tol, "{s:?} output {i}: {g} vs {e}");
        }
        // The same conv through im2col agrees to rounding; every table gives the same bits.
        let im2col = run(
            portable(),
            &s,
            &Bf16ConvWeights::with_layout(&s, &w, None),
            &x,
            &Epilogue::NONE,
        );
        for (i, (&g, &e)) in im2col.iter().zip(&base).enumerate() {
            assert!((g - e).abs() <= 1e-5 * mag[i] + 1e-30, "{s:?} im2col {i}");
        }
        // Every table and tiling gives the same bits.
        for tiling in TILINGS {
            let wts = Bf16ConvWeights::with_layout(&s, &w, Some(tiling));
            for t in tables() {
                assert_eq!(
                    bits(&run(t, &s, &wts, &x, &Epilogue::NONE)),
                    bits(&base),
                    "{} {tiling:?}",
                    t.name
                );
            }
        }
    }
}

#[test]
fn direct_conv_ranges_equal_the_whole_call_with_the_epilogue() {
    let t = native().unwrap_or(portable());
    // Direct shapes only: im2col needs channel cuts on the MR grid. The wide run too,
    // where the table has one (its own shapes as well: plane rows wider than the
    // output's, stored through a buffer, and as wide, stored straight into the output).
    for s in shapes()
        .into_iter()
        .chain(
            wide_shapes()
                .into_iter()
                .filter(|s| super::direct::runs_wide(t, s)),
        )
        .filter(|s| super::direct::applies(t, s))
    {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 8);
        let w = rand_vec(s.c_out * s.k(), 9);
        let mut tilings = Vec::new();
        if super::direct::applies(portable(), &s) {
            tilings.extend(TILINGS);
        }
        if super::direct::runs_wide(t, &s) {
            tilings.push(Tiling::Wide);
        }
        for tiling in tilings {
            let wts = Bf16ConvWeights::with_layout(&s, &w, Some(tiling));
            let conv = |chans, cols, epi: &Epilogue<'_>, y: &mut [f32]| {
                let mut scratch = vec![f32::NAN; scratch_len(t, &s)];
                conv2d_bf16(
                    t,
                    Isa::Portable,
                    &s,
                    &wts,
                    &x,
                    y,
                    chans,
                    cols,
                    epi,
                    &mut scratch,
                );
            };
            check_ranges(&s, &conv, &format!("{} {tiling:?}", t.name));
        }
    }
}

/// More shapes for the wide run's position-major planes: stride 2, dilation, asymmetric
/// pads, an unfolded stem, a batch, outputs 14 and 7 wide (rows crossing tiles).
fn wide_shapes() -> Vec<ConvShape> {
    vec![
        shape(1, 16, (16, 16), 24, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 20, (32, 32), 40, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(2, 18, (20, 16), 8, (3, 3), (1, 1), (2, 2), (2, 1, 2, 3), 1),
        shape(1, 3, (40, 32), 33, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
        shape(1, 32, (17, 32), 16, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1), 1),
        // Outputs 14 and 7 wide: tiles of 32 positions span several plane rows.
        shape(1, 16, (14, 14), 24, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 20, (28, 27), 40, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(2, 18, (20, 14), 8, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1),
        shape(1, 64, (7, 7), 40, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 48, (14, 14), 64, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        // 1x1, stride 2: plane rows as wide as the output's.
        shape(1, 32, (14, 13), 40, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
        // Planes too large for one band (1.5 MB): the whole call runs in bands of rows.
        shape(
            1,
            32,
            (150, 150),
            16,
            (3, 3),
            (2, 2),
            (1, 1),
            (1, 1, 1, 1),
            1,
        ),
    ]
}

/// The tables with a wide run (none where the CPU lacks AMX-BF16; where it has it, the
/// native table is the AMX one unless a setting names another).
fn wide_tables() -> Vec<&'static Bf16Table> {
    let v: Vec<_> = tables().into_iter().filter(|t| t.wide.is_some()).collect();
    #[cfg(target_arch = "x86_64")]
    if super::amx::available()
        && is_x86_feature_detected!("avx512bf16")
        && std::env::var_os("VNPU_BF16_KERNELS").is_none()
    {
        assert!(!v.is_empty(), "AMX available but no table with a wide run");
    }
    v
}

#[test]
fn wide_run_matches_the_rounded_conv() {
    for t in wide_tables() {
        // Convs of 16+ channels as they are, shallower ones unfolded (the stems).
        let shapes: Vec<ConvShape> = shapes()
            .into_iter()
            .chain(wide_shapes())
            .filter(|s| super::direct::runs_wide(t, s))
            .collect();
        assert!(shapes.len() >= 20, "too few shapes for the wide run");
        assert!(
            shapes.iter().any(super::direct::unfolds),
            "no unfolded stem"
        );
        for s in &shapes {
            let x = rand_vec(s.n * s.c_in * s.h * s.w, 15);
            let w = rand_vec(s.c_out * s.k(), 16);
            let wts = Bf16ConvWeights::with_layout(s, &w, Some(Tiling::Wide));
            assert_eq!(wts.direct, Some(Tiling::Wide));
            let (want, mag) = reference(s, &x, &w);
            let got = run(t, s, &wts, &x, &Epilogue::NONE);
            // bf16 products are exact in f32; the sums round once per addition.
            let tol = s.k() as f32 * f32::EPSILON;
            for (i, (&g, (&e, &m))) in got.iter().zip(want.iter().zip(&mag)).enumerate() {
                assert!(
                    (g - e).abs() <= tol * m + 1e-30,
                    "{} {s:?} output {i}: {g} vs {e}",
                    t.name
                );
            }
            // What the table picks for it: the wide run.
            assert_eq!(Bf16ConvWeights::pack(t, s, &w).direct, Some(Tiling::Wide));
        }
    }
}

/// `[N, C, H, W]` -> `[N, H, W, C]`.
fn to_nhwc(v: &[f32], (n, c, hw): (usize, usize, usize)) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            for p in 0..hw {
                out[(b * hw + p) * c + ch] = v[(b * c + ch) * hw + p];
            }
        }
    }
    out
}

#[test]
fn nhwc_wide_run_gives_the_planar_wide_runs_sums_and_its_rows_the_whole() {
    use crate::ir::UnaryOp;
    use crate::kernels::unary::PostOpRt;
    let relu = [
        PostOpRt::AddInput { slot: 0 },
        PostOpRt::Unary(UnaryOp::Relu),
    ];
    let hswish = [
        PostOpRt::AddInput { slot: 0 },
        PostOpRt::Unary(UnaryOp::HardSwish),
    ];
    for t in wide_tables() {
        let shapes: Vec<ConvShape> = shapes()
            .into_iter()
            .chain(wide_shapes())
            // 63 channels: an odd count whose pairs pad to a whole K step (positions
            // are not back to back in pairs).
            .chain([shape(
                1,
                63,
                (9, 10),
                40,
                (3, 3),
                (1, 1),
                (1, 1),
                (1, 1, 1, 1),
                1,
            )])
            // 800 channels a position: more than an unfolded position's staging holds
            // (rejected by an over-strict check before: a bf16 model with such a conv
            // failed every inference).
            .chain([shape(
                1,
                800,
                (5, 6),
                32,
                (3, 3),
                (1, 1),
                (1, 1),
                (1, 1, 1, 1),
                1,
            )])
            .filter(|s| super::nhwc_wide_applies(t, s))
            .collect();
        assert!(
            shapes.len() >= 10,
            "too few shapes for the channels-last run"
        );
        let unfolds = |s: &ConvShape| !crate::kernels::conv::direct::wide_applies(s);
        assert!(shapes.iter().any(unfolds), "no unfolded stem");
        for s in &shapes {
            let (ohw, rows) = (s.oh * s.ow, s.n * s.oh);
            let x = rand_vec(s.n * s.c_in * s.h * s.w, 21);
            let w = rand_vec(s.c_out * s.k(), 22);
            let bias = rand_vec(s.c_out, 23);
            let res = rand_vec(s.n * s.c_out * ohw, 24);
            let (xn, resn) = (
                to_nhwc(&x, (s.n, s.c_in, s.h * s.w)),
                to_nhwc(&res, (s.n, s.c_out, ohw)),
            );
            let wts = Bf16ConvWeights::with_layout(s, &w, Some(Tiling::Wide));
            let wn = super::pack_nhwc_weights(s, &w);
            // The simple epilogue (stored with the tiles) and one that runs after.
            let (rp, rn): ([&[f32]; 1], [&[f32]; 1]) = ([&res[..]], [&resn[..]]);
            for post in [&relu[..], &hswish[..]] {
                let epi = Epilogue {
                    bias: Some(&bias),
                    channel_is_row: true,
                    post,
                    residuals: &rp,
                    ..Epilogue::NONE
                };
                let epi_n = Epilogue {
                    channel_is_row: false,
                    residuals: &rn,
                    ..epi
                };
                let planar = run(t, s, &wts, &x, &epi);
                let want = bits(&to_nhwc(&planar, (s.n, s.c_out, ohw)));
                let nhwc = |(r0, r1): (usize, usize)| {
                    let mut y = vec![f32::NAN; (r1 - r0) * s.ow * s.c_out];
                    let mut sc = vec![0u32; crate::kernels::conv::direct_nhwc_scratch_len(s)];
                    super::conv_nhwc(
                        t,
                        Isa::Portable,
                        s,
                        &wn,
                        &xn,
                        &mut y,
                        (r0, r1),
                        &epi_n,
                        &mut sc,
                    );
                    y
                };
                let whole = nhwc((0, rows));
                if crate::kernels::conv::direct::wide_applies(s) {
                    assert!(
                        bits(&whole) == want,
                        "{} {s:?}: not the planar bits",
                        t.name
                    );
                } else {
                    // An unfolded stem sums its taps in another order (channels-last):
                    // the planar result to the sums' rounding.
                    let mag = to_nhwc(&reference(s, &x, &w).1, (s.n, s.c_out, ohw));
                    let planar = to_nhwc(&planar, (s.n, s.c_out, ohw));
                    for (i, (&g, &e)) in whole.iter().zip(&planar).enumerate() {
                        let tol = 4.0 * s.k() as f32 * f32::EPSILON * (mag[i] + 4.0);
                        assert!(
                            (g - e).abs() <= tol,
                            "{} {s:?} output {i}: {g} vs {e}",
                            t.name
                        );
                    }
                }
                let want = bits(&whole);
                for cut in [1, rows / 2, rows - 1] {
                    let mut parts = nhwc((0, cut));
                    parts.extend(nhwc((cut, rows)));
                    assert!(bits(&parts) == want, "{} {s:?}: rows cut at {cut}", t.name);
                }
            }
        }
    }
}

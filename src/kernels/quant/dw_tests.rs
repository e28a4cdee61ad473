//! The int8 depthwise conv bit for bit: every kernel table (the AVX-512 one on exact
//! f32 sums, `dw_exact`) against the i64 definition requantised like
//! `body::requant_scalar`, over kernel sizes, strides, dilations, pads, plane widths on
//! both sides of the block / band geometry, channel counts and ranges, zero points and
//! clamps; and the fallback to the integer path where the f32 sums might not be exact.

use super::tests::rand_bytes;
use super::*;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::isa::{tables, KernelTable};

/// A depthwise shape: `c` channels, `hw` input, kernel `k`, strides `st`, leading pads
/// `pad`, trailing pads `end` (the output size follows), dilations `dil`.
fn dw_shape(
    c: usize,
    hw: (usize, usize),
    k: (usize, usize),
    st: (usize, usize),
    pad: (usize, usize),
    end: (usize, usize),
    dil: (usize, usize),
) -> ConvShape {
    super::tests::conv_shape_ends((c, c, c), hw, k, st, (pad, end), dil)
}

/// The geometries: MobileNet's (3x3, stride 1 / 2, planes below and above the 28-wide
/// block limit and the whole-plane / band split; wide planes with left pads 0, 1, 2 and
/// output rows around the 16-column vectors), 5x5, 7x7, 1x1, dilation 2, asymmetric
/// kernels, pads and strides, TF-style trailing pads, channel counts 2..37.
fn dw_cases() -> Vec<ConvShape> {
    let mut v = vec![
        dw_shape(16, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(24, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(17, (14, 14), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        dw_shape(33, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(18, (28, 28), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        dw_shape(20, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(19, (56, 56), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        dw_shape(3, (112, 112), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(5, (111, 113), (3, 3), (2, 2), (0, 0), (1, 1), (1, 1)),
        dw_shape(37, (29, 30), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(9, (12, 31), (5, 5), (1, 1), (2, 2), (2, 2), (1, 1)),
        dw_shape(11, (13, 41), (5, 5), (2, 2), (2, 2), (2, 2), (1, 1)),
        dw_shape(7, (15, 17), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1)),
        dw_shape(6, (40, 33), (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),
        dw_shape(12, (9, 10), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1)),
        dw_shape(13, (30, 35), (1, 1), (2, 2), (0, 0), (0, 0), (1, 1)),
        dw_shape(10, (11, 8), (3, 3), (1, 1), (2, 2), (2, 2), (2, 2)),
        dw_shape(8, (31, 45), (3, 3), (1, 2), (2, 1), (2, 1), (2, 1)),
        dw_shape(4, (10, 9), (3, 2), (1, 2), (2, 0), (1, 1), (2, 1)),
        dw_shape(2, (6, 40), (1, 3), (2, 1), (0, 1), (0, 1), (1, 3)),
        dw_shape(21, (5, 5), (5, 5), (1, 1), (2, 2), (2, 2), (1, 1)),
        dw_shape(16, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        dw_shape(15, (3, 60), (3, 3), (2, 2), (0, 1), (1, 0), (1, 1)),
        dw_shape(14, (8, 8), (2, 2), (3, 3), (0, 0), (0, 0), (1, 1)),
        dw_shape(16, (20, 20), (3, 3), (1, 1), (0, 0), (2, 2), (1, 1)),
        dw_shape(6, (33, 47), (3, 3), (1, 1), (0, 0), (0, 0), (1, 1)),
        dw_shape(4, (30, 64), (3, 3), (2, 2), (2, 2), (1, 1), (1, 1)),
        dw_shape(3, (17, 34), (3, 3), (2, 2), (1, 1), (0, 0), (1, 1)),
        dw_shape(5, (9, 32), (3, 3), (1, 1), (1, 1), (2, 2), (1, 1)),
        dw_shape(2, (2, 29), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ];
    let mut b2 = dw_shape(9, (13, 13), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1));
    b2.n = 2;
    v.push(b2);
    v
}

/// i64 sums of a depthwise conv from the definition (padding contributes nothing).
fn ref_sums(s: &ConvShape, x: &[u8], zp: u8, w: &[i16]) -> Vec<i64> {
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let mut y = vec![0i64; s.n * s.c_out * ohw];
    for b in 0..s.n {
        for c in 0..s.c_out {
            let plane = &x[(b * s.c_in + c) * hw..][..hw];
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let mut acc = 0i64;
                    for ky in 0..s.kh {
                        for kx in 0..s.kw {
                            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                            let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                            if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                continue;
                            }
                            let xv = i64::from(plane[iy as usize * s.w + ix as usize]);
                            acc += (xv - i64::from(zp)) * i64::from(w[c * khw + ky * s.kw + kx]);
                        }
                    }
                    y[(b * s.c_out + c) * ohw + oy * s.ow + ox] = acc;
                }
            }
        }
    }
    y
}

/// `clamp(rne((acc + bias) as f32 * mult) + zp, lo, hi)` (`body::requant_scalar`, the
/// sum wrapped to i32 as there).
fn requant_ref(acc: i64, bias: i32, mult: f32, zp: i32, lo: u8, hi: u8) -> u8 {
    let v = (acc + i64::from(bias)) as i32 as f32 * mult;
    (v.round_ties_even() + zp as f32).clamp(f32::from(lo), f32::from(hi)) as u8
}

/// One requantisation setting: input zero point, output zero point, clamp.
#[derive(Debug, Clone, Copy)]
struct Quant {
    x_zp: u8,
    y_zp: u8,
    lo: u8,
    hi: u8,
}

/// Zero points 0 / 128 / 255 / odd, no clamp, ReLU (`lo = y_zp`), Clip (both bounds).
const QUANTS: [Quant; 5] = [
    Quant {
        x_zp: 0,
        y_zp: 0,
        lo: 0,
        hi: 255,
    },
    Quant {
        x_zp: 128,
        y_zp: 128,
        lo: 128,
        hi: 255,
    },
    Quant {
        x_zp: 255,
        y_zp: 7,
        lo: 7,
        hi: 200,
    },
    Quant {
        x_zp: 117,
        y_zp: 90,
        lo: 3,
        hi: 250,
    },
    Quant {
        x_zp: 1,
        y_zp: 255,
        lo: 0,
        hi: 255,
    },
];

/// Runs `s` on table `t` with s8 weights (or, `wide`, weights in `[-255, 255]` packed
/// wide) over channels `chans`, returning the u8 output (0 outside `chans`) and the
/// expected one.
fn run_case(
    t: &KernelTable,
    s: &ConvShape,
    q: Quant,
    chans: (usize, usize),
    (seed, wide, big_bias): (u64, bool, bool),
) -> (Vec<u8>, Vec<u8>) {
    let khw = s.kh * s.kw;
    let x = rand_bytes(s.n * s.c_in * s.h * s.w, seed);
    let r = rand_bytes(s.c_out * khw, seed + 1);
    let w16: Vec<i16> = if wide {
        r.iter()
            .map(|&v| (i16::from(v) * 2 - 255).clamp(-255, 255))
            .collect()
    } else {
        r.iter().map(|&v| i16::from(v as i8)).collect()
    };
    let rb = rand_bytes(2 * s.c_out, seed + 2);
    // Multipliers that spread the sums over the output range (and past it).
    let mult: Vec<f32> = (0..s.c_out)
        .map(|c| 1.0 / (64.0 * khw as f32) * (0.25 + f32::from(rb[c]) / 64.0))
        .collect();
    let bias: Vec<i32> = (0..s.c_out)
        .map(|c| {
            let b = (i32::from(rb[s.c_out + c]) - 128) * 41;
            // Every third channel out of the exact range: the integer path.
            if big_bias && c % 3 == 1 {
                b + (1 << 24)
            } else {
                b
            }
        })
        .collect();
    let pw = if wide {
        QConvWeights::pack_wide(&w16, s.c_out, 1, s.kh, s.kw, s.group)
    } else {
        let w8: Vec<i8> = w16.iter().map(|&v| v as i8).collect();
        QConvWeights::pack(t.quant.layout, &w8, s.c_out, 1, s.kh, s.kw, s.group)
    };
    let fb = pw.fold_bias(Some(&bias), q.x_zp);
    let rq = Requant {
        mult: &mult,
        bias: &fb,
        y_zp: i32::from(q.y_zp),
        lo: q.lo,
        hi: q.hi,
    };
    let ohw = s.oh * s.ow;
    let mut y = vec![0u8; s.n * s.c_out * ohw];
    let mut sc = QScratch::new();
    qconv_u8(t.isa, s, &x, q.x_zp, &pw, &rq, &mut y, chans, &mut sc);
    let sums = ref_sums(s, &x, q.x_zp, &w16);
    let want = sums
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let c = (i / ohw) % s.c_out;
            if (chans.0..chans.1).contains(&c) {
                requant_ref(a, bias[c], mult[c], rq.y_zp, q.lo, q.hi)
            } else {
                0
            }
        })
        .collect();
    (y, want)
}

/// Asserts `got == want`, naming the first differing element.
fn same(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: element {i}: got {}, want {}", got[i], want[i]);
    }
}

#[test]
fn depthwise_matches_definition_on_every_table() {
    for (ci, s) in dw_cases().iter().enumerate() {
        for (qi, &q) in QUANTS.iter().enumerate() {
            let seed = 1000 + 10 * ci as u64 + qi as u64;
            let c = s.c_out;
            let ranges = [(0, c), (c / 3, c - c / 4), (c - 1, c), (1, c.min(18))];
            for t in tables() {
                for &chans in &ranges {
                    let (y, want) = run_case(t, s, q, chans, (seed, false, false));
                    let what = format!("case {ci} {s:?} {q:?} chans {chans:?} table {}", t.name);
                    same(&y, &want, &what);
                }
            }
        }
    }
}

#[test]
fn depthwise_wide_weights_match_definition() {
    for (ci, s) in dw_cases().iter().enumerate().step_by(3) {
        let q = QUANTS[3];
        for t in tables() {
            let (y, want) = run_case(t, s, q, (0, s.c_out), (50 + ci as u64, true, false));
            same(&y, &want, &format!("wide case {ci} {s:?} table {}", t.name));
        }
    }
}

/// Channels whose bias puts the sums out of f32's exact range run on the integer path
/// (the block entry declines them) with the same bits.
#[test]
fn depthwise_falls_back_where_f32_is_not_exact() {
    for (ci, s) in dw_cases().iter().enumerate().step_by(2) {
        for &q in &QUANTS[2..4] {
            for t in tables() {
                let chans = (s.c_out / 4, s.c_out);
                let (y, want) = run_case(t, s, q, chans, (70 + ci as u64, false, true));
                same(
                    &y,
                    &want,
                    &format!("big bias case {ci} {s:?} table {}", t.name),
                );
            }
        }
    }
}

/// The block entry takes exactly the convs `dw_exact` says it can: taps outside s8 (the
/// f32 kernels) only while the sums are exact in f32, s8 taps (the byte-plane kernel's
/// exact i32 sums) with any bias.
#[test]
fn block_entry_declines_inexact_channels() {
    let s = dw_shape(4, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1));
    let wide = dw_exact::DwTaps::new(&[200i16; 4 * 9], 4, 9);
    let narrow = dw_exact::DwTaps::new(&[127i16; 4 * 9], 4, 9);
    let mult = [0.001f32; 4];
    for t in tables() {
        let Some(block) = t.qdepthwise_block else {
            continue;
        };
        let x = rand_bytes(4 * 81, 3);
        let mut sc = vec![0f32; dw_exact::scratch_len(&s)];
        for (w, bias, ok) in [
            (&wide, 0, true),
            (&wide, (1 << 24) - 255 * 200 * 9 - 1, true),
            (&wide, 1 << 24, false),
            (&narrow, 1 << 24, true),
        ] {
            let b = [0, bias, 0, 0];
            let rq = Requant {
                mult: &mult,
                bias: &b,
                y_zp: 0,
                lo: 0,
                hi: 255,
            };
            let mut y = vec![9u8; 4 * 81];
            let mut near = dw_exact::NearTies::new(&mut []);
            assert_eq!(
                block(&s, &x, 0, w, &rq, &mut y, 0, 4, &mut sc, &mut near),
                ok
            );
            if !ok {
                assert!(y.iter().all(|&v| v == 9), "a declined block wrote");
            }
        }
        let rq = Requant {
            mult: &mult,
            bias: &[0; 4],
            y_zp: 0,
            lo: 0,
            hi: 255,
        };
        let mut y = vec![0u8; 4 * 81];
        let short = &mut sc[..dw_exact::scratch_len(&s) - 1];
        assert!(
            !block(
                &s,
                &x,
                0,
                &narrow,
                &rq,
                &mut y,
                0,
                4,
                short,
                &mut dw_exact::NearTies::new(&mut [])
            ),
            "short scratch"
        );
    }
}

/// The near-tie list keeps what fits and says when something did not.
#[test]
fn near_ties_list_and_overflow() {
    let mut buf = [0u32; 3];
    let mut near = dw_exact::NearTies::new(&mut buf);
    near.push_lanes(100, 10, 0b101);
    assert_eq!(near.list(), Some(&[100u32, 120][..]));
    near.push_lanes(7, 1, 0b11);
    assert_eq!(near.list(), None, "a fourth entry does not fit");
    let mut none = dw_exact::NearTies::new(&mut []);
    assert_eq!(none.list(), Some(&[][..]));
    none.push_lanes(0, 1, 1);
    assert_eq!(none.list(), None);
}

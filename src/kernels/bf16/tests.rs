//! The bf16 kernels: conversion against an independent rounding, each SIMD entry against
//! the portable emulation bit for bit over edge sizes, the drivers against an f32 product
//! of the rounded operands, and ranges against the whole call.

use super::gemm::{gemm_a_rows, gemm_panels, pack_b_for, panels_scratch_len};
use super::*;
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::Isa;
use crate::kernels::testutil::rand_vec;

/// Every table to compare with the portable one (the native one where this CPU has it).
fn tables() -> Vec<&'static Bf16Table> {
    let mut v = vec![portable()];
    v.extend(native());
    v
}

/// bf16 rounding by value (the reference for [`to_bf16`]): the nearer of the two bf16
/// neighbours of `x`, the even one on a tie, computed in f64.
fn round_by_value(x: f32) -> u16 {
    let u = x.to_bits();
    let down = (u >> 16) as u16; // truncation: toward zero
    let up = down + 1;
    // Past the largest finite bf16 the next step is 2^128 (which overflows to infinity).
    let next = |h: u16| match from_bf16(h) {
        v if v.is_infinite() => 2f64.powi(128).copysign(f64::from(v)),
        v => f64::from(v),
    };
    let (a, b) = (next(down), next(up));
    let v = f64::from(x);
    let (da, db) = ((v - a).abs(), (b - v).abs());
    if da < db || (da == db && down & 1 == 0) {
        down
    } else {
        up
    }
}

/// Awkward f32 values: ties (even and odd), just off ties, the largest finite, the
/// smallest normal, denormals, zeros, infinities and NaNs of both signs and payloads.
fn awkward() -> Vec<f32> {
    let mut v: Vec<f32> = [
        0x3f80_8000u32, // 1 + 2^-8: a tie, rounds down to even
        0x3f81_8000,    // a tie, rounds up to even
        0x3f80_8001,
        0x3f80_7fff,
        0x7f7f_ffff, // largest finite: rounds up to infinity
        0x7f7f_7fff,
        0x0080_0000, // smallest normal
        0x0080_8000,
        0x0000_0001, // denormals: flushed to zero
        0x007f_ffff,
        0x8000_0001,
        0x0000_0000,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0xffc0_1234,
        0x7f80_0001, // signalling NaNs: quieted
        0xff81_0000,
    ]
    .iter()
    .map(|&u| f32::from_bits(u))
    .collect();
    for (i, x) in rand_vec(64, 7).into_iter().enumerate() {
        v.push(x * 2f32.powi(i as i32 - 32));
    }
    v
}

#[test]
fn conversion_rounds_to_nearest_even() {
    for x in awkward() {
        let h = to_bf16(x);
        if x.is_nan() {
            assert!(from_bf16(h).is_nan(), "{x:?}");
            assert_eq!(h & 0x40, 0x40, "{:#x}: quiet", x.to_bits());
            assert_eq!(h & 0xffbf, ((x.to_bits() >> 16) as u16) & 0xffbf);
        } else if x.is_infinite() {
            assert_eq!(h, (x.to_bits() >> 16) as u16);
        } else if x.is_subnormal() || x == 0.0 {
            assert_eq!(
                h,
                ((x.to_bits() >> 16) & 0x8000) as u16,
                "{x:e}: signed zero"
            );
        } else {
            assert_eq!(h, round_by_value(x), "{:#x}", x.to_bits());
        }
    }
    assert_eq!(to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
    assert_eq!(to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    assert_eq!(to_bf16(f32::MAX), 0x7f80);
    assert_eq!(to_bf16(-1.0), 0xbf80);
}

#[test]
fn panel_conversion_matches_scalar() {
    let v = awkward();
    for kc in [1, 2, 5, 8] {
        let src: Vec<f32> = (0..kc * NR).map(|i| v[(i * 7) % v.len()]).collect();
        let want = {
            let mut d = vec![0u32; kc.div_ceil(2) * NR];
            (portable().pack_panel)(&src, kc, &mut d);
            d
        };
        for (q, row) in want.chunks(NR).enumerate() {
            for (j, &d) in row.iter().enumerate() {
                let hi = if 2 * q + 1 < kc {
                    src[(2 * q + 1) * NR + j]
                } else {
                    0.0
                };
                assert_eq!(d, pair(src[2 * q * NR + j], hi));
            }
        }
        for t in tables() {
            let mut d = vec![0u32; kc.div_ceil(2) * NR];
            (t.pack_panel)(&src, kc, &mut d);
            assert_eq!(d, want, "table {} kc {kc}", t.name);
        }
    }
}

/// Random pairs of bf16 values, scaled by `2^scale` (tiny scales reach denormal
/// products and sums).
fn rand_pairs(n: usize, seed: u64, scale: i32) -> Vec<u32> {
    let a = rand_vec(2 * n, seed);
    a.chunks(2)
        .map(|p| pair(p[0] * 2f32.powi(scale), p[1] * 2f32.powi(scale)))
        .collect()
}

#[test]
fn tiles_match_the_emulation_bit_for_bit() {
    // Scales: ordinary values, and values whose products and sums fall into (and out of)
    // the denormal range, where DAZ / FTZ decide the bits.
    for scale in [0, -62, -70] {
        for kp in [0, 1, 2, 3, 7, 64, 129] {
            let a = rand_pairs(kp * MR, kp as u64 + 1, scale);
            let b0 = rand_pairs(kp * NR, kp as u64 + 2, scale);
            let b1 = rand_pairs(kp * NR, kp as u64 + 3, scale);
            let ldc = 2 * NR + 3;
            let c0: Vec<f32> = rand_vec(MR * ldc, 9)
                .iter()
                .map(|x| x * 2f32.powi(scale))
                .collect();
            let run = |t: &Bf16Table| {
                let mut out = Vec::new();
                for acc in [false, true] {
                    let mut c = c0.clone();
                    (t.tile2)(kp, &a, &b0, &b1, &mut c, ldc, acc);
                    out.extend(c);
                    let mut c = c0.clone();
                    (t.tile1)(kp, &a, &b1, &mut c, ldc, acc);
                    out.extend(c);
                }
                out
            };
            let want = run(portable());
            for t in tables() {
                let got = run(t);
                for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        x.to_bits(),
                        y.to_bits(),
                        "table {} kp {kp} scale {scale} element {i}: {x:e} vs {y:e}",
                        t.name
                    );
                }
            }
        }
    }
}

/// `A · B` in f64 over the bf16-rounded operands (`a` `m x k`, `b` `k x n`, row-major).
fn rounded_product(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let r = |x: f32| f64::from(from_bf16(to_bf16(x)));
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| r(a[i * k + p]) * r(b[p * n + j])).sum();
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// Fills packed f32 panels of `b` (`k x n`, row-major) as `BSource::Panels` does.
fn panel_fill(b: &[f32], n: usize) -> impl Fn(usize, usize, usize, usize, &mut [f32]) + '_ {
    move |k0, kc, jc, nc, buf| {
        for q in 0..nc.div_ceil(NR) {
            for p in 0..kc {
                for j in 0..NR {
                    let col = jc + q * NR + j;
                    buf[q * kc * NR + p * NR + j] = if col < jc + nc {
                        b[(k0 + p) * n + col]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

const SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (6, 16, 2),
    (7, 33, 5),
    (13, 17, 3),
    (12, 48, 300),
    (20, 530, 257),
    (5, 70, 513),
];

#[test]
fn panels_gemm_matches_rounded_product_and_emulation() {
    for &(m, n, k) in &SIZES {
        let a = rand_vec(m * k, 1);
        let b = rand_vec(k * n, 2);
        let pa = pack_a(&a, k, m, k);
        let want = rounded_product(m, n, k, &a, &b);
        let run = |t: &Bf16Table, n_range: (usize, usize), m_range: (usize, usize)| {
            let mut c = vec![f32::NAN; m * n];
            let mut scratch = vec![0.0; panels_scratch_len(k, n)];
            let fill = panel_fill(&b, n);
            let isa = Isa::Portable;
            gemm_panels(
                t,
                isa,
                (m, k),
                &pa,
                &fill,
                &mut scratch,
                &mut c,
                n,
                m_range,
                n_range,
                &Epilogue::NONE,
            );
            c
        };
        let exact = run(portable(), (0, n), (0, m));
        for (x, y) in exact.iter().zip(&want) {
            // f32 accumulation of exact products: within k ulps of the f64 sum's scale.
            assert!(
                (x - y).abs() <= 1e-6 * k as f32 * (1.0 + y.abs()),
                "{m}x{n}x{k}: {x} vs {y}"
            );
        }
        for t in tables() {
            let whole = run(t, (0, n), (0, m));
            assert_eq!(bits(&whole), bits(&exact), "table {} {m}x{n}x{k}", t.name);
            // Column ranges at NR multiples and row ranges at MR multiples give the same bits.
            let cut = (n / 2) / NR * NR;
            let mut parts = run(t, (0, cut), (0, m));
            let right = run(t, (cut, n), (0, m));
            for i in 0..m {
                parts[i * n + cut..(i + 1) * n].copy_from_slice(&right[i * n + cut..(i + 1) * n]);
            }
            assert_eq!(bits(&parts), bits(&whole), "table {} column cut", t.name);
            let rcut = (m / 2) / MR * MR;
            let mut rows = run(t, (0, n), (0, rcut));
            rows[rcut * n..].copy_from_slice(&run(t, (0, n), (rcut, m))[rcut * n..]);
            assert_eq!(bits(&rows), bits(&whole), "table {} row cut", t.name);
        }
    }
}

#[test]
fn a_rows_gemm_matches_panels_gemm() {
    for &(m, n, k) in &SIZES {
        let a = rand_vec(m * k, 3);
        let b = rand_vec(k * n, 4);
        let want = rounded_product(m, n, k, &a, &b);
        for t in tables() {
            let pb = pack_b_for(t, (&b, n, 1), (k, n), 1.0);
            let mut scratch = vec![0u32; gemm_a_rows_scratch_len(t, m, k)];
            // C's rows and columns given of A read at (rs, cs) into `c`.
            let mut call = |asrc: (&[f32], usize, usize), c: &mut [f32], rows, cols| {
                let (p, e) = (Isa::Portable, &Epilogue::NONE);
                gemm_a_rows(t, p, (k, n), asrc, &pb, &mut scratch, c, n, rows, cols, e);
            };
            let mut c = vec![f32::NAN; m * n];
            call((&a, k, 1), &mut c, (0, m), (0, n));
            for (x, y) in c.iter().zip(&want) {
                assert!(
                    (x - y).abs() <= 1e-6 * k as f32 * (1.0 + y.abs()),
                    "{m}x{n}x{k}: {x} vs {y}"
                );
            }
            // Transposed A (column-major) reads the same elements.
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let mut ct = vec![f32::NAN; m * n];
            call((&at, 1, m), &mut ct, (0, m), (0, n));
            assert_eq!(bits(&ct), bits(&c), "table {} transposed A", t.name);
            // Row and column ranges (columns cut on a panel) give the whole call's bits.
            let (rcut, ccut) = (m / 2 / MR * MR, n / 2 / NR * NR);
            let mut parts = vec![f32::NAN; m * n];
            call((&a, k, 1), &mut parts, (0, rcut), (0, n));
            call((&a, k, 1), &mut parts, (rcut, m), (0, ccut));
            call((&a, k, 1), &mut parts, (rcut, m), (ccut, n));
            assert_eq!(bits(&parts), bits(&c), "table {} ranges", t.name);
        }
    }
}

#[test]
fn epilogue_runs_in_f32_after_the_product() {
    let (m, n, k) = (7, 20, 9);
    let a = rand_vec(m * k, 5);
    let b = rand_vec(k * n, 6);
    let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.25 - 1.0).collect();
    let pa = pack_a(&a, k, m, k);
    let fill = panel_fill(&b, n);
    let mut plain = vec![0.0; m * n];
    let mut scratch = vec![0.0; panels_scratch_len(k, n)];
    let t = native().unwrap_or(portable());
    gemm_panels(
        t,
        Isa::Portable,
        (m, k),
        &pa,
        &fill,
        &mut scratch,
        &mut plain,
        n,
        (0, m),
        (0, n),
        &Epilogue::NONE,
    );
    let epi = Epilogue {
        bias: Some(&bias),
        ..Epilogue::NONE
    };
    let mut biased = vec![0.0; m * n];
    gemm_panels(
        t,
        Isa::Portable,
        (m, k),
        &pa,
        &fill,
        &mut scratch,
        &mut biased,
        n,
        (0, m),
        (0, n),
        &epi,
    );
    for i in 0..m {
        for j in 0..n {
            assert_eq!(biased[i * n + j], plain[i * n + j] + bias[i]);
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

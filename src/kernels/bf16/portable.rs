//! The portable bf16 table: plain Rust that emulates `vdpbf16ps` and `vcvtne2ps2bf16`
//! bit for bit (the reference the AVX512_BF16 table is tested against).

use super::{from_bf16, pair, Bf16Table, MR, NR};
use crate::kernels::conv::direct::{Tiles, CW};

/// The portable table.
pub(super) static TABLE: Bf16Table = Bf16Table {
    name: "portable",
    tile2,
    tile1,
    pack_panel,
    conv_tiles: Tiles {
        rows: conv_tile,
        chans: conv_ctile,
        pairs: None,
    },
    pack_pairs,
    to_pairs,
    wide: None,
    wide_gemm: None,
};

/// `x` with a denormal read as a zero of its sign (DAZ).
fn daz(x: f32) -> f32 {
    if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// One step of `vdpbf16ps` for one lane: `acc + a * b` fused, rounded to nearest even,
/// denormal inputs as zero, a denormal result flushed to a zero of its sign (FTZ).
pub(crate) fn dp_step(acc: f32, a: f32, b: f32) -> f32 {
    daz(daz(a).mul_add(daz(b), daz(acc)))
}

/// One lane of `vdpbf16ps`: `acc` plus the high then the low products of the pairs `a`
/// and `b`.
pub(crate) fn dp_pair(acc: f32, a: u32, b: u32) -> f32 {
    let half = |v: u32, hi: bool| from_bf16(if hi { (v >> 16) as u16 } else { v as u16 });
    let s = dp_step(acc, half(a, true), half(b, true));
    dp_step(s, half(a, false), half(b, false))
}

/// MR rows x `panels.len()` NR-column panels of C from `kp` pairs.
fn tile_n(kp: usize, a: &[u32], panels: &[&[u32]], c: &mut [f32], ldc: usize, acc: bool) {
    let a = &a[..kp * MR];
    for (q, b) in panels.iter().enumerate() {
        let b = &b[..kp * NR];
        for r in 0..MR {
            for j in 0..NR {
                let at = r * ldc + q * NR + j;
                let mut s = if acc { c[at] } else { 0.0 };
                for p in 0..kp {
                    s = dp_pair(s, a[p * MR + r], b[p * NR + j]);
                }
                c[at] = s;
            }
        }
    }
}

fn tile2(kp: usize, a: &[u32], b0: &[u32], b1: &[u32], c: &mut [f32], ldc: usize, acc: bool) {
    tile_n(kp, a, &[b0, b1], c, ldc, acc)
}

fn tile1(kp: usize, a: &[u32], b: &[u32], c: &mut [f32], ldc: usize, acc: bool) {
    tile_n(kp, a, &[b], c, ldc, acc)
}

fn pack_panel(src: &[f32], kc: usize, dst: &mut [u32]) {
    let src = &src[..kc * NR];
    for (q, d) in dst[..kc.div_ceil(2) * NR].chunks_exact_mut(NR).enumerate() {
        for (j, x) in d.iter_mut().enumerate() {
            let hi = if 2 * q + 1 < kc {
                src[(2 * q + 1) * NR + j]
            } else {
                0.0
            };
            *x = pair(src[2 * q * NR + j], hi);
        }
    }
}

fn conv_tile(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let (a, taps) = (&a[..offs.len() * cp * MR], offs.len());
    for r in 0..MR {
        for j in 0..2 * NR {
            let mut s = 0.0;
            for p in 0..cp {
                for (t, &o) in offs.iter().enumerate() {
                    s = dp_pair(s, a[(p * taps + t) * MR + r], b[o + p * cps + j]);
                }
            }
            c[r * ldc + j] = s;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_ctile(
    a: &[u32],
    b: &[u32],
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    acc: bool,
) {
    let (a, taps) = (&a[..offs.len() * cp * CW], offs.len());
    for (j, &q) in pos.iter().enumerate() {
        for r in 0..CW {
            let mut s = if acc { c[j * CW + r] } else { 0.0 };
            for p in 0..cp {
                for (t, &o) in offs.iter().enumerate() {
                    s = dp_pair(s, a[(p * taps + t) * CW + r], b[q + o + p * cps]);
                }
            }
            c[j * CW + r] = s;
        }
    }
}

fn to_pairs(src: &[f32], dst: &mut [u32]) {
    for (q, d) in dst[..src.len().div_ceil(2)].iter_mut().enumerate() {
        *d = pair(src[2 * q], src.get(2 * q + 1).copied().unwrap_or(0.0));
    }
}

fn pack_pairs(lo: &[f32], hi: Option<&[f32]>, stride: usize, dst: &mut [u32]) {
    for (j, d) in dst.iter_mut().enumerate() {
        *d = pair(lo[j * stride], hi.map_or(0.0, |h| h[j * stride]));
    }
}

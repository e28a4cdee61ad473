//! Direct dense convs on the matrix engine over channels-last tensors: `x` `[N][H][W][Cin]`
//! in, `y` `[N][OH][OW][Cout]` out, the wide run of [`super::direct`] in between.
//!
//! The wide run's operands are already channels-last: its phase planes hold each plane
//! position's channel pairs together, and each accumulator block it hands back holds 32
//! positions x 32 output channels, position-major. So here packing an input row is one
//! contiguous conversion into pairs (no transpose: the planar path converts 16
//! positions x 32 channels through registers), and each position's 32 channels go to
//! the output as two vectors with the simple epilogue (bias, residual, ReLU / Clip)
//! applied on the way (no transpose back, no chunk buffer, no copy of kept positions).
//! Convs between two such layers (ResNet's blocks) keep their activations channels-last
//! (`compile::layout`).
//!
//! Sums and their order are the wide run's: row ranges together give the whole's bits.

use super::direct::{
    self, phase_cols, used_phases, walk_panels, Geom, NhwcOut, Tiling, Walk, Wide, WideEpi,
};
use super::direct::{WIDE_ROWS, WIDE_WIDTH};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::gemm::Epilogue;
use crate::kernels::isa::Isa;

/// Input channels per plane element: a K pair.
const PER: usize = 2;

/// True when [`conv_direct_nhwc`] computes the dense conv `s`: the wide run takes it as
/// it is, or (image stems, fewer than 16 channels) with its tap columns folded into
/// the channels ([`direct::unfold_applies`], undilated columns: each output column's
/// taps are then one contiguous run of the channels-last row).
pub fn direct_nhwc_applies(s: &ConvShape) -> bool {
    direct::wide_applies(s) || (direct::unfold_applies(s) && s.dw == 1)
}

/// The conv the wide run computes for `s`: `s`, or its unfolded conv (its channel
/// `v * Cin + c` input channel `c` at tap column `v`: the channels-last order).
fn computed(s: &ConvShape) -> ConvShape {
    if direct::wide_applies(s) {
        s.clone()
    } else {
        direct::unfolded_shape(s)
    }
}

/// Plane elements of scratch [`conv_direct_nhwc`] needs for `s`: one image's phase
/// planes.
pub fn direct_nhwc_scratch_len(s: &ConvShape) -> usize {
    direct::scratch_len(&computed(s), PER, Tiling::Wide)
}

/// The weights `w` (`[Cout, Cin, KH, KW]`) of `s` as the wide run of
/// [`conv_direct_nhwc`] reads them, each element made of two by `pair` (the unfolded
/// conv's, channels-last order, where `s` unfolds).
pub fn pack_direct_nhwc<T: Copy + Default>(
    s: &ConvShape,
    w: &[f32],
    pair: impl Fn(f32, f32) -> T,
) -> Vec<T> {
    if direct::wide_applies(s) {
        return direct::pack_weights(s, w, PER, pair, Tiling::Wide);
    }
    let (ci, kh, kw) = (s.c_in, s.kh, s.kw);
    let mut wu = vec![0.0; s.c_out * ci * kh * kw];
    for oc in 0..s.c_out {
        for c in 0..ci {
            for u in 0..kh {
                for v in 0..kw {
                    wu[((oc * kw + v) * ci + c) * kh + u] = w[((oc * ci + c) * kh + u) * kw + v];
                }
            }
        }
    }
    direct::pack_weights(&computed(s), &wu, PER, pair, Tiling::Wide)
}

/// Output rows `r0..r1` (of `N * OH`) of the dense conv `s` ([`direct_nhwc_applies`])
/// on `wide`: `x` `[N][H][W][Cin]`, `w` from [`pack_direct_nhwc`], `y` those rows of the
/// output `[N][OH][OW][Cout]`, then `epi` (bias by output channel, channels its
/// columns, residuals whole outputs). `scratch` holds [`direct_nhwc_scratch_len`]
/// elements.
#[allow(clippy::too_many_arguments)]
pub fn conv_direct_nhwc<T: Copy + Default>(
    wide: &Wide<T>,
    isa: Isa,
    s: &ConvShape,
    w: &[T],
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [T],
) {
    assert!(direct_nhwc_applies(s), "direct nhwc: not a wide conv");
    assert!(
        r0 <= r1 && r1 <= s.n * s.oh,
        "direct nhwc: rows past the output"
    );
    let (row, img) = (s.ow * s.c_out, s.h * s.w * s.c_in);
    assert!(
        x.len() >= s.n * img && y.len() >= (r1 - r0) * row,
        "direct nhwc: short operands"
    );
    // The conv the wide run computes (the unfolded one for a stem): its geometry, taps
    // and weights; the input's rows and columns stay those of `s`.
    let u = computed(s);
    let g = Geom::with(&u, PER, Tiling::Wide);
    let panel_len = g.taps * g.cp * WIDE_ROWS;
    let panels = s.c_out.div_ceil(WIDE_ROWS);
    assert!(w.len() >= panels * panel_len, "direct nhwc: short weights");
    // The simple epilogue goes with the stores; any other runs over each band after.
    let simple = Epilogue {
        channel_is_row: true,
        ..*epi
    }
    .simple_form();
    let mut b0 = r0;
    while b0 < r1 {
        // A band: the wanted rows of one image.
        let b1 = r1.min((b0 / s.oh + 1) * s.oh);
        let (xi, oh_lo, out_rows) = (b0 / s.oh, b0 % s.oh, b1 - b0);
        let ps = g.plane_stride(out_rows);
        let planes = &mut scratch[..g.phases * g.cp * ps];
        let xb = &x[xi * img..][..img];
        pack_nhwc(wide.pairs, (s, &u), &g, xb, (oh_lo, out_rows), ps, planes);
        let offs = g.offsets(&u, ps);
        let offs = &offs[..g.taps];
        let yb = &mut y[(b0 - r0) * row..(b1 - r0) * row];
        let fused = simple.map(|(slot, clamp)| WideEpi {
            bias: epi.bias.map(|b| &b[epi.channel_offset..]),
            residual: slot.map(|k| &epi.residuals[k][b0 * row..b1 * row]),
            clamp,
        });
        let tiles = (out_rows * g.wq).div_ceil(WIDE_WIDTH);
        let chans = (0, s.c_out);
        walk_panels((&g, chans), w, WIDE_ROWS, (0, tiles), &mut |step| {
            let Walk::Panel { pi, a, rows, tiles } = step else {
                return;
            };
            let mut out = NhwcOut {
                y: &mut *yb,
                cout: s.c_out,
                ow: s.ow,
                wq: g.wq,
                cols: (0, out_rows * s.ow),
                chan0: pi * WIDE_ROWS,
                chans: rows.1 - rows.0,
                epi: fused.unwrap_or_default(),
            };
            let run = (tiles.0 * WIDE_WIDTH, tiles.1 - tiles.0);
            (wide.nhwc)(a, planes, offs, g.cp, run, &mut out);
        });
        if fused.is_none() && !epi.is_empty() {
            let res = residual_slices(epi.residuals, b0 * row..b1 * row);
            let e = Epilogue {
                residuals: &res[..epi.residuals.len()],
                channel_is_row: false,
                ..*epi
            };
            e.apply(isa, yb, s.c_out, 0, out_rows * s.ow, 0, s.c_out);
        }
        b0 = b1;
    }
}

/// The phase planes (position-major, `g.cp` pairs a position) of the conv `u` that
/// output rows `oh_lo..oh_lo + out_rows` read from image `x` (`[H][W][Cin]` of `s`),
/// `ps` positions apart: each position's channels converted by `pairs`, zeros past them
/// and outside the image. Where `u` is `s` unfolded, position `j` of a plane row holds
/// the `KW * Cin` floats of input columns `j * sw - pw..` (one run of the row).
#[allow(clippy::too_many_arguments)]
fn pack_nhwc<T: Copy + Default>(
    pairs: fn(&[f32], &mut [T]),
    (s, u): (&ConvShape, &ConvShape),
    g: &Geom,
    x: &[f32],
    (oh_lo, out_rows): (usize, usize),
    ps: usize,
    planes: &mut [T],
) {
    let (cp, wq, ci) = (g.cp, g.wq, s.c_in);
    let unfolded = !direct::wide_applies(s);
    // Floats per position (the unfolded conv's channels) and the pairs they fill.
    let run = u.c_in;
    let (rows, half) = (out_rows + g.dy_max, run.div_ceil(PER));
    // The edge staging of unfolded positions (only they straddle the image's edge).
    let mut stage = [0.0f32; MAX_RUN];
    assert!(
        !unfolded || run <= MAX_RUN,
        "direct nhwc: {run} unfolded channels per position"
    );
    for (a, b, phase) in used_phases(u, g) {
        let (j_lo, j_hi) = phase_cols(u, b, wq);
        let set = &mut planes[phase * cp * ps..][..cp * ps];
        let (body, tail) = set.split_at_mut(rows * wq * cp);
        tail.fill(T::default());
        for (i, prow) in body.chunks_exact_mut(wq * cp).enumerate() {
            let ir = (oh_lo + i) * u.sh + a;
            if ir < u.ph || ir - u.ph >= u.h || j_lo >= j_hi {
                prow.fill(T::default());
                continue;
            }
            let line = &x[(ir - u.ph) * s.w * ci..][..s.w * ci];
            prow[..j_lo * cp].fill(T::default());
            prow[j_hi * cp..].fill(T::default());
            if !unfolded && u.sw == 1 && ci == PER * cp {
                // Whole positions back to back on both sides (an even channel count
                // filling the pairs): one conversion.
                let c0 = j_lo + b - u.pw;
                let src = &line[c0 * ci..(c0 + j_hi - j_lo) * ci];
                pairs(src, &mut prow[j_lo * cp..j_hi * cp]);
                continue;
            }
            for j in j_lo..j_hi {
                let dst = &mut prow[j * cp..(j + 1) * cp];
                // The position's first input column and how many of its columns lie
                // inside the row (all of them unless unfolded at an edge).
                let (c0, cols) = if unfolded {
                    ((j * s.sw) as isize - s.pw as isize, s.kw)
                } else {
                    ((j * u.sw + b - u.pw) as isize, 1)
                };
                let (lo, hi) = (c0.max(0), (c0 + cols as isize).min(s.w as isize));
                if lo == c0 && hi == c0 + cols as isize {
                    pairs(&line[c0 as usize * ci..][..run], &mut dst[..half]);
                } else {
                    let st = &mut stage[..run];
                    st.fill(0.0);
                    if lo < hi {
                        let at = (lo - c0) as usize * ci;
                        let n = (hi - lo) as usize * ci;
                        st[at..at + n].copy_from_slice(&line[lo as usize * ci..][..n]);
                    }
                    pairs(st, &mut dst[..half]);
                }
                dst[half..].fill(T::default());
            }
        }
    }
}

/// Most floats of one position of an unfolded conv (`KW * Cin` < 16 x 49 taps).
const MAX_RUN: usize = 16 * 49;

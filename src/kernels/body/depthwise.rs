//! Depthwise convolution bodies (one input and one output channel per group), compiled
//! by every kernel table.
//!
//! * Direct path (3x3 and 5x5 kernels, column stride 1 or 2, no dilation): each output
//!   row is computed straight from the input rows its taps read, SIMD across output
//!   columns (stride 2 deinterleaves a double-width load), several independent vector
//!   accumulators per step; the blocks at the borders read a small zero-padded copy of
//!   their input window instead of the plane. The fused epilogue runs on each finished
//!   row while it is in L1.
//! * Padded path (any other geometry): the plane is copied with its zero border into
//!   scratch, split into stride phases, and every tap is one contiguous multiply-add.

use super::conv::{strided_copy, ConvShape};
use super::epilogue::Epilogue;

/// Lanes of one vector accumulator (the AVX2 register width; the portable build splits it).
const L: usize = 8;
/// Independent vector accumulators per step on long rows.
const V: usize = 4;
/// Width of a border block's padded input window: `L * S + K - 1` for `S <= 2`, `K <= 5`.
const WIN: usize = 2 * L + 4;

/// True when the direct path handles `s`.
fn direct(s: &ConvShape) -> bool {
    s.kh == s.kw && (s.kh == 3 || s.kh == 5) && (s.sw == 1 || s.sw == 2) && s.dh == 1 && s.dw == 1
}

/// One depthwise plane: `out[oy, ox] = sum_{ky,kx} w[ky, kx] * x[iy, ix]` (zero padding),
/// no epilogue (table entry `depthwise_plane`; scratch: [`depthwise_scratch_len`]).
#[inline(always)]
pub fn depthwise_plane(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let ohw = s.oh * s.ow;
    depthwise_channel(s, w, plane, &mut out[..ohw], 0, &Epilogue::NONE, scratch);
}

/// Output channel `c` of a depthwise conv: `y` holds the channel planes of one image
/// (`[C, OH*OW]`, like the epilogue's residuals), `w` the channel's taps, `plane` its
/// input; the epilogue (channel `c`) is applied row by row (table entry
/// `depthwise_fused`).
#[inline(always)]
pub fn depthwise_channel(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    y: &mut [f32],
    c: usize,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let ohw = s.oh * s.ow;
    let epi = (!epi.is_empty()).then_some(epi);
    if !direct(s) {
        plane_padded(s, w, plane, &mut y[c * ohw..(c + 1) * ohw], scratch);
        if let Some(e) = epi {
            e.apply_body(y, ohw, c, 1, 0, ohw);
        }
        return;
    }
    assert!(plane.len() >= s.h * s.w && w.len() >= s.kh * s.kw);
    match (s.kh, s.sw) {
        (3, 1) => direct_rows::<3, 1>(s, w, plane, y, c, epi),
        (3, _) => direct_rows::<3, 2>(s, w, plane, y, c, epi),
        (5, 1) => direct_rows::<5, 1>(s, w, plane, y, c, epi),
        _ => direct_rows::<5, 2>(s, w, plane, y, c, epi),
    }
}

/// `L` inputs of tap column 0 for `L` consecutive outputs: `r[at + l * S]`.
#[inline(always)]
fn load<const S: usize>(r: &[f32], at: usize) -> [f32; L] {
    if S == 1 {
        r[at..at + L].try_into().expect("L floats")
    } else {
        let a: &[f32; 2 * L] = r[at..at + 2 * L].try_into().expect("2L floats");
        std::array::from_fn(|l| a[2 * l])
    }
}

/// `NV * L` outputs from the rows `rows` (each paired with its `K` tap weights), the
/// first output reading `row[at + kx]` for tap `kx`.
#[inline(always)]
fn block<const K: usize, const S: usize, const NV: usize>(
    rows: &[(&[f32], [f32; K])],
    at: usize,
) -> [[f32; L]; NV] {
    let mut acc = [[0.0f32; L]; NV];
    for (r, wr) in rows {
        for (kx, &wv) in wr.iter().enumerate() {
            for (v, a) in acc.iter_mut().enumerate() {
                let x = load::<S>(r, at + v * L * S + kx);
                for (d, xv) in a.iter_mut().zip(x) {
                    *d += wv * xv;
                }
            }
        }
    }
    acc
}

/// The direct path for a `K x K` kernel, column stride `S` (any row stride and pads).
#[inline(always)]
fn direct_rows<const K: usize, const S: usize>(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    y: &mut [f32],
    c: usize,
    epi: Option<&Epilogue<'_>>,
) {
    let (h, wd, ow, pw) = (s.h, s.w, s.ow, s.pw);
    let ohw = s.oh * ow;
    let wk: [[f32; K]; K] = std::array::from_fn(|ky| std::array::from_fn(|kx| w[ky * K + kx]));
    // A block at `ox0` of `n` outputs reads input columns `ox0*S - pw ..
    // (ox0+n)*S - pw + K - 1`: straight from the plane when that lies inside the row.
    let inside = |ox0: usize, n: usize| ox0 * S >= pw && (ox0 + n) * S + K - 1 <= wd + pw;
    let mut win = [[0.0f32; WIN]; K];
    for oy in 0..s.oh {
        let mut rows: [(&[f32], [f32; K]); K] = [(&[], [0.0; K]); K];
        let mut nr = 0;
        for (ky, wr) in wk.iter().enumerate() {
            let iy = (oy * s.sh + ky) as isize - s.ph as isize;
            if iy >= 0 && (iy as usize) < h {
                let iy = iy as usize;
                rows[nr] = (&plane[iy * wd..(iy + 1) * wd], *wr);
                nr += 1;
            }
        }
        let rows = &rows[..nr];
        let o0 = c * ohw + oy * ow;
        let orow = &mut y[o0..o0 + ow];
        let mut ox = 0;
        while ox < ow {
            if inside(ox, V * L) && ox + V * L <= ow {
                let acc = block::<K, S, V>(rows, ox * S - pw);
                for (v, a) in acc.iter().enumerate() {
                    orow[ox + v * L..ox + (v + 1) * L].copy_from_slice(a);
                }
                ox += V * L;
            } else if inside(ox, L) && ox + L <= ow {
                let [a] = block::<K, S, 1>(rows, ox * S - pw);
                orow[ox..ox + L].copy_from_slice(&a);
                ox += L;
            } else {
                // Border block: its input window, zero-padded, through the same code.
                let n = L.min(ow - ox);
                let mut wrows: [(&[f32], [f32; K]); K] = [(&[], [0.0; K]); K];
                for ((wrow, (r, wr)), d) in win.iter_mut().zip(rows).zip(wrows.iter_mut()) {
                    for (j, v) in wrow.iter_mut().enumerate() {
                        let ix = (ox * S + j) as isize - pw as isize;
                        *v = if ix >= 0 && (ix as usize) < wd {
                            r[ix as usize]
                        } else {
                            0.0
                        };
                    }
                    *d = (&wrow[..], *wr);
                }
                let [a] = block::<K, S, 1>(&wrows[..nr], 0);
                orow[ox..ox + n].copy_from_slice(&a[..n]);
                ox += n;
            }
        }
        if let Some(e) = epi {
            e.apply_body(y, ohw, c, 1, oy * ow, ow);
        }
    }
}

/// Geometry of the zero-padded, phase-split copy of a depthwise input plane:
/// `(phase_len, phase_row_len)`; there are `sh * sw` phases.
fn dw_padded(s: &ConvShape) -> (usize, usize) {
    let hp = (s.h + s.ph).max((s.oh.max(1) - 1) * s.sh + (s.kh - 1) * s.dh + 1);
    let wp = (s.w + s.pw).max((s.ow.max(1) - 1) * s.sw + (s.kw - 1) * s.dw + 1);
    let (hps, wps) = (hp.div_ceil(s.sh), wp.div_ceil(s.sw));
    ((hps + 1) * wps, wps)
}

/// Scratch floats [`depthwise_plane`] needs.
pub fn depthwise_scratch_len(s: &ConvShape) -> usize {
    let (plen, wps) = dw_padded(s);
    s.sh * s.sw * plen + s.oh * wps
}

/// Output elements accumulated per block in [`depthwise_plane`] (stays in L1).
const DW_BLOCK: usize = 1024;
/// Where tap `(ky, kx)` starts reading the phase-split padded plane (`sh * sw` phases of
/// `plen` floats, rows of `wps`) for output position 0.
#[inline(always)]
fn dw_tap_offset(s: &ConvShape, plen: usize, wps: usize, ky: usize, kx: usize) -> usize {
    let (qy, ry) = ((ky * s.dh) % s.sh, (ky * s.dh) / s.sh);
    let (qx, cx) = ((kx * s.dw) % s.sw, (kx * s.dw) / s.sw);
    (qy * s.sw + qx) * plen + ry * wps + cx
}

/// 3x3 depthwise: lanes of one register accumulator, and independent accumulators per
/// step (enough to hide the multiply-add latency).
const DW_LANES: usize = 8;
const DW_CHUNKS: usize = 4;

/// One depthwise plane through a padded, phase-split copy (any kernel, stride and
/// dilation; [`depthwise_plane`] uses it where the direct path does not apply).
///
/// The plane is first copied into `scratch` with its zero border, split into `sh * sw`
/// phases (padded position `(r, c)` goes to phase `(r % sh, c % sw)` at `(r / sh, c / sw)`).
/// Output `(oy, ox)` of tap `(ky, kx)` then reads phase position `(oy + ky*dh / sh,
/// ox + kx*dw / sw)`, so over a "wide" output of rows of the phase width each tap is one
/// contiguous, bounds-free multiply-add over the whole plane; the wide rows are then
/// trimmed into `out`.
#[inline(always)]
fn plane_padded(s: &ConvShape, w: &[f32], plane: &[f32], out: &mut [f32], scratch: &mut [f32]) {
    let (plen, wps) = dw_padded(s);
    let (sh, sw) = (s.sh, s.sw);
    let (pads, wide) = scratch.split_at_mut(sh * sw * plen);
    pads.fill(0.0);
    for iy in 0..s.h {
        let src = &plane[iy * s.w..(iy + 1) * s.w];
        let r = iy + s.ph;
        let base = (r % sh) * sw * plen + (r / sh) * wps;
        if sw == 1 {
            pads[base + s.pw..base + s.pw + s.w].copy_from_slice(src);
        } else {
            for qx in 0..sw {
                // First padded column of this phase that holds input: c0 >= pw, c0 % sw == qx.
                let c0 = s.pw + (qx + sw - s.pw % sw) % sw;
                if c0 - s.pw >= s.w {
                    continue;
                }
                let dst = &mut pads[base + qx * plen + c0 / sw..];
                strided_copy(&src[c0 - s.pw..], sw, dst);
            }
        }
    }
    let n = s.oh * wps;
    let wide = &mut wide[..n];
    let mut b0 = 0;
    if s.kh * s.kw == 9 {
        // 3x3: every output sums its nine taps in registers, DW_CHUNKS independent
        // vectors at a time (one load per tap, one store; no accumulator round trips).
        let offs: [usize; 9] = std::array::from_fn(|t| dw_tap_offset(s, plen, wps, t / 3, t % 3));
        let wt: &[f32; 9] = w[..9].try_into().expect("3x3 taps");
        const STEP: usize = DW_LANES * DW_CHUNKS;
        while b0 + STEP <= n {
            let mut acc = [[0.0f32; DW_LANES]; DW_CHUNKS];
            for (t, &o) in offs.iter().enumerate() {
                let src: &[f32; STEP] = pads[o + b0..o + b0 + STEP].try_into().expect("STEP");
                for (a, chunk) in acc.iter_mut().zip(src.chunks_exact(DW_LANES)) {
                    for (d, x) in a.iter_mut().zip(chunk) {
                        *d += wt[t] * *x;
                    }
                }
            }
            for (c, a) in acc.iter().enumerate() {
                wide[b0 + c * DW_LANES..b0 + (c + 1) * DW_LANES].copy_from_slice(a);
            }
            b0 += STEP;
        }
    }
    while b0 < n {
        let len = DW_BLOCK.min(n - b0);
        let acc = &mut wide[b0..b0 + len];
        let mut first = true;
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let off = dw_tap_offset(s, plen, wps, ky, kx) + b0;
                let wv = w[ky * s.kw + kx];
                let src = &pads[off..off + len];
                if first {
                    for (d, x) in acc.iter_mut().zip(src) {
                        *d = wv * *x;
                    }
                    first = false;
                } else {
                    for (d, x) in acc.iter_mut().zip(src) {
                        *d += wv * *x;
                    }
                }
            }
        }
        b0 += len;
    }
    for oy in 0..s.oh {
        out[oy * s.ow..(oy + 1) * s.ow].copy_from_slice(&wide[oy * wps..oy * wps + s.ow]);
    }
}

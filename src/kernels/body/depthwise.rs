//! Depthwise convolution bodies (one input and one output channel per group), compiled
//! by every kernel table.
//!
//! The plane is copied with its zero border into scratch, split into stride phases, and
//! every tap is one contiguous multiply-add over the phase plane (3x3 taps summed in
//! registers). The fused epilogue runs on the channel plane right after it is computed.
//!
//! (A direct path reading the input rows in place, SIMD across output columns through
//! the generic bodies, was measured slower than this one on Zen 3 — the compiler did not
//! keep its accumulators in vector registers — and was dropped. The AVX2 table runs
//! 3x3 / 5x5, stride 1 / 2 through hand-written kernels instead, table entry
//! `depthwise_fused`, whose scratch geometry [`DirectGeom`] lives here.)

use super::conv::{strided_copy, ConvShape};
use super::epilogue::Epilogue;

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
/// input; the epilogue (channel `c`) follows while the plane is hot (table entry
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
    plane_padded(s, w, plane, &mut y[c * ohw..(c + 1) * ohw], scratch);
    if !epi.is_empty() {
        epi.apply_body(y, ohw, c, 1, 0, ohw);
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

/// Scratch floats [`depthwise_plane`] (and every table's depthwise entries) need.
pub fn depthwise_scratch_len(s: &ConvShape) -> usize {
    let (plen, wps) = dw_padded(s);
    let direct = DirectGeom::new(s).map_or(0, |g| g.scratch_len());
    let block = if super::dw_block::applies(s) {
        super::dw_block::block_scratch_len(s)
    } else {
        0
    };
    (s.sh * s.sw * plen + s.oh * wps).max(direct).max(block)
}

/// Output rows per pass of the hand-written direct kernels (`depthwise_fused`).
pub const DIRECT_ROWS: usize = 4;
/// Output columns per vector of the direct kernels.
pub const DIRECT_LANES: usize = 8;

/// Geometry of the hand-written direct depthwise kernels (3x3 / 5x5, stride 1 or 2,
/// dilation 1): a ring of zero-bordered padded input rows plus one zero row in scratch.
pub struct DirectGeom {
    /// Kernel side (3 or 5).
    pub k: usize,
    /// Stride (1 or 2, both directions).
    pub st: usize,
    /// Floats of one padded row (stride 2: the even padded columns, then the odd ones).
    pub row_len: usize,
    /// Floats of one half of a stride-2 row (0 for stride 1).
    pub half: usize,
    /// Ring slots: the input rows one pass of [`DIRECT_ROWS`] output rows reads.
    pub slots: usize,
}

impl DirectGeom {
    /// The geometry when the direct kernels handle `s`.
    pub fn new(s: &ConvShape) -> Option<DirectGeom> {
        let ok = s.kh == s.kw
            && (s.kh == 3 || s.kh == 5)
            && s.sh == s.sw
            && (s.sh == 1 || s.sh == 2)
            && s.dh == 1
            && s.dw == 1
            && s.oh > 0
            && s.ow > 0
            && s.h > 0
            && s.w > 0;
        if !ok {
            return None;
        }
        let (k, st) = (s.kh, s.sh);
        // Columns a pass computes: whole vectors (the last one may be partial).
        let cols = s.ow.div_ceil(DIRECT_LANES) * DIRECT_LANES;
        let (row_len, half) = if st == 1 {
            // Tap kx of the vector at col reads columns col + kx .. col + kx + 8; a row
            // is copied in whole vectors (zeros past its end).
            let copy = s.pw + s.w.div_ceil(DIRECT_LANES) * DIRECT_LANES;
            (copy.max(cols + k - 1), 0)
        } else {
            // Even half: positions col + kx / 2 .. + 8 (kx even); odd half likewise; a
            // row is split 16 input columns (8 per half) at a time from pw.div_ceil(2).
            let copy = s.pw.div_ceil(2) + s.w.div_ceil(2 * DIRECT_LANES) * DIRECT_LANES;
            let half = copy.max(cols + (k - 1) / 2);
            (2 * half, half)
        };
        Some(DirectGeom {
            k,
            st,
            row_len,
            half,
            slots: (DIRECT_ROWS - 1) * st + k,
        })
    }

    /// Scratch floats: the ring plus the zero row.
    pub fn scratch_len(&self) -> usize {
        (self.slots + 1) * self.row_len
    }
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
/// dilation).
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

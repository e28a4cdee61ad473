//! Dense (one group) conv over channels-last images, for the few-channel image stems
//! that open a channels-last region (`compile::layout`), as a batch-reduce GEMM with the
//! output channels as columns: an output pixel's taps of kernel row `ky` are one run of
//! `KW * C` contiguous floats of input row `oy * SH + ky * DH - PH` (undilated columns),
//! and the runs of consecutive pixels lie `SW * C` floats apart; so the micro-kernel
//! (`mm_tile_segs` of the kernel table) reads each kernel row's runs in place, one
//! segment per kernel row, summing all of them in registers, with the weights packed
//! once as B (`[KH*KW*C][Cout]`, [`pack_dense_nhwc`]) and the bias and a ReLU / Clip
//! fused into the store. No im2col matrix, no planar output and no transpose after it.
//!
//! The input rows a band of [`BAND_ROWS`] output rows reads are copied into scratch
//! with their left and right pads as zeros (and one zero row for the top and bottom
//! pads), so that every run is whole. Every output element is the same sum in the same
//! order whatever the band, row range or tile height, so tiles and intra-op chunks give
//! the bits of the whole.

use super::super::gemm::{self, Epilogue};
use super::super::isa::{Isa, TileEpi, MR, NR, SEGS_ROWS};
use super::ConvShape;
use crate::ir::UnaryOp;
use crate::kernels::body::epilogue::residual_slices;
use crate::kernels::unary::PostOpRt;

/// Output rows of one band (the input rows they read are copied once per band).
pub const BAND_ROWS: usize = 8;

/// Kernel rows (segments of a tile) the kernel takes at most.
pub const MAX_KERNEL_ROWS: usize = 16;

/// The residuals an epilogue may carry.
const MAX_RESIDUALS: usize = 4;

/// True when [`dense_nhwc`] computes the conv `s`: one group, undilated columns, at
/// most [`MAX_KERNEL_ROWS`] kernel rows. (Any depth: the tile sums a whole kernel row's
/// run in registers; past one GEMM block its B panel streams from L2. Deep convs take
/// this path only where the matrix engine's does not run them, see
/// `kernels::conv::conv_direct_nhwc`.)
pub fn dense_nhwc_applies(s: &ConvShape) -> bool {
    s.group == 1 && s.dw == 1 && s.kh <= MAX_KERNEL_ROWS && s.pw < s.kw
}

/// True when a planar graph computes the conv `s` as [`NhwcIo::Planar`] bands rather
/// than as a planar direct or im2col conv: one group, a stride past 1 on either axis
/// (SVTR's 3x3 (2, 1) merging convs too: 732 -> 657 and 389 -> 359 us), a SIMD kernel
/// table. Strided planar convs split every input row into stride phases before their
/// tiles run; here the tiles read each kernel row's run in place. (Stride-1 convs stay
/// planar: the few-channel ones, e.g. YOLOX's 12->24 stem, ran slower so, 1.42 -> 2.0 ms.)
/// Weights past the L2 stay planar too: every output row's tiles read all of them, so
/// they would stream from L3 or memory once per row where the direct or im2col conv
/// reads them once (Xeon, 2 MiB L2, `kernels_bench -- plan`: ResNet's 3x3/2 256->512 at
/// 14x14, 4.7 MB, 1231-1380 -> 882-943 us warm and 1818-1833 -> 1322-1337 with its
/// operands from memory; at 1.2 MB the two ran even from memory, 1111-1138 against
/// 1120-1142 us for 128->256 at 28, and banded tiles cost nothing in an FC split where
/// the direct conv's channel tiles each pack the input: ResNet-18's split +2.0 % with
/// those convs direct).
pub fn planar_nhwc_wins(s: &ConvShape) -> bool {
    let t = crate::kernels::isa::table();
    let weights = s.k() * s.c_out * std::mem::size_of::<f32>();
    t.isa != Isa::Portable
        && dense_nhwc_applies(s)
        && s.sh * s.sw >= 2
        && weights <= crate::kernels::cache::l2_bytes()
}

/// Columns of a padded input row: the left pad, then as far as the last output pixel's
/// taps reach.
fn padded_width(s: &ConvShape) -> usize {
    (s.ow - 1) * s.sw + s.kw
}

/// Input rows one band reads at most.
fn band_input_rows(s: &ConvShape) -> usize {
    ((BAND_ROWS - 1) * s.sh + (s.kh - 1) * s.dh + 1).min(s.h)
}

/// Scratch floats a [`dense_nhwc`] call needs: one zero row and a band's padded input
/// rows.
pub fn dense_nhwc_scratch_len(s: &ConvShape) -> usize {
    (band_input_rows(s) + 1) * padded_width(s) * s.c_in
}

/// The weights `w` (`[Cout, Cin, KH, KW]`) of the one-group conv `s` as the packed B
/// operand of [`dense_nhwc`]: row `(ky * KW + kx) * Cin + c`, column `o`.
pub fn pack_dense_nhwc(s: &ConvShape, w: &[f32]) -> Vec<f32> {
    let (ci, co, khw, k) = (s.c_in, s.c_out, s.kh * s.kw, s.k());
    assert!(s.group == 1 && w.len() == co * k, "dense_nhwc: weights");
    let mut b = vec![0.0; k * co];
    for o in 0..co {
        for c in 0..ci {
            for t in 0..khw {
                b[(t * ci + c) * co + o] = w[(o * ci + c) * khw + t];
            }
        }
    }
    // Panels of NR columns, each its k rows of NR (zero columns past Cout): the packed
    // GEMM layout of one K block, for any depth.
    let mut pb = vec![0.0; gemm::packed_b_len(k, co)];
    for (p, row) in b.chunks_exact(co).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            pb[(j / NR * k + p) * NR + j % NR] = v;
        }
    }
    pb
}

/// The clamp of an epilogue the tiles fuse whole (no post-op, or one ReLU / Clip, and
/// nothing else): `Some(None)` for none, `None` when the epilogue needs its own pass.
fn fused_clamp(epi: &Epilogue<'_>) -> Option<Option<(f32, f32)>> {
    if epi.addend.is_some() || !epi.residuals.is_empty() {
        return None;
    }
    match epi.post {
        [] => Some(None),
        [PostOpRt::Unary(UnaryOp::Relu)] => Some(Some((0.0, f32::INFINITY))),
        [PostOpRt::Unary(UnaryOp::Clip { min, max })] => Some(Some((*min, *max))),
        _ => None,
    }
}

/// How a [`dense_nhwc_io`] call holds its input and output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NhwcIo {
    /// `x` `[N][H][W][Cin]`; `y` the call's rows of `[N][OH][OW][Cout]`.
    ChannelsLast,
    /// `x` `[N][Cin][H][W]`; `y` the whole `[N][Cout][OH][OW]` output. Each band's input
    /// rows are transposed into the channels-last scratch rows (where the channels-last
    /// form copies them), its outputs computed channels-last into scratch and transposed
    /// into their planes, then the rest of the epilogue runs on the planes. A planar
    /// graph's strided convs run so (`exec::plan::conv`): the tiles read each kernel
    /// row's input in place at any stride, where the planar direct conv first splits
    /// every input row into stride phases.
    Planar,
}

/// Output rows `r0..r1` (of `N * OH`) of the one-group channels-last conv `s`
/// ([`dense_nhwc_applies`]): `x` `[N][H][W][Cin]`, `pb` the weights packed by
/// [`pack_dense_nhwc`], `y` those rows of the output `[N][OH][OW][Cout]`, then the
/// epilogue `epi` (its bias per output channel, `Cout` floats; channels are its columns;
/// its residuals whole outputs). `scratch` holds [`dense_nhwc_scratch_len`] floats.
#[allow(clippy::too_many_arguments)]
pub fn dense_nhwc(
    isa: Isa,
    s: &ConvShape,
    pb: &[f32],
    x: &[f32],
    y: &mut [f32],
    rows: (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    dense_nhwc_io(isa, NhwcIo::ChannelsLast, s, pb, x, y, rows, epi, scratch)
}

/// Scratch floats a [`dense_nhwc_io`] call in `io` needs: [`dense_nhwc_scratch_len`],
/// and for planar tensors a band of channels-last outputs.
pub fn dense_nhwc_io_scratch_len(s: &ConvShape, io: NhwcIo) -> usize {
    let out = match io {
        NhwcIo::ChannelsLast => 0,
        NhwcIo::Planar => BAND_ROWS * s.ow * s.c_out,
    };
    dense_nhwc_scratch_len(s) + out
}

/// [`dense_nhwc`] over tensors held as `io` says: for [`NhwcIo::Planar`], `x`
/// `[N][Cin][H][W]`, `y` the whole output `[N][Cout][OH][OW]` (rows `r0..r1` of each
/// channel written), the epilogue's channels its rows and its residuals planar, and
/// `scratch` [`dense_nhwc_io_scratch_len`] floats. The same sums in both forms.
#[allow(clippy::too_many_arguments)]
pub fn dense_nhwc_io(
    isa: Isa,
    io: NhwcIo,
    s: &ConvShape,
    pb: &[f32],
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let (c, co, k) = (s.c_in, s.c_out, s.k());
    let row = s.ow * co;
    let ohw = s.oh * s.ow;
    let planar = io == NhwcIo::Planar;
    assert!(dense_nhwc_applies(s), "dense_nhwc: not a supported shape");
    assert!(
        r0 <= r1 && r1 <= s.n * s.oh,
        "dense_nhwc: rows past the output"
    );
    let y_len = if planar {
        s.n * co * ohw
    } else {
        (r1 - r0) * row
    };
    assert!(x.len() >= s.n * s.h * s.w * c && y.len() >= y_len);
    assert!(
        pb.len() >= gemm::packed_b_len(k, co),
        "dense_nhwc: packed weights"
    );
    assert!(
        epi.bias.is_none_or(|b| b.len() >= co),
        "dense_nhwc: short bias"
    );
    assert!(epi.residuals.len() <= MAX_RESIDUALS, "too many residuals");
    let t = isa.table();
    let (kc, lda) = (s.kw * c, s.sw * c);
    let prow = padded_width(s) * c;
    let (scratch, band_out) =
        scratch[..dense_nhwc_io_scratch_len(s, io)].split_at_mut(dense_nhwc_scratch_len(s));
    scratch[..prow].fill(0.0);
    let clamp = fused_clamp(epi);
    // A post pass of element-wise ops only (no per-channel parameter) may take the band
    // as one flat row: the residuals are laid out like the output.
    let flat_post = epi.addend.is_none()
        && epi
            .post
            .iter()
            .all(|p| matches!(p, PostOpRt::Unary(_) | PostOpRt::AddInput { .. }));
    let plane = s.h * s.w * c;
    // Input columns copied into a padded row (those the taps reach).
    let cols = s.w.min(padded_width(s) - s.pw);
    let mut b0 = r0;
    while b0 < r1 {
        // A band stays within one image.
        let b1 = (b0 + BAND_ROWS).min(r1).min((b0 / s.oh + 1) * s.oh);
        let img = b0 / s.oh;
        let (oy0, oy1) = (b0 % s.oh, (b1 - 1) % s.oh);
        let iy_lo = (oy0 * s.sh).saturating_sub(s.ph);
        let iy_hi = (oy1 * s.sh + (s.kh - 1) * s.dh + 1)
            .saturating_sub(s.ph)
            .min(s.h);
        for iy in iy_lo..iy_hi {
            let d = &mut scratch[(1 + iy - iy_lo) * prow..][..prow];
            d[..s.pw * c].fill(0.0);
            let run = &mut d[s.pw * c..(s.pw + cols) * c];
            if planar {
                // Column j of the row: every channel's element j, from its plane.
                let src = &x[img * plane + iy * s.w..];
                let src = &src[..(c - 1) * s.h * s.w + cols];
                (t.transpose32)(
                    bytemuck::cast_slice(src),
                    s.h * s.w,
                    bytemuck::cast_slice_mut(run),
                    c,
                    c,
                    cols,
                );
            } else {
                run.copy_from_slice(&x[img * plane + iy * s.w * c..][..cols * c]);
            }
            d[(s.pw + cols) * c..].fill(0.0);
        }
        let a = &scratch[..];
        for r in b0..b1 {
            let oy = r % s.oh;
            // Each kernel row's padded input row (the zero row past the image).
            let mut rows_at = [0usize; MAX_KERNEL_ROWS];
            for (ky, at) in rows_at[..s.kh].iter_mut().enumerate() {
                let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                if iy >= 0 && (iy as usize) < s.h {
                    *at = (1 + iy as usize - iy_lo) * prow;
                }
            }
            let yr = if planar {
                &mut band_out[(r - b0) * row..(r - b0 + 1) * row]
            } else {
                &mut y[(r - r0) * row..(r - r0 + 1) * row]
            };
            for ox0 in (0..s.ow).step_by(SEGS_ROWS) {
                let rows = SEGS_ROWS.min(s.ow - ox0);
                let mut segs = rows_at;
                for sg in &mut segs[..s.kh] {
                    *sg += ox0 * lda;
                }
                let segs = &segs[..s.kh];
                // The full strips in one call (the table holds several in registers,
                // each A value broadcast once for all of them).
                let strips = co / NR;
                if strips > 0 {
                    let e = TileEpi {
                        bias: [0.0; MR],
                        col_bias: epi.bias,
                        residual: None,
                        clamp: clamp.flatten(),
                    };
                    let out = &mut yr[ox0 * co..];
                    (t.mm_tile_segs)(kc, a, segs, lda, pb, out, co, (rows, strips), Some(&e));
                }
                let j = strips * NR;
                if j < co {
                    // The last, narrower panel through a stack tile.
                    let mut cb = [0.0f32; NR];
                    if let Some(bias) = epi.bias {
                        cb[..co - j].copy_from_slice(&bias[j..co]);
                    }
                    let e = TileEpi {
                        bias: [0.0; MR],
                        col_bias: Some(&cb),
                        residual: None,
                        clamp: clamp.flatten(),
                    };
                    let b = &pb[j * k..][..k * NR];
                    let mut tile = [0.0f32; SEGS_ROWS * NR];
                    (t.mm_tile_segs)(kc, a, segs, lda, b, &mut tile, NR, (rows, 1), Some(&e));
                    for (q, src) in tile.chunks_exact(NR).take(rows).enumerate() {
                        let at = (ox0 + q) * co + j;
                        yr[at..at + co - j].copy_from_slice(&src[..co - j]);
                    }
                }
            }
        }
        if planar {
            // The band's positions into each channel's plane, then the rest of the
            // epilogue over those plane columns.
            let (q0, q1) = (oy0 * s.ow, (oy1 + 1) * s.ow);
            let yb = &mut y[img * co * ohw..][..co * ohw];
            (t.transpose32)(
                bytemuck::cast_slice(&band_out[..(q1 - q0) * co]),
                co,
                bytemuck::cast_slice_mut(&mut yb[q0..]),
                ohw,
                q1 - q0,
                co,
            );
            if clamp.is_none() {
                let res = residual_slices(epi.residuals, img * co * ohw..(img + 1) * co * ohw);
                let e = Epilogue {
                    bias: None,
                    residuals: &res[..epi.residuals.len()],
                    channel_is_row: true,
                    ..*epi
                };
                e.apply(isa, yb, ohw, 0, co, q0, q1 - q0);
            }
        } else if clamp.is_none() {
            // The bias went with the tiles; the rest of the epilogue over the band.
            let res = residual_slices(epi.residuals, b0 * row..b1 * row);
            let e = Epilogue {
                bias: None,
                residuals: &res[..epi.residuals.len()],
                channel_is_row: false,
                ..*epi
            };
            let out = &mut y[(b0 - r0) * row..(b1 - r0) * row];
            if flat_post {
                // Element-wise post-ops only: the band as one row (rows of `Cout`
                // floats, as few as 16, would cost the pass a call each).
                let len = out.len();
                (t.epilogue)(&e, out, len, 0, 1, 0, len);
            } else {
                (t.epilogue)(&e, out, co, 0, (b1 - b0) * s.ow, 0, co);
            }
        }
        b0 = b1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa;
    use crate::kernels::testutil::rand_vec as rand;

    /// The conv in f64 from its definition, `[N][OH][OW][Cout]`, plus the bias, then
    /// `post` (ReLU6, or `+ residual` then HardSwish).
    fn reference(
        s: &ConvShape,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        res: Option<&[f32]>,
    ) -> Vec<f64> {
        let mut y = vec![0.0f64; s.n * s.oh * s.ow * s.c_out];
        for img in 0..s.n {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    for o in 0..s.c_out {
                        let mut acc = f64::from(bias[o]);
                        for c in 0..s.c_in {
                            for ky in 0..s.kh {
                                for kx in 0..s.kw {
                                    let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                                    let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                                    if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize
                                    {
                                        continue;
                                    }
                                    let (iy, ix) = (iy as usize, ix as usize);
                                    let xv = x[((img * s.h + iy) * s.w + ix) * s.c_in + c];
                                    let wv = w[((o * s.c_in + c) * s.kh + ky) * s.kw + kx];
                                    acc += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                        let at = ((img * s.oh + oy) * s.ow + ox) * s.c_out + o;
                        y[at] = match res {
                            None => acc.clamp(0.0, 6.0),
                            Some(r) => {
                                let v = acc + f64::from(r[at]);
                                v * (v + 3.0).clamp(0.0, 6.0) / 6.0
                            }
                        };
                    }
                }
            }
        }
        y
    }

    /// A square-kernel conv over `hw` with "same" pads, stride `st`, row dilation `dh`.
    fn shape(
        n: usize,
        c: usize,
        hw: (usize, usize),
        co: usize,
        k: usize,
        st: usize,
        dh: usize,
    ) -> ConvShape {
        let (ph, pw) = (k / 2 * dh, k / 2);
        let oh = (hw.0 + 2 * ph - (k - 1) * dh - 1) / st + 1;
        let ow = (hw.1 + 2 * pw - k) / st + 1;
        ConvShape {
            n,
            c_in: c,
            h: hw.0,
            w: hw.1,
            c_out: co,
            oh,
            ow,
            kh: k,
            kw: k,
            sh: st,
            sw: st,
            dh,
            dw: 1,
            ph,
            pw,
            group: 1,
        }
    }

    #[test]
    fn dense_nhwc_matches_the_definition_and_its_row_ranges_the_whole() {
        let relu6 = [PostOpRt::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })];
        let res_hswish = [
            PostOpRt::AddInput { slot: 0 },
            PostOpRt::Unary(UnaryOp::HardSwish),
        ];
        // Image stems (3 channels, 3x3 s2, 7x7 s2), a row-dilated 3x3, channel counts
        // that leave a narrow last panel, bands that cross images, tiny planes, rows of
        // fewer pixels than a tile.
        let shapes = [
            shape(1, 3, (33, 29), 32, 3, 2, 1),
            shape(2, 3, (20, 40), 16, 3, 2, 1),
            shape(1, 4, (17, 13), 21, 7, 2, 1),
            shape(2, 2, (9, 11), 8, 3, 1, 2),
            shape(1, 1, (3, 2), 5, 5, 1, 1),
            // Deeper than one GEMM block (64 x 9 = 576), a narrow last panel.
            shape(1, 64, (9, 7), 40, 3, 1, 1),
            shape(2, 48, (8, 8), 32, 3, 2, 1),
            // Deep (past several GEMM blocks), six strips and a narrow panel.
            shape(1, 256, (9, 8), 104, 3, 2, 1),
        ];
        for s in &shapes {
            assert!(dense_nhwc_applies(s), "{s:?}");
            let x = rand(s.n * s.h * s.w * s.c_in, 1);
            let w = rand(s.c_out * s.k(), 2);
            let bias: Vec<f32> = rand(s.c_out, 3).iter().map(|v| v * 8.0).collect();
            let zeros = vec![0.0f32; s.c_out];
            let rows = s.n * s.oh;
            let row = s.ow * s.c_out;
            let res = rand(rows * row, 4);
            let pb = pack_dense_nhwc(s, &w);
            // Fused (ReLU6) with and without a bias, and the separate epilogue pass.
            for (fused, biased) in [(true, true), (true, false), (false, true)] {
                let b = if biased { &bias } else { &zeros };
                let (post, resid, want) = if fused {
                    (&relu6[..], vec![], reference(s, &x, &w, b, None))
                } else {
                    let want = reference(s, &x, &w, b, Some(&res));
                    (&res_hswish[..], vec![&res[..]], want)
                };
                let epi = Epilogue {
                    bias: biased.then_some(&bias[..]),
                    channel_is_row: false,
                    post,
                    residuals: &resid,
                    ..Epilogue::NONE
                };
                // f32 sums of a deep conv's products drift with the depth.
                let tol = 1e-5 * (s.k() as f64 / 256.0).sqrt().max(1.0);
                for isa in isa::available_isas() {
                    let mut scratch = vec![f32::NAN; dense_nhwc_scratch_len(s)];
                    let mut y = vec![f32::NAN; rows * row];
                    dense_nhwc(isa, s, &pb, &x, &mut y, (0, rows), &epi, &mut scratch);
                    for (i, (&g, &r)) in y.iter().zip(&want).enumerate() {
                        assert!(
                            (f64::from(g) - r).abs() <= tol * (1.0 + r.abs()),
                            "{s:?} {isa:?} at {i}: {g} vs {r}"
                        );
                    }
                    // Row ranges (FC tiles, intra-op chunks) give the whole's bits.
                    for cut in [1, rows / 3, rows - 1] {
                        let mut z = vec![f32::NAN; rows * row];
                        let (lo, hi) = z.split_at_mut(cut * row);
                        dense_nhwc(isa, s, &pb, &x, lo, (0, cut), &epi, &mut scratch);
                        dense_nhwc(isa, s, &pb, &x, hi, (cut, rows), &epi, &mut scratch);
                        assert!(
                            y.iter().zip(&z).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{s:?} {isa:?}: rows cut at {cut} differ from the whole"
                        );
                    }
                }
            }
        }
    }

    /// `[N][A][B]` -> `[N][B][A]`.
    fn swap_inner(v: &[f32], n: usize, a: usize, b: usize) -> Vec<f32> {
        let mut out = vec![0.0; v.len()];
        for i in 0..n {
            for p in 0..a {
                for q in 0..b {
                    out[(i * b + q) * a + p] = v[(i * a + p) * b + q];
                }
            }
        }
        out
    }

    #[test]
    fn planar_tensors_give_the_channels_last_bits_and_row_ranges_the_whole() {
        let relu = [PostOpRt::Unary(UnaryOp::Relu)];
        let res_hswish = [
            PostOpRt::AddInput { slot: 0 },
            PostOpRt::Unary(UnaryOp::HardSwish),
        ];
        // Strided convs of the planar graphs (stems, 3x3/2 and 1x1/2 ones, 7x7/2), a
        // narrow last panel, bands that cross images, rows of fewer pixels than a tile.
        let mut shapes = vec![
            shape(1, 3, (33, 29), 32, 3, 2, 1),
            shape(2, 16, (20, 40), 24, 3, 2, 1),
            shape(1, 4, (17, 13), 21, 7, 2, 1),
            shape(2, 48, (8, 8), 32, 3, 2, 1),
            shape(1, 40, (6, 5), 8, 3, 2, 1),
            shape(1, 256, (9, 8), 104, 3, 2, 1),
        ];
        let mut pw = shape(1, 64, (14, 14), 48, 1, 2, 1);
        (pw.ph, pw.pw, pw.oh, pw.ow) = (0, 0, 7, 7);
        shapes.push(pw);
        // Stride (2, 1): SVTR's merging convs.
        let mut merge = shape(2, 32, (12, 20), 48, 3, 1, 1);
        (merge.sh, merge.oh) = (2, 6);
        shapes.push(merge);
        for s in &shapes {
            assert!(dense_nhwc_applies(s), "{s:?}");
            let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
            let x = rand(s.n * hw * s.c_in, 1);
            let w = rand(s.c_out * s.k(), 2);
            let bias = rand(s.c_out, 3);
            let rows = s.n * s.oh;
            let res = rand(rows * s.ow * s.c_out, 4);
            let (xp, resp) = (
                swap_inner(&x, s.n, hw, s.c_in),
                swap_inner(&res, s.n, ohw, s.c_out),
            );
            let pb = pack_dense_nhwc(s, &w);
            for fused in [true, false] {
                let post = if fused { &relu[..] } else { &res_hswish[..] };
                let (r_last, r_planar) = if fused {
                    (vec![], vec![])
                } else {
                    (vec![&res[..]], vec![&resp[..]])
                };
                let epi = |residuals| Epilogue {
                    bias: Some(&bias[..]),
                    channel_is_row: false,
                    post,
                    residuals,
                    ..Epilogue::NONE
                };
                for isa in isa::available_isas() {
                    let len = dense_nhwc_io_scratch_len(s, NhwcIo::Planar);
                    let mut scratch = vec![f32::NAN; len];
                    let mut y = vec![f32::NAN; rows * s.ow * s.c_out];
                    let e = epi(&r_last);
                    dense_nhwc(isa, s, &pb, &x, &mut y, (0, rows), &e, &mut scratch);
                    let want = swap_inner(&y, s.n, ohw, s.c_out);
                    let e = epi(&r_planar);
                    let planar = NhwcIo::Planar;
                    for cut in [0, 1, rows / 3, rows - 1] {
                        let mut z = vec![f32::NAN; y.len()];
                        let io = (&xp[..], &mut z[..]);
                        dense_nhwc_io(isa, planar, s, &pb, io.0, io.1, (0, cut), &e, &mut scratch);
                        let io = (&xp[..], &mut z[..]);
                        dense_nhwc_io(
                            isa,
                            planar,
                            s,
                            &pb,
                            io.0,
                            io.1,
                            (cut, rows),
                            &e,
                            &mut scratch,
                        );
                        assert!(
                            want.iter().zip(&z).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{s:?} {isa:?} fused {fused}: planar, cut at {cut}"
                        );
                    }
                }
            }
        }
    }

    // Every table's segment tile equals the portable one over its row counts, segment
    // counts and depths, with and without the fused epilogue.
    crate::kernels::isa::twin_test!(tables_segment_tiles_like_the_portable_body, 1e-5, |t| {
        let mut out = Vec::new();
        for (kc, nseg, lda) in [(1, 1, 1), (9, 3, 6), (21, 7, 9), (5, 2, 20)] {
            let a = rand(nseg * 40 + SEGS_ROWS * lda + kc, 5);
            let segs: Vec<usize> = (0..nseg).map(|s| s * 40).collect();
            let b = rand(5 * nseg * kc * NR, 6);
            let cb = rand(5 * NR, 7);
            let e = TileEpi {
                bias: [0.0; MR],
                col_bias: Some(&cb),
                residual: None,
                clamp: Some((-0.1, 0.2)),
            };
            // Every row count and one to five strips (pieces of every size a table
            // has, ragged rows and strips among them).
            let clamp_only = TileEpi {
                col_bias: None,
                ..e
            };
            for strips in 1..=5 {
                for rows in 1..=SEGS_ROWS {
                    for epi in [None, Some(&e), Some(&clamp_only)] {
                        let ldc = strips * NR + 3;
                        let mut c = vec![7.0f32; SEGS_ROWS * ldc];
                        let rs = (rows, strips);
                        (t.mm_tile_segs)(kc, &a, &segs, lda, &b, &mut c, ldc, rs, epi);
                        out.extend(c);
                    }
                }
            }
        }
        out
    });
}

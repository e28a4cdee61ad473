//! im2col written straight into packed GEMM panels (implicit GEMM): the B operand of a
//! dense conv built panel by panel from the NCHW input, with no im2col matrix between.
//!
//! Layout written (the GEMM's packed B block): rows `k0..k0 + kc` of the im2col matrix
//! (row `(ci, ky, kx)`, the packed weights' K order) and columns `j0..j0 + n` (output
//! positions `oy * OW + ox`) as `n.div_ceil(NR)` panels of `kc x NR` floats, panel `q`
//! at `q * kc * NR`, K row `p` at `+ p * NR`; columns past `n` in the last panel are 0.

use super::conv::ConvShape;
use super::pool::valid_range;
use super::prefetch::prefetch_floats;

/// Channel planes ahead of the one it gathers from whose rows [`im2col_panels`] asks
/// the cache for: each plane's rows are one short run the hardware prefetcher meets
/// cold (a conv's input comes from memory).
const PREFETCH_PLANES: usize = 2;

/// Writes the block described in the module doc for one image and group `xg`
/// (`[Cin_g, H, W]`) into `out` (at least `kc * n.div_ceil(NR) * NR` floats).
/// `gather(src, stride, dst)` must set `dst[i] = src[i * stride]` for `i < dst.len()`;
/// it is called for the pieces of a panel row cut by segment ends and panel edges (1 to
/// `NR` floats) with `src` holding at least `(dst.len() - 1) * stride + 1` floats.
/// `run(src, stride, out, panel, count)` does the same for `count` whole panel rows in
/// a row, piece `i` (`src[i * NR * stride..]`) into `out[i * panel..][..NR]` ([`runs`]
/// makes one from a piece gather); a table passes its SIMD versions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn im2col_panels<const NR: usize>(
    s: &ConvShape,
    xg: &[f32],
    k0: usize,
    kc: usize,
    j0: usize,
    n: usize,
    out: &mut [f32],
    gather: impl Fn(&[f32], usize, &mut [f32]),
    run: impl Fn(&[f32], usize, &mut [f32], usize, usize),
) {
    let (hw, khw) = (s.h * s.w, s.kh * s.kw);
    let panel = kc * NR;
    let n_pad = n.div_ceil(NR) * NR;
    let out = &mut out[..kc * n_pad];
    // Input rows the block reads (of every channel plane).
    let (oy_lo, oy_hi) = (j0 / s.ow, (j0 + n - 1) / s.ow);
    let iy_lo = (oy_lo * s.sh).saturating_sub(s.ph).min(s.h);
    let iy_hi = (oy_hi * s.sh + (s.kh - 1) * s.dh + 1)
        .saturating_sub(s.ph)
        .min(s.h);
    for pl in 0..kc {
        let p = k0 + pl;
        let (ci, ky, kx) = (p / khw, (p % khw) / s.kw, p % s.kw);
        if (p.is_multiple_of(khw) || pl == 0) && (ci + PREFETCH_PLANES) * hw < xg.len() {
            // A channel's first K row: its rows of the plane two channels on.
            let ahead = xg
                .as_ptr()
                .wrapping_add((ci + PREFETCH_PLANES) * hw + iy_lo * s.w);
            prefetch_floats(ahead, (iy_hi.max(iy_lo) - iy_lo) * s.w);
        }
        let plane = &xg[ci * hw..(ci + 1) * hw];
        let (vlo, vhi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
        let mut rows = PanelRow::<NR> { out, pl, panel };
        let (mut j, end) = (j0, j0 + n);
        let (mut oy, mut ox0) = (j / s.ow, j % s.ow);
        while j < end {
            let ox1 = s.ow.min(ox0 + (end - j));
            let t = j - j0;
            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
            let (lo, hi) = (vlo.clamp(ox0, ox1), vhi.clamp(ox0, ox1));
            if iy < 0 || iy >= s.h as isize || lo >= hi {
                rows.zero(t, ox1 - ox0);
            } else {
                rows.zero(t, lo - ox0);
                rows.zero(t + hi - ox0, ox1 - hi);
                let ix0 = lo * s.sw + kx * s.dw - s.pw;
                let src = &plane[iy as usize * s.w + ix0..];
                rows.gather(t + lo - ox0, hi - lo, src, s.sw, (&gather, &run));
            }
            j += ox1 - ox0;
            oy += 1;
            ox0 = 0;
        }
        rows.zero(n, n_pad - n);
    }
}

/// One K row of a packed block: column `c` lives in panel `c / NR`, lane `c % NR`.
struct PanelRow<'o, const NR: usize> {
    out: &'o mut [f32],
    pl: usize,
    panel: usize,
}

impl<const NR: usize> PanelRow<'_, NR> {
    /// The contiguous pieces of columns `c..c + len`, one per panel: `(dst, done)`.
    #[inline(always)]
    fn pieces(&mut self, c: usize, len: usize, mut f: impl FnMut(&mut [f32], usize)) {
        let mut done = 0;
        while done < len {
            let (q, r) = ((c + done) / NR, (c + done) % NR);
            let m = (NR - r).min(len - done);
            f(
                &mut self.out[q * self.panel + self.pl * NR + r..][..m],
                done,
            );
            done += m;
        }
    }

    /// Columns `c..c + len` = 0.
    #[inline(always)]
    fn zero(&mut self, c: usize, len: usize) {
        self.pieces(c, len, |d, _| d.fill(0.0));
    }

    /// Columns `c..c + len` = `src[i * stride]`, `i < len`: the whole panel rows among
    /// them through `run` in one call, the cut pieces at either end through `gather`.
    #[inline(always)]
    fn gather(
        &mut self,
        c: usize,
        len: usize,
        src: &[f32],
        stride: usize,
        (gather, run): (
            &impl Fn(&[f32], usize, &mut [f32]),
            &impl Fn(&[f32], usize, &mut [f32], usize, usize),
        ),
    ) {
        let head = ((NR - c % NR) % NR).min(len);
        let whole = (len - head) / NR;
        self.pieces(c, head, |d, done| gather(&src[done * stride..], stride, d));
        if whole > 0 {
            let at = (c + head) / NR * self.panel + self.pl * NR;
            let out = &mut self.out[at..at + (whole - 1) * self.panel + NR];
            run(&src[head * stride..], stride, out, self.panel, whole);
        }
        let done = head + whole * NR;
        self.pieces(c + done, len - done, |d, more| {
            gather(&src[(done + more) * stride..], stride, d)
        });
    }
}

/// `count` whole panel rows through the piece gather `gather`: piece `i` from
/// `src[i * NR * stride..]` into `out[i * panel..][..NR]` (the `run` argument of
/// [`im2col_panels`] for tables without a faster one).
#[inline(always)]
pub fn runs<const NR: usize>(
    gather: impl Fn(&[f32], usize, &mut [f32]),
) -> impl Fn(&[f32], usize, &mut [f32], usize, usize) {
    move |src, stride, out, panel, count| {
        for i in 0..count {
            gather(&src[i * NR * stride..], stride, &mut out[i * panel..][..NR]);
        }
    }
}

/// `dst[i] = src[i * stride]`, the portable gather.
#[inline(always)]
pub fn gather_scalar(src: &[f32], stride: usize, dst: &mut [f32]) {
    if stride == 1 {
        dst.copy_from_slice(&src[..dst.len()]);
    } else {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = src[i * stride];
        }
    }
}

//! Pooling geometry and the max-pool plane body every kernel table builds.

/// Geometry of a 2-D pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolShape {
    /// Number of planes (`N * C`).
    pub planes: usize,
    /// Input height, width.
    pub h: usize,
    pub w: usize,
    /// Output height, width.
    pub oh: usize,
    pub ow: usize,
    /// Kernel.
    pub kh: usize,
    pub kw: usize,
    /// Strides.
    pub sh: usize,
    pub sw: usize,
    /// Dilations.
    pub dh: usize,
    pub dw: usize,
    /// Pads: top, left, bottom, right.
    pub pads: [usize; 4],
}

/// Output positions `[lo, hi)` whose input index `o*stride + off - pad` lies in `[0, len)`.
pub fn valid_range(
    out_len: usize,
    stride: usize,
    pad: usize,
    off: usize,
    len: usize,
) -> (usize, usize) {
    // o*stride + off >= pad  <=>  o >= ceil((pad - off) / stride)
    let lo = if off >= pad {
        0
    } else {
        (pad - off).div_ceil(stride)
    };
    // o*stride + off - pad <= len - 1  <=>  o <= (len - 1 + pad - off) / stride
    let hi = if len + pad > off {
        ((len - 1 + pad - off) / stride + 1).min(out_len)
    } else {
        0
    };
    (lo.min(out_len), hi.max(lo.min(out_len)))
}

/// Input columns up to which a stride-2 row is split into its even and odd columns on
/// the stack (each half holds `HALF_ROW` floats); wider rows take the strided loop.
const HALF_ROW: usize = 1024;

/// Runs `op(acc, x)` for every valid kernel tap of every output of one plane, taps in
/// row-major kernel order (`ky` outer, `kx` inner), after filling the output with
/// `init`. Each tap is one pass over the contiguous valid output range of a row: with
/// stride 1 it reads a contiguous input segment, with stride 2 a contiguous segment of
/// the row's even or odd columns (split once per input row), so the pass vectorises.
#[inline(always)]
fn pool_taps<const IDEMPOTENT: bool>(
    s: &PoolShape,
    xp: &[f32],
    yp: &mut [f32],
    init: f32,
    op: impl Fn(f32, f32) -> f32,
) {
    let split = s.sw == 2 && s.w <= 2 * HALF_ROW;
    let mut even = [0.0f32; HALF_ROW];
    let mut odd = [0.0f32; HALF_ROW];
    // A max written back over its own input (`acc = v > acc ? v : acc`) compiles to a
    // masked store, whose result the next tap's loads cannot forward (a stall per
    // vector): max taps therefore alternate between two stack rows instead.
    let ping = IDEMPOTENT && s.ow <= HALF_ROW && (s.sw == 1 || split);
    let mut bufs = [[0.0f32; HALF_ROW]; 2];
    // The valid output range of each kernel column, computed once (two integer
    // divisions each, which per row and tap would cost more than the taps).
    let mut ranges = [(0usize, 0usize); 16];
    for (kx, r) in ranges.iter_mut().enumerate().take(s.kw) {
        *r = valid_range(s.ow, s.sw, s.pads[1], kx * s.dw, s.w);
    }
    // Separable max: the window's rows are reduced first (one pass over `kh` input
    // rows per output row), then the `kw` taps run over that one reduced row, instead
    // of `kh * kw` taps. Max is exact in any order, so the result is the same.
    let sep = IDEMPOTENT && s.kh > 1 && s.kh <= SEP_MAX_KH && s.w <= SEP_ROW;
    let mut vrow = [0.0f32; SEP_ROW];
    for oy in 0..s.oh {
        let row = &mut yp[oy * s.ow..(oy + 1) * s.ow];
        row.fill(init);
        let mut cur = 0;
        if ping {
            bufs[0][..s.ow].fill(init);
        }
        if sep {
            let mut srcs: [&[f32]; SEP_MAX_KH] = [&[]; SEP_MAX_KH];
            let mut n = 0;
            for ky in 0..s.kh {
                let iy = (oy * s.sh + ky * s.dh) as isize - s.pads[0] as isize;
                if iy >= 0 && iy < s.h as isize {
                    srcs[n] = &xp[iy as usize * s.w..(iy as usize + 1) * s.w];
                    n += 1;
                }
            }
            reduce_rows(&mut vrow[..s.w], &srcs[..n], init, &op);
        }
        for ky in 0..if sep { 1 } else { s.kh } {
            let src = if sep {
                &vrow[..s.w]
            } else {
                let iy = (oy * s.sh + ky * s.dh) as isize - s.pads[0] as isize;
                if iy < 0 || iy >= s.h as isize {
                    continue;
                }
                &xp[iy as usize * s.w..(iy as usize + 1) * s.w]
            };
            if split {
                let half = s.w / 2;
                let (e8, o8) = (
                    even[..half].chunks_exact_mut(8),
                    odd[..half].chunks_exact_mut(8),
                );
                for ((e, o), pairs) in e8.zip(o8).zip(src.chunks_exact(16)) {
                    for i in 0..8 {
                        e[i] = pairs[2 * i];
                        o[i] = pairs[2 * i + 1];
                    }
                }
                for i in half / 8 * 8..half {
                    even[i] = src[2 * i];
                    odd[i] = src[2 * i + 1];
                }
                if s.w % 2 == 1 {
                    even[half] = src[s.w - 1];
                }
            }
            for kx in 0..s.kw {
                let (lo, hi) = match ranges.get(kx) {
                    Some(&r) => r,
                    None => valid_range(s.ow, s.sw, s.pads[1], kx * s.dw, s.w),
                };
                if lo >= hi {
                    continue;
                }
                let ix0 = lo * s.sw + kx * s.dw - s.pads[1];
                let dst = &mut row[lo..hi];
                let taps: &[f32] = if s.sw == 1 {
                    &src[ix0..ix0 + dst.len()]
                } else if split && ix0.is_multiple_of(2) {
                    &even[ix0 / 2..ix0 / 2 + dst.len()]
                } else if split {
                    &odd[ix0 / 2..ix0 / 2 + dst.len()]
                } else {
                    for (d, v) in dst.iter_mut().zip(src[ix0..].iter().step_by(s.sw)) {
                        *d = op(*d, *v);
                    }
                    continue;
                };
                if ping {
                    let [a, b] = &mut bufs;
                    let (from, to) = if cur == 0 { (&*a, b) } else { (&*b, a) };
                    to[..lo].copy_from_slice(&from[..lo]);
                    to[hi..s.ow].copy_from_slice(&from[hi..s.ow]);
                    combine_into(&mut to[lo..hi], &from[lo..hi], taps, &op);
                    cur ^= 1;
                } else {
                    combine::<IDEMPOTENT>(dst, taps, &op);
                }
            }
        }
        if ping {
            row.copy_from_slice(&bufs[cur][..s.ow]);
        }
    }
}

/// Input columns up to which a max pool reduces its window rows first (the reduced row
/// lives on the stack).
const SEP_ROW: usize = 1024;
/// Kernel heights up to which a max pool reduces its window rows first.
const SEP_MAX_KH: usize = 32;

/// `dst[i] = op(...op(op(init, rows[0][i]), rows[1][i])..., rows[n-1][i])`, 16 columns
/// at a time kept in registers across the rows (one store per column).
#[inline(always)]
fn reduce_rows(dst: &mut [f32], rows: &[&[f32]], init: f32, op: &impl Fn(f32, f32) -> f32) {
    let w = dst.len();
    let full = w / 16 * 16;
    for (j, d) in dst[..full].chunks_exact_mut(16).enumerate() {
        let mut acc = [init; 16];
        for r in rows {
            let v = &r[j * 16..j * 16 + 16];
            for i in 0..16 {
                acc[i] = op(acc[i], v[i]);
            }
        }
        d.copy_from_slice(&acc);
    }
    for (i, d) in dst.iter_mut().enumerate().skip(full) {
        let mut a = init;
        for r in rows {
            a = op(a, r[i]);
        }
        *d = a;
    }
}

/// `dst[i] = op(acc[i], src[i])`: whole vectors of 8 lanes, then one whole vector
/// overlapping the last (recomputing lanes is harmless: `dst` is not an input).
#[inline(always)]
fn combine_into(dst: &mut [f32], acc: &[f32], src: &[f32], op: &impl Fn(f32, f32) -> f32) {
    let n = dst.len();
    let (acc, src) = (&acc[..n], &src[..n]);
    for ((d, a), v) in dst
        .chunks_exact_mut(8)
        .zip(acc.chunks_exact(8))
        .zip(src.chunks_exact(8))
    {
        for i in 0..8 {
            d[i] = op(a[i], v[i]);
        }
    }
    if !n.is_multiple_of(8) && n >= 8 {
        let o = n - 8;
        let (d, a, v) = (&mut dst[o..], &acc[o..], &src[o..]);
        for i in 0..8 {
            d[i] = op(a[i], v[i]);
        }
    } else {
        for i in n / 8 * 8..n {
            dst[i] = op(acc[i], src[i]);
        }
    }
}

/// `dst[i] = op(dst[i], src[i])`: whole vectors of 8 lanes, then the tail. When `op`
/// is idempotent (`op(op(d, v), v) == op(d, v)`, max) the tail is one more whole vector
/// overlapping the last one: a short tail loop is otherwise vectorised with masked
/// stores, which the next tap's loads cannot forward from (several times slower).
#[inline(always)]
fn combine<const IDEMPOTENT: bool>(dst: &mut [f32], src: &[f32], op: &impl Fn(f32, f32) -> f32) {
    let n = dst.len().min(src.len());
    if IDEMPOTENT && n >= 8 && !n.is_multiple_of(8) {
        let (d, v) = (&mut dst[n - 8..n], &src[n - 8..n]);
        let mut last = [0.0f32; 8];
        for i in 0..8 {
            last[i] = op(d[i], v[i]);
        }
        combine::<false>(&mut dst[..n / 8 * 8], &src[..n / 8 * 8], op);
        dst[n - 8..n].copy_from_slice(&last);
        return;
    }
    let mut dc = dst.chunks_exact_mut(8);
    let mut sc = src.chunks_exact(8);
    for (d, v) in (&mut dc).zip(&mut sc) {
        for i in 0..8 {
            d[i] = op(d[i], v[i]);
        }
    }
    for (d, v) in dc.into_remainder().iter_mut().zip(sc.remainder()) {
        *d = op(*d, *v);
    }
}

/// Max pool of one plane, shared body of the AVX2 and portable builds: the running
/// maximum (`x > acc ? x : acc`, so NaN inputs are skipped) over the valid taps; a
/// window wholly in padding gives `-inf`.
#[inline(always)]
pub fn max_pool_plane(s: &PoolShape, xp: &[f32], yp: &mut [f32]) {
    pool_taps::<true>(
        s,
        xp,
        yp,
        f32::NEG_INFINITY,
        |d, v| if v > d { v } else { d },
    );
}

/// Average pool of one plane (no dilation), shared body of the AVX2 and portable
/// builds: each output sums its valid taps in row-major kernel order from 0, then
/// divides by the tap count (with `count_include_pad`, the window clipped to the
/// declared pads only); a window with no cell gives 0.
#[inline(always)]
pub fn avg_pool_plane(s: &PoolShape, count_include_pad: bool, xp: &[f32], yp: &mut [f32]) {
    pool_taps::<false>(s, xp, yp, 0.0, |d, v| d + v);
    let (h, w) = (s.h as isize, s.w as isize);
    for oy in 0..s.oh {
        let y0 = (oy * s.sh) as isize - s.pads[0] as isize;
        let y1 = (y0 + s.kh as isize).min(h + s.pads[2] as isize);
        let ny = if count_include_pad {
            y1 - y0
        } else {
            (y1.min(h) - y0.max(0)).max(0)
        };
        for (ox, v) in yp[oy * s.ow..(oy + 1) * s.ow].iter_mut().enumerate() {
            let x0 = (ox * s.sw) as isize - s.pads[1] as isize;
            let x1 = (x0 + s.kw as isize).min(w + s.pads[3] as isize);
            let nx = if count_include_pad {
                x1 - x0
            } else {
                (x1.min(w) - x0.max(0)).max(0)
            };
            let n = ny * nx;
            *v = if n > 0 { *v / n as f32 } else { 0.0 };
        }
    }
}

/// Max pool over channels-last images (the tables' `max_pool_nhwc` body), output rows `r0..r1` of `N * OH` (`s.planes` =
/// N) into `y` (those rows, `[rows][OW][c]`): each output's window cells in row-major
/// order, `max` as the planar body takes it (`v > d`), a window with no cell -inf. The
/// channels are the vector lanes (contiguous in both tensors).
#[inline(always)]
pub fn max_pool_nhwc(s: &PoolShape, c: usize, x: &[f32], y: &mut [f32], (r0, r1): (usize, usize)) {
    let row = s.ow * c;
    assert!(
        r0 <= r1 && r1 <= s.planes * s.oh && y.len() >= (r1 - r0) * row,
        "max_pool_nhwc: rows past the output"
    );
    assert!(
        x.len() >= s.planes * s.h * s.w * c,
        "max_pool_nhwc: short input"
    );
    // The window's taps along one axis whose input index `o * st + t * d - p` lies in
    // `0..n`: `t_lo..t_hi` (a window with none gives an empty range).
    let taps = |o: usize, st: usize, d: usize, p: usize, k: usize, n: usize| {
        let t_lo = p.saturating_sub(o * st).div_ceil(d).min(k);
        let t_hi = if n + p > o * st {
            ((n + p - o * st - 1) / d + 1).min(k)
        } else {
            0
        };
        (t_lo, t_hi.max(t_lo))
    };
    for r in r0..r1 {
        let (img, oy) = (r / s.oh, r % s.oh);
        let xi = &x[img * s.h * s.w * c..][..s.h * s.w * c];
        let (ky_lo, ky_hi) = taps(oy, s.sh, s.dh, s.pads[0], s.kh, s.h);
        let yr = &mut y[(r - r0) * row..][..row];
        yr.fill(f32::NEG_INFINITY);
        for ky in ky_lo..ky_hi {
            let iy = oy * s.sh + ky * s.dh - s.pads[0];
            let line = &xi[iy * s.w * c..][..s.w * c];
            for (ox, out) in yr.chunks_exact_mut(c).enumerate() {
                let (kx_lo, kx_hi) = taps(ox, s.sw, s.dw, s.pads[1], s.kw, s.w);
                for kx in kx_lo..kx_hi {
                    let ix = ox * s.sw + kx * s.dw - s.pads[1];
                    let cell = &line[ix * c..][..c];
                    for (d, &v) in out.iter_mut().zip(cell) {
                        *d = if v > *d { v } else { *d };
                    }
                }
            }
        }
    }
}

//! Resize bodies: the integer-factor bilinear upsample (2x along the width) that the
//! tables compile per instruction set.

/// Interpolation taps of one output coordinate: `(i0, i1, w1)` with
/// `v = x[i0] + (x[i1] - x[i0]) * w1`.
pub type LinearTap = (usize, usize, f32);

/// True when `tx` (taps of `tx.len() / 2` inputs) is the 2x half-pixel pattern inside the
/// edges: output `2i + 1` is `(i, i + 1, 0.25)` and output `2i + 2` is `(i, i + 1, 0.75)`
/// for every `i + 1 < w`; what [`bilinear_up2x`] computes without reading the taps.
pub fn is_up2x(tx: &[LinearTap]) -> bool {
    let w = tx.len() / 2;
    tx.len() == 2 * w
        && w > 0
        && (0..w - 1)
            .all(|i| tx[2 * i + 1] == (i, i + 1, 0.25) && tx[2 * i + 2] == (i, i + 1, 0.75))
}

/// One input row `r` (`w` floats) interpolated along the width into `o` (`2w` floats),
/// with the edge taps `t0`, `t1` of outputs `0` and `2w - 1`; the same arithmetic as the
/// general path on the pattern of [`is_up2x`], so the same bits.
fn up2x_row(r: &[f32], (t0, t1): (LinearTap, LinearTap), o: &mut [f32]) {
    let w = r.len();
    let lerp = |(i0, i1, wx): LinearTap| r[i0] + (r[i1] - r[i0]) * wx;
    o[0] = lerp(t0);
    o[2 * w - 1] = lerp(t1);
    for (oc, (a, b)) in o[1..2 * w - 1]
        .chunks_exact_mut(2)
        .zip(r.iter().zip(&r[1..]))
    {
        let d = *b - *a;
        oc[0] = *a + d * 0.25;
        oc[1] = *a + d * 0.75;
    }
}

/// Bilinear resize of planes `[lo, hi)` of `h x w` to `ty.len() x 2w`, when `tx` (`2w`
/// taps) passes [`is_up2x`]: each input row a plane's output rows read is interpolated
/// along the width once (into one of two `2w`-float rows of `scratch`), then every
/// output row blends two of them with its tap `ty`. Bit-identical to
/// `kernels::resize::bilinear` with the same taps.
#[allow(clippy::too_many_arguments)]
pub fn bilinear_up2x(
    ty: &[LinearTap],
    tx: &[LinearTap],
    h: usize,
    w: usize,
    x: &[f32],
    y: &mut [f32],
    (lo, hi): (usize, usize),
    scratch: &mut [f32],
) {
    let (oh, ow) = (ty.len(), 2 * w);
    assert!(
        tx.len() == ow && scratch.len() >= 2 * ow,
        "bilinear_up2x: taps, scratch"
    );
    let edges = (tx[0], tx[ow - 1]);
    let (s0, rest) = scratch.split_at_mut(ow);
    let s1 = &mut rest[..ow];
    for p in lo..hi {
        let xp = &x[p * h * w..(p + 1) * h * w];
        let yp = &mut y[p * oh * ow..(p + 1) * oh * ow];
        // Input row held by each scratch row.
        let mut held = [usize::MAX; 2];
        for (yrow, &(y0, y1, wy)) in yp.chunks_exact_mut(ow).zip(ty) {
            for (need, keep) in [(y0, y1), (y1, y0)] {
                if !held.contains(&need) {
                    let slot = usize::from(held[0] == keep);
                    let dst = if slot == 0 { &mut *s0 } else { &mut *s1 };
                    up2x_row(&xp[need * w..(need + 1) * w], edges, dst);
                    held[slot] = need;
                }
            }
            let row = |i: usize| if held[0] == i { &*s0 } else { &*s1 };
            let (top, bot) = (row(y0), row(y1));
            for (o, (t, b)) in yrow.iter_mut().zip(top.iter().zip(bot)) {
                *o = *t + (*b - *t) * wy;
            }
        }
    }
}

//! Short copies inline: runs of tens of floats (a row of a conv chunk, a run of live
//! keys in sparse attention) copied where a `memcpy` call per run costs more than the
//! copy itself.

/// `dst` from the start of `src`, inline in 16-float blocks and a tail of 8, 4, 2 and 1
/// (an element loop there would become a `memcpy` call again).
#[inline(always)]
pub fn copy_run(dst: &mut [f32], src: &[f32]) {
    let src = &src[..dst.len()];
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (d, s) in (&mut d).zip(&mut s) {
        copy_fixed::<16>(d, s);
    }
    let (mut d, mut s) = (d.into_remainder(), s.remainder());
    for k in [8, 4, 2, 1] {
        if d.len() >= k {
            let (dh, dt) = d.split_at_mut(k);
            let (sh, st) = s.split_at(k);
            match k {
                8 => copy_fixed::<8>(dh, sh),
                4 => copy_fixed::<4>(dh, sh),
                2 => copy_fixed::<2>(dh, sh),
                _ => dh[0] = sh[0],
            }
            (d, s) = (dt, st);
        }
    }
}

/// `d = s`, both `N` floats, as one fixed-size move.
#[inline(always)]
fn copy_fixed<const N: usize>(d: &mut [f32], s: &[f32]) {
    let s: &[f32; N] = s.try_into().expect("N floats");
    let d: &mut [f32; N] = d.try_into().expect("N floats");
    *d = *s;
}

#[cfg(test)]
mod tests {
    use super::copy_run;

    /// Every length from 0 to 40 (whole blocks and every tail) copies exactly the
    /// first `len` floats and leaves the rest of `dst` alone.
    #[test]
    fn copies_every_length() {
        let src: Vec<f32> = (0..48).map(|i| i as f32 + 0.5).collect();
        for len in 0..=40 {
            let mut dst = [-1.0f32; 44];
            copy_run(&mut dst[..len], &src[3..]);
            assert_eq!(&dst[..len], &src[3..3 + len], "len {len}");
            assert!(dst[len..].iter().all(|&v| v == -1.0), "len {len}");
        }
    }
}

//! Copy bodies of the layout ops every kernel table builds (the portable table's entries,
//! and the edges of the SIMD ones): the 2-D transpose of 32-bit elements through a small
//! square stack block (each source row read as a contiguous run, each destination row
//! written as one), and the strided gather.

/// Side of the stack block.
const BLOCK: usize = 16;

/// Panics unless a transpose of `rows` x `cols` fits its operands: `src` holds rows of
/// stride `ss` (`cols` read from each), `dst` rows of stride `ds` (`rows` written to
/// each of `cols`). Rows may overlap (strides below the row length): reads then repeat
/// elements, and writes land in the order of this body (later blocks win).
pub fn check(src: &[u32], ss: usize, dst: &[u32], ds: usize, rows: usize, cols: usize) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(
        src.len() >= (rows - 1) * ss + cols,
        "transpose: short source"
    );
    assert!(
        dst.len() >= (cols - 1) * ds + rows,
        "transpose: short destination"
    );
}

/// `dst[c * ds + r] = src[r * ss + c]` for `r < rows`, `c < cols`.
#[inline(always)]
pub fn transpose32(src: &[u32], ss: usize, dst: &mut [u32], ds: usize, rows: usize, cols: usize) {
    check(src, ss, dst, ds, rows, cols);
    match rows {
        1 => return few_rows::<1>(src, ss, dst, ds, cols),
        2 => return few_rows::<2>(src, ss, dst, ds, cols),
        3 => return few_rows::<3>(src, ss, dst, ds, cols),
        4 => return few_rows::<4>(src, ss, dst, ds, cols),
        _ => {}
    }
    let mut t = [[0u32; BLOCK]; BLOCK];
    for c0 in (0..cols).step_by(BLOCK) {
        let bc = BLOCK.min(cols - c0);
        for r0 in (0..rows).step_by(BLOCK) {
            let br = BLOCK.min(rows - r0);
            for r in 0..br {
                let run = &src[(r0 + r) * ss + c0..][..bc];
                for (row, &v) in t.iter_mut().zip(run) {
                    row[r] = v;
                }
            }
            for (c, row) in t.iter().enumerate().take(bc) {
                dst[(c0 + c) * ds + r0..][..br].copy_from_slice(&row[..br]);
            }
        }
    }
}

/// [`transpose32`] of `R` rows (an image's channels into channels-last pixels): each
/// destination row is `R` elements, too short for a block copy, so written element by
/// element, `R` a constant so that the row's writes unroll. Same write order as the
/// block path (columns in order, each column's rows in order).
#[inline(always)]
fn few_rows<const R: usize>(src: &[u32], ss: usize, dst: &mut [u32], ds: usize, cols: usize) {
    if cols == 0 {
        return;
    }
    let rows: [&[u32]; R] = std::array::from_fn(|r| &src[r * ss..r * ss + cols]);
    for c in 0..cols {
        let d = &mut dst[c * ds..c * ds + R];
        for r in 0..R {
            d[r] = rows[r][c];
        }
    }
}

/// `dst[i] = src[i * stride]` for every `i < dst.len()`.
#[inline(always)]
pub fn gather_words(src: &[u32], stride: usize, dst: &mut [u32]) {
    if let Some(last) = dst.len().checked_sub(1) {
        let src = &src[..last * stride + 1];
        for (i, d) in dst.iter_mut().enumerate() {
            *d = src[i * stride];
        }
    }
}

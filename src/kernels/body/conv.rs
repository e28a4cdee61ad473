//! Convolution geometry shared by the conv kernels (the depthwise bodies live in
//! `body::depthwise`).

/// Geometry of a 2-D convolution (1-D uses `h = kh = oh = 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvShape {
    /// Batch.
    pub n: usize,
    /// Input channels (all groups).
    pub c_in: usize,
    /// Input height and width.
    pub h: usize,
    pub w: usize,
    /// Output channels (all groups).
    pub c_out: usize,
    /// Output height and width.
    pub oh: usize,
    pub ow: usize,
    /// Kernel height and width.
    pub kh: usize,
    pub kw: usize,
    /// Strides (h, w).
    pub sh: usize,
    pub sw: usize,
    /// Dilations (h, w).
    pub dh: usize,
    pub dw: usize,
    /// Leading pads (top, left).
    pub ph: usize,
    pub pw: usize,
    /// Groups.
    pub group: usize,
}

/// `dst[i] = src[i * stride]` for as many elements as both allow (stride 2 has a
/// fixed-size fast path the compiler vectorises).
#[inline(always)]
pub(crate) fn strided_copy(src: &[f32], stride: usize, dst: &mut [f32]) {
    if stride == 2 {
        for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = pair[0];
        }
        // An odd-length source leaves one last element outside the exact chunks.
        let done = src.len() / 2;
        if done < dst.len() && src.len() % 2 == 1 {
            dst[done] = src[src.len() - 1];
        }
    } else {
        for (d, c) in dst.iter_mut().zip(src.chunks(stride)) {
            *d = c[0];
        }
    }
}

/// `o[2i] += a[i]` and `o[2i + 1] += b[i]` for `i < a.len()` (`b` and `o` at least as
/// long): the col2im add of two stride-2 taps that land on adjacent output columns.
pub fn add_pairs(o: &mut [f32], a: &[f32], b: &[f32]) {
    assert!(
        b.len() >= a.len() && o.len() >= 2 * a.len(),
        "add_pairs: lengths"
    );
    for (oc, (x, y)) in o.chunks_exact_mut(2).zip(a.iter().zip(b)) {
        oc[0] += *x;
        oc[1] += *y;
    }
}

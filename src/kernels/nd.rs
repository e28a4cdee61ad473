//! N-dimensional iteration and data movement over raw element bytes.
//!
//! Layout ops (Transpose, Slice, Expand, Tile, Concat, Split, DepthToSpace, Reshape
//! copies) are all one [`StridedCopy`]: a box of `dims` read with signed source strides
//! and written with destination strides. Pad (every mode) and nearest Resize are an
//! [`IndexMapCopy`]: the output box is contiguous and each output coordinate maps to a
//! source offset per dimension (or to "fill").
//!
//! Invariants: dims are coalesced at plan time to at most [`MAX_RANK`] and at least two
//! dimensions; tiles split the outermost dimension.

/// Largest rank the iterators handle after coalescing.
pub const MAX_RANK: usize = 8;

/// Merges adjacent dimensions that are contiguous for every operand, drops unit
/// dimensions, and left-pads to rank 2. `strides[o][d]` is operand `o`'s stride of dim `d`.
pub fn coalesce(dims: &[usize], strides: &[Vec<isize>]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        if let Some(&last) = d.last() {
            let mergeable = strides
                .iter()
                .zip(&s)
                .all(|(st, cur)| cur[cur.len() - 1] == st[i] * dims[i] as isize);
            if mergeable {
                let n = d.len();
                d[n - 1] = last * dims[i];
                for (cur, st) in s.iter_mut().zip(strides) {
                    let m = cur.len();
                    cur[m - 1] = st[i];
                }
                continue;
            }
        }
        d.push(dims[i]);
        for (cur, st) in s.iter_mut().zip(strides) {
            cur.push(st[i]);
        }
    }
    while d.len() < 2 {
        d.insert(0, 1);
        for cur in s.iter_mut() {
            cur.insert(0, 0);
        }
    }
    (d, s)
}

/// Row-major contiguous strides of `dims`.
pub fn contiguous_strides(dims: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; dims.len()];
    let mut acc = 1isize;
    for i in (0..dims.len()).rev() {
        s[i] = acc;
        acc *= dims[i] as isize;
    }
    s
}

/// Calls `f(offsets, len)` for every row (all dims but the last) of the box `dims`
/// whose outermost coordinate lies in `[lo, hi)`; `offsets[o]` is operand `o`'s element
/// offset of the row start (from `base[o]`), `len` the length of the last dim.
pub fn for_rows<const N: usize>(
    dims: &[usize],
    strides: [&[isize]; N],
    base: [isize; N],
    lo: usize,
    hi: usize,
    mut f: impl FnMut([isize; N], usize),
) {
    let r = dims.len();
    debug_assert!((2..=MAX_RANK).contains(&r));
    let inner = dims[r - 1];
    let mut idx = [0usize; MAX_RANK];
    for i0 in lo..hi {
        let mut off = base;
        for o in 0..N {
            off[o] += i0 as isize * strides[o][0];
        }
        idx[1..r - 1].fill(0);
        'rows: loop {
            f(off, inner);
            // Advance the odometer over dims 1..r-1.
            let mut d = r - 2;
            loop {
                if d == 0 {
                    break 'rows;
                }
                idx[d] += 1;
                for o in 0..N {
                    off[o] += strides[o][d];
                }
                if idx[d] < dims[d] {
                    break;
                }
                for o in 0..N {
                    off[o] -= strides[o][d] * dims[d] as isize;
                }
                idx[d] = 0;
                d -= 1;
            }
        }
    }
}

/// A strided box copy between two byte buffers of elements of `elem` bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct StridedCopy {
    /// Element size in bytes.
    pub elem: usize,
    /// Coalesced box dims (rank ≥ 2).
    pub dims: Vec<usize>,
    /// Source strides in elements (may be 0 or negative).
    pub src_strides: Vec<isize>,
    /// Source offset of the box origin, in elements.
    pub src_off: isize,
    /// Destination strides in elements.
    pub dst_strides: Vec<isize>,
    /// Destination offset of the box origin, in elements.
    pub dst_off: isize,
}

impl StridedCopy {
    /// A copy of the box `dims` with the given (uncoalesced) strides.
    pub fn new(
        elem: usize,
        dims: &[usize],
        src_strides: &[isize],
        src_off: isize,
        dst_strides: &[isize],
        dst_off: isize,
    ) -> StridedCopy {
        let (dims, s) = coalesce(dims, &[src_strides.to_vec(), dst_strides.to_vec()]);
        StridedCopy {
            elem,
            dims,
            src_strides: s[0].clone(),
            src_off,
            dst_strides: s[1].clone(),
            dst_off,
        }
    }

    /// Length of the outermost (tileable) dimension.
    pub fn outer(&self) -> usize {
        self.dims[0]
    }

    /// True when every coalesced dimension fits the iterators.
    pub fn rank_ok(&self) -> bool {
        self.dims.len() <= MAX_RANK
    }

    /// Copies the part of the box whose outermost coordinate is in `[lo, hi)`.
    pub fn run(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        if self.is_inner_transpose() {
            if let (Ok(s), Ok(d)) = (
                bytemuck::try_cast_slice::<u8, u32>(src),
                bytemuck::try_cast_slice_mut::<u8, u32>(dst),
            ) {
                return self.run_inner_transpose(s, d, lo, hi);
            }
        }
        if self.elem == 4 {
            if let (Ok(s), Ok(d)) = (
                bytemuck::try_cast_slice::<u8, u32>(src),
                bytemuck::try_cast_slice_mut::<u8, u32>(dst),
            ) {
                return self.run_words(s, d, lo, hi);
            }
        }
        let e = self.elem;
        let (ss, ds) = self.inner_strides();
        self.rows(lo, hi, |[so, dof], len| {
            let (so, dof) = (so as usize * e, dof as usize * e);
            if ss == 1 && ds == 1 {
                dst[dof..dof + len * e].copy_from_slice(&src[so..so + len * e]);
                return;
            }
            let (ss, ds) = (ss * e as isize, ds * e as isize);
            for i in 0..len as isize {
                let s = (so as isize + i * ss) as usize;
                let d = (dof as isize + i * ds) as usize;
                copy_elem(e, &src[s..s + e], &mut dst[d..d + e]);
            }
        });
    }
}

impl StridedCopy {
    /// Source and destination strides of the last dim.
    fn inner_strides(&self) -> (isize, isize) {
        let r = self.dims.len();
        (self.src_strides[r - 1], self.dst_strides[r - 1])
    }

    /// The box's rows whose outermost coordinate is in `[lo, hi)`: `f([src, dst], len)`
    /// with the rows' first element offsets ([`for_rows`]).
    fn rows(&self, lo: usize, hi: usize, f: impl FnMut([isize; 2], usize)) {
        let strides = [&self.src_strides[..], &self.dst_strides[..]];
        for_rows(&self.dims, strides, [self.src_off, self.dst_off], lo, hi, f);
    }

    /// [`StridedCopy::run`] for 4-byte elements as words: contiguous rows copied whole,
    /// rows read at a constant positive source stride into a contiguous destination (a
    /// Slice with steps, YOLOX's space-to-depth) as one indexed loop, other rows element
    /// by element (was: a byte-slice copy per element, ~4 cycles each).
    fn run_words(&self, src: &[u32], dst: &mut [u32], lo: usize, hi: usize) {
        let (ss, ds) = self.inner_strides();
        self.rows(lo, hi, |[so, dof], len| {
            if len == 0 {
                return;
            }
            let (so, dof) = (so as usize, dof as usize);
            let d = &mut dst[dof..];
            if ss == 1 && ds == 1 {
                d[..len].copy_from_slice(&src[so..so + len]);
            } else if ds == 1 && ss > 0 {
                let step = ss as usize;
                let s = &src[so..so + (len - 1) * step + 1];
                (crate::kernels::table().gather_words)(s, step, &mut d[..len]);
            } else {
                for i in 0..len as isize {
                    dst[(dof as isize + i * ds) as usize] = src[(so as isize + i * ss) as usize];
                }
            }
        });
    }
}

impl StridedCopy {
    /// True for a transposition of the two innermost dims of 4-byte elements: the
    /// destination contiguous along the last dim, the source along the one before (a
    /// `[.., A, B] -> [.., B, A]` Transpose). Row by row, each element would read its
    /// own source cache line.
    fn is_inner_transpose(&self) -> bool {
        let r = self.dims.len();
        self.elem == 4
            && r >= 2
            && self.dst_strides[r - 1] == 1
            && self.src_strides[r - 2] == 1
            && self.src_strides[r - 1] > 1
            && self.dst_strides[r - 2] > 1
    }

    /// [`StridedCopy::run`] for [`StridedCopy::is_inner_transpose`] copies: the two
    /// inner dims through the kernel table's 2-D transpose (`transpose32`).
    fn run_inner_transpose(&self, src: &[u32], dst: &mut [u32], lo: usize, hi: usize) {
        let r = self.dims.len();
        let (n1, n0) = (self.dims[r - 2], self.dims[r - 1]);
        let (s0, d1) = (self.src_strides[r - 1], self.dst_strides[r - 2]);
        // Rows q_lo..q_hi of dim r-2 of the slab whose origin is at (so, dof): a 2-D
        // transpose of n0 source runs into q_hi - q_lo destination runs.
        let transpose = crate::kernels::table().transpose32;
        let (ss, ds) = (s0 as usize, d1 as usize);
        let mut slab = |so: isize, dof: isize, q_lo: usize, q_hi: usize| {
            if q_lo < q_hi {
                let (so, dof) = (so as usize + q_lo, dof as usize + q_lo * ds);
                transpose(&src[so..], ss, &mut dst[dof..], ds, n0, q_hi - q_lo);
            }
        };
        if r == 2 {
            // The tiled outer dim is dim r-2 itself.
            return slab(self.src_off, self.dst_off, lo, hi);
        }
        // Every other dim through the row iterator, dim r-2 dropped (one call a slab).
        let keep = |v: &[isize]| -> [isize; MAX_RANK] {
            let mut o = [0; MAX_RANK];
            o[..r - 2].copy_from_slice(&v[..r - 2]);
            o[r - 2] = v[r - 1];
            o
        };
        let mut dims = [0usize; MAX_RANK];
        dims[..r - 2].copy_from_slice(&self.dims[..r - 2]);
        dims[r - 2] = n0;
        let (ss, ds) = (keep(&self.src_strides), keep(&self.dst_strides));
        for_rows(
            &dims[..r - 1],
            [&ss[..r - 1], &ds[..r - 1]],
            [self.src_off, self.dst_off],
            lo,
            hi,
            |[so, dof], _| slab(so, dof, 0, n1),
        );
    }
}

#[inline(always)]
fn copy_elem(e: usize, s: &[u8], d: &mut [u8]) {
    match e {
        4 => d[..4].copy_from_slice(&s[..4]),
        8 => d[..8].copy_from_slice(&s[..8]),
        1 => d[0] = s[0],
        _ => d.copy_from_slice(s),
    }
}

/// Fill marker in an [`IndexMapCopy`] map.
pub const FILL: isize = isize::MIN;

/// Gather copy into a contiguous output: output element at coordinates `(i_0..i_r)`
/// reads source element `sum_d maps[d][i_d]`, or `fill` when any map entry is [`FILL`].
#[derive(Debug, Clone, PartialEq)]
pub struct IndexMapCopy {
    /// Element size in bytes.
    pub elem: usize,
    /// Output dims.
    pub dims: Vec<usize>,
    /// Per dim, per output coordinate: source element offset contribution, or FILL.
    pub maps: Vec<Vec<isize>>,
    /// Bytes of the fill element (`elem` long).
    pub fill: Vec<u8>,
}

impl IndexMapCopy {
    /// Copies output rows whose first coordinate lies in `[lo, hi)`.
    pub fn run(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        match self.elem {
            4 => self.run_typed::<u32>(src, dst, lo, hi),
            2 => self.run_typed::<u16>(src, dst, lo, hi),
            8 => self.run_typed::<u64>(src, dst, lo, hi),
            1 => self.run_typed::<u8>(src, dst, lo, hi),
            _ => self.run_bytes(src, dst, lo, hi),
        }
    }

    /// Source row offset of every output row in `[lo, hi)`, in order: `f(out_row,
    /// Some(base))` for a row gathered from `base + last[j]`, `None` for a fill row.
    fn for_each_row(&self, lo: usize, hi: usize, mut f: impl FnMut(usize, Option<isize>)) {
        let r = self.dims.len();
        let row_count: usize = self.dims[1..r - 1].iter().product();
        let mut idx = [0usize; MAX_RANK];
        for i0 in lo..hi {
            idx[..r].fill(0);
            idx[0] = i0;
            for row in 0..row_count {
                let mut base = 0isize;
                let mut fill_row = false;
                for (map, &i) in self.maps[..r - 1].iter().zip(&idx[..r - 1]) {
                    let m = map[i];
                    fill_row |= m == FILL;
                    base = base.wrapping_add(m);
                }
                f(i0 * row_count + row, (!fill_row).then_some(base));
                // Advance dims 1..r-1.
                let mut d = r - 2;
                while d >= 1 {
                    idx[d] += 1;
                    if idx[d] < self.dims[d] {
                        break;
                    }
                    idx[d] = 0;
                    d -= 1;
                }
            }
        }
    }

    /// The element-typed copy (`T` is `elem` bytes wide). A row that reads the same
    /// source row as the row just written (nearest upsampling) is copied from it; an
    /// integer-factor replication of the last dim is written without index lookups.
    fn run_typed<T: Pod>(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        let (Some(src), Some(dst)) = (T::cast(src), T::cast_mut(dst)) else {
            return self.run_bytes(src, dst, lo, hi);
        };
        let fill = T::from_bytes(&self.fill);
        let last = &self.maps[self.dims.len() - 1];
        let inner = last.len();
        let last_fill = last.contains(&FILL);
        let (m0, m1) = last
            .iter()
            .filter(|&&m| m != FILL)
            .fold((isize::MAX, isize::MIN), |(a, b), &m| (a.min(m), b.max(m)));
        let rep = if last_fill { None } else { replication(last) };
        let mut prev: Option<(usize, isize)> = None;
        self.for_each_row(lo, hi, |out_row, base| {
            let d0 = out_row * inner;
            let Some(base) = base else {
                dst[d0..d0 + inner].fill(fill);
                prev = None;
                return;
            };
            if let Some((p, pb)) = prev {
                if pb == base {
                    dst.copy_within(p * inner..(p + 1) * inner, d0);
                    prev = Some((out_row, base));
                    return;
                }
            }
            let out = &mut dst[d0..d0 + inner];
            if let Some((f, first)) = rep {
                let s0 = (base + first) as usize;
                let s = &src[s0..s0 + inner / f];
                replicate(s, f, out);
            } else if m0 <= m1 {
                let lo_ = (base + m0) as usize;
                let s = &src[lo_..=(base + m1) as usize];
                for (d, &m) in out.iter_mut().zip(last) {
                    *d = if m == FILL {
                        fill
                    } else {
                        s[(m - m0) as usize]
                    };
                }
            } else {
                out.fill(fill);
            }
            prev = Some((out_row, base));
        });
    }

    /// The byte-wise copy of any element size (also for misaligned buffers).
    fn run_bytes(&self, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
        let e = self.elem;
        let last = &self.maps[self.dims.len() - 1];
        let inner = last.len();
        self.for_each_row(lo, hi, |out_row, base| {
            for (j, &m) in last.iter().enumerate() {
                let d = (out_row * inner + j) * e;
                match base {
                    Some(b) if m != FILL => {
                        let s = (b + m) as usize * e;
                        copy_elem(e, &src[s..s + e], &mut dst[d..d + e]);
                    }
                    _ => dst[d..d + e].copy_from_slice(&self.fill),
                }
            }
        });
    }
}

/// `Some((f, first))` when `last[j] == first + j / f` for every `j` with an integer
/// factor `f >= 1` that divides the length (nearest upsampling by `f`).
fn replication(last: &[isize]) -> Option<(usize, isize)> {
    let first = *last.first()?;
    let f = last.iter().take_while(|&&m| m == first).count();
    (last.len().is_multiple_of(f)
        && last
            .iter()
            .enumerate()
            .all(|(j, &m)| m == first + (j / f) as isize))
    .then_some((f, first))
}

/// `out[j] = s[j / f]` (`out.len() == s.len() * f`).
#[inline]
fn replicate<T: Pod>(s: &[T], f: usize, out: &mut [T]) {
    match f {
        1 => out.copy_from_slice(s),
        2 => {
            for (d, &v) in out.chunks_exact_mut(2).zip(s) {
                d[0] = v;
                d[1] = v;
            }
        }
        4 => {
            for (d, &v) in out.chunks_exact_mut(4).zip(s) {
                d.fill(v);
            }
        }
        _ => {
            for (d, &v) in out.chunks_exact_mut(f).zip(s) {
                d.fill(v);
            }
        }
    }
}

/// Plain unsigned integers that byte buffers are reinterpreted as.
trait Pod: Copy + Default {
    /// `b` as a slice of `Self` when aligned and a whole number of elements.
    fn cast(b: &[u8]) -> Option<&[Self]>;
    /// Mutable [`Pod::cast`].
    fn cast_mut(b: &mut [u8]) -> Option<&mut [Self]>;
    /// The value held in the first `size_of::<Self>()` bytes of `b`.
    fn from_bytes(b: &[u8]) -> Self;
}

macro_rules! pod {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            fn cast(b: &[u8]) -> Option<&[$t]> {
                // SAFETY: every bit pattern is a valid unsigned integer; `align_to` only
                // puts correctly aligned, in-bounds elements in the middle slice.
                let (pre, mid, post) = unsafe { b.align_to::<$t>() };
                (pre.is_empty() && post.is_empty()).then_some(mid)
            }
            fn cast_mut(b: &mut [u8]) -> Option<&mut [$t]> {
                // SAFETY: as in `cast`; the middle slice borrows `b` mutably and exclusively.
                let (pre, mid, post) = unsafe { b.align_to_mut::<$t>() };
                (pre.is_empty() && post.is_empty()).then_some(mid)
            }
            fn from_bytes(b: &[u8]) -> $t {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..std::mem::size_of::<$t>()]);
                <$t>::from_ne_bytes(a)
            }
        }
    )*};
}
pod!(u8, u16, u32, u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }
    fn ints(b: &[u8]) -> Vec<i32> {
        b.chunks(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Transpositions of the two inner dims (the blocked path) against the definition:
    /// sizes around the block side, an outer dim, a 4-D permutation, split into tiles of
    /// the outer dim at arbitrary points.
    #[test]
    fn inner_transposes_match_the_definition() {
        let mut blocked = 0;
        for &(outer, a, b) in &[
            (1usize, 1usize, 5usize),
            (1, 16, 16),
            (1, 17, 40),
            (3, 33, 7),
            (2, 64, 960),
        ] {
            // x: [outer, a, b] -> y: [outer, b, a]
            let x: Vec<i32> = (0..(outer * a * b) as i32).collect();
            let (dims, src) = if outer == 1 {
                (vec![b, a], vec![1isize, b as isize])
            } else {
                (vec![outer, b, a], vec![(a * b) as isize, 1, b as isize])
            };
            let c = StridedCopy::new(4, &dims, &src, 0, &contiguous_strides(&dims), 0);
            blocked += usize::from(c.is_inner_transpose());
            for cuts in [vec![0, c.outer()], vec![0, c.outer() / 3, c.outer()]] {
                let mut out = vec![0u8; x.len() * 4];
                for w in cuts.windows(2) {
                    c.run(&bytes(&x), &mut out, w[0], w[1]);
                }
                let y = ints(&out);
                for o in 0..outer {
                    for i in 0..a {
                        for j in 0..b {
                            assert_eq!(
                                y[(o * b + j) * a + i],
                                x[(o * a + i) * b + j],
                                "{outer}x{a}x{b}"
                            );
                        }
                    }
                }
            }
        }
        // Every case but the 1 x 5 one (its source stride along the last dim is 1 after
        // coalescing) takes the blocked path.
        assert!(blocked >= 4, "{blocked}");
        // 4-D: [2, 3, 4, 5] -> perm (0, 1, 3, 2).
        let x: Vec<i32> = (0..120).collect();
        let dims = [2usize, 3, 5, 4];
        let c = StridedCopy::new(4, &dims, &[60, 20, 1, 5], 0, &contiguous_strides(&dims), 0);
        assert!(c.is_inner_transpose());
        let mut out = vec![0u8; 480];
        let h = c.outer();
        c.run(&bytes(&x), &mut out, 0, h / 2);
        c.run(&bytes(&x), &mut out, h / 2, h);
        let y = ints(&out);
        for (n, v) in y.iter().enumerate() {
            let (i, j, l, k) = (n / 60, n / 20 % 3, n / 4 % 5, n % 4);
            assert_eq!(*v, x[i * 60 + j * 20 + k * 5 + l]);
        }
    }

    #[test]
    fn transpose_via_strided_copy() {
        // x: [2,3,4] -> perm (2,0,1): y[k,i,j] = x[i,j,k]
        let x: Vec<i32> = (0..24).collect();
        let dims = [4usize, 2, 3];
        let src_strides = [1isize, 12, 4];
        let c = StridedCopy::new(4, &dims, &src_strides, 0, &contiguous_strides(&dims), 0);
        let mut out = vec![0u8; 96];
        c.run(&bytes(&x), &mut out, 0, c.outer());
        let y = ints(&out);
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    assert_eq!(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
                }
            }
        }
    }

    #[test]
    fn coalesce_merges_contiguous_dims() {
        let dims = [2usize, 1, 3, 4];
        let s = contiguous_strides(&dims);
        let (d, st) = coalesce(&dims, &[s.clone(), s]);
        assert_eq!(d, vec![1, 24]);
        assert_eq!(st[0], vec![0, 1]);
    }

    /// A Slice with steps (x[:, ::2, 1::2] of [3, 8, 10]) and a reversed row, split into
    /// tiles, as words and as bytes (a buffer the word path cannot take), against the
    /// definition.
    #[test]
    fn stepped_rows_match_the_definition() {
        let x: Vec<i32> = (0..240).collect();
        let dims = [3usize, 4, 5];
        let c = StridedCopy::new(4, &dims, &[80, 20, 2], 1, &contiguous_strides(&dims), 0);
        let want: Vec<i32> = (0..60)
            .map(|n| x[(n / 20) * 80 + (n / 5 % 4) * 20 + 1 + (n % 5) * 2])
            .collect();
        let xb = bytes(&x);
        // The byte path: both buffers one byte off a word boundary.
        let mut src1 = vec![0u8; xb.len() + 1];
        src1[1..].copy_from_slice(&xb);
        for (src, shift) in [(&xb[..], 0usize), (&src1[1..], 1)] {
            let mut out = vec![0u8; 240 + shift];
            let h = c.outer();
            c.run(src, &mut out[shift..], 0, 1);
            c.run(src, &mut out[shift..], 1, h);
            assert_eq!(ints(&out[shift..]), want, "shift {shift}");
        }
        let r = StridedCopy::new(4, &[2, 3], &[3, -1], 2, &[3, 1], 0);
        let mut out = vec![0u8; 24];
        r.run(&bytes(&[0, 1, 2, 3, 4, 5]), &mut out, 0, r.outer());
        assert_eq!(ints(&out), vec![2, 1, 0, 5, 4, 3]);
    }

    #[test]
    fn negative_strides_reverse() {
        let x: Vec<i32> = (0..10).collect();
        let c = StridedCopy::new(4, &[5], &[-2], 9, &[1], 0);
        let mut out = vec![0u8; 20];
        c.run(&bytes(&x), &mut out, 0, c.outer());
        assert_eq!(ints(&out), vec![9, 7, 5, 3, 1]);
    }

    /// The typed paths (row reuse, replication, gather with fill) against the byte path.
    #[test]
    fn index_map_typed_matches_bytes() {
        let x: Vec<i32> = (0..5 * 7 * 9).collect();
        let cases: Vec<Vec<Vec<isize>>> = vec![
            // Nearest x2 upsample of [5, 7, 9] -> [5, 14, 18].
            vec![
                (0..5).map(|c| c * 63).collect(),
                (0..14).map(|y| (y / 2) * 9).collect(),
                (0..18).map(|x| x / 2).collect(),
            ],
            // x3 rows, uneven columns, a fill row and fill columns.
            vec![
                vec![0, FILL, 126],
                (0..21).map(|y| (y / 3) * 9).collect(),
                vec![0, 0, 1, 3, FILL, 8, 8, 2],
            ],
            // Replication by 4 of part of a row.
            vec![
                vec![63],
                vec![0, 9, 9, 18],
                (0..12).map(|x| 2 + x / 4).collect(),
            ],
        ];
        for maps in cases {
            let dims: Vec<usize> = maps.iter().map(Vec::len).collect();
            let m = IndexMapCopy {
                elem: 4,
                dims: dims.clone(),
                maps,
                fill: (-1i32).to_ne_bytes().to_vec(),
            };
            let n: usize = dims.iter().product();
            let mut want = vec![0u8; 4 * n];
            m.run_bytes(&bytes(&x), &mut want, 0, dims[0]);
            for (lo, hi) in [(0, dims[0]), (1, dims[0])] {
                let mut got = want.clone();
                got[lo * n / dims[0] * 4..].fill(0);
                m.run(&bytes(&x), &mut got, lo, hi);
                assert_eq!(ints(&got), ints(&want), "{dims:?} rows {lo}..{hi}");
            }
            // Misaligned buffers take the byte path.
            let mut buf = vec![0u8; 4 * n + 1];
            let mut src = vec![0u8; 1];
            src.extend(bytes(&x));
            m.run(&src[1..], &mut buf[1..], 0, dims[0]);
            assert_eq!(ints(&buf[1..]), ints(&want));
        }
    }

    #[test]
    fn index_map_with_fill() {
        let x: Vec<i32> = (0..4).collect(); // [2,2]
        let m = IndexMapCopy {
            elem: 4,
            dims: vec![3, 3],
            maps: vec![vec![FILL, 0, 2], vec![1, 0, FILL]],
            fill: 7i32.to_ne_bytes().to_vec(),
        };
        let mut out = vec![0u8; 36];
        m.run(&bytes(&x), &mut out, 0, 3);
        assert_eq!(ints(&out), vec![7, 7, 7, 1, 0, 7, 3, 2, 7]);
    }
}

//! Instruction-set dispatch: every SIMD routine has an AVX2+FMA version (x86-64 only,
//! `#[target_feature]`) and a portable twin; callers pass the [`Isa`] chosen once by
//! [`best_isa`] at plan time (runtime CPU detection).
//!
//! Invariant: an `Isa::Avx2Fma` value is only ever produced after
//! `is_x86_feature_detected!` confirmed both features, so calling the `target_feature`
//! functions with it is sound.

use super::conv::{depthwise_plane_body, ConvShape};
use super::eltwise::{binary_f32_body, Bcast};
use super::gemm::{Epilogue, MR, NR};
use super::pool::{max_pool_plane_body, PoolShape};
use super::unary::apply_unary_body;
use crate::ir::{BinaryOp, UnaryOp};

/// Instruction set used by the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, any target.
    Portable,
    /// x86-64 AVX2 with FMA.
    Avx2Fma,
}

/// The best instruction set this CPU supports.
pub fn best_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Isa::Avx2Fma;
        }
    }
    Isa::Portable
}

/// Every instruction set usable on this CPU (for tests comparing twins).
pub fn available_isas() -> Vec<Isa> {
    let mut v = vec![Isa::Portable];
    if best_isa() == Isa::Avx2Fma {
        v.push(Isa::Avx2Fma);
    }
    v
}

/// One MR x NR tile: `C = A_panel · B_panel` (or `C +=` when `accumulate`), depth `kc`.
/// `a` holds `kc * MR` floats, `b` holds `kc * NR`, `c` holds MR rows of stride `ldc`.
#[inline]
pub fn ukernel(
    isa: Isa,
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    assert!(a.len() >= kc * MR && b.len() >= kc * NR);
    assert!(ldc >= NR && c.len() >= (MR - 1) * ldc + NR);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: `Isa::Avx2Fma` is only produced after runtime detection of AVX2 and
            // FMA; the asserts above guarantee every pointer offset the kernel touches
            // (a: kc*MR, b: kc*NR, c: MR rows of NR at stride ldc) is in bounds.
            unsafe {
                avx2::ukernel_6x16(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc, accumulate)
            }
        }
        _ => ukernel_portable(kc, a, b, c, ldc, accumulate),
    }
}

/// Up to [`super::gemm::KC`] rows of an unpacked B block, each a slice of at least `len`
/// floats starting at the block's first column: B row `p`, column `jc + j` is
/// `rows[p][j]`. Lets the micro-kernel read B straight from its source (conv input
/// planes, im2col rows) instead of from packed panels.
pub struct RowBlock<'r, 'b> {
    rows: &'r [&'b [f32]],
    len: usize,
}

impl<'r, 'b> RowBlock<'r, 'b> {
    /// Checks once that every row holds `len` floats.
    pub fn new(rows: &'r [&'b [f32]], len: usize) -> RowBlock<'r, 'b> {
        assert!(rows.iter().all(|r| r.len() >= len), "short B row");
        RowBlock { rows, len }
    }

    /// Rows in the block.
    pub fn depth(&self) -> usize {
        self.rows.len()
    }
}

/// One MR x NR tile like [`ukernel`], with B read from columns `off..off + NR` of the
/// rows of `b` (depth `b.depth()`).
#[inline]
pub fn ukernel_rows(
    isa: Isa,
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    let kc = b.depth();
    assert!(a.len() >= kc * MR && off + NR <= b.len);
    assert!(ldc >= NR && c.len() >= (MR - 1) * ldc + NR);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); a holds kc*MR floats, every row
            // of `b` holds `len >= off + NR` floats (checked by `RowBlock::new` and the
            // assert above), c holds MR rows of NR at stride ldc.
            unsafe {
                avx2::ukernel_rows_6x16(
                    kc,
                    a.as_ptr(),
                    b.rows,
                    off,
                    c.as_mut_ptr(),
                    ldc,
                    accumulate,
                )
            }
        }
        _ => ukernel_rows_portable(a, b, off, c, ldc, accumulate),
    }
}

/// Portable twin of the row-table micro-kernel.
pub fn ukernel_rows_portable(
    a: &[f32],
    b: &RowBlock<'_, '_>,
    off: usize,
    c: &mut [f32],
    ldc: usize,
    acc: bool,
) {
    let rows = b.rows;
    tile_portable(rows.len(), a, |p| &rows[p][off..off + NR], c, ldc, acc)
}

/// Portable twin of the AVX2 micro-kernel.
pub fn ukernel_portable(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool) {
    tile_portable(kc, a, |p| &b[p * NR..p * NR + NR], c, ldc, acc)
}

/// The MR x NR tile both portable micro-kernels share; `b_row(p)` is B's NR floats
/// for step `p`.
#[inline]
fn tile_portable<'b>(
    kc: usize,
    a: &[f32],
    b_row: impl Fn(usize) -> &'b [f32],
    c: &mut [f32],
    ldc: usize,
    acc: bool,
) {
    let mut t = [[0.0f32; NR]; MR];
    for p in 0..kc {
        let bv = b_row(p);
        for (r, row) in t.iter_mut().enumerate() {
            let av = a[p * MR + r];
            for (x, bb) in row.iter_mut().zip(bv) {
                *x += av * bb;
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        let dst = &mut c[r * ldc..r * ldc + NR];
        if acc {
            for (d, s) in dst.iter_mut().zip(row) {
                *d += *s;
            }
        } else {
            dst.copy_from_slice(row);
        }
    }
}

/// One row of a micro-tile: `c[0..NR] = sum_p a[p * MR] * b[p * NR..][..NR]` (the GEMV
/// case of a single-row A panel, where the 6-row kernel would waste five rows).
#[inline]
pub fn ukernel_row(isa: Isa, kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= kc * MR && b.len() >= kc * NR && c.len() >= NR);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::ukernel_row(kc, a, b, c) }
        }
        _ => ukernel_row_body(kc, a, b, c),
    }
}

/// Columns of the half-width micro-tile [`ukernel_half`].
pub const HALF: usize = NR / 2;

/// The left half of a micro-tile: `c[r * NR + j] = sum_p a[p * MR + r] * b[p * NR + j]`
/// for `j < HALF` (a ragged last panel of at most HALF columns, where the full kernel
/// would waste half its work). `c` is an MR x NR tile; its right half is left as is.
#[inline]
pub fn ukernel_half(isa: Isa, kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= kc * MR && b.len() >= kc * NR && c.len() >= MR * NR);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::ukernel_half(kc, a, b, c) }
        }
        _ => ukernel_half_body(kc, a, b, c),
    }
}

#[inline(always)]
fn ukernel_half_body(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut acc = [[0.0f32; HALF]; MR];
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        let bv: &[f32; HALF] = bv[..HALF].try_into().expect("HALF floats");
        for (row, &x) in acc.iter_mut().zip(av) {
            for (d, y) in row.iter_mut().zip(bv) {
                // Fused, like the full micro-kernel: a tile gives the same bits whichever
                // kernel computes it.
                *d = x.mul_add(*y, *d);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        c[r * NR..r * NR + HALF].copy_from_slice(row);
    }
}

#[inline(always)]
fn ukernel_row_body(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut acc = [0.0f32; NR];
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        let x = av[0];
        for (d, y) in acc.iter_mut().zip(bv) {
            *d = x.mul_add(*y, *d);
        }
    }
    c[..NR].copy_from_slice(&acc);
}

/// f32 binary op with broadcasting (see [`binary_f32_body`]).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn binary_f32(
    isa: Isa,
    op: BinaryOp,
    bc: &Bcast,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    lo: usize,
    hi: usize,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::binary_f32(op, bc, a, b, out, lo, hi) }
        }
        _ => binary_f32_body(op, bc, a, b, out, lo, hi),
    }
}

/// One depthwise conv plane (see [`super::conv::depthwise_plane_body`]).
#[inline]
pub fn depthwise_plane(
    isa: Isa,
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::depthwise_plane(s, w, plane, out, scratch) }
        }
        _ => depthwise_plane_body(s, w, plane, out, scratch),
    }
}

/// Fused epilogue on a tile of C (see [`Epilogue::apply_body`]).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn epilogue(
    isa: Isa,
    e: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    mr: usize,
    j0: usize,
    nr: usize,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::epilogue(e, c, ldc, i0, mr, j0, nr) }
        }
        _ => e.apply_body(c, ldc, i0, mr, j0, nr),
    }
}

/// Element-wise function in place (see [`apply_unary_body`]).
#[inline]
pub fn unary(isa: Isa, op: UnaryOp, x: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::unary(op, x) }
        }
        _ => apply_unary_body(op, x),
    }
}

/// Max pooling of one plane (see [`super::pool::max_pool_plane_body`]).
#[inline]
pub fn max_pool_plane(isa: Isa, s: &PoolShape, x: &[f32], y: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::max_pool_plane(s, x, y) }
        }
        _ => max_pool_plane_body(s, x, y),
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{
        apply_unary_body, binary_f32_body, depthwise_plane_body, max_pool_plane_body, Bcast,
        BinaryOp, ConvShape, Epilogue, PoolShape, UnaryOp,
    };

    /// AVX2 build of [`Epilogue::apply_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn epilogue(
        e: &Epilogue<'_>,
        c: &mut [f32],
        ldc: usize,
        i0: usize,
        mr: usize,
        j0: usize,
        nr: usize,
    ) {
        e.apply_body(c, ldc, i0, mr, j0, nr)
    }

    /// AVX2 build of [`apply_unary_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn unary(op: UnaryOp, x: &mut [f32]) {
        apply_unary_body(op, x)
    }
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// 6x16 FMA micro-kernel.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `a` must be valid for `kc * 6` reads, `b` for
    /// `kc * 16`, and `c` for 6 rows of 16 floats at stride `ldc`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ukernel_6x16(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        acc: bool,
    ) {
        // SAFETY: p < kc, so `b + p*NR` and the 16 floats after it are in the panel.
        unsafe { tile_6x16(kc, a, |p| b.add(p * NR), c, ldc, acc) }
    }

    /// 6x16 FMA micro-kernel reading B row `p` at `rows[p] + off`.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `a` must be valid for `kc * 6` reads, every row
    /// of `rows[..kc]` for `off + 16` reads, and `c` for 6 rows of 16 floats at stride
    /// `ldc`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ukernel_rows_6x16(
        kc: usize,
        a: *const f32,
        rows: &[&[f32]],
        off: usize,
        c: *mut f32,
        ldc: usize,
        acc: bool,
    ) {
        let rows = &rows[..kc];
        // SAFETY: every row holds off + 16 floats (caller's contract).
        unsafe { tile_6x16(kc, a, |p| rows[p].as_ptr().add(off), c, ldc, acc) }
    }

    /// The 6x16 tile shared by both micro-kernels: `b_row(p)` points at the 16 floats
    /// of B for step `p`.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `a` valid for `kc * 6` reads, `b_row(p)` for 16
    /// reads for every `p < kc`, `c` for 6 rows of 16 floats at stride `ldc`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_6x16(
        kc: usize,
        a: *const f32,
        b_row: impl Fn(usize) -> *const f32,
        c: *mut f32,
        ldc: usize,
        acc: bool,
    ) {
        let mut t = [_mm256_setzero_ps(); 2 * MR];
        for p in 0..kc {
            let bp = b_row(p);
            // SAFETY: 16 floats at bp and the A column p (kc*6 floats) are readable.
            let (b0, b1, ap) = unsafe {
                (
                    _mm256_loadu_ps(bp),
                    _mm256_loadu_ps(bp.add(8)),
                    a.add(p * MR),
                )
            };
            for r in 0..MR {
                // SAFETY: r < MR, inside the current A column.
                let av = unsafe { _mm256_broadcast_ss(&*ap.add(r)) };
                t[2 * r] = _mm256_fmadd_ps(av, b0, t[2 * r]);
                t[2 * r + 1] = _mm256_fmadd_ps(av, b1, t[2 * r + 1]);
            }
        }
        for r in 0..MR {
            // SAFETY: row r < MR of C, 16 floats, guaranteed by the caller.
            unsafe {
                let cp = c.add(r * ldc);
                let (mut v0, mut v1) = (t[2 * r], t[2 * r + 1]);
                if acc {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cp));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cp.add(8)));
                }
                _mm256_storeu_ps(cp, v0);
                _mm256_storeu_ps(cp.add(8), v1);
            }
        }
    }

    /// AVX2 build of [`depthwise_plane_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn depthwise_plane(
        s: &ConvShape,
        w: &[f32],
        plane: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        depthwise_plane_body(s, w, plane, out, scratch)
    }

    /// AVX2 build of [`max_pool_plane_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn max_pool_plane(s: &PoolShape, x: &[f32], y: &mut [f32]) {
        max_pool_plane_body(s, x, y)
    }

    /// AVX2 build of [`super::ukernel_half_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ukernel_half(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
        super::ukernel_half_body(kc, a, b, c)
    }

    /// AVX2 build of [`super::ukernel_row_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ukernel_row(kc: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
        super::ukernel_row_body(kc, a, b, c)
    }

    /// AVX2 build of [`binary_f32_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn binary_f32(
        op: BinaryOp,
        bc: &Bcast,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
        lo: usize,
        hi: usize,
    ) {
        binary_f32_body(op, bc, a, b, out, lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};
    use crate::kernels::unary::PostOpRt;

    /// The shared twin test: every routine, every ISA, edge sizes, against the portable one.
    #[test]
    fn simd_twins_match_portable() {
        for isa in available_isas() {
            for kc in [0usize, 1, 2, 7, 64, 257] {
                let a = rand_vec(kc * MR, 1);
                let b = rand_vec(kc * NR, 2);
                for acc in [false, true] {
                    let mut c1 = rand_vec(MR * 20, 3);
                    let mut c2 = c1.clone();
                    ukernel(isa, kc, &a, &b, &mut c1, 20, acc);
                    ukernel_portable(kc, &a, &b, &mut c2, 20, acc);
                    assert_close(&c1, &c2, 1e-5);
                }
                let (mut r1, mut r2) = ([0.0f32; NR], [0.0f32; NR]);
                ukernel_row(isa, kc, &a, &b, &mut r1);
                ukernel_row_body(kc, &a, &b, &mut r2);
                assert_close(&r1, &r2, 1e-5);
                let mut full = vec![0.0f32; MR * NR];
                ukernel_portable(kc, &a, &b, &mut full, NR, false);
                assert_close(&r1, &full[..NR], 1e-5);
            }
            let shapes: [(&[usize], &[usize], &[usize]); 4] = [
                (&[0], &[0], &[0]),
                (&[37], &[37], &[37]),
                (&[3, 1, 9], &[5, 1], &[3, 5, 9]),
                (&[2, 17], &[], &[2, 17]),
            ];
            for (sa, sb, so) in shapes {
                let bc = Bcast::new(&[sa, sb], so).expect("broadcast");
                let x = rand_vec(sa.iter().product(), 4);
                let y = rand_vec(sb.iter().product(), 5);
                let n: usize = so.iter().product();
                for op in [
                    BinaryOp::Add,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Max,
                    BinaryOp::PRelu,
                ] {
                    let (mut o1, mut o2) = (vec![0.0; n], vec![0.0; n]);
                    binary_f32(isa, op, &bc, &x, &y, &mut o1, 0, bc.outer());
                    binary_f32_body(op, &bc, &x, &y, &mut o2, 0, bc.outer());
                    assert_close(&o1, &o2, 1e-6);
                }
            }
            let ops = [
                UnaryOp::Relu,
                UnaryOp::Clip {
                    min: -0.2,
                    max: 0.3,
                },
                UnaryOp::HardSwish,
                UnaryOp::Sigmoid,
                UnaryOp::Silu,
                UnaryOp::LeakyRelu { alpha: 0.1 },
            ];
            for op in ops {
                let x = rand_vec(37, 8);
                let (mut a, mut b) = (x.clone(), x.clone());
                unary(isa, op, &mut a);
                apply_unary_body(op, &mut b);
                assert_close(&a, &b, 1e-6);
            }
            let (bias, scale, shift, res) = (
                rand_vec(12, 9),
                rand_vec(12, 10),
                rand_vec(12, 11),
                rand_vec(12 * 20, 12),
            );
            let post = [
                PostOpRt::Affine { scale, shift },
                PostOpRt::AddInput { slot: 0 },
                PostOpRt::PRelu {
                    slope: bias.clone(),
                },
                PostOpRt::Unary(UnaryOp::Clip {
                    min: -0.5,
                    max: 0.5,
                }),
            ];
            let residuals: [&[f32]; 1] = [&res];
            for row in [true, false] {
                let e = Epilogue {
                    bias: Some(&bias),
                    channel_is_row: row,
                    channel_offset: usize::from(row),
                    addend: Some(&res),
                    post: &post,
                    residuals: &residuals,
                };
                let c0 = rand_vec(12 * 20, 13);
                let (mut a, mut b) = (c0.clone(), c0.clone());
                e.apply(isa, &mut a, 20, 2, 5, 1, 11);
                e.apply_body(&mut b, 20, 2, 5, 1, 11);
                assert_close(&a, &b, 1e-6);
            }
            for (hw, k, st, d, p) in [
                (1, 1, 1, 1, 0),
                (7, 3, 1, 1, 1),
                (9, 3, 2, 1, 1),
                (8, 5, 2, 2, 4),
                (17, 3, 1, 2, 0),
            ] {
                let oh = (hw + 2 * p - d * (k - 1) - 1) / st + 1;
                let s = ConvShape {
                    n: 1,
                    c_in: 2,
                    h: hw,
                    w: hw,
                    c_out: 2,
                    oh,
                    ow: oh,
                    kh: k,
                    kw: k,
                    sh: st,
                    sw: st,
                    dh: d,
                    dw: d,
                    ph: p,
                    pw: p,
                    group: 2,
                };
                let x = rand_vec(hw * hw, 6);
                let w = rand_vec(k * k, 7);
                let (mut y1, mut y2) = (vec![0.0; oh * oh], vec![0.0; oh * oh]);
                let mut scratch = vec![0.0; crate::kernels::conv::depthwise_scratch_len(&s)];
                depthwise_plane(isa, &s, &w, &x, &mut y1, &mut scratch);
                depthwise_plane_body(&s, &w, &x, &mut y2, &mut scratch);
                assert_close(&y1, &y2, 1e-6);
                let ps = PoolShape {
                    planes: 1,
                    h: hw,
                    w: hw,
                    oh,
                    ow: oh,
                    kh: k,
                    kw: k,
                    sh: st,
                    sw: st,
                    dh: d,
                    dw: d,
                    pads: [p, p, p, p],
                };
                max_pool_plane(isa, &ps, &x, &mut y1);
                max_pool_plane_body(&ps, &x, &mut y2);
                assert_close(&y1, &y2, 0.0);
            }
        }
    }
}

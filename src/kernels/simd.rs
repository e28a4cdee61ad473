//! Instruction-set dispatch: every SIMD routine has an AVX2+FMA version (x86-64 only,
//! `#[target_feature]`) and a portable twin; callers pass the [`Isa`] chosen once by
//! [`best_isa`] at plan time (runtime CPU detection).
//!
//! Invariant: an `Isa::Avx2Fma` value is only ever produced after
//! `is_x86_feature_detected!` confirmed both features, so calling the `target_feature`
//! functions with it is sound.

use super::gemm::{MR, NR};

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

/// Portable twin of the AVX2 micro-kernel.
pub fn ukernel_portable(kc: usize, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, acc: bool) {
    let mut t = [[0.0f32; NR]; MR];
    for p in 0..kc {
        let bv = &b[p * NR..p * NR + NR];
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

/// `y[i] += alpha * x[i]` over the common length.
#[inline]
pub fn axpy(isa: Isa, alpha: f32, x: &[f32], y: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); the function only uses safe
            // slice indexing.
            unsafe { avx2::axpy(alpha, x, y) }
        }
        _ => axpy_body(alpha, x, y),
    }
}

#[inline(always)]
fn axpy_body(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (d, s) in y.iter_mut().zip(x) {
        *d = s.mul_add(alpha, *d);
    }
}

/// `y[i] += alpha * x[i * stride]` for every `i` of `y`.
#[inline]
pub fn axpy_strided(isa: Isa, alpha: f32, x: &[f32], stride: usize, y: &mut [f32]) {
    if stride == 1 {
        return axpy(isa, alpha, x, y);
    }
    for (i, d) in y.iter_mut().enumerate() {
        *d = x[i * stride].mul_add(alpha, *d);
    }
}

/// `out[i] = a[i] + b[i]` (the residual-add hot path).
#[inline]
pub fn add(isa: Isa, a: &[f32], b: &[f32], out: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::add(a, b, out) }
        }
        _ => add_body(a, b, out),
    }
}

#[inline(always)]
fn add_body(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// `x[i] = clamp(x[i], lo, hi)` (Relu / Clip hot path).
#[inline]
pub fn clamp(isa: Isa, x: &mut [f32], lo: f32, hi: f32) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: AVX2+FMA were detected (see `Isa`); safe indexing only.
            unsafe { avx2::clamp(x, lo, hi) }
        }
        _ => clamp_body(x, lo, hi),
    }
}

#[inline(always)]
fn clamp_body(x: &mut [f32], lo: f32, hi: f32) {
    for v in x.iter_mut() {
        *v = v.max(lo).min(hi);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
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
        let mut t = [_mm256_setzero_ps(); 2 * MR];
        for p in 0..kc {
            // SAFETY: p < kc, so the loads stay within the kc*NR / kc*MR panels.
            let (b0, b1, ap) = unsafe {
                (
                    _mm256_loadu_ps(b.add(p * NR)),
                    _mm256_loadu_ps(b.add(p * NR + 8)),
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

    /// AVX2 build of [`super::axpy_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        super::axpy_body(alpha, x, y)
    }

    /// AVX2 build of [`super::add_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
        super::add_body(a, b, out)
    }

    /// AVX2 build of [`super::clamp_body`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn clamp(x: &mut [f32], lo: f32, hi: f32) {
        super::clamp_body(x, lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{assert_close, rand_vec};

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
            }
            for n in [0usize, 1, 7, 8, 9, 31, 100] {
                let x = rand_vec(n, 4);
                let y0 = rand_vec(n, 5);
                let (mut y1, mut y2) = (y0.clone(), y0.clone());
                axpy(isa, 0.7, &x, &mut y1);
                axpy_body(0.7, &x, &mut y2);
                assert_close(&y1, &y2, 1e-6);
                let (mut o1, mut o2) = (vec![0.0; n], vec![0.0; n]);
                add(isa, &x, &y0, &mut o1);
                add_body(&x, &y0, &mut o2);
                assert_close(&o1, &o2, 0.0);
                let (mut c1, mut c2) = (x.clone(), x.clone());
                clamp(isa, &mut c1, 0.0, 0.5);
                clamp_body(&mut c2, 0.0, 0.5);
                assert_close(&c1, &c2, 0.0);
            }
        }
    }
}

//! Numpy broadcasting resolved into strides ([`Bcast`]), the generic two-input map over
//! it, and the f32 binary-op body every kernel table builds.

use crate::ir::BinaryOp;
use crate::kernels::nd::{coalesce, contiguous_strides, for_rows};

/// A broadcast of `N` operands to one output box.
#[derive(Debug, Clone, PartialEq)]
pub struct Bcast {
    /// Coalesced output dims (rank ≥ 2).
    pub dims: Vec<usize>,
    /// Per operand (inputs first, then the output), strides in elements.
    pub strides: Vec<Vec<isize>>,
}

impl Bcast {
    /// Broadcasts input shapes `ins` to `out` (numpy rules, right-aligned); `None` if
    /// some input does not broadcast.
    pub fn new(ins: &[&[usize]], out: &[usize]) -> Option<Bcast> {
        let r = out.len();
        let mut strides = Vec::new();
        for s in ins {
            if s.len() > r {
                return None;
            }
            let cs = contiguous_strides(s);
            let mut st = vec![0isize; r];
            for (i, (&d, &c)) in s.iter().zip(&cs).enumerate() {
                let o = r - s.len() + i;
                if d == out[o] {
                    st[o] = if d == 1 { 0 } else { c };
                } else if d != 1 {
                    return None;
                }
            }
            strides.push(st);
        }
        strides.push(contiguous_strides(out));
        let (dims, strides) = coalesce(out, &strides);
        Some(Bcast { dims, strides })
    }

    /// Outermost (tileable) dim.
    pub fn outer(&self) -> usize {
        self.dims[0]
    }
}

/// Applies `f` over two broadcast inputs into the output, rows with outer index in
/// `[lo, hi)`.
#[inline(always)]
pub fn map2<A: Copy, B: Copy, O>(
    bc: &Bcast,
    a: &[A],
    b: &[B],
    out: &mut [O],
    lo: usize,
    hi: usize,
    f: impl Fn(A, B) -> O,
) {
    let r = bc.dims.len();
    let (sa, sb) = (bc.strides[0][r - 1], bc.strides[1][r - 1]);
    for_rows(
        &bc.dims,
        [&bc.strides[0], &bc.strides[1], &bc.strides[2]],
        [0, 0, 0],
        lo,
        hi,
        |[oa, ob, oo], n| {
            let o = &mut out[oo as usize..oo as usize + n];
            match (sa, sb) {
                (1, 1) => {
                    let (x, y) = (&a[oa as usize..][..n], &b[ob as usize..][..n]);
                    for ((d, p), q) in o.iter_mut().zip(x).zip(y) {
                        *d = f(*p, *q);
                    }
                }
                (1, 0) => {
                    let (x, q) = (&a[oa as usize..][..n], b[ob as usize]);
                    for (d, p) in o.iter_mut().zip(x) {
                        *d = f(*p, q);
                    }
                }
                (0, 1) => {
                    let (p, y) = (a[oa as usize], &b[ob as usize..][..n]);
                    for (d, q) in o.iter_mut().zip(y) {
                        *d = f(p, *q);
                    }
                }
                _ => {
                    for (i, d) in o.iter_mut().enumerate() {
                        let p = a[(oa + i as isize * sa) as usize];
                        let q = b[(ob + i as isize * sb) as usize];
                        *d = f(p, q);
                    }
                }
            }
        },
    );
}

/// Shared body of the tables' `binary_f32` entry.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn binary_f32(
    op: BinaryOp,
    bc: &Bcast,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    lo: usize,
    hi: usize,
) {
    use BinaryOp::*;
    match op {
        Add => map2(bc, a, b, out, lo, hi, |x, y| x + y),
        Sub => map2(bc, a, b, out, lo, hi, |x, y| x - y),
        Mul => map2(bc, a, b, out, lo, hi, |x, y| x * y),
        Div => map2(bc, a, b, out, lo, hi, |x, y| x / y),
        Pow => map2(bc, a, b, out, lo, hi, pow_f32),
        Max => map2(bc, a, b, out, lo, hi, |x: f32, y: f32| {
            if x.is_nan() || y.is_nan() {
                f32::NAN
            } else {
                x.max(y)
            }
        }),
        Min => map2(bc, a, b, out, lo, hi, |x: f32, y: f32| {
            if x.is_nan() || y.is_nan() {
                f32::NAN
            } else {
                x.min(y)
            }
        }),
        Mod { fmod } => map2(bc, a, b, out, lo, hi, move |x: f32, y: f32| {
            if fmod {
                x % y
            } else {
                let m = x % y;
                if m != 0.0 && (m < 0.0) != (y < 0.0) {
                    m + y
                } else {
                    m
                }
            }
        }),
        PRelu => map2(
            bc,
            a,
            b,
            out,
            lo,
            hi,
            |x, s| if x < 0.0 { x * s } else { x },
        ),
        // Comparisons and logic are routed to `compare_*`; keep the output defined.
        Equal | Less | LessOrEqual | Greater | GreaterOrEqual | And | Or | Xor => {
            map2(bc, a, b, out, lo, hi, |_, _| f32::NAN)
        }
    }
}

fn pow_f32(x: f32, y: f32) -> f32 {
    if y == 2.0 {
        x * x
    } else if y == 0.5 {
        x.sqrt()
    } else {
        x.powf(y)
    }
}

//! Element-wise kernels with numpy broadcasting: binary ops (arithmetic on f32 / i64 /
//! i32, comparisons producing bool, logic on bool), Where, Cast, dynamic Clip.
//!
//! Broadcasting is resolved at plan time into a [`Bcast`]: coalesced output dims and
//! per-operand element strides (0 on broadcast dims). Tiles split the outermost dim.

pub use super::body::eltwise::{map2, Bcast};
use super::isa::Isa;
use super::nd::for_rows;
use crate::ir::{BinaryOp, DType};

/// f32 binary op (vectorised build where available).
#[allow(clippy::too_many_arguments)]
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
    (isa.table().binary_f32)(op, bc, a, b, out, lo, hi)
}

/// Comparison of two broadcast inputs into a bool (0/1 byte) output.
pub fn compare<T: Copy + PartialOrd>(
    op: BinaryOp,
    bc: &Bcast,
    a: &[T],
    b: &[T],
    out: &mut [u8],
    lo: usize,
    hi: usize,
) {
    use BinaryOp::*;
    match op {
        Equal => map2(bc, a, b, out, lo, hi, |x, y| (x == y) as u8),
        Less => map2(bc, a, b, out, lo, hi, |x, y| (x < y) as u8),
        LessOrEqual => map2(bc, a, b, out, lo, hi, |x, y| (x <= y) as u8),
        Greater => map2(bc, a, b, out, lo, hi, |x, y| (x > y) as u8),
        _ => map2(bc, a, b, out, lo, hi, |x, y| (x >= y) as u8),
    }
}

/// Logic op on bools.
pub fn logic(op: BinaryOp, bc: &Bcast, a: &[u8], b: &[u8], out: &mut [u8], lo: usize, hi: usize) {
    match op {
        BinaryOp::And => map2(bc, a, b, out, lo, hi, |x, y| ((x != 0) && (y != 0)) as u8),
        BinaryOp::Or => map2(bc, a, b, out, lo, hi, |x, y| ((x != 0) || (y != 0)) as u8),
        BinaryOp::Xor => map2(bc, a, b, out, lo, hi, |x, y| ((x != 0) != (y != 0)) as u8),
        _ => map2(bc, a, b, out, lo, hi, |x, y| ((x != 0) == (y != 0)) as u8),
    }
}

/// Integer arithmetic (i64 or i32 through the `Int` trait). Division by zero yields 0
/// rather than trapping (ONNX leaves it undefined).
pub fn binary_int<T: Int>(
    op: BinaryOp,
    bc: &Bcast,
    a: &[T],
    b: &[T],
    out: &mut [T],
    lo: usize,
    hi: usize,
) {
    use BinaryOp::*;
    match op {
        Add => map2(bc, a, b, out, lo, hi, |x: T, y: T| x.wadd(y)),
        Sub => map2(bc, a, b, out, lo, hi, |x: T, y: T| x.wsub(y)),
        Mul => map2(bc, a, b, out, lo, hi, |x: T, y: T| x.wmul(y)),
        Div => map2(bc, a, b, out, lo, hi, |x: T, y: T| x.div0(y)),
        Max => map2(
            bc,
            a,
            b,
            out,
            lo,
            hi,
            |x: T, y: T| if x > y { x } else { y },
        ),
        Min => map2(
            bc,
            a,
            b,
            out,
            lo,
            hi,
            |x: T, y: T| if x < y { x } else { y },
        ),
        Pow => map2(bc, a, b, out, lo, hi, |x: T, y: T| {
            T::from_f64(x.to_f64().powf(y.to_f64()))
        }),
        Mod { fmod } => map2(bc, a, b, out, lo, hi, move |x: T, y: T| x.modulo(y, fmod)),
        _ => map2(bc, a, b, out, lo, hi, |x: T, _| x),
    }
}

/// Integer element types used by shape math.
pub trait Int: Copy + PartialOrd + PartialEq {
    /// Wrapping add.
    fn wadd(self, o: Self) -> Self;
    /// Wrapping sub.
    fn wsub(self, o: Self) -> Self;
    /// Wrapping mul.
    fn wmul(self, o: Self) -> Self;
    /// Truncating division, 0 when dividing by 0.
    fn div0(self, o: Self) -> Self;
    /// Remainder; sign of the divisor unless `fmod`.
    fn modulo(self, o: Self, fmod: bool) -> Self;
    /// Widening to f64.
    fn to_f64(self) -> f64;
    /// Narrowing from f64 (saturating).
    fn from_f64(v: f64) -> Self;
}

macro_rules! impl_int {
    ($t:ty) => {
        impl Int for $t {
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div0(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            fn modulo(self, o: Self, fmod: bool) -> Self {
                if o == 0 {
                    return 0;
                }
                let m = self.wrapping_rem(o);
                if !fmod && m != 0 && ((m < 0) != (o < 0)) {
                    m + o
                } else {
                    m
                }
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
impl_int!(i64);
impl_int!(i32);

/// Where: `out = cond ? x : y` over bytes of `elem`-sized elements; `bc` has operands
/// (cond, x, y, out).
#[allow(clippy::too_many_arguments)]
pub fn where_select(
    bc: &Bcast,
    elem: usize,
    cond: &[u8],
    x: &[u8],
    y: &[u8],
    out: &mut [u8],
    lo: usize,
    hi: usize,
) {
    let r = bc.dims.len();
    let st: [&[isize]; 4] = [
        &bc.strides[0],
        &bc.strides[1],
        &bc.strides[2],
        &bc.strides[3],
    ];
    let last = [st[0][r - 1], st[1][r - 1], st[2][r - 1], st[3][r - 1]];
    for_rows(&bc.dims, st, [0; 4], lo, hi, |[oc, ox, oy, oo], n| {
        for i in 0..n as isize {
            let c = cond[(oc + i * last[0]) as usize] != 0;
            let s = if c {
                (ox + i * last[1]) as usize * elem
            } else {
                (oy + i * last[2]) as usize * elem
            };
            let d = (oo + i * last[3]) as usize * elem;
            let src = if c { &x[s..s + elem] } else { &y[s..s + elem] };
            out[d..d + elem].copy_from_slice(src);
        }
    });
}

/// Converts `n` elements from `from` to `to` (float→int truncates toward zero and
/// saturates, anything→bool is `!= 0`).
pub fn cast(from: DType, to: DType, src: &[u8], dst: &mut [u8], lo: usize, hi: usize) {
    let (fs, ts) = (from.size(), to.size());
    for i in lo..hi {
        let s = &src[i * fs..(i + 1) * fs];
        let d = &mut dst[i * ts..(i + 1) * ts];
        if from == DType::F32 {
            let v = f32::from_ne_bytes([s[0], s[1], s[2], s[3]]);
            match to {
                DType::F32 => d.copy_from_slice(s),
                DType::Bool => d[0] = (v != 0.0) as u8,
                _ => write_int(to, v as i64, d),
            }
        } else {
            let v = read_int(from, s);
            match to {
                DType::F32 => d.copy_from_slice(&(v as f32).to_ne_bytes()),
                DType::Bool => d[0] = (v != 0) as u8,
                _ => write_int(to, v, d),
            }
        }
    }
}

fn read_int(t: DType, s: &[u8]) -> i64 {
    match t {
        DType::I64 => i64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]),
        DType::I32 => i32::from_ne_bytes([s[0], s[1], s[2], s[3]]) as i64,
        DType::I8 => s[0] as i8 as i64,
        _ => s[0] as i64,
    }
}

fn write_int(t: DType, v: i64, d: &mut [u8]) {
    match t {
        DType::I64 => d.copy_from_slice(&v.to_ne_bytes()),
        DType::I32 => d.copy_from_slice(&(v as i32).to_ne_bytes()),
        DType::I8 => d[0] = v as i8 as u8,
        _ => d[0] = v as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ir::UnaryOp;
    use crate::kernels::isa::twin_test;

    twin_test!(eltwise_tables_match_portable, 1e-6, |t| {
        let mut out = Vec::new();
        let shapes: [(&[usize], &[usize], &[usize]); 4] = [
            (&[0], &[0], &[0]),
            (&[37], &[37], &[37]),
            (&[3, 1, 9], &[5, 1], &[3, 5, 9]),
            (&[2, 17], &[], &[2, 17]),
        ];
        for (sa, sb, so) in shapes {
            let bc = Bcast::new(&[sa, sb], so).expect("broadcast");
            let x = crate::kernels::testutil::rand_vec(sa.iter().product(), 4);
            let y = crate::kernels::testutil::rand_vec(sb.iter().product(), 5);
            let n: usize = so.iter().product();
            for op in [
                BinaryOp::Add,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Max,
                BinaryOp::PRelu,
            ] {
                let mut o = vec![0.0; n];
                (t.binary_f32)(op, &bc, &x, &y, &mut o, 0, bc.outer());
                out.extend_from_slice(&o);
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
            UnaryOp::Exp,
            UnaryOp::Tanh,
            UnaryOp::LeakyRelu { alpha: 0.1 },
        ];
        for op in ops {
            for n in [0, 1, 7, 8, 37] {
                let mut x = crate::kernels::testutil::rand_vec(n, 8);
                (t.unary)(op, &mut x);
                out.extend_from_slice(&x);
            }
        }
        out
    });

    #[test]
    fn broadcast_add_matches_naive() {
        let a: Vec<f32> = (0..24).map(|i| i as f32).collect(); // [2,3,4]
        let b: Vec<f32> = (0..3).map(|i| 100.0 * i as f32).collect(); // [3,1]
        let bc = Bcast::new(&[&[2, 3, 4], &[3, 1]], &[2, 3, 4]).expect("bcast");
        let mut out = vec![0.0; 24];
        binary_f32(
            crate::kernels::isa::best_isa(),
            BinaryOp::Add,
            &bc,
            &a,
            &b,
            &mut out,
            0,
            bc.outer(),
        );
        for i in 0..2 {
            for (j, bj) in b.iter().enumerate() {
                for k in 0..4 {
                    let o = (i * 3 + j) * 4 + k;
                    assert_eq!(out[o], a[o] + bj);
                }
            }
        }
        assert!(Bcast::new(&[&[2, 3], &[4]], &[2, 3]).is_none());
    }

    #[test]
    fn int_mod_and_compare() {
        let bc = Bcast::new(&[&[4], &[1]], &[4]).expect("bcast");
        let a = [-7i64, 7, -8, 9];
        let mut out = [0i64; 4];
        binary_int(
            BinaryOp::Mod { fmod: false },
            &bc,
            &a,
            &[3],
            &mut out,
            0,
            bc.outer(),
        );
        assert_eq!(out, [2, 1, 1, 0]);
        binary_int(
            BinaryOp::Mod { fmod: true },
            &bc,
            &a,
            &[3],
            &mut out,
            0,
            bc.outer(),
        );
        assert_eq!(out, [-1, 1, -2, 0]);
        let mut o = [0u8; 4];
        compare(BinaryOp::Less, &bc, &a, &[7], &mut o, 0, bc.outer());
        assert_eq!(o, [1, 0, 1, 0]);
    }

    #[test]
    fn cast_round_trips() {
        let src: Vec<u8> = [1.9f32, -2.5, 0.0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut d = vec![0u8; 24];
        cast(DType::F32, DType::I64, &src, &mut d, 0, 3);
        let v: Vec<i64> = d.chunks(8).map(|c| read_int(DType::I64, c)).collect();
        assert_eq!(v, vec![1, -2, 0]);
        let mut b = vec![0u8; 3];
        cast(DType::I64, DType::Bool, &d, &mut b, 0, 3);
        assert_eq!(b, vec![1, 1, 0]);
    }
}

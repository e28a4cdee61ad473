//! Shape and type rules of the elementwise family (Unary, Binary, Where, ClipDynamic,
//! Cast), including the one binary-op result-type table ([`binary_type`]).

use crate::ir::{BinaryOp, DType, UnaryOp};
use crate::{Error, Result};

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Unary ops keep the shape; `Not` gives bool.
    pub(super) fn unary(&self, u: &UnaryOp) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let dt = if matches!(u, UnaryOp::Not) {
            DType::Bool
        } else {
            dt
        };
        one(dt, x.to_vec())
    }

    /// Binary ops: broadcast shapes, result type from [`binary_type`].
    pub(super) fn binary(&self, b: &BinaryOp) -> Result<Vec<TypedShape>> {
        use BinaryOp as B;
        let a = self.shape(0)?;
        let bs = self.shape(1)?;
        if *b == B::PRelu {
            if self.bcast(a, bs)? != a {
                return Err(self.err(format!("slope {bs:?} does not broadcast to {a:?}")));
            }
            return one(self.binary_result(b)?, a.to_vec());
        }
        let out = self.bcast(a, bs)?;
        one(self.binary_result(b)?, out)
    }

    /// Result type of binary op `b` on this node's inputs: both of one type, and the
    /// pair (op, type) one [`binary_type`] accepts.
    fn binary_result(&self, b: &BinaryOp) -> Result<DType> {
        let (ta, tb) = (self.req(0)?.0, self.req(1)?.0);
        match binary_type(*b, ta) {
            Some(t) if ta == tb => Ok(t),
            _ => Err(Error::UnsupportedOp {
                node: self.node.to_string(),
                op: self.op.name().to_string(),
                detail: format!("{} on {} and {}", b.name(), ta.name(), tb.name()),
            }),
        }
    }

    /// Cast: same shape, type `to`.
    pub(super) fn cast(&self, to: DType) -> Result<Vec<TypedShape>> {
        one(to, self.shape(0)?.to_vec())
    }

    /// Where: broadcast of condition, X and Y.
    pub(super) fn where_op(&self) -> Result<Vec<TypedShape>> {
        let c = self.shape(0)?;
        let (dt, x) = self.req(1)?;
        let y = self.shape(2)?;
        let xy = self.bcast(x, y)?;
        one(dt, self.bcast(c, &xy)?)
    }

    /// Clip with scalar bound inputs.
    pub(super) fn clip_dynamic(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        for i in 1..=2 {
            if let Some((_, b)) = self.opt(i)? {
                if b.iter().product::<usize>() != 1 {
                    return Err(self.err(format!("bound #{i} must be a scalar, has shape {b:?}")));
                }
            }
        }
        one(dt, x.to_vec())
    }
}

/// Result type of binary op `op` on two inputs of type `t`, or `None` when the pair is
/// not supported. ONNX typing (comparisons give bool; And/Or/Xor take bool only) narrowed
/// to what the kernels implement: f32 everything; i32/i64 arithmetic and comparisons (no
/// PRelu); bool And/Or/Xor/Equal; no u8/i8 arithmetic.
pub fn binary_type(op: BinaryOp, t: DType) -> Option<DType> {
    use BinaryOp::*;
    let cmp = matches!(op, Equal | Less | LessOrEqual | Greater | GreaterOrEqual);
    match t {
        DType::F32 => match op {
            And | Or | Xor => None,
            _ if cmp => Some(DType::Bool),
            _ => Some(DType::F32),
        },
        DType::I64 | DType::I32 => match op {
            And | Or | Xor | PRelu => None,
            _ if cmp => Some(DType::Bool),
            _ => Some(t),
        },
        DType::Bool => match op {
            And | Or | Xor | Equal => Some(DType::Bool),
            _ => None,
        },
        DType::U8 | DType::I8 => None,
    }
}

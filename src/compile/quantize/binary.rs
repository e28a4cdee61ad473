//! The int8 Add / Mul patterns: `DQ(a), DQ(b) → Add [→ Relu/Clip] → Q` → `QAdd`,
//! `DQ(a), DQ(b) → Mul → Q` → `QMul`, on equal shapes or with one operand broadcast to
//! the other as one block of dims (`QBcast::of`: a scalar, `[C, 1, 1]` against `[N, C,
//! H, W]`, trailing dims), as in SE blocks and detector heads.
//!
//! The operand with the output's shape goes first: Add and Mul commute exactly in f32,
//! so swapping the operands (with their parameters) changes no bit. A constant operand
//! is allowed on the broadcast side; a per-tensor s8 constant moves to the u8 domain
//! (`s + 128`, `zp + 128`: the same dequantised values).

use super::{add_const, bounds, dq_of, q_end, Dq, Index, Match};
use crate::ir::{BinaryOp, DType, Elems, Graph, Op, QParam, Tensor, TensorData, UnaryOp, ValueId};
use crate::kernels::quant::QBcast;

/// The u8 value and parameters an operand reads: its DQ input when u8, or a u8 copy of a
/// per-tensor s8 constant.
fn u8_operand(g: &mut Graph, dq: &Dq, name: &str) -> Option<(ValueId, QParam)> {
    if let Some(p) = dq.u8_param(g) {
        return Some((dq.x, p));
    }
    let t = g.values[dq.x].konst.as_ref()?;
    let (Elems::I8(v), [z]) = (t.elems(), dq.zp.as_slice()) else {
        return None;
    };
    if dq.scale.len() != 1 {
        return None;
    }
    let zp = u8::try_from(z + 128).ok()?;
    let shape = t.shape.clone();
    let data: Vec<u8> = v.iter().map(|&s| (i16::from(s) + 128) as u8).collect();
    let x = add_const(
        g,
        &format!("{name}/u8"),
        Tensor::new(shape, TensorData::U8(data)),
    );
    Some((
        x,
        QParam {
            scale: dq.scale[0],
            zp,
        },
    ))
}

/// QAdd / QMul from node `i` (an Add or a Mul), see the module doc.
pub(super) fn match_add(g: &mut Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let is_mul = matches!(n.op, Op::Binary(BinaryOp::Mul));
    let name = n.name.clone();
    let out_shape = g.values[n.outputs[0]].shape.clone()?;
    let (mut da, mut db) = (dq_of(g, ix, n.inputs[0]?)?, dq_of(g, ix, n.inputs[1]?)?);
    if g.values[da.x].shape.as_ref() != Some(&out_shape) {
        std::mem::swap(&mut da, &mut db);
    }
    if g.values[da.x].shape.as_ref() != Some(&out_shape) || g.values[da.x].konst.is_some() {
        return None;
    }
    QBcast::of(&out_shape, g.values[db.x].shape.as_ref()?)?;
    let a = da.u8_param(g)?;
    let end = q_end(g, ix, g.nodes[i].outputs[0])?;
    let y = end.y?;
    let acts: Vec<UnaryOp> = end.act.iter().map(|&(_, a)| a).collect();
    let (lo, hi) = bounds(Some(y), &acts)?;
    if is_mul && end.act.is_some() {
        return None;
    }
    let (bx, b) = u8_operand(g, &db, &name)?;
    debug_assert_eq!(g.values[bx].dtype, DType::U8);
    let mut dead = vec![end.q];
    dead.extend(end.act.map(|(a, _)| a));
    Some(Match {
        op: if is_mul {
            Op::QMul { a, b, y }
        } else {
            Op::QAdd { a, b, y, lo, hi }
        },
        inputs: vec![Some(da.x), Some(bx)],
        outs: vec![end.out],
        dead,
        before: Vec::new(),
    })
}

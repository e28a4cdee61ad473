//! Output shape and dtype inference for the shape-math operators constant folding
//! evaluates before the graph's own shapes are known ([`super::eval_node`]).
//!
//! Returns `None` for anything it does not know; the caller then requires shapes in
//! the graph.

use crate::ir::{DType, Node, Op, ReduceOp, Tensor};
use crate::kernels::eltwise;

type Out = Option<Vec<(Vec<usize>, DType)>>;

fn broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let r = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1usize; r];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[r - s.len() + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

fn norm(a: i64, r: usize) -> Option<usize> {
    let v = if a < 0 { a + r as i64 } else { a };
    (0..r as i64).contains(&v).then_some(v as usize)
}

/// Output shapes and dtypes of `node` given its constant inputs.
pub(super) fn infer(node: &Node, ins: &[Option<&Tensor>]) -> Out {
    let t = |i: usize| ins.get(i).copied().flatten();
    let sh = |i: usize| t(i).map(|x| x.shape.clone());
    let ints = |i: usize| t(i).and_then(|x| x.to_i64_vec());
    let one = |s: Vec<usize>, d: DType| Some(vec![(s, d)]);
    match &node.op {
        Op::Unary(_) => one(sh(0)?, t(0)?.dtype()),
        Op::Cast { to } => one(sh(0)?, *to),
        Op::Binary(op) => {
            let s = broadcast(&[&sh(0)?, &sh(1)?])?;
            one(s, eltwise::binary_types(*op, t(0)?.dtype())?)
        }
        Op::Where => one(broadcast(&[&sh(0)?, &sh(1)?, &sh(2)?])?, t(1)?.dtype()),
        Op::Shape { start, end } => {
            let r = sh(0)?.len() as i64;
            let c = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r);
            let n = (c(end.unwrap_or(r)) - c(*start)).max(0) as usize;
            one(vec![n], DType::I64)
        }
        Op::Gather { axis } => {
            let d = sh(0)?;
            let a = norm(*axis, d.len())?;
            let mut s = d[..a].to_vec();
            s.extend(sh(1)?);
            s.extend(&d[a + 1..]);
            one(s, t(0)?.dtype())
        }
        Op::Concat { axis } => {
            let first = sh(0)?;
            let a = norm(*axis, first.len())?;
            let mut s = first.clone();
            s[a] = (0..ins.len())
                .map(|i| sh(i).map(|x| x.get(a).copied().unwrap_or(0)))
                .sum::<Option<usize>>()?;
            one(s, t(0)?.dtype())
        }
        Op::Unsqueeze { axes } => {
            let d = sh(0)?;
            let ax = axes.clone().or_else(|| ints(1))?;
            let r = d.len() + ax.len();
            let mut ax: Vec<usize> = ax.iter().map(|&a| norm(a, r)).collect::<Option<_>>()?;
            ax.sort_unstable();
            let mut it = d.iter();
            let s = (0..r)
                .map(|i| {
                    if ax.contains(&i) {
                        Some(1)
                    } else {
                        it.next().copied()
                    }
                })
                .collect::<Option<Vec<_>>>()?;
            one(s, t(0)?.dtype())
        }
        Op::Squeeze { axes } => {
            let d = sh(0)?;
            let ax: Vec<usize> = match axes.clone().or_else(|| ints(1)) {
                Some(a) => a.iter().map(|&a| norm(a, d.len())).collect::<Option<_>>()?,
                None => (0..d.len()).filter(|&i| d[i] == 1).collect(),
            };
            one(
                d.iter()
                    .enumerate()
                    .filter(|(i, _)| !ax.contains(i))
                    .map(|(_, &v)| v)
                    .collect(),
                t(0)?.dtype(),
            )
        }
        Op::Flatten { axis } => {
            let d = sh(0)?;
            let a = if *axis < 0 {
                *axis + d.len() as i64
            } else {
                *axis
            } as usize;
            one(
                vec![
                    d[..a.min(d.len())].iter().product(),
                    d[a.min(d.len())..].iter().product(),
                ],
                t(0)?.dtype(),
            )
        }
        Op::Reshape { allowzero } => {
            let d = sh(0)?;
            let want = ints(1)?;
            let numel: usize = d.iter().product();
            let mut s: Vec<usize> = Vec::new();
            let mut infer_at = None;
            for (i, &w) in want.iter().enumerate() {
                match w {
                    -1 => {
                        infer_at = Some(i);
                        s.push(1);
                    }
                    0 if !allowzero => s.push(*d.get(i)?),
                    w if w >= 0 => s.push(w as usize),
                    _ => return None,
                }
            }
            if let Some(i) = infer_at {
                let rest: usize = s.iter().product();
                s[i] = if rest == 0 { 0 } else { numel / rest };
            }
            (s.iter().product::<usize>() == numel).then_some(())?;
            one(s, t(0)?.dtype())
        }
        Op::ConstantOfShape { value } => {
            let s = ints(0)?
                .iter()
                .map(|&v| usize::try_from(v).ok())
                .collect::<Option<Vec<_>>>()?;
            one(s, value.dtype())
        }
        Op::Range => {
            let v = |i: usize| {
                t(i).map(|x| x.to_f32_vec())
                    .and_then(|x| x.first().copied())
            };
            let (a, b, d) = (v(0)? as f64, v(1)? as f64, v(2)? as f64);
            if d == 0.0 {
                return None;
            }
            let n = ((b - a) / d).ceil().max(0.0) as usize;
            one(vec![n], t(0)?.dtype())
        }
        Op::Expand => {
            let s = ints(1)?
                .iter()
                .map(|&v| usize::try_from(v).ok())
                .collect::<Option<Vec<_>>>()?;
            one(broadcast(&[&sh(0)?, &s])?, t(0)?.dtype())
        }
        Op::Tile => {
            let d = sh(0)?;
            let r = ints(1)?;
            (r.len() == d.len()).then_some(())?;
            one(
                d.iter()
                    .zip(&r)
                    .map(|(&a, &b)| a * b.max(0) as usize)
                    .collect(),
                t(0)?.dtype(),
            )
        }
        Op::Transpose { perm } => {
            let d = sh(0)?;
            let p: Vec<usize> = perm.clone().unwrap_or_else(|| (0..d.len()).rev().collect());
            one(
                p.iter()
                    .map(|&i| d.get(i).copied())
                    .collect::<Option<_>>()?,
                t(0)?.dtype(),
            )
        }
        Op::Reduce {
            op,
            axes,
            keepdims,
            noop_with_empty_axes,
        } => {
            let d = sh(0)?;
            let ax = axes.clone().or_else(|| ints(1)).unwrap_or_default();
            let ax: Vec<usize> = if ax.is_empty() {
                if *noop_with_empty_axes {
                    return one(d, t(0)?.dtype());
                }
                (0..d.len()).collect()
            } else {
                ax.iter()
                    .map(|&a| norm(a, d.len()))
                    .collect::<Option<_>>()?
            };
            let _: ReduceOp = *op;
            let s = d
                .iter()
                .enumerate()
                .filter_map(|(i, &v)| {
                    if ax.contains(&i) {
                        keepdims.then_some(1)
                    } else {
                        Some(v)
                    }
                })
                .collect();
            one(s, t(0)?.dtype())
        }
        Op::Slice => {
            let d = sh(0)?;
            let (st, en) = (ints(1)?, ints(2)?);
            let ax = if t(3).is_some() {
                ints(3)?
            } else {
                (0..st.len() as i64).collect()
            };
            let sp = if t(4).is_some() {
                ints(4)?
            } else {
                vec![1; st.len()]
            };
            let mut s = d.clone();
            for j in 0..st.len() {
                let a = norm(*ax.get(j)?, d.len())?;
                let n = d[a] as i64;
                let step = *sp.get(j)?;
                if step == 0 {
                    return None;
                }
                let fix = |x: i64| if x < 0 { x + n } else { x };
                let (b, e) = (fix(st[j]), fix(*en.get(j)?));
                let len = if step > 0 {
                    let (b, e) = (b.clamp(0, n), e.clamp(0, n));
                    (e - b + step - 1).div_euclid(step)
                } else {
                    let (b, e) = (b.clamp(0, n - 1), e.clamp(-1, n - 1));
                    (b - e - step - 1).div_euclid(-step)
                };
                s[a] = len.max(0) as usize;
            }
            one(s, t(0)?.dtype())
        }
        _ => None,
    }
}

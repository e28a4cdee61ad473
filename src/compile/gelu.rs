//! GELU recognition: the exact GELU that exporters write as five element-wise nodes,
//! `0.5 · x · (1 + Erf(x / √2))`, becomes one `Unary(Gelu)` node, which
//! `fuse::fuse_post_ops` can then fold into the epilogue of the MatMul/Gemm/Conv that
//! produces `x`.
//!
//! Accepted forms (every Add/Mul in either operand order; the scale by `1/√2` as a Div
//! by `√2` or a Mul by `1/√2`; constants scalar f32, within 1e-4 relative):
//! 1. `Mul(Mul(x, 1 + erf), 0.5)`
//! 2. `Mul(x, Mul(1 + erf, 0.5))`
//! 3. `Mul(Mul(x, 0.5), 1 + erf)`
//!
//! Invariant: every intermediate value is read only by the next node of the pattern
//! (and is no graph output), so removing those nodes changes nothing else; the Gelu
//! node takes the place of the last Mul (every input it reads is computed before it).

use super::rewrite::{remove_nodes, sole_consumer};
use crate::ir::{BinaryOp, Graph, Op, UnaryOp, ValueId};

/// The scalar f32 constant `v` holds, if any.
fn scalar(g: &Graph, v: ValueId) -> Option<f32> {
    let t = g.values[v].konst.as_ref()?;
    match t.as_f32()? {
        [x] => Some(*x),
        _ => None,
    }
}

/// True when `a` is `b` within 1e-4 relative.
fn near(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * b.abs()
}

/// The two inputs of binary node `n` if it is `op`.
fn binary(g: &Graph, n: usize, op: BinaryOp) -> Option<[ValueId; 2]> {
    let node = &g.nodes[n];
    if node.op != Op::Binary(op) || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    Some([node.inputs[0]?, node.inputs[1]?])
}

/// For binary node `n` of `op` with one scalar-constant operand equal to `c`: the
/// other operand.
fn with_const(g: &Graph, n: usize, op: BinaryOp, c: f32, commutes: bool) -> Option<ValueId> {
    let [a, b] = binary(g, n, op)?;
    if scalar(g, b).is_some_and(|v| near(v, c)) {
        return Some(a);
    }
    if commutes && scalar(g, a).is_some_and(|v| near(v, c)) {
        return Some(b);
    }
    None
}

/// The node that computes `v`.
fn producer(g: &Graph, v: ValueId) -> Option<usize> {
    g.nodes.iter().position(|n| n.outputs.contains(&v))
}

/// The sole consumer node of `v` (no graph output).
fn next(g: &Graph, v: ValueId) -> Option<usize> {
    sole_consumer(g, v).map(|(n, _)| n)
}

/// The pattern rooted at Erf node `ei`: `(x, nodes to remove, last node)`.
fn match_at(g: &Graph, ei: usize) -> Option<(ValueId, Vec<usize>, usize)> {
    if g.nodes[ei].op != Op::Unary(UnaryOp::Erf) || g.nodes[ei].outputs.len() != 1 {
        return None;
    }
    let d = g.nodes[ei].inputs.first().copied().flatten()?;
    let di = producer(g, d)?;
    let x = with_const(g, di, BinaryOp::Div, std::f32::consts::SQRT_2, false)
        .or_else(|| with_const(g, di, BinaryOp::Mul, std::f32::consts::FRAC_1_SQRT_2, true))?;
    if sole_consumer(g, d) != Some((ei, 0)) {
        return None;
    }
    let ai = next(g, g.nodes[ei].outputs[0])?;
    if with_const(g, ai, BinaryOp::Add, 1.0, true)? != g.nodes[ei].outputs[0] {
        return None;
    }
    let a = g.nodes[ai].outputs[0];
    let mi = next(g, a)?;
    let [m0, m1] = binary(g, mi, BinaryOp::Mul)?;
    let other = if m0 == a { m1 } else { m0 };
    let m = g.nodes[mi].outputs[0];
    if other == x {
        // Form 1: the next node scales by one half.
        let hi = next(g, m)?;
        if with_const(g, hi, BinaryOp::Mul, 0.5, true)? != m {
            return None;
        }
        return Some((x, vec![di, ei, ai, mi], hi));
    }
    if with_const(g, mi, BinaryOp::Mul, 0.5, true) == Some(a) {
        // Form 2: (1 + erf) · 0.5, then times x.
        let yi = next(g, m)?;
        let [y0, y1] = binary(g, yi, BinaryOp::Mul)?;
        if !((y0 == x && y1 == m) || (y1 == x && y0 == m)) {
            return None;
        }
        return Some((x, vec![di, ei, ai, mi], yi));
    }
    // Form 3: `other` is x · 0.5, read only here.
    let hi = producer(g, other)?;
    if with_const(g, hi, BinaryOp::Mul, 0.5, true)? != x || next(g, other) != Some(mi) {
        return None;
    }
    Some((x, vec![di, ei, ai, hi], mi))
}

/// Rewrites every exact-GELU subgraph (see the module doc) into one `Unary(Gelu)` node
/// that absorbs its nodes. Returns how many were rewritten.
pub fn fuse_gelu(g: &mut Graph) -> usize {
    let mut fused = 0;
    'outer: loop {
        for ei in 0..g.nodes.len() {
            let Some((x, dead, last)) = match_at(g, ei) else {
                continue;
            };
            let same_shape = g.values[g.nodes[last].outputs[0]].shape == g.values[x].shape;
            if !same_shape || g.values[g.nodes[last].outputs[0]].dtype != g.values[x].dtype {
                continue;
            }
            let mut order = dead.clone();
            order.push(last);
            order.sort_unstable();
            let absorbed: Vec<String> = order
                .iter()
                .flat_map(|&i| g.nodes[i].absorbed.iter().cloned())
                .collect();
            let n = &mut g.nodes[last];
            n.op = Op::Unary(UnaryOp::Gelu { tanh_approx: false });
            n.inputs = vec![Some(x)];
            n.absorbed = absorbed;
            remove_nodes(g, &dead);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::fuse::fuse_post_ops;
    use crate::compile::testutil::*;

    const S: [usize; 2] = [3, 8];

    /// A MatMul producing x, then the GELU in the given `form` (1..=3), with the
    /// operands of every commutative node swapped when `swap`, and the first step as a
    /// Mul by 1/√2 when `mul_first`.
    fn gelu_graph(form: u8, swap: bool, mul_first: bool) -> Graph {
        let mut b = GraphBuilder::new();
        let inp = b.input("in", &[3, 5]);
        let w = b.konst("w", &[5, 8], rand_vec(40, 3));
        let x = b.node("mm", Op::MatMul { post: vec![] }, &[inp, w], &S);
        let ord = |p: ValueId, q: ValueId| if swap { [q, p] } else { [p, q] };
        let d = if mul_first {
            let c = b.konst("c", &[], vec![std::f32::consts::FRAC_1_SQRT_2]);
            b.node("div", Op::Binary(BinaryOp::Mul), &ord(x, c), &S)
        } else {
            // √2 as an exporter may round it (within the 1e-4 tolerance).
            let c = b.konst("c", &[], vec![std::f32::consts::SQRT_2 * (1.0 - 2e-5)]);
            b.node("div", Op::Binary(BinaryOp::Div), &[x, c], &S)
        };
        let e = b.node("erf", Op::Unary(UnaryOp::Erf), &[d], &S);
        let one = b.konst("one", &[1], vec![1.0]);
        let a = b.node("add", Op::Binary(BinaryOp::Add), &ord(e, one), &S);
        let half = b.konst("half", &[], vec![0.5]);
        let mul = Op::Binary(BinaryOp::Mul);
        let y = match form {
            1 => {
                let m = b.node("mul", mul.clone(), &ord(x, a), &S);
                b.node("mul_1", mul, &ord(m, half), &S)
            }
            2 => {
                let h = b.node("mul", mul.clone(), &ord(a, half), &S);
                b.node("mul_1", mul, &ord(x, h), &S)
            }
            _ => {
                let h = b.node("mul", mul.clone(), &ord(x, half), &S);
                b.node("mul_1", mul, &ord(h, a), &S)
            }
        };
        b.finish(&[y])
    }

    #[test]
    fn every_form_becomes_gelu_and_fuses_into_the_matmul() {
        for form in 1..=3 {
            for swap in [false, true] {
                for mul_first in [false, true] {
                    let mut g = gelu_graph(form, swap, mul_first);
                    let input = vec![rand_vec(15, 7)];
                    let before = run_graph(&g, &input);
                    assert_eq!(fuse_gelu(&mut g), 1, "form {form} swap {swap}");
                    assert_eq!(g.nodes.len(), 2);
                    assert_eq!(
                        g.nodes[1].op,
                        Op::Unary(UnaryOp::Gelu { tanh_approx: false })
                    );
                    assert_eq!(g.nodes[1].absorbed.len(), 5);
                    assert_close(&before, &run_graph(&g, &input), 1e-5);
                    assert_eq!(fuse_post_ops(&mut g), 1);
                    assert_eq!(g.nodes.len(), 1);
                    assert_close(&before, &run_graph(&g, &input), 1e-5);
                }
            }
        }
    }

    #[test]
    fn near_misses_are_left_alone() {
        // Another scale, or an intermediate value that is also a graph output.
        let mut g = gelu_graph(1, false, false);
        let c = g.nodes[1].inputs[1].expect("const");
        g.values[c].konst = Some(std::sync::Arc::new(crate::ir::Tensor::from_f32(
            vec![],
            vec![1.5],
        )));
        assert_eq!(fuse_gelu(&mut g), 0);
        for form in 1..=3 {
            let mut g = gelu_graph(form, false, false);
            let e = g.nodes[2].outputs[0];
            g.outputs.push(e);
            assert_eq!(fuse_gelu(&mut g), 0);
        }
    }
}

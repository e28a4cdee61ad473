//! Simplifying passes: identity removal, dead-node elimination, canonical forms.
//!
//! Each pass keeps the graph's outputs bit-identical; removed nodes' names are kept in
//! the `absorbed` list of a surviving neighbour when there is one.

use super::rewrite::{remove_nodes, replace_uses};
use crate::ir::{BinaryOp, Graph, Node, Op, UnaryOp};

/// Turns `Clip` with constant min/max inputs into `Unary(Clip)` so it can be fused.
pub fn canonicalize_clip(g: &mut Graph) -> usize {
    let mut changed = 0;
    for i in 0..g.nodes.len() {
        if g.nodes[i].op != Op::ClipDynamic {
            continue;
        }
        let n = &g.nodes[i];
        let bound = |k: usize| -> Option<Option<f32>> {
            match n.inputs.get(k).copied().flatten() {
                None => Some(None),
                Some(v) => g.values[v]
                    .konst
                    .as_ref()
                    .and_then(|t| t.to_f32_vec().first().copied())
                    .map(Some),
            }
        };
        if let (Some(lo), Some(hi)) = (bound(1), bound(2)) {
            let min = lo.unwrap_or(f32::NEG_INFINITY);
            let max = hi.unwrap_or(f32::INFINITY);
            let n = &mut g.nodes[i];
            n.op = Op::Unary(UnaryOp::Clip { min, max });
            n.inputs.truncate(1);
            changed += 1;
        }
    }
    changed
}

/// True when `node` is an identity whose output equals its first input exactly.
fn is_identity(g: &Graph, node: &Node) -> bool {
    let Some(Some(x)) = node.inputs.first().copied() else {
        return false;
    };
    let out = node.outputs[0];
    let same_shape = g.values[x].shape.is_some() && g.values[x].shape == g.values[out].shape;
    let same_type = g.values[x].dtype == g.values[out].dtype;
    if !(same_shape && same_type) {
        return false;
    }
    let const_all = |k: usize, want: f32| -> bool {
        g.const_input(node, k)
            .map(|t| t.numel() > 0 && t.to_f32_vec().iter().all(|&v| v == want))
            .unwrap_or(false)
    };
    match &node.op {
        Op::Unary(UnaryOp::Identity) => true,
        Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Expand => true,
        Op::Cast { .. } => true,
        Op::Binary(BinaryOp::Pow) | Op::Binary(BinaryOp::Div) => const_all(1, 1.0),
        Op::Binary(BinaryOp::Mul) => const_all(1, 1.0),
        Op::Binary(BinaryOp::Add) | Op::Binary(BinaryOp::Sub) => const_all(1, 0.0),
        Op::Transpose { perm } => match perm {
            Some(p) => p.iter().enumerate().all(|(i, &d)| i == d),
            None => g.values[x]
                .shape
                .as_ref()
                .map(|s| s.len() <= 1)
                .unwrap_or(false),
        },
        _ => false,
    }
}

/// Removes identity nodes: Identity, Dropout (imported as Identity), no-op Reshape /
/// Flatten / Squeeze / Unsqueeze / Expand / Cast / Transpose, `Pow 1`, `Mul 1`, `Div 1`,
/// `Add 0`, `Sub 0`. Also handles the commuted `1 * x` / `0 + x`.
pub fn remove_identities(g: &mut Graph) -> usize {
    // Commuted constants: make `const op x` into `x op const` for Add/Mul.
    for n in &mut g.nodes {
        if matches!(n.op, Op::Binary(BinaryOp::Add) | Op::Binary(BinaryOp::Mul))
            && n.inputs.len() == 2
        {
            let a_const = n.inputs[0]
                .map(|v| g.values[v].konst.is_some())
                .unwrap_or(false);
            let b_const = n.inputs[1]
                .map(|v| g.values[v].konst.is_some())
                .unwrap_or(false);
            if a_const && !b_const {
                n.inputs.swap(0, 1);
            }
        }
    }
    let mut removed = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if !is_identity(g, &g.nodes[i]) {
            i += 1;
            continue;
        }
        let node = g.nodes[i].clone();
        let x = node.inputs[0].expect("identity has an input");
        let out = node.outputs[0];
        let producers = g.producers();
        if g.outputs.contains(&out) {
            // Keep the graph output value: let the producer of x write it directly.
            match producers[x] {
                Some(p) if !g.outputs.contains(&x) => {
                    replace_uses(g, x, out);
                    let pn = &mut g.nodes[p];
                    for o in pn.outputs.iter_mut() {
                        if *o == x {
                            *o = out;
                        }
                    }
                    pn.absorbed.extend(node.absorbed.iter().cloned());
                }
                // x is a graph input, a constant or another output: the copy must stay.
                _ => {
                    i += 1;
                    continue;
                }
            }
        } else {
            replace_uses(g, out, x);
            if let Some(p) = producers[x] {
                g.nodes[p].absorbed.extend(node.absorbed.iter().cloned());
            }
        }
        remove_nodes(g, &[i]);
        removed += 1;
    }
    removed
}

/// Removes nodes whose outputs are not needed for any graph output.
pub fn eliminate_dead_nodes(g: &mut Graph) -> usize {
    let mut live = vec![false; g.values.len()];
    for &o in &g.outputs {
        live[o] = true;
    }
    let mut dead = Vec::new();
    for i in (0..g.nodes.len()).rev() {
        let n = &g.nodes[i];
        if n.outputs.iter().any(|&o| live[o]) {
            for v in n.inputs.iter().flatten() {
                live[*v] = true;
            }
        } else {
            dead.push(i);
        }
    }
    let count = dead.len();
    remove_nodes(g, &dead);
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;

    #[test]
    fn identities_disappear_and_names_are_kept() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 4]);
        let one = b.konst("one", &[1], vec![1.0]);
        let zero = b.konst("zero", &[], vec![0.0]);
        let a = b.node("relu", Op::Unary(UnaryOp::Relu), &[x], &[1, 4]);
        let i1 = b.node("id", Op::Unary(UnaryOp::Identity), &[a], &[1, 4]);
        let i2 = b.node("mul1", Op::Binary(BinaryOp::Mul), &[i1, one], &[1, 4]);
        let i3 = b.node("pow1", Op::Binary(BinaryOp::Pow), &[i2, one], &[1, 4]);
        let i4 = b.node("add0", Op::Binary(BinaryOp::Add), &[zero, i3], &[1, 4]);
        let y = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[i4], &[1, 4]);
        let mut g = b.finish(&[y]);
        let before = run_graph(&g, &[vec![-1.0, 0.5, 2.0, -3.0]]);
        assert_eq!(remove_identities(&mut g), 4);
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(
            g.nodes[0].absorbed,
            vec!["relu", "id", "mul1", "pow1", "add0"]
        );
        let after = run_graph(&g, &[vec![-1.0, 0.5, 2.0, -3.0]]);
        assert_eq!(before, after);
    }

    #[test]
    fn identity_feeding_graph_output_is_renamed_not_lost() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[2]);
        let a = b.node("relu", Op::Unary(UnaryOp::Relu), &[x], &[2]);
        let y = b.node("drop", Op::Unary(UnaryOp::Identity), &[a], &[2]);
        let mut g = b.finish(&[y]);
        let out_name = g.values[g.outputs[0]].name.clone();
        assert_eq!(remove_identities(&mut g), 1);
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.values[g.outputs[0]].name, out_name);
        assert_eq!(run_graph(&g, &[vec![-1.0, 2.0]]), vec![vec![0.0, 2.0]]);
    }

    #[test]
    fn input_straight_to_output_keeps_a_copy() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[2]);
        let y = b.node("id", Op::Unary(UnaryOp::Identity), &[x], &[2]);
        let mut g = b.finish(&[y]);
        assert_eq!(remove_identities(&mut g), 0);
        assert_eq!(g.nodes.len(), 1);
    }

    #[test]
    fn dead_nodes_are_removed() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[2]);
        let a = b.node("relu", Op::Unary(UnaryOp::Relu), &[x], &[2]);
        let _dead = b.node("dead", Op::Unary(UnaryOp::Exp), &[a], &[2]);
        let y = b.node("neg", Op::Unary(UnaryOp::Neg), &[a], &[2]);
        let mut g = b.finish(&[y]);
        assert_eq!(eliminate_dead_nodes(&mut g), 1);
        assert_eq!(
            g.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            vec!["relu", "neg"]
        );
    }

    #[test]
    fn constant_clip_becomes_unary() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[3]);
        let lo = b.konst("lo", &[], vec![0.0]);
        let hi = b.konst("hi", &[], vec![6.0]);
        let y = b.node_opt(
            "clip",
            Op::ClipDynamic,
            &[Some(x), Some(lo), Some(hi)],
            &[3],
        );
        let mut g = b.finish(&[y]);
        assert_eq!(canonicalize_clip(&mut g), 1);
        assert_eq!(
            g.nodes[0].op,
            Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })
        );
        assert_eq!(
            run_graph(&g, &[vec![-1.0, 3.0, 9.0]]),
            vec![vec![0.0, 3.0, 6.0]]
        );
    }
}

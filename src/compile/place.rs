//! Placement: decides for every node whether it runs on a virtual NPU core (BPU) or on
//! the CPU pool, then groups consecutive nodes of one kind into segments.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::ir::{Graph, Op, Placement};

/// Softmax-like ops over an axis longer than this run on the CPU (as on NPU toolchains,
/// where only short softmax axes map onto the accelerator).
pub const BPU_SOFTMAX_MAX_AXIS: usize = 2048;

/// Where an op runs when the config says nothing: `Cpu` for the ops an NPU does not run.
pub fn default_placement(g: &Graph, node: usize) -> Placement {
    let n = &g.nodes[node];
    match &n.op {
        Op::TopK { .. }
        | Op::NonMaxSuppression { .. }
        | Op::ArgMax { .. }
        | Op::ArgMin { .. }
        | Op::CumSum { .. }
        | Op::Range => Placement::Cpu,
        #[cfg(feature = "test-ops")]
        Op::Fail { .. } => Placement::Cpu,
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let shape = n.inputs[0]
                .and_then(|v| g.values[v].shape.clone())
                .unwrap_or_default();
            let r = shape.len() as i64;
            let a = if *axis < 0 { axis + r } else { *axis };
            let len = shape.get(a.max(0) as usize).copied().unwrap_or(0);
            if len > BPU_SOFTMAX_MAX_AXIS {
                Placement::Cpu
            } else {
                Placement::Bpu
            }
        }
        _ => Placement::Bpu,
    }
}

/// True when the op may be forced onto a core (everything but the test failure op,
/// whose job is to fail wherever it is placed, can run either way on this host).
fn may_run_on_bpu(op: &Op) -> bool {
    !matches!(op, Op::NonMaxSuppression { .. })
}

/// Sets `placement` of every node: the default, then `run_on_cpu` / `run_on_bpu` by node
/// name (either the compiled node's name or any name it absorbed). Unknown names are an
/// error so a typo in the config does not pass silently.
pub fn place_nodes(g: &mut Graph, run_on_cpu: &[String], run_on_bpu: &[String]) -> Result<()> {
    let mut unseen_cpu: HashSet<String> = run_on_cpu.iter().cloned().collect();
    let mut unseen_bpu: HashSet<String> = run_on_bpu.iter().cloned().collect();
    for i in 0..g.nodes.len() {
        let mut p = default_placement(g, i);
        let n = &g.nodes[i];
        let names: Vec<&str> = std::iter::once(n.name.as_str())
            .chain(n.absorbed.iter().map(|s| s.as_str()))
            .collect();
        if names.iter().any(|s| run_on_cpu.iter().any(|c| c == s)) {
            p = Placement::Cpu;
        }
        if names.iter().any(|s| run_on_bpu.iter().any(|c| c == s)) {
            if !may_run_on_bpu(&n.op) {
                return Err(Error::CompileOption {
                    option: "run_on_bpu".into(),
                    reason: format!("node '{}' ({}) cannot run on a core", n.name, n.op.name()),
                });
            }
            p = Placement::Bpu;
        }
        for s in &names {
            unseen_cpu.remove(*s);
            unseen_bpu.remove(*s);
        }
        g.nodes[i].placement = Some(p);
    }
    follow_cpu_neighbours(g, run_on_bpu);
    if let Some(name) = unseen_cpu.iter().chain(unseen_bpu.iter()).next() {
        return Err(Error::CompileOption {
            option: if unseen_cpu.contains(name.as_str()) {
                "run_on_cpu".into()
            } else {
                "run_on_bpu".into()
            },
            reason: format!("no node named '{name}' in the model"),
        });
    }
    Ok(())
}

/// Pure data-movement nodes (reshapes) cost nothing anywhere: one that is fed by a CPU
/// node, or whose every consumer is a CPU node, runs on the CPU too, so it does not make
/// a pointless BPU segment of its own (e.g. the Reshape in front of a CPU LogSoftmax).
fn follow_cpu_neighbours(g: &mut Graph, forced_bpu: &[String]) {
    let reshape_like = |op: &Op| {
        matches!(
            op,
            Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
        )
    };
    loop {
        let producers = g.producers();
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let n = &g.nodes[i];
            if n.placement != Some(Placement::Bpu)
                || !reshape_like(&n.op)
                || forced_bpu
                    .iter()
                    .any(|f| f == &n.name || n.absorbed.contains(f))
            {
                continue;
            }
            let fed_by_cpu = n
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|v| producers[v])
                .map(|p| g.nodes[p].placement == Some(Placement::Cpu))
                .unwrap_or(false);
            let out = n.outputs[0];
            let consumers: Vec<&crate::ir::Node> = g
                .nodes
                .iter()
                .filter(|c| c.inputs.contains(&Some(out)))
                .collect();
            let feeds_cpu_only = !consumers.is_empty()
                && !g.outputs.contains(&out)
                && consumers
                    .iter()
                    .all(|c| c.placement == Some(Placement::Cpu));
            if fed_by_cpu || feeds_cpu_only {
                g.nodes[i].placement = Some(Placement::Cpu);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Consecutive runs of nodes with one placement: `(placement, node index range)`.
pub fn segment_ranges(g: &Graph) -> Vec<(Placement, std::ops::Range<usize>)> {
    let mut out: Vec<(Placement, std::ops::Range<usize>)> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let p = n.placement.unwrap_or(Placement::Bpu);
        match out.last_mut() {
            Some((lp, r)) if *lp == p => r.end = i + 1,
            _ => out.push((p, i..i + 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;
    use crate::ir::UnaryOp;

    fn chain() -> Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8]);
        let a = b.node("a", Op::Unary(UnaryOp::Relu), &[x], &[1, 8]);
        let c = b.node(
            "argmax",
            Op::ArgMax {
                axis: 1,
                keepdims: true,
                select_last_index: false,
            },
            &[a],
            &[1, 1],
        );
        let d = b.node("d", Op::Unary(UnaryOp::Neg), &[c], &[1, 1]);
        let e = b.node("e", Op::Unary(UnaryOp::Abs), &[d], &[1, 1]);
        b.finish(&[e])
    }

    #[test]
    fn cpu_op_in_the_middle_makes_three_segments() {
        let mut g = chain();
        place_nodes(&mut g, &[], &[]).unwrap();
        let segs = segment_ranges(&g);
        assert_eq!(
            segs,
            vec![
                (Placement::Bpu, 0..1),
                (Placement::Cpu, 1..2),
                (Placement::Bpu, 2..4)
            ]
        );
    }

    #[test]
    fn reshape_next_to_a_cpu_op_joins_its_segment() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8]);
        let r = b.node("flat", Op::Reshape { allowzero: false }, &[x], &[8]);
        let c = b.node(
            "argmax",
            Op::ArgMax {
                axis: 0,
                keepdims: true,
                select_last_index: false,
            },
            &[r],
            &[1],
        );
        let r2 = b.node("unsq", Op::Reshape { allowzero: false }, &[c], &[1, 1]);
        let e = b.node("e", Op::Unary(UnaryOp::Abs), &[r2], &[1, 1]);
        let mut g = b.finish(&[e]);
        place_nodes(&mut g, &[], &[]).unwrap();
        assert_eq!(
            segment_ranges(&g),
            vec![(Placement::Cpu, 0..3), (Placement::Bpu, 3..4)]
        );
    }

    #[test]
    fn config_lists_override_and_unknown_names_fail() {
        let mut g = chain();
        place_nodes(&mut g, &["a".into()], &["argmax".into()]).unwrap();
        let segs = segment_ranges(&g);
        assert_eq!(segs, vec![(Placement::Cpu, 0..1), (Placement::Bpu, 1..4)]);
        let err = place_nodes(&mut g, &["nope".into()], &[]).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}

//! Zero-copy Concat and views: which inputs the memory plan produces in place (or
//! aliases), where they land, that nothing live is overwritten, and that runs match the
//! copying plan bit for bit.

use super::memory::{plan_memory, Layout};
use crate::exec::tests::B;
use crate::exec::{Loc, ModelPlan, PlanOptions, Tile};
use crate::ir::{DType, Graph, Op, Tensor, UnaryOp, ValueId};
use std::sync::Arc;

fn relu(b: &mut B, x: ValueId, s: &[usize]) -> ValueId {
    b.n1(Op::Unary(UnaryOp::Relu), &[x], DType::F32, s)
}

fn concat(b: &mut B, axis: i64, ins: &[ValueId], s: &[usize]) -> ValueId {
    b.n1(Op::Concat { axis }, ins, DType::F32, s)
}

/// Arena offset of value `v`.
fn off(l: &Layout, v: ValueId) -> usize {
    match l.val_loc[v] {
        Some(Loc::Arena { off, .. }) => off,
        ref o => panic!("value {v} is not in the arena: {o:?}"),
    }
}

/// The node producing `v`.
fn node_of(g: &Graph, v: ValueId) -> usize {
    g.producers()[v].expect("produced")
}

/// The inputs of the node producing `v` that are in place.
fn placed(g: &Graph, l: &Layout, v: ValueId) -> Vec<usize> {
    l.in_place[node_of(g, v)].clone()
}

/// Checks that no two values live at the same time share bytes, except a Concat input
/// produced in place inside that Concat's output, or a view's input and outputs
/// (transitively).
fn assert_no_clobber(g: &Graph, l: &Layout) {
    let nv = g.values.len();
    let mut life = vec![None; nv];
    for &v in &g.inputs {
        life[v] = Some((0, usize::MAX));
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in &n.outputs {
            life[v] = Some((i, i));
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in n.inputs.iter().flatten() {
            if let Some((f, _)) = life[v] {
                life[v] = Some((f, i.max(life[v].unwrap().1)));
            }
        }
    }
    for &v in &g.outputs {
        if let Some((f, _)) = life[v] {
            life[v] = Some((f, usize::MAX));
        }
    }
    // inside[v]: the Concat outputs whose block holds v.
    let mut inside: Vec<Vec<ValueId>> = vec![Vec::new(); nv];
    // base[v]: the value whose bytes v is (itself, or a view's input's base).
    let mut base: Vec<ValueId> = (0..nv).collect();
    for (i, n) in g.nodes.iter().enumerate() {
        for &k in &l.in_place[i] {
            let v = n.inputs[k].unwrap();
            if matches!(n.op, Op::Concat { .. }) {
                inside[v].push(n.outputs[0]);
            } else {
                for &o in &n.outputs {
                    base[o] = base[v];
                }
            }
        }
    }
    let holds = |outer: ValueId, v: ValueId| {
        let mut stack = inside[v].clone();
        while let Some(w) = stack.pop() {
            if w == outer {
                return true;
            }
            stack.extend(inside[w].iter().copied());
        }
        false
    };
    let range = |v: ValueId| match l.val_loc[v] {
        Some(Loc::Arena { off, len }) => Some((off, off + len)),
        _ => None,
    };
    for a in 0..nv {
        for b in 0..a {
            let (Some((fa, la)), Some((fb, lb))) = (life[a], life[b]) else {
                continue;
            };
            let (Some((a0, a1)), Some((b0, b1))) = (range(a), range(b)) else {
                continue;
            };
            if fa <= lb && fb <= la && a0 < b1 && b0 < a1 {
                let (a, b) = (base[a], base[b]);
                assert!(
                    a == b || holds(a, b) || holds(b, a),
                    "values {a} and {b} are live together and share bytes"
                );
            }
        }
    }
}

#[test]
fn inputs_land_in_their_slices() {
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 3, 4, 4]);
    let y = b.input(DType::F32, &[1, 5, 4, 4]);
    let p = relu(&mut b, x, &[1, 3, 4, 4]);
    let q = relu(&mut b, y, &[1, 5, 4, 4]);
    let c = concat(&mut b, 1, &[p, q], &[1, 8, 4, 4]);
    let d = relu(&mut b, c, &[1, 8, 4, 4]);
    b.out(d);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c), vec![0, 1]);
    assert_eq!(off(&l, p), off(&l, c));
    assert_eq!(off(&l, q), off(&l, c) + 3 * 16 * 4);
    assert_eq!(l.node_block[node_of(&b.g, q)], (off(&l, q), 5 * 16 * 4));
    assert_no_clobber(&b.g, &l);
    // Switched off, every input keeps its own block.
    let l = plan_memory(&b.g, false).unwrap();
    assert!(l.in_place.iter().all(Vec::is_empty));
    assert_ne!(off(&l, p), off(&l, c));
}

#[test]
fn ineligible_inputs_are_copied() {
    let s = [1, 2, 3, 3];
    let s2 = [1, 4, 3, 3];
    // A graph input and a constant are copied; the produced input beside them is not.
    let mut b = B::default();
    let x = b.input(DType::F32, &s);
    let k = b.kf(&s, vec![0.5; 18]);
    let p = relu(&mut b, x, &s);
    let c = concat(&mut b, 1, &[x, p, k], &[1, 6, 3, 3]);
    b.out(c);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c), vec![1]);
    assert_eq!(off(&l, p), off(&l, c) + 18 * 4);
    assert_no_clobber(&b.g, &l);

    // The same value twice.
    let mut b = B::default();
    let x = b.input(DType::F32, &s);
    let p = relu(&mut b, x, &s);
    let c = concat(&mut b, 1, &[p, p], &s2);
    b.out(c);
    let l = plan_memory(&b.g, true).unwrap();
    assert!(placed(&b.g, &l, c).is_empty());

    // Dims before the axis with a product above 1: the inputs interleave.
    let mut b = B::default();
    let x = b.input(DType::F32, &[2, 2, 3]);
    let p = relu(&mut b, x, &[2, 2, 3]);
    let q = relu(&mut b, x, &[2, 2, 3]);
    let c = concat(&mut b, 1, &[p, q], &[2, 4, 3]);
    b.out(c);
    let l = plan_memory(&b.g, true).unwrap();
    assert!(placed(&b.g, &l, c).is_empty());
    // ... but along axis 0 (nothing before it), or behind unit dims, they qualify.
    let mut b = B::default();
    let x = b.input(DType::F32, &[2, 2, 3]);
    let p = relu(&mut b, x, &[2, 2, 3]);
    let q = relu(&mut b, x, &[2, 2, 3]);
    let c = concat(&mut b, 0, &[p, q], &[4, 2, 3]);
    let u = [1, 1, 2, 3];
    let x1 = b.input(DType::F32, &u);
    let r = relu(&mut b, x1, &u);
    let t = relu(&mut b, x1, &u);
    let c2 = concat(&mut b, 2, &[r, t], &[1, 1, 4, 3]);
    let r = relu(&mut b, x1, &u);
    let t = relu(&mut b, x1, &u);
    let c3 = concat(&mut b, -1, &[r, t], &[1, 1, 2, 6]);
    b.out(c);
    b.out(c2);
    b.out(c3);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c), vec![0, 1]);
    assert_eq!(placed(&b.g, &l, c2), vec![0, 1]);
    assert!(placed(&b.g, &l, c3).is_empty(), "dims 0..3 multiply to 2");
    assert_no_clobber(&b.g, &l);

    // An input that is also a graph output keeps its own slot.
    let mut b = B::default();
    let x = b.input(DType::F32, &s);
    let p = relu(&mut b, x, &s);
    let q = relu(&mut b, x, &s);
    let c = concat(&mut b, 1, &[p, q], &s2);
    b.out(c);
    b.out(p);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c), vec![1]);
    assert_no_clobber(&b.g, &l);

    // An input already placed in an earlier Concat is copied into the second.
    let mut b = B::default();
    let x = b.input(DType::F32, &s);
    let p = relu(&mut b, x, &s);
    let q = relu(&mut b, x, &s);
    let r = relu(&mut b, x, &s);
    let c1 = concat(&mut b, 1, &[p, q], &s2);
    let c2 = concat(&mut b, 1, &[r, p], &s2);
    b.out(c1);
    b.out(c2);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c1), vec![0, 1]);
    assert_eq!(placed(&b.g, &l, c2), vec![0]);
    assert_no_clobber(&b.g, &l);
}

fn split(b: &mut B, x: ValueId, outs: &[&[usize]]) -> Vec<ValueId> {
    let op = Op::Split {
        axis: 1,
        split: None,
        num_outputs: outs.len(),
    };
    let outs: Vec<(DType, &[usize])> = outs.iter().map(|s| (DType::F32, *s)).collect();
    b.node(op, &[Some(x)], &outs)
}

#[test]
fn split_outputs_in_order_and_nested_concats() {
    let s = [1, 2, 3, 3];
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 4, 3, 3]);
    let sp = split(&mut b, x, &[&s, &s]);
    let p = relu(&mut b, sp[1], &s);
    // Consecutive and in order: the Split writes both slices.
    let c1 = concat(&mut b, 1, &[sp[0], sp[1], p], &[1, 6, 3, 3]);
    // Out of order: copied (the other input still qualifies).
    let sq = split(&mut b, x, &[&s, &s]);
    let q = relu(&mut b, x, &[1, 4, 3, 3]);
    let c2 = concat(&mut b, 1, &[sq[1], q, sq[0]], &[1, 8, 3, 3]);
    // Nested: c1 and c2 are produced into c3, their inputs with them.
    let r = relu(&mut b, x, &[1, 4, 3, 3]);
    let c3 = concat(&mut b, 1, &[r, c1, c2], &[1, 18, 3, 3]);
    b.out(c3);
    let l = plan_memory(&b.g, true).unwrap();
    assert_eq!(placed(&b.g, &l, c1), vec![0, 1, 2]);
    assert_eq!(placed(&b.g, &l, c2), vec![1]);
    assert_eq!(placed(&b.g, &l, c3), vec![0, 1, 2]);
    let base = off(&l, c3);
    let plane = 9 * 4;
    assert_eq!(off(&l, r), base);
    assert_eq!(off(&l, c1), base + 4 * plane);
    assert_eq!(off(&l, sp[0]), base + 4 * plane);
    assert_eq!(off(&l, sp[1]), base + 6 * plane);
    assert_eq!(off(&l, p), base + 8 * plane);
    assert_eq!(off(&l, c2), base + 10 * plane);
    assert_eq!(off(&l, q), base + 12 * plane);
    assert_eq!(
        l.node_outs[node_of(&b.g, sp[0])],
        vec![(0, 2 * plane), (2 * plane, 2 * plane)]
    );
    assert_no_clobber(&b.g, &l);
}

/// A graph with eligible, partly eligible, ineligible (batch 2), nested, Split-fed and
/// int8 Concats; every value of it is checked by [`runs_match_the_copying_plan`].
fn mixed() -> (Graph, Vec<Tensor>) {
    let mut b = B::default();
    let x = b.input(DType::F32, &[1, 4, 5, 7]);
    let z = b.input(DType::F32, &[2, 3, 5]);
    let s = [1, 2, 5, 7];
    let sp = split(&mut b, x, &[&s, &s]);
    let p = relu(&mut b, sp[1], &s);
    let c1 = concat(&mut b, 1, &[sp[0], sp[1], p, x], &[1, 10, 5, 7]);
    let q = b.n1(
        Op::Unary(UnaryOp::Sigmoid),
        &[c1],
        DType::F32,
        &[1, 10, 5, 7],
    );
    let c2 = concat(&mut b, 1, &[q, c1], &[1, 20, 5, 7]);
    let zr = relu(&mut b, z, &[2, 3, 5]);
    let zs = b.n1(Op::Unary(UnaryOp::Neg), &[z], DType::F32, &[2, 3, 5]);
    let c3 = concat(&mut b, 1, &[zr, zs], &[2, 6, 5]);
    // int8: two QuantizeLinear outputs end to end, then back to float.
    let sc = b.kf(&[], vec![0.05]);
    let zp = b.k(Tensor::new(vec![], crate::ir::TensorData::I8(vec![3])));
    let quant = Op::QuantizeLinear {
        axis: None,
        dtype: DType::I8,
    };
    let qa = b.n1(quant.clone(), &[p, sc, zp], DType::I8, &s);
    let qb = b.n1(quant, &[q, sc, zp], DType::I8, &[1, 10, 5, 7]);
    let qc = b.n1(Op::Concat { axis: 1 }, &[qa, qb], DType::I8, &[1, 12, 5, 7]);
    let dq = b.n1(
        Op::DequantizeLinear { axis: None },
        &[qc, sc, zp],
        DType::F32,
        &[1, 12, 5, 7],
    );
    b.out(c2);
    b.out(c3);
    b.out(dq);
    b.out(p);
    let xs: Vec<f32> = (0..140).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let zs: Vec<f32> = (0..30).map(|i| (i as f32 * 0.71).cos()).collect();
    let ins = vec![
        Tensor::from_f32(vec![1, 4, 5, 7], xs),
        Tensor::from_f32(vec![2, 3, 5], zs),
    ];
    (b.g, ins)
}

/// Runs `g` with every node split into `tiles(node)` tiles; returns each node's outputs
/// right after it ran, and the graph outputs at the end.
fn run_bytes(g: &Arc<Graph>, opts: &PlanOptions, ins: &[Tensor], tiled: bool) -> Vec<Vec<u8>> {
    let plan = ModelPlan::new(g.clone(), opts).expect("plan");
    let mut st = plan.new_state();
    for (i, t) in ins.iter().enumerate() {
        plan.set_input(&mut st, i, t.bytes()).expect("input");
    }
    let mut seen = Vec::new();
    for n in 0..g.nodes.len() {
        let count = if tiled { plan.tiles_for(n) } else { 1 };
        for index in 0..count {
            plan.run_node(&mut st, n, Tile { index, count })
                .expect("run");
        }
        for k in 0..g.nodes[n].outputs.len() {
            seen.push(plan.node_output(&st, n, k).expect("output").to_vec());
        }
    }
    for k in 0..g.outputs.len() {
        seen.push(plan.output_bytes(&st, k).expect("output").to_vec());
    }
    seen
}

#[test]
fn runs_match_the_copying_plan() {
    let (g, ins) = mixed();
    let l = plan_memory(&g, true).unwrap();
    assert_no_clobber(&g, &l);
    let n_placed: usize = l.in_place.iter().map(Vec::len).sum();
    // c1: sp[0], sp[1] (p is a graph output, x an input); c2: q, c1; c3 (batch 2):
    // none; qc: qa, qb.
    assert_eq!(n_placed, 6, "{:?}", l.in_place);
    let g = Arc::new(g);
    let copying = PlanOptions {
        concat_zero_copy: false,
        ..Default::default()
    };
    let in_place = |o: &PlanOptions| {
        let plan = ModelPlan::new(g.clone(), o).unwrap();
        (0..g.nodes.len())
            .map(|n| plan.inputs_in_place(n))
            .sum::<usize>()
    };
    assert_eq!(in_place(&PlanOptions::default()), 6);
    assert_eq!(in_place(&copying), 0);
    let want = run_bytes(&g, &copying, &ins, false);
    for threads in [1, 3] {
        for tiled in [false, true] {
            let opts = PlanOptions {
                intra_op_threads: threads,
                ..Default::default()
            };
            assert_eq!(
                run_bytes(&g, &opts, &ins, tiled),
                want,
                "{threads} threads, tiled {tiled}"
            );
        }
    }
}

/// Reshapes, Squeezes and a leading-axis Split take their input's bytes (their copies
/// skipped), a Split along a later axis copies; the producers' blocks outlive the views'
/// readers, and every value matches the copying plan, whole and tiled.
#[test]
fn views_alias_their_inputs() {
    let mut b = B::default();
    let x = b.input(DType::F32, &[3, 2, 4]);
    let t = relu(&mut b, x, &[3, 2, 4]);
    let r = b.n1(Op::Reshape { allowzero: false }, &[t], DType::F32, &[6, 4]);
    let split = Op::Split {
        axis: 0,
        split: None,
        num_outputs: 3,
    };
    let shapes = [(DType::F32, &[1usize, 2, 4][..]); 3];
    let parts = b.node(split, &[Some(t)], &shapes);
    let sq = Op::Squeeze { axes: None };
    let q: Vec<ValueId> = parts
        .iter()
        .map(|&v| b.n1(sq.clone(), &[v], DType::F32, &[2, 4]))
        .collect();
    // A Split along a later axis is no view.
    let cols = Op::Split {
        axis: 1,
        split: None,
        num_outputs: 2,
    };
    let halves = b.node(cols, &[Some(r)], &[(DType::F32, &[6, 2][..]); 2]);
    // Values made after the views, while they are read: they must not land on them.
    let late: Vec<ValueId> = q.iter().map(|&v| relu(&mut b, v, &[2, 4])).collect();
    let rr = relu(&mut b, r, &[6, 4]);
    for v in late.iter().chain([&rr, &halves[0], &halves[1]]) {
        b.out(*v);
    }
    let g = b.g;
    let l = plan_memory(&g, true).unwrap();
    assert_no_clobber(&g, &l);
    assert_eq!(placed(&g, &l, r), vec![0]);
    assert_eq!(off(&l, r), off(&l, t));
    for (k, &v) in parts.iter().enumerate() {
        assert_eq!(off(&l, v), off(&l, t) + k * 2 * 4 * 4);
        assert_eq!(off(&l, q[k]), off(&l, v));
    }
    assert!(placed(&g, &l, halves[0]).is_empty());
    let ins = [Tensor::from_f32(
        vec![3, 2, 4],
        (0..24).map(|i| i as f32 - 11.5).collect(),
    )];
    let g = Arc::new(g);
    let copying = PlanOptions {
        concat_zero_copy: false,
        ..Default::default()
    };
    let want = run_bytes(&g, &copying, &ins, false);
    for tiled in [false, true] {
        assert_eq!(run_bytes(&g, &PlanOptions::default(), &ins, tiled), want);
    }
}

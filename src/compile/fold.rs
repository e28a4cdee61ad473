//! Shape inference and constant folding, one pass in topological order.
//!
//! For each node: resolve `auto_pad`, infer output types and shapes, and when every
//! input is constant (or the op only needs its input's shape, like `Shape`), evaluate it
//! now and turn its outputs into constants. This is what makes exporter shape
//! subgraphs (Shape → Gather → Unsqueeze → Concat → Reshape) disappear.

use std::sync::Arc;

use super::budget::MemoryBudget;
use super::rewrite::remove_nodes;
use crate::error::{Error, Result};
use crate::ir::{self, Graph, Op, Tensor};

/// Largest output (elements) the folder materialises; bigger constant subgraphs stay
/// as nodes rather than bloating the compiled file.
const FOLD_LIMIT: usize = 1 << 24;

/// Ops that must never be evaluated at compile time.
fn never_fold(op: &Op) -> bool {
    match op {
        #[cfg(feature = "test-ops")]
        Op::Spin { .. } | Op::Fail { .. } => true,
        _ => matches!(op, Op::Preprocess { .. } | Op::DequantizeLinear { .. }),
    }
}

/// Infers every value's type and shape and folds constant nodes, within the process-wide
/// memory budget. Returns the number of nodes folded away.
pub fn infer_and_fold(g: &mut Graph) -> Result<usize> {
    infer_and_fold_within(g, &MemoryBudget::from_env()?)
}

/// [`infer_and_fold`] with an explicit budget: every inferred value and the constants
/// (initializers plus folded results) must fit in it; checked before anything is
/// allocated.
pub fn infer_and_fold_within(g: &mut Graph, budget: &MemoryBudget) -> Result<usize> {
    let mut consts = budget.check_graph(g)?;
    let mut folded = Vec::new();
    for i in 0..g.nodes.len() {
        resolve_geometry(g, i)?;
        let node = &g.nodes[i];
        let types = ir::shape::infer_node(g, node)?;
        if types.len() != node.outputs.len() {
            return Err(Error::shape(
                &node.name,
                node.op.name(),
                format!(
                    "inference gave {} outputs for {}",
                    types.len(),
                    node.outputs.len()
                ),
            ));
        }
        for (&o, (dt, shape)) in node.outputs.iter().zip(&types) {
            budget.check_tensor(&node.name, node.op.name(), &g.values[o].name, shape, *dt)?;
        }
        for (&o, (dt, shape)) in node.outputs.iter().zip(types) {
            g.values[o].dtype = dt;
            g.values[o].shape = Some(shape);
        }
        let node = &g.nodes[i];
        if never_fold(&node.op) {
            continue;
        }
        // `Shape` only needs the input's (now static) shape.
        if let Op::Shape { .. } = node.op {
            let out = node.outputs[0];
            let dims = g.values[out].shape.clone().unwrap_or_default();
            let inp = node.inputs[0]
                .and_then(|v| g.values[v].shape.clone())
                .unwrap_or_default();
            let (start, end) = match node.op {
                Op::Shape { start, end } => (start, end),
                _ => unreachable!(),
            };
            let r = inp.len() as i64;
            let norm = |x: i64| if x < 0 { (x + r).clamp(0, r) } else { x.clamp(0, r) } as usize;
            let s = norm(start);
            let e = norm(end.unwrap_or(r)).max(s);
            let vals: Vec<i64> = inp[s..e].iter().map(|&d| d as i64).collect();
            debug_assert_eq!(dims, vec![vals.len()]);
            g.values[out].konst = Some(Arc::new(Tensor::from_i64(vec![vals.len()], vals)));
            folded.push(i);
            continue;
        }
        let all_const = node
            .inputs
            .iter()
            .flatten()
            .all(|&v| g.values[v].konst.is_some());
        let small = node.outputs.iter().all(|&o| {
            g.values[o]
                .shape
                .as_ref()
                .map(|s| s.iter().product::<usize>())
                .unwrap_or(usize::MAX)
                <= FOLD_LIMIT
        });
        if !all_const
            || !small
            || node.inputs.iter().flatten().next().is_none() && !is_source(&node.op)
        {
            continue;
        }
        // The folded outputs become constants: they must fit beside the others.
        for &o in &node.outputs {
            let v = &g.values[o];
            let shape = v.shape.as_deref().unwrap_or_default();
            let b = budget.check_tensor(&node.name, node.op.name(), &v.name, shape, v.dtype)?;
            consts = consts
                .checked_add(b)
                .filter(|&c| c <= budget.bytes)
                .ok_or_else(|| budget.over(&node.name, node.op.name(), &v.name, shape, Some(b)))?;
        }
        let inputs: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.values[v].konst.as_deref()))
            .collect();
        let outs = crate::exec::eval_node(g, node, &inputs).map_err(|e| match e {
            Error::RunFailed { .. } | Error::Panic(_) | Error::OutOfMemory(_) => Error::shape(
                &node.name,
                node.op.name(),
                format!("constant folding failed: {e}"),
            ),
            e => e,
        })?;
        let node_outputs = node.outputs.clone();
        for (o, t) in node_outputs.into_iter().zip(outs) {
            g.values[o].konst = Some(Arc::new(t));
        }
        folded.push(i);
    }
    let n = folded.len();
    remove_nodes(g, &folded);
    Ok(n)
}

/// Ops without inputs that produce constants.
fn is_source(op: &Op) -> bool {
    matches!(op, Op::ConstantOfShape { .. } | Op::Range)
}

/// Resolves `auto_pad` of Conv / ConvTranspose / pooling nodes once the input shape is known.
fn resolve_geometry(g: &mut Graph, i: usize) -> Result<()> {
    let Some(Some(x)) = g.nodes[i].inputs.first().copied() else {
        return Ok(());
    };
    let Some(shape) = g.values[x].shape.clone() else {
        return Ok(());
    };
    let node = &mut g.nodes[i];
    if let Op::ConvTranspose {
        geom,
        output_padding,
        output_shape,
        ..
    } = &mut node.op
    {
        if (geom.auto_pad.is_some() || !output_shape.is_empty()) && shape.len() >= 3 {
            ir::shape::resolve_conv_transpose_pads(
                &node.name,
                geom,
                output_padding,
                output_shape,
                &shape[2..],
            )?;
            output_shape.clear();
        }
        return Ok(());
    }
    let geom = match &mut node.op {
        Op::Conv { geom, .. } | Op::MaxPool { geom, .. } | Op::AveragePool { geom, .. } => geom,
        _ => return Ok(()),
    };
    if geom.auto_pad.is_some() && shape.len() >= 3 {
        ir::shape::resolve_auto_pad(geom, &shape[2..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;
    use crate::ir::{BinaryOp, DType, Node, Placement, Value};

    #[test]
    fn shape_subgraph_folds_to_constant_reshape() {
        // x[1,2,3,4] -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape(x)
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 3, 4]);
        let mut g = b.finish(&[]);
        let mk = |g: &mut Graph, name: &str, dt: DType| {
            g.add_value(Value {
                name: name.into(),
                dtype: dt,
                shape: None,
                declared: None,
                konst: None,
            })
        };
        let shp = mk(&mut g, "shp", DType::I64);
        let idx = g.add_const("idx", Tensor::from_i64(vec![], vec![0]));
        let gat = mk(&mut g, "gat", DType::I64);
        let ax = g.add_const("ax", Tensor::from_i64(vec![1], vec![0]));
        let uns = mk(&mut g, "uns", DType::I64);
        let m1 = g.add_const("m1", Tensor::from_i64(vec![1], vec![-1]));
        let cat = mk(&mut g, "cat", DType::I64);
        let y = mk(&mut g, "y", DType::F32);
        let node = |name: &str, op: Op, ins: Vec<usize>, out: usize| Node {
            name: name.into(),
            op,
            inputs: ins.into_iter().map(Some).collect(),
            outputs: vec![out],
            absorbed: vec![name.into()],
            placement: Some(Placement::Bpu),
        };
        g.nodes = vec![
            node(
                "shape",
                Op::Shape {
                    start: 0,
                    end: None,
                },
                vec![x],
                shp,
            ),
            node("gather", Op::Gather { axis: 0 }, vec![shp, idx], gat),
            node("unsq", Op::Unsqueeze { axes: None }, vec![gat, ax], uns),
            node("concat", Op::Concat { axis: 0 }, vec![uns, m1], cat),
            node("reshape", Op::Reshape { allowzero: false }, vec![x, cat], y),
        ];
        g.outputs = vec![y];
        let folded = infer_and_fold(&mut g).unwrap();
        assert_eq!(folded, 4);
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.values[y].shape, Some(vec![1, 24]));
        let cat_v = g.values[cat].konst.as_ref().unwrap();
        assert_eq!(cat_v.to_i64_vec().unwrap(), vec![1, -1]);
        let input = vec![rand_vec(24, 1)];
        assert_eq!(run_graph(&g, &input), input);
    }

    #[test]
    fn constant_arithmetic_folds() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[3]);
        let a = b.konst("a", &[3], vec![1.0, 2.0, 3.0]);
        let c = b.konst("c", &[3], vec![1.0, 1.0, 1.0]);
        let s = b.node("sum", Op::Binary(BinaryOp::Add), &[a, c], &[3]);
        let y = b.node("mul", Op::Binary(BinaryOp::Mul), &[x, s], &[3]);
        let mut g = b.finish(&[y]);
        assert_eq!(infer_and_fold(&mut g).unwrap(), 1);
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(
            run_graph(&g, &[vec![1.0, 1.0, 2.0]]),
            vec![vec![2.0, 3.0, 8.0]]
        );
    }
}

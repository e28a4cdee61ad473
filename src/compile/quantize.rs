//! Int8 lowering of quantised (QDQ) graphs.
//!
//! DequantizeLinear nodes are never constant-folded by `fold` (the lowering needs the
//! integer weights behind them); [`fold_constant_dequantize`] evaluates the ones left on
//! constants once the lowering has taken what it can, so float ops get f32 weights.

use std::sync::Arc;

use super::rewrite::remove_nodes;
use crate::error::{Error, Result};
use crate::ir::{Graph, Op, Tensor};

/// Evaluates every DequantizeLinear whose inputs are all constant into an f32 constant
/// and removes the node. Returns the number of nodes folded.
pub fn fold_constant_dequantize(g: &mut Graph) -> Result<usize> {
    let mut folded = Vec::new();
    for i in 0..g.nodes.len() {
        let node = &g.nodes[i];
        if !matches!(node.op, Op::DequantizeLinear { .. }) {
            continue;
        }
        let inputs: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.values[v].konst.as_deref()))
            .collect();
        if node
            .inputs
            .iter()
            .zip(&inputs)
            .any(|(v, t)| v.is_some() && t.is_none())
        {
            continue;
        }
        let outs = crate::exec::eval_node(g, node, &inputs).map_err(|e| {
            Error::shape(
                &node.name,
                node.op.name(),
                format!("constant folding failed: {e}"),
            )
        })?;
        let ids = node.outputs.clone();
        for (o, t) in ids.into_iter().zip(outs) {
            g.values[o].konst = Some(Arc::new(t));
        }
        folded.push(i);
    }
    remove_nodes(g, &folded);
    Ok(folded.len())
}

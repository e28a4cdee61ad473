//! QuantizeLinear / DequantizeLinear insertion: turns the f32 graph into the QDQ form
//! `onnxruntime.quantization.quantize_static` writes, which the int8 lowering
//! (`compile::quantize`) then turns into int8 nodes.
//!
//! - Activations are quantised per tensor, u8 asymmetric: every f32 input and output of
//!   Conv, Gemm, MatMul, Add, MaxPool, AveragePool, GlobalAveragePool, Concat and
//!   Resize gets one `Q → DQ` pair that all its readers share. The output of a
//!   Conv/Gemm/MatMul/Add read only by a Relu/Clip is not quantised; the activation's
//!   output is (the lowering folds the activation into the clamp).
//! - Constant weights of Conv (axis 0), Gemm (axis 0 with transB, else 1) and MatMul
//!   (last axis) become s8 symmetric constants behind a DequantizeLinear, with one scale
//!   per output channel (or per tensor). Biases stay f32 (the lowering folds them).
//! - Everything else (Softmax, Sigmoid, LSTM, ...) stays in float on dequantised inputs.

use std::collections::{BTreeMap, HashSet};

use super::calibrate::QParams;
use crate::ir::{BinaryOp, DType, Graph, Node, Op, Tensor, TensorData, UnaryOp, Value, ValueId};

/// True for the operators whose activations are quantised.
fn quantisable(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv { .. }
            | Op::Gemm { .. }
            | Op::MatMul { .. }
            | Op::Binary(BinaryOp::Add)
            | Op::MaxPool { .. }
            | Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::Concat { .. }
            | Op::Resize { .. }
    )
}

/// Input positions of `op` that carry activations to quantise (constants are skipped by
/// the caller; weights are handled separately).
fn activation_inputs(op: &Op, n_inputs: usize) -> Vec<usize> {
    match op {
        Op::Conv { .. } => vec![0],
        Op::Gemm { .. } | Op::MatMul { .. } | Op::Binary(_) => vec![0, 1],
        Op::Concat { .. } => (0..n_inputs).collect(),
        _ => vec![0],
    }
}

/// The weight input of `op` and the axis of its output channels, for a weight of rank
/// `rank`.
fn weight_axis(op: &Op, rank: usize) -> Option<(usize, usize)> {
    match op {
        Op::Conv { .. } => Some((1, 0)),
        Op::Gemm { trans_b, .. } if rank == 2 => Some((1, if *trans_b { 0 } else { 1 })),
        Op::MatMul { .. } if rank >= 2 => Some((1, rank - 1)),
        _ => None,
    }
}

fn is_activation(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(UnaryOp::Relu) | Op::Unary(UnaryOp::Clip { .. })
    )
}

fn is_f32_activation(g: &Graph, v: ValueId) -> bool {
    let val = &g.values[v];
    val.konst.is_none() && val.dtype == DType::F32 && val.shape.is_some()
}

/// Operators that compute in int8 whatever their neighbours do.
fn computes(op: &Op) -> bool {
    matches!(op, Op::Conv { .. } | Op::Gemm { .. } | Op::MatMul { .. })
}

/// Operators that only move or clamp values: an int8 tensor stays int8 through them.
fn moves_data(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Transpose { .. }
            | Op::Split { .. }
            | Op::Slice
            | Op::Unary(UnaryOp::Relu)
            | Op::Unary(UnaryOp::Clip { .. })
    )
}

/// Float operators an int8 tensor's consumers may pass through on the way to an int8
/// op (the activations of conv blocks: SiLU as Sigmoid + Mul, HardSwish, ...).
fn passes_on(op: &Op) -> bool {
    moves_data(op) || matches!(op, Op::Unary(_) | Op::Binary(BinaryOp::Mul)) || quantisable(op)
}

/// True when `v` reaches a Conv/Gemm/MatMul through data movement, element-wise
/// activations and int8-capable ops only: quantising it then feeds an int8 op.
fn feeds_int8(g: &Graph, readers: &[Vec<usize>], v: ValueId, memo: &mut Vec<Option<bool>>) -> bool {
    if let Some(r) = memo[v] {
        return r;
    }
    memo[v] = Some(false);
    let mut found = false;
    for &r in &readers[v] {
        let n = &g.nodes[r];
        if computes(&n.op) {
            found = true;
        } else if passes_on(&n.op) {
            found = n.outputs.iter().any(|&o| feeds_int8(g, readers, o, memo));
        }
        if found {
            break;
        }
    }
    memo[v] = Some(found);
    found
}

/// The activation tensors to quantise, in a deterministic order.
///
/// An op is quantised (its activation inputs and its output) when its output feeds an
/// int8 op ([`feeds_int8`]: a last conv whose result only goes to float post-processing
/// stays float) and, for Add (of two activations), Concat, pooling and Resize, when one
/// of its inputs is already an int8 tensor (chosen, or derived from one by data
/// movement): quantising them elsewhere (box decoding, a concat of boxes and scores)
/// only loses precision. A graph output is never quantised: it stays f32.
pub fn select_tensors(g: &Graph) -> Vec<ValueId> {
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            readers[*v].push(i);
        }
    }
    let mut memo = vec![None; g.values.len()];
    let mut chosen = Vec::new();
    // Chosen values and values derived from them by data movement.
    let mut int8: HashSet<ValueId> = HashSet::new();
    let take = |v: ValueId, chosen: &mut Vec<ValueId>, int8: &mut HashSet<ValueId>| {
        if is_f32_activation(g, v) && !g.outputs.contains(&v) && int8.insert(v) {
            chosen.push(v);
        }
    };
    for n in &g.nodes {
        let acts: Vec<ValueId> = activation_inputs(&n.op, n.inputs.len())
            .into_iter()
            .filter_map(|p| n.inputs.get(p).copied().flatten())
            .filter(|&v| g.values[v].konst.is_none())
            .collect();
        let out = n.outputs.first().copied();
        // The output that would be quantised: past a Relu/Clip that alone reads it.
        let qout = out.map(|o| match readers[o].as_slice() {
            [r] if !g.outputs.contains(&o) && is_activation(&g.nodes[*r].op) => {
                g.nodes[*r].outputs.first().copied().unwrap_or(o)
            }
            _ => o,
        });
        let wanted = quantisable(&n.op)
            && qout.is_some_and(|o| feeds_int8(g, &readers, o, &mut memo))
            && (computes(&n.op)
                || match n.op {
                    Op::Binary(BinaryOp::Add) => {
                        acts.len() == 2 && acts.iter().any(|v| int8.contains(v))
                    }
                    _ => acts.iter().any(|v| int8.contains(v)),
                });
        if !wanted {
            if moves_data(&n.op)
                && n.inputs
                    .first()
                    .copied()
                    .flatten()
                    .is_some_and(|v| int8.contains(&v))
            {
                int8.extend(n.outputs.iter().copied());
            }
            continue;
        }
        for v in acts {
            take(v, &mut chosen, &mut int8);
        }
        if let Some(o) = qout {
            take(o, &mut chosen, &mut int8);
        }
    }
    chosen
}

/// Unique value names for the inserted tensors.
struct Names(HashSet<String>);

impl Names {
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while !self.0.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    }
}

fn scalar_f32(v: f32) -> Tensor {
    Tensor::new(vec![], TensorData::F32(vec![v]))
}

/// s8 symmetric quantisation of a constant weight along `axis` (one scale per index
/// of `axis`, or one in all when `axis` is `None`). Returns the s8 tensor and scales.
pub fn quantize_weight(w: &Tensor, axis: Option<usize>) -> (Tensor, Vec<f32>) {
    let x = w.to_f32_vec();
    let shape = &w.shape;
    let (channels, inner) = match axis {
        Some(a) => (shape[a], shape[a + 1..].iter().product::<usize>()),
        None => (1, x.len().max(1)),
    };
    let chan_of = |i: usize| (i / inner) % channels;
    let mut amax = vec![0f32; channels];
    for (i, &v) in x.iter().enumerate() {
        let c = chan_of(i);
        amax[c] = amax[c].max(v.abs());
    }
    let scales: Vec<f32> = amax
        .iter()
        .map(|&a| {
            if a > 0.0 && a.is_finite() {
                a / 127.0
            } else {
                1.0
            }
        })
        .collect();
    let q = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            (v / scales[chan_of(i)])
                .round_ties_even()
                .clamp(-127.0, 127.0) as i8
        })
        .collect();
    (Tensor::new(shape.clone(), TensorData::I8(q)), scales)
}

/// Inserts the Q/DQ pairs of `params` (activation tensors) and quantises the constant
/// weights of Conv/Gemm/MatMul nodes whose activation input and output are quantised
/// (the nodes the lowering turns into int8 ones). Returns the
/// number of nodes inserted.
pub fn insert_qdq(g: &mut Graph, params: &BTreeMap<ValueId, QParams>, per_channel: bool) -> usize {
    let mut names = Names(g.values.iter().map(|v| v.name.clone()).collect());
    let add = |g: &mut Graph, names: &mut Names, base: &str, dtype, shape| {
        let name = names.fresh(base);
        g.add_value(Value {
            name,
            dtype,
            shape: Some(shape),
            declared: None,
            konst: None,
        })
    };
    let konst = |g: &mut Graph, names: &mut Names, base: &str, t: Tensor| {
        let name = names.fresh(base);
        g.add_const(name, t)
    };
    // Activations: value -> its dequantised twin, and the pair to put after its producer.
    let mut twin: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    let mut pairs: BTreeMap<ValueId, [Node; 2]> = BTreeMap::new();
    for (&v, p) in params {
        let base = g.values[v].name.clone();
        let shape = g.values[v].shape.clone().unwrap_or_default();
        let s = konst(g, &mut names, &format!("{base}_scale"), scalar_f32(p.scale));
        let z = konst(
            g,
            &mut names,
            &format!("{base}_zero_point"),
            Tensor::new(vec![], TensorData::U8(vec![p.zero_point])),
        );
        let q = add(
            g,
            &mut names,
            &format!("{base}_quantized"),
            DType::U8,
            shape.clone(),
        );
        let dq = add(
            g,
            &mut names,
            &format!("{base}_dequantized"),
            DType::F32,
            shape,
        );
        let qn = Node {
            name: format!("{base}_QuantizeLinear"),
            op: Op::QuantizeLinear {
                axis: None,
                dtype: DType::U8,
            },
            inputs: vec![Some(v), Some(s), Some(z)],
            outputs: vec![q],
            absorbed: vec![],
            placement: None,
        };
        let dqn = Node {
            name: format!("{base}_DequantizeLinear"),
            op: Op::DequantizeLinear { axis: None },
            inputs: vec![Some(q), Some(s), Some(z)],
            outputs: vec![dq],
            absorbed: vec![],
            placement: None,
        };
        twin.insert(v, dq);
        pairs.insert(v, [qn, dqn]);
    }
    let dequantized: HashSet<ValueId> = twin.values().copied().collect();
    let mut inserted = 2 * pairs.len();
    let old = std::mem::take(&mut g.nodes);
    // Outputs quantised after a Relu/Clip that alone reads them.
    let quantised_after_act: HashSet<ValueId> = old
        .iter()
        .filter(|n| {
            is_activation(&n.op) && n.outputs.first().is_some_and(|o| params.contains_key(o))
        })
        .filter_map(|n| n.inputs.first().copied().flatten())
        .collect();
    let mut nodes = Vec::with_capacity(old.len() + inserted);
    // Pairs of graph inputs (and anything without a producer) go first.
    let produced: HashSet<ValueId> = old.iter().flat_map(|n| n.outputs.clone()).collect();
    let early: Vec<ValueId> = pairs
        .keys()
        .copied()
        .filter(|v| !produced.contains(v))
        .collect();
    for v in early {
        if let Some(p) = pairs.remove(&v) {
            nodes.extend(p);
        }
    }
    for mut n in old {
        for inp in n.inputs.iter_mut().flatten() {
            if let Some(&d) = twin.get(inp) {
                *inp = d;
            }
        }
        // Weights of int8-capable nodes whose activation input is quantised.
        let act_quantised = n
            .inputs
            .first()
            .copied()
            .flatten()
            .is_some_and(|v| dequantized.contains(&v))
            && n.outputs
                .first()
                .is_some_and(|o| params.contains_key(o) || quantised_after_act.contains(o));
        let rank = n
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|w| g.values[w].shape.as_ref().map(|s| s.len()))
            .unwrap_or(0);
        if let (true, Some((wi, axis))) = (act_quantised, weight_axis(&n.op, rank)) {
            if let Some(w) = n.inputs[wi] {
                let wt = g.values[w].konst.clone();
                if let Some(wt) = wt.filter(|t| t.dtype() == DType::F32) {
                    let base = g.values[w].name.clone();
                    let ax = per_channel.then_some(axis);
                    let (qt, scales) = quantize_weight(&wt, ax);
                    let shape = wt.shape.clone();
                    let (st, zt) = match ax {
                        Some(_) => (
                            Tensor::from_f32(vec![scales.len()], scales.clone()),
                            Tensor::new(vec![scales.len()], TensorData::I8(vec![0; scales.len()])),
                        ),
                        None => (
                            scalar_f32(scales[0]),
                            Tensor::new(vec![], TensorData::I8(vec![0])),
                        ),
                    };
                    let wq = konst(g, &mut names, &format!("{base}_quantized"), qt);
                    let s = konst(g, &mut names, &format!("{base}_scale"), st);
                    let z = konst(g, &mut names, &format!("{base}_zero_point"), zt);
                    let dq = add(
                        g,
                        &mut names,
                        &format!("{base}_dequantized"),
                        DType::F32,
                        shape,
                    );
                    nodes.push(Node {
                        name: format!("{base}_DequantizeLinear_{}", n.name),
                        op: Op::DequantizeLinear { axis: ax },
                        inputs: vec![Some(wq), Some(s), Some(z)],
                        outputs: vec![dq],
                        absorbed: vec![],
                        placement: None,
                    });
                    inserted += 1;
                    n.inputs[wi] = Some(dq);
                }
            }
        }
        let outs = n.outputs.clone();
        nodes.push(n);
        for o in outs {
            if let Some(p) = pairs.remove(&o) {
                nodes.extend(p);
            }
        }
    }
    g.nodes = nodes;
    inserted
}

//! Post-training quantisation (PTQ) of f32 models to int8, and quantised model inputs
//! and outputs at the API boundary ([`io`], [`io_calib`]).
//!
//! [`quantize_graph`] runs inside the compiler (`--quantize int8` /
//! `calibration_parameters`), after the input conversions and constant folding and
//! before fusion: it folds BatchNorm, runs the f32 graph over the calibration samples
//! ([`data`], [`calibrate`]), then inserts QuantizeLinear/DequantizeLinear pairs
//! ([`insert`]) that the int8 lowering (`compile::quantize`) turns into int8 nodes. PTQ
//! never builds int8 nodes itself.

pub mod calibrate;
pub mod data;
pub mod image;
pub mod insert;
pub mod io;
pub mod io_calib;
pub mod npy;

use std::collections::BTreeMap;

pub use calibrate::{choose_params, QParams, TensorStats};
pub use data::{calib_inputs, load_samples, CalibInput, Sample};

use crate::compile::config::{CalibrationType, QuantizeOptions};
use crate::compile::{CompileOptions, InputType};
use crate::error::Result;
use crate::ir::Graph;

/// What [`quantize_graph`] did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizeReport {
    /// Calibration samples run.
    pub samples: usize,
    /// Activation tensors quantised.
    pub tensors: usize,
    /// Nodes inserted (Q, DQ and weight DQ).
    pub inserted: usize,
}

/// The graph calibration runs: `g` with the input conversions of image / NHWC inputs
/// (`NAME__preprocess` nodes reading a graph input) bypassed, so it takes the ONNX input
/// tensors the samples hold; plus the calibration view of its inputs.
fn calibration_graph(g: &Graph, opts: &CompileOptions) -> (Graph, Vec<CalibInput>) {
    let mut c = g.clone();
    let mut drop = Vec::new();
    let mut inputs = Vec::new();
    for k in 0..c.inputs.len() {
        let raw = c.inputs[k];
        let name = c.values[raw].name.clone();
        let conv = c.nodes.iter().position(|n| {
            n.inputs.first() == Some(&Some(raw)) && n.name == format!("{name}__preprocess")
        });
        if let Some(i) = conv {
            c.inputs[k] = c.nodes[i].outputs[0];
            drop.push(i);
        }
        let v = &c.values[c.inputs[k]];
        inputs.push(CalibInput {
            name: name.clone(),
            dtype: v.dtype,
            shape: v.shape.clone().unwrap_or_default(),
            image: opts
                .inputs
                .iter()
                .find(|p| p.name == name && matches!(p.input_type, InputType::Image(_)))
                .cloned(),
        });
    }
    crate::compile::rewrite::remove_nodes(&mut c, &drop);
    (c, inputs)
}

/// Quantises `g` in place: calibration over `q.cal_data_dir`, then Q/DQ insertion.
pub fn quantize_graph(
    g: &mut Graph,
    opts: &CompileOptions,
    q: &QuantizeOptions,
) -> Result<QuantizeReport> {
    // BatchNorm must be folded first, or its input and output would be quantised apart.
    loop {
        let changed = crate::compile::simplify::remove_identities(g)
            + crate::compile::fuse::fold_batchnorm(g);
        if changed == 0 {
            break;
        }
    }
    let (cg, inputs) = calibration_graph(g, opts);
    let samples = load_samples(&q.cal_data_dir, &inputs)?;
    let values = insert::select_tensors(g);
    let hist = !matches!(q.calibration_type, CalibrationType::Max);
    let stats = calibrate::collect(&cg, &samples, &values, hist)?;
    let params: BTreeMap<_, _> = stats
        .iter()
        .map(|(&v, st)| (v, choose_params(st, q.calibration_type)))
        .collect();
    let inserted = insert::insert_qdq(g, &params, q.per_channel);
    Ok(QuantizeReport {
        samples: samples.len(),
        tensors: params.len(),
        inserted,
    })
}

#[cfg(test)]
mod tests;

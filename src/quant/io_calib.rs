//! Calibration of quantised outputs: runs the float model (as imported, before the input
//! conversions) on the calibration samples of [`super::data`] and returns each output's
//! max-abs per channel, from which [`super::io`] derives symmetric scales.

use crate::compile::{fold, quantize, simplify, CompileOptions, MemoryBudget};
use crate::error::{Error, Result};
use crate::ir::Graph;

use super::io::{collect_output_ranges, CalibrationRanges};

/// The max-abs ranges of the outputs `axes` asks for (see
/// [`collect_output_ranges`]), over the samples in `opts.calibration_data` (else those
/// of `opts.quantize`). `imported`
/// is the graph as imported, whose inputs the samples are.
pub fn calibrate_outputs(
    imported: &Graph,
    opts: &CompileOptions,
    budget: &MemoryBudget,
    axes: &[Option<usize>],
) -> Result<CalibrationRanges> {
    let dir = opts
        .calibration_data
        .as_deref()
        .or(opts.quantize.as_ref().map(|q| q.cal_data_dir.as_path()))
        .ok_or_else(|| Error::CompileOption {
            option: "calibration_data".into(),
            reason: "no calibration directory given".into(),
        })?;
    let inputs = super::calib_inputs(imported, opts)?;
    let samples = super::load_samples(dir, &inputs)?;
    let mut g = imported.clone();
    fold::infer_and_fold_within(&mut g, budget)?;
    quantize::fold_constant_dequantize(&mut g)?;
    simplify::eliminate_dead_nodes(&mut g);
    let raw: Vec<Vec<Vec<u8>>> = samples
        .iter()
        .map(|s| s.inputs.iter().map(|t| t.bytes().to_vec()).collect())
        .collect();
    collect_output_ranges(&g, axes, &raw)
}

//! Range collection: runs the f32 graph over the calibration samples and records, for
//! every tensor that will be quantised, its min / max and (for `percentile` and `kl`) a
//! histogram of |x|; then turns them into u8 asymmetric quantisation parameters.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::data::Sample;
use crate::compile::config::CalibrationType;
use crate::error::{Error, Result};
use crate::exec::{ModelPlan, PlanOptions, Tile};
use crate::ir::{Graph, ValueId};

/// Bins of the |x| histogram (as TensorRT's entropy calibrator).
pub const HIST_BINS: usize = 2048;

/// What calibration saw of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorStats {
    /// Smallest value seen.
    pub min: f32,
    /// Largest value seen.
    pub max: f32,
    /// Histogram of |x| over `[0, max(|min|, |max|)]` in [`HIST_BINS`] bins (empty when
    /// only the range was collected).
    pub hist: Vec<u64>,
}

impl TensorStats {
    fn new() -> Self {
        TensorStats {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            hist: Vec::new(),
        }
    }

    /// Largest |x| seen.
    pub fn amax(&self) -> f32 {
        self.min.abs().max(self.max.abs())
    }

    fn add_range(&mut self, x: &[f32]) {
        for &v in x.iter().filter(|v| v.is_finite()) {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
    }

    fn add_hist(&mut self, x: &[f32]) {
        let amax = self.amax();
        if self.hist.is_empty() {
            self.hist = vec![0; HIST_BINS];
        }
        if amax <= 0.0 || !amax.is_finite() {
            self.hist[0] += x.len() as u64;
            return;
        }
        let k = HIST_BINS as f32 / amax;
        for &v in x.iter().filter(|v| v.is_finite()) {
            let b = ((v.abs() * k) as usize).min(HIST_BINS - 1);
            self.hist[b] += 1;
        }
    }
}

/// Quantisation parameters of one activation tensor (u8 asymmetric).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QParams {
    /// Scale (> 0).
    pub scale: f32,
    /// Zero point.
    pub zero_point: u8,
}

/// u8 asymmetric parameters of the range `[lo, hi]` (widened to include 0, as
/// onnxruntime does: `scale = (hi - lo) / 255`, `zp = round(-lo / scale)`).
pub fn u8_params(lo: f32, hi: f32) -> QParams {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = (hi - lo) / 255.0;
    if !(scale > 0.0 && scale.is_finite()) {
        return QParams {
            scale: 1.0,
            zero_point: 0,
        };
    }
    let zp = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as u8;
    QParams {
        scale,
        zero_point: zp,
    }
}

/// The |x| threshold at the `pct` percentile of the histogram.
fn percentile_threshold(st: &TensorStats, pct: f32) -> f32 {
    let total: u64 = st.hist.iter().sum();
    let width = st.amax() / HIST_BINS as f32;
    if total == 0 {
        return st.amax();
    }
    let want = (f64::from(pct) / 100.0 * total as f64).ceil() as u64;
    let mut acc = 0;
    for (i, &c) in st.hist.iter().enumerate() {
        acc += c;
        if acc >= want {
            return (i + 1) as f32 * width;
        }
    }
    st.amax()
}

/// KL divergence of `p` from `q` (both unnormalised).
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp == 0.0 || sq == 0.0 {
        return f64::INFINITY;
    }
    let mut d = 0.0;
    for (&a, &b) in p.iter().zip(q) {
        if a > 0.0 {
            let (a, b) = (a / sp, b / sq);
            if b <= 0.0 {
                return f64::INFINITY;
            }
            d += a * (a / b).ln();
        }
    }
    d
}

/// Gives empty bins a tiny share taken from the others (as onnxruntime's
/// `smooth_distribution`), so the divergence stays finite.
fn smooth(q: &mut [f64]) {
    const EPS: f64 = 1e-4;
    let total: f64 = q.iter().sum();
    let zeros = q.iter().filter(|&&c| c == 0.0).count();
    let nonzero = q.len() - zeros;
    if total <= 0.0 || zeros == 0 || nonzero == 0 {
        return;
    }
    let take = EPS * zeros as f64 / nonzero as f64;
    for c in q.iter_mut() {
        *c = if *c == 0.0 {
            EPS * total
        } else {
            (*c - take * total).max(EPS * total)
        };
    }
}

/// The |x| threshold minimising the KL divergence between the clipped histogram and
/// its quantisation into `levels` bins (TensorRT's entropy calibration).
fn kl_threshold(st: &TensorStats, levels: usize) -> f32 {
    let hist: Vec<f64> = st.hist.iter().map(|&c| c as f64).collect();
    let width = st.amax() / HIST_BINS as f32;
    let mut best = (f64::INFINITY, HIST_BINS);
    for i in levels..=HIST_BINS {
        // Reference: the first i bins with the clipped tail added to the last one.
        let mut p = hist[..i].to_vec();
        p[i - 1] += hist[i..].iter().sum::<f64>();
        // Candidate: the first i bins merged into `levels` bins, spread back evenly over
        // the non-empty source bins.
        let mut q = vec![0.0; i];
        for l in 0..levels {
            let (a, b) = (
                l * i / levels,
                ((l + 1) * i / levels).max(l * i / levels + 1),
            );
            let src = &hist[a..b.min(i)];
            let nonzero = src.iter().filter(|&&c| c > 0.0).count();
            if nonzero == 0 {
                continue;
            }
            let v = src.iter().sum::<f64>() / nonzero as f64;
            for (k, &c) in src.iter().enumerate() {
                if c > 0.0 {
                    q[a + k] = v;
                }
            }
        }
        smooth(&mut q);
        let d = kl_divergence(&p, &q);
        if d < best.0 {
            best = (d, i);
        }
    }
    best.1 as f32 * width
}

/// The quantisation parameters calibration chooses for one tensor.
pub fn choose_params(st: &TensorStats, how: CalibrationType) -> QParams {
    if !(st.min.is_finite() && st.max.is_finite()) {
        return u8_params(0.0, 0.0);
    }
    let t = match how {
        CalibrationType::Max => return u8_params(st.min, st.max),
        _ if st.hist.is_empty() => return u8_params(st.min, st.max),
        CalibrationType::Percentile(p) => percentile_threshold(st, p),
        // A non-negative tensor uses all 256 levels on [0, T]; a signed one 128 a side.
        CalibrationType::Kl => kl_threshold(st, if st.min >= 0.0 { 256 } else { 128 }),
    };
    u8_params(st.min.max(-t), st.max.min(t))
}

/// Copies `b` into `out` as native-endian f32.
fn as_f32(b: &[u8], out: &mut Vec<f32>) {
    out.clear();
    out.extend(
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// Runs `g` (f32, inputs as in the samples) over every sample and collects statistics
/// of `values`. `hist` adds a second pass for the |x| histograms.
pub fn collect(
    g: &Graph,
    samples: &[Sample],
    values: &[ValueId],
    hist: bool,
) -> Result<BTreeMap<ValueId, TensorStats>> {
    let graph = Arc::new(g.clone());
    let plan = ModelPlan::new(graph.clone(), &PlanOptions::default())?;
    let mut st = plan.new_state();
    let mut stats: BTreeMap<ValueId, TensorStats> =
        values.iter().map(|&v| (v, TensorStats::new())).collect();
    let mut buf = Vec::new();
    for pass in 0..if hist { 2 } else { 1 } {
        for s in samples {
            if s.inputs.len() != g.inputs.len() {
                return Err(Error::CompileOption {
                    option: "calibration_data".into(),
                    reason: format!(
                        "sample '{}' has {} inputs, the model {}",
                        s.name,
                        s.inputs.len(),
                        g.inputs.len()
                    ),
                });
            }
            let mut record = |v: ValueId, bytes: &[u8], buf: &mut Vec<f32>| {
                if let Some(t) = stats.get_mut(&v) {
                    as_f32(bytes, buf);
                    if pass == 0 {
                        t.add_range(buf);
                    } else {
                        t.add_hist(buf);
                    }
                }
            };
            for (k, t) in s.inputs.iter().enumerate() {
                plan.set_input(&mut st, k, t.bytes())?;
                record(g.inputs[k], t.bytes(), &mut buf);
            }
            for (i, n) in graph.nodes.iter().enumerate() {
                plan.run_node(&mut st, i, Tile::WHOLE)?;
                for (k, &o) in n.outputs.iter().enumerate() {
                    if let Some(b) = plan.node_output(&st, i, k) {
                        record(o, b, &mut buf);
                    }
                }
            }
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_of(x: &[f32]) -> TensorStats {
        let mut s = TensorStats::new();
        s.add_range(x);
        s.add_hist(x);
        s
    }

    #[test]
    fn u8_params_follow_onnxruntime() {
        let p = u8_params(-1.0, 3.0);
        assert!((p.scale - 4.0 / 255.0).abs() < 1e-7);
        assert_eq!(p.zero_point, 64);
        let p = u8_params(0.5, 2.0);
        assert_eq!(p.zero_point, 0);
        assert!((p.scale - 2.0 / 255.0).abs() < 1e-7);
        assert_eq!(u8_params(0.0, 0.0).scale, 1.0);
    }

    #[test]
    fn percentile_and_kl_clip_a_rare_outlier() {
        // 10000 values in [0, 10) plus one outlier at 100.
        let mut x: Vec<f32> = (0..10000).map(|i| (i % 1000) as f32 / 100.0).collect();
        x.push(100.0);
        let s = stats_of(&x);
        let m = choose_params(&s, CalibrationType::Max);
        assert!((m.scale * 255.0 - 100.0).abs() < 1e-3);
        let p = choose_params(&s, CalibrationType::Percentile(99.9));
        assert!(p.scale * 255.0 < 10.5 && p.scale * 255.0 > 9.5, "{p:?}");
        let k = choose_params(&s, CalibrationType::Kl);
        assert!(k.scale * 255.0 < 13.0 && k.scale * 255.0 >= 9.0, "{k:?}");
        assert_eq!(k.zero_point, 0);
    }

    #[test]
    fn kl_keeps_the_range_of_a_uniform_signed_tensor() {
        let x: Vec<f32> = (0..20000).map(|i| (i as f32 / 10000.0) - 1.0).collect();
        let s = stats_of(&x);
        let k = choose_params(&s, CalibrationType::Kl);
        let span = k.scale * 255.0;
        assert!(span > 1.6 && span <= 2.0 + 1e-3, "{k:?}");
        assert!((i32::from(k.zero_point) - 128).abs() <= 2, "{k:?}");
    }
}

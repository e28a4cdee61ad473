//! Cost model: node times measured by running our own kernels on the compiling host.
//!
//! Every node is run a few times on deterministic inputs and its best time kept; a node
//! the partitioner tiles is measured tile by tile. Measuring beats a formula: it
//! captures the real kernel (SIMD path, cache behaviour) the cores will execute.
//!
//! Times are the compiling thread's CPU time, so that another process taking the CPU
//! during the compile does not inflate them, and the best over every compile on this
//! host is kept in the per-host cost cache when a cache folder is configured
//! ([`super::cost_cache`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
#[cfg(not(unix))]
use std::time::Instant;

use super::cost_cache::{step_key, CostCache};

use crate::exec::{ExecState, ModelPlan, Tile};
#[cfg(feature = "test-ops")]
use crate::ir::Op;
use crate::ir::{DType, Graph};

/// Fallback estimate (µs) for a node that cannot be measured (e.g. the test `Fail` op).
const UNMEASURED_US: f64 = 1.0;

/// Measures node times on the compiling host.
pub struct CostModel<'a> {
    plan: &'a ModelPlan,
    graph: &'a Graph,
    state: ExecState,
    /// The deterministic input bytes, set again before a pass reaches a node that reads
    /// a graph input (as an inference sets its inputs right before its first FC).
    inputs: Vec<Vec<u8>>,
    repeats: usize,
    cache: Option<&'a mut CostCache>,
}

impl<'a> CostModel<'a> {
    /// Prepares a state with deterministic inputs; `repeats` ≥ 1 runs per measurement.
    pub fn new(graph: &'a Graph, plan: &'a ModelPlan, repeats: usize) -> CostModel<'a> {
        let mut state = plan.new_state();
        let mut inputs = Vec::with_capacity(graph.inputs.len());
        for (i, &v) in graph.inputs.iter().enumerate() {
            let len = plan.input_len(i);
            let bytes: Vec<u8> = match graph.values[v].dtype {
                DType::F32 => {
                    let n = len / 4;
                    let vals: Vec<f32> = (0..n)
                        .map(|k| ((k * 7919) % 1000) as f32 / 1000.0)
                        .collect();
                    bytemuck::cast_slice(&vals).to_vec()
                }
                DType::U8 => (0..len).map(|k| (k % 251) as u8).collect(),
                _ => vec![0u8; len],
            };
            // Inputs of the wrong size cannot happen here: lengths come from the plan.
            let _ = plan.set_input(&mut state, i, &bytes);
            inputs.push(bytes);
        }
        CostModel {
            plan,
            graph,
            state,
            inputs,
            repeats: repeats.max(1),
            cache: None,
        }
    }

    /// The same model, refining its figures with the best ones of earlier compiles on
    /// this host (and recording its own).
    pub fn with_cache(mut self, cache: &'a mut CostCache) -> CostModel<'a> {
        self.cache = Some(cache);
        self
    }

    /// Times in µs of tiles `0..count` of `node` run in order, each once per pass, as
    /// an FC runs them: each tile meets the caches its predecessor left (a tile
    /// repeated in place finds its own data hot, and a tile of a node larger than the
    /// caches ran up to 2.7x faster that way than in an inference). Best of `repeats`
    /// passes per tile, refined by the host's cost cache; [`UNMEASURED_US`] for a tile
    /// that fails. The previous nodes must have run once so that the node's inputs hold
    /// data ([`CostModel::measure_all`] does that).
    ///
    /// Each pass starts with the node before it, run whole: tile 0 then meets the caches
    /// an inference leaves it, not those of the node's own last tile (its input and
    /// scratch hot: the first tiles of DBNet's 160x160 neck and head convs were
    /// estimated 26-37 % below their time in the model).
    pub fn measure_tiles(&mut self, node: usize, count: usize) -> Vec<f64> {
        let mut best = vec![Some(f64::INFINITY); count];
        for _ in 0..self.repeats {
            if let Some(prev) = node.checked_sub(1) {
                self.refresh_inputs_for(prev);
                let _ = self.run_once(prev, Tile::WHOLE);
            }
            self.refresh_inputs_for(node);
            for (index, b) in best.iter_mut().enumerate() {
                let t = self.run_once(node, Tile { index, count });
                *b = b.zip(t).map(|(b, t)| b.min(t));
            }
        }
        best.into_iter()
            .enumerate()
            .map(|(index, b)| match b {
                Some(b) => self.recorded(node, Tile { index, count }, b),
                None => UNMEASURED_US,
            })
            .collect()
    }

    /// Whole-node times of every node: the best of `repeats` passes over the nodes in
    /// execution order, so that each node meets the caches as it does in an inference
    /// (its weights and inputs not left hot by a repetition of itself).
    pub fn measure_all(&mut self) -> Vec<f64> {
        let n = self.graph.nodes.len();
        // `None` once a run of the node failed.
        let mut best = vec![Some(f64::INFINITY); n];
        for _ in 0..self.repeats {
            for (node, b) in best.iter_mut().enumerate() {
                self.refresh_inputs_for(node);
                let t = self.run_once(node, Tile::WHOLE);
                *b = b.zip(t).map(|(b, t)| b.min(t));
            }
        }
        best.into_iter()
            .enumerate()
            .map(|(node, b)| match b {
                Some(b) => self.recorded(node, Tile::WHOLE, b),
                None => UNMEASURED_US,
            })
            .collect()
    }

    /// Sets the graph inputs again when `node` reads one, so that it meets them as it does
    /// in an inference (just written by `set_input`), not as the previous pass left them.
    /// (YOLOX-tiny's input slices were estimated at 445 µs against 265 measured: 68 %.)
    fn refresh_inputs_for(&mut self, node: usize) {
        let reads_input = self.graph.nodes[node]
            .inputs
            .iter()
            .flatten()
            .any(|v| self.graph.inputs.contains(v));
        if reads_input {
            for (i, bytes) in self.inputs.iter().enumerate() {
                let _ = self.plan.set_input(&mut self.state, i, bytes);
            }
        }
    }

    /// One timed run of `tile` of `node` in µs (`None` when it fails).
    fn run_once(&mut self, node: usize, tile: Tile) -> Option<f64> {
        #[cfg(feature = "test-ops")]
        if let Op::Spin { micros } = self.graph.nodes[node].op {
            return Some(micros as f64 / tile.count as f64);
        }
        let t0 = thread_cpu_us();
        let plan = self.plan;
        let state = &mut self.state;
        let ok = catch_unwind(AssertUnwindSafe(|| {
            plan.run_node(state, node, tile).is_ok()
        }))
        .unwrap_or(false);
        let dt = thread_cpu_us() - t0;
        ok.then_some(dt)
    }

    /// `best`, refined by (and recorded in) the host's cost cache.
    fn recorded(&mut self, node: usize, tile: Tile, best: f64) -> f64 {
        match self.cache.as_deref_mut() {
            Some(c) => {
                // A Concat with inputs in place copies less than one of the same shapes
                // without: a key of its own.
                let mut key = match self.plan.inputs_in_place(node) {
                    0 => step_key(self.graph, node, tile),
                    k => step_key(self.graph, node, tile) ^ (k as u64).wrapping_mul(K_IN_PLACE),
                };
                if tile.count > 1 {
                    // Tiles timed in order, apart from the in-place figures that earlier
                    // versions recorded under the plain key (a cache keeps the minimum).
                    key ^= K_TILES_IN_ORDER;
                }
                c.best(key, best)
            }
            None => best,
        }
    }
}

/// Mixes the number of in-place inputs into a step key.
const K_IN_PLACE: u64 = 0x9E37_79B9_7F4A_7C15;
/// Marks the key of a tile timed in order ([`CostModel::measure_tiles`]).
const K_TILES_IN_ORDER: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// CPU time of the calling thread in µs (time the thread was not running, e.g. while
/// another process had its CPU, does not count). Also what the benches time kernels with.
#[cfg(unix)]
pub fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on every
    // unix vnpu supports, and on failure `ts` stays zero (the measurement reads 0).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

/// Wall time in µs since the first call (no thread clock on this target).
#[cfg(not(unix))]
pub fn thread_cpu_us() -> f64 {
    static START: once_cell::sync::Lazy<Instant> = once_cell::sync::Lazy::new(Instant::now);
    START.elapsed().as_secs_f64() * 1e6
}

/// Relative costs of the Winograd path, in direct-conv multiply-accumulates (the im2col
/// GEMM runs near peak): per input channel of a tile and transform point (gather +
/// `Bᵀ d B`), per output channel of a tile and point (`Aᵀ m A` + scatter), and per
/// multiply-accumulate of the point GEMMs (on `NR`-tile panels, with the transformed
/// weights streamed per block). Fitted on thread CPU times of `bench/winograd_bench.rs`
/// (AVX2, 16 to 512 channels, F(4x4) and F(2x2)).
const WINO_IN_PER_POINT: f64 = 28.0;
const WINO_OUT_PER_POINT: f64 = 15.0;
const WINO_GEMM_MAC: f64 = 0.8;
/// The Winograd path is chosen when its estimate is below this fraction of the direct
/// conv's (a margin for the estimate's error).
const WINO_MARGIN: f64 = 0.85;
/// What each element of the im2col matrix (`9 * c_in` rows by the output positions) adds
/// to the im2col GEMM, in its multiply-accumulates: its gather and packing, which weigh
/// most when few output channels share each element. Fitted on `winograd_bench` (Zen 3,
/// AVX2 table, thread CPU: time ~ MACs + 8.5 x elements over 16 to 512 channels, e.g.
/// 16->16 at 160x160 1.88 ms against 3.35 ms for 64->64 at 56x56 with twice the MACs).
/// Counted only where the table has no direct f32 conv tile, which is the shallow convs'
/// alternative there.
const IM2COL_PER_ELEM: f64 = 8.5;

/// True when the Winograd path should beat the im2col GEMM on conv `s`: the estimate
/// counts the point GEMMs over `NR`-padded tile panels (with the tile side the path
/// picks) plus the two transforms (per tile, channel and point), against the direct
/// conv's multiply-accumulates (plus the im2col matrix's gather, [`IM2COL_PER_ELEM`]).
pub fn winograd_wins(s: &crate::kernels::conv::ConvShape) -> bool {
    use crate::kernels::conv::WinogradPlan;
    use crate::kernels::gemm::{MR, NR};
    if !WinogradPlan::wins(s) {
        return false;
    }
    let t = WinogradPlan::tile_for(s);
    let points = ((t + 2) * (t + 2)) as f64;
    let tiles = WinogradPlan::tiles(s, t);
    let padded = (tiles.div_ceil(NR) * NR) as f64;
    let (ci, co) = (s.c_in as f64, (s.c_out.div_ceil(MR) * MR) as f64);
    let gemm = points * ci * co * padded * WINO_GEMM_MAC;
    let transforms =
        tiles as f64 * points * (ci * WINO_IN_PER_POINT + s.c_out as f64 * WINO_OUT_PER_POINT);
    let mut direct = (s.macs() / s.n.max(1)) as f64;
    if crate::kernels::isa::table().conv_tiles.is_none() {
        direct += IM2COL_PER_ELEM * (s.k() * s.oh * s.ow) as f64;
    }
    gemm + transforms < WINO_MARGIN * direct
}

#[cfg(all(test, feature = "test-ops"))]
mod tests {
    use super::*;
    use crate::exec::PlanOptions;
    use crate::ir::{Node, Placement, Value};
    use std::sync::Arc;

    /// One Spin node of `micros` on a four-float input.
    fn spin_graph(micros: u64) -> Graph {
        let mut g = Graph::default();
        let mut val = |name: &str| {
            g.add_value(Value {
                name: name.into(),
                dtype: DType::F32,
                shape: Some(vec![1, 4]),
                declared: None,
                konst: None,
            })
        };
        let (x, y) = (val("x"), val("y"));
        g.inputs = vec![x];
        g.outputs = vec![y];
        g.nodes.push(Node {
            name: "spin".into(),
            op: Op::Spin { micros },
            inputs: vec![Some(x)],
            outputs: vec![y],
            absorbed: vec![],
            placement: Some(Placement::Bpu),
        });
        g
    }

    // Every tile of a node gets its own figure, in tile order, and figures recorded
    // under the plain step keys (the in-place tile times of earlier versions, which a
    // cache keeps as minima) do not lower them.
    #[test]
    fn tiles_are_timed_in_order_under_keys_of_their_own() {
        let g = spin_graph(900);
        let plan = ModelPlan::new(Arc::new(g.clone()), &PlanOptions::default()).expect("plan");
        let mut cache = CostCache::default();
        for index in 0..3 {
            cache.best(step_key(&g, 0, Tile { index, count: 3 }), 1.0);
        }
        let mut cost = CostModel::new(&g, &plan, 2).with_cache(&mut cache);
        assert_eq!(cost.measure_tiles(0, 3), vec![300.0; 3]);
        assert_eq!(cost.measure_tiles(0, 2), vec![450.0; 2]);
    }
}

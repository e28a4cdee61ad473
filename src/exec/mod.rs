//! Execution engine: turns a compiled, statically shaped [`ir::Graph`] into an immutable
//! [`ModelPlan`] (kernels chosen, weights packed, memory planned) and runs its nodes on a
//! per-task [`ExecState`].
//!
//! Invariants:
//! 1. Everything that can fail for a given graph (unsupported op/dtype, bad attribute,
//!    inconsistent shapes) fails in [`ModelPlan::new`]; [`ModelPlan::run_node`] only
//!    fails on data errors (e.g. an out-of-range Gather index), on the `Fail` test op,
//!    or on API misuse (bad node index or tile).
//! 2. One arena per state holds every runtime tensor; offsets come from a liveness-based
//!    plan ([`memplan`]). Graph inputs and outputs have slots that nothing else reuses.
//!    The outputs of one node form one contiguous block that never overlaps its inputs,
//!    so a node reads inputs from the arena on either side of the block it writes. The
//!    exceptions never read the inputs that lie in their block: a zero-copy Concat
//!    (their producers wrote them there) and a view (a Reshape or leading-axis Split
//!    whose outputs are its input's bytes); see `PlanOptions::concat_zero_copy`.
//! 3. `run_node` does not allocate: scratch memory is sized at plan time and lives in
//!    the state.
//! 4. Tiles `0..count` of a node, run in order, compute disjoint parts of its outputs
//!    and together equal one `Tile::WHOLE` run bit for bit. A dense conv splits its output
//!    positions when the plane is larger than the channel count, else its output channels
//!    (depthwise / grouped convs and ConvTranspose split channels / groups); Gemm and
//!    MatMul split rows of C when there are more rows than columns, else columns;
//!    Attention splits (head, block of query rows) pairs; pools,
//!    norms and element-wise ops split planes, rows or element ranges. Work that every tile of a node would repeat
//!    (packing the im2col matrix of a channel-split conv) is done by tile 0 and kept in
//!    the state for the following tiles, so tiles must run in order starting at 0.

pub mod memplan;
mod plan;
pub mod pool;

use crate::error::{Error, Result};
use crate::huge_pages::HugeVec;
use crate::ir::{self, DType, Graph, Tensor, TensorData};
use crate::kernels::simd::{self, Isa};
use plan::NodePlan;
pub use plan::{PackGeometry, PackedWeights};
use std::sync::Arc;
use std::time::Instant;

/// Options for building a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Threads one node may use (default 1 = the calling core's thread only). With more,
    /// large one-image convolutions (dense and depthwise) and Gemm / MatMul with a constant
    /// B run whole nodes as up to that many chunks of ≥ `pool::MIN_CHUNK_US` estimated
    /// work (output-channel ranges; rows, or columns of a one-row product), shared between
    /// the calling thread and the process's persistent helper pool ([`pool`]: one helper
    /// per host CPU but one, started with the first such plan); results are bit-identical
    /// to one thread. Chunks go to a helper only when it is free, the calling thread runs
    /// top-class work (a core's FC of the highest live priority, or a thread outside the
    /// scheduler) and a CPU runs only lower-priority work or is idle; else the calling
    /// thread runs them itself. Nothing allocates per run.
    pub intra_op_threads: usize,
    /// Record per-node elapsed time in the state.
    pub profile: bool,
    /// Zero-copy layout (default true): where a Concat's output is its inputs end to end,
    /// the nodes making those inputs write them straight into their slice of the output
    /// and the Concat copies only the rest (see [`ModelPlan::inputs_in_place`]); the
    /// outputs of a Reshape, Flatten, Squeeze, Unsqueeze or leading-axis Split are its
    /// input's bytes (nothing copied). False copies every input, for comparing both
    /// ways; results are bit-identical.
    pub concat_zero_copy: bool,
    /// Compute precision of dense convs and of Gemm / MatMul with a constant B
    /// (`VNPU_PRECISION`); everything else, and every tensor between nodes, stays f32.
    pub precision: Precision,
}

/// Compute precision of the GEMM-based nodes of a plan ([`PlanOptions::precision`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Precision {
    /// f32 products (the default).
    #[default]
    F32,
    /// bf16 × bf16 products accumulated in f32 (`vdpbf16ps`): weights rounded to bf16
    /// when the plan is built, activations when they are packed; bias, post-ops and
    /// residuals in f32. Needs a CPU with AVX512_BF16 (else the plan is refused).
    Bf16,
}

impl Precision {
    /// The precision named `s` (`f32`, `bf16`; empty = f32), if any.
    pub fn parse(s: &str) -> Option<Precision> {
        match s.trim() {
            "" | "f32" => Some(Precision::F32),
            "bf16" => Some(Precision::Bf16),
            _ => None,
        }
    }

    /// The precision's name, as [`parse`](Self::parse) reads it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// True when this CPU can compute in this precision (bf16: a bf16 kernel table).
    pub fn available(self) -> bool {
        self == Precision::F32 || crate::kernels::bf16::native().is_some()
    }

    /// The bf16 kernels a plan of this precision uses: `None` for f32; for bf16 the
    /// AVX512_BF16 table, or [`Error::Config`] on a CPU without it.
    pub fn bf16_table(self) -> Result<Option<&'static crate::kernels::bf16::Bf16Table>> {
        match self {
            Precision::F32 => Ok(None),
            Precision::Bf16 => {
                let wanted = crate::config::choice("VNPU_BF16_KERNELS").ok().flatten();
                crate::kernels::bf16::native()
                    .map(Some)
                    .ok_or_else(|| match wanted {
                        Some(k) => Error::Config {
                            name: "VNPU_BF16_KERNELS".into(),
                            value: k.into(),
                            reason: format!(
                                "this CPU lacks the {k} kernels (amx-bf16 needs AMX-BF16 and \
                                 the kernel's permission, avx512-bf16 AVX512_BF16): leave \
                                 VNPU_BF16_KERNELS unset"
                            ),
                        },
                        None => Error::Config {
                            name: "VNPU_PRECISION".into(),
                            value: "bf16".into(),
                            reason: "bf16 compute needs a CPU with AVX512_BF16 (and AVX-512 \
                                     F/BW/VL); this one lacks it: leave VNPU_PRECISION unset \
                                     or f32"
                                .into(),
                        },
                    })
            }
        }
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            intra_op_threads: 1,
            profile: false,
            concat_zero_copy: true,
            precision: Precision::F32,
        }
    }
}

/// Most intra-op threads a plan accepts.
pub const MAX_INTRA_OP_THREADS: usize = 64;

impl PlanOptions {
    /// The defaults, with `intra_op_threads` from `VNPU_INTRA_OP_THREADS` and `precision`
    /// from `VNPU_PRECISION` when set.
    pub fn from_env() -> Result<PlanOptions> {
        Self::from_lookup(crate::config::lookup)
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`. A value
    /// outside `1..=64`, or a precision other than `f32` / `bf16` (empty = f32), is an
    /// [`Error::Config`] naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<PlanOptions> {
        let mut o = PlanOptions::default();
        if let Some(v) = lookup("VNPU_INTRA_OP_THREADS") {
            o.intra_op_threads = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_INTRA_OP_THREADS).contains(n))
                .ok_or_else(|| Error::Config {
                    name: "VNPU_INTRA_OP_THREADS".into(),
                    value: v.clone(),
                    reason: format!("expected an integer in 1..={MAX_INTRA_OP_THREADS}"),
                })?;
        }
        if let Some(v) = lookup("VNPU_PRECISION") {
            o.precision = Precision::parse(&v).ok_or_else(|| Error::Config {
                name: "VNPU_PRECISION".into(),
                value: v.clone(),
                reason: "expected one of: f32, bf16".into(),
            })?;
        }
        Ok(o)
    }

    /// [`from_env`](Self::from_env) for a model whose FC times were measured in
    /// `timed`: without `VNPU_PRECISION`, the plan computes in `timed` where this CPU
    /// can (else in f32).
    pub fn for_model(timed: Precision) -> Result<PlanOptions> {
        Self::for_model_with(timed, crate::config::lookup)
    }

    /// [`for_model`](Self::for_model), reading variables through `lookup`.
    pub fn for_model_with(
        timed: Precision,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<PlanOptions> {
        let set = lookup("VNPU_PRECISION").is_some();
        let mut o = Self::from_lookup(lookup)?;
        if !set && timed.available() {
            o.precision = timed;
        }
        Ok(o)
    }
}

/// A part of a node's work: tile `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// Which tile, `0..count`.
    pub index: usize,
    /// How many tiles the node is split into.
    pub count: usize,
}

impl Tile {
    /// The whole node as one tile.
    pub const WHOLE: Tile = Tile { index: 0, count: 1 };

    /// The half-open range of `units` this tile covers, cut at multiples of `align`.
    pub fn range(self, units: usize, align: usize) -> (usize, usize) {
        let align = align.max(1);
        let blocks = units.div_ceil(align);
        let lo = (blocks * self.index / self.count * align).min(units);
        let hi = (blocks * (self.index + 1) / self.count * align).min(units);
        (lo, hi)
    }
}

/// Time spent in one node (profiling).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTiming {
    /// Index in `graph.nodes`.
    pub node: usize,
    /// Node name.
    pub name: String,
    /// Operator name.
    pub op: &'static str,
    /// Original nodes this node stands for.
    pub absorbed: Vec<String>,
    /// Total elapsed microseconds over all recorded calls (tiles add up).
    pub micros: f64,
    /// Number of `run_node` calls recorded.
    pub calls: u64,
}

/// Where a node input lives.
#[derive(Debug, Clone)]
pub(crate) enum Loc {
    /// A constant of the graph.
    Const(ir::ConstRef),
    /// `len` bytes at byte offset `off` of the arena.
    Arena { off: usize, len: usize },
}

/// An immutable execution plan for one graph, shared between tasks.
#[derive(Debug)]
pub struct ModelPlan {
    graph: Arc<Graph>,
    nodes: Vec<NodePlan>,
    arena_bytes: usize,
    scratch_floats: usize,
    scratch_indices: usize,
    /// Scratch floats of each intra-op helper thread (0 = no node runs in parallel).
    helper_scratch_floats: usize,
    inputs: Vec<(usize, usize)>,
    outputs: Vec<Loc>,
    isa: Isa,
    opts: PlanOptions,
}

/// One cache line of memory: the arena and the scratch (the helpers' too) are made of
/// them, so that their first byte, and so every buffer at a multiple of
/// [`memplan::ALIGN`] bytes, starts a cache line (a `Vec<u64>` of a few MB came at 16 bytes past a page: every other
/// 32-byte load then crossed two lines; depthwise convs ran 8-10 % slower, Zen 3).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Line([u64; 8]);

/// `bytes` zeroed bytes of whole [`Line`]s, on huge pages where the OS grants them on
/// request (`crate::huge_pages`). They are written here, line by line, when
/// the state is made (a `Vec<u64>` of zeros got its zero pages mapped on first touch);
/// states are made on first use (`runtime::Model::take_state`), so a state's resident
/// memory after its first run is the same.
pub(crate) fn lines(bytes: usize) -> HugeVec<Line> {
    HugeVec::filled(bytes.div_ceil(std::mem::size_of::<Line>()), Line([0; 8]))
}

/// Per-task mutable state: the arena, scratch memory and profiling counters.
#[derive(Debug)]
pub struct ExecState {
    arena: HugeVec<Line>,
    /// `scratch_floats` floats of scratch (whole lines).
    scratch: HugeVec<Line>,
    iscratch: Vec<usize>,
    timings: Vec<(u64, u64)>,
    /// Node whose packed B operand (shared by its tiles) is held in `scratch`.
    bcache: Option<usize>,
    /// Scratch of the intra-op helper threads (one per helper, whole lines).
    helpers: Vec<HugeVec<Line>>,
}

impl ModelPlan {
    /// Builds the plan: checks every node, chooses kernels, packs weights and plans
    /// memory. Errors name the node and operator of anything unsupported.
    pub fn new(graph: Arc<Graph>, opts: &PlanOptions) -> Result<ModelPlan> {
        Self::with_packed(graph, opts, &PackedWeights::default())
    }

    /// As [`ModelPlan::new`], borrowing the weights in `packed` (packed ahead, e.g. stored
    /// in a compiled file) instead of packing them, when they were packed for this plan's
    /// kernel table; else packing as `new` does.
    pub fn with_packed(
        graph: Arc<Graph>,
        opts: &PlanOptions,
        packed: &PackedWeights,
    ) -> Result<ModelPlan> {
        if opts.intra_op_threads == 0 {
            return Err(Error::CompileOption {
                option: "intra_op_threads".into(),
                reason: "must be at least 1".into(),
            });
        }
        let isa = simd::best_isa();
        let bf16 = opts.precision.bf16_table()?;
        let layout = plan::plan_memory(&graph, opts.concat_zero_copy)?;
        // Packed weights are f32 panels: a bf16 plan packs its own from the constants.
        let usable =
            !packed.is_empty() && packed.geometry == PackGeometry::of(isa) && bf16.is_none();
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        let (mut scratch, mut iscratch) = (0, 0);
        let mut helper_scratch = 0;
        for (i, n) in graph.nodes.iter().enumerate() {
            let pre = usable.then(|| packed.get(i)).flatten();
            let np = plan::plan_node(&graph, i, n, &layout, (opts.intra_op_threads, bf16), pre)?;
            helper_scratch = helper_scratch.max(np.helper_scratch);
            scratch = scratch.max(np.scratch);
            iscratch = iscratch.max(np.iscratch);
            nodes.push(np);
        }
        if helper_scratch > 0 {
            // Start the helpers now rather than inside the first run.
            pool::global();
        }
        Ok(ModelPlan {
            inputs: layout.inputs.clone(),
            outputs: layout.outputs.clone(),
            arena_bytes: layout.arena_bytes,
            graph,
            nodes,
            scratch_floats: scratch,
            scratch_indices: iscratch,
            helper_scratch_floats: helper_scratch,
            isa,
            opts: opts.clone(),
        })
    }

    /// The packed weights of this plan's nodes as a compiled file stores them (see
    /// [`ModelPlan::with_packed`]), copied.
    pub fn packed_weights(&self) -> PackedWeights {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, np)| {
                let parts = plan::packed_of(&np.kernel)?;
                let v: Vec<f32> = parts.concat();
                Some((i, crate::kernels::packed::WeightBuf::owned(v)))
            })
            .collect();
        PackedWeights {
            geometry: PackGeometry::of(self.isa),
            nodes,
        }
    }

    /// The graph this plan runs.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The precision the plan computes in.
    pub fn precision(&self) -> Precision {
        self.opts.precision
    }

    /// Bytes of arena each state holds.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// A fresh state (allocates the arena and scratch once).
    pub fn new_state(&self) -> ExecState {
        ExecState {
            arena: lines(self.arena_bytes),
            scratch: lines(self.scratch_floats * 4),
            iscratch: vec![0; self.scratch_indices],
            timings: vec![(0, 0); self.nodes.len()],
            bcache: None,
            helpers: if self.helper_scratch_floats == 0 {
                Vec::new()
            } else {
                (1..self.opts.intra_op_threads)
                    .map(|_| lines(self.helper_scratch_floats * 4))
                    .collect()
            },
        }
    }

    /// Bytes of graph input `i` (dtype size times elements); 0 if out of range.
    pub fn input_len(&self, i: usize) -> usize {
        self.inputs.get(i).map_or(0, |s| s.1)
    }

    /// Bytes of graph output `i`; 0 if out of range.
    pub fn output_len(&self, i: usize) -> usize {
        match self.outputs.get(i) {
            Some(Loc::Arena { len, .. }) => *len,
            Some(Loc::Const(t)) => t.numel() * t.dtype().size(),
            None => 0,
        }
    }

    /// Copies graph input `i` (graph layout, native-endian elements) into the state.
    pub fn set_input(&self, st: &mut ExecState, i: usize, bytes: &[u8]) -> Result<()> {
        let &(off, len) = self.inputs.get(i).ok_or_else(|| Error::InvalidArgument {
            name: "input index".into(),
            reason: format!("{i} out of range (model has {})", self.inputs.len()),
        })?;
        if bytes.len() != len {
            return Err(Error::TensorMismatch {
                name: self.graph.values[self.graph.inputs[i]].name.clone(),
                field: "byte size".into(),
                expected: len.to_string(),
                actual: bytes.len().to_string(),
            });
        }
        let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut st.arena);
        arena[off..off + len].copy_from_slice(bytes);
        st.bcache = None;
        Ok(())
    }

    /// The bytes of graph output `i` as the state holds them after the last node ran
    /// (native-endian elements); `None` if out of range.
    pub fn output_bytes<'s>(&'s self, st: &'s ExecState, i: usize) -> Option<&'s [u8]> {
        match self.outputs.get(i)? {
            Loc::Const(t) => Some(const_bytes(t)),
            Loc::Arena { off, len } => {
                let arena: &[u8] = bytemuck::cast_slice(&st.arena);
                arena.get(*off..*off + *len)
            }
        }
    }

    /// Copies graph output `i` out of the state.
    pub fn read_output(&self, st: &ExecState, i: usize, out: &mut [u8]) -> Result<()> {
        let loc = self.outputs.get(i).ok_or_else(|| Error::InvalidArgument {
            name: "output index".into(),
            reason: format!("{i} out of range (model has {})", self.outputs.len()),
        })?;
        let src: &[u8] = match loc {
            Loc::Const(t) => const_bytes(t),
            Loc::Arena { off, len } => {
                let arena: &[u8] = bytemuck::cast_slice(&st.arena);
                &arena[*off..*off + *len]
            }
        };
        if out.len() != src.len() {
            return Err(Error::TensorMismatch {
                name: self.graph.values[self.graph.outputs[i]].name.clone(),
                field: "byte size".into(),
                expected: src.len().to_string(),
                actual: out.len().to_string(),
            });
        }
        out.copy_from_slice(src);
        Ok(())
    }

    /// The bytes of output `k` of node `node` as the state holds them now. Valid right
    /// after the node ran; the arena reuses the space once later nodes run. For
    /// debugging (the conformance harness uses it to find the first diverging node).
    pub fn node_output<'s>(&self, st: &'s ExecState, node: usize, k: usize) -> Option<&'s [u8]> {
        let np = self.nodes.get(node)?;
        let &(off, len) = np.outs.get(k)?;
        let arena: &[u8] = bytemuck::cast_slice(&st.arena);
        arena.get(np.out_off + off..np.out_off + off + len)
    }

    /// How many tiles node `node` can be split into (1 = not splittable).
    pub fn tiles_for(&self, node: usize) -> usize {
        self.nodes.get(node).map_or(1, |n| n.kernel.tiles())
    }

    /// Runs tile `tile` of node `node` (index in `graph.nodes`).
    pub fn run_node(&self, st: &mut ExecState, node: usize, tile: Tile) -> Result<()> {
        let np = self.nodes.get(node).ok_or_else(|| Error::InvalidArgument {
            name: "node index".into(),
            reason: format!("{node} out of range (plan has {})", self.nodes.len()),
        })?;
        let tiles = np.kernel.tiles();
        if tile.count == 0 || tile.index >= tile.count || tile.count > tiles {
            return Err(Error::InvalidArgument {
                name: "tile".into(),
                reason: format!(
                    "tile {}/{} invalid for node '{}' ({} tiles at most)",
                    tile.index, tile.count, self.graph.nodes[node].name, tiles
                ),
            });
        }
        // Another node may have used the scratch since the tagged one ran.
        if st.bcache.is_some_and(|b| plan::bcache_node(b) != node) {
            st.bcache = None;
        }
        let start = self.opts.profile.then(Instant::now);
        let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut st.arena);
        let (left, rest) = arena.split_at_mut(np.out_off);
        let (out, right) = rest.split_at_mut(np.out_len);
        let io = Inputs {
            locs: &np.inputs,
            left,
            right,
            right_base: np.out_off + np.out_len,
        };
        let r = np.kernel.run(plan::Run {
            isa: self.isa,
            node: &self.graph.nodes[node],
            index: node,
            tile,
            io: &io,
            out,
            outs: &np.outs,
            scratch: &mut bytemuck::cast_slice_mut::<Line, f32>(&mut st.scratch)
                [..self.scratch_floats],
            iscratch: &mut st.iscratch,
            bcache: &mut st.bcache,
            helpers: &mut st.helpers,
        });
        if let Some(t0) = start {
            let e = &mut st.timings[node];
            e.0 += t0.elapsed().as_nanos() as u64;
            e.1 += 1;
        }
        r
    }

    /// Per-node timings recorded in `st` (empty unless the plan was built with
    /// `profile`).
    pub fn profile(&self, st: &ExecState) -> Vec<NodeTiming> {
        if !self.opts.profile {
            return Vec::new();
        }
        self.graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeTiming {
                node: i,
                name: n.name.clone(),
                op: n.op.name(),
                absorbed: n.absorbed.clone(),
                micros: st.timings[i].0 as f64 / 1000.0,
                calls: st.timings[i].1,
            })
            .collect()
    }

    /// Clears recorded timings.
    pub fn reset_profile(&self, st: &mut ExecState) {
        st.timings.iter_mut().for_each(|t| *t = (0, 0));
    }

    /// Runs every node whole, in order.
    pub fn run_all(&self, st: &mut ExecState) -> Result<()> {
        (0..self.nodes.len()).try_for_each(|i| self.run_node(st, i, Tile::WHOLE))
    }

    /// How many inputs of node `node` their producers wrote straight into its output
    /// (a zero-copy Concat, see [`PlanOptions::concat_zero_copy`]); 0 for other nodes.
    pub fn inputs_in_place(&self, node: usize) -> usize {
        self.nodes
            .get(node)
            .map_or(0, |n| n.kernel.inputs_in_place())
    }

    /// Estimated multiply-accumulate count of a node (for cost models); 0 for
    /// memory-bound ops.
    pub fn node_macs(&self, node: usize) -> usize {
        self.nodes.get(node).map_or(0, |n| n.kernel.macs())
    }
}

/// Node inputs resolved against the arena halves around the output block.
pub(crate) struct Inputs<'a> {
    locs: &'a [Option<Loc>],
    left: &'a [u8],
    right: &'a [u8],
    right_base: usize,
}

impl<'a> Inputs<'a> {
    /// Bytes of input `i`, or `None` if the optional input is absent.
    pub fn opt(&self, i: usize) -> Option<&'a [u8]> {
        match self.locs.get(i)?.as_ref()? {
            Loc::Const(t) => Some(const_bytes(t)),
            Loc::Arena { off, len } => Some(if off + len <= self.left.len() {
                &self.left[*off..off + len]
            } else {
                &self.right[off - self.right_base..off - self.right_base + len]
            }),
        }
    }

    /// Bytes of input `i` (empty when absent; plans only read inputs they checked).
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        self.opt(i).unwrap_or(&[])
    }

    /// Input `i` as f32.
    pub fn f32(&self, i: usize) -> &'a [f32] {
        bytemuck::cast_slice(self.bytes(i))
    }

    /// Input `i` as i64.
    pub fn i64(&self, i: usize) -> &'a [i64] {
        bytemuck::cast_slice(self.bytes(i))
    }
}

/// The raw bytes of a constant tensor (owned or borrowed from a file mapping).
pub(crate) fn const_bytes(t: &Tensor) -> &[u8] {
    t.bytes()
}

/// A tensor of `dtype` and `shape` from native-endian bytes.
pub(crate) fn tensor_from_bytes(dtype: DType, shape: Vec<usize>, b: &[u8]) -> Tensor {
    let data = match dtype {
        DType::F32 => TensorData::F32(
            b.chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::U8 => TensorData::U8(b.to_vec()),
        DType::Bool => TensorData::Bool(b.to_vec()),
        DType::I8 => TensorData::I8(b.iter().map(|&x| x as i8).collect()),
        DType::I32 => TensorData::I32(
            b.chunks_exact(4)
                .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::I64 => TensorData::I64(
            b.chunks_exact(8)
                .map(|c| i64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
    };
    Tensor::new(shape, data)
}

/// Evaluates one node on constant inputs of any dtype (constant folding). Output
/// shapes come from the graph when known, else are inferred for the shape-math ops.
pub fn eval_node(
    graph: &Graph,
    node: &ir::Node,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let mut g = Graph {
        name: format!("eval:{}", node.name),
        ..Graph::default()
    };
    let mut n2 = node.clone();
    n2.inputs = Vec::with_capacity(node.inputs.len());
    for (i, inp) in node.inputs.iter().enumerate() {
        match (inp, inputs.get(i).copied().flatten()) {
            (Some(v), Some(t)) => {
                let name = graph
                    .values
                    .get(*v)
                    .map_or_else(|| format!("in{i}"), |x| x.name.clone());
                n2.inputs.push(Some(g.add_const(name, t.clone())));
            }
            (Some(_), None) => {
                return Err(Error::shape(
                    &node.name,
                    node.op.name(),
                    format!("eval_node: input {i} is not constant"),
                ))
            }
            (None, _) => n2.inputs.push(None),
        }
    }
    let inferred = if node
        .outputs
        .iter()
        .all(|&o| graph.values.get(o).is_some_and(|v| v.shape.is_some()))
    {
        None
    } else {
        let ins: Vec<Option<ir::shape::Input<'_>>> = node
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let t = inputs.get(i).copied().flatten().filter(|_| v.is_some())?;
                let name = v.and_then(|v| graph.values.get(v)).map_or("", |x| &x.name);
                Some(ir::shape::Input::constant(name, t))
            })
            .collect();
        Some(ir::shape::infer(&node.name, &node.op, &ins)?)
    };
    n2.outputs = Vec::with_capacity(node.outputs.len());
    for (k, &o) in node.outputs.iter().enumerate() {
        let src = graph.values.get(o);
        let known = src.and_then(|v| v.shape.clone());
        let (shape, dtype) = match (&known, &inferred) {
            (Some(s), _) => (s.clone(), src.map_or(DType::F32, |v| v.dtype)),
            (None, Some(list)) if k < list.len() => (list[k].1.clone(), list[k].0),
            _ => {
                return Err(Error::shape(
                    &node.name,
                    node.op.name(),
                    format!("eval_node: cannot infer the shape of output {k}"),
                ))
            }
        };
        let id = g.add_value(ir::Value {
            name: src.map_or_else(|| format!("out{k}"), |v| v.name.clone()),
            dtype,
            shape: Some(shape),
            declared: None,
            konst: None,
        });
        n2.outputs.push(id);
    }
    g.outputs = n2.outputs.clone();
    g.nodes.push(n2);
    let g = Arc::new(g);
    let plan = ModelPlan::new(g.clone(), &PlanOptions::default())?;
    let mut st = plan.new_state();
    plan.run_node(&mut st, 0, Tile::WHOLE)?;
    g.outputs
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let len = plan.output_len(k);
            let mut b = Vec::new();
            b.try_reserve_exact(len).map_err(|_| {
                Error::OutOfMemory(format!(
                    "{len} bytes for folded output {k} of '{}'",
                    node.name
                ))
            })?;
            b.resize(len, 0);
            plan.read_output(&st, k, &mut b)?;
            let val = &g.values[v];
            Ok(tensor_from_bytes(
                val.dtype,
                val.shape.clone().unwrap_or_default(),
                &b,
            ))
        })
        .collect()
}

#[cfg(test)]
mod bf16_tests;
#[cfg(test)]
pub(crate) mod tests;

//! Weights packed ahead of planning ([`PackedWeights`]): the packed conv and GEMM operands
//! of a model, stored in its compiled file and borrowed by the plans built when it
//! loads, so that loading does not repack them.
//!
//! Invariant: packed weights are used only when their [`PackGeometry`] equals that of
//! the kernel table the plan runs with (its revision of packing choices included), and
//! only when their length is the one the plan would pack (else the plan fails: the file
//! is inconsistent). They are produced by the plans themselves ([`super::packed_of`]),
//! so a stored blob is exactly what planning would pack for that table.

use crate::kernels::gemm::KC;
use crate::kernels::packed::WeightBuf;
use crate::kernels::Isa;

/// Revision of the planner's choices of what it packs for a node (for a 3x3 conv:
/// Winograd point weights or an im2col GEMM's A, which have different lengths). Bumped
/// whenever a release can choose differently for the same node and table, so that a
/// file written before is repacked at load rather than refused. 1: Winograd on planes
/// its edge tiles overhang by more than a quarter, and on shallow convs where the im2col
/// gather dominates (files written before carry 0). 2: K blocks of `gemm::k_depth`
/// (shallower than KC where a group of B strips would overflow L1).
pub const PACK_REVISION: u64 = 2;

/// The layout packed weights were made for: the kernel table's name and its GEMM
/// geometry (panel rows and columns, K block depth), and the planner's revision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackGeometry {
    /// Kernel table name (`avx2+fma`, `portable`).
    pub table: String,
    /// Rows of a packed A panel.
    pub mr: usize,
    /// Columns of a packed B panel.
    pub nr: usize,
    /// Deepest K block (blocks are `gemm::k_depth` deep, at most this).
    pub kc: usize,
    /// [`PACK_REVISION`] of the planner that packed them.
    pub revision: u64,
}

impl PackGeometry {
    /// The geometry of `isa`'s kernel table.
    pub fn of(isa: Isa) -> PackGeometry {
        let t = isa.table();
        PackGeometry {
            table: t.name.to_string(),
            mr: t.mr,
            nr: t.nr,
            kc: KC,
            revision: PACK_REVISION,
        }
    }
}

/// Packed weights of a model by node index: for a Conv its packed A (the groups one
/// after another), for a Gemm or MatMul with a constant B its packed B.
#[derive(Debug, Clone, Default)]
pub struct PackedWeights {
    /// The layout of every buffer.
    pub geometry: PackGeometry,
    /// (node index, packed weights), by increasing node index.
    pub nodes: Vec<(usize, WeightBuf)>,
}

impl PackedWeights {
    /// The packed weights of node `node`, if any.
    pub fn get(&self, node: usize) -> Option<&WeightBuf> {
        self.nodes
            .binary_search_by_key(&node, |(n, _)| *n)
            .ok()
            .map(|i| &self.nodes[i].1)
    }

    /// True when no node has packed weights.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

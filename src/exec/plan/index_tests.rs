//! Unit tests of GatherND: the shape rule, batch dims, negative indices, and an index
//! out of range failing at run time instead of reading out of bounds.

use crate::error::Error;
use crate::exec::tests::B;
use crate::exec::{ModelPlan, PlanOptions, Tile};
use crate::ir::{DType, Op};
use std::sync::Arc;

/// GatherND(`batch_dims`) on f32 data of shape `ds` holding 0, 1, 2, ... and i64
/// indices `idx` of shape `is`, whose output shape must infer as `os`.
fn gather_nd(
    batch_dims: i64,
    ds: &[usize],
    is: &[usize],
    idx: &[i64],
    os: &[usize],
) -> Result<Vec<f32>, Error> {
    let mut b = B::default();
    let x = b.input(DType::F32, ds);
    let i = b.input(DType::I64, is);
    let y = b.n1(Op::GatherND { batch_dims }, &[x, i], DType::F32, os);
    b.out(y);
    let inferred = crate::ir::shape::infer_node(&b.g, &b.g.nodes[0])?;
    assert_eq!(inferred, vec![(DType::F32, os.to_vec())]);
    let plan = ModelPlan::new(Arc::new(b.g), &PlanOptions::default())?;
    let mut st = plan.new_state();
    let data: Vec<f32> = (0..ds.iter().product::<usize>())
        .map(|v| v as f32)
        .collect();
    plan.set_input(&mut st, 0, bytemuck::cast_slice(&data))?;
    plan.set_input(&mut st, 1, bytemuck::cast_slice(idx))?;
    plan.run_node(&mut st, 0, Tile::WHOLE)?;
    let mut out = vec![0u8; plan.output_len(0)];
    plan.read_output(&st, 0, &mut out)?;
    Ok(bytemuck::cast_slice(&out).to_vec())
}

#[test]
fn gather_nd_slices_elements_and_batches() {
    // Whole rows of a [2, 3] matrix, the last one by a negative index.
    let y = gather_nd(0, &[2, 3], &[2, 1], &[1, -2], &[2, 3]).unwrap();
    assert_eq!(y, [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]);
    // Single elements of a [2, 2, 2] tensor.
    let y = gather_nd(0, &[2, 2, 2], &[2, 3], &[0, 1, 1, 1, 0, 0], &[2]).unwrap();
    assert_eq!(y, [3.0, 4.0]);
    // One batch dim: batch b picks row idx[b] of its own [2, 2] block.
    let y = gather_nd(1, &[2, 2, 2], &[2, 1], &[1, 0], &[2, 2]).unwrap();
    assert_eq!(y, [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn gather_nd_refuses_bad_shapes_and_fails_on_bad_indices_at_run_time() {
    let e = gather_nd(0, &[2, 3], &[2, 1], &[2, 0], &[2, 3]).unwrap_err();
    assert!(matches!(e, Error::RunFailed { .. }), "{e}");
    let e = gather_nd(0, &[2, 3], &[2, 1], &[-3, 0], &[2, 3]).unwrap_err();
    assert!(matches!(e, Error::RunFailed { .. }), "{e}");
    // More index dims than the data has, and batch dims that differ.
    assert!(gather_nd(0, &[2, 3], &[1, 3], &[0, 0, 0], &[1]).is_err());
    assert!(gather_nd(1, &[2, 3], &[3, 1], &[0, 0, 0], &[3]).is_err());
}

//! Testing family (Spin, Fail): test-only operators for the scheduling and fault tests,
//! compiled only with the cargo feature `test-ops`. Spin copies its input after
//! busy-waiting; Fail fails (or panics) when run.

use super::ctx::Ctx;
use super::errors::{run_err, shape_err};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;

/// A planned test op.
#[derive(Debug)]
pub(crate) enum TestKernel {
    Spin { micros: u64 },
    Fail { panic: bool },
}

/// Plans a Spin of `micros` (output: a copy of input 0).
pub(crate) fn plan_spin(c: &Ctx<'_>, micros: u64) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    c.same_numel(0, 0)?;
    if c.itype(0)? != c.otype(0)? {
        return Err(shape_err(c.n, "output dtype must equal the input dtype"));
    }
    Ok(Planned::new(TestKernel::Spin { micros }))
}

/// Plans a Fail (`panic`: panics instead of returning an error when run).
pub(crate) fn plan_fail(_c: &Ctx<'_>, panic: bool) -> Result<Planned> {
    Ok(Planned::new(TestKernel::Fail { panic }))
}

impl FamilyKernel for TestKernel {
    fn tiles(&self) -> usize {
        1
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        match self {
            TestKernel::Spin { micros } => {
                let t0 = std::time::Instant::now();
                let d = std::time::Duration::from_micros(*micros);
                while t0.elapsed() < d {
                    std::hint::spin_loop();
                }
                let x = r.io.bytes(0);
                r.out_bytes(0).copy_from_slice(x);
                Ok(())
            }
            TestKernel::Fail { panic } => {
                if *panic {
                    panic!(
                        "node '{}': Fail operator executed (panic = true)",
                        r.node.name
                    );
                }
                Err(run_err(r.node, "Fail operator executed"))
            }
        }
    }
}

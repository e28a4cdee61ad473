//! Records of the testing family (test-only ops, `test-ops` feature): Spin, Fail.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Spin { micros } => {
            a.int("micros", i64::try_from(*micros).ok()?);
            "Spin"
        }
        Op::Fail { panic } => {
            a.bool("panic", *panic);
            "Fail"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Spin" => Op::Spin {
                micros: u64::try_from(a.int("micros")?)
                    .map_err(|_| "Spin: attribute 'micros' is negative".to_string())?,
            },
            _ => Op::Fail {
                panic: a.bool("panic")?,
            },
        })
    };
    matches!(name, "Spin" | "Fail").then(f)
}

//! Records of the gemm family: Gemm, MatMul, Attention (no attributes; its own record name,
//! so that a reader without the op fails with an unknown op).

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            post,
        } => {
            a.float("alpha", *alpha);
            a.float("beta", *beta);
            a.bool("trans_a", *trans_a);
            a.bool("trans_b", *trans_b);
            a.post("post", post);
            "Gemm"
        }
        Op::MatMul { post } => {
            a.post("post", post);
            "MatMul"
        }
        Op::Attention => "Attention",
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Gemm" => Op::Gemm {
                alpha: a.float("alpha")?,
                beta: a.float("beta")?,
                trans_a: a.bool("trans_a")?,
                trans_b: a.bool("trans_b")?,
                post: a.post("post")?,
            },
            "Attention" => Op::Attention,
            _ => Op::MatMul {
                post: a.post("post")?,
            },
        })
    };
    matches!(name, "Gemm" | "MatMul" | "Attention").then(f)
}

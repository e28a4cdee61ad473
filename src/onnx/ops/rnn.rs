//! RNN family: `LSTM` and `GRU` with their default activations (custom activations,
//! cell clipping and coupled input-forget gates are refused).

use super::NodeCx;
use crate::ir::{Op, RnnDirection};
use crate::onnx::attrs::Attrs;
use crate::onnx::import::Importer;
use crate::Result;

/// `LSTM` (outputs Y, Y_h, Y_c).
pub(super) fn lstm(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let (hidden_size, direction, layout) = common(a, &["sigmoid", "tanh", "tanh"])?;
    if a.bool_or("input_forget", false)? {
        return Err(a.err(
            "input_forget",
            "coupled input-forget gates are not supported",
        ));
    }
    let op = Op::Lstm {
        hidden_size,
        direction,
        layout,
    };
    imp.emit_n(cx, op, 3, 8, 3)
}

/// `GRU` (outputs Y, Y_h).
pub(super) fn gru(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let (hidden_size, direction, layout) = common(a, &["sigmoid", "tanh"])?;
    let op = Op::Gru {
        hidden_size,
        direction,
        linear_before_reset: a.bool_or("linear_before_reset", false)?,
        layout,
    };
    imp.emit_n(cx, op, 3, 6, 2)
}

/// The attributes LSTM and GRU share: hidden size, direction and layout; the
/// activations must be `defaults` (per direction).
fn common(a: &Attrs<'_>, defaults: &[&str]) -> Result<(usize, RnnDirection, i64)> {
    let hidden_size = a.positive("hidden_size", a.int_req("hidden_size")?)?;
    let direction = match a.string_or("direction", "forward")?.as_str() {
        "forward" => RnnDirection::Forward,
        "reverse" => RnnDirection::Reverse,
        "bidirectional" => RnnDirection::Bidirectional,
        other => return Err(a.err("direction", format!("unknown direction '{other}'"))),
    };
    let layout = a.int_or("layout", 0)?;
    if layout != 0 && layout != 1 {
        return Err(a.err("layout", format!("must be 0 or 1, got {layout}")));
    }
    if a.float("clip")?.is_some() {
        return Err(a.err("clip", "cell clipping is not supported"));
    }
    for attr in ["activation_alpha", "activation_beta"] {
        if a.floats(attr)?.is_some_and(|v| !v.is_empty()) {
            return Err(a.err(attr, "custom activation parameters are not supported"));
        }
    }
    if let Some(acts) = a.strings("activations")? {
        let dirs = if direction == RnnDirection::Bidirectional {
            2
        } else {
            1
        };
        let expected: Vec<&str> = (0..dirs).flat_map(|_| defaults.iter().copied()).collect();
        let ok = acts.len() == expected.len()
            && acts
                .iter()
                .zip(&expected)
                .all(|(x, e)| x.eq_ignore_ascii_case(e));
        if !ok {
            return Err(a.err(
                "activations",
                format!("{acts:?} is not supported (only the defaults)"),
            ));
        }
    }
    Ok((hidden_size, direction, layout))
}

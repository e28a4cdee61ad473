//! Records of the rnn family: Lstm, Gru.

use super::{AttrsIn, AttrsOut};
use crate::ir::{Op, RnnDirection};

const DIRECTIONS: &[(RnnDirection, &str)] = &[
    (RnnDirection::Forward, "forward"),
    (RnnDirection::Reverse, "reverse"),
    (RnnDirection::Bidirectional, "bidirectional"),
];

fn direction(a: &AttrsIn) -> Result<RnnDirection, String> {
    let s = a.string("direction")?;
    DIRECTIONS
        .iter()
        .find(|(_, n)| *n == s)
        .map(|(d, _)| *d)
        .ok_or_else(|| format!("unknown RNN direction '{s}'"))
}

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    let dir_name = |d: &RnnDirection| DIRECTIONS.iter().find(|(x, _)| x == d).map(|(_, n)| *n);
    Some(match op {
        Op::Lstm {
            hidden_size,
            direction,
            layout,
        } => {
            a.usize("hidden_size", *hidden_size);
            a.string("direction", dir_name(direction)?);
            a.int("layout", *layout);
            "LSTM"
        }
        Op::Gru {
            hidden_size,
            direction,
            linear_before_reset,
            layout,
        } => {
            a.usize("hidden_size", *hidden_size);
            a.string("direction", dir_name(direction)?);
            a.bool("linear_before_reset", *linear_before_reset);
            a.int("layout", *layout);
            "GRU"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "LSTM" => Op::Lstm {
                hidden_size: a.usize("hidden_size")?,
                direction: direction(a)?,
                layout: a.int("layout")?,
            },
            _ => Op::Gru {
                hidden_size: a.usize("hidden_size")?,
                direction: direction(a)?,
                linear_before_reset: a.bool("linear_before_reset")?,
                layout: a.int("layout")?,
            },
        })
    };
    matches!(name, "LSTM" | "GRU").then(f)
}

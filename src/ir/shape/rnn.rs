//! Shape rules of the rnn family (LSTM, GRU).

use crate::ir::RnnDirection;
use crate::Result;

use super::{Cx, TypedShape};

impl Cx<'_> {
    pub(super) fn rnn(
        &self,
        h: usize,
        dir: RnnDirection,
        layout: i64,
        gates: usize,
        nout: usize,
    ) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let [a, b, input] = *x else {
            return Err(self.err(format!("X {x:?} must be 3-D")));
        };
        let (seq, batch) = if layout == 0 { (a, b) } else { (b, a) };
        let nd = if dir == RnnDirection::Bidirectional {
            2
        } else {
            1
        };
        let w = self.shape(1)?;
        let r = self.shape(2)?;
        let gh = gates
            .checked_mul(h)
            .ok_or_else(|| self.err("hidden_size too large"))?;
        if w != [nd, gh, input] || r != [nd, gh, h] {
            return Err(self.err(format!(
                "W {w:?} / R {r:?} do not match [{nd}, {}, {input}] / [{nd}, {}, {h}]",
                gh, gh
            )));
        }
        let (y, yh) = if layout == 0 {
            (vec![seq, nd, batch, h], vec![nd, batch, h])
        } else {
            (vec![batch, seq, nd, h], vec![batch, nd, h])
        };
        let mut out = vec![(dt, y), (dt, yh.clone())];
        if nout == 3 {
            out.push((dt, yh));
        }
        Ok(out)
    }
}

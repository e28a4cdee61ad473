//! FC partition: cuts each BPU segment into function calls (FCs) whose estimated time is
//! at most `max_time_per_fc` µs, tiling single nodes that are larger than the limit.
//!
//! Invariants: steps of a segment appear in node order, the tiles of a node in tile
//! order; every FC but those holding one unsplittable step is within the limit.

use serde::{Deserialize, Serialize};

/// One unit of work inside an FC: a whole node or one tile of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Node index in the compiled graph.
    pub node: usize,
    /// Tile index (0-based).
    pub tile: u32,
    /// Number of tiles the node is cut into (1 = whole).
    pub tiles: u32,
}

impl Step {
    /// The tile of its node this step runs, as the executor takes it.
    pub fn exec_tile(&self) -> crate::exec::Tile {
        crate::exec::Tile {
            index: self.tile as usize,
            count: self.tiles as usize,
        }
    }
}

/// A function call: steps executed without interruption on one core.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fc {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Estimated time in µs.
    pub est_us: f64,
}

/// A step whose estimate alone exceeds the limit (it could not be tiled further).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverLimit {
    /// Node index.
    pub node: usize,
    /// Estimated µs of its largest step.
    pub est_us: f64,
}

/// Cuts a sequence of nodes into FCs. `cost(node, tile, tiles)` gives a step's estimate;
/// `max_tiles(node)` how many tiles the node allows. `limit_us == 0` means one FC.
pub fn partition(
    nodes: std::ops::Range<usize>,
    limit_us: u64,
    mut cost: impl FnMut(usize, u32, u32) -> f64,
    max_tiles: impl Fn(usize) -> usize,
    over: &mut Vec<OverLimit>,
) -> Vec<Fc> {
    let limit = limit_us as f64;
    let mut fcs = Vec::new();
    let mut cur = Fc {
        steps: Vec::new(),
        est_us: 0.0,
    };
    for node in nodes {
        let whole = cost(node, 0, 1);
        let mut steps: Vec<(Step, f64)> = vec![(
            Step {
                node,
                tile: 0,
                tiles: 1,
            },
            whole,
        )];
        if limit_us > 0 && whole > limit {
            // Aim a little under the limit so measurement noise does not push tiles over.
            let want = (whole / (limit * 0.9)).ceil() as usize;
            let k = want.min(max_tiles(node)).max(1) as u32;
            if k > 1 {
                steps = (0..k)
                    .map(|t| {
                        (
                            Step {
                                node,
                                tile: t,
                                tiles: k,
                            },
                            cost(node, t, k),
                        )
                    })
                    .collect();
            }
            let worst = steps.iter().map(|s| s.1).fold(0.0, f64::max);
            if worst > limit {
                over.push(OverLimit {
                    node,
                    est_us: worst,
                });
            }
        }
        for (step, t) in steps {
            if limit_us > 0 && !cur.steps.is_empty() && cur.est_us + t > limit {
                fcs.push(std::mem::replace(
                    &mut cur,
                    Fc {
                        steps: Vec::new(),
                        est_us: 0.0,
                    },
                ));
            }
            cur.steps.push(step);
            cur.est_us += t;
        }
    }
    if !cur.steps.is_empty() {
        fcs.push(cur);
    }
    fcs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(times: &[f64], limit: u64, tiles: usize) -> (Vec<Fc>, Vec<OverLimit>) {
        let mut over = Vec::new();
        let fcs = partition(
            0..times.len(),
            limit,
            |n, _, k| times[n] / k as f64,
            |_| tiles,
            &mut over,
        );
        (fcs, over)
    }

    #[test]
    fn no_limit_gives_one_fc() {
        let (fcs, over) = run(&[500.0, 3000.0, 200.0], 0, 64);
        assert_eq!(fcs.len(), 1);
        assert_eq!(fcs[0].steps.len(), 3);
        assert!(over.is_empty());
    }

    #[test]
    fn fcs_respect_the_limit_and_keep_order() {
        let times = [300.0, 400.0, 500.0, 2500.0, 100.0, 900.0];
        let (fcs, over) = run(&times, 1000, 64);
        assert!(over.is_empty());
        for fc in &fcs {
            assert!(fc.est_us <= 1000.0 + 1e-9, "{fc:?}");
        }
        let flat: Vec<(usize, u32)> = fcs
            .iter()
            .flat_map(|f| f.steps.iter().map(|s| (s.node, s.tile)))
            .collect();
        let mut sorted = flat.clone();
        sorted.sort();
        assert_eq!(flat, sorted);
        // The 2500 µs node was tiled into 3 pieces.
        assert_eq!(flat.iter().filter(|s| s.0 == 3).count(), 3);
        let total: f64 = fcs.iter().map(|f| f.est_us).sum();
        assert!((total - times.iter().sum::<f64>()).abs() < 1e-6);
    }

    #[test]
    fn unsplittable_node_is_reported() {
        let (fcs, over) = run(&[100.0, 5000.0, 100.0], 1000, 1);
        assert_eq!(
            over,
            vec![OverLimit {
                node: 1,
                est_us: 5000.0
            }]
        );
        assert_eq!(fcs.len(), 3);
    }
}

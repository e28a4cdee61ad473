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

/// Times a node's tiling is refined when its dearest tile is still over the limit.
const REFINE_ROUNDS: usize = 6;

/// The fewest tiles whose largest holds as few of a node's `most` blocks as `k` tiles'
/// largest does (`1 <= k <= most`): 69 tiles of 100 blocks hold 1 or 2 blocks each, and
/// 50 tiles of 2 blocks have the same dearest tile.
fn even_tiles(k: usize, most: usize) -> usize {
    let k = k.clamp(1, most.max(1));
    most.div_ceil(most.div_ceil(k))
}

/// Cuts a sequence of nodes into FCs. `cost(node, tile, tiles)` gives a step's estimate;
/// `max_tiles(node)` how many tiles the node allows (its blocks of work, which `k` tiles
/// share out as evenly as they can, see `exec::Tile::range`). `limit_us == 0` means one FC.
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
            let most = max_tiles(node).max(1);
            let mut want = (whole / (limit * 0.9)).ceil() as usize;
            let (mut worst, mut cut) = (whole, 1);
            // A node's `most` tiles are its blocks of work; k tiles take floor or ceil of
            // most / k blocks each, so the dearest tile holds ceil(most / k) of them.
            // Tiles of one node do not cost the same either (the first finds the caches
            // cold, edge tiles carry padding): while the dearest tile is over the limit,
            // cut finer, so that it holds as many blocks as fit in the limit at its cost
            // per block, a few times at most.
            for _ in 0..REFINE_ROUNDS {
                let k = even_tiles(want.min(most), most);
                if k <= cut {
                    break;
                }
                cut = k;
                let k = k as u32;
                let tiled: Vec<(Step, f64)> = (0..k)
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
                let dearest = tiled.iter().map(|s| s.1).fold(0.0, f64::max);
                // Finer is not always cheaper per tile (a Winograd conv cut by output
                // channels transforms the whole input in its first tile): the tiling
                // with the cheapest dearest tile seen is kept.
                if dearest < worst {
                    (steps, worst) = (tiled, dearest);
                }
                if dearest <= limit {
                    break;
                }
                let per_block = dearest / most.div_ceil(k as usize) as f64;
                let fit = ((limit * 0.9 / per_block).floor() as usize).max(1);
                want = most.div_ceil(fit);
            }
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
    fn uneven_tiles_are_cut_finer_until_the_dearest_fits() {
        // A 3000 us node whose first tile costs three times its share (cold caches):
        // 4 even cuts leave a 1500 us first tile; refining gives every tile <= the limit.
        let cost = |_: usize, t: u32, k: u32| {
            let share = 3000.0 / (k as f64 + 2.0);
            if t == 0 {
                3.0 * share
            } else {
                share
            }
        };
        let mut over = Vec::new();
        let fcs = partition(0..1, 1000, cost, |_| 64, &mut over);
        assert!(over.is_empty(), "{over:?}");
        let steps: Vec<&Step> = fcs.iter().flat_map(|f| &f.steps).collect();
        let k = steps[0].tiles;
        assert!(k > 4, "refined beyond the first cut: {k}");
        assert_eq!(steps.len(), k as usize);
        assert!(steps.iter().all(|s| cost(0, s.tile, k) <= 1000.0));
        // With at most 5 tiles the node stays over the limit and is reported with its
        // dearest tile.
        let mut over = Vec::new();
        partition(0..1, 1000, cost, |_| 5, &mut over);
        assert_eq!(over.len(), 1);
        assert!((over[0].est_us - 3.0 * 3000.0 / 7.0).abs() < 1e-9);
    }

    #[test]
    fn tiles_of_whole_blocks_are_cut_evenly() {
        // 100 blocks of 400 us (a Winograd conv's tile panels), shared out by
        // `Tile::range`; the last tile 10 % dearer (bottom padding).
        let cost = |_: usize, t: u32, k: u32| {
            let tile = crate::exec::Tile {
                index: t as usize,
                count: k as usize,
            };
            let (lo, hi) = tile.range(100, 1);
            let us = (hi - lo) as f64 * 400.0;
            if t + 1 == k {
                us * 1.1
            } else {
                us
            }
        };
        let mut over = Vec::new();
        let fcs = partition(
            0..1,
            1000,
            |n, t, k| if k == 1 { 40_000.0 } else { cost(n, t, k) },
            |_| 100,
            &mut over,
        );
        assert!(over.is_empty(), "{over:?}");
        let steps: Vec<&Step> = fcs.iter().flat_map(|f| &f.steps).collect();
        // 45 tiles (40 ms / 0.9 ms) would leave some with three blocks, as do 34; the
        // refinement gives two blocks a tile.
        assert_eq!(steps[0].tiles, 50);
        assert!(fcs.iter().all(|f| f.est_us <= 1000.0), "{fcs:?}");
        assert_eq!(even_tiles(69, 100), 50);
        assert_eq!(even_tiles(96, 100), 50);
        assert_eq!(even_tiles(100, 100), 100);
        assert_eq!(even_tiles(7, 3), 3);
    }

    #[test]
    fn the_tiling_with_the_cheapest_dearest_tile_is_kept() {
        // Up to 7 tiles cut one way (the last twice its share), more cut another whose
        // first tile does a fixed 1800 us: finer is dearer, so 4 tiles stay.
        let cost = |_: usize, t: u32, k: u32| match (k <= 7, t) {
            (true, t) if t + 1 == k => 2.0 * 3000.0 / k as f64,
            (true, _) => 3000.0 / k as f64,
            (false, 0) => 1800.0,
            (false, _) => 120.0,
        };
        let mut over = Vec::new();
        let fcs = partition(
            0..1,
            1000,
            |n, t, k| if k == 1 { 3000.0 } else { cost(n, t, k) },
            |_| 11,
            &mut over,
        );
        let steps: Vec<&Step> = fcs.iter().flat_map(|f| &f.steps).collect();
        assert_eq!(steps.len(), 4);
        assert_eq!(
            over,
            vec![OverLimit {
                node: 0,
                est_us: 1500.0
            }]
        );
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

//! Per-host cache of measured node times, so that an FC estimate does not depend on how
//! busy the machine happened to be during one compile (issue 12 item 7).
//!
//! The cost model keeps the best of its repeats; this cache keeps the best over every
//! compile on this host: one file per (vnpu version, CPU model, kernel table, precision) in the
//! compile cache folder (`VNPU_CACHE_DIR`, prepared as private like the compiled-model
//! cache), one line per measured step: `key microseconds`, the key a hash of the node's
//! operator, its input and output types and shapes, and the tile. Without a cache folder
//! nothing is stored and every compile relies on its own measurements.
//!
//! The cache is an optimisation only: a file that cannot be read is ignored, one that
//! cannot be written leaves the compile's own figures (never an error).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::exec::{Precision, Tile};
use crate::format::checksum;
use crate::ir::Graph;

/// Best measured times of node steps on this host, by step key.
#[derive(Debug, Default)]
pub struct CostCache {
    /// The cache file, when a cache folder is configured.
    path: Option<PathBuf>,
    times: HashMap<u64, f64>,
    changed: bool,
}

impl CostCache {
    /// The cache of this host and `precision` in the configured compile cache folder
    /// (empty when none is configured or the file cannot be read).
    pub fn open(precision: Precision) -> CostCache {
        match crate::config::cache_dir() {
            Some(dir) if crate::runtime::loader::prepare_cache_dir(&dir).is_ok() => {
                CostCache::at(&dir.join(file_name(precision)))
            }
            _ => CostCache::default(),
        }
    }

    /// The cache stored in `file` (empty when it does not exist or cannot be read).
    pub fn at(file: &Path) -> CostCache {
        let mut times = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(file) {
            for line in text.lines() {
                let mut it = line.split_ascii_whitespace();
                let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) else {
                    continue;
                };
                if let (Ok(k), Ok(v)) = (u64::from_str_radix(k, 16), v.parse::<f64>()) {
                    if v.is_finite() && v > 0.0 {
                        times.insert(k, v);
                    }
                }
            }
        }
        CostCache {
            path: Some(file.to_path_buf()),
            times,
            changed: false,
        }
    }

    /// The best time known for step `key` given a new measurement `us`: the smaller of
    /// the two, remembered.
    pub fn best(&mut self, key: u64, us: f64) -> f64 {
        if !(us.is_finite() && us > 0.0) {
            return us;
        }
        match self.times.get(&key) {
            Some(&t) if t <= us => t,
            _ => {
                self.times.insert(key, us);
                self.changed = true;
                us
            }
        }
    }

    /// Writes the cache back when it changed (to a temporary file renamed over the old
    /// one, so that a concurrent compile reads either version whole). Failures are
    /// ignored: the cache only refines estimates.
    pub fn save(&self) {
        let Some(path) = &self.path else { return };
        if !self.changed {
            return;
        }
        let mut keys: Vec<_> = self.times.iter().collect();
        keys.sort_by_key(|(k, _)| **k);
        let text: String = keys
            .iter()
            .map(|(k, v)| format!("{k:016x} {v:.3}\n"))
            .collect();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The cache file of this host, vnpu version and precision (with the bf16 kernels in
/// use when bf16).
fn file_name(precision: Precision) -> String {
    let isa = crate::kernels::isa::best_isa().table().name;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut id = format!("{} {} {isa} {cpus}", crate::VERSION, cpu_model());
    if precision != Precision::F32 {
        let bf16 = crate::kernels::bf16::native().map_or("none", |t| t.name);
        id += &format!(" {} {bf16}", precision.name());
    }
    format!("costs-{:016x}.txt", checksum(id.as_bytes()))
}

/// The CPU's model name (`/proc/cpuinfo`), or "unknown".
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The key of one measured step: node `n`'s operator, its inputs' and outputs' types
/// and shapes (what decides the kernel and its work, not the weights' values), and the
/// tile.
pub fn step_key(g: &Graph, n: usize, tile: Tile) -> u64 {
    let node = &g.nodes[n];
    let ty = |v: &Option<crate::ir::ValueId>| match v {
        Some(v) => {
            let val = &g.values[*v];
            format!("{:?}{:?}{}", val.dtype, val.shape, val.konst.is_some())
        }
        None => "-".into(),
    };
    let ins: Vec<String> = node.inputs.iter().map(ty).collect();
    let outs: Vec<String> = node.outputs.iter().map(|v| ty(&Some(*v))).collect();
    let text = format!(
        "{:?}|{}|{}|{}/{}",
        node.op,
        ins.join(","),
        outs.join(","),
        tile.index,
        tile.count
    );
    checksum(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_best_time_across_compiles() {
        let dir = std::env::temp_dir().join(format!("vnpu-cost-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("costs.txt");
        let _ = std::fs::remove_file(&file);
        let mut c = CostCache::at(&file);
        assert_eq!(c.best(7, 120.0), 120.0, "first measurement");
        assert_eq!(
            c.best(7, 150.0),
            120.0,
            "a busier measurement keeps the best"
        );
        assert_eq!(c.best(7, 100.0), 100.0, "a better one replaces it");
        assert!(c.best(8, f64::NAN).is_nan(), "no figure is not cached");
        c.save();
        let mut again = CostCache::at(&file);
        assert_eq!(again.best(7, 300.0), 100.0, "read back from the file");
        assert_eq!(again.times.len(), 1);
        // A damaged file is ignored line by line, never an error.
        std::fs::write(&file, "zz 1\n0000000000000009 50\n1 2 3\n").expect("write");
        let mut bad = CostCache::at(&file);
        assert_eq!(bad.best(9, 80.0), 50.0);
        assert_eq!(bad.times.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn step_keys_tell_tiles_and_shapes_apart() {
        use crate::exec::tests::B;
        use crate::ir::{DType, Op, UnaryOp};
        let mut b = B::default();
        let x = b.input(DType::F32, &[1, 4]);
        let y = b.n1(Op::Unary(UnaryOp::Relu), &[x], DType::F32, &[1, 4]);
        let z = b.input(DType::F32, &[1, 8]);
        let w = b.n1(Op::Unary(UnaryOp::Relu), &[z], DType::F32, &[1, 8]);
        b.out(y);
        b.out(w);
        let g = &b.g;
        let whole = step_key(g, 0, Tile::WHOLE);
        assert_eq!(whole, step_key(g, 0, Tile::WHOLE), "stable");
        assert_ne!(whole, step_key(g, 0, Tile { index: 0, count: 2 }));
        assert_ne!(whole, step_key(g, 1, Tile::WHOLE), "another shape");
    }
}

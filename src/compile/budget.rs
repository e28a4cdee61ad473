//! The memory budget of one model: every size derived from a model (a value's bytes, the
//! constants, the planned arena) is checked against it before memory is taken.
//!
//! The budget comes from `VNPU_MEMORY_BUDGET_MB` (read at every model load), else half
//! the machine's physical memory. The same budget bounds the external-data bytes an ONNX
//! import may read (the default of `ImportOptions::max_external_bytes`), so one setting
//! bounds both what is read and what is planned. Over budget is an invalid model (`HB_DNN_INVALID_MODEL`):
//! the error names the tensor, its shape and the budget.

use crate::error::{Error, Result};
use crate::ir::{DType, Graph};

/// Environment variable that sets the budget in MiB.
pub const BUDGET_ENV: &str = "VNPU_MEMORY_BUDGET_MB";

/// Used when the physical memory cannot be read (non-Linux hosts).
const FALLBACK_BYTES: u64 = 4 << 30;

/// Bytes a model may take for its planned memory and constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    /// The limit in bytes.
    pub bytes: u64,
}

impl MemoryBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> MemoryBudget {
        MemoryBudget { bytes }
    }

    /// The default budget of this machine: half of its physical memory (4 GiB where
    /// that cannot be read).
    pub fn machine_default() -> MemoryBudget {
        MemoryBudget::new(physical_memory().map_or(FALLBACK_BYTES, |m| m / 2))
    }

    /// [`MemoryBudget::from_env`], or [`MemoryBudget::machine_default`] when the
    /// setting is invalid (for defaults that cannot fail; compiling reports the bad
    /// setting).
    pub fn from_env_or_default() -> MemoryBudget {
        MemoryBudget::from_env().unwrap_or_else(|_| MemoryBudget::machine_default())
    }

    /// The budget: the setting `VNPU_MEMORY_BUDGET_MB` (see [`crate::config`], read at
    /// every model load), else half of the physical memory.
    pub fn from_env() -> Result<MemoryBudget> {
        match parse_budget(crate::config::lookup(BUDGET_ENV).as_deref()) {
            Ok(bytes) => Ok(MemoryBudget::new(bytes)),
            Err(reason) => Err(Error::CompileOption {
                option: BUDGET_ENV.into(),
                reason,
            }),
        }
    }

    /// Bytes of a tensor of `shape` and `dtype`, or an error naming it when the size
    /// overflows or exceeds the budget. `node`/`op` say where the tensor comes from.
    pub fn check_tensor(
        &self,
        node: &str,
        op: &str,
        tensor: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<u64> {
        let bytes = tensor_bytes(shape, dtype);
        match bytes {
            Some(b) if b <= self.bytes => Ok(b),
            _ => Err(self.over(node, op, tensor, shape, bytes)),
        }
    }

    /// The over-budget error for `tensor` of `shape` (`bytes` = `None` when its size
    /// overflows).
    pub fn over(
        &self,
        node: &str,
        op: &str,
        tensor: &str,
        shape: &[usize],
        bytes: Option<u64>,
    ) -> Error {
        let size = bytes.map_or_else(
            || "a size that overflows".to_string(),
            |b| format!("{b} bytes"),
        );
        Error::shape(
            node,
            op,
            format!(
                "tensor '{tensor}' of shape {shape:?} needs {size}, over the memory budget of {} bytes (set {BUDGET_ENV})",
                self.bytes
            ),
        )
    }

    /// Checks every value of `graph` that has a shape (constants and activations) and the
    /// sum of the constants against the budget; returns the constants' total bytes.
    pub fn check_graph(&self, graph: &Graph) -> Result<u64> {
        let mut consts = 0u64;
        for v in &graph.values {
            let Some(shape) = v.shape.as_deref() else {
                continue;
            };
            let b = self.check_tensor(&v.name, "value", &v.name, shape, v.dtype)?;
            if v.konst.is_some() {
                consts = consts
                    .checked_add(b)
                    .filter(|&c| c <= self.bytes)
                    .ok_or_else(|| self.over(&v.name, "constants", &v.name, shape, Some(b)))?;
            }
        }
        Ok(consts)
    }
}

/// Bytes of a tensor of `shape` and `dtype`; `None` on overflow.
pub fn tensor_bytes(shape: &[usize], dtype: DType) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size() as u64, |a, &d| a.checked_mul(d as u64))
}

/// Parses `VNPU_MEMORY_BUDGET_MB` (`None`: the default for this machine).
fn parse_budget(v: Option<&str>) -> std::result::Result<u64, String> {
    match v.map(str::trim) {
        None | Some("") => Ok(MemoryBudget::machine_default().bytes),
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|&mb| mb > 0)
            .and_then(|mb| mb.checked_mul(1 << 20))
            .ok_or_else(|| format!("'{s}' is not a positive number of MiB")),
    }
}

/// Physical memory in bytes (Linux `/proc/meminfo`), if readable.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_budget_variable() {
        assert_eq!(parse_budget(Some("512")), Ok(512 << 20));
        assert!(parse_budget(Some("0")).is_err());
        assert!(parse_budget(Some("-3")).is_err());
        assert!(parse_budget(Some("lots")).is_err());
        assert!(parse_budget(Some("18446744073709551615")).is_err());
        let default = parse_budget(None).expect("default");
        assert!(default > 0);
        assert_eq!(parse_budget(Some(" ")), Ok(default));
    }

    #[test]
    fn tensor_sizes_are_checked() {
        let b = MemoryBudget::new(1 << 20);
        assert_eq!(
            b.check_tensor("n", "Op", "t", &[256, 256], DType::U8).ok(),
            Some(65536)
        );
        let e = b
            .check_tensor("n", "Op", "t", &[1024, 1024], DType::F32)
            .expect_err("4 MiB over 1 MiB");
        assert_eq!(e.code(), crate::error::codes::HB_DNN_INVALID_MODEL);
        let s = e.to_string();
        assert!(
            s.contains("'t'") && s.contains("[1024, 1024]") && s.contains("1048576"),
            "{s}"
        );
        let e = b
            .check_tensor("n", "Op", "t", &[usize::MAX, 2], DType::F32)
            .expect_err("overflow");
        assert!(e.to_string().contains("overflows"), "{e}");
    }
}

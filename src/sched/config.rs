//! Scheduler configuration: core count, CPU pool size, preemption and insertion
//! thresholds, task limit and thread placement, read from environment variables.
//!
//! Invariants of a [`SchedConfig`] accepted by [`SchedConfig::validate`]: `1 <= cores <= 32`
//! (a core mask is a `u32`), `cpu_threads >= 1`, `max_tasks >= 1`, `trace_capacity >= 1`.
//! An environment variable that is set but malformed is an [`Error::Config`]; an unset one
//! keeps its default.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// The most cores a scheduler may have (a core mask is a `u32`).
pub const MAX_CORES: usize = 32;

/// Scheduler settings. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedConfig {
    /// Number of virtual NPU cores (`VNPU_CORES`, default 2).
    pub cores: usize,
    /// Threads of the CPU pool that runs CPU segments (`VNPU_CPU_THREADS`, default = host cores).
    pub cpu_threads: usize,
    /// `BPLAT_CORELIMIT`: normal FCs committed ahead of a high FC (0 = no preemption).
    pub core_limit: usize,
    /// `HB_DNN_BPU_SCHEDULE_THRESHOLD`: insertion impact threshold in percent (default 10).
    pub bpu_schedule_threshold_pct: u64,
    /// `HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME`: insert when the candidate's BPU time is below this (ms, default 1000).
    pub insert_fc_max_time_ms: u64,
    /// `HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME`: insert when the holder's CPU segment is longer (ms, default 20).
    pub wait_dispatch_time_ms: u64,
    /// `HB_MAX_TASK_NUM`: most live (unreleased) tasks (default 32).
    pub max_tasks: usize,
    /// `VNPU_PIN_CORES`: pin core k's thread to host CPU k (modulo the host count).
    pub pin_cores: bool,
    /// `VNPU_RT_PRIORITY`: run core threads under `SCHED_FIFO`.
    pub rt_priority: bool,
    /// `VNPU_CORE_NICE`: OS nice value of the core threads (-20..=19, default 0). A
    /// positive value lets the application's own threads (submitters, waiters) preempt
    /// busy cores at once, which shortens end-to-end latency when the cores saturate
    /// the host's CPUs; negative values need privileges (else a warning, left at 0).
    pub core_nice: i32,
    /// `VNPU_TRACE`: start tracing at creation and dump to this file on `dump_trace`/drop.
    pub trace_path: Option<PathBuf>,
    /// `VNPU_TRACE_CAPACITY`: events kept by the trace ring buffer (default 65536).
    pub trace_capacity: usize,
    /// `VNPU_SPIN_US`: how long an idle core thread, and a thread in `wait`, polls before
    /// sleeping (µs, default 50; 0 = sleep at once). Trades a little CPU for wake-up latency.
    pub spin_us: u64,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            cores: 2,
            cpu_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            core_limit: 0,
            bpu_schedule_threshold_pct: 10,
            insert_fc_max_time_ms: 1000,
            wait_dispatch_time_ms: 20,
            max_tasks: 32,
            pin_cores: false,
            rt_priority: false,
            core_nice: 0,
            trace_path: None,
            trace_capacity: 1 << 16,
            spin_us: 50,
        }
    }
}

impl SchedConfig {
    /// Reads the configuration from the process environment (see the field docs).
    pub fn from_env() -> Result<SchedConfig> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the configuration through `lookup` (variable name → value), so callers and
    /// tests can supply variables without touching the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<SchedConfig> {
        let mut cfg = SchedConfig::default();
        let num = |name: &str| -> Result<Option<u64>> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| Error::Config {
                        name: name.into(),
                        value: v.clone(),
                        reason: "expected a non-negative integer".into(),
                    }),
            }
        };
        let flag = |name: &str| -> Result<Option<bool>> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => Ok(Some(true)),
                    "0" | "false" | "no" | "off" | "" => Ok(Some(false)),
                    _ => Err(Error::Config {
                        name: name.into(),
                        value: v.clone(),
                        reason: "expected 0/1, true/false, yes/no or on/off".into(),
                    }),
                },
            }
        };
        if let Some(v) = num("VNPU_CORES")? {
            cfg.cores = to_usize(v);
        }
        if let Some(v) = num("VNPU_CPU_THREADS")? {
            cfg.cpu_threads = to_usize(v);
        }
        if let Some(v) = num("BPLAT_CORELIMIT")? {
            cfg.core_limit = to_usize(v);
        }
        if let Some(v) = num("HB_DNN_BPU_SCHEDULE_THRESHOLD")? {
            cfg.bpu_schedule_threshold_pct = v;
        }
        if let Some(v) = num("HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME")? {
            cfg.insert_fc_max_time_ms = v;
        }
        if let Some(v) = num("HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME")? {
            cfg.wait_dispatch_time_ms = v;
        }
        if let Some(v) = num("HB_MAX_TASK_NUM")? {
            cfg.max_tasks = to_usize(v);
        }
        if let Some(v) = flag("VNPU_PIN_CORES")? {
            cfg.pin_cores = v;
        }
        if let Some(v) = flag("VNPU_RT_PRIORITY")? {
            cfg.rt_priority = v;
        }
        if let Some(v) = lookup("VNPU_CORE_NICE") {
            cfg.core_nice = v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (-20..=19).contains(n))
                .ok_or_else(|| Error::Config {
                    name: "VNPU_CORE_NICE".into(),
                    value: v.clone(),
                    reason: "expected an integer in -20..=19".into(),
                })?;
        }
        if let Some(v) = lookup("VNPU_TRACE") {
            if !v.trim().is_empty() {
                cfg.trace_path = Some(PathBuf::from(v));
            }
        }
        if let Some(v) = num("VNPU_TRACE_CAPACITY")? {
            cfg.trace_capacity = to_usize(v);
        }
        if let Some(v) = num("VNPU_SPIN_US")? {
            cfg.spin_us = v;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the ranges documented on the module.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, value: usize, reason: &str| Error::Config {
            name: name.into(),
            value: value.to_string(),
            reason: reason.into(),
        };
        if self.cores == 0 || self.cores > MAX_CORES {
            return Err(bad("VNPU_CORES", self.cores, "must be in 1..=32"));
        }
        if self.cpu_threads == 0 {
            return Err(bad(
                "VNPU_CPU_THREADS",
                self.cpu_threads,
                "must be at least 1",
            ));
        }
        if self.max_tasks == 0 {
            return Err(bad("HB_MAX_TASK_NUM", self.max_tasks, "must be at least 1"));
        }
        if self.trace_capacity == 0 {
            return Err(bad(
                "VNPU_TRACE_CAPACITY",
                self.trace_capacity,
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_when_unset() {
        let cfg = SchedConfig::from_lookup(lookup(&[])).unwrap();
        assert_eq!(cfg.cores, 2);
        assert_eq!(cfg.core_limit, 0);
        assert_eq!(cfg.bpu_schedule_threshold_pct, 10);
        assert_eq!(cfg.insert_fc_max_time_ms, 1000);
        assert_eq!(cfg.wait_dispatch_time_ms, 20);
        assert_eq!(cfg.max_tasks, 32);
        assert!(!cfg.pin_cores && !cfg.rt_priority);
        assert!(cfg.trace_path.is_none());
    }

    #[test]
    fn reads_every_variable() {
        let cfg = SchedConfig::from_lookup(lookup(&[
            ("VNPU_CORES", "4"),
            ("VNPU_CPU_THREADS", "3"),
            ("BPLAT_CORELIMIT", "1"),
            ("HB_DNN_BPU_SCHEDULE_THRESHOLD", "25"),
            ("HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME", "5"),
            ("HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME", "7"),
            ("HB_MAX_TASK_NUM", "8"),
            ("VNPU_PIN_CORES", "1"),
            ("VNPU_RT_PRIORITY", "true"),
            ("VNPU_CORE_NICE", "10"),
            ("VNPU_TRACE", "/tmp/t.json"),
        ]))
        .unwrap();
        assert_eq!(
            (cfg.cores, cfg.cpu_threads, cfg.core_limit, cfg.max_tasks),
            (4, 3, 1, 8)
        );
        assert_eq!(
            (
                cfg.bpu_schedule_threshold_pct,
                cfg.insert_fc_max_time_ms,
                cfg.wait_dispatch_time_ms
            ),
            (25, 5, 7)
        );
        assert!(cfg.pin_cores && cfg.rt_priority);
        assert_eq!(cfg.core_nice, 10);
        assert_eq!(cfg.trace_path, Some(PathBuf::from("/tmp/t.json")));
    }

    #[test]
    fn rejects_malformed_and_out_of_range_values() {
        for (k, v) in [
            ("VNPU_CORES", "0"),
            ("VNPU_CORES", "33"),
            ("VNPU_CORES", "two"),
            ("BPLAT_CORELIMIT", "-1"),
            ("HB_MAX_TASK_NUM", "0"),
            ("VNPU_CPU_THREADS", "0"),
            ("VNPU_PIN_CORES", "maybe"),
            ("HB_DNN_BPU_SCHEDULE_THRESHOLD", "1.5"),
            ("VNPU_CORE_NICE", "20"),
            ("VNPU_CORE_NICE", "-21"),
            ("VNPU_CORE_NICE", "low"),
        ] {
            let err = SchedConfig::from_lookup(lookup(&[(k, v)])).unwrap_err();
            match err {
                Error::Config { name, .. } => assert_eq!(name, k),
                other => panic!("{k}={v}: unexpected {other:?}"),
            }
        }
    }
}

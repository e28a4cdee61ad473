//! Scheduler configuration: core count, CPU pool size, preemption and insertion
//! thresholds, task limit and thread placement. The settings are read (environment and
//! `vnpuSetConfig`) by `crate::config`, the one place of keys, ranges and defaults.
//!
//! Invariants of a [`SchedConfig`] accepted by [`SchedConfig::validate`]: `1 <= cores <= 32`
//! (a core mask is a `u32`), `cpu_threads >= 1`, `max_tasks >= 1`, `trace_capacity >= 1`.
//! A setting that is set but malformed is an [`Error::Config`]; an unset one keeps its
//! default.

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
    /// `VNPU_PIN_CORES`: pin core k's threads to the k-th CPU the process may use (modulo
    /// their count); default [`pin_by_default`].
    pub pin_cores: bool,
    /// `VNPU_RT_PRIORITY`: run core threads under `SCHED_FIFO`.
    pub rt_priority: bool,
    /// `VNPU_CORE_NICE`: OS nice value of the core threads (-20..=19, default 0). A
    /// positive value lets the application's own threads (submitters, waiters) preempt
    /// busy cores at once, which shortens end-to-end latency when the cores saturate
    /// the host's CPUs; negative values need privileges (else a warning, left at 0).
    pub core_nice: i32,
    /// `VNPU_HOST_PRIORITY`: the OS priority of FCs of tasks below the highest live
    /// priority (default [`HostPriority::Idle`]).
    pub host_priority: HostPriority,
    /// `VNPU_PRIORITY_HOLD_MS`: how long a task priority counts as live after its last task
    /// of that priority ended, for the host classes (ms, default 1000; 0 = only while one
    /// is live). Keeps FCs of lower priorities in the low class between the runs of a
    /// periodic high-priority task, so its submitting thread is not kept waiting by them.
    pub priority_hold_ms: u64,
    /// `VNPU_TRACE`: start tracing at creation and dump to this file on `dump_trace`/drop.
    pub trace_path: Option<PathBuf>,
    /// `VNPU_TRACE_CAPACITY`: events kept by the trace ring buffer (default 65536).
    pub trace_capacity: usize,
    /// `VNPU_SPIN_US`: how long an idle core thread, and a thread in `wait`, polls before
    /// sleeping (µs, default 50; 0 = sleep at once). Trades a little CPU for wake-up latency.
    pub spin_us: u64,
}

/// How the OS priority of a core's work follows the priority of its FCs (issue 13).
///
/// Each core then has two threads of fixed OS priority: the *top* thread (nice
/// `core_nice`) runs FCs of tasks whose priority equals the highest priority among live
/// tasks (and tasks that ended within `priority_hold_ms`), the *low* thread runs every
/// other FC. Both take FCs from the one FC queue of the
/// core in its order, one at a time, so FC order is exactly as with one thread; only the
/// OS's choice between CPUs' runnable threads changes: the application's threads and
/// top-class FCs take a CPU from low-class FCs at once. (A thread cannot lower its nice
/// value again without privileges, hence two fixed threads instead of one re-niced one.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPriority {
    /// Low-class FCs run under `SCHED_IDLE` (they get a CPU only when nothing else wants it).
    Idle,
    /// Low-class FCs run at nice 19.
    Nice,
    /// One thread per core at `core_nice`, whatever the FC's priority.
    Off,
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
            pin_cores: pin_by_default(2),
            rt_priority: false,
            core_nice: 0,
            host_priority: HostPriority::Idle,
            priority_hold_ms: 1000,
            trace_path: None,
            trace_capacity: 1 << 16,
            spin_us: 50,
        }
    }
}

/// Whether `cores` virtual cores are pinned when `VNPU_PIN_CORES` is unset: when they
/// are at least as many as the CPUs the process may use, so each CPU serves one core and
/// a core's threads never queue behind another core's on a CPU while a CPU idles (the
/// OS balances threads between CPUs only every few ms).
pub fn pin_by_default(cores: usize) -> bool {
    cores >= std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl SchedConfig {
    /// Reads the configuration from the process settings (`crate::config`: the
    /// environment, read once, and `vnpuSetConfig`).
    pub fn from_env() -> Result<SchedConfig> {
        crate::config::sched_from(crate::config::lookup)
    }

    /// Reads the configuration through `lookup` (variable name → value), so callers and
    /// tests can supply variables without touching the process settings.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<SchedConfig> {
        crate::config::sched_from(lookup)
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

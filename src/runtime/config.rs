//! Process-wide runtime configuration, read from environment variables.

/// Runtime settings (cores, CPU pool, scheduling thresholds, limits).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeConfig {
    /// Number of virtual NPU cores (`VNPU_CORES`, default 2).
    pub cores: usize,
    /// Threads of the CPU pool (`VNPU_CPU_THREADS`, default = host cores).
    pub cpu_threads: usize,
    /// Maximum number of live tasks (`HB_MAX_TASK_NUM`... default 32).
    pub max_tasks: usize,
    /// `BPLAT_CORELIMIT` (0 = no preemption).
    pub core_limit: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cores: 2,
            cpu_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            max_tasks: 32,
            core_limit: 0,
        }
    }
}

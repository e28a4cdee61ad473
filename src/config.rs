//! Configuration: every setting of the library in one table ([`KEYS`]), read from the
//! process environment once (on first use), changeable by [`set`] (C: `vnpuSetConfig`)
//! and read back by [`get`] (C: `vnpuGetConfig`).
//!
//! Keys are the environment variable names. Each key has a kind and range, a default and
//! a moment when it takes effect:
//! - [`Applies::RuntimeStart`]: scheduler settings, read when the process-wide runtime
//!   starts (the first inference-related call); setting one afterwards is
//!   [`Error::ApiUse`] (`HB_DNN_API_USE_ERROR`), since cores and threads exist by then.
//! - [`Applies::ModelLoad`]: read by every model load that follows.
//!
//! Invariants: a stored value has passed its key's check, so readers only fail on
//! malformed *environment* values (an [`Error::Config`] naming the variable, as before);
//! an unknown key or a value out of range is [`Error::Config`]
//! (`HB_DNN_INVALID_ARGUMENT`) and leaves the setting unchanged.

use std::collections::HashMap;
use std::path::PathBuf;

use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::sched::{HostPriority, SchedConfig, MAX_CORES};

/// When a setting is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// When the process-wide runtime starts; fixed afterwards.
    RuntimeStart,
    /// At every model load that follows.
    ModelLoad,
}

/// The values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer in `min..=max`.
    Int {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`/empty.
    Flag,
    /// A file or folder path; empty = none.
    Path,
    /// One of these names; empty = the default.
    Choice(&'static [&'static str]),
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Key and environment variable name.
    pub name: &'static str,
    /// Its values.
    pub kind: Kind,
    /// Its default, as text ("" = none; `VNPU_CPU_THREADS` defaults to the host's CPUs).
    pub default: &'static str,
    /// When it takes effect.
    pub applies: Applies,
    /// What it does.
    pub doc: &'static str,
}

const U32: i64 = u32::MAX as i64;

/// Every setting.
pub const KEYS: &[Key] = &[
    Key {
        name: "VNPU_CORES",
        kind: Kind::Int {
            min: 1,
            max: MAX_CORES as i64,
        },
        default: "2",
        applies: Applies::RuntimeStart,
        doc: "number of virtual NPU cores",
    },
    Key {
        name: "VNPU_CPU_THREADS",
        kind: Kind::Int { min: 1, max: 4096 },
        default: "",
        applies: Applies::RuntimeStart,
        doc: "threads of the CPU pool that runs CPU segments (default: the host's CPUs)",
    },
    Key {
        name: "BPLAT_CORELIMIT",
        kind: Kind::Int { min: 0, max: U32 },
        default: "0",
        applies: Applies::RuntimeStart,
        doc: "normal FCs committed ahead of a priority-255 FC (0 = no preemption)",
    },
    Key {
        name: "HB_DNN_BPU_SCHEDULE_THRESHOLD",
        kind: Kind::Int { min: 0, max: U32 },
        default: "10",
        applies: Applies::RuntimeStart,
        doc: "insertion: impact threshold in percent",
    },
    Key {
        name: "HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME",
        kind: Kind::Int { min: 0, max: U32 },
        default: "1000",
        applies: Applies::RuntimeStart,
        doc: "insertion: insert a task whose BPU time is below this (ms)",
    },
    Key {
        name: "HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME",
        kind: Kind::Int { min: 0, max: U32 },
        default: "20",
        applies: Applies::RuntimeStart,
        doc: "insertion: insert when the holder's CPU segment is longer than this (ms)",
    },
    Key {
        name: "HB_MAX_TASK_NUM",
        kind: Kind::Int { min: 1, max: U32 },
        default: "32",
        applies: Applies::RuntimeStart,
        doc: "most live tasks: submitted or being assembled (more = 1), not yet released",
    },
    Key {
        name: "VNPU_PIN_CORES",
        kind: Kind::Flag,
        default: "",
        applies: Applies::RuntimeStart,
        doc: "pin core k's threads to the k-th CPU the process may use (default: on when \
              VNPU_CORES >= those CPUs, so each core keeps a CPU of its own)",
    },
    Key {
        name: "VNPU_RT_PRIORITY",
        kind: Kind::Flag,
        default: "0",
        applies: Applies::RuntimeStart,
        doc: "run core threads under SCHED_FIFO where permitted",
    },
    Key {
        name: "VNPU_CORE_NICE",
        kind: Kind::Int { min: -20, max: 19 },
        default: "0",
        applies: Applies::RuntimeStart,
        doc: "OS nice value of the core threads (negative values need privileges)",
    },
    Key {
        name: "VNPU_HOST_PRIORITY",
        kind: Kind::Choice(&["idle", "nice", "off"]),
        default: "idle",
        applies: Applies::RuntimeStart,
        doc: "OS priority of FCs below the highest live task priority: `idle` runs them on a \
              SCHED_IDLE thread of their core, `nice` on a nice-19 thread, `off` on the one \
              core thread",
    },
    Key {
        name: "VNPU_PRIORITY_HOLD_MS",
        kind: Kind::Int {
            min: 0,
            max: 3_600_000,
        },
        default: "1000",
        applies: Applies::RuntimeStart,
        doc: "ms a task priority still counts as live for VNPU_HOST_PRIORITY after its last \
              task ended (0 = only while one is live)",
    },
    Key {
        name: "VNPU_TRACE",
        kind: Kind::Path,
        default: "",
        applies: Applies::RuntimeStart,
        doc: "trace from the start and write Chrome trace JSON here at exit",
    },
    Key {
        name: "VNPU_TRACE_CAPACITY",
        kind: Kind::Int {
            min: 1,
            max: 1 << 24,
        },
        default: "65536",
        applies: Applies::RuntimeStart,
        doc: "trace events kept (a ring buffer)",
    },
    Key {
        name: "VNPU_SPIN_US",
        kind: Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        default: "50",
        applies: Applies::RuntimeStart,
        doc: "µs an idle core or a waiter polls before sleeping",
    },
    Key {
        name: "VNPU_INTRA_OP_THREADS",
        kind: Kind::Int {
            min: 1,
            max: crate::exec::MAX_INTRA_OP_THREADS as i64,
        },
        default: "1",
        applies: Applies::ModelLoad,
        doc: "threads one large node may use",
    },
    Key {
        name: "VNPU_PRECISION",
        kind: Kind::Choice(&["f32", "bf16"]),
        default: "f32",
        applies: Applies::ModelLoad,
        doc: "compute precision of dense convs and Gemm / MatMul with constant weights: \
              `bf16` multiplies bf16-rounded operands with f32 accumulation (AVX512_BF16; \
              a model load on a CPU without it fails with a config error)",
    },
    Key {
        name: "VNPU_BF16_KERNELS",
        kind: Kind::Choice(&["avx512-bf16", "amx-bf16"]),
        default: "",
        applies: Applies::ModelLoad,
        doc: "bf16 kernels a bf16 plan uses (default: the best this CPU has, `amx-bf16` \
              where it has AMX-BF16: dense convs of 16+ input channels on AMX tiles, \
              otherwise as `avx512-bf16`)",
    },
    Key {
        name: "VNPU_CACHE_DIR",
        kind: Kind::Path,
        default: "",
        applies: Applies::ModelLoad,
        doc: "folder caching ONNX models compiled on load (empty = no cache)",
    },
    Key {
        name: "VNPU_MEMORY_BUDGET_MB",
        kind: Kind::Int {
            min: 1,
            max: 1 << 30,
        },
        default: "",
        applies: Applies::ModelLoad,
        doc: "most memory (MiB) one model's planned tensors and constants may take \
              (default: half of the physical memory)",
    },
    Key {
        name: "VNPU_HUGE_PAGES",
        kind: Kind::Flag,
        default: "1",
        applies: Applies::ModelLoad,
        doc: "keep a loaded model's weights on 2 MiB pages (Linux transparent huge pages \
              in `madvise` or `always` mode): a file's bytes are copied off its map, large \
              packed weights off the heap; `0` reads them in place from the file (zero \
              copy, 4 KiB pages)",
    },
    Key {
        name: "VNPU_SERVICE",
        kind: Kind::Path,
        default: "",
        applies: Applies::RuntimeStart,
        doc: "socket of a `vnpu serve` daemon: every hbDNN/hbSys call goes there (empty = \
              run in process)",
    },
    Key {
        name: "VNPU_KERNEL_TABLE",
        kind: Kind::Choice(&["portable", "avx2+fma", "avx512"]),
        default: "",
        applies: Applies::RuntimeStart,
        doc: "kernel table to use (default: the best this CPU supports); read at the first \
              kernel call",
    },
];

/// The checked value of a [`Kind::Choice`] key, `None` when unset (or empty); a malformed
/// environment value is [`Error::Config`].
pub fn choice(name: &str) -> Result<Option<&'static str>> {
    let k = key(name)?;
    match lookup(k.name) {
        None => Ok(None),
        Some(v) => match parse(k, &v)? {
            Value::Choice(c) => Ok(c),
            _ => Ok(None),
        },
    }
}

/// The checked value of a [`Kind::Flag`] key, its default when unset; a malformed
/// environment value is [`Error::Config`].
pub fn flag(name: &str) -> Result<bool> {
    let k = key(name)?;
    let text = lookup(k.name).unwrap_or_else(|| k.default.to_owned());
    match parse(k, &text)? {
        Value::Flag(v) => Ok(v),
        _ => Ok(false),
    }
}

/// The key named `name`.
pub fn key(name: &str) -> Result<&'static Key> {
    KEYS.iter()
        .find(|k| k.name == name)
        .ok_or_else(|| Error::Config {
            name: name.into(),
            value: String::new(),
            reason: format!(
                "unknown key; known keys: {}",
                KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            ),
        })
}

/// A checked value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Int(i64),
    Flag(bool),
    Path(Option<PathBuf>),
    Choice(Option<&'static str>),
}

fn parse(k: &Key, text: &str) -> Result<Value> {
    let bad = |reason: String| Error::Config {
        name: k.name.into(),
        value: text.into(),
        reason,
    };
    match k.kind {
        Kind::Int { min, max } => text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|v| (min..=max).contains(v))
            .map(Value::Int)
            .ok_or_else(|| bad(format!("expected an integer in {min}..={max}"))),
        Kind::Flag => match text.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Value::Flag(true)),
            "0" | "false" | "no" | "off" | "" => Ok(Value::Flag(false)),
            _ => Err(bad("expected 0/1, true/false, yes/no or on/off".into())),
        },
        Kind::Path => Ok(Value::Path(
            (!text.trim().is_empty()).then(|| PathBuf::from(text)),
        )),
        Kind::Choice(names) => match text.trim() {
            "" => Ok(Value::Choice(None)),
            t => names
                .iter()
                .find(|n| **n == t)
                .map(|n| Value::Choice(Some(n)))
                .ok_or_else(|| bad(format!("expected one of: {}", names.join(", ")))),
        },
    }
}

struct Store {
    /// Values set (from the environment at first use, then by [`set`]).
    values: HashMap<&'static str, String>,
    runtime_started: bool,
}

static STORE: Lazy<Mutex<Store>> = Lazy::new(|| {
    let values = KEYS
        .iter()
        .filter_map(|k| std::env::var(k.name).ok().map(|v| (k.name, v)))
        .collect();
    Mutex::new(Store {
        values,
        runtime_started: false,
    })
});

/// The value of setting `name` (as set or from the environment), `None` when unset.
/// This is the lookup every reader uses (`SchedConfig::from_env`, `PlanOptions::from_env`,
/// the loader's cache folder).
pub fn lookup(name: &str) -> Option<String> {
    STORE.lock().values.get(name).cloned()
}

/// The current value of `name` as text: its set value, else its default.
pub fn get(name: &str) -> Result<String> {
    let k = key(name)?;
    if let Some(v) = lookup(k.name) {
        return Ok(v);
    }
    Ok(match k.name {
        "VNPU_CPU_THREADS" => SchedConfig::default().cpu_threads.to_string(),
        "VNPU_PIN_CORES" => {
            let cores = lookup("VNPU_CORES").and_then(|v| v.trim().parse().ok());
            u8::from(crate::sched::pin_by_default(cores.unwrap_or(2))).to_string()
        }
        _ => k.default.to_owned(),
    })
}

/// Sets `name` to `value` (`None` = back to its default). Unknown keys and values out of
/// range are [`Error::Config`]; a [`Applies::RuntimeStart`] key after the runtime started
/// is [`Error::ApiUse`]. Nothing changes on error.
pub fn set(name: &str, value: Option<&str>) -> Result<()> {
    let k = key(name)?;
    if let Some(v) = value {
        parse(k, v)?;
    }
    let mut st = STORE.lock();
    if k.applies == Applies::RuntimeStart && st.runtime_started {
        return Err(Error::ApiUse(format!(
            "{} takes effect when the runtime starts, and it has started; set it before the \
             first inference call (or in the environment)",
            k.name
        )));
    }
    match value {
        Some(v) => st.values.insert(k.name, v.to_owned()),
        None => st.values.remove(k.name),
    };
    Ok(())
}

/// The scheduler settings for the process-wide runtime; from now on
/// [`Applies::RuntimeStart`] keys are fixed.
pub fn start_runtime() -> Result<SchedConfig> {
    let mut st = STORE.lock();
    let cfg = sched_from(|n| st.values.get(n).cloned())?;
    st.runtime_started = true;
    Ok(cfg)
}

/// Reads the scheduler settings through `lookup` (variable name → value); an unset key
/// keeps its default, a malformed one is [`Error::Config`] naming it.
pub fn sched_from(lookup: impl Fn(&str) -> Option<String>) -> Result<SchedConfig> {
    let read = |name: &str| -> Result<Option<Value>> {
        let k = key(name)?;
        lookup(name).map(|v| parse(k, &v)).transpose()
    };
    let int = |name: &str| -> Result<Option<i64>> {
        Ok(match read(name)? {
            Some(Value::Int(v)) => Some(v),
            _ => None,
        })
    };
    let flag = |name: &str| -> Result<Option<bool>> {
        Ok(match read(name)? {
            Some(Value::Flag(v)) => Some(v),
            _ => None,
        })
    };
    let size = |v: i64| usize::try_from(v).unwrap_or(usize::MAX);
    let num = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut cfg = SchedConfig::default();
    if let Some(v) = int("VNPU_CORES")? {
        cfg.cores = size(v);
    }
    if let Some(v) = int("VNPU_CPU_THREADS")? {
        cfg.cpu_threads = size(v);
    }
    if let Some(v) = int("BPLAT_CORELIMIT")? {
        cfg.core_limit = size(v);
    }
    if let Some(v) = int("HB_DNN_BPU_SCHEDULE_THRESHOLD")? {
        cfg.bpu_schedule_threshold_pct = num(v);
    }
    if let Some(v) = int("HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME")? {
        cfg.insert_fc_max_time_ms = num(v);
    }
    if let Some(v) = int("HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME")? {
        cfg.wait_dispatch_time_ms = num(v);
    }
    if let Some(v) = int("HB_MAX_TASK_NUM")? {
        cfg.max_tasks = size(v);
    }
    cfg.pin_cores = match flag("VNPU_PIN_CORES")? {
        Some(v) => v,
        None => crate::sched::pin_by_default(cfg.cores),
    };
    if let Some(v) = flag("VNPU_RT_PRIORITY")? {
        cfg.rt_priority = v;
    }
    if let Some(v) = int("VNPU_CORE_NICE")? {
        cfg.core_nice = i32::try_from(v).unwrap_or(0);
    }
    if let Some(Value::Choice(Some(c))) = read("VNPU_HOST_PRIORITY")? {
        cfg.host_priority = match c {
            "nice" => HostPriority::Nice,
            "off" => HostPriority::Off,
            _ => HostPriority::Idle,
        };
    }
    if let Some(v) = int("VNPU_PRIORITY_HOLD_MS")? {
        cfg.priority_hold_ms = num(v);
    }
    if let Some(Value::Path(p)) = read("VNPU_TRACE")? {
        cfg.trace_path = p;
    }
    if let Some(v) = int("VNPU_TRACE_CAPACITY")? {
        cfg.trace_capacity = size(v);
    }
    if let Some(v) = int("VNPU_SPIN_US")? {
        cfg.spin_us = num(v);
    }
    cfg.validate()?;
    Ok(cfg)
}

/// The compile cache folder (`VNPU_CACHE_DIR`), if configured.
pub fn cache_dir() -> Option<PathBuf> {
    lookup("VNPU_CACHE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_when_unset() {
        let cfg = sched_from(lookup(&[])).unwrap();
        assert_eq!(cfg, SchedConfig::default());
        assert_eq!(cfg.cores, 2);
        assert_eq!(cfg.core_limit, 0);
        assert_eq!(cfg.bpu_schedule_threshold_pct, 10);
        assert_eq!(cfg.insert_fc_max_time_ms, 1000);
        assert_eq!(cfg.wait_dispatch_time_ms, 20);
        assert_eq!(cfg.max_tasks, 32);
        assert!(!cfg.rt_priority);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            cfg.pin_cores,
            cpus <= 2,
            "two cores pinned where they cover the CPUs"
        );
        let many = sched_from(lookup(&[("VNPU_CORES", "32")])).unwrap();
        assert_eq!(many.pin_cores, cpus <= 32);
        let off = sched_from(lookup(&[("VNPU_CORES", "32"), ("VNPU_PIN_CORES", "0")])).unwrap();
        assert!(!off.pin_cores);
        assert_eq!(cfg.priority_hold_ms, 1000);
        assert!(cfg.trace_path.is_none());
    }

    #[test]
    fn table_defaults_equal_the_built_in_defaults() {
        let from_table = sched_from(|n| {
            key(n)
                .ok()
                .map(|k| k.default.to_owned())
                .filter(|d| !d.is_empty())
        })
        .unwrap();
        assert_eq!(from_table, SchedConfig::default());
        for k in KEYS {
            if !k.default.is_empty() {
                parse(k, k.default).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            }
        }
    }

    #[test]
    fn reads_every_variable() {
        let cfg = sched_from(lookup(&[
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
            ("VNPU_TRACE_CAPACITY", "100"),
            ("VNPU_SPIN_US", "0"),
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
        assert_eq!((cfg.trace_capacity, cfg.spin_us), (100, 0));
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
            ("VNPU_TRACE_CAPACITY", "0"),
        ] {
            let err = sched_from(lookup(&[(k, v)])).unwrap_err();
            match err {
                Error::Config { name, .. } => assert_eq!(name, k),
                other => panic!("{k}={v}: unexpected {other:?}"),
            }
        }
    }

    /// A flag reads its default until set, then the set value (placement only: other
    /// tests loading models meanwhile compute the same bits either way).
    #[test]
    fn flags_read_their_default_until_set() {
        set("VNPU_HUGE_PAGES", None).unwrap();
        assert!(flag("VNPU_HUGE_PAGES").unwrap());
        set("VNPU_HUGE_PAGES", Some("off")).unwrap();
        assert!(!flag("VNPU_HUGE_PAGES").unwrap());
        assert!(set("VNPU_HUGE_PAGES", Some("2")).is_err());
        set("VNPU_HUGE_PAGES", None).unwrap();
        assert!(flag("VNPU_HUGE_PAGES").unwrap());
        assert!(matches!(flag("VNPU_NOPE"), Err(Error::Config { .. })));
    }

    #[test]
    fn every_key_checks_its_values() {
        for k in KEYS {
            match k.kind {
                Kind::Int { min, max } => {
                    assert!(parse(k, &min.to_string()).is_ok());
                    assert!(parse(k, &max.to_string()).is_ok());
                    assert!(parse(k, &(min - 1).to_string()).is_err(), "{}", k.name);
                    assert!(parse(k, &(max + 1).to_string()).is_err(), "{}", k.name);
                }
                Kind::Flag => {
                    assert_eq!(parse(k, "on").unwrap(), Value::Flag(true));
                    assert!(parse(k, "2").is_err());
                }
                Kind::Path => assert_eq!(parse(k, "").unwrap(), Value::Path(None)),
                Kind::Choice(names) => {
                    for n in names {
                        assert_eq!(parse(k, n).unwrap(), Value::Choice(Some(n)));
                    }
                    assert!(parse(k, "nope").is_err(), "{}", k.name);
                }
            }
        }
        assert!(matches!(key("VNPU_NOPE"), Err(Error::Config { .. })));
    }
}

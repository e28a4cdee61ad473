//! vnpu's configuration and trace calls: `vnpuSetConfig` / `vnpuGetConfig` over
//! `crate::config` (one table of keys, ranges and defaults), and trace start / stop /
//! dump on the process-wide runtime.
#![allow(non_snake_case)]

use std::ffi::c_char;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::ffi::boundary::{self, c_str, non_null};
use crate::runtime::Runtime;

/// Sets configuration key `key` to `value` (a NUL-terminated string; NULL = back to the
/// default). Keys are the environment variable names, read from the environment once at
/// first use; this call overrides them for the process.
///
/// Keys taking effect when the runtime starts (the first inference-related call):
/// - `VNPU_CORES` 1..32 (default 2): virtual NPU cores;
/// - `VNPU_CPU_THREADS` 1..4096 (default: host CPUs): CPU pool threads;
/// - `BPLAT_CORELIMIT` 0..4294967295 (default 0 = no preemption): normal FCs committed
///   ahead of a priority-255 FC;
/// - `HB_DNN_BPU_SCHEDULE_THRESHOLD` (percent, default 10),
///   `HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME` (ms, default 1000),
///   `HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME` (ms, default 20): insertion thresholds,
///   0..4294967295;
/// - `HB_MAX_TASK_NUM` 1..4294967295 (default 32): live tasks, those being assembled with
///   `more = 1` included;
/// - `VNPU_PIN_CORES`, `VNPU_RT_PRIORITY`: 0/1, true/false, yes/no, on/off (default 0);
/// - `VNPU_CORE_NICE` -20..19 (default 0): nice value of the core threads;
/// - `VNPU_TRACE` (path, default none): trace from the start, written at exit;
/// - `VNPU_TRACE_CAPACITY` 1..16777216 (default 65536): trace events kept;
/// - `VNPU_SPIN_US` 0..1000000 (default 50): polling before a core or waiter sleeps.
///
/// Keys taking effect at each later model load: `VNPU_INTRA_OP_THREADS` 1..64 (default
/// 1), `VNPU_CACHE_DIR` (path, empty = no compile cache), `VNPU_MEMORY_BUDGET_MB`
/// 1..1073741824 (default: half of the physical memory): most memory one model's planned
/// tensors and constants may take; `VNPU_HUGE_PAGES` 0/1 (default 1): weights copied
/// onto transparent huge pages at load (0: read in place from the file's map).
///
/// `VNPU_KERNEL_TABLE` (`portable`, `avx2+fma` or `avx512`; default: the best this CPU supports)
/// takes effect at the first kernel call of the process.
///
/// Returns 0; `HB_DNN_INVALID_ARGUMENT` for a NULL or unknown key or a value that is
/// malformed or out of range (the detail names the key, the value and the range);
/// `HB_DNN_API_USE_ERROR` for a runtime-start key once the runtime has started. Nothing
/// changes on error. Thread-safe.
///
/// # Safety
/// `key` and `value` must be NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn vnpuSetConfig(key: *const c_char, value: *const c_char) -> i32 {
    boundary::status(|| {
        // SAFETY: NULL or NUL-terminated (caller's contract).
        let key = unsafe { c_str(key, "key") }?;
        let value = if value.is_null() {
            None
        } else {
            // SAFETY: non-null and NUL-terminated (caller's contract).
            Some(unsafe { c_str(value, "value") }?)
        };
        crate::config::set(key, value)
    })
}

/// Copies the current value of configuration key `key` (as set, else from the
/// environment, else its default; see `vnpuSetConfig` for the keys) into `value`, a
/// buffer of `valueSize` bytes, NUL-terminated.
///
/// Returns 0; `HB_DNN_INVALID_ARGUMENT` for a NULL or unknown key, a NULL buffer, or a
/// buffer too small (the detail gives the size needed; nothing is written). Thread-safe.
///
/// # Safety
/// `key` must be NULL or NUL-terminated; `value` NULL or writable for `valueSize` bytes.
#[no_mangle]
pub unsafe extern "C" fn vnpuGetConfig(
    key: *const c_char,
    value: *mut c_char,
    valueSize: i32,
) -> i32 {
    boundary::status(|| {
        // SAFETY: NULL or NUL-terminated (caller's contract).
        let key = unsafe { c_str(key, "key") }?;
        non_null(value, "value")?;
        let text = crate::config::get(key)?;
        let need = text.len() + 1;
        if usize::try_from(valueSize).map_or(true, |n| n < need) {
            return Err(Error::InvalidArgument {
                name: "valueSize".into(),
                reason: format!("{valueSize} bytes; the value of {key} needs {need}"),
            });
        }
        // SAFETY: `value` is writable for `valueSize` >= need bytes (caller's contract);
        // the source is a live String of `need - 1` bytes, not overlapping.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), value.cast::<u8>(), text.len());
            value.add(text.len()).write(0);
        }
        Ok(())
    })
}

/// Starts recording scheduling trace events (keeps earlier ones; the buffer keeps the
/// newest `VNPU_TRACE_CAPACITY`). Starts the runtime if needed. Returns 0 or the error of
/// starting the runtime. Thread-safe.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn vnpuTraceStart() -> i32 {
    boundary::status(|| {
        Runtime::global()?.scheduler().trace_start();
        Ok(())
    })
}

/// Stops recording trace events (what was recorded is kept for `vnpuTraceDump`).
/// Returns 0 or the error of starting the runtime. Thread-safe.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn vnpuTraceStop() -> i32 {
    boundary::status(|| {
        Runtime::global()?.scheduler().trace_stop();
        Ok(())
    })
}

fn dump_to(path: Option<PathBuf>) -> Result<()> {
    let s = Runtime::global()?.scheduler();
    match path {
        Some(p) => s.dump_trace_to(&p),
        None => s.dump_trace(),
    }
}

/// Writes the recorded trace as Chrome / Perfetto JSON to `path` (NULL = the `VNPU_TRACE`
/// path). Returns 0; `HB_DNN_CAN_NOT_OPEN_FILE` when the file cannot be written;
/// `HB_DNN_API_USE_ERROR` for NULL without a `VNPU_TRACE` path. Thread-safe.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vnpuTraceDump(path: *const c_char) -> i32 {
    boundary::status(|| {
        let path = if path.is_null() {
            None
        } else {
            // SAFETY: non-null and NUL-terminated (caller's contract).
            Some(PathBuf::from(unsafe { c_str(path, "path") }?))
        };
        dump_to(path)
    })
}

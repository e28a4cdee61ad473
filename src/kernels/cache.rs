//! Sizes of this CPU's data caches, as the C library reports them, for the kernels that
//! choose a blocking or an algorithm by what stays in cache.

/// Bytes of the L1 data cache (32 KiB where the C library does not report it, or
/// reports something implausible).
pub fn l1_data_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| reported(Level::L1Data).unwrap_or(32 << 10))
}

/// Bytes of the L2 cache of one core (1 MiB where the C library does not report it, or
/// reports something implausible).
pub fn l2_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| reported(Level::L2).unwrap_or(1 << 20))
}

/// A cache level [`reported`] asks for.
#[derive(Clone, Copy)]
enum Level {
    L1Data,
    L2,
}

/// The size the C library reports for `level`, where it does and it is plausible
/// (16 KiB to 1 MiB for L1, 128 KiB to 64 MiB for L2).
fn reported(level: Level) -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (name, lo, hi) = match level {
            Level::L1Data => (libc::_SC_LEVEL1_DCACHE_SIZE, 16 << 10, 1 << 20),
            Level::L2 => (libc::_SC_LEVEL2_CACHE_SIZE, 128 << 10, 64 << 20),
        };
        // SAFETY: sysconf only reads a configuration value.
        let v = unsafe { libc::sysconf(name) };
        (lo..=hi).contains(&v).then_some(v as usize)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = level;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_plausible_and_ordered() {
        let (l1, l2) = (l1_data_bytes(), l2_bytes());
        assert!((16 << 10..=1 << 20).contains(&l1), "L1 {l1}");
        assert!((128 << 10..=64 << 20).contains(&l2), "L2 {l2}");
        assert!(l1 < l2, "L1 {l1} >= L2 {l2}");
    }
}

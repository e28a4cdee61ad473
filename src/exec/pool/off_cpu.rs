//! Time a working thread spends off its CPU: the wall-clock time of a stretch of work
//! minus the thread's CPU time over it (and minus the time it chose to sleep, e.g. while
//! waiting for helpers). What is left is time the thread was runnable but not running:
//! another thread of the guest had its CPU, or the hypervisor had taken the virtual CPU
//! away (with `CONFIG_PARAVIRT_TIME_ACCOUNTING` a thread's CPU time excludes stolen time).
//!
//! Measured only while some scheduler trace records ([`start`] / [`stop`] count the
//! recorders): one `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` system call at each end of an
//! FC, a CPU segment or a helper's share of a job.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::compile::cost::thread_cpu_us;

/// Trace recorders running now; measuring while non-zero.
static RECORDERS: AtomicUsize = AtomicUsize::new(0);

/// A trace recorder started: measure from now on.
pub fn start() {
    RECORDERS.fetch_add(1, Ordering::AcqRel);
}

/// A trace recorder stopped (each call matches one [`start`]).
pub fn stop() {
    let _ = RECORDERS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
}

/// Whether off-CPU time is measured now.
#[inline]
pub fn measuring() -> bool {
    RECORDERS.load(Ordering::Relaxed) != 0
}

/// Wall-clock and CPU time at the start of a stretch of work on the calling thread.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: Instant,
    /// [`thread_cpu_us`] at the start.
    cpu_us: f64,
}

impl Clock {
    /// Starts a stretch on the calling thread.
    pub fn start() -> Clock {
        Clock {
            wall: Instant::now(),
            cpu_us: thread_cpu_us(),
        }
    }

    /// Nanoseconds the calling thread (the one that started the clock) was off its CPU
    /// since [`Clock::start`], not counting `slept_ns` it spent asleep on purpose.
    pub fn off_ns(&self, slept_ns: u64) -> u64 {
        let wall = u64::try_from(self.wall.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let cpu = ((thread_cpu_us() - self.cpu_us).max(0.0) * 1e3) as u64;
        wall.saturating_sub(cpu).saturating_sub(slept_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_busy_thread_loses_less_than_a_sleeping_one() {
        // Busy for 20 ms: its CPU time follows the wall clock except where the OS or the
        // host took the CPU; asleep for 20 ms: all of it is off the CPU.
        let busy = Clock::start();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let busy_off = busy.off_ns(0);
        let asleep = Clock::start();
        std::thread::sleep(Duration::from_millis(20));
        let asleep_off = asleep.off_ns(0);
        assert!(asleep_off >= 19_000_000, "asleep {asleep_off} ns");
        assert!(busy_off < asleep_off, "busy {busy_off} asleep {asleep_off}");
        // Time slept on purpose is not counted.
        let slept = Clock::start();
        std::thread::sleep(Duration::from_millis(5));
        let wall = u64::try_from(slept.wall.elapsed().as_nanos()).unwrap();
        assert!(slept.off_ns(wall) < 1_000_000);
    }

    #[test]
    fn measuring_while_a_recorder_runs() {
        start();
        assert!(measuring());
        stop();
    }
}

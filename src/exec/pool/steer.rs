//! Helper placement: keeps an offered helper off the CPU its caller runs on.
//!
//! A helper woken by an offer is often placed by the OS on the waker's own CPU (wake
//! affinity); there it competes with the caller, which keeps that CPU until its own chunks
//! are done, and the chunk the helper claimed waits. Before an offer the caller therefore
//! sets the helper's CPU affinity to every CPU the helper was started with except the
//! caller's current one (the helper's own starting set, not the caller's: a caller pinned
//! to one CPU, as core threads are with `VNPU_PIN_CORES`, would leave nothing). A syscall happens only when the caller's CPU differs from the one the
//! helper was last steered away from. Linux only; elsewhere (or with one usable CPU)
//! nothing changes.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Not yet known / never steered.
const NONE: i32 = -1;

/// Steering state of one helper thread.
#[derive(Debug)]
pub(super) struct Steer {
    /// The helper's kernel thread id (set by the helper itself when it starts).
    tid: AtomicI32,
    /// The CPU the helper's affinity currently excludes.
    away_from: AtomicI32,
    /// The CPUs the helper may run on when it starts, one bit per CPU up to
    /// [`MASK_CPUS`] (0 = unknown: never steered).
    start_mask: [AtomicU64; MASK_WORDS],
}

/// Words of a [`Steer::start_mask`].
const MASK_WORDS: usize = 16;
/// CPUs a [`Steer::start_mask`] can name; a helper allowed on a CPU beyond it is not
/// steered.
const MASK_CPUS: usize = MASK_WORDS * 64;

impl Steer {
    pub(super) fn new() -> Steer {
        Steer {
            tid: AtomicI32::new(NONE),
            away_from: AtomicI32::new(NONE),
            start_mask: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Records the calling thread (the helper) as the one to steer.
    pub(super) fn register_current(&self) {
        if let Some(mask) = current_mask() {
            for (w, m) in self.start_mask.iter().zip(mask) {
                w.store(m, Ordering::Relaxed);
            }
            self.tid.store(current_tid(), Ordering::Release);
        }
    }

    /// Keeps the helper off the calling thread's current CPU (best effort: a refused or
    /// unsupported call leaves the helper where the OS puts it).
    pub(super) fn away_from_caller(&self) {
        let tid = self.tid.load(Ordering::Acquire);
        let Some(here) = current_cpu() else { return };
        if tid == NONE || self.away_from.load(Ordering::Relaxed) == here {
            return;
        }
        let mask: [u64; MASK_WORDS] =
            std::array::from_fn(|i| self.start_mask[i].load(Ordering::Relaxed));
        if exclude_cpu(tid, &mask, here) {
            self.away_from.store(here, Ordering::Relaxed);
        }
    }
}

#[cfg(target_os = "linux")]
fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(not(target_os = "linux"))]
fn current_tid() -> i32 {
    NONE
}

#[cfg(target_os = "linux")]
fn current_cpu() -> Option<i32> {
    // SAFETY: sched_getcpu has no preconditions; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c)
}

#[cfg(not(target_os = "linux"))]
fn current_cpu() -> Option<i32> {
    None
}

/// The calling thread's CPU affinity as bits (None when the OS refuses, or it names a
/// CPU at or beyond [`MASK_CPUS`]).
#[cfg(target_os = "linux")]
fn current_mask() -> Option<[u64; MASK_WORDS]> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = the calling thread; the pointer and size describe `set`, alive here.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    let mut mask = [0u64; MASK_WORDS];
    for cpu in 0..libc::CPU_SETSIZE as usize {
        // SAFETY: `set` is a valid cpu_set_t; CPU_ISSET bound-checks `cpu`.
        if unsafe { libc::CPU_ISSET(cpu, &set) } {
            *mask.get_mut(cpu / 64)? |= 1 << (cpu % 64);
        }
    }
    Some(mask)
}

#[cfg(not(target_os = "linux"))]
fn current_mask() -> Option<[u64; MASK_WORDS]> {
    None
}

/// Sets thread `tid`'s affinity to the CPUs of `mask` minus `cpu`; false when that leaves
/// no CPU or the OS refuses.
#[cfg(target_os = "linux")]
fn exclude_cpu(tid: i32, mask: &[u64; MASK_WORDS], cpu: i32) -> bool {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut left = 0usize;
    for c in 0..MASK_CPUS {
        if mask[c / 64] & (1 << (c % 64)) != 0 && c as i32 != cpu {
            // SAFETY: `set` is a valid, owned cpu_set_t; CPU_SET bound-checks `c`.
            unsafe { libc::CPU_SET(c, &mut set) };
            left += 1;
        }
    }
    if left == 0 {
        return false;
    }
    // SAFETY: `tid` is a thread of this process (the helper, alive as long as the pool);
    // the pointer and size describe `set`, alive here.
    unsafe { libc::sched_setaffinity(tid, size, &set) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn exclude_cpu(_tid: i32, _mask: &[u64; MASK_WORDS], _cpu: i32) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The CPUs thread `tid` may run on.
    fn allowed(tid: i32) -> Vec<usize> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `tid` is a live thread of this process; pointer and size describe `set`.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, size, &mut set) }, 0);
        // SAFETY: `set` is valid; CPU_ISSET bound-checks its index.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// A registered stand-in helper thread that waits until stopped.
    struct Helper(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>);

    impl Helper {
        fn start() -> (std::sync::Arc<Steer>, Helper) {
            let steer = std::sync::Arc::new(Steer::new());
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
            let s = steer.clone();
            let h = std::thread::spawn(move || {
                s.register_current();
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            });
            ready_rx.recv().unwrap();
            (steer, Helper(tx, h))
        }

        fn stop(self) {
            self.0.send(()).unwrap();
            self.1.join().unwrap();
        }
    }

    #[test]
    fn a_steered_thread_may_not_run_on_the_callers_cpu() {
        let (steer, helper) = Helper::start();
        let tid = steer.tid.load(Ordering::Acquire);
        let before = allowed(tid);
        steer.away_from_caller();
        let away = steer.away_from.load(Ordering::Relaxed);
        if before.len() < 2 {
            // One usable CPU: nothing to steer to, the helper is left alone.
            assert_eq!(away, NONE);
            assert_eq!(allowed(tid), before);
        } else {
            assert_ne!(away, NONE, "a CPU was excluded");
            let after = allowed(tid);
            assert!(
                !after.contains(&(away as usize)),
                "{after:?} excludes {away}"
            );
            let mut want = before.clone();
            want.retain(|&c| c != away as usize);
            assert_eq!(after, want, "only the caller's CPU is taken away");
        }
        helper.stop();
    }

    #[test]
    fn a_caller_pinned_to_one_cpu_still_steers_the_helper_off_it() {
        let (steer, helper) = Helper::start();
        let tid = steer.tid.load(Ordering::Acquire);
        let before = allowed(tid);
        let first = before[0];
        let s = steer.clone();
        std::thread::spawn(move || {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            // SAFETY: all-zero is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is valid; CPU_SET bound-checks its index.
            unsafe { libc::CPU_SET(first, &mut set) };
            // SAFETY: pid 0 = this thread; pointer and size describe `set`.
            assert_eq!(unsafe { libc::sched_setaffinity(0, size, &set) }, 0);
            s.away_from_caller();
        })
        .join()
        .unwrap();
        let mut want = before.clone();
        want.retain(|&c| c != first);
        if want.is_empty() {
            assert_eq!(allowed(tid), before, "one CPU: left alone");
        } else {
            assert_eq!(
                allowed(tid),
                want,
                "only the pinned caller's CPU is taken away"
            );
        }
        helper.stop();
    }
}

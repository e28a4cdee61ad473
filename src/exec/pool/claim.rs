//! CPU claims: a helper running (or polling for) top-class chunks claims its CPU, and so
//! does a scheduler thread while it runs a top-class FC (which matters where more virtual
//! cores than CPUs put a low-class FC of another core on its CPU); a low-class FC steps
//! aside on a claimed CPU at its next node boundary or yield point until the claim ends.
//!
//! Why: the OS does not keep a `SCHED_IDLE` / nice-19 thread off a CPU that a normal
//! thread wants. Linux's EEVDF scheduler wakes the helper at once (wake-up preemption),
//! but once the helper has run longer than its slice it is no longer "eligible" and the
//! low thread gets the CPU for a whole slice, up to a 4 ms tick, while the FC that
//! offered the chunk waits for it (measured with `perf sched` on the priority bench:
//! top-class threads waiting 3-4 ms behind `vnpu-core*-low`). A low thread that parks
//! itself while the helper holds the CPU leaves the OS nothing to choose.
//!
//! Protocol: a helper [`claim`]s its current CPU when it attaches to a job and keeps the
//! claim while it polls for the next one; it [`release`]s it before it sleeps. A
//! low-class thread calls [`step_aside`] between nodes: on a claimed CPU it sleeps until
//! no claim of that CPU is left. Counts and the waiter gauge are `SeqCst`, so a release
//! either sees a waiter and wakes it, or the waiter sees the count at zero.
//!
//! Invariant: a helper never waits for a low-class thread, so stepping aside cannot
//! deadlock; a claim ends at most [`super::SPIN`] after the helper's last chunk.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::sync::{Condvar, Mutex};

/// CPUs whose claims are tracked; a helper on a CPU beyond claims nothing.
const CPUS: usize = 256;

/// Helpers holding each CPU now.
static CLAIMS: [AtomicUsize; CPUS] = [const { AtomicUsize::new(0) }; CPUS];
/// Low-class threads sleeping in [`step_aside`].
static WAITERS: AtomicUsize = AtomicUsize::new(0);
static LOCK: Mutex<()> = Mutex::new(());
static RELEASED: Condvar = Condvar::new();

/// Longest single sleep of a waiter before it looks again (a safety net only: a release
/// always wakes the waiters).
const RECHECK: Duration = Duration::from_millis(2);

/// The CPU the calling thread runs on now, if the OS says.
#[cfg(target_os = "linux")]
pub(super) fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

#[cfg(not(target_os = "linux"))]
pub(super) fn current_cpu() -> Option<usize> {
    None
}

/// Claims the calling thread's CPU; returns what to hand to [`release`].
pub(super) fn claim() -> Option<usize> {
    current_cpu().filter(|&c| c < CPUS).map(claim_cpu)
}

/// Claims `cpu` (< [`CPUS`]); returns it.
fn claim_cpu(cpu: usize) -> usize {
    CLAIMS[cpu].fetch_add(1, Ordering::SeqCst);
    cpu
}

/// Ends a claim made by [`claim`] and wakes the threads stepping aside.
pub(super) fn release(claimed: Option<usize>) {
    let Some(cpu) = claimed else { return };
    CLAIMS[cpu].fetch_sub(1, Ordering::SeqCst);
    if WAITERS.load(Ordering::SeqCst) > 0 {
        let _g = LOCK.lock();
        RELEASED.notify_all();
    }
}

/// Whether `cpu` is claimed by a helper now.
fn claimed(cpu: usize) -> bool {
    CLAIMS[cpu].load(Ordering::SeqCst) != 0
}

/// Sleeps while the calling thread's CPU is claimed (see the module doc). Returns whether
/// it slept.
pub(super) fn step_aside() -> bool {
    current_cpu()
        .filter(|&c| c < CPUS)
        .is_some_and(step_aside_on)
}

/// [`step_aside`] for a thread on `cpu` (< [`CPUS`]).
fn step_aside_on(cpu: usize) -> bool {
    if !claimed(cpu) {
        return false;
    }
    let mut g = LOCK.lock();
    WAITERS.fetch_add(1, Ordering::SeqCst);
    while claimed(cpu) {
        RELEASED.wait_for(&mut g, RECHECK);
    }
    WAITERS.fetch_sub(1, Ordering::SeqCst);
    true
}

/// Claims held on all CPUs now (for tests).
#[cfg(test)]
pub(super) fn total() -> usize {
    CLAIMS.iter().map(|c| c.load(Ordering::SeqCst)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A CPU number no test machine has, so no real helper claims it meanwhile.
    const FAKE: usize = CPUS - 1;

    /// Held by the tests that read the waiter gauge, which is process-wide: one test's
    /// waiter leaving while another takes its baseline would hide the other's waiter.
    static GAUGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn gauge() -> std::sync::MutexGuard<'static, ()> {
        GAUGE.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn an_unclaimed_cpu_lets_a_thread_go_on_at_once() {
        assert!(!step_aside_on(FAKE - 1));
    }

    #[test]
    fn a_thread_steps_aside_until_the_last_claim_of_its_cpu_ends() {
        let _serial = gauge();
        claim_cpu(FAKE);
        claim_cpu(FAKE);
        let before = WAITERS.load(Ordering::SeqCst);
        let waiter = std::thread::spawn(|| step_aside_on(FAKE));
        // The waiter is inside step_aside once the gauge counts it (a hang guard only).
        let start = Instant::now();
        while WAITERS.load(Ordering::SeqCst) == before {
            assert!(start.elapsed() < Duration::from_secs(20), "never waited");
            std::thread::yield_now();
        }
        release(Some(FAKE));
        // One claim is left, so the waiter cannot have returned (it re-checks on every
        // wake-up, the release's included).
        assert_eq!(CLAIMS[FAKE].load(Ordering::SeqCst), 1);
        assert!(!waiter.is_finished());
        release(Some(FAKE));
        assert!(waiter.join().unwrap(), "it slept");
        assert_eq!(CLAIMS[FAKE].load(Ordering::SeqCst), 0);
    }

    /// Pins the calling thread to `cpu`; false where the OS refuses (then the test that
    /// needs it has nothing to check).
    #[cfg(target_os = "linux")]
    fn pin_to(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it for
        // cpu < CPU_SETSIZE (checked); pid 0 = the calling thread.
        unsafe {
            if cpu >= libc::CPU_SETSIZE as usize {
                return false;
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// Starts a low-class thread pinned to `cpu` (claimed by the caller) that passes a
    /// kernel yield point, and waits until it sleeps there (true) or has finished (false:
    /// only a thread that could not be pinned may); returns it with that answer. The
    /// thread returns whether it was pinned.
    #[cfg(target_os = "linux")]
    fn low_thread_at_a_yield_point(cpu: usize) -> (std::thread::JoinHandle<bool>, bool) {
        use crate::exec::pool::{enter, HostClass};
        use crate::kernels::yield_point::yield_point;
        let before = WAITERS.load(Ordering::SeqCst);
        let low = std::thread::spawn(move || {
            if !pin_to(cpu) {
                return false;
            }
            let scope = enter(HostClass::Low);
            yield_point();
            scope.finish();
            true
        });
        // The low thread is inside step_aside once the gauge counts it.
        let start = Instant::now();
        let waited = loop {
            if WAITERS.load(Ordering::SeqCst) > before {
                break true;
            }
            if low.is_finished() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "never waited");
            std::thread::sleep(Duration::from_millis(1));
        };
        (low, waited)
    }

    /// A top-class scope (an FC of the highest live priority) holds its CPU as a helper
    /// does: a low-class FC of another core placed on that CPU steps aside at its yield
    /// points until the scope ends.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_top_class_scope_holds_its_cpu_against_low_class_work() {
        use crate::exec::pool::{enter, HostClass};
        use std::sync::mpsc::channel;
        let _serial = gauge();
        let Some(cpu) = current_cpu().filter(|&c| c < FAKE) else {
            return;
        };
        let (end_tx, end_rx) = channel::<()>();
        let (open_tx, open_rx) = channel::<bool>();
        let top = std::thread::spawn(move || {
            if !pin_to(cpu) {
                open_tx.send(false).unwrap();
                return;
            }
            let scope = enter(HostClass::Top);
            open_tx.send(true).unwrap();
            end_rx.recv().unwrap();
            scope.finish();
        });
        if !open_rx.recv().unwrap() {
            top.join().unwrap();
            return;
        }
        let (low, waited) = low_thread_at_a_yield_point(cpu);
        if !waited {
            end_tx.send(()).unwrap();
            top.join().unwrap();
            assert!(
                !low.join().unwrap(),
                "went on while a top-class scope held its CPU"
            );
            return;
        }
        assert!(!low.is_finished());
        end_tx.send(()).unwrap();
        top.join().unwrap();
        assert!(low.join().unwrap());
    }

    /// A low-class FC inside a kernel (a GEMM's row block, a Winograd channel block)
    /// sleeps at the kernel's yield point while its CPU is claimed, and goes on when the
    /// claim ends; top-class work passes the same point at once.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_low_class_thread_steps_aside_at_a_kernel_yield_point() {
        use crate::exec::pool::{enter, HostClass};
        use crate::kernels::yield_point::yield_point;
        let _serial = gauge();
        let Some(cpu) = current_cpu().filter(|&c| c < FAKE) else {
            return;
        };
        // Top class: never stops, claimed or not.
        let top = std::thread::spawn(move || {
            if !pin_to(cpu) {
                return false;
            }
            let scope = enter(HostClass::Top);
            claim_cpu(cpu);
            yield_point();
            release(Some(cpu));
            scope.finish();
            true
        });
        if !top.join().unwrap() {
            return;
        }
        claim_cpu(cpu);
        let (low, waited) = low_thread_at_a_yield_point(cpu);
        if !waited {
            release(Some(cpu));
            assert!(!low.join().unwrap(), "went on while its CPU was claimed");
            return;
        }
        release(Some(cpu));
        assert!(low.join().unwrap());
    }
}

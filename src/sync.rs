//! Locks for threads of different OS priorities: a mutex and a condition variable whose
//! waiters never yield the CPU.
//!
//! Why: `parking_lot`'s mutex spins on `sched_yield` before it parks a waiter. Under
//! Linux's EEVDF scheduler a yield may hand the rest of a slice (up to a 4 ms tick) to a
//! `SCHED_IDLE` low-class FC thread on the same CPU, and the yielding thread, runnable
//! rather than asleep, gets no wake-up when the lock is free: traced with `perf sched`
//! on the priority bench, an application thread releasing a task waited 1.9-2.2 ms behind
//! a background FC that way. Here a waiter spins briefly (CPU pause only), then sleeps in
//! the kernel, so an unlock wakes it and the OS preempts the `SCHED_IDLE` thread at once.
//!
//! [`Mutex`] is a `lock_api` mutex (`MutexGuard::unlocked` and friends work); [`Condvar`]
//! waits on guards of it. Both park through `parking_lot_core`, keyed by their address.
//! Wake-ups may be spurious: every waiter re-checks its condition.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use parking_lot_core::{
    ParkResult, RequeueOp, UnparkResult, DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN,
};

/// A mutex whose waiters never yield (see the module doc).
pub type Mutex<T> = lock_api::Mutex<RawMutex, T>;
/// The guard of a [`Mutex`].
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMutex, T>;

const LOCKED: u8 = 1;
/// Some thread sleeps (or is about to) waiting for the lock.
const PARKED: u8 = 2;

/// Pause rounds of a waiter before it sleeps: 2 + 4 + ... + 64 pauses, a few µs, enough
/// for a holder that is running to finish a short critical section.
const SPIN_ROUNDS: u32 = 6;

/// The raw lock under [`Mutex`].
pub struct RawMutex {
    state: AtomicU8,
}

// SAFETY: `lock` and `try_lock` acquire the LOCKED bit with a compare-exchange (Acquire)
// and `unlock` clears it (Release), so at most one holder exists at a time and its
// writes are visible to the next one; the guard marker keeps guards on their thread's
// side of `Send` rules like `parking_lot`'s.
unsafe impl lock_api::RawMutex for RawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawMutex = RawMutex {
        state: AtomicU8::new(0),
    };
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    fn try_lock(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & LOCKED == 0 {
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(s) => state = s,
            }
        }
        false
    }

    unsafe fn unlock(&self) {
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }
}

impl RawMutex {
    fn key(&self) -> usize {
        self as *const RawMutex as usize
    }

    #[cold]
    fn lock_slow(&self) {
        let mut rounds = 0u32;
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & LOCKED == 0 {
                match self.state.compare_exchange_weak(
                    state,
                    state | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(s) => state = s,
                }
                continue;
            }
            if state & PARKED == 0 && rounds < SPIN_ROUNDS {
                rounds += 1;
                for _ in 0..(1u32 << rounds) {
                    std::hint::spin_loop();
                }
                state = self.state.load(Ordering::Relaxed);
                continue;
            }
            if state & PARKED == 0 {
                if let Err(s) = self.state.compare_exchange_weak(
                    state,
                    state | PARKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    state = s;
                    continue;
                }
            }
            park(
                self.key(),
                || self.state.load(Ordering::Relaxed) == LOCKED | PARKED,
                None,
            );
            rounds = 0;
            state = self.state.load(Ordering::Relaxed);
        }
    }

    /// Sets the parked bit if the lock is held (so that its unlock wakes a waiter moved
    /// onto its queue); false when it is free.
    fn mark_parked_if_locked(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & LOCKED != 0 {
            match self.state.compare_exchange_weak(
                state,
                state | PARKED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(s) => state = s,
            }
        }
        false
    }

    #[cold]
    fn unlock_slow(&self) {
        let callback = |r: UnparkResult| {
            // Under the queue's lock: no waiter can park or leave meanwhile.
            let left = if r.have_more_threads { PARKED } else { 0 };
            self.state.store(left, Ordering::Release);
            DEFAULT_UNPARK_TOKEN
        };
        // SAFETY: same key as the waiters; the callback neither panics nor calls into
        // parking_lot_core.
        unsafe {
            parking_lot_core::unpark_one(self.key(), callback);
        }
    }
}

/// Sleeps on `key` (a lock's or a condition variable's address) if `validate`, checked
/// under the queue's lock, holds; until woken through `key` or `deadline` passes.
fn park(key: usize, validate: impl FnOnce() -> bool, deadline: Option<Instant>) -> ParkResult {
    // SAFETY: every key is the address of one of this module's locks or condition
    // variables, whose waiters all park here; the callbacks neither panic nor call into
    // parking_lot_core.
    unsafe {
        parking_lot_core::park(
            key,
            validate,
            || {},
            |_, _| {},
            DEFAULT_PARK_TOKEN,
            deadline,
        )
    }
}

/// A condition variable for [`Mutex`] (see the module doc). A notification sent while
/// the mutex is held moves the waiter onto the mutex's queue instead of waking it, so the
/// unlock wakes it once (waking it at once, on the notifier's CPU, made it preempt a
/// `SCHED_IDLE` notifier that still held the lock: two more switches per hand-over).
#[derive(Debug, Default)]
pub struct Condvar {
    /// Bumped by every notification, so a waiter that has not slept yet sees it.
    seq: AtomicU32,
    /// The mutex of the waiters (one per condition variable; null before any wait).
    mutex: AtomicPtr<RawMutex>,
}

/// Whether a timed wait ended by its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True when the wait ended because its time ran out.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

impl Condvar {
    /// A condition variable nobody waits on.
    pub const fn new() -> Condvar {
        Condvar {
            seq: AtomicU32::new(0),
            mutex: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn key(&self) -> usize {
        self as *const Condvar as usize
    }

    /// Unlocks `guard`'s mutex, sleeps until notified (or spuriously), locks it again.
    pub fn wait<T: ?Sized>(&self, guard: &mut MutexGuard<'_, T>) {
        self.wait_inner(guard, None);
    }

    /// [`Condvar::wait`] that also ends at `deadline`.
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, Some(deadline)))
    }

    /// [`Condvar::wait`] that also ends after `timeout`.
    pub fn wait_for<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        self.wait_until(guard, Instant::now() + timeout)
    }

    fn wait_inner<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Option<Instant>,
    ) -> bool {
        // Read before unlocking: a notification after this point changes `seq`, so the
        // park below either sees it (and returns) or is woken by it.
        let seq = self.seq.load(Ordering::SeqCst);
        // SAFETY: the raw mutex is only used for its address and its state word here,
        // never unlocked through this reference.
        let raw = unsafe { MutexGuard::mutex(guard).raw() };
        self.mutex
            .store(raw as *const RawMutex as *mut RawMutex, Ordering::SeqCst);
        let result = MutexGuard::unlocked(guard, || {
            park(
                self.key(),
                || self.seq.load(Ordering::SeqCst) == seq,
                deadline,
            )
        });
        result == ParkResult::TimedOut
    }

    /// Wakes one waiter (onto the mutex's queue while the mutex is held).
    pub fn notify_one(&self) {
        self.notify(false);
    }

    /// Wakes every waiter (onto the mutex's queue while the mutex is held).
    pub fn notify_all(&self) {
        self.notify(true);
    }

    /// Bumps `seq`, then moves one waiter (or `all`) onto the mutex's queue while the
    /// mutex is held, or wakes one (and moves the rest) while it is free.
    fn notify(&self, all: bool) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        self.requeue(|m| match (m.mark_parked_if_locked(), all) {
            (true, false) => RequeueOp::RequeueOne,
            (true, true) => RequeueOp::RequeueAll,
            (false, false) => RequeueOp::UnparkOne,
            (false, true) => {
                // The requeued rest: the unlock must wake them.
                m.state.fetch_or(PARKED, Ordering::Relaxed);
                RequeueOp::UnparkOneRequeueRest
            }
        });
    }

    /// Moves or wakes this condition variable's waiters as `op` decides for the mutex.
    fn requeue(&self, op: impl Fn(&RawMutex) -> RequeueOp) {
        // Sequentially consistent with the waiters' store of the pointer: a notifier that
        // finds no pointer bumped `seq` before a waiter stored it, so that waiter's park,
        // which re-reads `seq` after the store, finds it changed and returns.
        let mutex = self.mutex.load(Ordering::SeqCst);
        if mutex.is_null() {
            return; // nobody ever waited
        }
        let validate = || {
            // SAFETY: `mutex` came from a guard of a waiter; the condition variable is
            // used with one mutex that outlives it (both live in the same structure).
            op(unsafe { &*mutex })
        };
        // SAFETY: the keys are this condition variable's and its mutex's addresses, used
        // by their own waiters only; the callbacks neither panic nor call into
        // parking_lot_core.
        unsafe {
            parking_lot_core::unpark_requeue(self.key(), mutex as usize, validate, |_, _| {
                DEFAULT_UNPARK_TOKEN
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_mutex_excludes_and_publishes_writes() {
        let m = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 80_000);
        assert!(!m.is_locked());
    }

    #[test]
    fn a_waiter_sees_a_notification_sent_after_it_checked_its_condition() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p = pair.clone();
        let waiter = std::thread::spawn(move || {
            let mut g = p.0.lock();
            while !*g {
                p.1.wait(&mut g);
            }
        });
        *pair.0.lock() = true;
        pair.1.notify_all();
        waiter.join().unwrap();
    }

    #[test]
    fn a_timed_wait_ends_at_its_deadline() {
        let m = Mutex::new(());
        let cv = Condvar::new();
        let mut g = m.lock();
        let r = cv.wait_for(&mut g, Duration::from_millis(5));
        assert!(r.timed_out());
    }

    #[test]
    fn notify_one_wakes_one_of_many_until_all_are_done() {
        let pair = Arc::new((Mutex::new(0usize), Condvar::new()));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let p = pair.clone();
                std::thread::spawn(move || {
                    let mut g = p.0.lock();
                    while *g == 0 {
                        p.1.wait(&mut g);
                    }
                    *g -= 1;
                })
            })
            .collect();
        for _ in 0..3 {
            *pair.0.lock() += 1;
            pair.1.notify_one();
        }
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*pair.0.lock(), 0);
    }
}

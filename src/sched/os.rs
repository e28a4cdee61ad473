//! Thread placement for core workers: optional CPU pinning, real-time priority and nice
//! value.
//!
//! Invariant: placement is best effort; a refusal by the OS (no permission, no such CPU,
//! not Linux) leaves the thread as it was and logs one warning on stderr, never fails.

/// Pins the calling thread to the `core % n`-th of the `n` CPUs it may run on, gives it `SCHED_FIFO` and/or
/// sets its nice value (`nice` 0 = leave it).
pub(crate) fn place_core_thread(core: usize, pin: bool, rt: bool, nice: i32) {
    if nice != 0 {
        if let Err(e) = nice_current(nice) {
            eprintln!("vnpu: warning: cannot set core {core} thread nice {nice}: {e}; left as is");
        }
    }
    if pin {
        if let Err(e) = pin_current(core) {
            eprintln!("vnpu: warning: cannot pin core {core} thread: {e}; running unpinned");
        }
    }
    if rt {
        if let Err(e) = realtime_current() {
            eprintln!(
                "vnpu: warning: cannot give core {core} thread real-time priority: {e}; \
                 running at normal priority"
            );
        }
    }
}

/// Places the low-class thread of core `core` (see `core.rs`): pinned like the core's top
/// thread when `pin`, then `SCHED_IDLE` when `idle` (falling back to nice 19), else nice 19.
pub(crate) fn place_low_thread(core: usize, pin: bool, idle: bool) {
    if pin {
        if let Err(e) = pin_current(core) {
            eprintln!("vnpu: warning: cannot pin core {core} low thread: {e}; running unpinned");
        }
    }
    if idle {
        match idle_current() {
            Ok(()) => return,
            Err(e) => eprintln!(
                "vnpu: warning: cannot give core {core} low thread SCHED_IDLE: {e}; using nice 19"
            ),
        }
    }
    if let Err(e) = nice_current(19) {
        eprintln!("vnpu: warning: cannot set core {core} low thread nice 19: {e}; left as is");
    }
}

#[cfg(target_os = "linux")]
fn idle_current() -> std::result::Result<(), String> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 = the calling thread; `param` is a valid sched_param alive for the
    // call. Any thread may switch itself to SCHED_IDLE.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

#[cfg(not(target_os = "linux"))]
fn idle_current() -> std::result::Result<(), String> {
    Err("SCHED_IDLE is only supported on Linux".into())
}

#[cfg(target_os = "linux")]
fn pin_current(core: usize) -> std::result::Result<(), String> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = the calling thread; the pointer and size describe `set`, alive here.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let cpu = pin_target(&set, core).ok_or("no CPU in the thread's affinity mask")?;
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `one` is a valid, owned cpu_set_t; CPU_SET bound-checks `cpu`.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: pid 0 = the calling thread; the pointer and size describe `one`, alive here.
    let rc = unsafe { libc::sched_setaffinity(0, size, &one) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// The CPU core `core` is pinned to: the `core % n`-th of the `n` CPUs in `allowed` (the
/// process may be limited to some CPUs, e.g. by `taskset`).
#[cfg(target_os = "linux")]
fn pin_target(allowed: &libc::cpu_set_t, core: usize) -> Option<usize> {
    // SAFETY: `allowed` is a valid cpu_set_t; CPU_ISSET bound-checks its index.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, allowed) })
        .collect();
    (!cpus.is_empty()).then(|| cpus[core % cpus.len()])
}

#[cfg(target_os = "linux")]
fn nice_current(nice: i32) -> std::result::Result<(), String> {
    // SAFETY: plain syscall wrappers; who = 0 with PRIO_PROCESS is the calling thread on
    // Linux (nice is per thread).
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

#[cfg(target_os = "linux")]
fn realtime_current() -> std::result::Result<(), String> {
    // SAFETY: a plain query of a constant of the scheduling policy.
    let max = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    if max < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let param = libc::sched_param {
        sched_priority: (max / 2).max(1),
    };
    // SAFETY: pid 0 = the calling thread; `param` is a valid sched_param alive for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_current(_core: usize) -> std::result::Result<(), String> {
    Err("thread pinning is only supported on Linux".into())
}

#[cfg(not(target_os = "linux"))]
fn realtime_current() -> std::result::Result<(), String> {
    Err("real-time priority is only supported on Linux".into())
}

#[cfg(not(target_os = "linux"))]
fn nice_current(_nice: i32) -> std::result::Result<(), String> {
    Err("per-thread nice is only supported on Linux".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn cores_are_pinned_to_the_cpus_the_process_may_use_in_turn() {
        // SAFETY: all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        assert_eq!(pin_target(&set, 0), None);
        for c in [2usize, 3, 7] {
            // SAFETY: `set` is valid; CPU_SET bound-checks its index.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        let got: Vec<Option<usize>> = (0..5).map(|k| pin_target(&set, k)).collect();
        assert_eq!(got, [Some(2), Some(3), Some(7), Some(2), Some(3)]);
    }

    #[test]
    fn placement_never_fails_the_thread() {
        // Pinning to CPU 0 is allowed for any user; SCHED_FIFO usually is not in CI and
        // must then fall back with a warning instead of failing.
        std::thread::spawn(|| place_core_thread(0, true, true, 5))
            .join()
            .expect("placement must not panic");
        #[cfg(target_os = "linux")]
        {
            // Raising one's own nice value is always allowed, and changes only that
            // thread.
            // SAFETY: plain query of the calling thread's nice value.
            let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let mine = std::thread::spawn(move || {
                nice_current(before.max(7)).expect("raise nice");
                // SAFETY: as above.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
            })
            .join()
            .expect("no panic");
            assert_eq!(mine, before.max(7));
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, before);
            let r = std::thread::spawn(|| pin_current(0))
                .join()
                .expect("no panic");
            assert!(r.is_ok(), "pinning to CPU 0: {r:?}");
            let policy = std::thread::spawn(|| {
                place_low_thread(0, false, true);
                // SAFETY: plain query of the calling thread's scheduling policy.
                unsafe { libc::sched_getscheduler(0) }
            })
            .join()
            .expect("no panic");
            assert_eq!(
                policy,
                libc::SCHED_IDLE,
                "a low-class thread runs SCHED_IDLE"
            );
            // SAFETY: as above.
            assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
        }
    }
}

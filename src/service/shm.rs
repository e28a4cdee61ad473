//! Shared memory for service mode: a `memfd` mapped by the client and, through the
//! descriptor passed over the socket, by the daemon, so tensors in it cross the process
//! boundary without a copy; and the [`EndSlots`] through which the daemon tells a client
//! that a task ended without sending it a message.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A shared mapping of a memory file. Unmapped on drop.
#[derive(Debug)]
pub struct SharedMem {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; concurrent access is governed by the
// hbDNN contract (the runtime touches a task's buffers from one thread at a time).
unsafe impl Send for SharedMem {}
// SAFETY: see `Send`; `&SharedMem` only hands out the address and length.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// Creates a new zero-filled memory file of `len` bytes and maps it.
    pub fn create(len: usize, name: &str) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero size"));
        }
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        // SAFETY: `cname` is a valid C string; the result is checked.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain system call on an owned descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Shrinking would turn the peer's accesses into SIGBUS: forbid it.
        // SAFETY: plain fcntl on an owned descriptor.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        Self::map(fd, len)
    }

    /// Maps `len` bytes of a received descriptor. The descriptor must be a memory file
    /// (or regular file) of at least `len` bytes that cannot shrink (sealed), so that an
    /// access through the mapping can never fault.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero size"));
        }
        // SAFETY: stat is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared memory must be a memory file",
            ));
        }
        if (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memory file has {} bytes, {len} claimed", st.st_size),
            ));
        }
        // SAFETY: plain fcntl on an owned descriptor.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memory file is not sealed against shrinking",
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        // SAFETY: maps `len` bytes of a file at least that long; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMem {
            fd,
            ptr: p as *mut u8,
            len,
        })
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a mapping has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory file's descriptor (to pass to the daemon).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The mapping as bytes. The caller must not let it alias a region a running task
    /// writes (hbDNN contract).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapping as mutable bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` writable bytes for the life of `self`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range mapped in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Bytes of one end slot: the state word (a futex) and the status code.
pub const SLOT_BYTES: usize = 8;
/// Slot state: the task has not ended and nobody sleeps on it.
const PENDING: u32 = 0;
/// Slot state: the task has not ended and a client thread sleeps on the word.
const SLEEPING: u32 = 1;
/// Slot state: the task ended; the code is valid.
const ENDED: u32 = 2;
/// How often a sleeping waiter checks that the daemon is still there.
const ALIVE_TICK: Duration = Duration::from_millis(50);

/// How a wait on an end slot came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotWait {
    /// The task ended with this status code (0 = success).
    Ended(i32),
    /// The time limit passed first.
    TimedOut,
    /// The daemon went away first.
    Gone,
}

/// One end word per task a client may have: the client arms slot `i` before it submits
/// a task naming it, the daemon's done signal stores the status and wakes sleepers
/// (protocol: code, then the state word with release ordering; a futex wake only when a
/// sleeper marked the word). The daemon only writes these words, so whatever a client
/// puts there harms no one but itself.
#[derive(Debug)]
pub struct EndSlots {
    mem: SharedMem,
    n: usize,
}

fn futex(word: &AtomicU32, op: libc::c_int, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 in a shared mapping (not FUTEX_PRIVATE: the
    // other process waits or wakes on the same physical word); `tsp` is null or points at
    // a timespec that outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

impl EndSlots {
    /// `n` slots in a new memory file (the daemon makes one per client session).
    pub fn create(n: usize) -> io::Result<EndSlots> {
        let mem = SharedMem::create(n.max(1) * SLOT_BYTES, "vnpu-ends")?;
        Ok(EndSlots { mem, n: n.max(1) })
    }

    /// Maps the slots the daemon created (`n` of them).
    pub fn from_fd(fd: OwnedFd, n: usize) -> io::Result<EndSlots> {
        let mem = SharedMem::from_fd(fd, n.max(1) * SLOT_BYTES)?;
        Ok(EndSlots { mem, n: n.max(1) })
    }

    /// The memory file (to pass to the client).
    pub fn fd(&self) -> &OwnedFd {
        self.mem.fd()
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false (there is at least one slot).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn words(&self, i: usize) -> Option<(&AtomicU32, &AtomicI32)> {
        if i >= self.n {
            return None;
        }
        // SAFETY: slot `i` lies inside the mapping (i < n, n * SLOT_BYTES mapped), which
        // is page-aligned, so both 4-byte words are aligned; the mapping lives as long as
        // `self`, and every access to the words goes through atomics.
        unsafe {
            let p = self.mem.ptr().add(i * SLOT_BYTES);
            Some((
                AtomicU32::from_ptr(p as *mut u32),
                AtomicI32::from_ptr(p.add(4) as *mut i32),
            ))
        }
    }

    /// Client: marks slot `i` pending before submitting a task that names it.
    pub fn arm(&self, i: usize) {
        if let Some((state, code)) = self.words(i) {
            code.store(0, Ordering::Relaxed);
            state.store(PENDING, Ordering::Release);
        }
    }

    /// Daemon: the task of slot `i` ended with `status`; wakes a sleeping waiter.
    pub fn end(&self, i: usize, status: i32) {
        if let Some((state, code)) = self.words(i) {
            code.store(status, Ordering::Relaxed);
            if state.swap(ENDED, Ordering::AcqRel) == SLEEPING {
                futex(state, libc::FUTEX_WAKE, i32::MAX as u32, None);
            }
        }
    }

    /// The status of slot `i` when its task has ended.
    pub fn ended(&self, i: usize) -> Option<i32> {
        let (state, code) = self.words(i)?;
        (state.load(Ordering::Acquire) == ENDED).then(|| code.load(Ordering::Relaxed))
    }

    /// Client: waits for slot `i` to end. Polls for up to `spin` (yielding the CPU now and
    /// then), then sleeps on the word until `deadline`, checking `alive` every 50 ms.
    pub fn wait(
        &self,
        i: usize,
        spin: Duration,
        deadline: Option<Instant>,
        alive: impl Fn() -> bool,
    ) -> SlotWait {
        let Some((state, _)) = self.words(i) else {
            return SlotWait::Gone;
        };
        let t0 = Instant::now();
        'spin: while !spin.is_zero() {
            for _ in 0..64 {
                if let Some(c) = self.ended(i) {
                    return SlotWait::Ended(c);
                }
                std::hint::spin_loop();
            }
            if t0.elapsed() >= spin {
                break 'spin;
            }
            std::thread::yield_now();
        }
        loop {
            if let Some(c) = self.ended(i) {
                return SlotWait::Ended(c);
            }
            let _ = state.compare_exchange(PENDING, SLEEPING, Ordering::AcqRel, Ordering::Acquire);
            let now = Instant::now();
            let tick = match deadline {
                Some(d) if d <= now => return SlotWait::TimedOut,
                Some(d) => (d - now).min(ALIVE_TICK),
                None => ALIVE_TICK,
            };
            futex(state, libc::FUTEX_WAIT, SLEEPING, Some(tick));
            if let Some(c) = self.ended(i) {
                return SlotWait::Ended(c);
            }
            if !alive() {
                return SlotWait::Gone;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_wakes_a_waiter_in_another_mapping() {
        let d = EndSlots::create(4).unwrap();
        let c = EndSlots::from_fd(d.fd().try_clone().unwrap(), 4).unwrap();
        c.arm(3);
        assert_eq!(c.ended(3), None);
        assert_eq!(
            c.wait(3, Duration::ZERO, Some(Instant::now()), || true),
            SlotWait::TimedOut
        );
        std::thread::scope(|s| {
            let w = s.spawn(|| c.wait(3, Duration::ZERO, None, || true));
            std::thread::sleep(Duration::from_millis(20));
            d.end(3, -7);
            assert_eq!(w.join().unwrap(), SlotWait::Ended(-7));
        });
        assert_eq!(c.ended(3), Some(-7));
        // Out of range: ignored by the daemon, `Gone` for a waiter.
        d.end(4, 1);
        assert_eq!(c.wait(9, Duration::ZERO, None, || true), SlotWait::Gone);
        c.arm(0);
        assert_eq!(c.wait(0, Duration::ZERO, None, || false), SlotWait::Gone);
    }

    #[test]
    fn two_mappings_of_one_memfd_share_bytes() {
        let mut a = SharedMem::create(4096, "t").unwrap();
        let dup = a.fd().try_clone().unwrap();
        let b = SharedMem::from_fd(dup, 4096).unwrap();
        a.as_mut_slice()[100] = 42;
        assert_eq!(b.as_slice()[100], 42);
    }

    #[test]
    fn unsealed_short_or_foreign_files_are_refused() {
        let a = SharedMem::create(4096, "t").unwrap();
        let dup = a.fd().try_clone().unwrap();
        assert!(SharedMem::from_fd(dup, 8192).is_err());
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(SharedMem::from_fd(f.into(), 16).is_err());
        assert!(SharedMem::create(0, "t").is_err());
    }
}

//! Shared memory for service mode: a `memfd` mapped by the client and, through the
//! descriptor passed over the socket, by the daemon, so tensors in it cross the process
//! boundary without a copy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

#[cfg(test)]
mod tests {
    use super::*;

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

//! Unix `SOCK_SEQPACKET` sockets for service mode: bind/listen/accept/connect, one
//! message per packet with file descriptors attached (`SCM_RIGHTS`), and the peer's
//! credentials (`SO_PEERCRED`).
//!
//! Sequenced packets keep message boundaries, so a packet is one whole message and the
//! descriptors sent with it arrive with it; a packet longer than the receive buffer is
//! reported as truncated, never silently cut.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Most descriptors one message may carry.
pub const MAX_FDS: usize = 16;

/// The credentials of the process at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path must be 1..={} bytes without NUL",
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before it is wrapped.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds a listening socket at `path` with the given mode (e.g. 0o600). The file is
/// created with no permissions for anyone but the owner (umask around `bind`), then set
/// to `mode`; an existing socket file is replaced only if nothing listens on it.
pub fn listen(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    if path.exists() {
        if connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "a daemon already listens on this socket",
            ));
        }
        let meta = std::fs::symlink_metadata(path)?;
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let fd = new_socket()?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: umask only changes the process's file-creation mask; restored right after.
    let old = unsafe { libc::umask(0o177) };
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    // SAFETY: restores the previous mask.
    unsafe { libc::umask(old) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    // SAFETY: plain system call on an owned descriptor.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Connects to the socket at `path`.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = new_socket()?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Waits up to `timeout_ms` for a connection; `Ok(None)` when none came.
pub fn accept(listener: &OwnedFd, timeout_ms: i32) -> io::Result<Option<OwnedFd>> {
    let mut p = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(None)
        } else {
            Err(e)
        };
    }
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: accepts on a listening socket; null address arguments are allowed.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The peer's credentials, as the kernel recorded them at connect time.
pub fn peer_cred(fd: &OwnedFd) -> io::Result<PeerCred> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is a writable ucred of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut c as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}

/// Sends one message with `fds` attached.
pub fn send(fd: &OwnedFd, msg: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8).max(1)];
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    if !fds.is_empty() {
        mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        mh.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, enough for one cmsg with
        // `fds.len()` descriptors; CMSG_FIRSTHDR/CMSG_DATA point inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(c),
                fd_bytes as usize,
            );
        }
    }
    loop {
        // SAFETY: `mh` points at live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return if n as usize == msg.len() {
                Ok(())
            } else {
                Err(io::Error::new(io::ErrorKind::WriteZero, "short send"))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One received message.
#[derive(Debug)]
pub struct Packet {
    /// The message bytes.
    pub bytes: Vec<u8>,
    /// Descriptors that came with it (owned: closed when dropped).
    pub fds: Vec<OwnedFd>,
}

/// Receives one message of at most `max` bytes. `Ok(None)` = the peer closed the
/// connection. A longer message or too many descriptors is an `InvalidData` error (the
/// descriptors that did arrive are closed).
pub fn recv(fd: &OwnedFd, max: usize) -> io::Result<Option<Packet>> {
    recv_flags(fd, max, 0)
}

/// As [`recv`], but polls for up to `spin` before blocking: an answer that comes within
/// microseconds is taken without the cost of putting the thread to sleep and waking it.
pub fn recv_spin(
    fd: &OwnedFd,
    max: usize,
    spin: std::time::Duration,
) -> io::Result<Option<Packet>> {
    if !spin.is_zero() {
        let t0 = std::time::Instant::now();
        loop {
            match recv_flags(fd, max, libc::MSG_DONTWAIT) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if t0.elapsed() >= spin {
                        break;
                    }
                    std::hint::spin_loop();
                }
                r => return r,
            }
        }
    }
    recv_flags(fd, max, 0)
}

thread_local! {
    /// Receive buffer of this thread (allocated once, not zeroed per message).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Control-message buffer size for [`MAX_FDS`] descriptors, in `u64`s.
const CMSG_WORDS: usize = 16;

fn recv_flags(fd: &OwnedFd, max: usize, flags: libc::c_int) -> io::Result<Option<Packet>> {
    SCRATCH.with(|s| {
        let mut buf = s.borrow_mut();
        if buf.len() < max + 1 {
            buf.resize(max + 1, 0);
        }
        recv_into(fd, &mut buf[..max + 1], max, flags)
    })
}

fn recv_into(
    fd: &OwnedFd,
    buf: &mut [u8],
    max: usize,
    flags: libc::c_int,
) -> io::Result<Option<Packet>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = [0u64; CMSG_WORDS];
    let space = space.min(CMSG_WORDS * 8);
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    mh.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `mh` points at live, writable buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC | flags) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `cbuf` (bounded by
    // msg_controllen); each SCM_RIGHTS payload is an array of descriptors we now own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    if mh.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || n > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message over {max} bytes or {MAX_FDS} descriptors"),
        ));
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some(Packet {
        bytes: buf[..n].to_vec(),
        fds,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        let mut sv = [0 as RawFd; 2];
        // SAFETY: `sv` has room for two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: both descriptors are fresh and owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) }
    }

    #[test]
    fn messages_keep_boundaries_and_carry_fds() {
        let (a, b) = pair();
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        send(&a, b"hello", &[f.as_raw_fd()]).unwrap();
        send(&a, b"world!", &[]).unwrap();
        let p = recv(&b, 64).unwrap().unwrap();
        assert_eq!(p.bytes, b"hello");
        assert_eq!(p.fds.len(), 1);
        let p = recv(&b, 64).unwrap().unwrap();
        assert_eq!(p.bytes, b"world!");
        assert!(p.fds.is_empty());
        drop(a);
        assert!(recv(&b, 64).unwrap().is_none());
    }

    #[test]
    fn oversized_message_is_an_error() {
        let (a, b) = pair();
        send(&a, &[7u8; 100], &[]).unwrap();
        let e = recv(&b, 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn peer_credentials_name_this_process() {
        let (a, _b) = pair();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid, std::process::id() as i32);
        // SAFETY: plain system call.
        assert_eq!(c.uid, unsafe { libc::getuid() });
    }

    #[test]
    fn bad_socket_paths_are_refused() {
        assert!(connect(Path::new("")).is_err());
        let long = "x".repeat(200);
        assert!(connect(Path::new(&long)).is_err());
        assert!(connect(Path::new("/nonexistent/dir/sock")).is_err());
    }
}

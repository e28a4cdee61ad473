//! Host memory that stands in for "BPU memory" (`hbSysAllocMem` & co.).
//!
//! On the host every byte is CPU-visible and cache-coherent, so an allocation is plain
//! zeroed heap memory aligned to [`ALIGN`] bytes and its "physical address" is its
//! virtual address. What this module adds is *bookkeeping*: every live allocation and
//! every registered foreign region is recorded in one process-wide table keyed by start
//! address, so that a double free, a free of a foreign pointer or an unregister of an
//! unknown region is reported as an error instead of corrupting the heap.
//!
//! Invariants:
//! - an address is in the table at most once, either as [`RegionKind::Allocated`]
//!   (memory we own, freed only through [`free`]) or as [`RegionKind::Registered`]
//!   (memory the caller owns; we never free it);
//! - only addresses returned by [`alloc`] are ever passed to the global deallocator,
//!   with the exact layout they were allocated with.

use std::alloc::Layout;
use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Alignment of every allocation (a cache line; also satisfies the 16-byte NV12 rule).
pub const ALIGN: usize = 64;

/// How a tracked region came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// Allocated by [`alloc`]; `cached` tells whether the caller asked for cached memory.
    Allocated { cached: bool },
    /// Foreign memory registered with [`register`].
    Registered,
}

/// One tracked region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Origin.
    pub kind: RegionKind,
}

impl Region {
    /// Whether `[addr, addr + len)` lies inside this region.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

static REGIONS: Mutex<BTreeMap<usize, Region>> = parking_lot::const_mutex(BTreeMap::new());

/// Allocates `size` zeroed bytes aligned to [`ALIGN`] and records them.
///
/// Errors: `size == 0` → [`Error::SysInvalidArgument`]; allocator failure →
/// [`Error::SysOutOfMemory`].
pub fn alloc(size: usize, cached: bool) -> Result<*mut u8> {
    if size == 0 {
        return Err(Error::SysInvalidArgument("size must be > 0".into()));
    }
    let layout = Layout::from_size_align(size, ALIGN)
        .map_err(|e| Error::SysInvalidArgument(format!("size {size}: {e}")))?;
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(Error::SysOutOfMemory(format!("{size} bytes")));
    }
    let addr = ptr as usize;
    REGIONS.lock().insert(
        addr,
        Region {
            addr,
            len: size,
            kind: RegionKind::Allocated { cached },
        },
    );
    Ok(ptr)
}

/// Frees memory returned by [`alloc`]. A pointer that is not the start of a live
/// allocation (double free, foreign or registered memory, interior pointer) is an
/// [`Error::SysInvalidArgument`] and nothing is freed.
pub fn free(ptr: *mut u8) -> Result<()> {
    let addr = ptr as usize;
    let region = {
        let mut table = REGIONS.lock();
        match table.get(&addr) {
            Some(r) if matches!(r.kind, RegionKind::Allocated { .. }) => {
                let r = *r;
                table.remove(&addr);
                r
            }
            Some(_) => {
                return Err(Error::SysInvalidArgument(format!(
                    "{ptr:p} is registered memory; use hbSysUnregisterMem"
                )))
            }
            None => {
                return Err(Error::SysInvalidArgument(format!(
                    "{ptr:p} was not allocated by hbSysAllocMem/hbSysAllocCachedMem \
                     or was already freed"
                )))
            }
        }
    };
    let layout = Layout::from_size_align(region.len, ALIGN)
        .map_err(|e| Error::SysInvalidArgument(e.to_string()))?;
    let start = region.addr as *mut u8;
    // SAFETY: `start` was returned by `alloc_zeroed` with exactly this layout (the table
    // records only such allocations) and has just been removed from the table, so no
    // other call can free it again.
    unsafe { std::alloc::dealloc(start, layout) };
    Ok(())
}

/// Records caller-owned memory `[ptr, ptr + len)` as registered.
///
/// Errors ([`Error::SysRegister`]): null pointer, zero length, or an overlap with any
/// tracked region (allocated or registered).
pub fn register(ptr: *mut u8, len: usize) -> Result<()> {
    if ptr.is_null() || len == 0 {
        return Err(Error::SysRegister(format!(
            "cannot register {len} bytes at {ptr:p}"
        )));
    }
    let addr = ptr as usize;
    let end = addr
        .checked_add(len)
        .ok_or_else(|| Error::SysRegister("address range overflows".into()))?;
    let mut table = REGIONS.lock();
    let before = table.range(..end).next_back().map(|(_, r)| *r);
    if let Some(r) = before.filter(|r| r.addr + r.len > addr) {
        return Err(Error::SysRegister(format!(
            "{len} bytes at {ptr:p} overlap a tracked region of {} bytes at {:#x}",
            r.len, r.addr
        )));
    }
    table.insert(
        addr,
        Region {
            addr,
            len,
            kind: RegionKind::Registered,
        },
    );
    Ok(())
}

/// Forgets a region recorded by [`register`]; an unknown address or an allocation is an
/// [`Error::SysInvalidArgument`].
pub fn unregister(ptr: *mut u8) -> Result<()> {
    let addr = ptr as usize;
    let mut table = REGIONS.lock();
    match table.get(&addr) {
        Some(r) if r.kind == RegionKind::Registered => {
            table.remove(&addr);
            Ok(())
        }
        Some(_) => Err(Error::SysInvalidArgument(format!(
            "{ptr:p} was allocated by hbSysAlloc*; use hbSysFreeMem"
        ))),
        None => Err(Error::SysInvalidArgument(format!(
            "{ptr:p} is not registered"
        ))),
    }
}

/// The tracked region starting exactly at `ptr`, if any.
pub fn lookup(ptr: *const u8) -> Option<Region> {
    REGIONS.lock().get(&(ptr as usize)).copied()
}

/// The tracked region that contains `[ptr, ptr + len)`, if any.
pub fn find_containing(ptr: *const u8, len: usize) -> Option<Region> {
    let addr = ptr as usize;
    let table = REGIONS.lock();
    table
        .range(..=addr)
        .next_back()
        .map(|(_, r)| *r)
        .filter(|r| r.contains(addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_zeroed_aligned_and_tracked() {
        let p = alloc(100, false).expect("alloc");
        assert_eq!(p as usize % ALIGN, 0);
        // SAFETY: `p` points to 100 live bytes we own.
        let bytes = unsafe { std::slice::from_raw_parts(p, 100) };
        assert!(bytes.iter().all(|&b| b == 0));
        let r = lookup(p).expect("tracked");
        assert_eq!(r.len, 100);
        assert_eq!(r.kind, RegionKind::Allocated { cached: false });
        // SAFETY: interior pointer of the same live allocation.
        let inner = unsafe { p.add(10) };
        assert_eq!(find_containing(inner, 90), Some(r));
        assert_eq!(find_containing(inner, 91), None);
        free(p).expect("free");
        assert!(lookup(p).is_none());
    }

    #[test]
    fn double_free_and_foreign_free_are_errors() {
        let p = alloc(16, true).expect("alloc");
        free(p).expect("first free");
        assert!(matches!(free(p), Err(Error::SysInvalidArgument(_))));
        let mut local = [0u8; 8];
        assert!(matches!(
            free(local.as_mut_ptr()),
            Err(Error::SysInvalidArgument(_))
        ));
    }

    #[test]
    fn zero_size_is_invalid() {
        assert!(matches!(alloc(0, false), Err(Error::SysInvalidArgument(_))));
    }

    #[test]
    fn register_unregister_and_overlap() {
        let mut buf = vec![0u8; 64];
        let p = buf.as_mut_ptr();
        register(p, 64).expect("register");
        assert_eq!(lookup(p).map(|r| r.kind), Some(RegionKind::Registered));
        // SAFETY: interior pointer of `buf`.
        let inner = unsafe { p.add(32) };
        assert!(matches!(register(inner, 8), Err(Error::SysRegister(_))));
        assert!(matches!(free(p), Err(Error::SysInvalidArgument(_))));
        unregister(p).expect("unregister");
        assert!(matches!(unregister(p), Err(Error::SysInvalidArgument(_))));
        assert!(matches!(
            register(std::ptr::null_mut(), 4),
            Err(Error::SysRegister(_))
        ));
    }

    #[test]
    fn unregister_of_allocation_is_refused() {
        let p = alloc(8, false).expect("alloc");
        assert!(matches!(unregister(p), Err(Error::SysInvalidArgument(_))));
        free(p).expect("free");
    }
}

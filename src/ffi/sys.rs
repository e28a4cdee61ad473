//! The hbSys memory functions (`dnn/hb_sys.h`) over `runtime::mem`.
//!
//! Host memory is coherent, so flushes are memory fences; `phyAddr` equals `virAddr`.
//! Every allocation is tracked: freeing twice, freeing foreign memory or unregistering
//! unknown memory is `HB_SYS_INVALID_ARGUMENT`, never heap corruption.
#![allow(non_snake_case)]

use std::ffi::c_char;
use std::sync::atomic::{fence, Ordering};

use crate::error::{Error, Result};
use crate::ffi::boundary::{self, sys_non_null, write_out};
use crate::ffi::engine::engine;
use crate::ffi::types::*;
use crate::runtime::mem;

fn alloc_into(mem_out: *mut hbSysMem, size: u32, cached: bool) -> Result<()> {
    sys_non_null(mem_out, "mem")?;
    let p = engine().alloc(size as usize, cached)?;
    // SAFETY: checked non-null; writable per the caller's contract.
    unsafe {
        write_out(
            mem_out,
            hbSysMem {
                phyAddr: p as u64,
                virAddr: p.cast(),
                memSize: size,
            },
        )
    };
    Ok(())
}

/// Allocates `size` zeroed bytes (64-byte aligned) and fills `*mem` (`phyAddr` =
/// `virAddr`). `size` 0 or NULL `mem` → `HB_SYS_INVALID_ARGUMENT`; failure →
/// `HB_SYS_OUT_OF_MEMORY`. Free with `hbSysFreeMem`. Thread-safe.
///
/// # Safety
/// `mem` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbSysAllocMem(mem: *mut hbSysMem, size: u32) -> i32 {
    boundary::status(|| alloc_into(mem, size, false))
}

/// As `hbSysAllocMem`; the memory counts as cacheable (flushes are fences on a host).
///
/// # Safety
/// `mem` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbSysAllocCachedMem(mem: *mut hbSysMem, size: u32) -> i32 {
    boundary::status(|| alloc_into(mem, size, true))
}

/// Makes CPU writes visible to the library (`HB_SYS_MEM_CACHE_CLEAN`) or library writes
/// visible to the CPU (`HB_SYS_MEM_CACHE_INVALIDATE`). Any other flag, NULL `mem` or
/// NULL `virAddr` → `HB_SYS_INVALID_ARGUMENT`.
///
/// # Safety
/// `mem` must be NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn hbSysFlushMem(mem: *mut hbSysMem, flag: i32) -> i32 {
    boundary::status(|| {
        read_mem(mem)?;
        let clean = hbSysMemFlushFlag::HB_SYS_MEM_CACHE_CLEAN as i32;
        let invalidate = hbSysMemFlushFlag::HB_SYS_MEM_CACHE_INVALIDATE as i32;
        if flag != clean && flag != invalidate {
            return Err(Error::SysInvalidArgument(format!(
                "flush flag {flag} is neither HB_SYS_MEM_CACHE_INVALIDATE (1) nor \
                 HB_SYS_MEM_CACHE_CLEAN (2)"
            )));
        }
        fence(Ordering::SeqCst);
        Ok(())
    })
}

/// Reads `*mem` and checks its address.
fn read_mem(mem: *const hbSysMem) -> Result<hbSysMem> {
    sys_non_null(mem, "mem")?;
    // SAFETY: checked non-null; readable per the caller's contract.
    let m = unsafe { mem.read() };
    sys_non_null(m.virAddr, "mem->virAddr")?;
    Ok(m)
}

fn check_size(m: &hbSysMem, size: u32) -> Result<()> {
    if size > m.memSize {
        return Err(Error::SysInvalidArgument(format!(
            "size {size} exceeds memSize {}",
            m.memSize
        )));
    }
    Ok(())
}

/// Copies `size` bytes from `src` into `dest->virAddr` (then flushes). `size` beyond
/// `dest->memSize` or NULLs → `HB_SYS_INVALID_ARGUMENT`.
///
/// # Safety
/// `dest` NULL or readable with `virAddr` valid for `memSize` bytes; `src` NULL or
/// readable for `size` bytes; the ranges must not overlap.
#[no_mangle]
pub unsafe extern "C" fn hbSysWriteMem(dest: *mut hbSysMem, src: *mut c_char, size: u32) -> i32 {
    boundary::status(|| {
        let d = read_mem(dest)?;
        sys_non_null(src, "src")?;
        check_size(&d, size)?;
        // SAFETY: both non-null, valid for `size` bytes (checked against memSize and the
        // caller's contract) and not overlapping (contract).
        unsafe {
            std::ptr::copy_nonoverlapping(src.cast::<u8>(), d.virAddr.cast::<u8>(), size as usize)
        };
        fence(Ordering::SeqCst);
        Ok(())
    })
}

/// Copies `size` bytes from `src->virAddr` into `dest`. `size` beyond `src->memSize` or
/// NULLs → `HB_SYS_INVALID_ARGUMENT`.
///
/// # Safety
/// `src` NULL or readable with `virAddr` valid for `memSize` bytes; `dest` NULL or
/// writable for `size` bytes; the ranges must not overlap.
#[no_mangle]
pub unsafe extern "C" fn hbSysReadMem(dest: *mut c_char, src: *mut hbSysMem, size: u32) -> i32 {
    boundary::status(|| {
        let s = read_mem(src)?;
        sys_non_null(dest, "dest")?;
        check_size(&s, size)?;
        fence(Ordering::SeqCst);
        // SAFETY: as in `hbSysWriteMem`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.virAddr.cast::<u8>(), dest.cast::<u8>(), size as usize)
        };
        Ok(())
    })
}

/// Frees memory from `hbSysAllocMem` / `hbSysAllocCachedMem`. NULL `mem`, double free or
/// memory not allocated here → `HB_SYS_INVALID_ARGUMENT` (nothing is freed).
///
/// # Safety
/// `mem` must be NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn hbSysFreeMem(mem: *mut hbSysMem) -> i32 {
    boundary::status(|| {
        let m = read_mem(mem)?;
        engine().free(m.virAddr.cast())
    })
}

/// Registers caller-owned memory (`virAddr`, `memSize`) as usable by the library and
/// sets `phyAddr = virAddr`. Overlap with tracked memory, NULL address or size 0 →
/// `HB_SYS_REGISTER_MEM_FAILED`; NULL `mem` → `HB_SYS_INVALID_ARGUMENT`.
///
/// # Safety
/// `mem` must be NULL or readable and writable.
#[no_mangle]
pub unsafe extern "C" fn hbSysRegisterMem(mem: *mut hbSysMem) -> i32 {
    boundary::status(|| {
        sys_non_null(mem, "mem")?;
        // SAFETY: checked non-null; readable per the caller's contract.
        let mut m = unsafe { mem.read() };
        mem::register(m.virAddr.cast(), m.memSize as usize)?;
        m.phyAddr = m.virAddr as u64;
        // SAFETY: checked non-null; writable per the caller's contract.
        unsafe { write_out(mem, m) };
        Ok(())
    })
}

/// Forgets memory registered with `hbSysRegisterMem` (the memory itself is untouched).
/// Unknown memory → `HB_SYS_INVALID_ARGUMENT`.
///
/// # Safety
/// `mem` must be NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn hbSysUnregisterMem(mem: *mut hbSysMem) -> i32 {
    boundary::status(|| {
        let m = read_mem(mem)?;
        mem::unregister(m.virAddr.cast())
    })
}

//! hbSys* memory through the C ABI: allocation, read/write, flush flags, tracking of
//! double frees and foreign pointers, registration of caller memory.

use std::ptr::null_mut;

use vnpu::error::codes::*;
use vnpu::ffi::*;

fn empty() -> hbSysMem {
    hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    }
}

#[test]
fn alloc_write_read_free() {
    let mut m = empty();
    // SAFETY: valid pointers and sizes within the allocation.
    unsafe {
        assert_eq!(hbSysAllocCachedMem(&mut m, 1000), 0);
        assert!(!m.virAddr.is_null());
        assert_eq!(m.memSize, 1000);
        assert_eq!(m.phyAddr, m.virAddr as u64);
        let mut src: Vec<u8> = (0..=255).cycle().take(1000).collect();
        assert_eq!(hbSysWriteMem(&mut m, src.as_mut_ptr().cast(), 1000), 0);
        assert_eq!(
            hbSysFlushMem(&mut m, hbSysMemFlushFlag::HB_SYS_MEM_CACHE_CLEAN as i32),
            0
        );
        assert_eq!(
            hbSysFlushMem(
                &mut m,
                hbSysMemFlushFlag::HB_SYS_MEM_CACHE_INVALIDATE as i32
            ),
            0
        );
        let mut dst = vec![0u8; 1000];
        assert_eq!(hbSysReadMem(dst.as_mut_ptr().cast(), &mut m, 1000), 0);
        assert_eq!(dst, src);
        assert_eq!(
            hbSysWriteMem(&mut m, src.as_mut_ptr().cast(), 1001),
            HB_SYS_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("1001"));
        assert_eq!(hbSysFreeMem(&mut m), 0);
    }
}

#[test]
fn bad_arguments_and_double_free() {
    let mut m = empty();
    // SAFETY: every call gets NULL or valid pointers; freed memory is never touched.
    unsafe {
        assert_eq!(hbSysAllocMem(null_mut(), 8), HB_SYS_INVALID_ARGUMENT);
        assert_eq!(hbSysAllocMem(&mut m, 0), HB_SYS_INVALID_ARGUMENT);
        assert!(m.virAddr.is_null(), "out-param untouched on failure");
        assert_eq!(hbSysAllocMem(&mut m, 64), 0);
        assert_eq!(hbSysFlushMem(&mut m, 0), HB_SYS_INVALID_ARGUMENT);
        assert_eq!(hbSysFlushMem(&mut m, 3), HB_SYS_INVALID_ARGUMENT);
        assert!(last_error_detail().contains("flush flag 3"));
        assert_eq!(hbSysFlushMem(null_mut(), 1), HB_SYS_INVALID_ARGUMENT);
        assert_eq!(hbSysReadMem(null_mut(), &mut m, 1), HB_SYS_INVALID_ARGUMENT);
        assert_eq!(hbSysFreeMem(&mut m), 0);
        assert_eq!(hbSysFreeMem(&mut m), HB_SYS_INVALID_ARGUMENT);
        assert!(last_error_detail().contains("already freed"));
        let mut local = [0u8; 32];
        let mut foreign = hbSysMem {
            phyAddr: 0,
            virAddr: local.as_mut_ptr().cast(),
            memSize: 32,
        };
        assert_eq!(hbSysFreeMem(&mut foreign), HB_SYS_INVALID_ARGUMENT);
        assert_eq!(hbSysFreeMem(null_mut()), HB_SYS_INVALID_ARGUMENT);
    }
}

#[test]
fn register_and_unregister_caller_memory() {
    let mut buf = vec![0u8; 4096];
    let mut m = hbSysMem {
        phyAddr: 0,
        virAddr: buf.as_mut_ptr().cast(),
        memSize: 4096,
    };
    // SAFETY: `buf` outlives the registration.
    unsafe {
        assert_eq!(hbSysRegisterMem(&mut m), 0);
        assert_eq!(m.phyAddr, m.virAddr as u64);
        let mut overlap = m;
        overlap.virAddr = buf.as_mut_ptr().add(100).cast();
        overlap.memSize = 10;
        assert_eq!(hbSysRegisterMem(&mut overlap), HB_SYS_REGISTER_MEM_FAILED);
        assert_eq!(
            hbSysFreeMem(&mut m),
            HB_SYS_INVALID_ARGUMENT,
            "registered memory is not ours to free"
        );
        assert_eq!(hbSysUnregisterMem(&mut m), 0);
        assert_eq!(hbSysUnregisterMem(&mut m), HB_SYS_INVALID_ARGUMENT);
        let mut zero = m;
        zero.memSize = 0;
        assert_eq!(hbSysRegisterMem(&mut zero), HB_SYS_REGISTER_MEM_FAILED);
    }
}

#[test]
fn concurrent_alloc_free() {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..500u32 {
                    let mut m = empty();
                    // SAFETY: valid out-pointer; the memory is freed once.
                    unsafe {
                        assert_eq!(hbSysAllocMem(&mut m, 16 + i + t), 0);
                        std::ptr::write_bytes(m.virAddr.cast::<u8>(), 0xAB, m.memSize as usize);
                        assert_eq!(hbSysFreeMem(&mut m), 0);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}

//! Large buffers backed by transparent huge pages where Linux offers them on request
//! (`transparent_hugepage/enabled` = `madvise`, the common default): the arena, scratch
//! and bf16 packed weights of a plan are asked for 2 MiB pages before their first touch.
//!
//! Why: with huge pages a model's weights and activations need a few dozen TLB entries
//! instead of thousands. MobileNetV2 in bf16 on a 2-vCPU Xeon VM, every buffer on huge
//! pages (the system switch at `always`) against none, three interleaved rounds: 30
//! requests/s p50 4.25-4.49 ms against 4.79-4.93, back to back 2.76-2.99 against
//! 2.93-3.05.

/// Bytes of one huge page (x86-64).
const HUGE: usize = 2 << 20;

/// `n` copies of `v` in a vector whose whole 2 MiB pages were advised `MADV_HUGEPAGE`
/// before it was filled (vectors under one huge page, or off Linux, are plain).
pub(crate) fn filled<T: Clone>(n: usize, v: T) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(n);
    advise(out.as_ptr().cast(), n * std::mem::size_of::<T>());
    out.resize(n, v);
    out
}

/// Asks for huge pages over the whole 2 MiB pages inside `len` bytes from `at` (a fresh
/// allocation of this process); errors are ignored (the advice is only a hint).
fn advise(at: *const u8, len: usize) {
    let start = (at as usize).next_multiple_of(HUGE);
    let end = (at as usize + len) / HUGE * HUGE;
    if end <= start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside one live allocation of this process (rounded inwards
    // to whole huge pages); MADV_HUGEPAGE changes how its pages are backed, never their
    // contents or mapping, so no reference into it is affected.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_holds_the_copies_whatever_the_size() {
        for n in [0, 1, 1000, 3 * HUGE / 8 + 5] {
            let v = filled(n, 7u64);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 7));
        }
    }
}

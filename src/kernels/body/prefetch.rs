//! Software prefetch of input that the hardware prefetcher does not see coming: a
//! kernel that reads many short runs (a GEMM block's rows, an im2col block's channel
//! planes) asks for the next ones while it works on the current ones.

/// Cache line size assumed (x86-64).
const LINE_FLOATS: usize = 16;

/// Asks the cache for the lines holding `floats` floats from `base` (any address: a
/// prefetch never faults; other architectures do nothing).
#[inline(always)]
pub fn prefetch_floats(base: *const f32, floats: usize) {
    let mut at = 0;
    while at < floats {
        prefetch_line(base.wrapping_add(at));
        at += LINE_FLOATS;
    }
}

/// Asks the cache for the line holding `p` (any address).
#[inline(always)]
pub fn prefetch_line(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint and never faults, whatever the address; SSE is
    // part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

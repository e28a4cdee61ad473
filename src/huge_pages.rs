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

/// Elements in one allocation that starts on a huge page and ends on one when it spans
/// one or more (its pages advised `MADV_HUGEPAGE` before the first touch), else on a
/// cache line; reads as a slice. Why the alignment: the OS backs only the whole 2 MiB
/// pages inside an allocation with huge pages, and a heap block of a few MiB starts
/// anywhere in one, so a 3 MiB scratch held as few as one (its first MiB, where a
/// Winograd conv's transformed input lives, on 4 KiB pages: the CRNN's 8x80 conv ran
/// 13-16 % slower cut in channel tiles than whole).
pub(crate) struct HugeVec<T> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: a HugeVec owns its elements like a Vec (no shared interior state).
unsafe impl<T: Send> Send for HugeVec<T> {}
// SAFETY: shared access only reads the elements, as for a Vec.
unsafe impl<T: Sync> Sync for HugeVec<T> {}

impl<T: bytemuck::Pod> HugeVec<T> {
    /// `n` copies of `v`.
    pub(crate) fn filled(n: usize, v: T) -> HugeVec<T> {
        let size = n
            .checked_mul(std::mem::size_of::<T>())
            .expect("HugeVec: capacity overflow");
        let Some(layout) = layout_of::<T>(size) else {
            // No bytes: nothing to allocate (a size too large for a layout panics below).
            assert!(size == 0, "HugeVec: capacity overflow");
            return HugeVec {
                ptr: std::ptr::NonNull::dangling(),
                len: n,
            };
        };
        // SAFETY: the layout has a non-zero size (`layout` returns None otherwise).
        let p = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(p.cast::<T>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        advise(p, layout.size());
        // SAFETY: the allocation holds `n` elements of T, aligned for T; every one is
        // written before the slice is made.
        unsafe {
            for i in 0..n {
                ptr.as_ptr().add(i).write(v);
            }
        }
        HugeVec { ptr, len: n }
    }
}

/// The allocation of `size` bytes of `T`: whole huge pages at a huge page's alignment
/// from one huge page up, else a cache line's alignment; `None` for no bytes (or more
/// than an allocation can hold).
fn layout_of<T>(size: usize) -> Option<std::alloc::Layout> {
    if size == 0 {
        return None;
    }
    let (size, align) = if size >= HUGE {
        (size.checked_next_multiple_of(HUGE)?, HUGE)
    } else {
        (size, std::mem::align_of::<T>().max(64))
    };
    std::alloc::Layout::from_size_align(size, align).ok()
}

impl<T> std::ops::Deref for HugeVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised elements (or is dangling for none or for
        // zero-sized T), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for HugeVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for HugeVec<T> {
    fn drop(&mut self) {
        // Only Pod elements are ever stored (no drop glue); the layout is the one the
        // elements were allocated with (none for no bytes: nothing was allocated).
        if let Some(layout) = layout_of::<T>(self.len * std::mem::size_of::<T>()) {
            // SAFETY: `ptr` was allocated by `filled` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) }
        }
    }
}

impl<T: bytemuck::Pod> Clone for HugeVec<T> {
    fn clone(&self) -> HugeVec<T> {
        let mut out = HugeVec::filled(self.len, T::zeroed());
        out.copy_from_slice(self);
        out
    }
}

impl<T> std::fmt::Debug for HugeVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HugeVec({} elements)", self.len)
    }
}

/// True when a model load should put its weights on huge pages: `VNPU_HUGE_PAGES` on
/// (the default; a malformed value is an error) and the OS grants them on request.
pub(crate) fn for_weights() -> crate::error::Result<bool> {
    Ok(crate::config::flag("VNPU_HUGE_PAGES")? && on_request())
}

/// True when Linux backs memory advised `MADV_HUGEPAGE` with huge pages
/// (`transparent_hugepage/enabled` is `always` or `madvise`), read once.
fn on_request() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|m| m.contains("[always]") || m.contains("[madvise]"))
    })
}

/// Bytes copied into cache-line-aligned memory, on huge pages where it spans whole ones
/// ([`HugeVec`]): a model file's bytes, which its weights then borrow.
pub(crate) struct HugeBytes {
    lines: HugeVec<crate::exec::Line>,
    len: usize,
}

impl HugeBytes {
    /// A copy of `bytes`.
    pub(crate) fn copy_of(bytes: &[u8]) -> HugeBytes {
        let mut lines = crate::exec::lines(bytes.len());
        bytemuck::cast_slice_mut::<_, u8>(&mut lines)[..bytes.len()].copy_from_slice(bytes);
        HugeBytes {
            lines,
            len: bytes.len(),
        }
    }

    /// `parts` copied one after another, each from a cache-line boundary (as a compiled
    /// file lays out its constants), and the byte range of each.
    pub(crate) fn gather(parts: &[&[u8]]) -> (HugeBytes, Vec<std::ops::Range<usize>>) {
        const LINE: usize = std::mem::size_of::<crate::exec::Line>();
        let mut ranges = Vec::with_capacity(parts.len());
        let mut end = 0usize;
        for p in parts {
            let at = end.next_multiple_of(LINE);
            ranges.push(at..at + p.len());
            end = at + p.len();
        }
        let mut lines = crate::exec::lines(end);
        let bytes = bytemuck::cast_slice_mut::<_, u8>(&mut lines);
        for (p, r) in parts.iter().zip(&ranges) {
            bytes[r.clone()].copy_from_slice(p);
        }
        (HugeBytes { lines, len: end }, ranges)
    }
}

impl AsRef<[u8]> for HugeBytes {
    fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

/// A copy of `v` on huge pages when it spans one or more and [`for_weights`]; else
/// `None` (the caller keeps `v` where it is).
pub(crate) fn weights(v: &[f32]) -> Option<HugeVec<f32>> {
    if std::mem::size_of_val(v) < HUGE || !for_weights().unwrap_or(false) {
        return None;
    }
    let mut out = HugeVec::filled(v.len(), 0.0f32);
    out.copy_from_slice(v);
    Some(out)
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
    fn copies_keep_the_bytes_and_values_on_a_line_boundary() {
        for n in [0, 1, 63, 65, HUGE + 7] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let h = HugeBytes::copy_of(&bytes);
            assert_eq!(h.as_ref(), &bytes[..]);
            assert_eq!(h.as_ref().as_ptr() as usize % 64, 0);
        }
        for n in [0, 5, HUGE / 4 + 3] {
            let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            if let Some(w) = weights(&v) {
                assert_eq!(&w[..], &v[..]);
            }
        }
    }

    #[test]
    fn gathered_parts_keep_their_bytes_each_on_a_line_boundary() {
        let parts: Vec<Vec<u8>> = [0usize, 3, 64, 65, HUGE + 1]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 13 % 251) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let (h, ranges) = HugeBytes::gather(&refs);
        assert_eq!(ranges.len(), parts.len());
        for (p, r) in parts.iter().zip(&ranges) {
            assert_eq!(&h.as_ref()[r.clone()], &p[..]);
            assert_eq!((h.as_ref().as_ptr() as usize + r.start) % 64, 0);
        }
        let (empty, none) = HugeBytes::gather(&[]);
        assert!(empty.as_ref().is_empty() && none.is_empty());
    }

    #[test]
    #[should_panic(expected = "capacity overflow")]
    fn a_size_past_the_address_space_panics_rather_than_dangles() {
        let _ = HugeVec::filled(usize::MAX / 4, 0u64);
    }

    #[test]
    fn huge_vectors_start_on_a_huge_page_and_small_ones_on_a_line() {
        for n in [0usize, 1, 17, HUGE / 8 - 1, HUGE / 8, 3 * HUGE / 8 + 5] {
            let v = HugeVec::filled(n, 3u64);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 3));
            // (No elements: no allocation, a dangling pointer aligned for u64 only.)
            let align = match n * 8 {
                0 => 8,
                b if b >= HUGE => HUGE,
                _ => 64,
            };
            assert_eq!(v.as_ptr() as usize % align, 0, "{n} elements");
            let c = v.clone();
            assert_eq!(&c[..], &v[..]);
        }
    }

    #[test]
    fn filled_holds_the_copies_whatever_the_size() {
        for n in [0, 1, 1000, 3 * HUGE / 8 + 5] {
            let v = HugeVec::filled(n, 7u64);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 7));
        }
    }
}

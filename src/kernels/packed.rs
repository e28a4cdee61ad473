//! [`WeightBuf`]: f32 weights as a kernel reads them, either owned (packed when a plan
//! was built) or borrowed from a compiled file's memory map (packed when the file was
//! written), so that loading a model need not repack or even touch its weights.

use std::sync::Arc;

use crate::huge_pages::HugeVec;
use crate::ir::SharedBytes;

/// f32 elements, owned or borrowed from shared bytes; reads as `&[f32]`. Clones and
/// slices share the elements.
#[derive(Clone)]
pub struct WeightBuf {
    data: Storage,
    /// Elements `start..start + len` of the storage (checked in range when made).
    start: usize,
    len: usize,
}

#[derive(Clone)]
enum Storage {
    /// Small, or huge pages off (`crate::huge_pages::weights`).
    Owned(Arc<Vec<f32>>),
    /// On huge pages.
    Huge(Arc<HugeVec<f32>>),
    /// Checked aligned for f32 and a whole number of floats when made.
    Shared(SharedBytes),
}

impl WeightBuf {
    /// Elements held in this buffer (moved onto huge pages when they span whole ones
    /// and the setting `VNPU_HUGE_PAGES` is on: packed weights are read every run, and a
    /// TLB miss per 4 KiB page is dear in a VM).
    pub fn owned(v: Vec<f32>) -> WeightBuf {
        WeightBuf {
            start: 0,
            len: v.len(),
            data: match crate::huge_pages::weights(&v) {
                Some(h) => Storage::Huge(Arc::new(h)),
                None => Storage::Owned(Arc::new(v)),
            },
        }
    }

    /// A view of `bytes` as native-endian f32 elements; `None` when they are not aligned
    /// for f32, not a whole number of floats, or this host is big-endian (the bytes are
    /// little-endian).
    pub fn shared(bytes: SharedBytes) -> Option<WeightBuf> {
        let len = bytemuck::try_cast_slice::<u8, f32>(bytes.as_bytes())
            .ok()
            .filter(|_| cfg!(target_endian = "little"))?
            .len();
        Some(WeightBuf {
            data: Storage::Shared(bytes),
            start: 0,
            len,
        })
    }

    /// Elements `range` of this buffer, sharing them; `None` when out of range.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<WeightBuf> {
        self.as_slice().get(range.clone())?;
        Some(WeightBuf {
            data: self.data.clone(),
            start: self.start + range.start,
            len: range.len(),
        })
    }

    /// True when the elements are borrowed from shared bytes rather than owned.
    pub fn is_shared(&self) -> bool {
        matches!(self.data, Storage::Shared(_))
    }

    /// The elements.
    pub fn as_slice(&self) -> &[f32] {
        let all: &[f32] = match &self.data {
            Storage::Owned(v) => v,
            Storage::Huge(v) => v,
            // Alignment and length were checked when the view was made and the bytes
            // never change: the cast cannot fail (empty is only a failed check's fallback).
            Storage::Shared(b) => bytemuck::try_cast_slice(b.as_bytes()).unwrap_or(&[]),
        };
        all.get(self.start..self.start + self.len).unwrap_or(&[])
    }
}

impl std::ops::Deref for WeightBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.as_slice()
    }
}

impl std::fmt::Debug for WeightBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.is_shared() { "shared" } else { "owned" };
        write!(f, "WeightBuf({} floats, {how})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Words(Vec<u32>);
    impl AsRef<[u8]> for Words {
        fn as_ref(&self) -> &[u8] {
            bytemuck::cast_slice(&self.0)
        }
    }

    #[test]
    fn shared_views_read_the_bytes_and_slices_stay_shared() {
        let words: Vec<u32> = (0..8).map(|i| (i as f32).to_bits()).collect();
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(Words(words));
        let b = SharedBytes::new(owner.clone(), 4..28).expect("range");
        let w = WeightBuf::shared(b).expect("aligned");
        assert!(w.is_shared());
        assert_eq!(&w[..], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let s = w.slice(2..5).expect("in range");
        assert!(s.is_shared());
        assert_eq!(&s[..], &[3.0, 4.0, 5.0]);
        assert!(w.slice(4..7).is_none());
        // Not a whole number of floats, or not aligned: refused.
        let odd = SharedBytes::new(owner.clone(), 4..7).expect("range");
        assert!(WeightBuf::shared(odd).is_none());
        let mis = SharedBytes::new(owner, 1..9).expect("range");
        assert!(WeightBuf::shared(mis).is_none());
        let o = WeightBuf::owned(vec![1.0, 2.0, 3.0]);
        assert!(!o.is_shared());
        assert_eq!(&o.slice(1..3).expect("in range")[..], &[2.0, 3.0]);
    }
}

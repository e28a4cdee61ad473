//! Generational handle registry: C handles are opaque tokens, never addresses.
//!
//! A token packs `kind | generation | index` into a pointer-sized integer:
//! the top [`KIND_BITS`] bits name the registry (packed model, model, task), the low
//! [`INDEX_BITS`] bits the slot, the bits between the slot's generation. A slot's
//! generation is bumped every time its value is removed, so a released handle never
//! resolves again even after its slot is reused (until the generation wraps, after
//! 2^[`gen_bits`] reuses of the same slot on 64-bit targets: 2^40).
//!
//! Invariants: the token of a live value is non-zero (the kind is never 0); a token
//! resolves only in the registry whose kind it carries, only while its slot holds a
//! value of the same generation; `remove` succeeds at most once per token.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Bits of a token naming its registry.
pub(crate) const KIND_BITS: u32 = 4;
/// Bits of a token naming its slot.
pub(crate) const INDEX_BITS: u32 = 20;

/// Bits of a token holding the generation.
pub(crate) const fn gen_bits() -> u32 {
    usize::BITS - KIND_BITS - INDEX_BITS
}

const GEN_MASK: usize = (1usize << gen_bits()) - 1;
const INDEX_MASK: usize = (1usize << INDEX_BITS) - 1;

struct Slot<T> {
    generation: usize,
    value: Option<Arc<T>>,
}

struct Slots<T> {
    entries: Vec<Slot<T>>,
    free: Vec<usize>,
}

/// A table of live values of one handle kind.
pub(crate) struct Registry<T> {
    kind: usize,
    what: &'static str,
    invalid: fn(String) -> Error,
    slots: Mutex<Slots<T>>,
}

impl<T> Registry<T> {
    /// An empty registry; `kind` (1..16) must differ between registries and `invalid`
    /// builds the error for an unresolvable token.
    pub(crate) const fn new(kind: usize, what: &'static str, invalid: fn(String) -> Error) -> Self {
        Registry {
            kind,
            what,
            invalid,
            slots: parking_lot::const_mutex(Slots {
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn token(&self, index: usize, generation: usize) -> usize {
        (self.kind << (usize::BITS - KIND_BITS)) | (generation << INDEX_BITS) | index
    }

    /// Stores `value` and returns its token.
    pub(crate) fn insert(&self, value: Arc<T>) -> Result<usize> {
        let mut slots = self.slots.lock();
        let index = match slots.free.pop() {
            Some(i) => i,
            None => {
                let i = slots.entries.len();
                if i > INDEX_MASK {
                    return Err(Error::OutOfMemory(format!(
                        "more than {} live {} handles",
                        INDEX_MASK + 1,
                        self.what
                    )));
                }
                slots.entries.push(Slot {
                    generation: 1,
                    value: None,
                });
                i
            }
        };
        let slot = &mut slots.entries[index];
        slot.value = Some(value);
        Ok(self.token(index, slot.generation))
    }

    fn locate(&self, token: usize) -> Result<(usize, usize)> {
        let err = |why: &str| (self.invalid)(format!("{why} ({:#x})", token));
        if token == 0 {
            return Err((self.invalid)("NULL".into()));
        }
        if token >> (usize::BITS - KIND_BITS) != self.kind {
            return Err(err(&format!("not a {} handle", self.what)));
        }
        let index = token & INDEX_MASK;
        let generation = (token >> INDEX_BITS) & GEN_MASK;
        Ok((index, generation))
    }

    /// The value of a live token.
    pub(crate) fn get(&self, token: usize) -> Result<Arc<T>> {
        let (index, generation) = self.locate(token)?;
        let slots = self.slots.lock();
        match slots.entries.get(index) {
            Some(Slot {
                generation: g,
                value: Some(v),
            }) if *g == generation => Ok(v.clone()),
            _ => Err((self.invalid)(format!(
                "stale or released {} handle ({token:#x})",
                self.what
            ))),
        }
    }

    /// Removes a live token's value (the token is dead afterwards).
    pub(crate) fn remove(&self, token: usize) -> Result<Arc<T>> {
        let (index, generation) = self.locate(token)?;
        let mut slots = self.slots.lock();
        let value = match slots.entries.get_mut(index) {
            Some(slot) if slot.generation == generation && slot.value.is_some() => {
                slot.generation = match (slot.generation + 1) & GEN_MASK {
                    0 => 1,
                    g => g,
                };
                slot.value.take()
            }
            _ => None,
        };
        match value {
            Some(v) => {
                slots.free.push(index);
                Ok(v)
            }
            None => Err((self.invalid)(format!(
                "stale or already released {} handle ({token:#x})",
                self.what
            ))),
        }
    }

    /// Number of live values.
    pub(crate) fn live(&self) -> usize {
        let slots = self.slots.lock();
        slots.entries.iter().filter(|s| s.value.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Registry<u32> = Registry::new(14, "test", Error::InvalidTaskHandle);
    static B: Registry<u32> = Registry::new(15, "other", Error::InvalidTaskHandle);

    #[test]
    fn insert_get_remove() {
        let t = A.insert(Arc::new(5)).expect("insert");
        assert_ne!(t, 0);
        assert_eq!(*A.get(t).expect("get"), 5);
        assert_eq!(*A.remove(t).expect("remove"), 5);
        assert!(A.get(t).is_err());
        assert!(A.remove(t).is_err(), "double release");
    }

    #[test]
    fn reused_slot_gets_a_new_token() {
        let t1 = A.insert(Arc::new(1)).expect("insert");
        A.remove(t1).expect("remove");
        let t2 = A.insert(Arc::new(2)).expect("insert");
        assert_ne!(t1, t2);
        let err = A.get(t1).unwrap_err().to_string();
        assert!(err.contains("stale"), "{err}");
        assert_eq!(*A.get(t2).expect("get"), 2);
        A.remove(t2).expect("remove");
    }

    #[test]
    fn foreign_and_null_tokens() {
        let t = A.insert(Arc::new(3)).expect("insert");
        assert!(B
            .get(t)
            .unwrap_err()
            .to_string()
            .contains("not a other handle"));
        assert!(A.get(0).unwrap_err().to_string().contains("NULL"));
        let local = 0u64;
        assert!(A.get(&local as *const u64 as usize).is_err());
        assert!(A.get(t + 1000).is_err(), "unknown index");
        A.remove(t).expect("remove");
    }

    #[test]
    fn live_count() {
        static C: Registry<u8> = Registry::new(13, "count", Error::InvalidTaskHandle);
        let ts: Vec<_> = (0..10)
            .map(|i| C.insert(Arc::new(i)).expect("insert"))
            .collect();
        assert_eq!(C.live(), 10);
        for t in ts {
            C.remove(t).expect("remove");
        }
        assert_eq!(C.live(), 0);
    }
}

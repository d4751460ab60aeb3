//! Freelist values: end tokens and obfuscated next pointers.
//!
//! A freelist value is either an object address or an **end token**: the
//! slab's base address with the low bit set. Lists end in their slab's
//! token instead of NULL, so the slab is derivable from any freelist value,
//! even an exhausted one: this is what lets `(freelist, tid)` be the whole
//! per-CPU state (the 2014 series dropped `c->page`). [`NO_SLAB`] (a token
//! with base 0) means "this CPU has no slab".
//!
//! The next pointer stored inside a free object is obfuscated as Linux's
//! `CONFIG_SLAB_FREELIST_HARDENED` does:
//! `stored = next ^ secret ^ swab(address of the slot)`, so a leaked or
//! overwritten value is not a usable pointer. Decoding validates the result
//! (an object boundary of the same slab, or that slab's end token); anything
//! else is reported as corruption and never followed.

use crate::slab::Geometry;
use core::sync::atomic::{AtomicU64, Ordering};

/// "No CPU slab": a token whose slab base is 0.
pub(crate) const NO_SLAB: u64 = 1;

/// Whether a freelist value is a token (end of list, or no slab).
#[inline(always)]
pub(crate) fn is_token(v: u64) -> bool {
    v & 1 != 0
}

/// The end token of the slab at `base`.
#[inline(always)]
pub(crate) fn end_token(base: usize) -> u64 {
    base as u64 | 1
}

/// How a cache stores next pointers in its free objects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Codec {
    pub(crate) secret: u64,
    pub(crate) fp_off: usize,
}

impl Codec {
    #[inline(always)]
    fn slot(&self, obj: usize) -> &AtomicU64 {
        // SAFETY (for callers): `obj` is an object of a live slab, so
        // `obj + fp_off` is 8-byte aligned (slots and `fp_off` are multiples
        // of 8) and inside the slab's memory. An atomic access is used
        // because, with migrating tasks, a racing task may read the slot of
        // an object another task just took; the value is then stale and the
        // tid-checked CAS rejects it.
        // SAFETY: see above; the slab memory outlives every freelist value
        // that points into it while the cache is alive.
        unsafe { &*((obj + self.fp_off) as *const AtomicU64) }
    }

    /// Reads and decodes the next pointer of free object `obj`.
    ///
    /// # Safety
    /// `obj` is an object address of a live slab of this cache.
    #[inline(always)]
    pub(crate) unsafe fn get(&self, obj: usize) -> u64 {
        let a = obj + self.fp_off;
        // Under miri a plain read: its weak-memory emulation cannot mix an
        // atomic access with the user's plain writes to the same bytes (it
        // ICEs); miri runs no test where another task reads a stale slot.
        #[cfg(miri)]
        // SAFETY: as `slot`: an aligned word inside a live slab.
        let raw = unsafe { (a as *const u64).read() };
        #[cfg(not(miri))]
        let raw = self.slot(obj).load(Ordering::Relaxed);
        raw ^ self.secret ^ (a as u64).swap_bytes()
    }

    /// Encodes and stores `next` into free object `obj`.
    ///
    /// # Safety
    /// As [`get`](Self::get), and `obj` is owned by the caller (being freed).
    #[inline(always)]
    pub(crate) unsafe fn set(&self, obj: usize, next: u64) {
        let a = obj + self.fp_off;
        self.slot(obj).store(
            next ^ self.secret ^ (a as u64).swap_bytes(),
            Ordering::Relaxed,
        );
    }
}

/// Whether `next`, read from an object of the slab at `base`, is a valid
/// freelist value: an object of that slab or its end token.
#[inline(always)]
pub(crate) fn valid_next(geo: &Geometry, base: usize, next: u64) -> bool {
    // The object test first: most next pointers are objects.
    geo.is_object(base, next as usize) || next == end_token(base)
}

/// Walks a freelist chain starting at object `head` to its end token;
/// returns `(tail, count)`, or `None` if a link is corrupt.
///
/// # Safety
/// `head` is an object of a live slab of the cache `codec` belongs to, and
/// the chain is owned by the caller (no one else pops from it).
pub(crate) unsafe fn walk(codec: &Codec, geo: &Geometry, head: u64) -> Option<(usize, usize)> {
    let base = geo.base_of(head as usize);
    let (mut cur, mut n) = (head as usize, 1usize);
    loop {
        // SAFETY: `cur` is an object of the slab (checked on the previous
        // step, or the caller's `head`).
        let next = unsafe { codec.get(cur) };
        if next == end_token(base) {
            return Some((cur, n));
        }
        if !geo.is_object(base, next as usize) || n > geo.objects {
            return None;
        }
        cur = next as usize;
        n += 1;
    }
}

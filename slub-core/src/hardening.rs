//! Debugging aids of the `debug` feature, with Linux's values: red zones
//! (`SLUB_RED_INACTIVE` 0xbb while free, `SLUB_RED_ACTIVE` 0xcc while
//! allocated), poisoning (`POISON_INUSE` 0x5a for fresh slab memory,
//! `POISON_FREE` 0x6b for a free object with `POISON_END` 0xa5 in its last
//! byte), and the object layout that makes room for them.
//!
//! Layout of a slot under `debug`:
//! `[object (size, rounded to 8)][red zone 8][freelist pointer 8][orig size 8][align pad]`;
//! the red zone covers the rounding slack too. The freelist pointer lives
//! outside the object so poisoning does not destroy it. Without `debug` the
//! freelist pointer is the object's first word.
//!
//! The orig size word is the size the caller asked for (Linux's
//! `orig_size`, kept with `SLAB_STORE_USER` on kmalloc caches): `size` for
//! a cache allocation, the requested size for a kmalloc or krealloc. The
//! bytes between it and `size` are red zone too (`SLUB_RED_ACTIVE`),
//! checked on free like the red zone after the object, so an 18-byte
//! kmalloc written at byte 18 is caught (`test_kmalloc_redzone_access`).
//!
//! The always-on hardening (obfuscated freelist pointers, validated
//! decoding, fast-path double-free detection) is in `freelist.rs` and
//! `tid.rs`.

/// Red zone byte while the object is free.
pub const SLUB_RED_INACTIVE: u8 = 0xbb;
/// Red zone byte while the object is allocated.
pub const SLUB_RED_ACTIVE: u8 = 0xcc;
/// Fresh slab memory.
pub const POISON_INUSE: u8 = 0x5a;
/// A free object's bytes.
pub const POISON_FREE: u8 = 0x6b;
/// A free object's last byte.
pub const POISON_END: u8 = 0xa5;

/// Red zone bytes after each object (besides the rounding slack).
pub(crate) const REDZONE: usize = 8;

/// `(slot size, freelist pointer offset)` for objects of `size` aligned to
/// `align` (at least 8).
pub(crate) fn layout(size: usize, align: usize) -> (usize, usize) {
    if cfg!(feature = "debug") {
        let obj = size.next_multiple_of(8);
        ((obj + REDZONE + 16).next_multiple_of(align), obj + REDZONE)
    } else {
        (size.max(8).next_multiple_of(align), 0)
    }
}

#[cfg(feature = "debug")]
mod checks {
    use super::*;
    use crate::error::{AllocError, FreeError};
    use crate::slab::Geometry;

    fn bytes(p: usize, len: usize) -> &'static mut [u8] {
        // SAFETY: for every caller, `p..p + len` lies in one slot of a live
        // slab owned by the caller (a fresh slab, an object being allocated,
        // resized or freed), so it is valid and not accessed by anyone else.
        unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) }
    }

    /// The orig size word of the object at `p` (after its freelist pointer).
    fn orig_word(g: &Geometry, p: usize) -> &'static mut usize {
        // SAFETY: as `bytes`; the word is 8-byte aligned (slots and
        // `fp_off` are multiples of 8) and inside the slot (`layout`).
        unsafe { &mut *((p + g.fp_off + 8) as *mut usize) }
    }

    /// The size asked for, clamped to the object (a corrupted word is not
    /// trusted to index outside it).
    pub(crate) fn orig_size(g: &Geometry, p: usize) -> usize {
        (*orig_word(g, p)).min(g.size)
    }

    fn poison_free(g: &Geometry, p: usize) {
        let obj = bytes(p, g.size);
        obj.fill(POISON_FREE);
        obj[g.size - 1] = POISON_END;
    }

    fn red(g: &Geometry, p: usize) -> &'static mut [u8] {
        bytes(p + g.size, g.fp_off - g.size)
    }

    /// The offset (from `p`) of the first byte of `p + from .. p + from +
    /// len` that is not `want`.
    fn first_bad(p: usize, from: usize, len: usize, want: u8) -> Option<u32> {
        bytes(p + from, len)
            .iter()
            .position(|&b| b != want)
            .map(|i| (from + i) as u32)
    }

    /// Fills a fresh slab with `POISON_INUSE`, then marks every object free.
    pub(crate) fn init_slab(g: &Geometry, base: usize) {
        bytes(base + g.first, g.slab_bytes - g.first).fill(POISON_INUSE);
        for i in 0..g.objects {
            let o = g.object(base, i);
            poison_free(g, o);
            red(g, o).fill(SLUB_RED_INACTIVE);
        }
    }

    /// Checks a just-allocated object was left alone while free, then marks
    /// it allocated with its whole size asked for.
    pub(crate) fn on_alloc(g: &Geometry, p: usize) -> Result<(), AllocError> {
        let bad = first_bad(p, 0, g.size - 1, POISON_FREE)
            .or_else(|| first_bad(p, g.size - 1, 1, POISON_END))
            .or_else(|| first_bad(p, g.size, g.fp_off - g.size, SLUB_RED_INACTIVE));
        if let Some(offset) = bad {
            return Err(AllocError::PoisonOverwritten { object: p, offset });
        }
        red(g, p).fill(SLUB_RED_ACTIVE);
        *orig_word(g, p) = g.size;
        Ok(())
    }

    /// Records that the caller asked for `n` bytes of the allocated object
    /// at `p` (at most its size): the bytes from `n` to the size become red
    /// zone (krealloc's `set_orig_size` and red-zone fill).
    pub(crate) fn set_orig_size(g: &Geometry, p: usize, n: usize) {
        let n = n.min(g.size);
        bytes(p + n, g.size - n).fill(SLUB_RED_ACTIVE);
        *orig_word(g, p) = n;
    }

    /// Checks the red zones of an object being freed (double free, overflow
    /// past the size asked for or past the object), then poisons it and
    /// marks it free.
    pub(crate) fn on_free(g: &Geometry, p: usize) -> Result<(), FreeError> {
        if red(g, p).iter().all(|&b| b == SLUB_RED_INACTIVE) {
            return Err(FreeError::DoubleFree { ptr: p });
        }
        let orig = orig_size(g, p);
        if let Some(offset) = first_bad(p, orig, g.fp_off - orig, SLUB_RED_ACTIVE) {
            return Err(FreeError::RedZoneOverwritten { ptr: p, offset });
        }
        poison_free(g, p);
        red(g, p).fill(SLUB_RED_INACTIVE);
        Ok(())
    }
}

#[cfg(feature = "debug")]
pub(crate) use checks::{init_slab, on_alloc, on_free, orig_size, set_orig_size};

//! Debugging aids of the `debug` feature, with Linux's values: red zones
//! (`SLUB_RED_INACTIVE` 0xbb while free, `SLUB_RED_ACTIVE` 0xcc while
//! allocated), poisoning (`POISON_INUSE` 0x5a for fresh slab memory,
//! `POISON_FREE` 0x6b for a free object with `POISON_END` 0xa5 in its last
//! byte), and the object layout that makes room for them.
//!
//! Layout of a slot under `debug`:
//! `[object (size, rounded to 8)][red zone 8][freelist pointer 8][align pad]`;
//! the red zone covers the rounding slack too. The freelist pointer lives
//! outside the object so poisoning does not destroy it. Without `debug` the
//! freelist pointer is the object's first word.
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
        ((obj + REDZONE + 8).next_multiple_of(align), obj + REDZONE)
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
        // slab owned by the caller (a fresh slab, an object being allocated
        // or freed), so it is valid and not accessed by anyone else.
        unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) }
    }

    fn poison_free(g: &Geometry, p: usize) {
        let obj = bytes(p, g.size);
        obj.fill(POISON_FREE);
        obj[g.size - 1] = POISON_END;
    }

    fn red(g: &Geometry, p: usize) -> &'static mut [u8] {
        bytes(p + g.size, g.fp_off - g.size)
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
    /// it allocated.
    pub(crate) fn on_alloc(g: &Geometry, p: usize) -> Result<(), AllocError> {
        let obj = bytes(p, g.size);
        let intact = obj[..g.size - 1].iter().all(|&b| b == POISON_FREE)
            && obj[g.size - 1] == POISON_END
            && red(g, p).iter().all(|&b| b == SLUB_RED_INACTIVE);
        if !intact {
            return Err(AllocError::PoisonOverwritten { object: p });
        }
        red(g, p).fill(SLUB_RED_ACTIVE);
        Ok(())
    }

    /// Checks the red zone of an object being freed (double free, overflow),
    /// then poisons it and marks it free.
    pub(crate) fn on_free(g: &Geometry, p: usize) -> Result<(), FreeError> {
        let rz = red(g, p);
        if rz.iter().all(|&b| b == SLUB_RED_INACTIVE) {
            return Err(FreeError::DoubleFree { ptr: p });
        }
        if !rz.iter().all(|&b| b == SLUB_RED_ACTIVE) {
            return Err(FreeError::RedZoneOverwritten { ptr: p });
        }
        poison_free(g, p);
        rz.fill(SLUB_RED_INACTIVE);
        Ok(())
    }
}

#[cfg(feature = "debug")]
pub(crate) use checks::{init_slab, on_alloc, on_free};

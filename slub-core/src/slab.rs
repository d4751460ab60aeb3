//! A slab: a naturally aligned block of pages holding `objects` objects of
//! one cache, with its header at the base.
//!
//! Linux keeps slab metadata in `struct page`; a library has no memmap, so
//! the header lives in the slab itself, at offset 0. Because slabs are
//! aligned to their size, the slab of any object (and of any end token) is
//! `addr & !(slab_bytes - 1)`.
//!
//! The header's first 16 bytes are the slab-level `(freelist, counters)`
//! pair that remote frees update with a DW-CAS. `counters` packs
//! `inuse` (objects not on this freelist: allocated or on a CPU freelist),
//! `objects`, `frozen` (owned by a CPU: its current or per-CPU partial slab)
//! and a generation that steps on every update, so that a compare of `hi`
//! alone (ia64's `cmp8xchg16`) is still ABA-safe.

use crate::sync::UnsafeCellPtr;
use arch_api::DwCell;

/// Magic in every slab header (xor-ed with the cache secret), checked before
/// a free trusts a header.
pub(crate) const SLAB_MAGIC: u64 = 0x51ab_c0de_5eed_f00d;

/// Largest slab order tried (64 pages of 4 KiB = 256 KiB).
pub(crate) const MAX_ORDER: u32 = 6;

/// The header at the base of every slab.
#[repr(C, align(64))]
pub(crate) struct Slab {
    /// `(freelist, counters)`: lo is the raw head (object pointer or end token).
    pub(crate) state: DwCell,
    /// Next slab on the node partial list or the CPU partial list.
    pub(crate) next: UnsafeCellPtr<Slab>,
    /// Previous slab on the node partial list.
    pub(crate) prev: UnsafeCellPtr<Slab>,
    /// `SLAB_MAGIC ^ cache secret`.
    pub(crate) magic: u64,
    /// On the node partial list (under the node lock).
    pub(crate) on_partial: core::cell::UnsafeCell<bool>,
}

/// The packed `hi` word of a slab's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counters(pub(crate) u64);

impl Counters {
    const INUSE_MASK: u64 = 0xffff;
    const FROZEN: u64 = 1 << 32;
    const GEN_SHIFT: u32 = 33;

    pub(crate) fn new(inuse: usize, objects: usize, frozen: bool) -> Self {
        Counters(
            (inuse as u64 & Self::INUSE_MASK)
                | (objects as u64 & 0xffff) << 16
                | if frozen { Self::FROZEN } else { 0 },
        )
    }
    pub(crate) fn inuse(self) -> usize {
        (self.0 & Self::INUSE_MASK) as usize
    }
    pub(crate) fn objects(self) -> usize {
        (self.0 >> 16 & 0xffff) as usize
    }
    pub(crate) fn frozen(self) -> bool {
        self.0 & Self::FROZEN != 0
    }
    /// The same counters with `inuse`, `frozen` replaced and the generation
    /// stepped (every successful update must change `hi`).
    pub(crate) fn next(self, inuse: usize, frozen: bool) -> Self {
        let gen_ = (self.0 >> Self::GEN_SHIFT).wrapping_add(1);
        let mut c = Counters::new(inuse, self.objects(), frozen);
        c.0 |= gen_ << Self::GEN_SHIFT;
        c
    }
}

/// Where things are inside a slab of a given cache. Constant per cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// Object size the user asked for.
    pub(crate) size: usize,
    /// Object stride.
    pub(crate) slot: usize,
    /// Objects per slab.
    pub(crate) objects: usize,
    /// Slab size (a power of two; slabs are aligned to it).
    pub(crate) slab_bytes: usize,
    /// Offset of the first object (the header rounded up to the alignment).
    pub(crate) first: usize,
    /// `objects * slot`.
    pub(crate) span: usize,
    /// Offset of the freelist pointer inside a free object.
    #[cfg_attr(not(feature = "debug"), allow(dead_code))]
    pub(crate) fp_off: usize,
    /// `slot = 2^shift * odd`; `inv` is `odd`'s inverse mod 2^64 and `lim`
    /// is `u64::MAX / odd`: `off` is a multiple of `slot` iff its low `shift`
    /// bits are 0 and `(off >> shift) * inv <= lim` (one multiply, no divide).
    shift: u32,
    inv: u64,
    lim: u64,
}

impl Geometry {
    /// Lays out a cache: the smallest slab order (from one page up to
    /// `MAX_ORDER`) wasting at most 1/8 of the slab, with at least 4 objects
    /// when that is possible, capped at `max_objects`.
    pub(crate) fn new(
        size: usize,
        slot: usize,
        fp_off: usize,
        align: usize,
        page: usize,
        max_objects: usize,
    ) -> Option<Self> {
        let header = core::mem::size_of::<Slab>();
        let first = header.next_multiple_of(align);
        let mut best = None;
        for order in 0..=MAX_ORDER {
            let bytes = page << order;
            if first >= bytes {
                continue;
            }
            let objects = ((bytes - first) / slot).min(max_objects).min(0xffff);
            if objects == 0 {
                continue;
            }
            let waste = bytes - objects * slot;
            best = Some((bytes, objects));
            if (waste * 8 <= bytes && objects >= 4) || objects == max_objects {
                break;
            }
        }
        let (slab_bytes, objects) = best?;
        let shift = slot.trailing_zeros();
        let odd = (slot >> shift) as u64;
        // Newton's iteration for the inverse of an odd number mod 2^64.
        let mut inv = odd;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inv)));
        }
        Some(Self {
            size,
            slot,
            objects,
            slab_bytes,
            first,
            span: objects * slot,
            fp_off,
            shift,
            inv,
            lim: u64::MAX / odd,
        })
    }

    /// The slab base of an object or token.
    #[inline(always)]
    pub(crate) fn base_of(&self, addr: usize) -> usize {
        addr & !(self.slab_bytes - 1)
    }

    /// Whether `p` lies in the object area of the slab at `base`: the
    /// "belongs to the current CPU slab" check (one subtract, one compare).
    #[inline(always)]
    pub(crate) fn in_range(&self, base: usize, p: usize) -> bool {
        p.wrapping_sub(base + self.first) < self.span
    }

    /// Whether `p` is an object boundary of the slab at `base`.
    #[inline(always)]
    pub(crate) fn is_object(&self, base: usize, p: usize) -> bool {
        let off = p.wrapping_sub(base + self.first);
        off < self.span
            && off & ((1 << self.shift) - 1) == 0
            && ((off >> self.shift) as u64).wrapping_mul(self.inv) <= self.lim
    }

    /// Address of object `i` of the slab at `base`.
    #[inline(always)]
    pub(crate) fn object(&self, base: usize, i: usize) -> usize {
        base + self.first + i * self.slot
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn object_boundaries_without_a_divide() {
        for slot in [8usize, 24, 40, 64, 96, 192, 520, 4096, 16384] {
            let g = Geometry::new(slot, slot, 0, 8, 4096, usize::MAX).unwrap();
            let base = 0x10_0000usize.next_multiple_of(g.slab_bytes);
            for off in 0..g.span.min(5000) {
                let p = base + g.first + off;
                assert_eq!(
                    g.is_object(base, p),
                    off % slot == 0,
                    "slot {slot} off {off}"
                );
            }
            assert!(!g.is_object(base, base + g.first + g.span));
            assert!(!g.is_object(base, base));
            assert!(g.objects >= 1 && g.first + g.span <= g.slab_bytes);
        }
    }

    #[test]
    fn big_objects_get_bigger_slabs_with_bounded_waste() {
        let g = Geometry::new(16384, 16384, 0, 16384, 4096, usize::MAX).unwrap();
        assert_eq!(g.slab_bytes, 128 << 10);
        assert_eq!(g.objects, 7);
        let g = Geometry::new(8, 8, 0, 8, 4096, usize::MAX).unwrap();
        assert_eq!(g.slab_bytes, 4096);
        let g = Geometry::new(64, 64, 0, 8, 4096, 3).unwrap();
        assert_eq!(g.objects, 3, "capped for tiny test slabs");
    }

    #[test]
    fn counters_step_their_generation() {
        let c = Counters::new(3, 8, true);
        assert_eq!((c.inuse(), c.objects(), c.frozen()), (3, 8, true));
        let d = c.next(3, true);
        assert_ne!(c, d, "same fields, different hi");
        assert_eq!((d.inuse(), d.objects(), d.frozen()), (3, 8, true));
        assert_eq!(d.next(0, false).inuse(), 0);
    }
}

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

/// Largest order used just to reach `min_objects` (Linux's `slub_max_order`
/// default, `PAGE_ALLOC_COSTLY_ORDER`).
pub(crate) const COSTLY_ORDER: u32 = 3;

/// Linux's `slub_min_objects` default, `4 * (fls(nr_cpu_ids) + 1)`: more
/// CPUs, bigger slabs, so that fast paths run longer between slab switches
/// and frees of a burst land in fewer slabs.
pub(crate) fn min_objects(nr_cpus: usize) -> usize {
    4 * ((usize::BITS - nr_cpus.leading_zeros()) as usize + 1)
}

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
#[repr(C)]
pub(crate) struct Geometry {
    // The fast free's fields first (`is_object_in_own_slab`), then the rest.
    /// `slab_bytes - 1`: the offset of an address inside its slab is
    /// `addr & mask` (one instruction fewer than deriving it on every free).
    #[cfg_attr(feature = "debug", allow(dead_code))]
    mask: usize,
    /// Offset of the first object (the header rounded up to the alignment).
    pub(crate) first: usize,
    /// `slot = 2^shift * odd` and `inv` is `odd`'s inverse mod 2^64. Then
    /// `(off * inv).rotate_right(shift)` is `off / slot` when `slot` divides
    /// `off`, and above `u64::MAX / slot` (so at least `objects`) when it
    /// does not (Granlund–Montgomery): one multiply and one rotate decide
    /// "an object boundary inside the slab", no divide.
    inv: u64,
    /// Objects per slab.
    pub(crate) objects: usize,
    shift: u32,
    /// Object size the user asked for.
    pub(crate) size: usize,
    /// Object stride.
    pub(crate) slot: usize,
    /// Slab size (a power of two; slabs are aligned to it).
    pub(crate) slab_bytes: usize,
    /// `!mask`: the slab base of an address is `addr & base_mask`.
    base_mask: usize,
    /// `objects * slot`.
    pub(crate) span: usize,
    /// Offset of the freelist pointer inside a free object.
    #[cfg_attr(not(feature = "debug"), allow(dead_code))]
    pub(crate) fp_off: usize,
}

impl Geometry {
    /// Lays out a cache (`calculate_order`): the smallest slab order up to
    /// `COSTLY_ORDER` wasting at most 1/8 of the slab with at least
    /// `min_objects` objects; failing that, the smallest order up to
    /// `MAX_ORDER` wasting at most 1/8 with at least 4 objects when that is
    /// possible. Objects are capped at `max_objects`.
    pub(crate) fn new(
        size: usize,
        slot: usize,
        fp_off: usize,
        align: usize,
        page: usize,
        max_objects: usize,
        min_objects: usize,
    ) -> Option<Self> {
        let header = core::mem::size_of::<Slab>();
        let first = header.next_multiple_of(align);
        let fit = |order: u32| {
            let bytes = page << order;
            if first >= bytes {
                return None;
            }
            let objects = ((bytes - first) / slot).min(max_objects).min(0xffff);
            (objects > 0).then(|| (bytes, objects, bytes - objects * slot))
        };
        let want = min_objects.clamp(4, max_objects.max(4));
        let mut best = (0..=COSTLY_ORDER)
            .filter_map(fit)
            .find(|&(bytes, objects, waste)| {
                waste * 8 <= bytes && (objects >= want || objects == max_objects)
            })
            .map(|(bytes, objects, _)| (bytes, objects));
        if best.is_none() {
            for order in 0..=MAX_ORDER {
                let Some((bytes, objects, waste)) = fit(order) else {
                    continue;
                };
                best = Some((bytes, objects));
                if (waste * 8 <= bytes && objects >= 4) || objects == max_objects {
                    break;
                }
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
            mask: slab_bytes - 1,
            base_mask: !(slab_bytes - 1),
            first,
            span: objects * slot,
            fp_off,
            shift,
            inv,
        })
    }

    /// The slab base of an object or token.
    #[inline(always)]
    pub(crate) fn base_of(&self, addr: usize) -> usize {
        addr & self.base_mask
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
        let off = p.wrapping_sub(base + self.first) as u64;
        // An offset below the first object wraps to a huge value: never a
        // quotient below `objects`.
        off.wrapping_mul(self.inv).rotate_right(self.shift) < self.objects as u64
    }

    /// Whether `p` is an object boundary of the slab containing it: as
    /// [`is_object`](Self::is_object)`(self.base_of(p), p)`, with the offset
    /// taken by one mask.
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn is_object_in_own_slab(&self, p: usize) -> bool {
        let off = (p & self.mask).wrapping_sub(self.first) as u64;
        off.wrapping_mul(self.inv).rotate_right(self.shift) < self.objects as u64
    }

    /// Address of object `i` of the slab at `base`.
    #[inline(always)]
    pub(crate) fn object(&self, base: usize, i: usize) -> usize {
        base + self.first + i * self.slot
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    #[test]
    fn object_boundaries_without_a_divide() {
        for slot in [8usize, 24, 40, 64, 96, 192, 520, 1000, 3000, 4096, 16384] {
            let g = Geometry::new(slot, slot, 0, 8, 4096, usize::MAX, 4).unwrap();
            let base = 0x10_0000usize.next_multiple_of(g.slab_bytes);
            // Every offset of the first objects (fewer under miri, which
            // interprets each check: a minute and a half for all of them).
            for off in 0..g.span.min(if cfg!(miri) { 600 } else { 5000 }) {
                let p = base + g.first + off;
                assert_eq!(
                    g.is_object(base, p),
                    off % slot == 0,
                    "slot {slot} off {off}"
                );
            }
            // The last objects and everything past them (under miri the
            // bytes either side of each object start only).
            let tail = g.span.saturating_sub(3 * slot)..g.span + 3 * slot;
            let check = |off: usize| {
                let p = base + g.first + off;
                assert_eq!(
                    g.is_object(base, p),
                    off < g.span && off % slot == 0,
                    "slot {slot} off {off}"
                );
            };
            if cfg!(miri) {
                for b in (tail.start.next_multiple_of(slot)..tail.end).step_by(slot) {
                    [b.wrapping_sub(1), b, b + 1]
                        .into_iter()
                        .filter(|o| tail.contains(o))
                        .for_each(check);
                }
            } else {
                tail.for_each(check);
            }
            // Below the first object (the header), wrapping offsets.
            for back in 1..=g.first.min(200) {
                assert!(!g.is_object(base, base + g.first - back), "slot {slot}");
            }
            for p in [0, 1, usize::MAX, usize::MAX - slot + 1, base.wrapping_neg()] {
                assert!(!g.is_object(base, p), "slot {slot} p {p:#x}");
            }
            assert!(!g.is_object(base, base + g.first + g.span));
            assert!(!g.is_object(base, base));
            assert!(g.objects >= 1 && g.first + g.span <= g.slab_bytes);
            // The one-mask form agrees with `is_object` on the slab of `p`,
            // over the whole slab and its neighbours.
            for p in (base - g.slab_bytes..base + 2 * g.slab_bytes).step_by(8) {
                assert_eq!(
                    g.is_object_in_own_slab(p),
                    g.is_object(g.base_of(p), p),
                    "slot {slot} p {p:#x}"
                );
            }
        }
    }

    #[test]
    fn big_objects_get_bigger_slabs_with_bounded_waste() {
        let g = Geometry::new(16384, 16384, 0, 16384, 4096, usize::MAX, 36).unwrap();
        assert_eq!(g.slab_bytes, 128 << 10);
        assert_eq!(g.objects, 7);
        let g = Geometry::new(8, 8, 0, 8, 4096, usize::MAX, 36).unwrap();
        assert_eq!(g.slab_bytes, 4096);
        let g = Geometry::new(64, 64, 0, 8, 4096, 3, 36).unwrap();
        assert_eq!(g.objects, 3, "capped for tiny test slabs");
    }

    #[test]
    fn min_objects_grow_slabs_up_to_the_costly_order() {
        assert_eq!(min_objects(2), 12);
        assert_eq!(min_objects(128), 36);
        // 256-byte objects, 128 CPUs: 8 KiB holds 31, 16 KiB holds 63.
        let g = Geometry::new(256, 256, 0, 256, 4096, usize::MAX, 36).unwrap();
        assert_eq!((g.slab_bytes, g.objects), (16 << 10, 63));
        // Few CPUs: one page is enough.
        let g = Geometry::new(256, 256, 0, 256, 4096, usize::MAX, 12).unwrap();
        assert_eq!((g.slab_bytes, g.objects), (4096, 15));
        // 36 objects of 2 KiB need more than the costly order: fall back to
        // the smallest order with little waste.
        let g = Geometry::new(2048, 2048, 0, 2048, 4096, usize::MAX, 36).unwrap();
        assert_eq!((g.slab_bytes, g.objects), (16 << 10, 7));
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

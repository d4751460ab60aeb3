//! TLB maintenance by `TLBI` (Arm ARM, DDI 0487, D8.13 "TLB maintenance",
//! and the `TLBI VAE1IS` / `TLBI VMALLE1IS` instruction descriptions).
//!
//! Kernel mappings are shared by every CPU, so invalidations are broadcast to
//! the Inner Shareable domain (the `…IS` forms): no IPIs, unlike x86. A range
//! is invalidated as
//!
//! ```text
//! dsb  ishst             // the page-table stores are visible to the walkers
//! tlbi vae1is, <op>      // once per page
//! dsb  ish               // the invalidations have completed everywhere
//! isb                    // and this CPU's pipeline sees it
//! ```
//!
//! and, past the flush ceiling, with a single `tlbi vmalle1is` between the
//! same barriers (all stage 1 EL1&0 entries for the current VMID).
//!
//! The `TLBI VAE1IS` operand ([`tlbi_va_operand`]) holds VA bits 55:12 in its
//! bits 43:0 whatever the granule (with 16 KiB / 64 KiB granules the VA's
//! bits below the granule are RES0, so the address is aligned down to the
//! granule first), and the ASID in bits 63:48, here 0: it matches global
//! entries, which is what kernel mappings are (`MapFlags::GLOBAL`), and
//! non-global entries of ASID 0 only.
//!
//! `TLBI` is not available at EL0: the [`TlbFlush`](arch_api::TlbFlush)
//! implementation, `Aarch64Tlb`, exists on bare metal only (`target_arch =
//! "aarch64"`, `target_os = "none"`). Hosted builds use `arch_api::SoftTlb`,
//! the counted software model. The address arithmetic ([`tlbi_va_operand`],
//! [`plan_range_flush`]) is plain code, available and tested everywhere.

use crate::layout::Granule;
use arch_api::VirtAddr;

/// The `TLBI VAE1IS` operand for `va` under granule `G`: VA bits 55:12 in
/// bits 43:0 (the VA aligned down to the granule), ASID 0 in bits 63:48.
pub const fn tlbi_va_operand<G: Granule>(va: VirtAddr) -> u64 {
    let va = va.as_u64() & !((1u64 << G::PAGE_SHIFT) - 1);
    (va >> 12) & ((1u64 << 44) - 1)
}

/// What a range flush does (see [`plan_range_flush`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeFlush {
    /// An empty range: nothing, not even barriers.
    Nothing,
    /// `count` invalidations by VA, from `first` in steps of `step` bytes.
    Pages {
        /// The first address, aligned down to `step`.
        first: VirtAddr,
        /// Bytes between two invalidated addresses.
        step: u64,
        /// Number of invalidations (at most the ceiling).
        count: u64,
    },
    /// More pages than the ceiling: invalidate everything (`vmalle1is`).
    All,
}

/// How to invalidate `[start, end)` in pages of `page_size` bytes (at least
/// the granule: a smaller `page_size` is rounded up to `G::PAGE_SIZE`, a
/// larger one, e.g. a block size, is kept: `TLBI` by VA removes any entry
/// that translates the address, block entries included). Every page that
/// overlaps the range counts, partial ones at either end too; more than
/// `ceiling_pages` becomes [`RangeFlush::All`].
pub fn plan_range_flush<G: Granule>(
    start: VirtAddr,
    end: VirtAddr,
    page_size: u64,
    ceiling_pages: u64,
) -> RangeFlush {
    if end <= start {
        return RangeFlush::Nothing;
    }
    let step = page_size.max(G::PAGE_SIZE);
    debug_assert!(step.is_power_of_two(), "page size {step:#x}");
    let first = start.align_down(step);
    // Index of the last page, not its end: no overflow at the top of memory.
    let count = (end.as_u64() - 1) / step - first.as_u64() / step + 1;
    if count > ceiling_pages {
        RangeFlush::All
    } else {
        RangeFlush::Pages { first, step, count }
    }
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub use bare_metal::Aarch64Tlb;

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
mod bare_metal {
    use super::{RangeFlush, plan_range_flush, tlbi_va_operand};
    use crate::layout::Granule;
    use arch_api::{DEFAULT_FLUSH_CEILING_PAGES, TlbFlush, VirtAddr};
    use core::arch::asm;
    use core::marker::PhantomData;

    /// Broadcast `TLBI` invalidation at EL1 for granule `G` (bare metal only).
    ///
    /// Must run at EL1 (`TLBI` is undefined at EL0).
    #[derive(Debug, Clone, Copy)]
    pub struct Aarch64Tlb<G: Granule> {
        ceiling: u64,
        granule: PhantomData<G>,
    }

    impl<G: Granule> Default for Aarch64Tlb<G> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<G: Granule> Aarch64Tlb<G> {
        /// With Linux's 33-page ceiling ([`DEFAULT_FLUSH_CEILING_PAGES`]).
        pub const fn new() -> Self {
            Self::with_ceiling(DEFAULT_FLUSH_CEILING_PAGES)
        }

        /// With a range-flush ceiling of `pages`.
        pub const fn with_ceiling(pages: u64) -> Self {
            Self {
                ceiling: pages,
                granule: PhantomData,
            }
        }
    }

    /// `dsb ishst`: earlier page-table stores reach the table walkers of the
    /// Inner Shareable domain before the invalidation.
    #[inline(always)]
    fn dsb_ishst() {
        // SAFETY: a barrier: no memory or register effects besides ordering.
        // No `nomem`, so the compiler keeps earlier stores before it.
        unsafe { asm!("dsb ishst", options(nostack, preserves_flags)) }
    }

    /// `dsb ish; isb`: the invalidations completed on every CPU, and this
    /// CPU refetches with the new translations.
    #[inline(always)]
    fn dsb_ish_isb() {
        // SAFETY: barriers only; no `nomem`, so later accesses stay after it.
        unsafe { asm!("dsb ish", "isb", options(nostack, preserves_flags)) }
    }

    /// `tlbi vae1is, op`.
    #[inline(always)]
    fn tlbi_vae1is(op: u64) {
        // SAFETY: invalidating TLB entries is always memory-safe at EL1 (the
        // walker refetches from the tables); the operand is any 64-bit value.
        unsafe { asm!("tlbi vae1is, {op}", op = in(reg) op, options(nostack, preserves_flags)) }
    }

    impl<G: Granule> TlbFlush for Aarch64Tlb<G> {
        /// `dsb ishst; isb` (Arm ARM D8.2.6 "Ordering of translation table
        /// updates": the walk may otherwise miss the store).
        fn sync_new_entries(&self) {
            dsb_ishst();
            // SAFETY: a context synchronization barrier; no memory effects.
            unsafe { asm!("isb", options(nostack, preserves_flags)) }
        }

        fn flush_page(&self, va: VirtAddr) {
            dsb_ishst();
            tlbi_vae1is(tlbi_va_operand::<G>(va));
            dsb_ish_isb();
        }

        fn flush_all(&self) {
            dsb_ishst();
            // SAFETY: as `tlbi vae1is`: invalidation only.
            unsafe { asm!("tlbi vmalle1is", options(nostack, preserves_flags)) }
            dsb_ish_isb();
        }

        fn flush_ceiling_pages(&self) -> u64 {
            self.ceiling
        }

        /// One `dsb ishst` before and one `dsb ish; isb` after all the
        /// `tlbi vae1is`.
        fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
            match plan_range_flush::<G>(start, end, page_size, self.ceiling) {
                RangeFlush::Nothing => {}
                RangeFlush::All => self.flush_all(),
                RangeFlush::Pages { first, step, count } => {
                    dsb_ishst();
                    let mut va = first.as_u64();
                    for _ in 0..count {
                        tlbi_vae1is(tlbi_va_operand::<G>(VirtAddr::new(va)));
                        va = va.wrapping_add(step);
                    }
                    dsb_ish_isb();
                }
            }
        }

        /// The same barriers once around every range of the list; a full
        /// flush if together they cover more than the ceiling.
        fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
            let mut total = 0u64;
            for &(s, e) in ranges {
                if let RangeFlush::Pages { count, .. } =
                    plan_range_flush::<G>(s, e, page_size, u64::MAX)
                {
                    total = total.saturating_add(count);
                }
            }
            if total == 0 {
                return;
            }
            if total > self.ceiling {
                return self.flush_all();
            }
            dsb_ishst();
            for &(s, e) in ranges {
                if let RangeFlush::Pages { first, step, count } =
                    plan_range_flush::<G>(s, e, page_size, u64::MAX)
                {
                    let mut va = first.as_u64();
                    for _ in 0..count {
                        tlbi_vae1is(tlbi_va_operand::<G>(VirtAddr::new(va)));
                        va = va.wrapping_add(step);
                    }
                }
            }
            dsb_ish_isb();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aarch64Granule4K, Aarch64Granule16K, Aarch64Granule64K};

    const VA: VirtAddr = VirtAddr::new(0xffff_0000_1234_5678);

    #[test]
    fn tlbi_operand_literals() {
        // VA[55:12] of 0xffff_0000_1234_5678 = 0x0ff0_0001_2345; ASID 0.
        assert_eq!(
            tlbi_va_operand::<Aarch64Granule4K>(VA),
            0x0000_0ff0_0001_2345
        );
        // Granule-aligned first: 0x…1234_4000 and 0x…1234_0000.
        assert_eq!(
            tlbi_va_operand::<Aarch64Granule16K>(VA),
            0x0000_0ff0_0001_2344
        );
        assert_eq!(
            tlbi_va_operand::<Aarch64Granule64K>(VA),
            0x0000_0ff0_0001_2340
        );
        // TTBR0 half: no high bits.
        assert_eq!(
            tlbi_va_operand::<Aarch64Granule4K>(VirtAddr::new(0x0000_7fff_ffff_f000)),
            0x0000_0007_ffff_ffff
        );
        // Top of the TTBR1 half: 44 ones, nothing in the ASID field.
        assert_eq!(
            tlbi_va_operand::<Aarch64Granule4K>(VirtAddr::new(u64::MAX)),
            0x0000_0fff_ffff_ffff
        );
    }

    #[test]
    fn range_plan_counts_pages_and_applies_ceiling() {
        type G = Aarch64Granule4K;
        let base = 0xffff_8000_0000_0000u64;
        let va = |n: u64| VirtAddr::new(base + n * 4096);
        assert_eq!(
            plan_range_flush::<G>(va(3), va(3), 4096, 33),
            RangeFlush::Nothing
        );
        assert_eq!(
            plan_range_flush::<G>(va(4), va(3), 4096, 33),
            RangeFlush::Nothing
        );
        assert_eq!(
            plan_range_flush::<G>(va(0), va(33), 4096, 33),
            RangeFlush::Pages {
                first: va(0),
                step: 4096,
                count: 33
            }
        );
        assert_eq!(
            plan_range_flush::<G>(va(0), va(34), 4096, 33),
            RangeFlush::All
        );
        // Partial pages at both ends count: [0x800, 0x1800) touches 2 pages.
        assert_eq!(
            plan_range_flush::<G>(
                VirtAddr::new(base + 0x800),
                VirtAddr::new(base + 0x1800),
                4096,
                33
            ),
            RangeFlush::Pages {
                first: va(0),
                step: 4096,
                count: 2
            }
        );
        // The last page of the address space: no overflow.
        assert_eq!(
            plan_range_flush::<G>(
                VirtAddr::new(0xffff_ffff_ffff_f000),
                VirtAddr::new(u64::MAX),
                4096,
                33
            ),
            RangeFlush::Pages {
                first: VirtAddr::new(0xffff_ffff_ffff_f000),
                step: 4096,
                count: 1
            }
        );
    }

    #[test]
    fn range_plan_steps_by_granule_or_block() {
        // 4 KiB pages under a 64 KiB granule: one invalidation per 64 KiB.
        assert_eq!(
            plan_range_flush::<Aarch64Granule64K>(
                VirtAddr::new(0x1_0000),
                VirtAddr::new(0x3_0000),
                4096,
                33
            ),
            RangeFlush::Pages {
                first: VirtAddr::new(0x1_0000),
                step: 0x1_0000,
                count: 2
            }
        );
        // 2 MiB blocks under a 4 KiB granule: one per block.
        assert_eq!(
            plan_range_flush::<Aarch64Granule4K>(
                VirtAddr::new(0x4000_0000),
                VirtAddr::new(0x4080_0000),
                2 << 20,
                33
            ),
            RangeFlush::Pages {
                first: VirtAddr::new(0x4000_0000),
                step: 2 << 20,
                count: 4
            }
        );
    }
}

//! The ia64 page-table geometry Linux used with 16 KiB pages and four levels,
//! with the root shared by the eight regions.
//!
//! # Regions
//!
//! An ia64 virtual address is a 3-bit virtual region number (VRN, bits 63:61)
//! and a 61-bit region offset (Intel Itanium Architecture Software Developer's
//! Manual, Vol. 2, §4.1 "Virtual Addressing": the VRN selects one of eight
//! region registers, whose region id tags every translation of that region).
//! Linux gave the regions fixed jobs: 0–4 user (text in 2, data in 3, huge
//! pages in 4),
//! 5 the kernel's page-table-mapped region (vmalloc starts 8 GiB into it),
//! 6 uncached identity map, 7 cached identity map.
//!
//! # Geometry
//!
//! Every table is one 16 KiB page of 2^11 eight-byte entries, so each level
//! indexes 11 bits above the 14-bit page offset:
//!
//! | level | Linux | indexes VA bits | one entry spans |
//! |---|---|---|---|
//! | 0 | pgd | region 63:61 and 54:47 | 2^47 (128 TiB) |
//! | 1 | pud | 46:36 | 2^36 (64 GiB) |
//! | 2 | pmd | 35:25 | 2^25 (32 MiB) |
//! | 3 | pte | 24:14 | 2^14 (16 KiB) |
//!
//! The root is not a plain 11-bit slice of the address: as in Linux's ia64
//! `pgd_index`, the root's 2^11 entries are split into eight blocks of 256,
//! one per region, and the root index is `(region << 8) | (va >> 47) & 0xff`
//! (Linux: `region << (PAGE_SHIFT - 6)`, `PTRS_PER_PGD / 8` entries a region).
//! Each region therefore translates 8 + 11 + 11 + 11 + 14 = **55 bits** of
//! offset, and that is [`VA_BITS`](PageTableLayout::VA_BITS) here: it is per
//! region, the full address being the region number plus a 55-bit offset.
//! (Linux called this `RGN_MAP_SHIFT` and kept one page below it as the
//! per-region limit, `RGN_MAP_LIMIT`.)
//!
//! # Canonical addresses
//!
//! Offset bits 60:55 are not translated by the tree and must be zero
//! ([`Ia64Sim::UNIMPLEMENTED`]). On hardware the implemented offset width is
//! processor-specific (`IMPL_VA_MSB`; Vol. 2 §4.1 on unimplemented address
//! bits, which fault); this simulation takes the tree's 55 bits as the
//! implemented ones. The region bits are always valid.
//!
//! # `entry_end` at the top of a region
//!
//! [`entry_end`](PageTableLayout::entry_end) keeps the trait's default (align
//! down, add the span). Inside a region that is the next entry. Past the last
//! root entry of a region (index `region * 256 + 255`) it yields
//! `region_base + 2^55`, which has bit 55 set: a **non-canonical** address, not
//! the next region (that starts at `region_base + 2^61`) and not `None`.
//! Worse, its root index wraps to the region's *first* entry. A walker must
//! therefore compare with the end of its range before it indexes again; it
//! must never treat `entry_end` as "the next valid address". Only for region 7
//! far above the mapped part (offsets near 2^61) does the addition overflow and
//! return `None`.

use arch_api::{PageTableLayout, VirtAddr};

use crate::pte::Ia64Pte;

/// The simulated ia64 layout: 16 KiB pages, four levels of 2^11 entries, the
/// root shared by the eight regions (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ia64Sim;

impl Ia64Sim {
    /// The lowest bit of the region number (VRN, bits 63:61).
    pub const REGION_SHIFT: u32 = 61;
    /// Root entries per region: the root's 2^11 entries split eight ways.
    pub const ROOT_ENTRIES_PER_REGION: usize = 256;
    /// Region-offset bits 60:55, which the tree does not translate and which
    /// must be zero in a canonical address.
    pub const UNIMPLEMENTED: u64 = ((1 << Self::REGION_SHIFT) - 1) & !((1 << Self::VA_BITS) - 1);

    /// The region number (0–7) of `va`.
    pub const fn region(va: VirtAddr) -> u64 {
        va.as_u64() >> Self::REGION_SHIFT
    }

    /// The first address of region `region` (0–7).
    pub const fn region_base(region: u64) -> VirtAddr {
        assert!(region < 8, "ia64 has eight regions");
        VirtAddr::new(region << Self::REGION_SHIFT)
    }
}

impl PageTableLayout for Ia64Sim {
    const NAME: &'static str = "ia64-sim";
    const LEVELS: usize = 4;
    const PAGE_SHIFT: u32 = 14;
    const INDEX_BITS: &'static [u32] = &[11, 11, 11, 11];
    /// Per region: the tree translates a 55-bit region offset (see the module docs).
    const VA_BITS: u32 = 55;
    type Entry = Ia64Pte;

    /// Level 0 combines the region number with offset bits 54:47, as Linux's
    /// ia64 `pgd_index` did; levels 1–3 take 11 bits each at their shift.
    fn index(va: VirtAddr, level: usize) -> usize {
        if level == 0 {
            let per_region = (va.as_u64() >> Self::level_shift(0)) as usize
                & (Self::ROOT_ENTRIES_PER_REGION - 1);
            ((Self::region(va) as usize) * Self::ROOT_ENTRIES_PER_REGION) | per_region
        } else {
            ((va.as_u64() >> Self::level_shift(level)) as usize) & (Self::entries(level) - 1)
        }
    }

    fn is_canonical(va: VirtAddr) -> bool {
        va.as_u64() & Self::UNIMPLEMENTED == 0
    }

    fn leaf_allowed(level: usize) -> bool {
        level == Self::LEVELS - 1
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use arch_api::{LayoutInfo, conformance};

    fn va(raw: u64) -> VirtAddr {
        VirtAddr::new(raw)
    }

    fn indices(raw: u64) -> [usize; 4] {
        [0, 1, 2, 3].map(|l| Ia64Sim::index(va(raw), l))
    }

    #[test]
    fn geometry_conforms() {
        conformance::layout_geometry::<Ia64Sim>(&[
            0,
            0x4010,
            0x2000_0000_0000_0000,
            0x4000_c000_02ff_e000,
            0xa000_0002_0000_0000,
            0xa02d_1238_ade2_5abc,
            0xa07f_ffff_ffff_ffff,
            0xc000_0000_0000_0000,
            0xe07f_ffff_ffff_ffff,
        ]);
    }

    #[test]
    fn spans_and_info_by_hand() {
        assert_eq!(Ia64Sim::PAGE_SIZE, 16 * 1024);
        assert_eq!(Ia64Sim::entry_span(3), 1 << 14);
        assert_eq!(Ia64Sim::entry_span(2), 1 << 25);
        assert_eq!(Ia64Sim::entry_span(1), 1 << 36);
        assert_eq!(Ia64Sim::entry_span(0), 1 << 47);
        assert_eq!(Ia64Sim::entries(0), 2048);
        assert_eq!(Ia64Sim::table_bytes(0), 16 * 1024);
        assert_eq!(Ia64Sim::UNIMPLEMENTED, 0x1f80_0000_0000_0000);
        assert_eq!(
            Ia64Sim::info(),
            LayoutInfo {
                name: "ia64-sim",
                levels: 4,
                page_size: 16384,
                va_bits: 55,
                index_bits: &[11, 11, 11, 11],
                leaf_levels: 0b1000,
            }
        );
        assert!(!Ia64Sim::leaf_allowed(2), "no huge pages in this layout");
    }

    #[test]
    fn indices_by_hand_region_5() {
        // 0xa02d_1238_ade2_5abc, split by hand:
        //   bits 63:61 = 0b101                         -> region 5
        //   bits 54:47 = 0x5a  (0xa02d.. >> 47 = 0x1405a) -> root 5 * 256 + 0x5a = 0x55a
        //   bits 46:36 = 0x123, 35:25 = 0x456, 24:14 = 0x789, 13:0 = 0x1abc
        // i.e. (5 << 61) | (0x5a << 47) | (0x123 << 36) | (0x456 << 25) | (0x789 << 14) | 0x1abc.
        assert_eq!(indices(0xa02d_1238_ade2_5abc), [0x55a, 0x123, 0x456, 0x789]);
        // Linux's vmalloc start, region 5 + 8 GiB: 2^33 = 0x100 << 25.
        assert_eq!(indices(0xa000_0002_0000_0000), [0x500, 0, 0x100, 0]);
    }

    #[test]
    fn indices_by_hand_regions_0_2_7() {
        // Region 0, second page: only the pte index moves.
        assert_eq!(indices(0x4010), [0, 0, 0, 1]);
        // Region 2 (Linux user text): (2 << 61) | (1 << 47) | (0x400 << 36)
        //   | (1 << 25) | (0x3ff << 14) | 0x2000.
        assert_eq!(indices(0x4000_c000_02ff_e000), [0x201, 0x400, 0x001, 0x3ff]);
        // Region 7, last mapped byte: every index at its maximum.
        assert_eq!(indices(0xe07f_ffff_ffff_ffff), [0x7ff, 0x7ff, 0x7ff, 0x7ff]);
    }

    #[test]
    fn root_index_carries_the_region() {
        let offset = 0x002d_1238_ade2_5abc; // region 5's sample, minus the region
        for region in 0..8u64 {
            let raw = Ia64Sim::region_base(region).as_u64() | offset;
            let [root, l1, l2, l3] = indices(raw);
            assert_eq!(root, (region as usize) * 256 + 0x5a, "region {region}");
            assert_eq!([l1, l2, l3], [0x123, 0x456, 0x789], "region {region}");
            assert_eq!(Ia64Sim::region(va(raw)), region);
        }
        // The same 2^47 slot in two regions uses two different root entries:
        // the plain default (bits 57:47) would have put both at 0x05a.
        assert_ne!(
            Ia64Sim::index(va(0x002d_0000_0000_0000), 0),
            Ia64Sim::index(va(0xa02d_0000_0000_0000), 0)
        );
    }

    #[test]
    fn canonical_rejects_unimplemented_offset_bits() {
        let base = 0xa000_0000_0000_0000u64;
        for bit in 55..=60 {
            assert!(
                !Ia64Sim::is_canonical(va(base | 1 << bit)),
                "offset bit {bit} is not translated"
            );
        }
        assert!(Ia64Sim::is_canonical(va(base | 1 << 54)));
        assert!(Ia64Sim::is_canonical(va(base | ((1 << 55) - 1))));
        for region in 0..8 {
            assert!(Ia64Sim::is_canonical(Ia64Sim::region_base(region)));
        }
        assert!(!Ia64Sim::is_canonical(va(u64::MAX)));
    }

    #[test]
    fn entry_end_past_a_regions_last_root_entry_is_non_canonical() {
        // Last root entry of region 5: index 5 * 256 + 255.
        let last = va(0xa07f_8000_0000_0000);
        assert_eq!(Ia64Sim::index(last, 0), 0x5ff);
        let end = Ia64Sim::entry_end(last, 0).unwrap();
        assert_eq!(end, va(0xa080_0000_0000_0000), "region base + 2^55");
        assert!(!Ia64Sim::is_canonical(end));
        assert_eq!(
            Ia64Sim::index(end, 0),
            0x500,
            "indexing past the top wraps to the region's first root entry"
        );
        // From deeper levels the same boundary is reached.
        assert_eq!(
            Ia64Sim::entry_end(va(0xa07f_ffff_ffff_c000), 2),
            Some(va(0xa07f_ffff_fe00_0000 + (1 << 25)))
        );
        assert_eq!(
            Ia64Sim::entry_end(va(0xa07f_ffff_ffff_c000), 1),
            Some(va(0xa080_0000_0000_0000))
        );
        // Region 7 does not overflow at its mapped top either ...
        assert_eq!(
            Ia64Sim::entry_end(va(0xe07f_ffff_ffff_ffff), 0),
            Some(va(0xe080_0000_0000_0000))
        );
        // ... only from the unmapped (non-canonical) top of the address space.
        assert_eq!(Ia64Sim::entry_end(va(u64::MAX), 0), None);
    }

    /// Entries of `level` that `[start, end)` touches.
    fn spanned(start: u64, end: u64, level: usize) -> u64 {
        let span = Ia64Sim::entry_span(level);
        let first = va(start).align_down(span).as_u64();
        let last = va(end).align_up(span).unwrap().as_u64();
        (last - first) / span
    }

    /// Entries of `level` visited by a walker that skips each one with
    /// `entry_end` and stops at the range end first.
    fn walked(start: u64, end: u64, level: usize) -> u64 {
        let (mut at, mut n) = (va(start), 0);
        while at < va(end) {
            n += 1;
            at = Ia64Sim::entry_end(at, level).unwrap();
        }
        n
    }

    #[test]
    fn munmap_story_arithmetic() {
        // The 2005 munmap: a 17592182882304-byte mapping, "16 TiB". By hand that is
        // 2^44 - 3162112 = 2^44 - 193 pages of 16 KiB.
        const STORY_LEN: u64 = 17_592_182_882_304;
        assert_eq!((1u64 << 44) - STORY_LEN, 193 * 16384);
        // The unmap loop of 2005 worked in ZAP_BLOCK_SIZE = 8 pages = 128 KiB
        // and re-descended from the root for every block. An empty entry at a
        // level is therefore revisited once per block it spans:
        const ZAP_BLOCK: u64 = 8 * (1 << 14);
        assert_eq!(Ia64Sim::entry_span(2) / ZAP_BLOCK, 256, "pmd: 2^25 / 2^17");
        assert_eq!(
            Ia64Sim::entry_span(1) / ZAP_BLOCK,
            524_288,
            "pud: 2^36 / 2^17"
        );
        assert_eq!(
            Ia64Sim::entry_span(0) / ZAP_BLOCK,
            1_073_741_824,
            "pgd: 2^47 / 2^17"
        );
        // Those are the story's three figures, so they follow from this
        // geometry. They are per-entry ratios, though: the mapping is an
        // eighth of one root entry, so within it the one (empty) root entry is
        // re-descended once per block, 2^44 / 2^17 = 134,217,728 times for a
        // full 16 TiB (134,217,704 for the story's length), not 2^30 times.
        // By coincidence of the exponents (2^17 * 2^44 = 2^25 * 2^36 = 2^47 * 2^14)
        // the same three numbers are also the counts of pud, pmd and pte
        // entries that a 16 TiB range covers, asserted below.
        let base = Ia64Sim::region_base(1).as_u64();
        for (len, ptes, blocks) in [
            (1u64 << 44, 1_073_741_824u64, 134_217_728u64),
            (STORY_LEN, 1_073_741_631, 134_217_704),
        ] {
            let end = base + len;
            assert_eq!(spanned(base, end, 0), 1, "root entries");
            assert_eq!(spanned(base, end, 1), 256, "pud entries");
            assert_eq!(spanned(base, end, 2), 524_288, "pmd entries");
            assert_eq!(spanned(base, end, 3), ptes, "pte entries");
            assert_eq!(len.div_ceil(ZAP_BLOCK), blocks, "zap blocks");
            // A walker that skips with entry_end visits each upper entry once.
            assert_eq!(walked(base, end, 0), 1);
            assert_eq!(walked(base, end, 1), 256);
            if !cfg!(miri) {
                assert_eq!(walked(base, end, 2), 524_288);
            }
        }
    }
}

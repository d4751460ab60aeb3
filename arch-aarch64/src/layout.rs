//! Translation granules: the three shapes of a VMSAv8-64 stage 1 table tree
//! with a 48-bit virtual address (`TCR_EL1.T0SZ = T1SZ = 16`).
//!
//! Arm ARM (DDI 0487) D8, "The AArch64 Virtual Memory System Architecture":
//! the translation granule (`TCR_EL1.TG0` / `TG1`) fixes the page size and
//! how many virtual-address bits each lookup level resolves; a table is one
//! granule of 8-byte descriptors, so each level below the first resolves
//! `granule_shift - 3` bits. The first (initial) lookup level resolves
//! whatever is left of the 48 bits.
//!
//! | granule | architecture levels | bits per level (root first) | blocks |
//! |---|---|---|---|
//! | 4 KiB  | 0, 1, 2, 3 | 9 (47:39), 9 (38:30), 9 (29:21), 9 (20:12) | level 1 (1 GiB), level 2 (2 MiB) |
//! | 16 KiB | 0, 1, 2, 3 | 1 (47), 11 (46:36), 11 (35:25), 11 (24:14) | level 2 (32 MiB) |
//! | 64 KiB | 1, 2, 3    | 6 (47:42), 13 (41:29), 13 (28:16)          | level 2 (512 MiB) |
//!
//! # Level numbering
//!
//! `arch-api` numbers levels from the root: level 0 is the table `TTBR0_EL1` /
//! `TTBR1_EL1` points at. The Arm ARM numbers them by what they would be in a
//! full 4-level walk, so with the 64 KiB granule and a 48-bit VA the walk
//! *starts* at the architecture's level 1: this crate's level `l` is the
//! architecture's level `l + 1` ([`Granule::START_LEVEL`],
//! [`Granule::arch_level`]). For the 4 KiB and 16 KiB granules the two
//! numberings agree.
//!
//! # Blocks
//!
//! With a 48-bit output address and without `FEAT_LPA2` (`TCR_EL1.DS = 0`),
//! the larger blocks do not exist: a 512 GiB block at 4 KiB level 0, a 64 GiB
//! block at 16 KiB level 1 and a 4 TiB block at 64 KiB level 1 (this crate's
//! level 0) are reserved encodings that fault. [`leaf_allowed`] is false there.
//!
//! # Canonical addresses
//!
//! With `T0SZ = T1SZ = 16` and top-byte-ignore off (`TCR_EL1.TBI0/1 = 0`), an
//! address is translated by `TTBR0_EL1` when VA bits 63:48 are all 0 and by
//! `TTBR1_EL1` when they are all 1; anything else is a translation fault
//! ([`is_canonical_48`]). Unlike x86_64 this is *not* a sign extension of
//! bit 47: `0x0000_8000_0000_0000` (TTBR0) and `0xffff_0000_0000_0000`
//! (TTBR1) are both valid. Both halves use the same granule here; each half
//! has its own root table.
//!
//! [`leaf_allowed`]: PageTableLayout::leaf_allowed

use crate::descriptor::Descriptor;
use arch_api::{PageTableLayout, VirtAddr};
use core::fmt::Debug;
use core::hash::Hash;

mod sealed {
    pub trait Sealed {}
}

/// A VMSAv8-64 translation granule: one of [`Aarch64Granule4K`],
/// [`Aarch64Granule16K`], [`Aarch64Granule64K`] (sealed).
///
/// The granule is also the type parameter of its entry type, [`Descriptor<G>`],
/// so that decoding an entry knows which levels may hold blocks and how wide
/// the output-address field is.
pub trait Granule:
    PageTableLayout + sealed::Sealed + Copy + Eq + Debug + Default + Hash + Send + Sync + 'static
{
    /// The architecture's number for this crate's level 0 (the initial lookup
    /// level for a 48-bit VA): 0 for 4 KiB and 16 KiB, 1 for 64 KiB.
    const START_LEVEL: usize;

    /// The Arm ARM's level number of this crate's `level`.
    fn arch_level(level: usize) -> usize {
        Self::START_LEVEL + level
    }
}

/// Whether `va` is canonical for a 48-bit VA: bits 63:48 all 0 (the
/// `TTBR0_EL1` half) or all 1 (the `TTBR1_EL1` half). Bit 47 plays no part.
pub const fn is_canonical_48(va: VirtAddr) -> bool {
    let top = va.as_u64() >> 48;
    top == 0 || top == 0xffff
}

/// The 4 KiB granule (`TG0 = 0b00`): 4 levels of 9 bits, blocks of 1 GiB at
/// level 1 and 2 MiB at level 2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aarch64Granule4K;

/// The 16 KiB granule (`TG0 = 0b10`): level 0 resolves VA bit 47 alone (two
/// entries), then 3 levels of 11 bits; blocks of 32 MiB at level 2 only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aarch64Granule16K;

/// The 64 KiB granule (`TG0 = 0b01`): 3 levels, architecture levels 1..=3.
/// This crate's level 0 (architecture level 1) resolves VA bits 47:42 (64
/// entries), then 2 levels of 13 bits; blocks of 512 MiB at this crate's
/// level 1 (architecture level 2) only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aarch64Granule64K;

impl sealed::Sealed for Aarch64Granule4K {}
impl sealed::Sealed for Aarch64Granule16K {}
impl sealed::Sealed for Aarch64Granule64K {}

impl Granule for Aarch64Granule4K {
    const START_LEVEL: usize = 0;
}

impl Granule for Aarch64Granule16K {
    const START_LEVEL: usize = 0;
}

impl Granule for Aarch64Granule64K {
    const START_LEVEL: usize = 1;
}

impl PageTableLayout for Aarch64Granule4K {
    const NAME: &'static str = "aarch64-4k";
    const LEVELS: usize = 4;
    const PAGE_SHIFT: u32 = 12;
    const INDEX_BITS: &'static [u32] = &[9, 9, 9, 9];
    const VA_BITS: u32 = 48;
    type Entry = Descriptor<Self>;

    fn is_canonical(va: VirtAddr) -> bool {
        is_canonical_48(va)
    }

    /// Blocks at levels 1 (1 GiB) and 2 (2 MiB), pages at level 3.
    fn leaf_allowed(level: usize) -> bool {
        matches!(level, 1..=3)
    }
}

impl PageTableLayout for Aarch64Granule16K {
    const NAME: &'static str = "aarch64-16k";
    const LEVELS: usize = 4;
    const PAGE_SHIFT: u32 = 14;
    const INDEX_BITS: &'static [u32] = &[1, 11, 11, 11];
    const VA_BITS: u32 = 48;
    type Entry = Descriptor<Self>;

    fn is_canonical(va: VirtAddr) -> bool {
        is_canonical_48(va)
    }

    /// Blocks at level 2 (32 MiB), pages at level 3. A level 1 block (64 GiB)
    /// needs 52-bit addressing (`FEAT_LPA2`).
    fn leaf_allowed(level: usize) -> bool {
        matches!(level, 2 | 3)
    }
}

impl PageTableLayout for Aarch64Granule64K {
    const NAME: &'static str = "aarch64-64k";
    const LEVELS: usize = 3;
    const PAGE_SHIFT: u32 = 16;
    const INDEX_BITS: &'static [u32] = &[6, 13, 13];
    const VA_BITS: u32 = 48;
    type Entry = Descriptor<Self>;

    fn is_canonical(va: VirtAddr) -> bool {
        is_canonical_48(va)
    }

    /// Blocks at this crate's level 1 (architecture level 2, 512 MiB), pages
    /// at level 2 (architecture level 3). An architecture level 1 block
    /// (4 TiB, this crate's level 0) needs a 52-bit output address (`FEAT_LPA`).
    fn leaf_allowed(level: usize) -> bool {
        matches!(level, 1 | 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arch_api::conformance;
    use std::vec::Vec;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    fn indices<L: PageTableLayout>(va: u64) -> Vec<usize> {
        (0..L::LEVELS)
            .map(|l| L::index(VirtAddr::new(va), l))
            .collect()
    }

    /// Canonical samples in both halves, away from the very top (the
    /// conformance check needs `entry_end` at level 1 not to overflow).
    const SAMPLES: &[u64] = &[
        0x0000_0000_0000_0000,
        0x0000_0000_0000_1000,
        0x0000_0080_8060_4000,
        0x0000_7fff_ffff_f000,
        0x0000_8030_0a01_c000,
        0x0000_ffff_0000_0000,
        0xffff_0000_0000_0000,
        0xffff_0000_1234_5000,
        0xffff_8000_0000_0000,
        0xffff_fc00_4003_0000,
    ];

    #[test]
    fn geometry_conforms() {
        conformance::layout_geometry::<Aarch64Granule4K>(SAMPLES);
        conformance::layout_geometry::<Aarch64Granule16K>(SAMPLES);
        conformance::layout_geometry::<Aarch64Granule64K>(SAMPLES);
    }

    // Each literal below is worked by hand from the bit ranges in the module
    // table, e.g. 4K 0xffff_0000_1234_5000: bits 47:0 = 0x0000_1234_5000;
    // 47:39 and 38:30 are 0 (0x1234_5000 < 2^30); 29:21 = 0x1234_5000 >> 21 =
    // 0x91 = 145; 20:12 = 0x12345 & 0x1ff = 0x145 = 325.

    #[test]
    fn index_literals_4k() {
        type L = Aarch64Granule4K;
        assert_eq!(indices::<L>(0xffff_0000_1234_5000), [0, 0, 145, 325]);
        // 1 << 39 | 2 << 30 | 3 << 21 | 4 << 12
        assert_eq!(indices::<L>(0x0000_0080_8060_4000), [1, 2, 3, 4]);
        assert_eq!(indices::<L>(0x0000_7fff_ffff_f000), [255, 511, 511, 511]);
        assert_eq!(indices::<L>(0xffff_8000_0000_0000), [256, 0, 0, 0]);
        assert_eq!(indices::<L>(0xffff_ffff_ffff_ffff), [511, 511, 511, 511]);
        // The page offset is not an index.
        assert_eq!(indices::<L>(0x0000_0000_0000_0fff), [0, 0, 0, 0]);
    }

    #[test]
    fn index_literals_16k() {
        type L = Aarch64Granule16K;
        // 0x1234_5000: 35:25 = 0x1234_5000 >> 25 = 9; 24:14 = 0x48d1 & 0x7ff = 0xd1 = 209.
        assert_eq!(indices::<L>(0xffff_0000_1234_5000), [0, 0, 9, 209]);
        // 1 << 47 | 3 << 36 | 5 << 25 | 7 << 14, in either half.
        assert_eq!(indices::<L>(0x0000_8030_0a01_c000), [1, 3, 5, 7]);
        assert_eq!(indices::<L>(0xffff_8030_0a01_c000), [1, 3, 5, 7]);
        assert_eq!(indices::<L>(0x0000_7fff_ffff_c000), [0, 2047, 2047, 2047]);
        assert_eq!(indices::<L>(0xffff_8000_0000_0000), [1, 0, 0, 0]);
        assert_eq!(indices::<L>(0x0000_0000_0000_3fff), [0, 0, 0, 0]);
    }

    #[test]
    fn index_literals_64k() {
        type L = Aarch64Granule64K;
        // 0x1234_5000: 28:16 = 0x1234 = 4660; 41:29 = 0.
        assert_eq!(indices::<L>(0xffff_0000_1234_5000), [0, 0, 4660]);
        // 1 << 42 | 2 << 29 | 3 << 16
        assert_eq!(indices::<L>(0x0000_0400_4003_0000), [1, 2, 3]);
        assert_eq!(indices::<L>(0xffff_ffff_ffff_0000), [63, 8191, 8191]);
        assert_eq!(indices::<L>(0xffff_8000_0000_0000), [32, 0, 0]);
        assert_eq!(indices::<L>(0x0000_0000_0000_ffff), [0, 0, 0]);
    }

    #[test]
    fn entry_span_literals() {
        let spans = |f: fn(usize) -> u64, n: usize| (0..n).map(f).collect::<Vec<_>>();
        assert_eq!(
            spans(Aarch64Granule4K::entry_span, 4),
            [512 * GIB, GIB, 2 * MIB, 4 * KIB]
        );
        assert_eq!(
            spans(Aarch64Granule16K::entry_span, 4),
            [128 * TIB, 64 * GIB, 32 * MIB, 16 * KIB]
        );
        assert_eq!(
            spans(Aarch64Granule64K::entry_span, 3),
            [4 * TIB, 512 * MIB, 64 * KIB]
        );
        // Root tables: 512 entries (4 KiB), 2 entries (16 bytes), 64 entries (512 bytes).
        assert_eq!(Aarch64Granule4K::table_bytes(0), 4096);
        assert_eq!(Aarch64Granule16K::table_bytes(0), 16);
        assert_eq!(Aarch64Granule64K::table_bytes(0), 512);
        assert_eq!(Aarch64Granule64K::table_bytes(1), 64 * 1024);
    }

    #[test]
    fn canonical_literals() {
        fn check<L: PageTableLayout>() {
            let name = L::NAME;
            for ok in [
                0x0000_0000_0000_0000,
                0x0000_ffff_ffff_f000,
                0x0000_8000_0000_0000, // bit 47 set in the TTBR0 half: fine on arm64
                0xffff_8000_0000_0000,
                0xffff_0000_0000_0000, // bit 47 clear in the TTBR1 half: fine on arm64
                0xffff_ffff_ffff_ffff,
            ] {
                assert!(L::is_canonical(VirtAddr::new(ok)), "{name}: {ok:#x}");
            }
            for bad in [
                0x0001_0000_0000_0000,
                0x8000_0000_0000_0000,
                0xfffe_ffff_ffff_f000,
                0x7fff_8000_0000_0000,
                0x00ff_0000_0000_0000, // a tagged pointer: TBI is off
            ] {
                assert!(!L::is_canonical(VirtAddr::new(bad)), "{name}: {bad:#x}");
            }
        }
        check::<Aarch64Granule4K>();
        check::<Aarch64Granule16K>();
        check::<Aarch64Granule64K>();
    }

    #[test]
    fn leaf_levels_literals() {
        let leaf = |f: fn(usize) -> bool, n: usize| (0..n).map(f).collect::<Vec<_>>();
        assert_eq!(
            leaf(Aarch64Granule4K::leaf_allowed, 5),
            [false, true, true, true, false]
        );
        assert_eq!(
            leaf(Aarch64Granule16K::leaf_allowed, 5),
            [false, false, true, true, false]
        );
        assert_eq!(
            leaf(Aarch64Granule64K::leaf_allowed, 4),
            [false, true, true, false]
        );
        assert_eq!(Aarch64Granule4K::info().leaf_levels, 0b1110);
        assert_eq!(Aarch64Granule16K::info().leaf_levels, 0b1100);
        assert_eq!(Aarch64Granule64K::info().leaf_levels, 0b110);
    }

    #[test]
    fn architecture_level_1_block_rejected_16k_64k() {
        // 16K: the architecture's level 1 is this crate's level 1 (64 GiB block).
        assert_eq!(Aarch64Granule16K::arch_level(1), 1);
        assert!(!Aarch64Granule16K::leaf_allowed(1));
        // 64K: the architecture's level 1 is this crate's level 0 (4 TiB block);
        // this crate's level 1 is the architecture's level 2 (512 MiB blocks).
        assert_eq!(Aarch64Granule64K::arch_level(0), 1);
        assert!(!Aarch64Granule64K::leaf_allowed(0));
        assert_eq!(Aarch64Granule64K::arch_level(1), 2);
        assert!(Aarch64Granule64K::leaf_allowed(1));
    }

    #[test]
    fn names_and_level_mapping() {
        assert_eq!(Aarch64Granule4K::NAME, "aarch64-4k");
        assert_eq!(Aarch64Granule16K::NAME, "aarch64-16k");
        assert_eq!(Aarch64Granule64K::NAME, "aarch64-64k");
        assert_eq!(
            (0..4).map(Aarch64Granule4K::arch_level).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            (0..3)
                .map(Aarch64Granule64K::arch_level)
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(Aarch64Granule4K::PAGE_SIZE, 4096);
        assert_eq!(Aarch64Granule16K::PAGE_SIZE, 16384);
        assert_eq!(Aarch64Granule64K::PAGE_SIZE, 65536);
    }
}

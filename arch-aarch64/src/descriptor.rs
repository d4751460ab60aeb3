//! VMSAv8-64 stage 1 translation table descriptors (Arm ARM, DDI 0487, D8.3
//! "Translation table descriptor formats"), for a 48-bit output address.
//!
//! Bits 1:0 say what a descriptor is, and the answer depends on the level it
//! is found at and on the granule:
//!
//! | bits 1:0 | above the last level | at the last level |
//! |---|---|---|
//! | `x0` | invalid | invalid |
//! | `01` | block, where the granule allows one at that level; else invalid (translation fault) | **reserved**: treated as invalid |
//! | `11` | table | page |
//!
//! Hence one entry type per granule, [`Descriptor<G>`]: the entry alone knows
//! which levels may hold blocks and where its address field starts.
//!
//! The output (or next-table) address is held in bits 47:`granule_shift`
//! (47:12, 47:14 or 47:16). A block's address is further aligned to its size;
//! the bits between are RES0 and kept as zero here. With a 48-bit OA the 64 KiB
//! granule's bits 15:12 (OA 51:48 under `FEAT_LPA`) are RES0 too.
//!
//! # Memory attributes and the MAIR convention
//!
//! `AttrIndx` (bits 4:2) selects one of eight attributes in `MAIR_EL1`. This
//! crate assumes the kernel programs [`MAIR_EL1_VALUE`]:
//! index [`ATTR_INDEX_DEVICE_NGNRE`] (0) = `0x04`, Device-nGnRE, for
//! [`MapFlags::DEVICE`]; index [`ATTR_INDEX_NORMAL`] (1) = `0xff`, Normal
//! memory, Inner and Outer Write-Back Non-transient, Read- and
//! Write-Allocate, for everything else. (Linux uses a different layout, with
//! Normal at index 0; entries built here are only meaningful under this
//! crate's MAIR value.)
//!
//! # From [`MapFlags`] to descriptor bits
//!
//! [`new_leaf`](PageTableEntry::new_leaf) always sets AF (no access-flag
//! faults) and inner-shareable, and then:
//!
//! | `MapFlags` | descriptor |
//! |---|---|
//! | `WRITE` | `AP[2]` ([`DescriptorFlags::AP_RO`]) clear; set otherwise |
//! | `USER` | `AP[1]` ([`DescriptorFlags::AP_EL0`]) set |
//! | no `EXEC` | `PXN` and `UXN` |
//! | `EXEC`, not `USER` | `UXN` only: executable at EL1, never at EL0 |
//! | `EXEC` and `USER` | `PXN` only: executable at EL0, never by the kernel (as Linux; the architecture already forces PXN on EL0-writable memory) |
//! | `GLOBAL` | `nG` clear; set otherwise (tagged with the current ASID) |
//! | `DEVICE` | `AttrIndx` = 0 (Device-nGnRE); `AttrIndx` = 1 otherwise |
//!
//! [`map_flags`](PageTableEntry::map_flags) is the exact inverse for every
//! combination: `USER` = `AP[1]`; `EXEC` = not `UXN` for a user mapping, not
//! `PXN` otherwise; `DEVICE` = `AttrIndx == 0`.

use crate::layout::Granule;
use arch_api::{EntryKind, MapFlags, PageTableEntry, PhysAddr};
use core::fmt;
use core::hash::{Hash, Hasher};
use core::marker::PhantomData;

/// `MAIR_EL1.Attr<n>` index of Device-nGnRE memory (`0x04`).
pub const ATTR_INDEX_DEVICE_NGNRE: u8 = 0;
/// `MAIR_EL1.Attr<n>` index of Normal Write-Back cacheable memory (`0xff`).
pub const ATTR_INDEX_NORMAL: u8 = 1;
/// The `MAIR_EL1` value this crate's descriptors assume: `Attr0 = 0x04`
/// (Device-nGnRE), `Attr1 = 0xff` (Normal, Inner/Outer Write-Back
/// Non-transient, Read/Write-Allocate), the other six unused (Device-nGnRnE).
pub const MAIR_EL1_VALUE: u64 = 0xff << 8 | 0x04;

/// Bits 47:0: the widest output address a descriptor holds here (48-bit OA).
const OA_BITS_MASK: u64 = (1 << 48) - 1;

bitflags::bitflags! {
    /// The attribute bits of a VMSAv8-64 stage 1 descriptor (D8.3): every bit
    /// outside the output-address field. Bits with no name here are kept as
    /// they are (`from_bits_retain`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct DescriptorFlags: u64 {
        /// Bit 0: the descriptor is valid.
        const VALID = 1 << 0;
        /// Bit 1: table (above the last level) or page (at the last level);
        /// clear for a block.
        const TABLE_OR_PAGE = 1 << 1;
        /// Bits 4:2, `AttrIndx`: the `MAIR_EL1` attribute index (a field; use
        /// [`attr_index`](Self::attr_index) / [`with_attr_index`](Self::with_attr_index)).
        const ATTR_INDX = 0b111 << 2;
        /// Bit 5: non-secure output address (Secure state only).
        const NS = 1 << 5;
        /// Bit 6, `AP[1]`: accessible from EL0.
        const AP_EL0 = 1 << 6;
        /// Bit 7, `AP[2]`: read-only.
        const AP_RO = 1 << 7;
        /// Bits 9:8, `SH = 0b11`: inner shareable.
        const SH_INNER = 0b11 << 8;
        /// Bit 10: access flag. Clear faults on first access unless hardware
        /// AF management is on.
        const AF = 1 << 10;
        /// Bit 11: not global: the TLB entry is tagged with the ASID.
        const NG = 1 << 11;
        /// Bit 52: one of a contiguous, aligned run of entries (a TLB hint).
        const CONTIGUOUS = 1 << 52;
        /// Bit 53: privileged (EL1) execute-never.
        const PXN = 1 << 53;
        /// Bit 54: unprivileged (EL0) execute-never.
        const UXN = 1 << 54;
        /// Bit 59, table descriptors only: `PXNTable`, PXN for everything below.
        const PXN_TABLE = 1 << 59;
        /// Bit 60, table descriptors only: `UXNTable`, UXN for everything below.
        const UXN_TABLE = 1 << 60;
        /// Bit 61, table descriptors only: `APTable[0]`, no EL0 access below.
        const AP_TABLE_NO_EL0 = 1 << 61;
        /// Bit 62, table descriptors only: `APTable[1]`, read-only below.
        const AP_TABLE_RO = 1 << 62;
        /// Bit 63, table descriptors only: `NSTable`.
        const NS_TABLE = 1 << 63;
    }
}

impl DescriptorFlags {
    /// The `AttrIndx` field (bits 4:2).
    pub const fn attr_index(self) -> u8 {
        ((self.bits() & Self::ATTR_INDX.bits()) >> 2) as u8
    }

    /// `self` with `AttrIndx` replaced by `index` (0..=7; higher bits ignored).
    pub const fn with_attr_index(self, index: u8) -> Self {
        Self::from_bits_retain(
            (self.bits() & !Self::ATTR_INDX.bits()) | (((index & 0b111) as u64) << 2),
        )
    }
}

/// A stage 1 descriptor of granule `G` (one of the
/// [`Granule`] layouts), as stored in a translation table.
///
/// The granule fixes the output-address field (bits 47:`G::PAGE_SHIFT`) and
/// the levels at which bits `0b01` mean a block; see the [module
/// docs](self) for the encoding.
#[repr(transparent)]
pub struct Descriptor<G> {
    raw: u64,
    granule: PhantomData<fn() -> G>,
}

/// A 4 KiB-granule descriptor.
pub type Descriptor4K = Descriptor<crate::Aarch64Granule4K>;
/// A 16 KiB-granule descriptor.
pub type Descriptor16K = Descriptor<crate::Aarch64Granule16K>;
/// A 64 KiB-granule descriptor.
pub type Descriptor64K = Descriptor<crate::Aarch64Granule64K>;

impl<G> Clone for Descriptor<G> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<G> Copy for Descriptor<G> {}

impl<G> PartialEq for Descriptor<G> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<G> Eq for Descriptor<G> {}

impl<G> Hash for Descriptor<G> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}

impl<G: Granule> fmt::Debug for Descriptor<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("granule", &G::NAME)
            .field("raw", &format_args!("{:#018x}", self.raw))
            .field("addr", &self.addr())
            .field("flags", &self.flags())
            .finish()
    }
}

impl<G: Granule> Descriptor<G> {
    /// The output-address field: bits 47:`G::PAGE_SHIFT`.
    pub const ADDR_MASK: u64 = OA_BITS_MASK & !((1u64 << G::PAGE_SHIFT) - 1);

    /// Wraps a raw descriptor.
    pub const fn new(raw: u64) -> Self {
        Self {
            raw,
            granule: PhantomData,
        }
    }

    /// The raw descriptor.
    pub const fn bits(self) -> u64 {
        self.raw
    }

    /// Bits 1:0, the descriptor type (see the [module docs](self)).
    pub const fn descriptor_type(self) -> u64 {
        self.raw & 0b11
    }
}

impl<G: Granule> PageTableEntry for Descriptor<G> {
    type Flags = DescriptorFlags;

    const EMPTY: Self = Self::new(0);

    fn from_raw(raw: u64) -> Self {
        Self::new(raw)
    }

    fn raw(self) -> u64 {
        self.raw
    }

    /// The valid bit (bit 0). A valid descriptor can still be a reserved
    /// encoding at some levels (`0b01` at the last level, or a block where the
    /// granule has none); [`kind`](Self::kind) is the exact check.
    fn is_present(self) -> bool {
        self.raw & DescriptorFlags::VALID.bits() != 0
    }

    /// Bits 1:0 decoded at `level` (this crate's numbering, see
    /// [`crate::layout`]): `11` is a table above the last level and a page at
    /// it; `01` is a block above the last level where `G` allows one and is
    /// otherwise a reserved encoding, reported as [`EntryKind::None`] because
    /// the hardware faults on it just as on an invalid descriptor.
    fn kind(self, level: usize) -> EntryKind {
        debug_assert!(level < G::LEVELS, "level {level} out of range");
        let last = level + 1 == G::LEVELS;
        match (self.descriptor_type(), last) {
            (0b11, false) => EntryKind::Table,
            (0b11, true) => EntryKind::Leaf,
            (0b01, false) if G::leaf_allowed(level) => EntryKind::Leaf,
            _ => EntryKind::None,
        }
    }

    fn addr(self) -> PhysAddr {
        PhysAddr::new(self.raw & Self::ADDR_MASK)
    }

    fn set_addr(&mut self, addr: PhysAddr) {
        debug_assert_eq!(
            addr.as_u64() & !Self::ADDR_MASK,
            0,
            "{addr:?} is not a {}-aligned 48-bit address",
            G::PAGE_SIZE
        );
        self.raw = (self.raw & !Self::ADDR_MASK) | (addr.as_u64() & Self::ADDR_MASK);
    }

    /// Every bit outside the address field, unknown ones included.
    fn flags(self) -> DescriptorFlags {
        DescriptorFlags::from_bits_retain(self.raw & !Self::ADDR_MASK)
    }

    fn set_flags(&mut self, flags: DescriptorFlags) {
        self.raw = (self.raw & Self::ADDR_MASK) | (flags.bits() & !Self::ADDR_MASK);
    }

    /// `0b11` and the address; no hierarchical (`*Table`) attributes.
    fn new_table(table: PhysAddr) -> Self {
        let mut d = Self::new((DescriptorFlags::VALID | DescriptorFlags::TABLE_OR_PAGE).bits());
        d.set_addr(table);
        d
    }

    /// A page (`0b11`) at the last level, a block (`0b01`) above; attributes
    /// as in the [module docs](self). `level` must allow a leaf and `frame`
    /// must be aligned to the level's span (checked in debug builds).
    fn new_leaf(frame: PhysAddr, flags: MapFlags, level: usize) -> Self {
        debug_assert!(
            G::leaf_allowed(level),
            "{}: no leaf at level {level}",
            G::NAME
        );
        debug_assert!(
            frame.is_aligned(G::entry_span(level)),
            "{frame:?} not aligned to the level-{level} span"
        );
        let mut f = DescriptorFlags::VALID | DescriptorFlags::AF | DescriptorFlags::SH_INNER;
        if level + 1 == G::LEVELS {
            f |= DescriptorFlags::TABLE_OR_PAGE;
        }
        if !flags.contains(MapFlags::WRITE) {
            f |= DescriptorFlags::AP_RO;
        }
        let user = flags.contains(MapFlags::USER);
        if user {
            f |= DescriptorFlags::AP_EL0;
        }
        f |= match (flags.contains(MapFlags::EXEC), user) {
            (false, _) => DescriptorFlags::PXN | DescriptorFlags::UXN,
            (true, false) => DescriptorFlags::UXN,
            (true, true) => DescriptorFlags::PXN,
        };
        if !flags.contains(MapFlags::GLOBAL) {
            f |= DescriptorFlags::NG;
        }
        f = f.with_attr_index(if flags.contains(MapFlags::DEVICE) {
            ATTR_INDEX_DEVICE_NGNRE
        } else {
            ATTR_INDEX_NORMAL
        });
        let mut d = Self::new(f.bits());
        d.set_addr(frame);
        d
    }

    fn map_flags(self) -> MapFlags {
        let f = self.flags();
        let mut m = MapFlags::empty();
        if !f.contains(DescriptorFlags::AP_RO) {
            m |= MapFlags::WRITE;
        }
        let user = f.contains(DescriptorFlags::AP_EL0);
        if user {
            m |= MapFlags::USER;
        }
        let xn = if user {
            DescriptorFlags::UXN
        } else {
            DescriptorFlags::PXN
        };
        if !f.contains(xn) {
            m |= MapFlags::EXEC;
        }
        if !f.contains(DescriptorFlags::NG) {
            m |= MapFlags::GLOBAL;
        }
        if f.attr_index() == ATTR_INDEX_DEVICE_NGNRE {
            m |= MapFlags::DEVICE;
        }
        m
    }

    /// The access flag set, and not a writable-clean page under hardware
    /// dirty-state management (`DBM`, bit 51, with `AP[2]` read-only, which
    /// the MMU would clear on the first write). Hardware updates only ever
    /// set `AF` and clear `AP[2]` of a `DBM` descriptor (Arm ARM, DDI 0487,
    /// "Hardware management of the Access flag and dirty state"), so such a
    /// descriptor is final. [`new_leaf`](Self::new_leaf) sets `AF` and never
    /// `DBM`.
    #[inline]
    fn mmu_settled(self) -> bool {
        const DBM: u64 = 1 << 51;
        let (af, ro) = (DescriptorFlags::AF.bits(), DescriptorFlags::AP_RO.bits());
        self.raw & af != 0 && self.raw & (DBM | ro) != DBM | ro
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aarch64Granule4K, Aarch64Granule16K, Aarch64Granule64K};
    use arch_api::conformance;

    fn kinds<G: Granule>(raw: u64) -> std::vec::Vec<EntryKind> {
        (0..G::LEVELS)
            .map(|l| Descriptor::<G>::from_raw(raw).kind(l))
            .collect()
    }

    use EntryKind::{Leaf, None as Inv, Table};

    #[test]
    fn round_trips_conform() {
        let pa = 0x0000_1234_5678_9000;
        conformance::entry_round_trips::<Aarch64Granule4K>(MapFlags::all(), pa);
        conformance::entry_round_trips::<Aarch64Granule16K>(MapFlags::all(), pa);
        conformance::entry_round_trips::<Aarch64Granule64K>(MapFlags::all(), pa);
    }

    #[test]
    fn decode_raw_literals_4k() {
        // 0b11 with address 0x4020_0000: a table above level 3, a page at it.
        assert_eq!(
            kinds::<Aarch64Granule4K>(0x0000_0000_4020_0003),
            [Table, Table, Table, Leaf]
        );
        // A kernel RW block: 0b01, AttrIndx 1, SH 0b11, AF, PXN | UXN.
        // Blocks exist at levels 1 and 2 only; at level 0 (no FEAT_LPA2) and
        // at level 3 (reserved) it is no mapping at all.
        let block = Descriptor4K::from_raw(0x0060_0000_4020_0705);
        assert_eq!(
            kinds::<Aarch64Granule4K>(block.raw()),
            [Inv, Leaf, Leaf, Inv]
        );
        assert_eq!(block.addr(), PhysAddr::new(0x4020_0000));
        assert_eq!(block.map_flags(), MapFlags::WRITE | MapFlags::GLOBAL);
        assert_eq!(block.flags().attr_index(), 1);
        // Invalid: bit 0 clear, whatever else is set.
        for raw in [0, 0b10, 0xffff_ffff_ffff_fffe, 0x0000_0000_4020_0702] {
            assert_eq!(kinds::<Aarch64Granule4K>(raw), [Inv; 4], "{raw:#x}");
            assert!(!Descriptor4K::from_raw(raw).is_present());
        }
    }

    #[test]
    fn decode_raw_literals_16k_64k() {
        // 16K: blocks only at level 2.
        assert_eq!(
            kinds::<Aarch64Granule16K>(0x0060_0000_4200_0705),
            [Inv, Inv, Leaf, Inv]
        );
        assert_eq!(
            kinds::<Aarch64Granule16K>(0x0000_0000_4020_4003),
            [Table, Table, Table, Leaf]
        );
        // 64K: blocks only at this crate's level 1 (architecture level 2).
        assert_eq!(
            kinds::<Aarch64Granule64K>(0x0060_0000_6000_0705),
            [Inv, Leaf, Inv]
        );
        assert_eq!(
            kinds::<Aarch64Granule64K>(0x0000_0000_4021_0003),
            [Table, Table, Leaf]
        );
    }

    #[test]
    fn reserved_0b01_at_last_level_is_not_a_page() {
        let raw = 0x0060_0000_4000_0701;
        assert_eq!(Descriptor4K::from_raw(raw).kind(3), Inv);
        assert_eq!(Descriptor16K::from_raw(raw).kind(3), Inv);
        assert_eq!(Descriptor64K::from_raw(raw).kind(2), Inv);
        // ...though the valid bit is set.
        assert!(Descriptor4K::from_raw(raw).is_present());
        // The same word with bit 1 set is a page.
        assert_eq!(Descriptor4K::from_raw(raw | 0b10).kind(3), Leaf);
    }

    #[test]
    fn address_field_per_granule() {
        let all = u64::MAX;
        assert_eq!(
            Descriptor4K::from_raw(all).addr().as_u64(),
            0x0000_ffff_ffff_f000
        );
        assert_eq!(
            Descriptor16K::from_raw(all).addr().as_u64(),
            0x0000_ffff_ffff_c000
        );
        assert_eq!(
            Descriptor64K::from_raw(all).addr().as_u64(),
            0x0000_ffff_ffff_0000
        );
        // 16K: bits 13:12 are attributes (RES0), not address.
        assert_eq!(
            Descriptor16K::from_raw(0x0000_0000_4000_3003)
                .addr()
                .as_u64(),
            0x4000_0000
        );
        assert_eq!(
            Descriptor16K::from_raw(0x0000_0000_4000_3003)
                .flags()
                .bits(),
            0x3003
        );
        // The address and flags partition the word.
        let d = Descriptor64K::from_raw(0xdead_beef_cafe_f00d);
        assert_eq!(d.addr().as_u64() | d.flags().bits(), d.raw());
        assert_eq!(d.addr().as_u64() & d.flags().bits(), 0);
    }

    #[test]
    fn settled_means_af_and_no_pending_dirty_update() {
        let pa = PhysAddr::new(0x8000_1000);
        for f in [
            MapFlags::WRITE | MapFlags::GLOBAL,
            MapFlags::USER,
            MapFlags::empty(),
        ] {
            assert!(Descriptor4K::new_leaf(pa, f, 3).mmu_settled());
        }
        let kernel_rw = Descriptor4K::new_leaf(pa, MapFlags::WRITE | MapFlags::GLOBAL, 3).raw();
        let af = DescriptorFlags::AF.bits();
        let ro = DescriptorFlags::AP_RO.bits();
        const DBM: u64 = 1 << 51;
        // AF clear: hardware AF management would set it.
        assert!(!Descriptor4K::from_raw(kernel_rw & !af).mmu_settled());
        // DBM with AP[2] set: writable-clean, the first write clears AP[2].
        assert!(!Descriptor4K::from_raw(kernel_rw | DBM | ro).mmu_settled());
        // DBM with AP[2] clear: already dirty.
        assert!(Descriptor4K::from_raw(kernel_rw | DBM).mmu_settled());
        // Read-only without DBM: nothing for the MMU to change.
        assert!(Descriptor4K::from_raw(kernel_rw | ro).mmu_settled());
    }

    #[test]
    fn new_leaf_literals() {
        let pa = PhysAddr::new(0x8000_1000);
        // User RWX page: 0b11, AttrIndx 1, AP[1], SH, AF, nG, PXN.
        let user = Descriptor4K::new_leaf(pa, MapFlags::WRITE | MapFlags::USER | MapFlags::EXEC, 3);
        assert_eq!(user.raw(), 0x0020_0000_8000_1f47);
        // Kernel text: 0b11, AttrIndx 1, AP[2], SH, AF, global, UXN.
        let text = Descriptor4K::new_leaf(pa, MapFlags::EXEC | MapFlags::GLOBAL, 3);
        assert_eq!(text.raw(), 0x0040_0000_8000_1787);
        // Kernel MMIO: 0b11, AttrIndx 0, SH, AF, global, PXN | UXN.
        let mmio = Descriptor4K::new_leaf(
            PhysAddr::new(0x0900_0000),
            MapFlags::WRITE | MapFlags::GLOBAL | MapFlags::DEVICE,
            3,
        );
        assert_eq!(mmio.raw(), 0x0060_0000_0900_0703);
        // A 2 MiB kernel RW block at level 2: 0b01.
        let block = Descriptor4K::new_leaf(
            PhysAddr::new(0x4020_0000),
            MapFlags::WRITE | MapFlags::GLOBAL,
            2,
        );
        assert_eq!(block.raw(), 0x0060_0000_4020_0705);
        // 64K page at the last level (crate level 2), read-only user data.
        let ro = Descriptor64K::new_leaf(PhysAddr::new(0x4021_0000), MapFlags::USER, 2);
        assert_eq!(ro.raw(), 0x0060_0000_4021_0fc7);
        // Tables: 0b11 and the address, nothing else.
        assert_eq!(
            Descriptor16K::new_table(PhysAddr::new(0x4020_4000)).raw(),
            0x0000_0000_4020_4003
        );
    }

    #[test]
    fn map_flags_of_foreign_literals() {
        // A Linux-style user page with the software and DBM bits set (55, 51)
        // and AttrIndx 4: not device, user, RW, not executable at EL0.
        let d = Descriptor4K::from_raw(0x00e8_0000_8000_1f53);
        assert_eq!(d.flags().attr_index(), 4);
        assert_eq!(d.map_flags(), MapFlags::WRITE | MapFlags::USER);
        // Kernel page with PXN clear but UXN set: kernel-executable.
        let k = Descriptor4K::from_raw(0x0040_0000_8000_0783);
        assert_eq!(
            k.map_flags(),
            MapFlags::EXEC | MapFlags::GLOBAL | MapFlags::DEVICE
        );
    }

    #[test]
    fn set_flags_keeps_unknown_bits_and_address() {
        let mut d = Descriptor16K::from_raw(0x0080_0000_4000_4f47);
        let f = d.flags();
        assert_eq!(f.bits(), 0x0080_0000_0000_0f47);
        d.set_flags(f | DescriptorFlags::CONTIGUOUS);
        assert_eq!(d.raw(), 0x0090_0000_4000_4f47);
        d.set_addr(PhysAddr::new(0x0000_ffff_ffff_c000));
        assert_eq!(d.raw(), 0x0090_ffff_ffff_cf47);
    }

    #[test]
    fn attr_index_helpers_and_mair() {
        let f = DescriptorFlags::VALID.with_attr_index(5);
        assert_eq!(f.bits(), 0b1_0101);
        assert_eq!(f.attr_index(), 5);
        assert_eq!(f.with_attr_index(0).bits(), 1);
        assert_eq!(DescriptorFlags::ATTR_INDX.attr_index(), 7);
        assert_eq!(MAIR_EL1_VALUE, 0xff04);
        assert_eq!(
            (MAIR_EL1_VALUE >> (8 * ATTR_INDEX_DEVICE_NGNRE)) & 0xff,
            0x04
        );
        assert_eq!((MAIR_EL1_VALUE >> (8 * ATTR_INDEX_NORMAL)) & 0xff, 0xff);
    }
}

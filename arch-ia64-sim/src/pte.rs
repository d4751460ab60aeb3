//! Page-table entries in the VHPT short format.
//!
//! Linux's ia64 ptes use the layout of the VHPT short-format entry, which is
//! also the first word of the long format and of the TLB insertion format
//! (Intel Itanium Architecture Software Developer's Manual, Vol. 2, §4.1.5
//! "Virtual Hash Page Table", short format; field meanings in the translation
//! interface table of §4.1):
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0 | p | present |
//! | 4:2 | ma | memory attribute: 0 = WB cacheable, 4 = UC, 5 = UCE, 6 = WC, 7 = NaTPage |
//! | 5 | a | accessed |
//! | 6 | d | dirty |
//! | 8:7 | pl | privilege level: 0 kernel … 3 user |
//! | 11:9 | ar | access rights (see below) |
//! | 49:12 | ppn | physical address bits 49:12 (architected 50-bit physical space) |
//! | 52 | ed | exception deferral (for speculative loads) |
//!
//! The hardware never sets `a` or `d`: a reference with `a` clear raises an
//! Access Bit fault, a store with `d` clear a Dirty Bit fault. So, as Linux
//! did for kernel mappings, [`new_leaf`](PageTableEntry::new_leaf) presets `a`
//! (and `ed`) on every leaf and `d` on writable ones.
//!
//! # Access rights
//!
//! `ar` and `pl` together give the rights at each privilege level (Vol. 2
//! §4.1.1, the "Page Access Rights" table). For `ar` 0–3 the rights are the same at
//! `pl` and every more privileged level: 0 = R, 1 = RX, 2 = RW, 3 = RWX; a
//! less privileged level has none. `ar` 4–7 grant different rights to `pl`
//! and to more privileged levels (4 R / RW, 5 RX / RWX, 6 RWX / RW, 7 X with
//! promotion / RX). The encoding of [`MapFlags`] is:
//!
//! | MapFlags | field |
//! |---|---|
//! | (none) | `ar` 0 (R) |
//! | `EXEC` | `ar` 1 (RX) |
//! | `WRITE` | `ar` 2 (RW) |
//! | `WRITE \| EXEC` | `ar` 3 (RWX) |
//! | `USER` | `pl` 3 (else 0: kernel only) |
//! | `DEVICE` | `ma` 4 (UC) (else 0: WB) |
//! | `GLOBAL` | not representable: dropped |
//!
//! ia64 has no global bit: a translation is tagged by the region id of its
//! region register, and kernel mappings are shared by giving every address
//! space the same region id for the kernel regions. [`MapFlags::GLOBAL`] is
//! therefore ignored by `new_leaf` and never reported by `map_flags`.
//! Decoding follows Linux's `pte_write` / `pte_exec`: writable when `ar` is
//! 2–6, executable when `ar` is odd; `DEVICE` whenever `ma` is not WB.
//!
//! # Table entries
//!
//! Upper-level entries (pgd / pud / pmd) are not read by any hardware walker
//! on ia64: the VHPT walker reads only VHPT entries (Linux's leaf ptes, through
//! its virtually mapped linear table), and Linux's miss handlers walked the
//! upper levels in software. Linux stored the bare physical address of the
//! next table there (`__pa(table)`, no flag bits) and treated any non-zero
//! value as present. This simulation sets `p` and the table's address in the
//! `ppn` field, so that one [`is_present`](PageTableEntry::is_present) serves
//! every level.

use arch_api::{EntryKind, MapFlags, PageTableEntry, PhysAddr};

bitflags::bitflags! {
    /// The non-address bits of an [`Ia64Pte`]. `MA_MASK`, `PL_MASK` and
    /// `AR_MASK` are multi-bit fields, not flags: read them with
    /// [`ma`](Self::ma), [`pl`](Self::pl) and [`ar`](Self::ar).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Ia64PteFlags: u64 {
        /// p: present.
        const PRESENT = 1 << 0;
        /// ma (bits 4:2): the memory-attribute field.
        const MA_MASK = 0b111 << 2;
        /// a: accessed (set by software; the hardware faults when clear).
        const ACCESSED = 1 << 5;
        /// d: dirty (set by software; stores fault when clear).
        const DIRTY = 1 << 6;
        /// pl (bits 8:7): the privilege-level field.
        const PL_MASK = 0b11 << 7;
        /// ar (bits 11:9): the access-rights field.
        const AR_MASK = 0b111 << 9;
        /// ed: exception deferral.
        const EXCEPTION_DEFERRAL = 1 << 52;
    }
}

/// `ma` 0: write-back cacheable memory.
pub const MA_WB: u64 = 0;
/// `ma` 4: uncacheable memory (device registers).
pub const MA_UC: u64 = 4;
/// `pl` 0: most privileged (kernel).
pub const PL_KERNEL: u64 = 0;
/// `pl` 3: least privileged (user).
pub const PL_USER: u64 = 3;
/// `ar` 0: read only.
pub const AR_R: u64 = 0;
/// `ar` 1: read, execute.
pub const AR_RX: u64 = 1;
/// `ar` 2: read, write.
pub const AR_RW: u64 = 2;
/// `ar` 3: read, write, execute.
pub const AR_RWX: u64 = 3;

const MA_SHIFT: u32 = 2;
const PL_SHIFT: u32 = 7;
const AR_SHIFT: u32 = 9;

impl Ia64PteFlags {
    /// The `ma` field (0–7).
    pub const fn ma(self) -> u64 {
        (self.bits() & Self::MA_MASK.bits()) >> MA_SHIFT
    }

    /// The `pl` field (0–3).
    pub const fn pl(self) -> u64 {
        (self.bits() & Self::PL_MASK.bits()) >> PL_SHIFT
    }

    /// The `ar` field (0–7).
    pub const fn ar(self) -> u64 {
        (self.bits() & Self::AR_MASK.bits()) >> AR_SHIFT
    }

    /// These flags with the three fields replaced (each masked to its width).
    pub const fn with_fields(self, ma: u64, pl: u64, ar: u64) -> Self {
        let fields = Self::MA_MASK.bits() | Self::PL_MASK.bits() | Self::AR_MASK.bits();
        Self::from_bits_retain(
            (self.bits() & !fields)
                | ((ma << MA_SHIFT) & Self::MA_MASK.bits())
                | ((pl << PL_SHIFT) & Self::PL_MASK.bits())
                | ((ar << AR_SHIFT) & Self::AR_MASK.bits()),
        )
    }
}

/// One VHPT short-format entry (see the module docs for the bit layout).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Ia64Pte(u64);

impl Ia64Pte {
    /// The ppn field: physical address bits 49:12.
    pub const PPN_MASK: u64 = ((1 << 50) - 1) & !((1 << 12) - 1);

    /// The `ar` field (0–7).
    pub const fn ar(self) -> u64 {
        Ia64PteFlags::from_bits_retain(self.0).ar()
    }

    /// The `pl` field (0–3).
    pub const fn pl(self) -> u64 {
        Ia64PteFlags::from_bits_retain(self.0).pl()
    }

    /// The `ma` field (0–7).
    pub const fn ma(self) -> u64 {
        Ia64PteFlags::from_bits_retain(self.0).ma()
    }

    fn check_addr(addr: PhysAddr) -> u64 {
        debug_assert!(
            addr.as_u64() & !Self::PPN_MASK == 0,
            "{addr:?} does not fit the ppn field (bits 49:12)"
        );
        addr.as_u64() & Self::PPN_MASK
    }
}

impl core::fmt::Debug for Ia64Pte {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ia64Pte")
            .field("raw", &format_args!("{:#018x}", self.0))
            .field("p", &self.is_present())
            .field("ppn", &format_args!("{:#x}", self.0 & Self::PPN_MASK))
            .field("ma", &self.ma())
            .field("pl", &self.pl())
            .field("ar", &self.ar())
            .finish()
    }
}

impl PageTableEntry for Ia64Pte {
    type Flags = Ia64PteFlags;

    const EMPTY: Self = Ia64Pte(0);

    fn from_raw(raw: u64) -> Self {
        Ia64Pte(raw)
    }

    fn raw(self) -> u64 {
        self.0
    }

    fn is_present(self) -> bool {
        self.0 & Ia64PteFlags::PRESENT.bits() != 0
    }

    /// Levels 0–2 hold tables, level 3 leaves (the layout allows no huge pages).
    fn kind(self, level: usize) -> EntryKind {
        debug_assert!(level < 4, "ia64-sim has four levels");
        if !self.is_present() {
            EntryKind::None
        } else if level < 3 {
            EntryKind::Table
        } else {
            EntryKind::Leaf
        }
    }

    fn addr(self) -> PhysAddr {
        PhysAddr::new(self.0 & Self::PPN_MASK)
    }

    fn set_addr(&mut self, addr: PhysAddr) {
        self.0 = (self.0 & !Self::PPN_MASK) | Self::check_addr(addr);
    }

    /// Every bit outside the ppn field.
    fn flags(self) -> Ia64PteFlags {
        Ia64PteFlags::from_bits_retain(self.0 & !Self::PPN_MASK)
    }

    fn set_flags(&mut self, flags: Ia64PteFlags) {
        self.0 = (self.0 & Self::PPN_MASK) | (flags.bits() & !Self::PPN_MASK);
    }

    /// `p` and the table's physical address (Linux stored the bare address).
    fn new_table(table: PhysAddr) -> Self {
        Ia64Pte(Self::check_addr(table) | Ia64PteFlags::PRESENT.bits())
    }

    fn new_leaf(frame: PhysAddr, flags: MapFlags, level: usize) -> Self {
        debug_assert_eq!(level, 3, "ia64-sim maps pages at level 3 only");
        let write = flags.contains(MapFlags::WRITE);
        let ar = match (write, flags.contains(MapFlags::EXEC)) {
            (false, false) => AR_R,
            (false, true) => AR_RX,
            (true, false) => AR_RW,
            (true, true) => AR_RWX,
        };
        let pl = if flags.contains(MapFlags::USER) {
            PL_USER
        } else {
            PL_KERNEL
        };
        let ma = if flags.contains(MapFlags::DEVICE) {
            MA_UC
        } else {
            MA_WB
        };
        let mut bits =
            Ia64PteFlags::PRESENT | Ia64PteFlags::ACCESSED | Ia64PteFlags::EXCEPTION_DEFERRAL;
        if write {
            bits |= Ia64PteFlags::DIRTY;
        }
        Ia64Pte(Self::check_addr(frame) | bits.with_fields(ma, pl, ar).bits())
    }

    fn map_flags(self) -> MapFlags {
        let ar = self.ar();
        let mut flags = MapFlags::empty();
        flags.set(MapFlags::WRITE, (2..=6).contains(&ar));
        flags.set(MapFlags::EXEC, ar & 1 != 0);
        flags.set(MapFlags::USER, self.pl() == PL_USER);
        flags.set(MapFlags::DEVICE, self.ma() != MA_WB);
        flags
    }

    /// Always: the Itanium MMU never writes a PTE. A clear accessed or dirty
    /// bit raises a fault (the Data Access Bit and Data Dirty Bit faults of
    /// the Itanium Architecture SDM, Vol. 2) and software sets it.
    #[inline]
    fn mmu_settled(self) -> bool {
        true
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::Ia64Sim;
    use arch_api::conformance;

    const PA: PhysAddr = PhysAddr::new(0x1234_5678_0000);

    #[test]
    fn every_entry_is_settled() {
        // The MMU faults instead of writing accessed / dirty bits.
        let e = Ia64Pte::new_leaf(PA, MapFlags::WRITE, 3);
        assert!(e.mmu_settled());
        assert!(
            Ia64Pte::from_raw(
                e.raw() & !(Ia64PteFlags::ACCESSED.bits() | Ia64PteFlags::DIRTY.bits())
            )
            .mmu_settled()
        );
    }

    #[test]
    fn entries_round_trip() {
        let supported = MapFlags::WRITE | MapFlags::EXEC | MapFlags::USER | MapFlags::DEVICE;
        conformance::entry_round_trips::<Ia64Sim>(supported, 0x0002_dead_beef_4000);
        conformance::entry_round_trips::<Ia64Sim>(supported, 0x0003_ffff_ffff_8000);
    }

    #[test]
    fn leaf_bits_by_hand() {
        // User RWX, cacheable: p 0x1 | a 0x20 | d 0x40 | pl 3 << 7 = 0x180
        // | ar 3 << 9 = 0x600 | ppn | ed 1 << 52.
        let e = Ia64Pte::new_leaf(PA, MapFlags::WRITE | MapFlags::EXEC | MapFlags::USER, 3);
        assert_eq!(e.raw(), 0x0010_1234_5678_07e1);
        // Kernel read-only: ar 0, pl 0, no d.
        let e = Ia64Pte::new_leaf(PA, MapFlags::empty(), 3);
        assert_eq!(e.raw(), 0x0010_1234_5678_0021);
        // Kernel RW device: ma 4 << 2 = 0x10, ar 2 << 9 = 0x400.
        let e = Ia64Pte::new_leaf(PA, MapFlags::WRITE | MapFlags::DEVICE, 3);
        assert_eq!(e.raw(), 0x0010_1234_5678_0471);
        assert_eq!((e.ma(), e.pl(), e.ar()), (MA_UC, PL_KERNEL, AR_RW));
    }

    #[test]
    fn access_rights_follow_the_manuals_table() {
        for (flags, ar) in [
            (MapFlags::empty(), AR_R),
            (MapFlags::EXEC, AR_RX),
            (MapFlags::WRITE, AR_RW),
            (MapFlags::WRITE | MapFlags::EXEC, AR_RWX),
        ] {
            assert_eq!(Ia64Pte::new_leaf(PA, flags, 3).ar(), ar, "{flags:?}");
            assert_eq!(Ia64Pte::new_leaf(PA, flags | MapFlags::USER, 3).pl(), 3);
        }
    }

    #[test]
    fn ar_4_to_7_decode_as_linux_did() {
        let base = Ia64Pte::new_leaf(PA, MapFlags::empty(), 3);
        for (ar, want) in [
            (4, MapFlags::WRITE),                  // R / RW
            (5, MapFlags::WRITE | MapFlags::EXEC), // RX / RWX
            (6, MapFlags::WRITE),                  // RWX / RW
            (7, MapFlags::EXEC),                   // X (promote) / RX
        ] {
            let mut e = base;
            e.set_flags(e.flags().with_fields(MA_WB, PL_KERNEL, ar));
            assert_eq!(e.ar(), ar);
            assert_eq!(e.map_flags(), want, "ar {ar}");
        }
    }

    #[test]
    fn global_is_not_representable() {
        let e = Ia64Pte::new_leaf(PA, MapFlags::GLOBAL | MapFlags::WRITE, 3);
        assert_eq!(e, Ia64Pte::new_leaf(PA, MapFlags::WRITE, 3));
        assert_eq!(e.map_flags(), MapFlags::WRITE);
    }

    #[test]
    fn table_entries_and_kinds() {
        let t = Ia64Pte::new_table(PA);
        assert_eq!(t.raw(), 0x1234_5678_0001);
        for level in 0..3 {
            assert_eq!(t.kind(level), EntryKind::Table);
        }
        assert_eq!(t.kind(3), EntryKind::Leaf, "the same bits at level 3");
        // Linux's table pointer (bare address, p clear) is not present here.
        assert_eq!(Ia64Pte::from_raw(PA.as_u64()).kind(0), EntryKind::None);
        assert_eq!(Ia64Pte::EMPTY.kind(3), EntryKind::None);
    }

    #[test]
    fn flags_exclude_the_ppn_and_set_flags_keeps_it() {
        let mut e = Ia64Pte::new_leaf(PA, MapFlags::WRITE, 3);
        assert_eq!(e.flags().bits() & Ia64Pte::PPN_MASK, 0);
        e.set_flags(Ia64PteFlags::PRESENT);
        assert_eq!(e.raw(), PA.as_u64() | 1);
        // Ignored bits above ed survive a flags round trip.
        let mut e = Ia64Pte::from_raw(PA.as_u64() | 1 << 60 | 1);
        e.set_flags(e.flags());
        assert_eq!(e.raw(), PA.as_u64() | 1 << 60 | 1);
        assert_eq!(Ia64Pte::PPN_MASK, 0x0003_ffff_ffff_f000);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "does not fit the ppn field")]
    fn addresses_above_50_bits_are_rejected() {
        let _ = Ia64Pte::new_table(PhysAddr::new(1 << 50));
    }
}

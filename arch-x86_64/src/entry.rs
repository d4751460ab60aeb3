//! Page-table entries: the 64-bit words of every paging-structure level.
//!
//! The formats are in the Intel SDM Vol. 3A, §4.5 "4-Level Paging and 5-Level
//! Paging", Tables 4-15 to 4-20 (PML5E, PML4E, PDPTE mapping a 1-GByte page or
//! referencing a page directory, PDE mapping a 2-MByte page or referencing a
//! page table, PTE mapping a 4-KByte page). The low attribute bits mean the
//! same at every level, with two exceptions this module is careful about:
//!
//! * **Bit 7** is PS ("page size") in a PDPTE and a PDE: set, the entry maps a
//!   1 GiB / 2 MiB page instead of pointing at a table. In a PML4E / PML5E it
//!   is reserved (must be 0). In a **PTE it is PAT**, a memory-type bit: a 4 KiB
//!   PTE with bit 7 set is still a 4 KiB page. [`X86Entry::kind`] therefore never
//!   looks at bit 7 at the last level.
//! * In a 2 MiB / 1 GiB leaf the PAT bit moves to **bit 12**, and the bits
//!   between 12 and the page alignment are PAT or reserved, not address
//!   (Tables 4-17 and 4-18). The level-blind [`PageTableEntry::addr`] returns
//!   bits 51:12 (exact for tables, 4 KiB pages, and every leaf this crate
//!   builds); [`X86Entry::addr_at`] knows the level and masks a large leaf's
//!   address to its alignment.
//!
//! An entry type must know how deep its tree is: in a 4-level tree level 3 is
//! the PT, where bit 7 is PAT, but in a 5-level tree level 3 is the PD, where
//! bit 7 is PS. Hence the const parameter: [`Pml4Entry`] (`X86Entry<4>`) and
//! [`La57Entry`] (`X86Entry<5>`).

use arch_api::{EntryKind, MapFlags, PageTableEntry, PhysAddr};
use core::fmt;

bitflags::bitflags! {
    /// The attribute bits of an x86_64 paging-structure entry (SDM Vol. 3A,
    /// Tables 4-15..4-20), named as in rust-osdev's `x86_64` crate.
    ///
    /// Bits that are not listed (9–11 and 52–58, ignored by the MMU and free
    /// for software; 59–62, the protection key; bit 12 of a large leaf, its PAT
    /// bit) are kept untouched by [`X86Entry::set_flags`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct X86Flags: u64 {
        /// P (bit 0): the entry is used by the MMU.
        const PRESENT = 1 << 0;
        /// R/W (bit 1): writes allowed (at every level of the walk).
        const WRITABLE = 1 << 1;
        /// U/S (bit 2): user-mode accesses allowed (at every level of the walk).
        const USER = 1 << 2;
        /// PWT (bit 3): page-level write-through.
        const WRITE_THROUGH = 1 << 3;
        /// PCD (bit 4): page-level cache disable.
        const NO_CACHE = 1 << 4;
        /// A (bit 5): set by the CPU when the entry is used for a translation.
        const ACCESSED = 1 << 5;
        /// D (bit 6, leaves only): set by the CPU on the first write through it.
        const DIRTY = 1 << 6;
        /// PS (bit 7) in a PDPTE / PDE: maps a 1 GiB / 2 MiB page.
        ///
        /// In a 4 KiB PTE the same bit is **PAT** (a memory-type selector), not
        /// "huge"; in a PML4E / PML5E it is reserved.
        const HUGE_PAGE = 1 << 7;
        /// G (bit 8, leaves only): global, not flushed by a CR3 load when
        /// CR4.PGE = 1 (§4.10.2.4).
        const GLOBAL = 1 << 8;
        /// XD (bit 63): instruction fetches not allowed (requires IA32_EFER.NXE;
        /// reserved otherwise).
        const NO_EXECUTE = 1 << 63;
    }
}

/// Bits 51:12: the physical address of the next table or 4 KiB page
/// (MAXPHYADDR is at most 52).
pub const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Bit 12: the PAT bit of a 2 MiB / 1 GiB leaf (bit 7 in a 4 KiB PTE).
pub const LARGE_PAT: u64 = 1 << 12;

/// What [`X86Entry::new_table`] sets: present, and every permission, so that
/// the leaf alone decides (the CPU ANDs R/W and U/S over the whole walk and ORs
/// XD; §4.6). Linux's `_PAGE_TABLE` less the dirty bit, which is ignored in a
/// non-leaf entry.
pub const TABLE_FLAGS: X86Flags = X86Flags::PRESENT
    .union(X86Flags::WRITABLE)
    .union(X86Flags::USER)
    .union(X86Flags::ACCESSED);

/// One x86_64 paging-structure entry in a tree of `LEVELS` levels (4: PML4,
/// 5: LA57 with a PML5 on top).
///
/// Level numbering is the workspace's: 0 is the root CR3 points at,
/// `LEVELS - 1` is the PT.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct X86Entry<const LEVELS: usize = 4>(u64);

/// An entry of a 4-level tree (PML4, PDPT, PD, PT).
pub type Pml4Entry = X86Entry<4>;
/// An entry of a 5-level tree (PML5, PML4, PDPT, PD, PT).
pub type La57Entry = X86Entry<5>;

/// What role a level plays, by its distance from the PT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// PML5 / PML4: tables only, bit 7 reserved.
    Upper,
    /// PDPT: 1 GiB leaves (PS) or tables.
    Pdpt,
    /// PD: 2 MiB leaves (PS) or tables.
    Pd,
    /// PT: 4 KiB pages, bit 7 is PAT.
    Pt,
}

impl<const LEVELS: usize> X86Entry<LEVELS> {
    /// Only 4- and 5-level paging exist (§4.5).
    const CHECK: () = assert!(
        LEVELS == 4 || LEVELS == 5,
        "x86_64 paging has 4 or 5 levels"
    );

    fn role(level: usize) -> Role {
        let () = Self::CHECK;
        debug_assert!(level < LEVELS, "level {level} of a {LEVELS}-level tree");
        match LEVELS - 1 - level.min(LEVELS - 1) {
            0 => Role::Pt,
            1 => Role::Pd,
            2 => Role::Pdpt,
            _ => Role::Upper,
        }
    }

    /// The bytes one leaf at `level` maps: 4 KiB at the PT, 2 MiB at the PD,
    /// 1 GiB at the PDPT. `None` where no leaf may be (PML4 / PML5).
    pub fn leaf_size(level: usize) -> Option<u64> {
        match Self::role(level) {
            Role::Pt => Some(1 << 12),
            Role::Pd => Some(1 << 21),
            Role::Pdpt => Some(1 << 30),
            Role::Upper => None,
        }
    }

    /// The entry holding exactly `raw` (same as [`PageTableEntry::from_raw`],
    /// usable in `const` context).
    pub const fn from_bits(raw: u64) -> Self {
        Self(raw)
    }

    /// Whether a large leaf at `level` is what this entry is: PS set at a PDPT
    /// or PD level.
    fn is_large_leaf(self, level: usize) -> bool {
        matches!(Self::role(level), Role::Pdpt | Role::Pd)
            && self.0 & X86Flags::HUGE_PAGE.bits() != 0
    }

    /// The physical address this entry points at, knowing the `level` it was
    /// found at: a 2 MiB / 1 GiB leaf's address is masked to its alignment (bit
    /// 12 is its PAT bit, the bits up to the alignment are reserved; Tables 4-17
    /// and 4-18). Everything else: the same as [`PageTableEntry::addr`].
    pub fn addr_at(self, level: usize) -> PhysAddr {
        let raw = self.0 & ADDR_MASK;
        match Self::leaf_size(level) {
            Some(size) if self.is_large_leaf(level) => PhysAddr::new(raw & !(size - 1)),
            _ => PhysAddr::new(raw),
        }
    }

    /// The PAT bit of a leaf found at `level`: bit 7 in a 4 KiB PTE, bit 12 in
    /// a 2 MiB / 1 GiB leaf; `false` for tables. With PCD and PWT it selects the
    /// memory type from IA32_PAT (§11.12.3). This crate never sets it.
    pub fn pat(self, level: usize) -> bool {
        match Self::role(level) {
            Role::Pt => self.0 & X86Flags::HUGE_PAGE.bits() != 0,
            _ if self.is_large_leaf(level) => self.0 & LARGE_PAT != 0,
            _ => false,
        }
    }
}

impl<const LEVELS: usize> fmt::Debug for X86Entry<LEVELS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X86Entry")
            .field("raw", &format_args!("{:#018x}", self.0))
            .field("addr", &format_args!("{:#x}", self.0 & ADDR_MASK))
            .field("flags", &X86Flags::from_bits_truncate(self.0))
            .finish()
    }
}

impl<const LEVELS: usize> PageTableEntry for X86Entry<LEVELS> {
    type Flags = X86Flags;

    const EMPTY: Self = Self(0);

    fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    fn raw(self) -> u64 {
        self.0
    }

    fn is_present(self) -> bool {
        self.0 & X86Flags::PRESENT.bits() != 0
    }

    /// Not present: [`EntryKind::None`]. At the PT: always a leaf (bit 7 is PAT
    /// there). At the PD / PDPT: a leaf when PS (bit 7) is set, else a table.
    /// At the PML4 / PML5: a table (PS is reserved there; the CPU would fault
    /// with a reserved-bit #PF, and a walker descending into it is no worse).
    fn kind(self, level: usize) -> EntryKind {
        if !self.is_present() {
            return EntryKind::None;
        }
        match Self::role(level) {
            Role::Pt => EntryKind::Leaf,
            Role::Pd | Role::Pdpt if self.0 & X86Flags::HUGE_PAGE.bits() != 0 => EntryKind::Leaf,
            _ => EntryKind::Table,
        }
    }

    /// Bits 51:12, whatever the level. For a 2 MiB / 1 GiB leaf with its PAT
    /// bit (12) set this includes that bit; use [`X86Entry::addr_at`] where the
    /// level is known. Entries made by [`new_leaf`](Self::new_leaf) never have it.
    fn addr(self) -> PhysAddr {
        PhysAddr::new(self.0 & ADDR_MASK)
    }

    /// Replaces bits 51:12. `addr` must be 4 KiB aligned and below 2^52. Like
    /// [`addr`](Self::addr) it is level-blind: on a 2 MiB / 1 GiB leaf it also
    /// rewrites bit 12, that leaf's PAT bit.
    fn set_addr(&mut self, addr: PhysAddr) {
        debug_assert_eq!(
            addr.as_u64() & !ADDR_MASK,
            0,
            "{addr:?} is not a 4 KiB aligned 52-bit physical address"
        );
        self.0 = (self.0 & !ADDR_MASK) | (addr.as_u64() & ADDR_MASK);
    }

    fn flags(self) -> X86Flags {
        X86Flags::from_bits_truncate(self.0)
    }

    /// Replaces the bits of [`X86Flags`]; the address, software, protection-key
    /// and large-leaf PAT bits are kept.
    fn set_flags(&mut self, flags: X86Flags) {
        self.0 = (self.0 & !X86Flags::all().bits()) | flags.bits();
    }

    /// Present, writable, user, accessed: see [`TABLE_FLAGS`].
    fn new_table(table: PhysAddr) -> Self {
        let mut e = Self(TABLE_FLAGS.bits());
        e.set_addr(table);
        e
    }

    /// A present leaf with [`X86Flags::ACCESSED`] and [`X86Flags::DIRTY`] preset
    /// (as Linux's `PAGE_KERNEL`: the CPU need not set them with a locked
    /// update on first use), [`X86Flags::HUGE_PAGE`] at the PD / PDPT, and
    /// `flags` translated: `WRITE` → `WRITABLE`, no `EXEC` → `NO_EXECUTE`,
    /// `USER` → `USER`, `GLOBAL` → `GLOBAL`, `DEVICE` → `NO_CACHE |
    /// WRITE_THROUGH` (PAT entry 3, UC, with the power-on IA32_PAT).
    ///
    /// `frame` must be aligned to the leaf size. In debug builds (or with the
    /// `debug` feature) a misaligned frame or a leaf at the PML4 / PML5 panics.
    fn new_leaf(frame: PhysAddr, flags: MapFlags, level: usize) -> Self {
        let size = Self::leaf_size(level);
        if cfg!(any(debug_assertions, feature = "debug")) {
            let size = size.unwrap_or_else(|| panic!("no leaf at level {level} (PML4/PML5)"));
            assert!(
                frame.is_aligned(size) && frame.as_u64() & !ADDR_MASK == 0,
                "{frame:?} is not a {size:#x}-aligned 52-bit frame"
            );
        }
        let mut bits = X86Flags::PRESENT | X86Flags::ACCESSED | X86Flags::DIRTY;
        if size.is_some_and(|s| s > 1 << 12) {
            bits |= X86Flags::HUGE_PAGE;
        }
        if flags.contains(MapFlags::WRITE) {
            bits |= X86Flags::WRITABLE;
        }
        if !flags.contains(MapFlags::EXEC) {
            bits |= X86Flags::NO_EXECUTE;
        }
        if flags.contains(MapFlags::USER) {
            bits |= X86Flags::USER;
        }
        if flags.contains(MapFlags::GLOBAL) {
            bits |= X86Flags::GLOBAL;
        }
        if flags.contains(MapFlags::DEVICE) {
            bits |= X86Flags::NO_CACHE | X86Flags::WRITE_THROUGH;
        }
        let mut e = Self(bits.bits());
        e.set_addr(frame);
        e
    }

    /// The inverse of [`new_leaf`](Self::new_leaf). `DEVICE` is reported when
    /// PCD is set (UC or UC- with the power-on IA32_PAT); PWT alone is
    /// write-through, still cached.
    fn map_flags(self) -> MapFlags {
        let f = self.flags();
        let mut m = MapFlags::empty();
        if f.contains(X86Flags::WRITABLE) {
            m |= MapFlags::WRITE;
        }
        if !f.contains(X86Flags::NO_EXECUTE) {
            m |= MapFlags::EXEC;
        }
        if f.contains(X86Flags::USER) {
            m |= MapFlags::USER;
        }
        if f.contains(X86Flags::GLOBAL) {
            m |= MapFlags::GLOBAL;
        }
        if f.contains(X86Flags::NO_CACHE) {
            m |= MapFlags::DEVICE;
        }
        m
    }

    /// Accessed and dirty both set: the processor sets those two flags and
    /// no other (Intel SDM Vol. 3A §4.8, "Accessed and Dirty Flags"), so it
    /// has nothing left to write. [`new_leaf`](Self::new_leaf) sets both, as
    /// Linux's `PAGE_KERNEL` does.
    #[inline]
    fn mmu_settled(self) -> bool {
        let ad = X86Flags::ACCESSED.bits() | X86Flags::DIRTY.bits();
        self.0 & ad == ad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PD_4: usize = 2; // in a 4-level tree: PML4 0, PDPT 1, PD 2, PT 3
    const PT_4: usize = 3;

    /// Table 4-18 (PDE mapping a 2 MiB page): P, R/W, A, D, PS, G, XD, address
    /// 0x1_2340_0000 (bits 51:21), PAT (bit 12) set.
    const RAW_PD_LEAF: u64 = 0x8000_0001_2340_11e3;

    #[test]
    fn raw_pd_entry_with_ps_is_a_2mib_leaf() {
        let e = Pml4Entry::from_raw(RAW_PD_LEAF);
        assert_eq!(e.kind(PD_4), EntryKind::Leaf);
        assert_eq!(e.addr_at(PD_4), PhysAddr::new(0x1_2340_0000));
        assert!(e.pat(PD_4), "bit 12 is the PAT bit of a 2 MiB leaf");
        assert_eq!(
            e.addr(),
            PhysAddr::new(0x1_2340_1000),
            "level-blind addr() keeps bit 12"
        );
        assert_eq!(
            e.flags(),
            X86Flags::PRESENT
                | X86Flags::WRITABLE
                | X86Flags::ACCESSED
                | X86Flags::DIRTY
                | X86Flags::HUGE_PAGE
                | X86Flags::GLOBAL
                | X86Flags::NO_EXECUTE
        );
        assert_eq!(e.map_flags(), MapFlags::WRITE | MapFlags::GLOBAL);
        // Same word one level up (PDPT, Table 4-17): a 1 GiB leaf, address to 1 GiB.
        assert_eq!(e.kind(1), EntryKind::Leaf);
        assert_eq!(e.addr_at(1), PhysAddr::new(0x1_0000_0000));
        // At the PML4, PS is reserved: treated as a table.
        assert_eq!(e.kind(0), EntryKind::Table);
        assert_eq!(e.addr_at(0), PhysAddr::new(0x1_2340_1000));
    }

    #[test]
    fn bit_7_in_a_pte_is_pat_not_huge() {
        // Table 4-20 (PTE mapping a 4 KiB page): P, R/W, PAT (bit 7), address
        // 0xabc_d000 (bit 12 is address here).
        let raw = 0x0000_0000_0abc_d083;
        let e = Pml4Entry::from_raw(raw);
        assert_eq!(e.kind(PT_4), EntryKind::Leaf);
        assert_eq!(e.addr_at(PT_4), PhysAddr::new(0x0abc_d000));
        assert_eq!(e.addr(), PhysAddr::new(0x0abc_d000));
        assert!(e.pat(PT_4));
        // The same word with bit 7 clear is still a 4 KiB leaf at the PT...
        let plain = Pml4Entry::from_raw(raw & !0x80);
        assert_eq!(plain.kind(PT_4), EntryKind::Leaf);
        assert!(!plain.pat(PT_4));
        // ...but a table at the PD.
        assert_eq!(plain.kind(PD_4), EntryKind::Table);
        assert_eq!(e.kind(PD_4), EntryKind::Leaf);
    }

    #[test]
    fn level_3_is_the_pt_in_4_levels_and_the_pd_in_5() {
        let raw = 0x0000_0000_0020_0003; // P, R/W, address 0x20_0000, bit 7 clear
        assert_eq!(Pml4Entry::from_raw(raw).kind(3), EntryKind::Leaf);
        assert_eq!(La57Entry::from_raw(raw).kind(3), EntryKind::Table);
        assert_eq!(La57Entry::from_raw(raw).kind(4), EntryKind::Leaf);
        let ps = raw | 0x80;
        assert_eq!(La57Entry::from_raw(ps).kind(3), EntryKind::Leaf);
        assert_eq!(La57Entry::from_raw(ps).kind(2), EntryKind::Leaf);
        assert_eq!(La57Entry::from_raw(ps).kind(1), EntryKind::Table); // PML4
        assert_eq!(La57Entry::from_raw(ps).kind(0), EntryKind::Table); // PML5
    }

    #[test]
    fn not_present_is_none_at_every_level_whatever_else_is_set() {
        let e = Pml4Entry::from_raw(0xffff_ffff_ffff_fffe);
        for level in 0..4 {
            assert_eq!(e.kind(level), EntryKind::None);
        }
    }

    #[test]
    fn settled_means_accessed_and_dirty() {
        for f in [
            MapFlags::WRITE | MapFlags::GLOBAL,
            MapFlags::USER,
            MapFlags::DEVICE,
        ] {
            assert!(Pml4Entry::new_leaf(PhysAddr::new(0x5000), f, PT_4).mmu_settled());
        }
        assert!(Pml4Entry::from_raw(RAW_PD_LEAF).mmu_settled());
        // A user page as a fault handler leaves it: P|RW|US|A, not yet dirty.
        assert!(!Pml4Entry::from_raw(0x8000_0000_1234_5027).mmu_settled());
        // Neither accessed nor dirty.
        assert!(!Pml4Entry::from_raw(0x8000_0000_1234_5007).mmu_settled());
        // Dirty without accessed (software may write that): still not final.
        assert!(!Pml4Entry::from_raw(0x8000_0000_1234_5047).mmu_settled());
    }

    #[test]
    fn new_leaf_literal_encodings() {
        // Kernel data page, like Linux's PAGE_KERNEL: P|RW|A|D|G|NX.
        let e = Pml4Entry::new_leaf(
            PhysAddr::new(0x1234_5000),
            MapFlags::WRITE | MapFlags::GLOBAL,
            PT_4,
        );
        assert_eq!(e.raw(), 0x8000_0000_1234_5163);
        // Executable user 2 MiB page: P|US|A|D|PS.
        let e = Pml4Entry::new_leaf(
            PhysAddr::new(0x4020_0000),
            MapFlags::USER | MapFlags::EXEC,
            PD_4,
        );
        assert_eq!(e.raw(), 0x0000_0000_4020_00e5);
        // Device 1 GiB page: P|RW|PWT|PCD|A|D|PS|NX.
        let e = Pml4Entry::new_leaf(
            PhysAddr::new(0xc000_0000),
            MapFlags::WRITE | MapFlags::DEVICE,
            1,
        );
        assert_eq!(e.raw(), 0x8000_0000_c000_00fb);
        // A table: P|RW|US|A.
        assert_eq!(
            Pml4Entry::new_table(PhysAddr::new(0x7000)).raw(),
            0x0000_0000_0000_7027
        );
    }

    #[test]
    fn set_flags_keeps_unlisted_bits() {
        // Software bits 9 and 52, protection key 0b1010 (bits 62:59), PAT bit 12.
        let keep = (1 << 9) | (1 << 52) | (0b1010 << 59) | LARGE_PAT;
        let mut e = Pml4Entry::from_raw(keep | 0x0040_0000 | 0x83);
        e.set_flags(X86Flags::PRESENT);
        assert_eq!(e.raw(), keep | 0x0040_0000 | 0x1);
        e.set_addr(PhysAddr::new(0x0080_0000));
        assert_eq!(e.raw(), (keep & !LARGE_PAT) | 0x0080_0000 | 0x1);
    }

    #[test]
    fn pml4_leaf_is_refused_with_debug_checks() {
        if !cfg!(any(debug_assertions, feature = "debug")) {
            return;
        }
        let r =
            std::panic::catch_unwind(|| Pml4Entry::new_leaf(PhysAddr::new(0), MapFlags::WRITE, 0));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            Pml4Entry::new_leaf(PhysAddr::new(0x1000), MapFlags::WRITE, PD_4)
        });
        assert!(r.is_err(), "misaligned 2 MiB frame");
    }
}

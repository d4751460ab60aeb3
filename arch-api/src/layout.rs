//! Page-table layouts: the shape of the radix tree an MMU walks.
//!
//! Levels are numbered from the root: level 0 is the table CR3 / TTBR points at
//! (Linux's pgd, or p4d/pml5 with five levels), level `LEVELS - 1` holds the
//! last-level entries (Linux's pte). A generic walker needs only the numbers in
//! [`PageTableLayout`] and the entry decoding in [`PageTableEntry`].

use crate::{PhysAddr, VirtAddr};
use core::fmt::Debug;

bitflags::bitflags! {
    /// Architecture-neutral mapping attributes. Every present mapping is readable;
    /// backends translate these to their own descriptor bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MapFlags: u32 {
        /// Writable.
        const WRITE = 1 << 0;
        /// Executable (absence means no-execute where the architecture has it).
        const EXEC = 1 << 1;
        /// Accessible from user mode.
        const USER = 1 << 2;
        /// Global: not tagged with an address-space id, survives ASID/PCID switches.
        const GLOBAL = 1 << 3;
        /// Device / uncached memory.
        const DEVICE = 1 << 4;
    }
}

/// What an entry is at a given level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Not present: the walk stops here and nothing below exists.
    None,
    /// Points to the next-level table.
    Table,
    /// Maps memory: a page at the last level, a block / huge page above it.
    Leaf,
}

/// One page-table entry of some architecture.
///
/// Entries are plain 64-bit words; a walker reads them with
/// [`from_raw`](Self::from_raw) and writes them back with [`raw`](Self::raw).
pub trait PageTableEntry: Copy + Eq + Debug + Send + Sync + 'static {
    /// The architecture's own descriptor bits, as `bitflags`.
    type Flags: Copy + Debug;

    /// The empty (not present) entry.
    const EMPTY: Self;

    /// Decodes a raw word.
    fn from_raw(raw: u64) -> Self;
    /// The raw word to store in the table.
    fn raw(self) -> u64;
    /// Whether the hardware would use this entry (present / valid bit).
    fn is_present(self) -> bool;
    /// What this entry is when found at `level`: the same bits can mean a table
    /// at one level and a block at another.
    fn kind(self, level: usize) -> EntryKind;
    /// The physical address the entry points at (next table, page or block).
    fn addr(self) -> PhysAddr;
    /// Replaces the physical address, keeping the attribute bits.
    fn set_addr(&mut self, addr: PhysAddr);
    /// The architecture's attribute bits.
    fn flags(self) -> Self::Flags;
    /// Replaces the attribute bits, keeping the address.
    fn set_flags(&mut self, flags: Self::Flags);
    /// A present entry pointing at a next-level table.
    fn new_table(table: PhysAddr) -> Self;
    /// A present leaf at `level` (a page at the last level, a block above)
    /// mapping `frame` with `flags`.
    fn new_leaf(frame: PhysAddr, flags: MapFlags, level: usize) -> Self;
    /// The neutral attributes of a leaf (the inverse of [`new_leaf`](Self::new_leaf)).
    fn map_flags(self) -> MapFlags;
    /// Whether the MMU can no longer change this present leaf: every bit the
    /// hardware sets on its own (accessed, dirty) is already set, or this
    /// architecture's MMU never writes entries.
    ///
    /// A walker that owns the table (no other software writes the entry)
    /// may then clear the leaf with a plain load and store: the value it
    /// read is the value the entry has when it vanishes. Otherwise it must
    /// clear with an atomic exchange (Linux's `ptep_get_and_clear`) so that
    /// an accessed or dirty bit set in between is not lost. The exchange is
    /// a LOCKed instruction per page on x86; kernel mappings are created
    /// with accessed and dirty already set (Linux's `PAGE_KERNEL`) so that
    /// neither the MMU's update nor the exchange is ever needed for them.
    ///
    /// The default, `false`, is always correct.
    #[inline]
    fn mmu_settled(self) -> bool {
        false
    }
}

/// The geometry of a page-table tree.
///
/// Implementors are zero-sized marker types (`X86_64Pml4`, `Aarch64Granule4K`, …);
/// everything is associated so a generic walker compiles to straight-line shifts.
pub trait PageTableLayout: Send + Sync + 'static {
    /// Short name, as accepted by the harness's `--arch` (`x86_64`, `aarch64-4k`, …).
    const NAME: &'static str;
    /// Number of levels.
    const LEVELS: usize;
    /// log2 of the base page size.
    const PAGE_SHIFT: u32;
    /// The base page size in bytes.
    const PAGE_SIZE: u64 = 1 << Self::PAGE_SHIFT;
    /// Index bits per level, root first (`INDEX_BITS.len() == LEVELS`).
    const INDEX_BITS: &'static [u32];
    /// Bits of virtual address translated by the tree (48 for 4-level x86_64).
    const VA_BITS: u32;
    /// The entry format.
    type Entry: PageTableEntry;

    /// Entries in a table at `level`.
    fn entries(level: usize) -> usize {
        1 << Self::INDEX_BITS[level]
    }

    /// Bytes of a table at `level` (8-byte entries).
    fn table_bytes(level: usize) -> usize {
        Self::entries(level) * 8
    }

    /// The lowest address bit that `level` indexes.
    fn level_shift(level: usize) -> u32 {
        let mut shift = Self::PAGE_SHIFT;
        let mut l = Self::LEVELS - 1;
        while l > level {
            shift += Self::INDEX_BITS[l];
            l -= 1;
        }
        shift
    }

    /// The span of virtual addresses one entry at `level` covers.
    fn entry_span(level: usize) -> u64 {
        1u64 << Self::level_shift(level)
    }

    /// The index of the entry at `level` that translates `va`.
    fn index(va: VirtAddr, level: usize) -> usize {
        ((va.as_u64() >> Self::level_shift(level)) as usize) & (Self::entries(level) - 1)
    }

    /// The first address past the entry at `level` that contains `va`: where a
    /// walker resumes after skipping an empty entry. `None` at the top of the
    /// address space.
    fn entry_end(va: VirtAddr, level: usize) -> Option<VirtAddr> {
        let span = Self::entry_span(level);
        va.align_down(span).checked_add(span)
    }

    /// Whether `va` is a canonical address for this layout. Non-canonical
    /// addresses fault on the hardware; walkers must reject them.
    fn is_canonical(va: VirtAddr) -> bool;

    /// Whether a leaf (block / huge page) may be placed at `level`. Always true
    /// for the last level.
    fn leaf_allowed(level: usize) -> bool;

    /// A runtime description, for the harness and docs.
    fn info() -> LayoutInfo {
        LayoutInfo {
            name: Self::NAME,
            levels: Self::LEVELS,
            page_size: Self::PAGE_SIZE,
            va_bits: Self::VA_BITS,
            index_bits: Self::INDEX_BITS,
            leaf_levels: {
                let mut mask = 0u8;
                let mut l = 0;
                while l < Self::LEVELS {
                    if Self::leaf_allowed(l) {
                        mask |= 1 << l;
                    }
                    l += 1;
                }
                mask
            },
        }
    }
}

/// A value-level description of a layout (what [`PageTableLayout::info`] returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutInfo {
    /// [`PageTableLayout::NAME`].
    pub name: &'static str,
    /// [`PageTableLayout::LEVELS`].
    pub levels: usize,
    /// [`PageTableLayout::PAGE_SIZE`].
    pub page_size: u64,
    /// [`PageTableLayout::VA_BITS`].
    pub va_bits: u32,
    /// [`PageTableLayout::INDEX_BITS`].
    pub index_bits: &'static [u32],
    /// Bit `l` set when a leaf is allowed at level `l`.
    pub leaf_levels: u8,
}

impl LayoutInfo {
    /// The span of one entry at `level`.
    pub fn entry_span(&self, level: usize) -> u64 {
        let below: u32 = self.index_bits[level + 1..].iter().sum();
        self.page_size << below
    }
}

/// Whether `va` sign-extends bit `va_bits - 1` (the x86_64 canonical form: the
/// upper bits are all copies of the top translated bit). aarch64 differs: its
/// upper bits select TTBR0 or TTBR1 and must be all 0 or all 1 whatever bit 47 is.
pub const fn sign_extended(va: VirtAddr, va_bits: u32) -> bool {
    let top = (va.as_u64() as i64) >> (va_bits - 1);
    top == 0 || top == -1
}

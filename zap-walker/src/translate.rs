//! `translate`: the software MMU (what the harness uses to touch memory).

use crate::walker::{TableRef, Walker};
use arch_api::{
    EntryKind, FrameSource, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, PhysMap, VirtAddr,
};

/// Where a virtual address leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// The physical address of `va` itself (page offset included).
    pub phys: PhysAddr,
    /// The frame (or large-leaf block) mapped.
    pub frame: PhysAddr,
    /// The leaf's attributes.
    pub flags: MapFlags,
    /// Level of the leaf (`LEVELS - 1` for a base page).
    pub level: usize,
    /// Bytes the leaf maps.
    pub size: u64,
}

impl<L: PageTableLayout, M: FrameSource + PhysMap + ?Sized> Walker<'_, L, M> {
    /// What `va` translates to, or `None` when nothing maps it (including
    /// non-canonical addresses, which fault on the hardware).
    pub fn translate(&self, va: VirtAddr) -> Option<Translation> {
        if !L::is_canonical(va) {
            return None;
        }
        translate_from::<L>(self.root(va), va, |pa, level| self.table(pa, level))
    }
}

/// The walk behind every translation: from the root table at `root` down
/// to the leaf mapping `va` (canonical), reading each table through
/// `table` (the walker's, or a [`LeafPath`](crate::LeafPath)'s view).
#[inline]
pub(crate) fn translate_from<L: PageTableLayout>(
    root: PhysAddr,
    va: VirtAddr,
    table: impl Fn(PhysAddr, usize) -> TableRef,
) -> Option<Translation> {
    let mut pa = root;
    for level in 0..L::LEVELS {
        let e = L::Entry::from_raw(table(pa, level).load(L::index(va, level)));
        match e.kind(level) {
            EntryKind::None => return None,
            EntryKind::Table if level + 1 < L::LEVELS => pa = e.addr(),
            EntryKind::Table => return None,
            EntryKind::Leaf => {
                let size = L::entry_span(level);
                let frame = e.addr();
                return Some(Translation {
                    phys: PhysAddr::new(frame.as_u64() + (va.as_u64() & (size - 1))),
                    frame,
                    flags: e.map_flags(),
                    level,
                    size,
                });
            }
        }
    }
    None
}

//! `BlockTree` as a space's busy index: what
//! [`Blocks`](crate::Blocks) asks of it. Each area carries the node
//! `VmapSpace` keeps for it (its `parked` flag, its place in the sharded
//! front's pools), so lookups by address answer with that node.

use super::{BlockTree, NONE, Path, Rec, Slot};
use crate::busy::BusyIndex;
use crate::error::VmapError;
use crate::node::{NodeArena, NodeIdx};
use crate::request::Fit;

/// A search's way down, kept for the change that follows it: the insert
/// of what [`BlockTree::lowest_fit`] found (`Ins`), the removal of what
/// `find_start_for_unlink` found, or of the area after the one a removal
/// in a run took out (`Del`). Any other change to the tree drops it (`None`: one
/// byte written, the way down left as it was).
#[derive(Clone, Copy)]
pub(super) struct Hint {
    pub(super) kind: HintKind,
    pub(super) found: Found,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum HintKind {
    None,
    Ins,
    Del,
}

impl Hint {
    pub(super) fn new() -> Hint {
        Hint {
            kind: HintKind::None,
            found: Found {
                key: 0,
                slot: Slot { leaf: NONE, i: 0 },
                gap: 0,
                path: Path::default(),
            },
        }
    }

    /// The way down kept for a change of kind `kind` at `key`, if any.
    #[inline]
    pub(super) fn take(&mut self, kind: HintKind, key: u64) -> Option<Found> {
        let hit = self.kind == kind && self.found.key == key;
        self.kind = HintKind::None;
        hit.then_some(self.found)
    }

    #[inline]
    pub(super) fn keep(&mut self, kind: HintKind, found: Found) {
        self.kind = kind;
        self.found = found;
    }
}

/// Where a search ended: for the address `key`, the slot, the gap there
/// (for an insert) and the way down.
#[derive(Clone, Copy)]
pub(super) struct Found {
    pub(super) key: u64,
    pub(super) slot: Slot,
    pub(super) gap: u64,
    pub(super) path: Path,
}

impl BlockTree {
    /// The lowest address satisfying `fit`, without taking it; counts the
    /// levels searched.
    pub(crate) fn lowest_fit(&mut self, fit: &Fit, visited: &mut u32) -> Option<u64> {
        let mut path = Path::default();
        *visited += self.height as u32 + 1;
        let (slot, a, gap) = self.search(&mut path, fit)?;
        self.hint.keep(
            HintKind::Ins,
            Found {
                key: a,
                slot,
                gap,
                path,
            },
        );
        Some(a)
    }

    /// Whether `[a, a + size)` (pages inside the space) is all free: the
    /// lowest fit within exactly that range is `a` or nothing.
    pub(crate) fn range_free(&mut self, a: u64, size: u64, visited: &mut u32) -> bool {
        let fit = Fit {
            size,
            align: self.page_size,
            phase: 0,
            nocross: 0,
            vstart: a,
            vend: a + size,
        };
        self.lowest_fit(&fit, visited) == Some(a)
    }

    /// Links `r`, whose range lies inside one gap, into that gap: the way
    /// down by address, as `free` goes.
    pub(super) fn insert_at(&mut self, r: Rec) -> Result<(), VmapError> {
        if let Some(f) = self.hint.take(HintKind::Ins, r.start) {
            let l = &self.leaves[f.slot.leaf as usize];
            if r.end <= l.rec[f.slot.i].start {
                return self.insert(&f.path, f.slot, r, f.gap);
            }
        }
        let taken = || VmapError::NoSpace {
            size: r.end - r.start,
            align: self.page_size,
            vstart: r.start,
            vend: r.end,
        };
        if r.start < self.start || r.end > self.end || r.start >= r.end {
            return Err(taken());
        }
        let mut path = Path::default();
        let mut leaf = self.descend(&mut path, r.start);
        let l = &self.leaves[leaf as usize];
        let mut i = l.rec.partition_point(|x| x.start < r.start);
        if i == l.n {
            // The gap is the one before the next leaf's first area (there
            // is a next leaf: the last one ends with the sentinel).
            self.next_path(&mut path);
            leaf = l.next;
            i = 0;
        }
        let l = &self.leaves[leaf as usize];
        let gs = if i > 0 { l.rec[i - 1].end } else { l.prev_end };
        let ge = l.rec[i].start;
        if r.start < gs || r.end > ge {
            return Err(taken());
        }
        self.insert(&path, Slot { leaf, i }, r, ge - gs)
    }

    /// The slot of the area starting at `key`, its way down kept for the
    /// removal that may follow.
    #[inline]
    pub(super) fn locate_for_unlink(&mut self, key: u64) -> Option<Slot> {
        let mut path = Path::default();
        let slot = self.locate(&mut path, key)?;
        self.hint.keep(
            HintKind::Del,
            Found {
                key,
                slot,
                gap: 0,
                path,
            },
        );
        Some(slot)
    }

    /// The slot after `s`, or `None` past the sentinel.
    fn next_slot(&self, s: Slot) -> Option<Slot> {
        let l = &self.leaves[s.leaf as usize];
        if s.i + 1 < l.n {
            return Some(Slot { i: s.i + 1, ..s });
        }
        (l.next != NONE).then_some(Slot { leaf: l.next, i: 0 })
    }

    /// The slot before `s`, or `None` at the first area.
    fn prev_slot(&self, s: Slot) -> Option<Slot> {
        if s.i > 0 {
            return Some(Slot { i: s.i - 1, ..s });
        }
        match self.prev_leaf(s.leaf) {
            NONE => None,
            p => Some(Slot {
                leaf: p,
                i: self.leaves[p as usize].n - 1,
            }),
        }
    }

    #[inline]
    fn rec(&self, s: Slot) -> Rec {
        self.leaves[s.leaf as usize].rec[s.i]
    }

    /// The slot of the area starting exactly at `key` (never the
    /// sentinel's).
    fn slot_of(&self, key: u64) -> Option<Slot> {
        self.locate(&mut Path::default(), key)
    }

    /// The node in slot `s` (`NIL` for the sentinel, whose word is
    /// `NONE`, the same value).
    #[inline]
    fn val(&self, s: Option<Slot>) -> NodeIdx {
        s.map_or(NONE, |s| self.rec(s).val)
    }
}

impl BusyIndex for BlockTree {
    fn new(start: u64, end: u64, page_size: u64) -> Result<Self, VmapError> {
        BlockTree::new(start, end, page_size)
    }

    #[inline]
    fn len(&self) -> usize {
        self.areas
    }

    fn insert<S: NodeArena>(&mut self, s: &mut S, n: NodeIdx) -> Result<(), VmapError> {
        let node = s.node(n);
        self.insert_at(Rec {
            start: node.start,
            end: node.end,
            val: n,
        })
    }

    fn reserve_insert(&mut self) -> Result<(), VmapError> {
        self.reserve_split()
    }

    fn remove<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx) {
        let r = BlockTree::remove(self, s.node(i).start);
        debug_assert!(matches!(r, Ok(r) if r.val == i), "node {i} is linked");
    }

    fn remove_in_run<S: NodeArena>(&mut self, s: &mut S, i: NodeIdx) {
        let r = BlockTree::remove_in_run(self, s.node(i).start);
        debug_assert!(matches!(r, Ok(r) if r.val == i), "node {i} is linked");
    }

    fn first<S: NodeArena>(&self, _: &S) -> NodeIdx {
        self.leaves[self.first_leaf() as usize].rec[0].val
    }

    fn next<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        let at = self.slot_of(s.node(i).start);
        self.val(at.and_then(|x| self.next_slot(x)))
    }

    fn prev<S: NodeArena>(&self, s: &S, i: NodeIdx) -> NodeIdx {
        let at = self.slot_of(s.node(i).start);
        self.val(at.and_then(|x| self.prev_slot(x)))
    }

    fn find_start<S: NodeArena>(&self, _: &S, key: u64, visited: &mut u32) -> NodeIdx {
        *visited += self.height as u32 + 1;
        self.val(self.slot_of(key))
    }

    fn find_start_for_unlink<S: NodeArena>(
        &mut self,
        _: &S,
        key: u64,
        visited: &mut u32,
    ) -> NodeIdx {
        *visited += self.height as u32 + 1;
        let slot = self.locate_for_unlink(key);
        self.val(slot)
    }

    fn find_start_in_run<S: NodeArena>(&mut self, s: &S, key: u64, visited: &mut u32) -> NodeIdx {
        // The area after the one just removed (`remove_in_run` kept its way).
        if self.hint.kind == HintKind::Del && self.hint.found.key == key {
            return self.val(Some(self.hint.found.slot));
        }
        self.find_start_for_unlink(s, key, visited)
    }

    fn floor<S: NodeArena>(&self, _: &S, addr: u64, visited: &mut u32) -> NodeIdx {
        *visited += self.height as u32 + 1;
        let s = self.lookup(addr);
        // At or past the end of the space the sentinel is the floor: the
        // last area is the one before it.
        let s = s.and_then(|x| {
            if self.rec(x).val == NONE {
                self.prev_slot(x)
            } else {
                Some(x)
            }
        });
        self.val(s)
    }

    fn check<S: NodeArena>(&self, s: &S) -> Result<usize, &'static str> {
        let n = self.check_tree()?;
        let mut leaf = self.first_leaf();
        let mut seen = 0;
        while leaf != NONE {
            let l = &self.leaves[leaf as usize];
            for r in &l.rec[..l.n] {
                if r.val == NONE {
                    continue;
                }
                let node = s.node(r.val);
                if (node.start, node.end) != (r.start, r.end) {
                    return Err("block tree area and its node disagree");
                }
                seen += 1;
            }
            leaf = l.next;
        }
        if seen != n {
            return Err("block tree area without a node");
        }
        Ok(n)
    }
}

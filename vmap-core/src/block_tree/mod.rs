//! `BlockTree`: a space's busy areas in one B+tree whose free blocks are the
//! gaps between them: the busy index of [`Blocks`](crate::Blocks), the
//! default policy with `alloc` (issue 20's aged workload).
//!
//! The other policies keep two trees, one of busy areas (to find an area
//! by address) and one of free blocks (to find the lowest fit), and an
//! allocation or a free changes both: about 1 500 instructions a step at
//! 1 000 live areas, and a cache miss per level at 100 000. Here the busy
//! areas are the only records: wide leaves hold their `[start, end)` in
//! address order, the free block before an area is the gap between it and
//! the area before it, and every inner slot keeps the largest gap below it,
//! as the 2026 maple-tree RFC for vmalloc does. An allocation inserts one
//! record, a free removes one; the lowest fit is one descent (more only when
//! alignment rules out a gap that is large enough).
//!
//! Nodes are only ever split, never rebalanced: a node that empties is
//! unlinked, one that thins out stays (a steady workload refills it).
//! `alloc` and `free` keep the way down and carry a gap change up it,
//! stopping at the first level whose largest gap does not move; splits and
//! unlinks (`shape.rs`) are rare and use parent links.
//!
//! Under `VmapSpace` (`index.rs`) each area carries the space's node for
//! it (its `parked` flag, the sharded front's pools), and a search keeps
//! its way down for the insert or removal that follows; a removal in a
//! purge's run keeps the way to the area after it, so a run of neighbours
//! is unlinked without a descent each. Its own nodes
//! come from a `Vec` (hence `alloc`), reserved before a split so that a
//! heap that cannot grow makes an allocation fail, not panic.
//!
//! On its own (this module is public with the `testing` feature) it takes
//! [`AllocRequest`]s with `VmapSpace`'s errors and placement: `harness
//! vmap-bench --pattern aged --allocator vmap-core-blocktree` measures the
//! tree without the space around it (BENCHMARKS.md, sessions 23-24), and
//! vmap-core's differential test runs it beside the policies.

use crate::VirtAddr;
use crate::error::VmapError;
use crate::request::AllocRequest;
use crate::space::check_space;
use alloc::vec::Vec;
use index::{Hint, HintKind};

mod check;
mod index;
mod search;
mod shape;

/// Records per leaf and children per inner node: a leaf's records are six
/// cache lines, an inner node's separators and gaps four.
const B: usize = 16;
const NONE: u32 = u32::MAX;

/// A busy area `[start, end)` and the caller's word for it (`VmapSpace`'s
/// node; `NONE` for areas of [`BlockTree::alloc`]), side by side, so a
/// shift is one copy and a scan reads one line for both ends.
#[derive(Clone, Copy)]
struct Rec {
    start: u64,
    end: u64,
    val: u32,
}

impl Rec {
    /// An unused slot: it sorts after every area.
    const UNUSED: Rec = Rec {
        start: u64::MAX,
        end: u64::MAX,
        val: NONE,
    };

    /// `[a, a + size)`, with no word of the caller's.
    fn new(a: u64, size: u64) -> Rec {
        Rec {
            start: a,
            end: a + size,
            val: NONE,
        }
    }
}

#[derive(Clone)]
struct Leaf {
    n: usize,
    /// Areas in address order; [`Rec::UNUSED`] from `n` on, so a search
    /// may run over the whole array (a fixed-length search the compiler
    /// unrolls).
    rec: [Rec; B],
    /// End of the last area of the leaf before (the space's start for the
    /// first leaf): the gap before slot 0 is `start[0] - prev_end`.
    prev_end: u64,
    next: u32,
    parent: u32,
}

#[derive(Clone)]
struct Inner {
    n: usize,
    child: [u32; B],
    /// Separators: every start in child `c` is `>= key[c]` and `<
    /// key[c + 1]`; `key[0]` is not used, and `key[c]` is `u64::MAX` from
    /// `n` on (as a leaf's unused starts).
    key: [u64; B],
    /// The largest gap before any record below child `c`; 0 from `n` on,
    /// so the node's largest is a maximum over the whole array, which the
    /// compiler unrolls.
    gap: [u64; B],
    parent: u32,
}

impl Inner {
    fn max_gap(&self) -> u64 {
        self.gap.iter().fold(0, |m, &g| m.max(g))
    }
}

/// Deepest tree [`Path`] holds. A root split needs a full root, whose
/// children each came from a split of a full node, and so on down: height
/// `h` takes at least `8^(h - 1)` leaf splits, some 8.6 billion for 12.
const MAX_HEIGHT: usize = 12;

/// The way down from the root: inner node `node[k]` at level `k` (the root
/// is 0) and the child `pos[k]` taken in it.
#[derive(Default, Clone, Copy)]
struct Path {
    node: [u32; MAX_HEIGHT],
    pos: [u8; MAX_HEIGHT],
}

/// Where an area was found: leaf and slot.
#[derive(Clone, Copy)]
struct Slot {
    leaf: u32,
    i: usize,
}

/// A space `[start, end)` of busy areas with lowest-fit allocation; see the
/// module documentation.
///
/// ```
/// use vmap_core::block_tree::BlockTree;
/// use vmap_core::{AllocRequest, VirtAddr, VmapError};
///
/// const PAGE: u64 = 4096;
/// let mut t = BlockTree::new(0x1000_0000, 0x2000_0000, PAGE)?;
/// let a = t.alloc(4 * PAGE, PAGE)?;
/// let b = t.alloc(PAGE, PAGE)?;
/// assert_eq!((a, b), (0x1000_0000, a + 4 * PAGE)); // lowest fit first
/// assert_eq!(t.free(a), Ok(4 * PAGE));
/// assert_eq!(t.alloc(2 * PAGE, 2 * PAGE), Ok(a)); // the hole, aligned
/// assert_eq!(t.find_area(b + 5), Some((b, b + PAGE)));
/// // The vmem constraints, as `VmapSpace::alloc_request` takes them.
/// let q = AllocRequest::exact(VirtAddr::new(b + PAGE), PAGE, PAGE);
/// assert_eq!(t.alloc_request(&q), Ok(b + PAGE));
/// assert!(matches!(t.alloc_request(&q), Err(VmapError::NoSpace { .. })));
/// # Ok::<(), VmapError>(())
/// ```
pub struct BlockTree {
    leaves: Vec<Leaf>,
    inners: Vec<Inner>,
    free_leaves: Vec<u32>,
    free_inners: Vec<u32>,
    /// The root: a leaf while `height == 0`, else an inner node.
    root: u32,
    height: usize,
    start: u64,
    end: u64,
    page_size: u64,
    areas: usize,
    /// What the last search found, for the change that follows it.
    hint: Hint,
}

impl BlockTree {
    /// An empty space `[start, end)` of pages of `page_size` bytes (the
    /// errors of [`VmapSpace::new`](crate::VmapSpace::new)).
    pub fn new(start: u64, end: u64, page_size: u64) -> Result<Self, VmapError> {
        check_space(start, end, page_size)?;
        // A zero-length sentinel at `end` makes the gap after the last area
        // the gap before it, so every gap belongs to a record.
        let mut leaf = Leaf {
            n: 1,
            rec: [Rec::UNUSED; B],
            prev_end: start,
            next: NONE,
            parent: NONE,
        };
        leaf.rec[0] = Rec {
            start: end,
            end,
            val: NONE,
        };
        Ok(Self {
            leaves: alloc::vec![leaf],
            inners: Vec::new(),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: 0,
            height: 0,
            start,
            end,
            page_size,
            areas: 0,
            hint: Hint::new(),
        })
    }

    /// The space's first byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the space's last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Busy areas.
    pub fn len(&self) -> usize {
        self.areas
    }

    /// Whether no area is busy.
    pub fn is_empty(&self) -> bool {
        self.areas == 0
    }

    /// Allocates `size` bytes at the lowest address that is a multiple of
    /// `align` and fits anywhere in the space; returns the address.
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, VmapError> {
        let req = AllocRequest::new(
            size,
            align,
            VirtAddr::new(self.start),
            VirtAddr::new(self.end),
        );
        // The common request, checked in a few instructions: `validate`
        // only for an error.
        let plain =
            size != 0 && (size | align) & (self.page_size - 1) == 0 && align.is_power_of_two();
        if !plain {
            return self.alloc_request(&req);
        }
        let mut path = Path::default();
        match self.find_whole(&mut path, size, align) {
            Some((s, a, gap)) => {
                self.insert(&path, s, Rec::new(a, size), gap)?;
                Ok(a)
            }
            None => Err(match req.validate(self.start, self.end, self.page_size) {
                Ok(fit) => fit.no_space(),
                Err(e) => e,
            }),
        }
    }

    /// Allocates what `req` asks for (bounds, `phase`, `nocross`, an exact
    /// address) at the lowest address that satisfies it, with the errors
    /// and the placement of [`VmapSpace::alloc_request`](crate::VmapSpace::alloc_request).
    pub fn alloc_request(&mut self, req: &AllocRequest) -> Result<u64, VmapError> {
        let fit = req.validate(self.start, self.end, self.page_size)?;
        let mut path = Path::default();
        let (s, a, gap) = self.search(&mut path, &fit).ok_or_else(|| fit.no_space())?;
        self.insert(&path, s, Rec::new(a, fit.size), gap)?;
        Ok(a)
    }

    /// Puts `r` before slot `s`, into the gap of `gap` bytes that a search
    /// down `path` chose. Fails only when a split finds no memory, with
    /// nothing changed.
    fn insert(&mut self, path: &Path, s: Slot, r: Rec, gap: u64) -> Result<(), VmapError> {
        self.hint.kind = HintKind::None;
        if self.leaves[s.leaf as usize].n == B {
            // A split: the rare, general way.
            self.reserve_split()?;
            self.insert_splitting(s, r);
            self.areas += 1;
            return Ok(());
        }
        self.areas += 1;
        let a = r.start;
        if s.i == 0 {
            self.lower_separator(path, a);
        }
        let l = &mut self.leaves[s.leaf as usize];
        l.rec.copy_within(s.i..l.n, s.i + 1);
        l.rec[s.i] = r;
        l.n += 1;
        // The gap it went into split in two: the leaf's largest gap can
        // only have shrunk, and only if it was this one.
        if let Some(k) = self.height.checked_sub(1) {
            let (p, c) = (path.node[k], path.pos[k] as usize);
            if self.inners[p as usize].gap[c] == gap {
                let m = self.leaf_gap(s.leaf);
                self.lower_gap(path, k, m);
            }
        }
        Ok(())
    }

    /// Frees the area starting at `addr`; returns its size.
    pub fn free(&mut self, addr: u64) -> Result<u64, VmapError> {
        self.remove(addr).map(|r| r.end - r.start)
    }

    /// Takes out the area starting at `addr`, whose gap joins the gaps on
    /// either side.
    fn remove(&mut self, addr: u64) -> Result<Rec, VmapError> {
        self.remove_at(addr, false)
    }

    /// [`remove`](Self::remove) in a run of removals in address order (a
    /// purge): keeps the way to the area after `addr` for the next one.
    fn remove_in_run(&mut self, addr: u64) -> Result<Rec, VmapError> {
        self.remove_at(addr, true)
    }

    #[inline(always)]
    fn remove_at(&mut self, addr: u64, keep_next: bool) -> Result<Rec, VmapError> {
        // A lookup for this very removal went down already (`VmapSpace`
        // looks an area up, checks it, then unlinks it).
        let hint = self.hint.take(HintKind::Del, addr);
        let (mut path, leaf, i) = match hint {
            Some(f) => (f.path, f.slot.leaf, f.slot.i),
            None => {
                let mut path = Path::default();
                match self.locate(&mut path, addr) {
                    Some(s) => (path, s.leaf, s.i),
                    None => return Err(VmapError::NotFound { addr }),
                }
            }
        };
        let l = &self.leaves[leaf as usize];
        let r = l.rec[i];
        // Where the area after it is now, with its way down in `path`.
        let mut after = None;
        if l.n == 1 {
            // The leaf empties: the rare, general way.
            self.remove_leaf(leaf);
        } else if i + 1 == l.n {
            // The gap before it moves to the next leaf, with it (there is
            // one: the last leaf ends with the sentinel, never freed, so
            // the tree has inner nodes too).
            let k = self.height - 1;
            let l = &mut self.leaves[leaf as usize];
            l.n -= 1;
            l.rec[i] = Rec::UNUSED;
            let (last, next) = (l.rec[i - 1].end, l.next);
            let m = self.leaf_gap(leaf);
            self.lower_gap(&path, k, m);
            let n = &mut self.leaves[next as usize];
            n.prev_end = last;
            let gap = n.rec[0].start - last;
            self.next_path(&mut path);
            self.raise_gap(&path, k, gap);
            after = Some(Slot { leaf: next, i: 0 });
        } else {
            let l = &mut self.leaves[leaf as usize];
            let prev = if i > 0 { l.rec[i - 1].end } else { l.prev_end };
            let merged = l.rec[i + 1].start - prev;
            l.rec.copy_within(i + 1..l.n, i);
            l.n -= 1;
            l.rec[l.n] = Rec::UNUSED;
            if let Some(k) = self.height.checked_sub(1) {
                self.raise_gap(&path, k, merged);
            }
            after = Some(Slot { leaf, i });
        }
        self.areas -= 1;
        // The next removal of a run is likely the area after this one,
        // whose slot and way down are known now (kept like a lookup's, so
        // any change drops it). Not kept for a lone removal: the copy
        // costs every free ~30 instructions (BENCHMARKS.md, session 25).
        if let Some(slot) = after.filter(|_| keep_next) {
            let key = self.leaves[slot.leaf as usize].rec[slot.i].start;
            if key != self.end {
                self.hint.keep(
                    HintKind::Del,
                    index::Found {
                        key,
                        slot,
                        gap: 0,
                        path,
                    },
                );
            }
        }
        Ok(r)
    }

    /// The slot of the area starting exactly at `addr` (never the
    /// sentinel's), in the leaf the separators put it in; `path` is left
    /// holding the way down. The leaf step is a scan, not the fixed-length
    /// binary search: each of that search's four steps waits for the load
    /// before it, which cost the sharded front's pooled free ~20 ns a call
    /// in a space of a few areas (BENCHMARKS.md, session 24).
    #[inline]
    fn locate(&self, path: &mut Path, addr: u64) -> Option<Slot> {
        let leaf = self.descend(path, addr);
        let l = &self.leaves[leaf as usize];
        let i = l.rec[..l.n].iter().position(|r| r.start >= addr)?;
        (l.rec[i].start == addr && addr != self.end).then_some(Slot { leaf, i })
    }

    /// The busy area containing `addr`, as `(start, end)`.
    pub fn find_area(&self, addr: u64) -> Option<(u64, u64)> {
        let s = self.lookup(addr)?;
        let l = &self.leaves[s.leaf as usize];
        (addr < l.rec[s.i].end).then(|| (l.rec[s.i].start, l.rec[s.i].end))
    }

    /// The leaf whose separators cover `addr`; `path` holds the way down.
    fn descend(&self, path: &mut Path, addr: u64) -> u32 {
        let mut node = self.root;
        for k in 0..self.height {
            let n = &self.inners[node as usize];
            // Unused keys are `u64::MAX`: only an `addr` of `u64::MAX`
            // counts them.
            let c = n.key[1..].partition_point(|&key| key <= addr).min(n.n - 1);
            path.node[k] = node;
            path.pos[k] = c as u8;
            node = n.child[c];
        }
        node
    }

    /// Sets the gap of `path`'s child at level `k` to `v`, no more than it
    /// was, and carries the change up while it changes a node's largest.
    fn lower_gap(&mut self, path: &Path, mut k: usize, mut v: u64) {
        loop {
            let n = &mut self.inners[path.node[k] as usize];
            let c = path.pos[k] as usize;
            let old = n.gap[c];
            if old == v {
                return;
            }
            n.gap[c] = v;
            let Some(up) = k.checked_sub(1) else { return };
            // The node's largest gap as its parent has it.
            if old < self.inners[path.node[up] as usize].gap[path.pos[up] as usize] {
                return;
            }
            let n = &self.inners[path.node[k] as usize];
            v = n.max_gap();
            k = up;
        }
    }

    /// Makes sure the separator in front of `path`'s leaf is at most `key`.
    fn lower_separator(&mut self, path: &Path, key: u64) {
        for k in (0..self.height).rev() {
            let c = path.pos[k] as usize;
            if c > 0 {
                let n = &mut self.inners[path.node[k] as usize];
                n.key[c] = n.key[c].min(key);
                return;
            }
        }
    }

    /// Moves `path` to the next leaf (there is one).
    fn next_path(&self, path: &mut Path) {
        let mut k = self.height - 1;
        while path.pos[k] as usize + 1 == self.inners[path.node[k] as usize].n {
            k -= 1;
        }
        path.pos[k] += 1;
        for j in k + 1..self.height {
            let up = &self.inners[path.node[j - 1] as usize];
            path.node[j] = up.child[path.pos[j - 1] as usize];
            path.pos[j] = 0;
        }
    }

    /// Raises the gap of `path`'s child at level `k` to `v` and up, while
    /// `v` is larger than what a level has.
    fn raise_gap(&mut self, path: &Path, k: usize, v: u64) {
        for k in (0..=k).rev() {
            let g = &mut self.inners[path.node[k] as usize].gap[path.pos[k] as usize];
            if *g >= v {
                return;
            }
            *g = v;
        }
    }

    /// The slot of the last record starting at or below `addr`.
    fn lookup(&self, addr: u64) -> Option<Slot> {
        let node = self.descend(&mut Path::default(), addr);
        let l = &self.leaves[node as usize];
        match l.rec.partition_point(|r| r.start <= addr).min(l.n) {
            // A separator is a lower bound, not the leaf's first start: the
            // record before `addr` may end the leaf before.
            0 => match self.prev_leaf(node) {
                NONE => None,
                p => Some(Slot {
                    leaf: p,
                    i: self.leaves[p as usize].n - 1,
                }),
            },
            i => Some(Slot {
                leaf: node,
                i: i - 1,
            }),
        }
    }

    fn leaf_gap(&self, leaf: u32) -> u64 {
        let l = &self.leaves[leaf as usize];
        let mut prev = l.prev_end;
        let mut max = 0;
        for i in 0..l.n {
            max = max.max(l.rec[i].start - prev);
            prev = l.rec[i].end;
        }
        max
    }

    /// Every area in address order (for tests and checks).
    pub fn areas(&self) -> Vec<(u64, u64)> {
        let mut leaf = self.first_leaf();
        let mut out = Vec::new();
        while leaf != NONE {
            let l = &self.leaves[leaf as usize];
            out.extend((0..l.n).map(|i| (l.rec[i].start, l.rec[i].end)));
            leaf = l.next;
        }
        out.pop(); // the sentinel
        out
    }

    fn first_leaf(&self) -> u32 {
        let mut node = self.root;
        for _ in 0..self.height {
            node = self.inners[node as usize].child[0];
        }
        node
    }
}

#[cfg(test)]
mod tests;

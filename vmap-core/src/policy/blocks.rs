//! `blocks` (the default with `alloc`): no free index at all. The busy
//! areas live in one B+tree ([`crate::block_tree`]) whose inner slots keep
//! the largest gap below them, so the free blocks are the gaps between
//! areas and the lowest fit is one descent through the nodes a free walks
//! too: one record inserted per allocation, one removed per free, where
//! the other policies change two trees (the shape of the 2026 maple-tree
//! RFC for vmalloc, and of issue 20's aged workload).
//!
//! Its nodes come from the heap (feature `alloc`), not from the space's
//! [`NodeSource`](crate::NodeSource): a space that cannot grow them
//! refuses the allocation with [`VmapError::NodePoolExhausted`].

use super::{BusyView, FreeAreaSearch, Search};
use crate::block_tree::BlockTree;
use crate::error::VmapError;
use crate::node::{NodeArena, NodeIdx};
use crate::request::Fit;

/// Lowest fit through the gaps of the busy index itself.
///
/// ```
/// use vmap_core::{Blocks, VecSource, VirtAddr, VmapError, VmapSpace};
///
/// const PAGE: u64 = 4096;
/// let (start, end) = (VirtAddr::new(0x1000_0000), VirtAddr::new(0x2000_0000));
/// let mut space = VmapSpace::<Blocks, _>::new(start, end, PAGE, VecSource::new())?;
/// let a = space.alloc(4 * PAGE, PAGE, start, end)?;
/// let b = space.alloc(PAGE, PAGE, start, end)?;
/// space.free(a.va_start)?;
/// // The gap `a` left is the lowest fit for an aligned pair of pages.
/// let c = space.alloc(2 * PAGE, 2 * PAGE, start, end)?;
/// assert_eq!(c.va_start, start);
/// assert_eq!(space.find(b.va_start), Some(b));
/// space.check_invariants().unwrap();
/// # Ok::<(), VmapError>(())
/// ```
pub struct Blocks;

impl FreeAreaSearch for Blocks {
    const NAME: &'static str = "blocks";
}

impl Search for Blocks {
    type Busy = BlockTree;

    fn init<S: NodeArena>(_: &mut S, _: u64, _: u64) -> Result<Self, VmapError> {
        Ok(Blocks)
    }

    #[inline]
    fn find_fit<S: NodeArena>(
        &mut self,
        _: &S,
        busy: &mut BlockTree,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        busy.lowest_fit(fit, visited)
    }

    fn find_exact<S: NodeArena>(
        &mut self,
        _: &S,
        busy: &mut BlockTree,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> bool {
        busy.range_free(a, size, visited)
    }

    /// Nothing to take apart: linking the area into the busy index
    /// (`BusyIndex::insert`) is what takes its range.
    #[inline]
    fn claim<S: NodeArena>(
        &mut self,
        _: &mut S,
        _: u64,
        _: u64,
        _: NodeIdx,
    ) -> Result<(), VmapError> {
        Ok(())
    }

    fn wants_prev(&self) -> bool {
        false
    }

    /// Unlinking the area from the busy index gave its range back already.
    #[inline]
    fn release<S: NodeArena>(&mut self, _: &mut S, _: u64, _: u64, _: NodeIdx, _: NodeIdx) -> bool {
        false
    }

    /// The busy index checks its gaps itself (`BusyIndex::check`).
    fn check<S: NodeArena>(
        &self,
        _: &S,
        _: &BusyView<'_, BlockTree>,
        _: u64,
        _: u64,
    ) -> Result<(), &'static str> {
        Ok(())
    }
}

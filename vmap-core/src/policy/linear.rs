//! `linear`: the 2010 baseline. Every allocation searches the busy tree for
//! the first area at `vstart` and walks forward over busy areas until a hole
//! fits — with many lazily freed areas in the tree that walk visited
//! thousands of nodes per allocation (≈5535 in 2010's loop of a million
//! vmalloc / touch / vfree, which took ~150 s on 8 cores, 10× eager purging).

use super::{BusyTree, BusyView, FreeAreaSearch, Search, busy_range_free, walk};
use crate::error::VmapError;
use crate::node::{NodeArena, NodeIdx};
use crate::request::Fit;

/// The uncached search from `vstart` (pre-2.6.36 `alloc_vmap_area`).
#[derive(Debug, Default)]
pub struct Linear;

impl FreeAreaSearch for Linear {
    const NAME: &'static str = "linear";
}

impl Search for Linear {
    type Busy = BusyTree;

    fn init<S: NodeArena>(_: &mut S, _: u64, _: u64) -> Result<Self, VmapError> {
        Ok(Self)
    }

    fn find_fit<S: NodeArena>(
        &mut self,
        s: &S,
        busy: &mut BusyTree,
        fit: &Fit,
        visited: &mut u32,
    ) -> Option<u64> {
        let addr = fit.candidate(fit.vstart)?;
        let first = busy.first_end_above(s, addr, visited);
        walk(s, busy, fit, addr, first, &mut 0, visited)
    }

    fn find_exact<S: NodeArena>(
        &mut self,
        s: &S,
        busy: &mut BusyTree,
        a: u64,
        size: u64,
        visited: &mut u32,
    ) -> bool {
        busy_range_free(s, busy, a, size, visited)
    }

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

    fn release<S: NodeArena>(&mut self, _: &mut S, _: u64, _: u64, _: NodeIdx, _: NodeIdx) -> bool {
        false
    }

    fn check<S: NodeArena>(
        &self,
        _: &S,
        _: &BusyView<'_>,
        _: u64,
        _: u64,
    ) -> Result<(), &'static str> {
        Ok(())
    }
}

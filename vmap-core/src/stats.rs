//! Counters for the harness (feature `stats`): nodes visited per allocation
//! (in 2010 Linux's vmalloc visited ≈5535 tree nodes per allocation with lazy
//! freeing, 8 with the free area cache) and busy-tree searches per vfree (two
//! before Linux's 2022 find-and-unlink, one after).

/// Search counters of one [`VmapSpace`](crate::VmapSpace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmapStats {
    /// Allocation searches run.
    pub allocs: u64,
    /// Tree nodes visited by them, in total.
    pub nodes_visited: u64,
    /// The most nodes one allocation visited.
    pub nodes_visited_max: u32,
    /// Nodes the last allocation visited.
    pub last_nodes_visited: u32,
    /// Busy-tree searches made by vfree (`find_unlink`: 1 each;
    /// `free_two_search`: 2 each).
    pub free_searches: u64,
}

impl VmapStats {
    pub(crate) fn record_alloc(&mut self, visited: u32) {
        self.allocs += 1;
        self.nodes_visited += u64::from(visited);
        self.nodes_visited_max = self.nodes_visited_max.max(visited);
        self.last_nodes_visited = visited;
    }

    pub(crate) fn record_free_search(&mut self) {
        self.free_searches += 1;
    }

    /// Mean nodes visited per allocation.
    pub fn nodes_visited_avg(&self) -> f64 {
        if self.allocs == 0 {
            0.0
        } else {
            self.nodes_visited as f64 / self.allocs as f64
        }
    }
}

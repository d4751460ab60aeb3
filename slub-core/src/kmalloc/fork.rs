//! Every kmalloc cache's locks held across `fork` (see `cache/fork.rs`).

use super::Kmalloc;
use arch_api::Platform;

impl<K: Platform> Kmalloc<K> {
    /// [`KmemCache::lock_for_fork`](crate::KmemCache::lock_for_fork) on
    /// every size class, smallest first (`fork`'s prepare handler, after
    /// the embedder's per-CPU locks and before its page source's locks).
    pub fn lock_for_fork(&self) {
        for c in &self.caches {
            c.lock_for_fork();
        }
    }

    /// Releases what [`lock_for_fork`](Self::lock_for_fork) took, in the
    /// parent or in the child.
    ///
    /// # Safety
    /// As [`KmemCache::unlock_after_fork`](crate::KmemCache::unlock_after_fork),
    /// for every class.
    pub unsafe fn unlock_after_fork(&self) {
        for c in self.caches.iter().rev() {
            // SAFETY: forwarded: `lock_for_fork` took each.
            unsafe { c.unlock_after_fork() };
        }
    }
}

//! Holding every lock of a cache across `fork` (a hosted embedder's
//! `pthread_atfork` handlers, as `kmm-malloc` has).
//!
//! A child process has only the thread that forked; a lock another thread
//! held at that instant stays locked in the child for ever, and the child's
//! first slow-path allocation would wait on it. So the prepare handler takes
//! the locks first (after the embedder's per-CPU locks, which stop every
//! pinned section) and both sides release them after. The order is the
//! order the cache nests them: the deferred-free ring, the barn, the node's
//! partial list; the page source's own locks come after every cache's.

use super::KmemCache;
use arch_api::Platform;

impl<K: Platform> KmemCache<K> {
    /// Takes every lock of this cache and keeps them (`fork`'s prepare).
    /// Call with no lock of the cache held by this thread; pair with
    /// [`unlock_after_fork`](Self::unlock_after_fork) on both sides of the
    /// fork.
    pub fn lock_for_fork(&self) {
        self.deferred.ring.lock_held();
        self.sheaves.barn().lock_for_fork();
        self.slabs.node().list.lock_held();
    }

    /// Releases what [`lock_for_fork`](Self::lock_for_fork) took, in the
    /// parent or in the child.
    ///
    /// # Safety
    /// `lock_for_fork` was called on this cache (by this thread, or by the
    /// parent's thread that forked this child) and this is the only release.
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: the caller's contract: each lock is held by `lock_for_fork`.
        unsafe {
            self.slabs.node().list.unlock_held();
            self.sheaves.barn().unlock_after_fork();
            self.deferred.ring.unlock_held();
        }
    }
}

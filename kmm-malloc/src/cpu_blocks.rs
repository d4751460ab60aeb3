//! Per-CPU caches of freed region blocks, in front of the region's one
//! lock.
//!
//! Every block the region hands out (slab pages for slub-core, `malloc`'s
//! blocks above 16 KiB) used to go through one lock and two shared
//! counters. On a 16-core machine, glibc-thread (8 % of its blocks above
//! 16 KiB) ran 16x slower than mimalloc at 16 threads, all of it waiting
//! for that lock's line (BENCHMARKS.md, session 14). A block freed on a
//! CPU is now kept in that CPU's shard (up to [`SHARD_BYTES`]) and the next
//! request of the same size on that CPU takes it back without touching
//! anything another CPU writes.
//!
//! A shard is found by the CPU the thread runs on now (`rseq`'s `cpu_id`,
//! one load) and taken with a try-lock: a thread moved to another CPU
//! between the two, or two threads sharing a shard, find it busy and go to
//! the region's lock instead, so nothing here waits. The shards hold at
//! most `SHARDS x SHARD_BYTES` resident bytes, all of it counted in
//! [`Region::cached`](crate::region::Region::cached) and given back by
//! `trim`.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicIsize, Ordering};
use crossbeam_utils::CachePadded;
use lock_api::RawMutex as _;

use crate::platform::YieldLock;

/// Shards (a power of two; CPU `c` uses shard `c % SHARDS`).
pub const SHARDS: usize = 64;
/// Blocks of at most this many pages (64 KiB) are cached per CPU.
pub const MAX_PAGES: usize = 16;
/// Resident bytes one shard keeps at most (a block that would go past it
/// goes to the region's lists).
pub const SHARD_BYTES: usize = 1 << 20;

/// One CPU's cache ([`CpuBlocks::here`]).
pub struct Shard {
    lock: YieldLock,
    /// Under `lock`: a list per page count, linked through each free
    /// block's first word, and the bytes on them.
    lists: UnsafeCell<([usize; MAX_PAGES + 1], usize)>,
    /// Bytes handed out minus bytes given back by threads on this shard
    /// (a block freed on another CPU makes one shard negative and another
    /// positive; only the sum means anything).
    in_use: AtomicIsize,
}

impl Shard {
    /// Counts bytes handed out (`delta > 0`) or given back.
    #[inline]
    pub fn count(&self, delta: isize) {
        self.in_use.fetch_add(delta, Ordering::Relaxed);
    }

    /// A cached block of `pages` pages aligned to `align`, from the
    /// shard, if it has one and nobody holds the shard.
    #[inline]
    pub fn take(&self, pages: usize, align: usize) -> Option<usize> {
        if pages > MAX_PAGES {
            return None;
        }
        if !self.lock.try_lock() {
            return None;
        }
        // SAFETY: under the shard's lock.
        let (lists, bytes) = unsafe { &mut *self.lists.get() };
        let b = lists[pages];
        let got = (b != 0 && b % align == 0).then(|| {
            // SAFETY: a listed block is free, mapped and resident; its first
            // word is the link, which becomes the caller's (zeroed).
            unsafe {
                lists[pages] = *(b as *const usize);
                *(b as *mut usize) = 0;
            }
            *bytes -= pages * crate::region::PAGE;
            b
        });
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        got
    }

    /// Keeps the freed, resident block `b` of `pages` pages in this shard;
    /// false if it does not fit (the caller gives it to the region).
    ///
    /// # Safety
    /// `b` is a free region block of `pages` pages, mapped, unused.
    #[inline]
    pub unsafe fn keep(&self, b: usize, pages: usize) -> bool {
        let len = pages * crate::region::PAGE;
        if pages > MAX_PAGES {
            return false;
        }
        if !self.lock.try_lock() {
            return false;
        }
        // SAFETY: under the shard's lock.
        let (lists, bytes) = unsafe { &mut *self.lists.get() };
        let kept = *bytes + len <= SHARD_BYTES;
        if kept {
            // SAFETY: the caller's block; its first word is the link now.
            unsafe { *(b as *mut usize) = lists[pages] };
            lists[pages] = b;
            *bytes += len;
        }
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        kept
    }
}

/// The shards.
pub struct CpuBlocks {
    shards: [CachePadded<Shard>; SHARDS],
}

// SAFETY: a shard's `lists` is only touched under its `lock`.
unsafe impl Sync for CpuBlocks {}

impl CpuBlocks {
    /// Empty shards.
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const EMPTY: CachePadded<Shard> = CachePadded::new(Shard {
            lock: YieldLock::INIT,
            lists: UnsafeCell::new(([0; MAX_PAGES + 1], 0)),
            in_use: AtomicIsize::new(0),
        });
        Self {
            shards: [EMPTY; SHARDS],
        }
    }

    /// The shard of the CPU the caller runs on now (one `rseq` load; the
    /// thread may move on, which only makes it use another CPU's shard).
    #[inline(always)]
    pub fn here(&self) -> &Shard {
        &self.shards[arch_api::cpu::linux::raw_cpu() % SHARDS]
    }

    /// Bytes handed out over every shard.
    pub fn in_use(&self) -> usize {
        let s: isize = self
            .shards
            .iter()
            .map(|s| s.in_use.load(Ordering::Relaxed))
            .sum();
        s.max(0) as usize
    }

    /// Empties every shard into `f(block, pages)`, returning the bytes
    /// moved; shards busy right now are left as they are.
    pub fn drain(&self, mut f: impl FnMut(usize, usize)) -> usize {
        let mut moved = 0;
        for shard in &self.shards {
            if !shard.lock.try_lock() {
                continue;
            }
            // SAFETY: under the shard's lock.
            let (lists, bytes) = unsafe { &mut *shard.lists.get() };
            for (pages, head) in lists.iter_mut().enumerate() {
                let mut b = core::mem::take(head);
                while b != 0 {
                    // SAFETY: a listed block; its link is read before `f`
                    // reuses the word.
                    let next = unsafe { *(b as *const usize) };
                    f(b, pages);
                    b = next;
                }
            }
            moved += core::mem::take(bytes);
            // SAFETY: we hold it.
            unsafe { shard.lock.unlock() };
        }
        moved
    }

    /// Resident bytes held by the shards (a racy sum, for reports).
    pub fn cached(&self) -> usize {
        self.shards
            .iter()
            // SAFETY: a racy read of a word for a report; a torn value is
            // impossible for an aligned usize on the targets we build for.
            .map(|s| unsafe { core::ptr::read_volatile(&(*s.lists.get()).1) })
            .sum()
    }

    /// Takes every shard's lock (`fork`'s prepare handler), so no list is
    /// half-updated in the child.
    pub fn lock_all(&self) {
        for s in &self.shards {
            s.lock.lock();
        }
    }

    /// Releases them.
    ///
    /// # Safety
    /// After [`lock_all`](Self::lock_all).
    pub unsafe fn unlock_all(&self) {
        for s in &self.shards {
            // SAFETY: the caller's contract.
            unsafe { s.lock.unlock() };
        }
    }
}

/// Pins the calling thread to the CPU it runs on, so that every call of a
/// test finds the same shard (a migration between a `keep` and a `take`
/// would otherwise send the `take` to another shard).
#[cfg(test)]
pub(crate) fn pin_here() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; we set one bit and
    // pass its true size.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(libc::sched_getcpu() as usize, &mut set);
        let r = libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(r, 0, "sched_setaffinity");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::PAGE;
    use std::vec::Vec;

    /// `n` page-aligned blocks of `pages` pages, freed when dropped.
    struct Blocks(Vec<usize>, std::alloc::Layout);

    impl Drop for Blocks {
        fn drop(&mut self) {
            for &b in &self.0 {
                // SAFETY: allocated below with this layout.
                unsafe { std::alloc::dealloc(b as *mut u8, self.1) };
            }
        }
    }

    fn blocks(n: usize, pages: usize) -> Blocks {
        let l = std::alloc::Layout::from_size_align(pages * PAGE, PAGE).unwrap();
        // SAFETY: a non-zero size.
        let v = (0..n).map(|_| unsafe { std::alloc::alloc(l) as usize });
        let v: Vec<usize> = v.collect();
        assert!(v.iter().all(|&b| b != 0));
        Blocks(v, l)
    }

    /// What one CPU keeps it takes back, LIFO, by size and alignment; the
    /// byte bound holds; drain returns the rest.
    #[test]
    fn keeps_takes_bounds_and_drains() {
        pin_here();
        let c = CpuBlocks::new();
        let blk = blocks(3, 2);
        let b = &blk.0;
        // SAFETY: our blocks, unused.
        unsafe {
            assert!(c.here().keep(b[0], 2));
            assert!(c.here().keep(b[1], 2));
        }
        assert_eq!(c.cached(), 4 * PAGE);
        assert_eq!(c.here().take(3, PAGE), None, "no block of another size");
        assert_eq!(c.here().take(2, PAGE), Some(b[1]));
        // SAFETY: read the link word we were given.
        assert_eq!(unsafe { *(b[1] as *const usize) }, 0, "link cleared");
        assert_eq!(c.here().take(2, 1 << 40), None, "misaligned head");
        // SAFETY: our block, unused (and refused: too big).
        assert!(!unsafe { c.here().keep(b[2], MAX_PAGES + 1) }, "too big");
        let fit = SHARD_BYTES / (MAX_PAGES * PAGE);
        let big = blocks(fit + 1, MAX_PAGES);
        let mut kept = 0;
        // SAFETY: our blocks, unused, each kept at most once.
        while kept <= fit && unsafe { c.here().keep(big.0[kept], MAX_PAGES) } {
            kept += 1;
        }
        assert_eq!(
            kept,
            fit - 1,
            "the 8 KiB already kept leave room for one block fewer"
        );
        assert!(c.cached() <= SHARD_BYTES);
        let mut seen = Vec::new();
        let moved = c.drain(|p, pages| seen.push((p, pages)));
        assert_eq!(moved, 2 * PAGE + kept * MAX_PAGES * PAGE);
        assert_eq!(seen.len(), 1 + kept);
        assert!(seen.contains(&(b[0], 2)));
        assert_eq!(c.cached(), 0);
        assert_eq!(c.here().take(2, PAGE), None);
    }

    /// A shard somebody holds is skipped, never waited for.
    #[test]
    fn a_busy_shard_is_passed_by() {
        pin_here();
        let c = CpuBlocks::new();
        let blk = blocks(1, 1);
        let b = &blk.0;
        c.lock_all();
        // SAFETY: our block, unused.
        assert!(!unsafe { c.here().keep(b[0], 1) });
        assert_eq!(c.here().take(1, PAGE), None);
        assert_eq!(c.drain(|_, _| panic!("drained a locked shard")), 0);
        // SAFETY: after lock_all.
        unsafe { c.unlock_all() };
        // SAFETY: our block, unused, not kept before.
        assert!(unsafe { c.here().keep(b[0], 1) });
    }

    /// In-use counts from different shards add up.
    #[test]
    fn in_use_sums_over_shards() {
        let c = CpuBlocks::new();
        c.shards[0]
            .in_use
            .store(5 * PAGE as isize, Ordering::Relaxed);
        c.shards[7]
            .in_use
            .store(-(2 * PAGE as isize), Ordering::Relaxed);
        c.here().count(PAGE as isize);
        assert_eq!(c.in_use(), 4 * PAGE);
    }
}

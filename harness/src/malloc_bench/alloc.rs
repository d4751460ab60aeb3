//! The allocator seen by the workloads (glibc's or the preloaded
//! library's `malloc` through `System`, or the mimalloc crate), with every
//! object tagged at `alloc` and checked at `free`, the run's allocation and
//! free counts, a small generator and the block type handed between threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The allocator under test: glibc's (or the preloaded library's) malloc
/// through `System`, or the mimalloc crate.
#[derive(Clone, Copy)]
pub(super) struct A {
    pub(super) mi: bool,
    pub(super) allocs: &'static AtomicU64,
    pub(super) frees: &'static AtomicU64,
}

pub(super) const TAG: u64 = 0x6b6d_6d5f_7461_6721;

impl A {
    #[inline(always)]
    pub(super) fn alloc(&self, size: usize) -> *mut u8 {
        let l = Layout::from_size_align(size.max(8), 8).unwrap();
        // SAFETY: a non-zero size.
        let p = unsafe {
            if self.mi {
                mimalloc::MiMalloc.alloc(l)
            } else {
                System.alloc(l)
            }
        };
        assert!(!p.is_null(), "out of memory");
        // SAFETY: at least 8 bytes, 8-aligned.
        unsafe { (p as *mut u64).write(TAG ^ p as u64) };
        p
    }

    #[inline(always)]
    pub(super) fn free(&self, p: *mut u8, size: usize) {
        // SAFETY: `p` came from `alloc(size)` and is live.
        unsafe {
            assert_eq!(
                (p as *const u64).read(),
                TAG ^ p as u64,
                "object {p:?} overwritten or handed out twice"
            );
            let l = Layout::from_size_align(size.max(8), 8).unwrap();
            if self.mi {
                mimalloc::MiMalloc.dealloc(p, l)
            } else {
                System.dealloc(p, l)
            }
        }
    }
}

/// Counts kept per run: allocations and frees (they must match).
pub(super) struct Counts {
    pub(super) allocs: AtomicU64,
    pub(super) frees: AtomicU64,
}

pub(super) static COUNTS: Counts = Counts {
    allocs: AtomicU64::new(0),
    frees: AtomicU64::new(0),
};

/// A small xorshift generator (one per thread).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    #[inline(always)]
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    #[inline(always)]
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A block and its size (sent between threads).
#[derive(Clone, Copy)]
pub(super) struct Blk(pub(super) usize, pub(super) usize);
// The pointers are plain addresses handed between threads on purpose.

pub(super) fn count(a: &A, allocs: u64, frees: u64) {
    a.allocs.fetch_add(allocs, Ordering::Relaxed);
    a.frees.fetch_add(frees, Ordering::Relaxed);
}

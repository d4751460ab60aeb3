//! Deferred frees (`kfree_rcu`): the grace-period seam and the batches.
//!
//! An object given to [`KmemCache::free_deferred`](crate::KmemCache::free_deferred)
//! may still be read by readers that found it before it was unpublished; it
//! goes back to its slab only after a grace period of the OS's
//! [`GracePeriod`] has elapsed. As Linux's `rcu_free` sheaf, each CPU
//! collects such objects in a sheaf of its own (from the barn's pool) and
//! hands the whole sheaf over when it is full: one grace period per batch,
//! not per object. Handed-over batches wait in a short FIFO with the cookie
//! of their grace period; [`MAX_PENDING`] of them at most, so at most
//! `(MAX_PENDING + nr_cpus) * sheaf_capacity` objects are ever pending.

use crate::barn::Sheaf;
use crate::page_source::{PageSource, SlabPages};
use arch_api::sync::{Mutex, RawMutex};
use core::ptr::null_mut;
use core::sync::atomic::AtomicUsize;
#[cfg(not(kmm_loom))]
use core::sync::atomic::{AtomicPtr, Ordering};
#[cfg(kmm_loom)]
use loom::sync::atomic::{AtomicPtr, Ordering};

/// The OS's grace periods (RCU's polled API): what the cache needs to know
/// that no reader can still see an object.
///
/// `start` and `elapsed` are called under the calling CPU's guard and the
/// cache's deferred-free lock, so they must not sleep (Linux's
/// `start_poll_synchronize_rcu` / `poll_state_synchronize_rcu` do not);
/// `wait` is called with no lock or guard of the cache held.
///
/// # Example
///
/// A kernel without concurrent readers (every grace period is over at
/// once):
///
/// ```
/// struct NoReaders;
/// impl slub_core::GracePeriod for NoReaders {
///     fn start(&self) -> u64 { 0 }
///     fn elapsed(&self, _cookie: u64) -> bool { true }
/// }
/// ```
pub trait GracePeriod {
    /// Starts (or joins) a grace period that ends once every reader that
    /// may be inside now has left; returns its cookie. Cookies of later
    /// calls end no earlier.
    fn start(&self) -> u64;

    /// Whether the grace period of `cookie` has elapsed.
    fn elapsed(&self, cookie: u64) -> bool;

    /// Waits until the grace period of `cookie` has elapsed
    /// (`cond_synchronize_rcu`); `false` (the default) if the caller's
    /// context cannot wait, in which case the cache never frees the batch
    /// early but reports that it is full.
    fn wait(&self, cookie: u64) -> bool {
        let _ = cookie;
        false
    }
}

impl<G: GracePeriod + ?Sized> GracePeriod for &G {
    fn start(&self) -> u64 {
        (**self).start()
    }
    fn elapsed(&self, cookie: u64) -> bool {
        (**self).elapsed(cookie)
    }
    fn wait(&self, cookie: u64) -> bool {
        (**self).wait(cookie)
    }
}

/// Batches handed over and waiting for their grace period, per cache.
pub const MAX_PENDING: usize = 8;

/// Large blocks (over
/// [`KMALLOC_MAX_CACHE_SIZE`](crate::KMALLOC_MAX_CACHE_SIZE))
/// deferred by [`Kmalloc::free_deferred`](crate::Kmalloc::free_deferred)
/// and waiting, at most: as a cache's ring, [`MAX_PENDING`] batches, here
/// of eight blocks each (a block is over four pages, so this holds over
/// 1 MiB back). When they are all waiting the same rule applies as
/// for a cache: poll, then `gp.wait` for the oldest, else
/// [`FreeError::DeferredBacklog`](crate::FreeError::DeferredBacklog).
pub const MAX_LARGE_PENDING: usize = MAX_PENDING * 8;

/// One CPU's batch (`rcu_free` sheaf). Its owner CPU, pinned, takes the
/// batch out of the line (an atomic swap with null) to add an object and
/// puts it back; [`flush_deferred`](crate::KmemCache::flush_deferred) on
/// any CPU takes it out the same way to hand it over (Linux's
/// `kvfree_rcu_barrier` drains every CPU's batch). Whoever took it owns it
/// alone; one that finds the line empty leaves it (the owner is adding to
/// the batch at that moment). Nobody waits for anybody, and only deferred
/// frees pay for the two atomics: `alloc` and `free` never touch them.
#[repr(align(64))]
pub(crate) struct CpuBatch {
    batch: AtomicPtr<Sheaf>,
}

impl CpuBatch {
    /// Takes the batch out (null if none, or if a flusher has it).
    pub(crate) fn take(&self) -> *mut Sheaf {
        self.batch.swap(null_mut(), Ordering::Acquire)
    }

    /// Puts the batch taken with [`take`](Self::take) back (owner only:
    /// no one else puts a batch into a line, so it is still empty). A swap,
    /// not a plain store: ordered after a flusher's swap that found the
    /// line empty meanwhile (loom orders a plain store by causality alone
    /// and could put it before that swap).
    pub(crate) fn put(&self, b: *mut Sheaf) {
        let was = self.batch.swap(b, Ordering::AcqRel);
        debug_assert!(was.is_null(), "a deferred batch put into a full line");
    }

    /// [`take`](Self::take) for a flusher (another CPU's line).
    pub(crate) fn steal(&self) -> *mut Sheaf {
        #[cfg(kmm_loom)]
        if crate::loom_mutation::MUTATION.active(crate::loom_mutation::BATCH_STEAL_TWO_STEP) {
            // Broken variant: read, then emptied by a plain store; the
            // owner may have taken the batch in between.
            let b = self.batch.load(Ordering::Acquire);
            loom::thread::yield_now();
            self.batch.store(null_mut(), Ordering::Relaxed);
            return b;
        }
        self.take()
    }
}

/// The FIFO of handed-over batches and their cookies.
pub(crate) struct Ring {
    slots: [(*mut Sheaf, u64); MAX_PENDING],
    head: usize,
    len: usize,
}

// SAFETY: sheaves the cache owns, reached under the mutex.
unsafe impl Send for Ring {}

impl Ring {
    pub(crate) fn is_full(&self) -> bool {
        self.len == MAX_PENDING
    }
    pub(crate) fn push(&mut self, s: *mut Sheaf, cookie: u64) {
        debug_assert!(!self.is_full());
        self.slots[(self.head + self.len) % MAX_PENDING] = (s, cookie);
        self.len += 1;
    }
    /// The oldest batch's cookie.
    pub(crate) fn oldest(&self) -> Option<u64> {
        (self.len != 0).then(|| self.slots[self.head].1)
    }
    pub(crate) fn pop(&mut self) -> Option<*mut Sheaf> {
        if self.len == 0 {
            return None;
        }
        let s = self.slots[self.head].0;
        self.head = (self.head + 1) % MAX_PENDING;
        self.len -= 1;
        Some(s)
    }

    /// Takes the leading batches whose grace period has elapsed (FIFO:
    /// stops at the first that has not) into `out`; returns how many.
    pub(crate) fn take_elapsed<G: GracePeriod + ?Sized>(
        &mut self,
        gp: &G,
        out: &mut [*mut Sheaf; MAX_PENDING],
    ) -> usize {
        let mut n = 0;
        while let Some(c) = self.oldest() {
            if !crate::loom_hooks::deferred_no_grace() && !gp.elapsed(c) {
                break;
            }
            out[n] = self.pop().unwrap_or(null_mut());
            n += 1;
        }
        n
    }
}

/// A cache's deferred-free state.
pub(crate) struct Deferred<R: RawMutex> {
    /// The per-CPU batch lines, allocated on first use (null before).
    lines: AtomicPtr<CpuBatch>,
    nr_cpus: usize,
    pub(crate) ring: Mutex<R, Ring>,
    /// Objects deferred and not yet freed (in CPU batches or the ring).
    count: AtomicUsize,
}

impl<R: RawMutex> Deferred<R> {
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Self {
            lines: AtomicPtr::new(null_mut()),
            nr_cpus,
            ring: Mutex::new(Ring {
                slots: [(null_mut(), 0); MAX_PENDING],
                head: 0,
                len: 0,
            }),
            count: AtomicUsize::new(0),
        }
    }

    fn lines_bytes<P: PageSource>(&self, pages: &P) -> usize {
        (self.nr_cpus * core::mem::size_of::<CpuBatch>()).next_multiple_of(pages.page_size())
    }

    /// CPU `cpu`'s line, allocating the array on first use (`None`: no
    /// memory for it).
    pub(crate) fn line<P: PageSource>(&self, pages: &P, cpu: usize) -> Option<&CpuBatch> {
        debug_assert!(cpu < self.nr_cpus);
        let mut base = self.lines.load(Ordering::Acquire);
        if base.is_null() {
            let bytes = self.lines_bytes(pages);
            let fresh = pages
                .alloc_pages(bytes, pages.page_size())?
                .as_ptr()
                .cast::<CpuBatch>();
            for i in 0..self.nr_cpus {
                // SAFETY: a fresh page-aligned block of `nr_cpus` lines.
                unsafe {
                    fresh.add(i).write(CpuBatch {
                        batch: AtomicPtr::new(null_mut()),
                    })
                };
            }
            match self.lines.compare_exchange(
                null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => base = fresh,
                Err(other) => {
                    // SAFETY: ours, never published; the lines were
                    // initialised above.
                    unsafe {
                        core::ptr::slice_from_raw_parts_mut(fresh, self.nr_cpus).drop_in_place();
                        pages.free_pages(core::ptr::NonNull::new_unchecked(fresh.cast()), bytes)
                    };
                    base = other;
                }
            }
        }
        // SAFETY: `cpu` < `nr_cpus` lines, initialised, live until `release`.
        Some(unsafe { &*base.add(cpu) })
    }

    /// CPU `cpu`'s line if the array exists.
    pub(crate) fn line_if_any(&self, cpu: usize) -> Option<&CpuBatch> {
        let base = self.lines.load(Ordering::Acquire);
        // SAFETY: as in `line`.
        (!base.is_null()).then(|| unsafe { &*base.add(cpu) })
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, n: usize) {
        self.count.fetch_sub(n, Ordering::Relaxed);
    }

    /// Returns the line array to `pages`.
    ///
    /// # Safety
    /// Exclusive access, every batch gone; `pages` the cache's source.
    pub(crate) unsafe fn release<P: PageSource>(&self, pages: &P) {
        let base = self.lines.swap(null_mut(), Ordering::AcqRel);
        if let Some(b) = core::ptr::NonNull::new(base) {
            // SAFETY: allocated and initialised in `line` with this size;
            // unused (contract).
            unsafe {
                core::ptr::slice_from_raw_parts_mut(base, self.nr_cpus).drop_in_place();
                pages.free_pages(b.cast(), self.lines_bytes(pages));
            }
        }
    }
}

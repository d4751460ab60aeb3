//! Sheaves and the barn: the storage under the sheaves front.
//!
//! A sheaf is an array of object pointers with its fill count; the barn is
//! the per-node stock of full and empty sheaves, exchanged with CPUs under
//! its lock. Sheaves are carved from pages of the page source (a small pool
//! under the barn lock), so the front needs no other allocator. This module
//! knows nothing of slabs or CPUs: the front decides when to exchange.

use crate::error::AllocError;
use crate::page_source::{PageSource, SlabPages};
use arch_api::sync::{Mutex, RawMutex};
use core::ptr::{NonNull, null_mut};
use crossbeam_utils::CachePadded;

/// A sheaf: `size` object pointers followed by room for `capacity`.
#[repr(C)]
pub(crate) struct Sheaf {
    size: SheafSize,
    next: *mut Sheaf,
    // `capacity` usize slots follow.
}

/// Linux's sheaf capacity for a cache of `object_size`-byte objects (since
/// "slab: add sheaves to most caches", 2026): the objects a CPU's partial
/// slabs would hold (`slub_set_cpu_partial`: 120 objects below 256 bytes,
/// 52 below 1 KiB, 24 below a page, 6 from a page up), halved because a CPU
/// holds two sheaves, then rounded up to fill the sheaf's allocation
/// (Linux: its kmalloc bucket; here: its 64-byte chunk).
///
/// Large objects get small sheaves: with one capacity for every size
/// (32), the sheaves and barns of a 16-CPU machine held 1.7x mimalloc's
/// peak RSS on mstress (BENCHMARKS.md, session 14).
///
/// ```
/// use slub_core::sheaf_capacity_for;
/// assert_eq!(sheaf_capacity_for(64), 62);
/// assert_eq!(sheaf_capacity_for(4096), 6);
/// ```
pub fn sheaf_capacity_for(object_size: usize) -> usize {
    let partial_objects = match object_size {
        s if s >= 4096 => 6,
        s if s >= 1024 => 24,
        s if s >= 256 => 52,
        _ => 120,
    };
    let hdr = core::mem::size_of::<Sheaf>();
    let bytes = (hdr + partial_objects / 2 * 8).next_multiple_of(64);
    (bytes - hdr) / 8
}

/// A sheaf's fill count: plain memory (only its CPU touches it, under the
/// guard). Under loom it is a relaxed loom atomic so the model checker can
/// interleave at its reads and writes (a plain load/store, no RMW).
/// (Also the main sheaf's count kept in its CPU's line: `sheaves/line.rs`.)
#[cfg(not(kmm_loom))]
#[repr(transparent)]
pub(crate) struct SheafSize(core::cell::Cell<usize>);
#[cfg(not(kmm_loom))]
impl SheafSize {
    pub(crate) fn new(v: usize) -> Self {
        Self(core::cell::Cell::new(v))
    }
    #[inline(always)]
    pub(crate) fn get(&self) -> usize {
        self.0.get()
    }
    #[inline(always)]
    pub(crate) fn set(&self, v: usize) {
        self.0.set(v);
    }
}
#[cfg(kmm_loom)]
pub(crate) struct SheafSize(loom::sync::atomic::AtomicUsize);
#[cfg(kmm_loom)]
impl SheafSize {
    pub(crate) fn new(v: usize) -> Self {
        Self(loom::sync::atomic::AtomicUsize::new(v))
    }
    pub(crate) fn get(&self) -> usize {
        self.0.load(core::sync::atomic::Ordering::Relaxed)
    }
    pub(crate) fn set(&self, v: usize) {
        self.0.store(v, core::sync::atomic::Ordering::Relaxed)
    }
}

/// The fill count a CPU's line holds while it has no main sheaf: above
/// every capacity, so the fast paths' one bounds check (`size - 1 < cap` to
/// pop, `size < cap` to push) fails on it and they need no null test.
pub(crate) const NO_SHEAF_SIZE: usize = usize::MAX;

impl Sheaf {
    /// The fill count.
    ///
    /// # Safety
    /// `s` is a live sheaf owned by the caller.
    #[inline(always)]
    pub(crate) unsafe fn size(s: *const Sheaf) -> usize {
        // SAFETY: the caller's contract.
        unsafe { (*s).size.get() }
    }

    /// Sets the fill count.
    ///
    /// # Safety
    /// `s` is a live sheaf owned by the caller.
    #[inline(always)]
    pub(crate) unsafe fn set_size(s: *const Sheaf, n: usize) {
        // SAFETY: the caller's contract.
        unsafe { (*s).size.set(n) }
    }

    /// Slot `i` of sheaf `s`.
    ///
    /// # Safety
    /// `s` is a live sheaf of a barn whose capacity exceeds `i`.
    #[inline(always)]
    pub(crate) unsafe fn slot(s: *mut Sheaf, i: usize) -> *mut usize {
        // SAFETY: the chunk holds the header and `capacity` slots after it.
        unsafe { s.add(1).cast::<usize>().add(i) }
    }
}

struct BarnInner {
    full: *mut Sheaf,
    nr_full: usize,
    empty: *mut Sheaf,
    nr_empty: usize,
    /// Unused sheaf chunks.
    chunks: *mut Sheaf,
    /// Pool pages, linked through their first word.
    pages: *mut usize,
}

// SAFETY: only pointers to memory the cache owns, reached under the mutex.
unsafe impl Send for BarnInner {}

/// The per-node barn, with the sheaf geometry of its cache.
pub(crate) struct Barn<R: RawMutex> {
    /// Written on every exchange: away from `cap`, which fast paths read.
    inner: CachePadded<Mutex<R, BarnInner>>,
    /// Object pointers per sheaf (at least 1).
    cap: usize,
    max_full: usize,
    max_empty: usize,
}

/// Pops the head of a sheaf list.
///
/// # Safety
/// The list is protected by the barn lock the caller holds.
unsafe fn pop(list: &mut *mut Sheaf) -> *mut Sheaf {
    let s = *list;
    if !s.is_null() {
        // SAFETY: `s` is a live sheaf on the caller's locked list.
        *list = unsafe { (*s).next };
    }
    s
}

/// # Safety
/// As [`pop`]; `s` is a live sheaf on no list.
unsafe fn push(list: &mut *mut Sheaf, s: *mut Sheaf) {
    // SAFETY: as documented.
    unsafe { (*s).next = *list };
    *list = s;
}

impl<R: RawMutex> Barn<R> {
    /// `fork`'s prepare: the barn lock, held past this call.
    #[cfg(not(kmm_loom))]
    pub(crate) fn lock_for_fork(&self) {
        self.inner.lock_held();
    }

    /// Undoes [`lock_for_fork`](Self::lock_for_fork).
    ///
    /// # Safety
    /// After `lock_for_fork`, as [`Mutex::unlock_held`].
    #[cfg(not(kmm_loom))]
    pub(crate) unsafe fn unlock_after_fork(&self) {
        // SAFETY: forwarded.
        unsafe { self.inner.unlock_held() }
    }

    /// An empty barn for sheaves of `cap` objects (raised to 1), keeping at
    /// most `max_full` full and `max_empty` empty sheaves.
    pub(crate) fn new(cap: usize, max_full: usize, max_empty: usize) -> Self {
        Self {
            inner: CachePadded::new(Mutex::new(BarnInner {
                full: null_mut(),
                nr_full: 0,
                empty: null_mut(),
                nr_empty: 0,
                chunks: null_mut(),
                pages: null_mut(),
            })),
            cap: cap.max(1),
            max_full,
            max_empty,
        }
    }

    /// Sheaf capacity (at least 1).
    #[inline(always)]
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The sheaf's chunk: its header and slots, in whole cache lines.
    fn sheaf_bytes(&self) -> usize {
        (core::mem::size_of::<Sheaf>() + self.cap * 8).next_multiple_of(64)
    }

    /// An empty sheaf: from the barn's empty list, the chunk pool, or a new
    /// pool page from `pages`.
    pub(crate) fn get_empty<P: PageSource>(&self, pages: &P) -> Result<*mut Sheaf, AllocError> {
        let mut b = self.inner.lock();
        // SAFETY: barn lock held.
        let mut s = unsafe { pop(&mut b.empty) };
        if !s.is_null() {
            b.nr_empty -= 1;
        } else {
            // SAFETY: barn lock held.
            s = unsafe { pop(&mut b.chunks) };
            if s.is_null() {
                let page = pages.page_size();
                let mem = pages
                    .alloc_pages(page, page)
                    .ok_or(AllocError::OutOfMemory)?
                    .as_ptr();
                let sz = self.sheaf_bytes();
                // SAFETY: a fresh page we own: link it into the pool list
                // through its first word, carve the rest into chunks.
                unsafe {
                    mem.cast::<*mut usize>().write(b.pages);
                    b.pages = mem.cast();
                    let mut off = 64;
                    while off + sz <= page {
                        let chunk = mem.add(off).cast::<Sheaf>();
                        chunk.write(Sheaf {
                            size: SheafSize::new(0),
                            next: null_mut(),
                        });
                        push(&mut b.chunks, chunk);
                        off += sz;
                    }
                    s = pop(&mut b.chunks);
                }
            }
        }
        // SAFETY: `s` is a chunk we now own.
        unsafe { Sheaf::set_size(s, 0) };
        Ok(s)
    }

    /// `barn_get_full_sheaf` / `barn_put_empty_sheaf` in one lock hold:
    /// a full sheaf for `empty` (null: none to give back), if there is one.
    pub(crate) fn exchange_empty_for_full(&self, empty: *mut Sheaf) -> Option<*mut Sheaf> {
        let mut b = self.inner.lock();
        // SAFETY: barn lock held.
        let full = unsafe { pop(&mut b.full) };
        if full.is_null() {
            return None;
        }
        if crate::loom_hooks::barn_two_phase() {
            // Broken variant: the sheaf is unlinked in a second critical
            // section, so two CPUs can both take the same full sheaf.
            // SAFETY: barn lock held; undo the pop, unlink later.
            unsafe { push(&mut b.full, full) };
            drop(b);
            let mut b = self.inner.lock();
            // SAFETY: barn lock held.
            unsafe {
                if b.full == full {
                    pop(&mut b.full);
                }
            }
            b.nr_full -= 1;
            if !empty.is_null() {
                // SAFETY: barn lock held; `empty` is ours.
                unsafe { push(&mut b.empty, empty) };
                b.nr_empty += 1;
            }
            return Some(full);
        }
        b.nr_full -= 1;
        if !empty.is_null() {
            if b.nr_empty < self.max_empty {
                // SAFETY: barn lock held; `empty` is ours.
                unsafe { push(&mut b.empty, empty) };
                b.nr_empty += 1;
            } else {
                // SAFETY: as above.
                unsafe { push(&mut b.chunks, empty) };
            }
        }
        Some(full)
    }

    /// `barn_put_full_sheaf` + get an empty one, if the barn has room and
    /// an empty sheaf can be had. On `None` the caller still owns `full`:
    /// it goes into the barn only once the empty one is in hand, so a
    /// failed sheaf allocation never leaves it both in the barn and with
    /// the caller (who would flush it, and the barn later again).
    pub(crate) fn exchange_full_for_empty<P: PageSource>(
        &self,
        full: *mut Sheaf,
        pages: &P,
    ) -> Option<*mut Sheaf> {
        let mut b = self.inner.lock();
        if b.nr_full >= self.max_full {
            return None;
        }
        // SAFETY: barn lock held.
        let mut e = unsafe { pop(&mut b.empty) };
        if e.is_null() {
            // SAFETY: barn lock held.
            e = unsafe { pop(&mut b.chunks) };
        } else {
            b.nr_empty -= 1;
        }
        if e.is_null() {
            // A new pool page (taken under the lock by `get_empty`).
            drop(b);
            e = self.get_empty(pages).ok()?;
            b = self.inner.lock();
            if b.nr_full >= self.max_full {
                // Filled up meanwhile: keep the chunk, the caller flushes.
                // SAFETY: barn lock held; `e` is ours.
                unsafe { push(&mut b.chunks, e) };
                return None;
            }
        }
        // SAFETY: barn lock held; `full` is ours.
        unsafe { push(&mut b.full, full) };
        b.nr_full += 1;
        drop(b);
        // SAFETY: `e` is ours.
        unsafe { Sheaf::set_size(e, 0) };
        Some(e)
    }

    /// Takes a full sheaf out of the barn (flushing it), if there is one.
    pub(crate) fn take_full(&self) -> Option<*mut Sheaf> {
        let mut b = self.inner.lock();
        // SAFETY: barn lock held.
        let s = unsafe { pop(&mut b.full) };
        if s.is_null() {
            return None;
        }
        b.nr_full -= 1;
        Some(s)
    }

    /// Returns an emptied sheaf to the chunk pool.
    ///
    /// # Safety
    /// `s` is a live sheaf of this barn, owned by the caller and on no list.
    pub(crate) unsafe fn put_chunk(&self, s: *mut Sheaf) {
        let mut b = self.inner.lock();
        // SAFETY: barn lock held; the caller's contract.
        unsafe { push(&mut b.chunks, s) };
    }

    /// Returns the sheaf pool's pages to `pages` (destroy, after every flush).
    ///
    /// # Safety
    /// No sheaf of this barn is in use, and `pages` is the source the pool
    /// pages came from.
    pub(crate) unsafe fn release_pool<P: PageSource>(&self, pages: &P) {
        let mut b = self.inner.lock();
        b.empty = null_mut();
        b.nr_empty = 0;
        b.chunks = null_mut();
        let mut p = core::mem::replace(&mut b.pages, null_mut());
        let page = pages.page_size();
        while !p.is_null() {
            // SAFETY: `p` is a pool page (its first word links the next); no
            // sheaf in it is in use (the caller's contract).
            unsafe {
                let next = p.cast::<*mut usize>().read();
                pages.free_pages(NonNull::new_unchecked(p.cast()), page);
                p = next;
            }
        }
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    /// Every step of Linux's table, each capacity at least half its
    /// partial objects and filling its chunk exactly.
    #[test]
    fn sheaf_capacity_follows_linux_steps() {
        let hdr = core::mem::size_of::<Sheaf>();
        for (size, objects, want) in [
            (8, 120, 62),
            (255, 120, 62),
            (256, 52, 30),
            (1023, 52, 30),
            (1024, 24, 14),
            (4095, 24, 14),
            (4096, 6, 6),
            (1 << 20, 6, 6),
        ] {
            let c = sheaf_capacity_for(size);
            assert_eq!(c, want, "object size {size}");
            assert!(c >= objects / 2);
            assert_eq!((hdr + c * 8) % 64, 0, "chunk not filled at {size}");
        }
    }
}

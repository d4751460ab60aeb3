//! Where the memory comes from: one reserved range of address space (the
//! "region") from which slab pages, per-CPU arrays, sheaves and large blocks
//! are carved, plus a table with one entry per region page saying what
//! `free(p)` must do with a pointer into that page.
//!
//! C's `free` gets no size, and slub-core's `Kmalloc::free` needs the class.
//! A slab is naturally aligned but its size depends on the class, so the
//! class is recorded where the pointer is: when slub-core makes a new slab
//! its hook (`CacheConfig::new_slab`) stores class + 1 in the entries of
//! the slab's pages, before any object of the slab is handed out, and
//! `free` reads it back. A pointer is freed only after its `malloc`
//! returned, which took it from that slab after the hook ran, and whoever
//! frees it got it through something that orders the two, so the entry it
//! reads is the one the hook wrote. Large blocks record [`LARGE`] | pages at their first
//! page. Region pages are never unmapped: freed blocks are `madvise`d away
//! (`MADV_DONTNEED`), so the tid fast path's speculative read of a next
//! pointer in a slab just freed reads zeros (its CAS then fails), never a
//! hole. Blocks bigger than the region's largest free list, and everything
//! once the region is full, are plain `mmap`s with a header page.

use arch_api::{FrameError, FrameSource, PhysAddr, PhysMap};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

use crate::cpu_blocks::CpuBlocks;
use crate::platform::YieldLock;
use lock_api::RawMutex as _;

/// Page size of the region (the granule slub-core sees).
pub const PAGE: usize = 4096;
/// Reserved bytes (no memory until touched; `MAP_NORESERVE`): the most,
/// halved until the kernel (or a tool such as valgrind, whose address-space
/// manager refuses 64 GiB in one piece) accepts, down to the least.
const REGION_BYTES_MAX: usize = 64 << 30;
const REGION_BYTES_MIN: usize = 1 << 30;
/// Free lists for blocks of 1..=MAX_LIST_PAGES pages (1 MiB).
const MAX_LIST_PAGES: usize = 256;
/// Freed blocks stay resident (reused without new page faults) while the
/// resident freed bytes stay under this budget; beyond it a freed block is
/// given back to the kernel at once (`MADV_DONTNEED`). `trim` gives back
/// everything.
const RESIDENT_BUDGET: usize = 64 << 20;
/// Freed `mmap`ed blocks kept for reuse (at most this many, and at most
/// [`HUGE_BUDGET`] bytes): a program that allocates and frees multi-MiB
/// buffers in a loop (xz) would otherwise fault every page in again.
const HUGE_SLOTS: usize = 16;
const HUGE_BUDGET: usize = 256 << 20;
/// Table entry flag: the first page of a large block of `entry & !LARGE` pages.
pub const LARGE: u32 = 1 << 31;
/// Header magic of a block mapped outside the region.
const HUGE_MAGIC: usize = 0x6b6d_6d5f_6875_6765;

/// What a block is for: it decides which half of the region a fresh block
/// comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// slub-core's pages (slabs, per-CPU arrays, sheaves): the lower half,
    /// where `init(thp)` asks for transparent huge pages. Slabs are filled
    /// densely, so a huge page is used in full.
    Slabs = 0,
    /// `malloc`'s blocks above 16 KiB: the upper half, with 4 KiB pages.
    /// A program often touches only the start of such a block, and a huge
    /// page would be zeroed in full for it (BENCHMARKS.md, session 13:
    /// glibc-thread at 2 threads spent 40 % of its samples in `clear_page`).
    Large = 1,
}

/// The region, its table and its free lists.
pub struct Region {
    /// Read by every `free` (the table lookup), set once: on lines of its
    /// own, away from the lock and counters the page paths write.
    map: CachePadded<Map>,
    lock: YieldLock,
    /// Under `lock`: the bump pointers of the two halves (offsets;
    /// [`Kind::Slabs`] from 0, [`Kind::Large`] from half the region) and
    /// the free-list heads (a freed block's first word links the next;
    /// either kind reuses either half's blocks).
    bump: core::cell::UnsafeCell<[usize; 2]>,
    lists: core::cell::UnsafeCell<[usize; MAX_LIST_PAGES + 1]>,
    /// Freed blocks kept per CPU in front of `lock`, and the bytes handed
    /// out (slab pages, arrays, sheaves, large blocks), counted per CPU.
    cpu: CpuBlocks,
    /// Bytes on the region's free lists still resident (not yet
    /// `madvise`d away); the CPUs' caches count their own.
    cached: AtomicUsize,
    /// Under `lock`: freed `mmap`ed blocks, (mapping, length), 0 = empty.
    huge: core::cell::UnsafeCell<[(usize, usize); HUGE_SLOTS]>,
}

/// Where the region and its table are (set once by `init`).
struct Map {
    base: AtomicUsize,
    /// Bytes reserved at `base` (set with it).
    bytes: AtomicUsize,
    table: AtomicUsize,
}

// SAFETY: the cells are only touched under `lock`; the rest is atomic.
unsafe impl Sync for Region {}

impl Region {
    /// An unset region (`init` maps it).
    pub const fn new() -> Self {
        Self {
            map: CachePadded::new(Map {
                base: AtomicUsize::new(0),
                bytes: AtomicUsize::new(0),
                table: AtomicUsize::new(0),
            }),
            lock: YieldLock::INIT,
            bump: core::cell::UnsafeCell::new([0; 2]),
            lists: core::cell::UnsafeCell::new([0; MAX_LIST_PAGES + 1]),
            cpu: CpuBlocks::new(),
            cached: AtomicUsize::new(0),
            huge: core::cell::UnsafeCell::new([(0, 0); HUGE_SLOTS]),
        }
    }

    /// Reserves the region and its table; false if the kernel refused.
    /// With `thp` the slabs' half ([`Kind::Slabs`]) asks for transparent
    /// huge pages (the large blocks' half and the table, touched sparsely,
    /// keep small ones).
    pub fn init(&self, thp: bool) -> bool {
        let mut bytes = REGION_BYTES_MAX;
        let region = loop {
            let r = map(bytes);
            if !r.is_null() || bytes == REGION_BYTES_MIN {
                break r;
            }
            bytes /= 2;
        };
        let table = map(bytes / PAGE * 4);
        if region.is_null() || table.is_null() {
            return false;
        }
        if thp {
            // Advice only: a kernel without THP (or with it off) refuses,
            // and the region keeps 4 KiB pages. The slabs' half only.
            // SAFETY: our fresh mapping; advice changes no contents.
            unsafe { libc::madvise(region.cast(), bytes / 2, libc::MADV_HUGEPAGE) };
        }
        // SAFETY: not shared yet (`base` is published below).
        unsafe { (*self.bump.get())[1] = bytes / 2 };
        self.map.table.store(table as usize, Ordering::Relaxed);
        self.map.bytes.store(bytes, Ordering::Relaxed);
        self.map.base.store(region as usize, Ordering::Release);
        true
    }

    /// Bytes handed out now.
    pub fn in_use(&self) -> usize {
        self.cpu.in_use()
    }

    /// Bytes of freed blocks still resident (the CPUs' caches included).
    pub fn cached(&self) -> usize {
        self.cached.load(Ordering::Relaxed) + self.cpu.cached()
    }

    /// The table entry of the page holding `p`, or `None` outside the region.
    #[inline(always)]
    pub fn entry(&self, p: usize) -> Option<&AtomicU32> {
        // SAFETY: `entry_ptr` answers a live entry (for the process).
        self.entry_ptr(p).map(|e| unsafe { &*e })
    }

    /// The table entry's value for the page holding `p`, 0 outside the
    /// region: [`entry`](Self::entry) for `free`'s fast path, without an
    /// `Option<&_>` whose null test the caller would pay for.
    #[inline(always)]
    pub fn entry_value(&self, p: usize) -> u32 {
        // SAFETY: as in `entry`.
        self.entry_ptr(p)
            .map_or(0, |e| unsafe { &*e }.load(Ordering::Relaxed))
    }

    /// Where the entry of the page holding `p` is, if `p` is in the region.
    #[inline(always)]
    fn entry_ptr(&self, p: usize) -> Option<*const AtomicU32> {
        let off = p.wrapping_sub(self.map.base.load(Ordering::Relaxed));
        if off >= self.map.bytes.load(Ordering::Relaxed) {
            return None;
        }
        let t = self.map.table.load(Ordering::Relaxed) as *const AtomicU32;
        // The table has one entry per region page and `off` is in the
        // region; it lives (mapped) as long as the process.
        Some(t.wrapping_add(off / PAGE))
    }

    /// Records that the slab at `slab` (`bytes` long, in the region) holds
    /// objects of class `class`.
    pub fn note_slab(&self, slab: usize, bytes: usize, class: usize) {
        let v = class as u32 + 1;
        for page in (slab..slab + bytes).step_by(PAGE) {
            if let Some(e) = self.entry(page) {
                e.store(v, Ordering::Relaxed);
            }
        }
    }

    /// `bytes` (a multiple of [`PAGE`]) aligned to `align` (a power of two,
    /// at least [`PAGE`]), from a free list or the bump pointer of `kind`'s
    /// half (the other half's once that one is full); null when the region
    /// is full.
    pub fn alloc_block(&self, bytes: usize, align: usize, kind: Kind) -> *mut u8 {
        let pages = bytes / PAGE;
        let base = self.map.base.load(Ordering::Acquire);
        if base == 0 || pages == 0 {
            return null_mut();
        }
        let shard = self.cpu.here();
        if let Some(b) = shard.take(pages, align) {
            shard.count(bytes as isize);
            return b as *mut u8;
        }
        self.lock.lock();
        // SAFETY: under the lock.
        let (bump, lists) = unsafe { (&mut *self.bump.get(), &mut *self.lists.get()) };
        let mut got = 0;
        if pages <= MAX_LIST_PAGES && lists[pages] != 0 && lists[pages] % align == 0 {
            got = lists[pages];
            // SAFETY: a free-list block's first word is the link; the block
            // is mapped and ours.
            lists[pages] = unsafe { *(got as *const usize) };
            // SAFETY: as above; the link word is the user's now.
            unsafe { *(got as *mut usize) = 0 };
            // The block was counted resident or not when freed; a block
            // given back is counted out again here (saturating).
            let c = self.cached.load(Ordering::Relaxed);
            self.cached
                .store(c.saturating_sub(bytes), Ordering::Relaxed);
        } else {
            // Blocks of a list size are aligned to the size's power of two,
            // so any later request of that size can reuse them.
            let a = align.max(if pages <= MAX_LIST_PAGES {
                pages.next_power_of_two() * PAGE
            } else {
                PAGE
            });
            let limit = self.map.bytes.load(Ordering::Relaxed);
            let ends = [limit / 2, limit];
            let first = kind as usize;
            for half in [first, 1 - first] {
                let at = (base + bump[half]).next_multiple_of(a);
                if at + bytes <= base + ends[half] {
                    bump[half] = at + bytes - base;
                    got = at;
                    break;
                }
            }
        }
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        if got != 0 {
            shard.count(bytes as isize);
        }
        got as *mut u8
    }

    /// Returns a block of [`alloc_block`](Self::alloc_block).
    ///
    /// # Safety
    /// `p` and `bytes` are those of a live block, no longer used.
    pub unsafe fn free_block(&self, p: *mut u8, bytes: usize) {
        let pages = bytes / PAGE;
        let shard = self.cpu.here();
        shard.count(-(bytes as isize));
        // SAFETY: the caller's block, resident (it was in use), unused.
        if unsafe { shard.keep(p as usize, pages) } {
            return;
        }
        let keep = pages <= MAX_LIST_PAGES
            && self.cached.load(Ordering::Relaxed) + bytes <= RESIDENT_BUDGET;
        if !keep {
            // SAFETY: the block is ours and mapped; its contents are dead.
            unsafe { libc::madvise(p.cast(), bytes, libc::MADV_DONTNEED) };
        }
        if pages > MAX_LIST_PAGES {
            // Not reused: only the memory goes back (done above).
            return;
        }
        self.lock.lock();
        // SAFETY: under the lock; the block is ours, its first word the link
        // (a block given back reads as zeros, then gets the link).
        unsafe {
            let lists = &mut *self.lists.get();
            *(p as *mut usize) = lists[pages];
            lists[pages] = p as usize;
            if keep {
                self.cached.fetch_add(bytes, Ordering::Relaxed);
            }
            self.lock.unlock();
        }
    }

    /// A kept `mmap`ed block of `len` to `2 * len` bytes, if any.
    pub fn huge_take(&self, len: usize) -> Option<(usize, usize)> {
        self.lock.lock();
        // SAFETY: under the lock.
        let slots = unsafe { &mut *self.huge.get() };
        let got = slots
            .iter_mut()
            .find(|(m, l)| *m != 0 && *l >= len && *l <= 2 * len)
            .map(core::mem::take);
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        if let Some((_, l)) = got {
            let c = self.cached.load(Ordering::Relaxed);
            self.cached.store(c.saturating_sub(l), Ordering::Relaxed);
        }
        got
    }

    /// Keeps a freed `mmap`ed block for reuse if there is room; false if
    /// the caller must unmap it.
    pub fn huge_keep(&self, map: usize, len: usize) -> bool {
        if self.cached.load(Ordering::Relaxed) + len > HUGE_BUDGET {
            return false;
        }
        self.lock.lock();
        // SAFETY: under the lock.
        let slots = unsafe { &mut *self.huge.get() };
        let kept = match slots.iter_mut().find(|(m, _)| *m == 0) {
            Some(slot) => {
                *slot = (map, len);
                true
            }
            None => false,
        };
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        if kept {
            self.cached.fetch_add(len, Ordering::Relaxed);
        }
        kept
    }

    /// Gives every resident freed block back to the kernel (the lists keep
    /// them, as zero pages; kept `mmap`ed blocks are unmapped). Returns the
    /// bytes given back.
    pub fn trim(&self) -> usize {
        // The CPUs' blocks go to the region's lists first (resident, so
        // counted in `cached` and given back below).
        let moved = self.cpu.drain(|b, pages| {
            self.lock.lock();
            // SAFETY: under the lock; a free block whose link word is ours.
            unsafe {
                let lists = &mut *self.lists.get();
                *(b as *mut usize) = lists[pages];
                lists[pages] = b;
                self.lock.unlock();
            }
        });
        self.cached.fetch_add(moved, Ordering::Relaxed);
        self.lock.lock();
        // SAFETY: under the lock.
        let (lists, slots) = unsafe { (&*self.lists.get(), &mut *self.huge.get()) };
        for (pages, &head) in lists.iter().enumerate() {
            let bytes = pages * PAGE;
            let mut b = head;
            while b != 0 {
                // SAFETY: a free block under the lock: keep its link word
                // (the first page stays; the rest is given back).
                unsafe {
                    let next = *(b as *const usize);
                    if bytes > PAGE {
                        libc::madvise((b + PAGE) as *mut _, bytes - PAGE, libc::MADV_DONTNEED);
                    }
                    b = next;
                }
            }
        }
        for slot in slots.iter_mut() {
            if slot.0 != 0 {
                // SAFETY: a kept mapping nobody uses.
                unsafe { libc::munmap(slot.0 as *mut _, slot.1) };
                *slot = (0, 0);
            }
        }
        // SAFETY: we hold it.
        unsafe { self.lock.unlock() };
        self.cached.swap(0, Ordering::Relaxed)
    }

    /// Takes the lock (`fork`'s prepare handler).
    pub fn lock_for_fork(&self) {
        self.cpu.lock_all();
        self.lock.lock();
    }

    /// Releases it (both sides of `fork`).
    ///
    /// # Safety
    /// After [`lock_for_fork`](Self::lock_for_fork).
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: the caller's contract (both were taken).
        unsafe {
            self.lock.unlock();
            self.cpu.unlock_all();
        }
    }
}

/// An anonymous, private, unreserved mapping (null on failure).
pub fn map(bytes: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        null_mut()
    } else {
        p.cast()
    }
}

/// A block outside the region: `bytes` aligned to `align`, with a header
/// page before it holding (magic, mapping start, mapping length, bytes).
pub fn huge_alloc(region: &Region, bytes: usize, align: usize) -> *mut u8 {
    let align = align.max(PAGE);
    let Some(len) = bytes
        .checked_next_multiple_of(PAGE)
        .and_then(|b| b.checked_add(align + PAGE))
    else {
        return null_mut();
    };
    let (m, len) = match region.huge_take(len) {
        Some((m, l)) => (m as *mut u8, l),
        None => (map(len), len),
    };
    if m.is_null() {
        return null_mut();
    }
    let user = (m as usize + PAGE).next_multiple_of(align);
    // SAFETY: `user - PAGE .. user + bytes` lies inside the new mapping.
    unsafe {
        let h = (user - PAGE) as *mut usize;
        h.write(HUGE_MAGIC);
        h.add(1).write(m as usize);
        h.add(2).write(len);
        h.add(3).write(bytes);
    }
    user as *mut u8
}

/// The header of a block of [`huge_alloc`], if `p` looks like one
/// (page-aligned, magic in place): (mapping, length, bytes).
///
/// # Safety
/// `p` is page-aligned and the page before it is mapped (a pointer
/// `malloc` returned).
pub unsafe fn huge_header(p: usize) -> Option<(usize, usize, usize)> {
    if p % PAGE != 0 || p < PAGE {
        return None;
    }
    let h = (p - PAGE) as *const usize;
    // SAFETY: the caller's contract.
    unsafe {
        if h.read() != HUGE_MAGIC {
            return None;
        }
        Some((h.add(1).read(), h.add(2).read(), h.add(3).read()))
    }
}

/// Unmaps a block of [`huge_alloc`] (header checked by the caller).
///
/// # Safety
/// `(map, len)` from [`huge_header`] of a live block, no longer used.
pub unsafe fn huge_free(region: &Region, p: usize, map: usize, len: usize) {
    // SAFETY: clears the magic (a second free is then detected) and unmaps
    // the caller's mapping unless it is kept for reuse.
    unsafe {
        ((p - PAGE) as *mut usize).write(0);
        if !region.huge_keep(map, len) {
            libc::munmap(map as *mut _, len);
        }
    }
}

// slub-core's view: physical address = virtual address (identity direct
// map), granule = one page.
impl FrameSource for Region {
    fn granule(&self) -> u64 {
        PAGE as u64
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let (size, align) = (size as usize, align as usize);
        if size == 0 || size % PAGE != 0 || !align.is_power_of_two() {
            return Err(FrameError::BadLayout);
        }
        let p = self.alloc_block(size, align.max(PAGE), Kind::Slabs);
        if p.is_null() {
            Err(FrameError::OutOfFrames)
        } else {
            Ok(PhysAddr::new(p as u64))
        }
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        // SAFETY: slub-core frees what it was given, with its size.
        unsafe { self.free_block(addr.as_u64() as *mut u8, size as usize) };
        Ok(())
    }
}

impl PhysMap for Region {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        addr.as_u64() as *mut u8
    }

    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.entry(ptr as usize).map(|_| PhysAddr::new(ptr as u64))
    }
}

// SAFETY: blocks are carved from a private mapping, each handed to one owner
// until freed (the free lists and the bump pointer are under the lock), and
// the direct map is the identity; nothing here allocates through `malloc`.
unsafe impl slub_core::PageSource for Region {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::vec::Vec;

    fn region() -> &'static Region {
        let r: &'static Region = Box::leak(Box::new(Region::new()));
        assert!(r.init(false));
        r
    }

    /// Each kind bumps in its own half; a full half falls back on the other
    /// and a full region answers null. Fresh bump blocks are not touched,
    /// so the reserved gigabytes cost nothing here.
    #[test]
    fn each_kind_has_its_half_and_borrows_the_other_when_full() {
        let r = region();
        let (base, bytes) = (
            r.map.base.load(Ordering::Relaxed),
            r.map.bytes.load(Ordering::Relaxed),
        );
        let half = base + bytes / 2;
        let s = r.alloc_block(PAGE, PAGE, Kind::Slabs) as usize;
        let l = r.alloc_block(PAGE, PAGE, Kind::Large) as usize;
        assert!(s >= base && s < half, "slab page {s:#x} below {half:#x}");
        assert!(l >= half && l < base + bytes, "large block {l:#x} above");
        // Fill the large half with blocks past the free lists' sizes.
        let big = 256 << 20;
        let mut n = 0;
        loop {
            let p = r.alloc_block(big, PAGE, Kind::Large) as usize;
            assert!(p != 0, "the region ran out before the large half did");
            n += 1;
            if p < half {
                break;
            }
            assert!(n <= bytes / big, "never left the large half");
        }
        // Now the slabs' half serves both, until it is full too.
        while !r.alloc_block(big, PAGE, Kind::Slabs).is_null() {}
        assert!(r.alloc_block(big, PAGE, Kind::Large).is_null());
    }

    /// A freed block is reused by either kind (shared free lists).
    #[test]
    fn freed_blocks_are_shared_between_kinds() {
        crate::cpu_blocks::pin_here();
        let r = region();
        let l = r.alloc_block(4 * PAGE, PAGE, Kind::Large);
        assert!(!l.is_null());
        // SAFETY: the block we just got, unused.
        unsafe { r.free_block(l, 4 * PAGE) };
        assert_eq!(r.alloc_block(4 * PAGE, PAGE, Kind::Slabs), l);
    }

    /// Blocks kept by a CPU count as cached and in use no more; `trim`
    /// hands them to the region's lists and gives their memory back, and
    /// they are reused from there.
    #[test]
    fn trim_drains_the_cpu_caches() {
        crate::cpu_blocks::pin_here();
        let r = region();
        let blocks: Vec<_> = (0..4)
            .map(|_| r.alloc_block(2 * PAGE, PAGE, Kind::Large))
            .collect();
        assert_eq!(r.in_use(), 8 * PAGE);
        for &b in &blocks {
            // SAFETY: ours, unused.
            unsafe { r.free_block(b, 2 * PAGE) };
        }
        assert_eq!((r.in_use(), r.cached()), (0, 8 * PAGE));
        assert_eq!(r.trim(), 8 * PAGE);
        assert_eq!(r.cached(), 0);
        let again = r.alloc_block(2 * PAGE, PAGE, Kind::Slabs);
        assert!(blocks.contains(&again), "a trimmed block is reused");
    }
}

//! The hosted page sources (feature `std`): host heap pages and arch-api's
//! simulated physical memory.

use super::*;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::alloc::{GlobalAlloc, Layout, System};

/// Host heap pages straight from `std::alloc::System` (not through the
/// global allocator, so it can back a `#[global_allocator]`). The
/// "physical" address of a block is its host address (an identity direct
/// map). Counts the bytes and blocks it has out, for leak checks.
///
/// A block of `size` bytes is aligned to `max(4096, size)` rounded up to
/// a power of two (the alignment a free can recompute from the size);
/// a larger alignment is refused with [`FrameError::BadLayout`]. Frees
/// are checked against a record of the blocks out, so a range it did not
/// hand out is refused with [`FrameError::NotAllocated`].
#[derive(Debug, Default)]
pub struct SystemPages {
    bytes: AtomicUsize,
    blocks: AtomicUsize,
    live: Registry,
}

impl SystemPages {
    /// A source with nothing allocated.
    pub const fn new() -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            blocks: AtomicUsize::new(0),
            live: Registry::new(),
        }
    }

    /// Bytes currently handed out.
    pub fn bytes_in_use(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Blocks currently handed out.
    pub fn blocks_in_use(&self) -> usize {
        self.blocks.load(Ordering::Relaxed)
    }

    fn layout(size: u64, align: u64) -> Result<Layout, FrameError> {
        if size == 0 || size % 4096 != 0 || !align.is_power_of_two() {
            return Err(FrameError::BadLayout);
        }
        let natural = size
            .checked_next_power_of_two()
            .ok_or(FrameError::BadLayout)?;
        if align > natural {
            return Err(FrameError::BadLayout);
        }
        Layout::from_size_align(size as usize, natural as usize).map_err(|_| FrameError::BadLayout)
    }
}

impl FrameSource for SystemPages {
    fn granule(&self) -> u64 {
        4096
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let layout = Self::layout(size, align)?;
        // SAFETY: `layout` has a non-zero size (checked in `layout`).
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            return Err(FrameError::OutOfFrames);
        }
        if !self.live.insert(p as usize, size as usize) {
            // SAFETY: just allocated above with `layout`, not handed out.
            unsafe { System.dealloc(p, layout) };
            return Err(FrameError::OutOfFrames);
        }
        self.bytes.fetch_add(size as usize, Ordering::Relaxed);
        self.blocks.fetch_add(1, Ordering::Relaxed);
        Ok(PhysAddr::new(p as u64))
    }

    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        let layout = Self::layout(size, 4096).map_err(|_| FrameError::NotAllocated)?;
        if !self.live.remove(addr.as_u64() as usize, size as usize) {
            return Err(FrameError::NotAllocated);
        }
        // SAFETY: the registry held this block with this size, so it was
        // allocated by `alloc` above with the layout computed from the
        // same size, and it is removed, so it is freed once.
        unsafe { System.dealloc(addr.as_u64() as *mut u8, layout) };
        self.bytes.fetch_sub(size as usize, Ordering::Relaxed);
        self.blocks.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Identity: host memory is its own direct map.
impl PhysMap for SystemPages {
    #[inline]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        addr.as_u64() as *mut u8
    }
    #[inline]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        Some(PhysAddr::new(ptr as u64))
    }
}

// SAFETY: `System` returns fresh, exclusively owned memory of the layout
// asked for, identity-mapped; a block goes back only if the registry
// held it, with the same layout.
unsafe impl PageSource for SystemPages {}

/// The blocks a [`SystemPages`] has out, `(address, size)`: an
/// open-addressing table in memory from `System`, under a spin lock
/// (page allocations are the slow path). Address 0 marks an empty slot,
/// 1 a removed one.
struct Registry {
    lock: AtomicBool,
    table: UnsafeCell<Table>,
}

struct Table {
    slots: *mut (usize, usize),
    cap: usize,
    /// Slots not empty (live or removed).
    used: usize,
    live: usize,
}

// SAFETY: `table` is only touched with `lock` held (see `with`); the
// slots are plain integers in memory owned by the registry.
unsafe impl Sync for Registry {}
// SAFETY: as above; the table memory is owned, not thread-bound.
unsafe impl Send for Registry {}

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

const EMPTY: usize = 0;
const REMOVED: usize = 1;

impl Registry {
    const fn new() -> Self {
        Self {
            lock: AtomicBool::new(false),
            table: UnsafeCell::new(Table {
                slots: core::ptr::null_mut(),
                cap: 0,
                used: 0,
                live: 0,
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Table) -> T) -> T {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held, so this is the only reference.
        let r = f(unsafe { &mut *self.table.get() });
        self.lock.store(false, Ordering::Release);
        r
    }

    fn insert(&self, addr: usize, size: usize) -> bool {
        self.with(|t| t.insert(addr, size))
    }

    fn remove(&self, addr: usize, size: usize) -> bool {
        self.with(|t| t.remove(addr, size))
    }
}

impl Table {
    fn layout(cap: usize) -> Layout {
        Layout::array::<(usize, usize)>(cap).expect("registry size")
    }

    fn home(&self, addr: usize) -> usize {
        ((addr >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15)) & (self.cap - 1)
    }

    fn slot(&mut self, i: usize) -> &mut (usize, usize) {
        // SAFETY: `i < cap` (masked), the table holds `cap` initialised
        // slots, and `&mut self` is exclusive.
        unsafe { &mut *self.slots.add(i) }
    }

    /// Rebuilds into a table of `cap` slots (dropping removed ones).
    fn rebuild(&mut self, cap: usize) -> bool {
        // SAFETY: non-zero size (cap >= 64).
        let fresh = unsafe { System.alloc_zeroed(Self::layout(cap)) }.cast::<(usize, usize)>();
        if fresh.is_null() {
            return false;
        }
        let old = core::mem::replace(
            self,
            Table {
                slots: fresh,
                cap,
                used: 0,
                live: 0,
            },
        );
        for i in 0..old.cap {
            // SAFETY: `i < old.cap`; the old table is still allocated.
            let (a, s) = unsafe { *old.slots.add(i) };
            if a > REMOVED {
                self.place(a, s);
            }
        }
        if old.cap != 0 {
            // SAFETY: allocated by an earlier `rebuild` with this layout.
            unsafe { System.dealloc(old.slots.cast(), Self::layout(old.cap)) };
        }
        true
    }

    fn place(&mut self, addr: usize, size: usize) {
        let mut i = self.home(addr);
        while self.slot(i).0 > REMOVED {
            i = (i + 1) & (self.cap - 1);
        }
        if self.slot(i).0 == EMPTY {
            self.used += 1;
        }
        *self.slot(i) = (addr, size);
        self.live += 1;
    }

    fn insert(&mut self, addr: usize, size: usize) -> bool {
        if (self.used + 1) * 2 > self.cap {
            let cap = ((self.live + 1) * 4).next_power_of_two().max(64);
            if !self.rebuild(cap) {
                return false;
            }
        }
        self.place(addr, size);
        true
    }

    fn remove(&mut self, addr: usize, size: usize) -> bool {
        if self.cap == 0 || addr <= REMOVED {
            return false;
        }
        let mut i = self.home(addr);
        loop {
            let (a, s) = *self.slot(i);
            if a == EMPTY {
                return false;
            }
            if a == addr {
                if s != size {
                    return false;
                }
                self.slot(i).0 = REMOVED;
                self.live -= 1;
                return true;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let t = self.table.get_mut();
        if t.cap != 0 {
            // SAFETY: allocated by `rebuild` with this layout, freed once.
            unsafe { System.dealloc(t.slots.cast(), Table::layout(t.cap)) };
        }
    }
}

/// arch-api's simulated physical memory as a page source; its direct
/// map knows which addresses it owns, so foreign pointers are refused
/// without a read.
pub struct ArenaPages<'a> {
    arena: &'a arch_api::PhysArena,
}

impl core::fmt::Debug for ArenaPages<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArenaPages")
            .field("frames_in_use", &self.arena.frames_in_use())
            .finish()
    }
}

impl<'a> ArenaPages<'a> {
    /// Pages from `arena`.
    pub fn new(arena: &'a arch_api::PhysArena) -> Self {
        Self { arena }
    }

    /// Frames of the arena currently allocated.
    pub fn frames_in_use(&self) -> u64 {
        self.arena.frames_in_use()
    }
}

impl FrameSource for ArenaPages<'_> {
    #[inline]
    fn granule(&self) -> u64 {
        self.arena.granule()
    }
    #[inline]
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        self.arena.alloc(size, align)
    }
    fn alloc_many(&self, size: u64, align: u64, out: &mut [PhysAddr]) -> Result<(), FrameError> {
        self.arena.alloc_many(size, align, out)
    }
    #[inline]
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        self.arena.free(addr, size)
    }
    fn free_many(&self, ranges: &[(PhysAddr, u64)], failed: &mut dyn FnMut(PhysAddr, FrameError)) {
        self.arena.free_many(ranges, failed)
    }
}

impl PhysMap for ArenaPages<'_> {
    #[inline]
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.arena.phys_to_ptr(addr)
    }
    #[inline]
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.arena.ptr_to_phys(ptr)
    }
}

// SAFETY: frames come from the arena, which hands each range to one owner
// until it is freed; its host mapping is linear and checked both ways.
unsafe impl PageSource for ArenaPages<'_> {}

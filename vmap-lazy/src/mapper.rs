//! `Mapper`: the page-table side of [`Vmalloc`]: backing frames in, map, unmap without a flush, and the
//! software MMU. One lock (`init_mm`'s page-table lock) around one walker,
//! and beside it the walker's [`LeafPath`]: small areas inside last-level
//! tables that exist are mapped and cleared without that lock (Linux writes
//! vmalloc PTEs unlocked: each range has one owner and kernel tables are
//! never freed); only populating a table takes it.
//!
//! [`Vmalloc`]: crate::Vmalloc

mod huge;

pub(crate) use huge::large_leaf_size;

use crate::backing::VmallocMem;
use crate::error::VmallocError;
use crate::frame_cache::FrameCache;
use alloc::vec::Vec;
use arch_api::sync::{Mutex, RawMutex};
use arch_api::{FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, TlbFlush, VirtAddr};
use zap_walker::{Frames, Gather, LeafPath, Lent, Translation, Unbounded, WalkError, Walker};

/// The flush of a `vfree`, deferred: the gather's flush does nothing here
/// because `purge_vmap_area_lazy` flushes the range later, once for every
/// lazy area (Linux's `vunmap_range_noflush`). Not "no flush needed".
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeferredFlush;

impl TlbFlush for DeferredFlush {
    fn flush_page(&self, _: VirtAddr) {}
    fn flush_all(&self) {}
    fn flush_range(&self, _: VirtAddr, _: VirtAddr, _: u64) {}
}

/// Frames of an area listed on the stack while it is mapped; larger areas
/// use the heap.
const STACK_FRAMES: usize = 16;

/// The kernel page table of the vmalloc range and the memory behind it.
pub(crate) struct Mapper<'m, L: PageTableLayout, M: FrameSource + PhysMap + ?Sized, R: RawMutex> {
    pub(crate) mem: &'m VmallocMem<'m, M>,
    pt: Mutex<R, Walker<'m, L, VmallocMem<'m, M>>>,
    /// The walker's unlocked path (`None` on a one-level layout).
    leaf: Option<LeafPath<'m, L, VmallocMem<'m, M>>>,
}

impl<'m, L, M, R> Mapper<'m, L, M, R>
where
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    R: RawMutex,
{
    /// Over fresh root table(s) of its own (a hosted kernel, the tests).
    pub(crate) fn new(mem: &'m VmallocMem<'m, M>) -> Result<Self, VmallocError> {
        Self::over(Walker::new(mem).map_err(VmallocError::WalkerSetup)?)
    }

    /// Over `window` of the kernel's own table at `root`.
    ///
    /// # Safety
    ///
    /// As for [`Walker::attach`]: `root` is a live table of layout `L`
    /// reachable through `mem`, and inside `window` only this vmalloc writes
    /// entries while it lives.
    pub(crate) unsafe fn attach(
        mem: &'m VmallocMem<'m, M>,
        root: PhysAddr,
        window: core::ops::Range<VirtAddr>,
    ) -> Result<Self, VmallocError> {
        // SAFETY: forwarded to the caller.
        let w = unsafe { Walker::attach(mem, root, window) };
        Self::over(w.map_err(VmallocError::WalkerSetup)?)
    }

    fn over(mut walker: Walker<'m, L, VmallocMem<'m, M>>) -> Result<Self, VmallocError> {
        // Kernel page tables are never freed (the TLB may cache walks
        // through them until a flush, which vfree defers).
        walker.set_free_empty_tables(false);
        // SAFETY: the path lives in this Mapper beside the walker and is
        // used only through `&self`, so never after the walker is dropped.
        // Every range it maps or clears is a vmalloc area's, which has one
        // owner from its reservation until its purge (see `unmap_cached`
        // and `Vmalloc::write_byte`).
        let leaf = unsafe { walker.leaf_path() };
        Ok(Self {
            mem: walker.mem(),
            pt: Mutex::new(walker),
            leaf,
        })
    }

    /// Takes `pages` frames and maps them at `va` (`PAGE_KERNEL`). On error
    /// every frame taken is returned and nothing is mapped.
    pub(crate) fn map_new(&self, va: VirtAddr, pages: u64) -> Result<(), VmallocError> {
        // Small areas (the common case) list their frames on the stack: no
        // heap allocation per vmalloc.
        let mut stack = [PhysAddr::new(0); STACK_FRAMES];
        let mut heap = Vec::new();
        let frames: &mut [PhysAddr] = if pages <= STACK_FRAMES as u64 {
            &mut stack[..pages as usize]
        } else {
            if heap.try_reserve_exact(pages as usize).is_err() {
                return Err(VmallocError::OutOfFrames(arch_api::FrameError::OutOfFrames));
            }
            heap.resize(pages as usize, PhysAddr::new(0));
            &mut heap[..]
        };
        // All or none: on error the source has taken back what it gave.
        self.mem
            .alloc_many(L::PAGE_SIZE, L::PAGE_SIZE, frames)
            .map_err(VmallocError::OutOfFrames)?;
        self.map_fresh(va, frames, true, |f| self.mem.free_frames(f, L::PAGE_SIZE))
    }

    /// The `NOWAIT` form of [`map_new_cached`](Self::map_new_cached): the
    /// frames from `cache` if its lock is free (larger areas: one call of
    /// the frame source), mapped through the leaf path or, if a table must
    /// be built, under the page-table lock if it is free. Contended:
    /// [`VmallocError::WouldBlock`]. On any error nothing is mapped and the
    /// frames went back to the source.
    pub(crate) fn try_map_new(
        &self,
        cache: &FrameCache<R>,
        va: VirtAddr,
        pages: u64,
    ) -> Result<(), VmallocError> {
        let mut stack = [PhysAddr::new(0); STACK_FRAMES];
        let mut heap = Vec::new();
        let frames: &mut [PhysAddr] = if pages <= STACK_FRAMES as u64 {
            let f = &mut stack[..pages as usize];
            cache
                .try_take(self.mem, L::PAGE_SIZE, f)
                .ok_or(VmallocError::WouldBlock)?
                .map_err(VmallocError::OutOfFrames)?;
            f
        } else {
            if heap.try_reserve_exact(pages as usize).is_err() {
                return Err(VmallocError::OutOfFrames(arch_api::FrameError::OutOfFrames));
            }
            heap.resize(pages as usize, PhysAddr::new(0));
            self.mem
                .alloc_many(L::PAGE_SIZE, L::PAGE_SIZE, &mut heap)
                .map_err(VmallocError::OutOfFrames)?;
            &mut heap[..]
        };
        self.map_fresh(va, frames, false, |f| self.mem.free_frames(f, L::PAGE_SIZE))
    }

    /// Maps the frames just taken for a fresh vmalloc area (one owner) at
    /// `va` (`PAGE_KERNEL`): through the leaf path, without the lock, when
    /// its last-level table exists; otherwise the locked walk populates
    /// what is missing. On error nothing is mapped and the frames go to
    /// `give_back`.
    /// Without `wait`, a contended page-table lock is
    /// [`VmallocError::WouldBlock`].
    fn map_fresh(
        &self,
        va: VirtAddr,
        frames: &[PhysAddr],
        wait: bool,
        give_back: impl FnOnce(&[PhysAddr]),
    ) -> Result<(), VmallocError> {
        #[cfg(feature = "debug")]
        self.poison_frames(frames, 0xa5);
        let flags = MapFlags::WRITE | MapFlags::GLOBAL;
        let unlocked = match &self.leaf {
            Some(lp) => lp.map(va, frames, flags),
            None => Ok(false),
        };
        let r = match unlocked {
            Ok(true) => return Ok(()),
            Ok(false) if wait => self.pt.lock().map_range(va, Frames::List(frames), flags),
            Ok(false) => match self.pt.try_lock() {
                Some(mut pt) => pt.map_range(va, Frames::List(frames), flags),
                None => {
                    give_back(frames);
                    return Err(VmallocError::WouldBlock);
                }
            },
            Err(e) => Err(e),
        };
        r.map_err(|e| {
            give_back(frames);
            VmallocError::Map(e)
        })
    }

    /// [`map_new`](Self::map_new) with the frames from `cache` (see
    /// `frame_cache.rs`) when the area is small; on error the frames go back
    /// to the cache and nothing is mapped.
    pub(crate) fn map_new_cached(
        &self,
        cache: &FrameCache<R>,
        va: VirtAddr,
        pages: u64,
    ) -> Result<(), VmallocError> {
        if pages > STACK_FRAMES as u64 {
            return self.map_new(va, pages);
        }
        let mut stack = [PhysAddr::new(0); STACK_FRAMES];
        let frames = &mut stack[..pages as usize];
        cache
            .take(self.mem, L::PAGE_SIZE, frames)
            .map_err(VmallocError::OutOfFrames)?;
        self.map_fresh(va, frames, true, |f| cache.put(self.mem, L::PAGE_SIZE, f))
    }

    /// Maps the caller's `frames` at `va`; on error nothing is mapped.
    pub(crate) fn map_frames(
        &self,
        va: VirtAddr,
        frames: &[PhysAddr],
        flags: MapFlags,
    ) -> Result<(), VmallocError> {
        self.pt
            .lock()
            .map_range(va, Frames::List(frames), flags)
            .map_err(VmallocError::Map)
    }

    #[cfg(feature = "debug")]
    fn poison_frames(&self, frames: &[PhysAddr], byte: u8) {
        for f in frames {
            let p = self.mem.phys_to_ptr(*f);
            // SAFETY: `f` was just handed out by the frame source, page sized,
            // and is not mapped or shared yet; the direct map reaches it.
            unsafe { p.write_bytes(byte, L::PAGE_SIZE as usize) };
        }
    }

    /// Clears the entries of `[start, end)` without flushing the TLB; the
    /// frames go back to the source unless `keep_frames` (they were lent:
    /// a `vmap` of the caller's pages).
    pub(crate) fn unmap_noflush(
        &self,
        start: VirtAddr,
        end: VirtAddr,
        keep_frames: bool,
    ) -> Result<(), VmallocError> {
        let mut pt = self.pt.lock();
        if !keep_frames {
            // A small area inside one last-level table: its leaves are
            // cleared through the leaf path, still under the lock (writers
            // through `write_byte` translate under it, so none can reach a
            // frame once its entry is clear), and the frames go back once
            // the lock is dropped. No budget, no gather: nothing to break.
            let mut frames = [PhysAddr::new(0); STACK_FRAMES];
            if let Some(n) = self.zap_leaves(start, end, &mut frames) {
                drop(pt);
                self.mem.free_frames(&frames[..n], L::PAGE_SIZE);
                return Ok(());
            }
        }
        // Who owns the frames is this call's to say: vmalloc's go back to
        // the source, a `vmap` caller's stay the caller's.
        let budget = &mut Unbounded::new(L::PAGE_SIZE);
        let r = if keep_frames {
            let mut gather: Gather<DeferredFlush, 64, Lent> =
                Gather::with_sink(DeferredFlush, Lent);
            pt.zap_range(start, end, budget, &mut gather)
        } else {
            let mut gather: Gather<DeferredFlush, 64> = Gather::new(DeferredFlush);
            pt.zap_range(start, end, budget, &mut gather)
        };
        r.map(|_| ()).map_err(VmallocError::Unmap)
    }

    /// [`unmap_noflush`](Self::unmap_noflush) of a small `vmalloc` area
    /// whose frames go to `cache` instead of the frame source: cleared
    /// through the leaf path without the page-table lock (the area has one
    /// owner, and writes to it take its node lock, see
    /// `Vmalloc::write_byte`). An area the leaf path declines (it
    /// crosses a last-level table; rare for small areas) goes through
    /// `unmap_noflush`, its frames straight back to the source.
    pub(crate) fn unmap_cached(
        &self,
        cache: &FrameCache<R>,
        start: VirtAddr,
        end: VirtAddr,
    ) -> Result<(), VmallocError> {
        let mut frames = [PhysAddr::new(0); STACK_FRAMES];
        match self.zap_leaves(start, end, &mut frames) {
            Some(n) => {
                cache.put(self.mem, L::PAGE_SIZE, &frames[..n]);
                Ok(())
            }
            None => self.unmap_noflush(start, end, false),
        }
    }

    /// Clears the small area `[start, end)` through the leaf path, listing
    /// the frames it mapped in `frames`: how many, or `None` when the path
    /// declines (nothing changed).
    fn zap_leaves(
        &self,
        start: VirtAddr,
        end: VirtAddr,
        frames: &mut [PhysAddr; STACK_FRAMES],
    ) -> Option<usize> {
        let cleared = self.leaf?.zap(start, end, frames)?;
        let n = cleared.frames();
        // The flush is the lazy purge's: the area stays reserved until one
        // flush of the union of every lazy range.
        let _ = cleared.defer();
        Some(n)
    }

    /// Copies `pages` pages from `src` to `dst` through their translations
    /// (vrealloc's move); a page not mapped on either side is
    /// [`VmallocError::NotFound`], with what came before it copied.
    ///
    /// # Safety
    ///
    /// `src` and `dst` start live `vmalloc` areas of at least `pages` mapped
    /// pages that the caller owns: nobody frees or writes them until this
    /// returns, so their frames stay mapped and unshared.
    pub(crate) unsafe fn copy_pages(
        &self,
        dst: VirtAddr,
        src: VirtAddr,
        pages: u64,
    ) -> Result<(), VmallocError> {
        let ps = L::PAGE_SIZE;
        for p in 0..pages {
            let (s, d) = (src.as_u64() + p * ps, dst.as_u64() + p * ps);
            let (ts, td) = {
                let pt = self.pt.lock();
                (
                    pt.translate(VirtAddr::new(s)),
                    pt.translate(VirtAddr::new(d)),
                )
            };
            let (Some(ts), Some(td)) = (ts, td) else {
                return Err(VmallocError::NotFound { addr: s });
            };
            let (from, to) = (self.mem.phys_to_ptr(ts.phys), self.mem.phys_to_ptr(td.phys));
            // SAFETY: both are whole frames (page-aligned addresses, one
            // page each) mapped in areas the caller owns, reached through
            // the direct map; two distinct live areas never share a frame,
            // so the ranges do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(from, to, ps as usize) };
        }
        Ok(())
    }

    /// Returns the frames `cache` holds to the frame source.
    pub(crate) fn drain_cache(&self, cache: &FrameCache<R>) {
        cache.drain(self.mem, L::PAGE_SIZE);
    }

    pub(crate) fn translate(&self, va: VirtAddr) -> Option<Translation> {
        self.pt.lock().translate(va)
    }

    /// Writes `byte` at `va` of a `vmalloc` area without the page-table
    /// lock.
    ///
    /// # Safety
    ///
    /// `va` must lie in a live `vmalloc` area that cannot be freed until
    /// this returns (the caller holds what a `vfree` of it must take), and no
    /// other CPU may access that byte meanwhile: then the frame behind `va`
    /// stays mapped and vmalloc's, and the write races with nothing.
    #[cfg(feature = "testing")]
    pub(crate) unsafe fn write_byte_owned(
        &self,
        va: VirtAddr,
        byte: u8,
    ) -> Result<(), VmallocError> {
        let Some(lp) = &self.leaf else {
            return self.write_byte(va, byte);
        };
        // SAFETY: `lp.translate(va)` is `va`'s current translation; by the
        // caller's contract its frame stays mapped and unshared while we
        // write.
        unsafe { self.write_through(lp.translate(va), va, byte) }
    }

    #[cfg(feature = "testing")]
    pub(crate) fn write_byte(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        let pt = self.pt.lock();
        // SAFETY: the page-table lock is held across the translation and
        // the write, so no zap made under it (the walker's, or
        // `unmap_noflush`'s leaf-path clear) can clear the entry meanwhile,
        // and a frame is given back only after its entry is clear;
        // concurrent writers through this call are serialised. The unlocked
        // zap (`unmap_cached`) only clears vmalloc areas,
        // whose writes go through `write_byte_owned` under the node lock
        // instead, never here.
        unsafe { self.write_through(pt.translate(va), va, byte) }
    }

    /// Writes `byte` at `va` through its translation `t` (`None`, or not
    /// writable: `NotFound`).
    ///
    /// # Safety
    ///
    /// `t` must be `va`'s current translation, and its frame must stay
    /// mapped at `va`, and not be written by anyone else, until this returns.
    #[cfg(feature = "testing")]
    unsafe fn write_through(
        &self,
        t: Option<Translation>,
        va: VirtAddr,
        byte: u8,
    ) -> Result<(), VmallocError> {
        let t = t
            .filter(|t| t.flags.contains(MapFlags::WRITE))
            .ok_or(VmallocError::NotFound { addr: va.as_u64() })?;
        let p = self.mem.phys_to_ptr(t.phys);
        // SAFETY: `t.phys` lies in a frame mapped at `va` (the frame source
        // handed it out; the direct map reaches it through `p`), which by
        // this function's contract stays mapped and unshared while we write.
        unsafe { p.write_volatile(byte) };
        Ok(())
    }

    #[cfg(feature = "testing")]
    pub(crate) fn read_byte(&self, va: VirtAddr) -> Result<u8, VmallocError> {
        let pt = self.pt.lock();
        let t = pt
            .translate(va)
            .ok_or(VmallocError::NotFound { addr: va.as_u64() })?;
        let p = self.mem.phys_to_ptr(t.phys);
        // SAFETY: as in `write_byte`; a read of a mapped, owned frame.
        Ok(unsafe { p.read_volatile() })
    }

    pub(crate) fn pagetable_bytes(&self) -> u64 {
        self.pt.lock().pagetable_bytes()
    }

    /// The walker's root tables and how many are used (see
    /// [`Walker::roots`]).
    pub(crate) fn roots(&self) -> ([PhysAddr; 2], usize) {
        let pt = self.pt.lock();
        let mut out = [PhysAddr::new(0); 2];
        let roots = pt.roots();
        let n = roots.len().min(out.len());
        out[..n].copy_from_slice(&roots[..n]);
        (out, n)
    }
}

/// Whether an error is a shortage a purge may cure (then retry once).
pub(crate) fn is_shortage(e: &VmallocError) -> bool {
    matches!(
        e,
        VmallocError::NoVirtualSpace(_)
            | VmallocError::OutOfFrames(_)
            | VmallocError::Map(WalkError::OutOfTables(_))
    )
}

/// Pages for `size` bytes: errors for 0 and overflow.
pub(crate) fn pages_for(size: u64, page_size: u64) -> Result<u64, VmallocError> {
    if size == 0 {
        return Err(VmallocError::ZeroSize);
    }
    let pages = size.div_ceil(page_size);
    match pages.checked_mul(page_size) {
        Some(_) => Ok(pages),
        None => Err(VmallocError::Overflow { size }),
    }
}

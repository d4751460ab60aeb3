//! `Mapper`: the page-table side of vmalloc, shared by [`Vmalloc`] and
//! [`NodeVmalloc`]: backing frames in, map, unmap without a flush, and the
//! software MMU. One lock (`init_mm`'s page-table lock) around one walker.
//!
//! [`Vmalloc`]: crate::Vmalloc
//! [`NodeVmalloc`]: crate::NodeVmalloc

use crate::backing::VmallocMem;
use crate::error::VmallocError;
use alloc::vec::Vec;
use arch_api::sync::{Mutex, RawMutex};
use arch_api::{FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, TlbFlush, VirtAddr};
use zap_walker::{Frames, Gather, Translation, Unbounded, WalkError, Walker};

/// A TLB "flush" that does nothing: how `vfree` clears page-table entries
/// without flushing (the flush is deferred to the purge).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFlush;

impl TlbFlush for NoFlush {
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
}

impl<'m, L, M, R> Mapper<'m, L, M, R>
where
    L: PageTableLayout,
    M: FrameSource + PhysMap + ?Sized,
    R: RawMutex,
{
    pub(crate) fn new(mem: &'m VmallocMem<'m, M>) -> Result<Self, VmallocError> {
        let mut walker = Walker::new(mem).map_err(VmallocError::WalkerSetup)?;
        // Kernel page tables are never freed (the TLB may cache walks
        // through them until a flush, which vfree defers).
        walker.set_free_empty_tables(false);
        Ok(Self {
            mem,
            pt: Mutex::new(walker),
        })
    }

    /// Unwinds a failed `map_new`. Not through `FrameSource::free`: a frame
    /// shortage is found before the page-table lock is taken, so a `vunmap`
    /// on another CPU may have the adapter keeping frees meanwhile, and
    /// these frames would be dropped for good.
    fn free_frames(&self, frames: &[PhysAddr]) {
        for f in frames {
            // The frames were just allocated from this source at this size.
            let _ = self.mem.free_owned(*f, L::PAGE_SIZE);
        }
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
        let frames = &*frames;
        #[cfg(feature = "debug")]
        self.poison_frames(frames, 0xa5);
        let flags = MapFlags::WRITE | MapFlags::GLOBAL;
        if let Err(e) = self.pt.lock().map_range(va, Frames::List(frames), flags) {
            self.free_frames(frames);
            return Err(VmallocError::Map(e));
        }
        Ok(())
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
    /// frames go back to the source unless `keep_frames`.
    pub(crate) fn unmap_noflush(
        &self,
        start: VirtAddr,
        end: VirtAddr,
        keep_frames: bool,
    ) -> Result<(), VmallocError> {
        let mut pt = self.pt.lock();
        self.mem.set_keep_frees(keep_frames);
        let mut gather: Gather<NoFlush, 64> = Gather::new(NoFlush);
        let r = pt.zap_range(start, end, &mut Unbounded::new(L::PAGE_SIZE), &mut gather);
        self.mem.set_keep_frees(false);
        r.map(|_| ()).map_err(VmallocError::Unmap)
    }

    pub(crate) fn translate(&self, va: VirtAddr) -> Option<Translation> {
        self.pt.lock().translate(va)
    }

    pub(crate) fn write_byte(&self, va: VirtAddr, byte: u8) -> Result<(), VmallocError> {
        let pt = self.pt.lock();
        let t = pt
            .translate(va)
            .filter(|t| t.flags.contains(MapFlags::WRITE))
            .ok_or(VmallocError::NotFound { addr: va.as_u64() })?;
        let p = self.mem.phys_to_ptr(t.phys);
        // SAFETY: `t.phys` lies in a frame the walker maps, which the frame
        // source handed out and the direct map reaches through `p`; the page
        // table lock is held, so no zap can unmap and free the frame while
        // we write, and concurrent writers through this call are serialised.
        unsafe { p.write_volatile(byte) };
        Ok(())
    }

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

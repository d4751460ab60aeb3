//! The sparse `munmap` case (the 2005 ia64 report: a 16 TiB mapping, never
//! touched, took 24 s to unmap): a huge range with only a few pages present,
//! zapped whole under the work budget, through zap-walker on the kernel's
//! live table with the real TLB flusher.
//!
//! A walker attached to the kernel's root, its window the `SIZE` bytes past
//! the vmalloc window, maps `TOUCH_PAGES` pages spread over it; every page
//! is written and read through the MMU, then one `zap_range` clears the
//! whole range. The checks: nothing translates afterwards, every table page
//! the walker added went back (`leaked_tables`), every frame went back.
//!
//! `zap_smp.rs` runs it on CPU 0 while the other CPUs keep allocating:
//! the frame checks then count only this case's frames (`Counted`), since
//! the global count moves under the other CPUs.

use super::{check, kprint, tlb_delta};
use crate::arch;
use crate::frames::{self, Frames};
use arch_api::{FrameError, FrameSource, MapFlags, PageTableLayout, PhysAddr, PhysMap, VirtAddr};
use core::sync::atomic::{AtomicI64, Ordering::Relaxed};
use zap_walker::{BreakInfo, Gather, Walker, WorkBudget};

/// The range: 1 TiB, so a walk that scanned empty entries would visit
/// hundreds of thousands of them.
const SIZE: u64 = 1 << 40;
/// Pages mapped (and touched) inside it: enough that the work budget
/// (8 pages' worth, `CONFIG_PREEMPT`) breaks several times.
const TOUCH_PAGES: u64 = 64;

/// The kernel's frames, counting what this case holds: with other CPUs
/// allocating, the global in-use count says nothing about this case.
struct Counted(AtomicI64);

static COUNTED: Counted = Counted(AtomicI64::new(0));

impl FrameSource for Counted {
    fn granule(&self) -> u64 {
        Frames.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let f = Frames.alloc(size, align)?;
        self.0.fetch_add((size / Frames.granule()) as i64, Relaxed);
        Ok(f)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        Frames.free(addr, size)?;
        self.0.fetch_sub((size / Frames.granule()) as i64, Relaxed);
        Ok(())
    }
    fn phys_range(&self) -> Option<core::ops::Range<PhysAddr>> {
        Frames.phys_range()
    }
}

impl PhysMap for Counted {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        Frames.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        Frames.ptr_to_phys(ptr)
    }
}

/// Runs the case and prints its JSON line; `alone` when no other CPU
/// allocates meanwhile (the global frame count must then come back too).
pub fn run(alone: bool) {
    let ps = arch::Layout::PAGE_SIZE;
    let base = arch::VMALLOC_END;
    let frames_at_start = frames::in_use();
    let counted_at_start = COUNTED.0.load(Relaxed);
    let root = PhysAddr::new(arch::kernel_root(base).as_u64());
    // SAFETY: `root` is the live kernel table translating the range, in
    // identity-mapped RAM; nothing else writes inside the range, and the
    // walker is dropped before the function returns.
    let attached = unsafe {
        Walker::attach(
            &COUNTED,
            root,
            VirtAddr::new(base)..VirtAddr::new(base + SIZE),
        )
    };
    let mut w: Walker<'static, arch::Layout, Counted> = match attached {
        Ok(w) => w,
        Err(e) => {
            check(false, format_args!("munmap: walker setup: {e:?}"));
            return;
        }
    };
    let mut placed = [(0u64, PhysAddr::new(0)); TOUCH_PAGES as usize];
    for (k, slot) in placed.iter_mut().enumerate() {
        // Spread out, and off the big boundaries, so each lands in its own tables.
        let va = base + k as u64 * (SIZE / TOUCH_PAGES) + (k as u64 + 1) * 0x20_1000;
        let va = va & !(ps - 1);
        let frame = match COUNTED.alloc(ps, ps) {
            Ok(f) => f,
            Err(e) => {
                check(false, format_args!("munmap: out of frames: {e:?}"));
                return;
            }
        };
        let flags = MapFlags::WRITE | MapFlags::GLOBAL;
        if let Err(e) = w.map_range(VirtAddr::new(va), zap_walker::Frames::List(&[frame]), flags) {
            check(false, format_args!("munmap: map {va:#x}: {e:?}"));
            let _ = COUNTED.free(frame, ps);
            return;
        }
        *slot = (va, frame);
    }
    // The entries are in the live table already; make them visible to the
    // table walker before the first touch (arm64: `dsb ishst; isb`).
    arch_api::TlbFlush::sync_new_entries(&arch::tlb());

    let mut bad = 0u64;
    for (k, &(va, frame)) in placed.iter().enumerate() {
        let tag = 0xc0ff_ee00 + k as u64;
        // SAFETY: `va` is mapped writable by the now-live walker tables.
        let back = unsafe {
            (va as *mut u64).write_volatile(tag);
            (va as *const u64).read_volatile()
        };
        // SAFETY: `frame` is the identity-mapped frame behind `va`.
        let direct = unsafe { (Frames.phys_to_ptr(frame) as *const u64).read_volatile() };
        if back != tag || direct != tag {
            bad += 1;
        }
    }

    let mut breaks = 0u64;
    let mut budget = WorkBudget::for_page_size(ps, true).with_hook(|_: &BreakInfo| breaks += 1);
    // The range is this case's own until the zap returns (nothing else
    // maps in the window), so the batch stays open across the budget's
    // lock breaks, as Linux's `mmu_gather` across `cond_resched`: one
    // flush at the end instead of one per break.
    let mut gather: Gather<arch::Tlb> = Gather::new(arch::tlb()).across_breaks();
    let start = arch::cycles();
    let (res, tlb_pages, tlb_full) = tlb_delta(|| {
        w.zap_range(
            VirtAddr::new(base),
            VirtAddr::new(base + SIZE),
            &mut budget,
            &mut gather,
        )
    });
    let cycles = arch::cycles() - start;
    let st = match res {
        Ok(st) => st,
        Err(e) => {
            check(false, format_args!("munmap: zap: {e:?}"));
            return;
        }
    };
    let still_mapped = placed
        .iter()
        .filter(|(va, _)| w.translate(VirtAddr::new(*va)).is_some())
        .count();
    let leaked_tables = w.tables_below_root();
    let flushes = gather.stats().flushes;
    // Dropping an attached walker leaves the kernel's table and returns its
    // side store of counts.
    drop(w);
    let leaked_frames = COUNTED.0.load(Relaxed) - counted_at_start;
    kprint!(
        "{{\"workload\":\"munmap\",\"arch\":\"{}\",\"cpus\":{},\"size\":{SIZE},\"budget\":\"work\",\"repeat\":1,\"touch_pages\":{TOUCH_PAGES},\"wall_cycles\":{cycles},\"entries_visited\":{},\"lock_breaks\":{},\"max_work_between_breaks\":{},\"budget_units\":{},\"leaked_tables\":{leaked_tables},\"gather_flushes\":{flushes},\"tlbi_page_instructions\":{tlb_pages},\"tlbi_full_instructions\":{tlb_full}}}\n",
        arch::Layout::NAME,
        arch::online(),
        st.entries_visited,
        st.lock_breaks,
        st.max_work_between_breaks,
        st.budget_units,
    );
    check(
        bad == 0,
        format_args!("munmap: {bad} pages did not read back"),
    );
    check(
        st.leaves_cleared == TOUCH_PAGES,
        format_args!("munmap: {} leaves cleared", st.leaves_cleared),
    );
    check(
        still_mapped == 0,
        format_args!("munmap: {still_mapped} pages still mapped"),
    );
    check(
        leaked_tables == 0,
        format_args!("munmap: {leaked_tables} tables leaked"),
    );
    check(
        leaked_frames == 0,
        format_args!("munmap: {leaked_frames} frames leaked"),
    );
    check(
        st.lock_breaks == breaks,
        format_args!(
            "munmap: {} breaks counted, hook saw {breaks}",
            st.lock_breaks
        ),
    );
    check(
        tlb_pages + tlb_full > 0,
        format_args!("munmap: the zap issued no TLB invalidation"),
    );
    // Every table the zap freed lies inside the range, and the batch holds
    // all its records: the breaks end no batch.
    check(
        flushes == 1,
        format_args!(
            "munmap: {flushes} gather flushes for {} lock breaks",
            st.lock_breaks
        ),
    );
    check(
        !alone || frames::in_use() == frames_at_start,
        format_args!(
            "munmap: {} frames in use after dropping the walker, {frames_at_start} before",
            frames::in_use()
        ),
    );
}

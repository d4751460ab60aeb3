//! A boot self-test of `arch_x86_64::X86Tlb` on the real (emulated) TLB,
//! before any workload relies on it: each flush method must replace a
//! stale **global** translation (the kernel's mappings are global, and so
//! are vmalloc's).
//!
//! For each of `flush_page` (`invlpg`), `flush_range` (an `invlpg` loop
//! under the ceiling) and `flush_all` (INVPCID or the CR4.PGE toggle): map a
//! scratch page to frame A and read it (the translation is now cached),
//! retarget the PTE to frame B without a flush and read again (a TLB that
//! caches shows A: the stale read is recorded, not required, since the
//! architecture allows a TLB miss at any time), flush, read: it must be B.
//! Also recorded: whether a plain CR3 reload kept the stale global entry,
//! which is why a full flush must not be a CR3 reload while CR4.PGE is set.
//!
//! The scratch page is in PML4 slot 510, unused by anything else; the test
//! takes two frames and three table pages from the free RAM for good, and
//! its flushes are not counted in [`tlb_counts`](super::tlb_counts).

use super::{paging, tlb};
use arch_api::{MapFlags, PageTableEntry, PhysAddr, TlbFlush, VirtAddr};
use arch_x86_64::Pml4Entry;

/// The scratch page (PML4 slot 510: 0xffff_ff00_0000_0000).
const SCRATCH: u64 = 0xffff_ff00_0000_0000;
const TAG_A: u64 = 0xa11c_e000_0000_000a;
const TAG_B: u64 = 0xb0b0_0000_0000_000b;

/// What the self-test saw.
#[derive(Debug)]
pub struct Report {
    /// Flush methods that failed to replace the stale translation.
    pub failed: [Option<&'static str>; 3],
    /// Of the three, how often the stale translation was observed before
    /// the flush (3 means the emulator's TLB caches like hardware).
    pub stale_seen: u32,
    /// Whether a CR3 reload left the stale global translation in place.
    pub cr3_kept_global: bool,
}

fn read(va: u64) -> u64 {
    // SAFETY: `va` is the scratch page, mapped (to A or B) whenever this
    // runs; volatile, so every read goes through the MMU.
    unsafe { (va as *const u64).read_volatile() }
}

/// Runs the test. Boot only: after `paging::init` and `tlb::init`, before
/// the free RAM is handed out.
pub fn run() -> Report {
    let va = VirtAddr::new(SCRATCH);
    let pte = paging::kernel_pte(va);
    let (a, b) = (paging::take_frame(), paging::take_frame());
    // SAFETY: `a` and `b` are fresh frames of identity-mapped RAM that only
    // this test uses.
    unsafe {
        (a as *mut u64).write_volatile(TAG_A);
        (b as *mut u64).write_volatile(TAG_B);
    }
    let leaf = |pa: u64| {
        Pml4Entry::new_leaf(PhysAddr::new(pa), MapFlags::WRITE | MapFlags::GLOBAL, 3).raw()
    };
    let set = |raw: u64| {
        // SAFETY: `pte` is the scratch page's PTE in the live kernel tables;
        // only this test maps anything through it.
        unsafe { pte.write_volatile(raw) }
    };
    let t = tlb::uncounted();
    let methods: [(&'static str, &dyn Fn()); 3] = [
        ("flush_page (invlpg)", &|| t.flush_page(va)),
        ("flush_range (invlpg loop)", &|| {
            t.flush_range(va, VirtAddr::new(SCRATCH + 2 * 4096), 4096)
        }),
        ("flush_all", &|| t.flush_all()),
    ];
    let mut report = Report {
        failed: [None; 3],
        stale_seen: 0,
        cr3_kept_global: false,
    };
    for (i, (name, flush)) in methods.iter().enumerate() {
        set(leaf(a));
        t.flush_page(va);
        let before = read(SCRATCH);
        set(leaf(b));
        if read(SCRATCH) == TAG_A {
            report.stale_seen += 1;
        }
        flush();
        if before != TAG_A || read(SCRATCH) != TAG_B {
            report.failed[i] = Some(name);
        }
    }
    set(leaf(a));
    t.flush_page(va);
    let _ = read(SCRATCH);
    set(leaf(b));
    let cr3 = paging::read_cr3();
    // SAFETY: reloading the live CR3 keeps every mapping as it is.
    unsafe { paging::write_cr3(cr3) };
    report.cr3_kept_global = read(SCRATCH) == TAG_A;
    set(Pml4Entry::EMPTY.raw());
    t.flush_all();
    report
}

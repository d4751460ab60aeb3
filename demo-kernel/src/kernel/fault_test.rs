//! `--features fault-test`: a deliberately wrong page-table entry must make
//! the CPU fault and the vectors report it (exit status 3).
//!
//! A fresh vmalloc page is written once (so it is mapped and in the TLB),
//! then its last-level entry, found by walking the live tables with the
//! layout's indices, is replaced by the same entry without its present /
//! valid bit (found through `PageTableEntry::is_present`, not hard-coded),
//! the page is flushed with the real TLB instruction, and read again.

use super::kprint;
use super::vmalloc_loop::KernelVmalloc;
use crate::arch;
use arch_api::{EntryKind, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};

type Entry = <arch::Layout as PageTableLayout>::Entry;

/// The last-level entry translating `va` under `root`, if any.
fn leaf_slot(root: PhysAddr, va: VirtAddr) -> Option<*mut u64> {
    let mut table = root.as_u64();
    for level in 0..arch::Layout::LEVELS {
        let slot = (table as *mut u64).wrapping_add(arch::Layout::index(va, level));
        // SAFETY: `table` is a live, identity-mapped table page of the
        // layout and the index is within it.
        let e = Entry::from_raw(unsafe { slot.read_volatile() });
        match e.kind(level) {
            EntryKind::Table => table = e.addr().as_u64(),
            EntryKind::Leaf => return Some(slot),
            EntryKind::None => return None,
        }
    }
    None
}

/// Installs the wrong entry and touches it; only returns if nothing faulted.
pub fn run(vm: &KernelVmalloc) {
    let va = match vm.vmalloc(arch::Layout::PAGE_SIZE) {
        Ok(va) => va,
        Err(e) => {
            kprint!("check failed: fault-test vmalloc: {e:?}\n");
            arch::exit(1)
        }
    };
    // SAFETY: a fresh, writable vmalloc page.
    unsafe { (va.as_u64() as *mut u64).write_volatile(1) };
    let Some(slot) = leaf_slot(arch::kernel_root(va.as_u64()), va) else {
        kprint!("check failed: fault-test: no leaf for {va:?}\n");
        arch::exit(1)
    };
    // SAFETY: `slot` is the leaf entry found above.
    let good = Entry::from_raw(unsafe { slot.read_volatile() });
    let Some(bit) = (0..64).find(|b| !Entry::from_raw(good.raw() & !(1 << b)).is_present()) else {
        kprint!("check failed: fault-test: no present bit in {good:?}\n");
        arch::exit(1)
    };
    let wrong = good.raw() & !(1 << bit);
    kprint!(
        "fault-test: entry for {:#x} changed {:#x} -> {wrong:#x} (bit {bit} cleared); touching it must fault\n",
        va.as_u64(),
        good.raw()
    );
    // SAFETY: deliberately breaking this one mapping is the point; only this
    // test uses the page.
    unsafe { slot.write_volatile(wrong) };
    arch_api::TlbFlush::flush_page(&arch::tlb(), va);
    // SAFETY: not safe to complete by design: the read must fault, and the
    // vectors end the run. Volatile so it is not elided.
    let v = unsafe { (va.as_u64() as *const u64).read_volatile() };
    kprint!("check failed: fault-test: read {v:#x} through a non-present entry, no fault\n");
    arch::exit(1)
}

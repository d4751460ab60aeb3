//! `munmap` under load: CPU 0 runs the sparse munmap case (`munmap.rs`:
//! a walker on the kernel's live root, its zap flushing through the real
//! TLB path) while every other CPU keeps allocating: kmalloc/kfree through
//! the global allocator and vmalloc/vfree on the kernel's vmalloc, whose
//! tables share the same root (another range, so the walker's contract
//! holds). The other CPUs stop when the zap is done and report how much
//! they allocated meanwhile; each must have allocated, or the case did not
//! run under load.

use super::stale_check::MAX;
use super::vmalloc_loop::{KernelVmalloc, PAGES};
use super::{check, kprint, munmap};
use crate::arch::{self, Layout as ArchLayout};
use alloc::alloc::{alloc, dealloc};
use arch_api::PageTableLayout;
use core::alloc::Layout;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Set by CPU 0 once the case is done.
static DONE: AtomicBool = AtomicBool::new(false);
/// The kernel's vmalloc, for the workers (`run_on_all` takes a plain `fn`).
static VM: AtomicPtr<KernelVmalloc> = AtomicPtr::new(core::ptr::null_mut());
/// Allocations (kmalloc and vmalloc) per CPU while the case ran.
static ALLOCS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
static ERRORS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];

fn worker(cpu: usize) {
    if cpu == 0 {
        munmap::run(arch::online() == 1);
        DONE.store(true, Ordering::Release);
        return;
    }
    // SAFETY: `run` stored the kernel's vmalloc, which lives for ever.
    let vm = unsafe { &*VM.load(Ordering::Relaxed) };
    let (mut n, mut errors) = (0u64, 0u64);
    // At least one round, so a zap faster than this CPU's start still
    // leaves it counted as allocating.
    loop {
        for size in [16usize, 256, 2048] {
            let Ok(layout) = Layout::from_size_align(size, 8) else {
                continue;
            };
            // SAFETY: a non-zero-size layout; written and freed once here.
            unsafe {
                let p = alloc(layout);
                if p.is_null() {
                    errors += 1;
                } else {
                    p.write_bytes(cpu as u8, size);
                    dealloc(p, layout);
                    n += 1;
                }
            }
        }
        match vm.vmalloc(PAGES * ArchLayout::PAGE_SIZE) {
            Ok(va) => {
                // SAFETY: a fresh writable mapping of `PAGES` pages.
                unsafe { (va.as_u64() as *mut u64).write_volatile(cpu as u64) };
                errors += u64::from(vm.vfree(va).is_err());
                n += 1;
            }
            Err(_) => errors += 1,
        }
        if DONE.load(Ordering::Acquire) {
            break;
        }
    }
    ALLOCS[cpu].store(n, Ordering::Relaxed);
    ERRORS[cpu].store(errors, Ordering::Relaxed);
}

/// Runs the case on CPU 0 with the others allocating, and checks they did.
pub fn run(vm: &KernelVmalloc) {
    let cpus = arch::online().min(MAX);
    DONE.store(false, Ordering::Relaxed);
    VM.store(
        vm as *const KernelVmalloc as *mut KernelVmalloc,
        Ordering::Relaxed,
    );
    arch::run_on_all(worker);
    VM.store(core::ptr::null_mut(), Ordering::Relaxed);
    if cpus == 1 {
        return;
    }
    kprint!(
        "{{\"workload\":\"munmap-under-load\",\"arch\":\"{}\",\"cpus\":{cpus},\"allocations_meanwhile\":[",
        arch::NAME
    );
    for (c, a) in ALLOCS.iter().enumerate().take(cpus) {
        kprint!(
            "{}{}",
            if c == 0 { "" } else { "," },
            a.load(Ordering::Relaxed)
        );
    }
    let errors: u64 = ERRORS[..cpus]
        .iter()
        .map(|e| e.load(Ordering::Relaxed))
        .sum();
    kprint!("],\"errors\":{errors}}}\n");
    check(
        errors == 0,
        format_args!("munmap under load: {errors} allocation errors"),
    );
    for (c, a) in ALLOCS.iter().enumerate().take(cpus).skip(1) {
        check(
            a.load(Ordering::Relaxed) > 0,
            format_args!("munmap under load: CPU {c} allocated nothing"),
        );
    }
}

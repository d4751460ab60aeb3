//! Guard pages on the real MMU. vmap-lazy reserves one unmapped guard page
//! after every vmalloc / vmap area (unless the caller passes
//! `VmFlags::NO_GUARD`), so a write running off the end of an area faults
//! instead of landing silently in the next area (Linux: every `vm_struct`
//! but `VM_NO_GUARD` ones). The exception vectors hand every faulting data
//! address to [`explain`], which prints `guard page hit: …` with the
//! address and the area when it lies on a guard page of the kernel's
//! vmalloc.
//!
//! `--features guard-test` (`cargo xtask qemu ARCH --fault-test=guard`):
//! [`run`] writes one byte past a fresh one-page area; the run must end in
//! the fault and the `guard page hit` report (exit status 3).

use super::kprint;
use super::vmalloc_loop::{KernelVmalloc, MAIN_END};
use crate::arch;
use arch_api::{PageTableLayout, VirtAddr};
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use vmap_lazy::InfoLine;

/// The kernel's vmalloc (the one over `[VMALLOC_START, MAIN_END)`), once
/// [`register`]ed.
static KERNEL_VM: AtomicPtr<KernelVmalloc> = AtomicPtr::new(core::ptr::null_mut());

/// Set while a CPU runs [`explain`]: a fault inside it (or a second CPU
/// faulting at once) skips the lookup and keeps the plain `fault:` report.
static EXPLAINING: AtomicBool = AtomicBool::new(false);

/// Makes `vm` the vmalloc [`explain`] searches.
pub fn register(vm: &'static KernelVmalloc) {
    KERNEL_VM.store(core::ptr::from_ref(vm).cast_mut(), Ordering::Release);
}

/// Called by the exception vectors after their `fault:` line with the
/// faulting data address (aarch64 `FAR_EL1` of a data abort, x86_64 `CR2`
/// of a #PF): prints `guard page hit: …` if `addr` lies on a guard page of
/// an area of the kernel's vmalloc. It lists the areas under the nodes'
/// locks, so a fault taken while this CPU held one would spin here: the
/// `fault:` line is out already, and the boot's time limit ends the run.
pub fn explain(cpu: usize, addr: u64) {
    if !(arch::VMALLOC_START..MAIN_END).contains(&addr) {
        return;
    }
    let vm = KERNEL_VM.load(Ordering::Acquire);
    if vm.is_null() || EXPLAINING.swap(true, Ordering::Acquire) {
        return;
    }
    // SAFETY: `register` stored a `&'static KernelVmalloc`.
    let vm = unsafe { &*vm };
    let va = VirtAddr::new(addr);
    match vm.areas().into_iter().find(|a| a.is_guard(va)) {
        Some(a) => kprint!(
            "guard page hit: CPU {cpu}: address {addr:#x} on the guard page of area {:#x}-{:#x} ({} pages); vmallocinfo: {}\n",
            a.start.as_u64(),
            a.end.as_u64(),
            a.pages,
            InfoLine(&a),
        ),
        None => kprint!(
            "fault: {addr:#x} is in the kernel's vmalloc window but on no area's guard page\n"
        ),
    }
    EXPLAINING.store(false, Ordering::Release);
}

/// The `guard-test` build: a one-page area, its last byte written (must
/// work), then the byte right after it, the first byte of its guard page
/// (must fault; the vectors then report it and exit 3). Only returns
/// through `exit(1)` if the write went through.
pub fn run(vm: &KernelVmalloc) -> ! {
    let ps = arch::Layout::PAGE_SIZE;
    let va = match vm.vmalloc(ps) {
        Ok(va) => va.as_u64(),
        Err(e) => {
            kprint!("check failed: guard-test vmalloc: {e:?}\n");
            arch::exit(1)
        }
    };
    let end = va + ps;
    let guarded = vm
        .areas()
        .iter()
        .any(|a| a.start.as_u64() == va && a.is_guard(VirtAddr::new(end)));
    if !guarded || vm.vmalloc_to_phys(VirtAddr::new(end)).is_some() {
        kprint!("check failed: guard-test: no unmapped guard page after {va:#x}-{end:#x}\n");
        arch::exit(1)
    }
    // SAFETY: the last byte of the fresh, writable one-page area.
    unsafe { ((end - 1) as *mut u8).write_volatile(0xa5) };
    kprint!(
        "guard-test: area {va:#x}-{end:#x} written up to its last byte; writing one byte past it at {end:#x}: must fault\n"
    );
    // SAFETY: not safe to complete by design: `end` is the area's unmapped
    // guard page, so the store faults and the vectors end the run. Volatile
    // so it is not elided.
    unsafe { (end as *mut u8).write_volatile(0x5a) };
    kprint!("check failed: guard-test: wrote one byte past the area at {end:#x}, no fault\n");
    arch::exit(1)
}

//! The deliberately broken flusher of the `no-shootdown` build: the same
//! invalidations and barriers as `arch_aarch64::Aarch64Tlb`, but in their
//! non-broadcast forms, `tlbi vae1` / `tlbi vmalle1`.
//!
//! A TLBI without the IS (Inner Shareable) qualifier applies only to the PE
//! that executes it (Arm ARM DDI 0487 M.a, D8.17.5.4 "TLB maintenance
//! instruction scope", D8.17.7 "Broadcast TLB maintenance", and the C5.5
//! descriptions of TLBI VAE1 / VAE1IS and VMALLE1 / VMALLE1IS: only the IS
//! forms reach every PE of the Inner Shareable domain). qemu likewise flushes only the executing vCPU, so
//! the other CPUs keep the old translations, and smp-loop's cross-CPU stale
//! check must report them.

use super::Layout;
use arch_aarch64::{Aarch64Tlb, RangeFlush, plan_range_flush, tlbi_va_operand};
use arch_api::{TlbFlush, VirtAddr};
use core::arch::asm;

/// `Aarch64Tlb`'s plan and barriers with local invalidations.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalTlb(Aarch64Tlb<Layout>);

impl LocalTlb {
    /// With `Aarch64Tlb`'s default ceiling.
    pub fn new() -> Self {
        Self(Aarch64Tlb::new())
    }
}

/// `dsb ishst; tlbi vae1 (each page); dsb ish; isb`: the barriers of the
/// broadcast sequence, the invalidations on this PE only.
fn pages(list: impl Iterator<Item = (u64, u64, u64)>) {
    // SAFETY: a barrier: the table stores before it complete first.
    unsafe { asm!("dsb ishst", options(nostack, preserves_flags)) };
    for (first, step, count) in list {
        let mut va = first;
        for _ in 0..count {
            let op = tlbi_va_operand::<Layout>(VirtAddr::new(va));
            // SAFETY: invalidating TLB entries is memory-safe at EL1 (the
            // walker refetches from the tables).
            unsafe { asm!("tlbi vae1, {op}", op = in(reg) op, options(nostack, preserves_flags)) };
            va = va.wrapping_add(step);
        }
    }
    // SAFETY: barriers only; later accesses stay after them.
    unsafe { asm!("dsb ish", "isb", options(nostack, preserves_flags)) };
}

/// The pages of `[s, e)` as (first, step, count), if any.
fn plan(s: VirtAddr, e: VirtAddr, page_size: u64) -> Option<(u64, u64, u64)> {
    match plan_range_flush::<Layout>(s, e, page_size, u64::MAX) {
        RangeFlush::Pages { first, step, count } => Some((first.as_u64(), step, count)),
        _ => None,
    }
}

impl TlbFlush for LocalTlb {
    fn sync_new_entries(&self) {
        self.0.sync_new_entries();
    }

    fn flush_page(&self, va: VirtAddr) {
        pages(core::iter::once((va.as_u64(), 0, 1)));
    }

    fn flush_all(&self) {
        // SAFETY: barriers and an invalidation only, as in `pages`.
        unsafe {
            asm!(
                "dsb ishst",
                "tlbi vmalle1",
                "dsb ish",
                "isb",
                options(nostack, preserves_flags)
            )
        };
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.0.flush_ceiling_pages()
    }

    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        self.flush_ranges(&[(start, end)], page_size);
    }

    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        let all = ranges.iter().filter_map(|&(s, e)| plan(s, e, page_size));
        match all
            .clone()
            .map(|(_, _, n)| n)
            .fold(0u64, u64::saturating_add)
        {
            0 => {}
            n if n > self.flush_ceiling_pages() => self.flush_all(),
            _ => pages(all),
        }
    }
}

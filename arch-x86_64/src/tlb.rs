//! TLB invalidation with the real instructions (bare metal, `target_os = "none"`).
//!
//! Intel SDM Vol. 3A §4.10.4 "Invalidation of TLBs and Paging-Structure
//! Caches" lists what each operation drops (§4.10.4.1):
//!
//! * `INVLPG m`: the translations for the page containing `m` for the current
//!   PCID, **including global ones** ("it invalidates any global TLB entries for
//!   the page regardless of PCID"), and all paging-structure-cache entries of
//!   the current PCID. For a 2 MiB / 1 GiB page any address inside it will do.
//!   This is the per-page flush, used up to the ceiling (Linux's
//!   `tlb_single_page_flush_ceiling`, 33 pages; [`DEFAULT_FLUSH_CEILING_PAGES`]).
//! * A full flush must drop **global** translations too: kernel mappings (vmap
//!   areas included) are made with G = 1 so that they survive address-space
//!   switches, and "MOV to CR3 ... invalidates all TLB entries ... except those
//!   for global pages". So, as Linux's `native_flush_tlb_global()`:
//!   1. `INVPCID` type 2, "all-context invalidation, including global
//!      translations", when CPUID.(EAX=07H,ECX=0):EBX.INVPCID\[bit 10\] says the
//!      instruction exists;
//!   2. otherwise toggle CR4.PGE twice: "If CR4.PGE is changing, [MOV to CR4]
//!      invalidates all TLB entries (including global entries) and all entries
//!      in all paging-structure caches (for all PCIDs)". Done with interrupts
//!      off, since it is a read-modify-write of CR4 that an interrupt handler
//!      could race with. Used whenever CR4.PGE is set (global entries may exist)
//!      or CR4.PCIDE is set (a CR3 load would only drop the current PCID);
//!   3. otherwise (no global pages, no PCIDs) a CR3 reload drops everything.
//!
//! The instructions only act on the executing CPU. [`X86Tlb`] reaches the
//! others through a [`Shootdown`] hook the OS installs (send an IPI whose
//! handler calls [`X86Tlb::flush_local`]), as Linux's `flush_tlb_kernel_range()`
//! does with `on_each_cpu()`.
//!
//! [`X86Tlb`] exists on x86_64 bare metal only (and in the docs). Hosted builds
//! have no CPL 0 and use `arch_api::SoftTlb` instead; only the pure decisions
//! ([`FullFlush::choose`], the page count) are compiled and tested there.

use arch_api::VirtAddr;
#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
use arch_api::{DEFAULT_FLUSH_CEILING_PAGES, TlbFlush};

/// CR4.PGE (bit 7): global pages enabled.
pub const CR4_PGE: u64 = 1 << 7;
/// CR4.PCIDE (bit 17): process-context identifiers enabled.
pub const CR4_PCIDE: u64 = 1 << 17;

/// How a full flush (including global translations) is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullFlush {
    /// `INVPCID` type 2: all contexts, global translations included.
    Invpcid,
    /// Two writes to CR4 flipping PGE and back, interrupts off.
    TogglePge,
    /// Write CR3 back to itself: enough only without global pages and PCIDs.
    ReloadCr3,
}

impl FullFlush {
    /// The cheapest correct method given whether INVPCID exists and the current
    /// CR4 (see the [module docs](self) for the SDM rules behind each case).
    pub const fn choose(has_invpcid: bool, cr4: u64) -> Self {
        if has_invpcid {
            Self::Invpcid
        } else if cr4 & (CR4_PGE | CR4_PCIDE) != 0 {
            Self::TogglePge
        } else {
            Self::ReloadCr3
        }
    }
}

/// A flush other CPUs must perform, handed to the OS's shootdown hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shootdown {
    /// One page.
    Page(VirtAddr),
    /// `[start, end)` in pages of `page_size` bytes, at most the ceiling many.
    Range {
        /// First byte.
        start: VirtAddr,
        /// One past the last byte.
        end: VirtAddr,
        /// Page size of the mappings (4 KiB, 2 MiB or 1 GiB).
        page_size: u64,
    },
    /// Several ranges in pages of `page_size` bytes, the first `len` of
    /// `list`, together at most the ceiling many pages: a gather's flush
    /// list in one round of IPIs.
    Ranges {
        /// `[start, end)` ranges; only the first `len` count.
        list: [(VirtAddr, VirtAddr); MAX_SHOOTDOWN_RANGES],
        /// How many of `list` are used.
        len: usize,
        /// Page size of the mappings.
        page_size: u64,
    },
    /// Everything, global translations included.
    All,
}

/// Ranges one [`Shootdown::Ranges`] carries (a zap-walker gather sends up
/// to 8).
pub const MAX_SHOOTDOWN_RANGES: usize = 8;

/// Pages of `page_size` touched by `[start, end)`; 0 when empty.
#[cfg_attr(
    not(all(target_arch = "x86_64", any(target_os = "none", doc))),
    allow(dead_code)
)]
fn pages_in_range(start: VirtAddr, end: VirtAddr, page_size: u64) -> u64 {
    if end <= start {
        return 0;
    }
    let first = start.align_down(page_size).as_u64();
    (end.as_u64() - first).div_ceil(page_size)
}

/// The x86_64 TLB: `invlpg` per page up to the ceiling, a global-inclusive
/// full flush beyond it, and an optional [`Shootdown`] hook for the other CPUs.
#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
#[derive(Clone, Copy, Debug)]
pub struct X86Tlb {
    ceiling: u64,
    invpcid: bool,
    shootdown: Option<fn(&Shootdown)>,
}

#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
impl X86Tlb {
    /// A flusher for the executing CPU only (no shootdown hook), with Linux's
    /// 33-page ceiling. Probes CPUID for INVPCID once, here.
    ///
    /// # Safety
    /// This value and its copies must only be used at CPL 0 in long mode:
    /// `invlpg`, `invpcid` and the CR3 / CR4 moves are privileged (#GP
    /// otherwise), and the CR4 / CR3 writes assume the caller owns those
    /// registers (no other code keeps a copy of CR4 it will write back while a
    /// flush runs, beyond interrupt handlers, which are masked).
    pub unsafe fn new() -> Self {
        Self {
            ceiling: DEFAULT_FLUSH_CEILING_PAGES,
            invpcid: crate::cpuid::has_invpcid(),
            shootdown: None,
        }
    }

    /// Replaces the page ceiling above which a range is flushed whole.
    pub const fn with_ceiling(mut self, pages: u64) -> Self {
        self.ceiling = pages;
        self
    }

    /// Installs the hook that makes every other CPU that may hold the
    /// translations perform the same flush (typically an IPI whose handler
    /// calls [`flush_local`](Self::flush_local)), returning once they have. Called
    /// after the local flush.
    pub const fn with_shootdown(mut self, hook: fn(&Shootdown)) -> Self {
        self.shootdown = Some(hook);
        self
    }

    /// The method [`flush_all`](TlbFlush::flush_all) uses right now (it depends
    /// on CR4, which the OS may change).
    pub fn full_flush_method(&self) -> FullFlush {
        if self.invpcid {
            return FullFlush::Invpcid;
        }
        // SAFETY: CPL 0 per `new`'s contract; reading CR4 has no side effects.
        FullFlush::choose(false, unsafe { insn::read_cr4() })
    }

    /// Performs `req` on the executing CPU only: the body of the OS's shootdown
    /// IPI handler.
    pub fn flush_local(&self, req: &Shootdown) {
        match *req {
            Shootdown::Page(va) => self.invlpg(va),
            Shootdown::Range {
                start,
                end,
                page_size,
            } => {
                if pages_in_range(start, end, page_size) > self.ceiling {
                    self.full_local();
                } else {
                    self.invlpg_range(start, end, page_size);
                }
            }
            Shootdown::Ranges {
                ref list,
                len,
                page_size,
            } => {
                let list = &list[..len.min(MAX_SHOOTDOWN_RANGES)];
                let pages = list
                    .iter()
                    .map(|&(s, e)| pages_in_range(s, e, page_size))
                    .fold(0, u64::saturating_add);
                if pages > self.ceiling {
                    self.full_local();
                    return;
                }
                for &(start, end) in list {
                    self.invlpg_range(start, end, page_size);
                }
            }
            Shootdown::All => self.full_local(),
        }
    }

    /// `invlpg` for every page of `page_size` that `[start, end)` touches.
    fn invlpg_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        let mut va = start.align_down(page_size);
        while va < end {
            self.invlpg(va);
            va = VirtAddr::new(va.as_u64() + page_size);
        }
    }

    fn invlpg(&self, va: VirtAddr) {
        // SAFETY: CPL 0 per `new`'s contract; INVLPG only drops cached
        // translations, it never faults on an unmapped or non-canonical address.
        unsafe { insn::invlpg(va.as_u64()) }
    }

    fn full_local(&self) {
        if self.invpcid {
            // SAFETY: CPL 0 per `new`'s contract, and CPUID said INVPCID exists.
            unsafe { insn::invpcid_all_including_global() };
            return;
        }
        // SAFETY: CPL 0 per `new`'s contract. Interrupts are off between the
        // CR4 read and its write-back, so no handler's CR4 change is lost, and
        // they are restored to their previous state.
        unsafe {
            let rflags = insn::save_flags_and_cli();
            let cr4 = insn::read_cr4();
            match FullFlush::choose(false, cr4) {
                FullFlush::TogglePge => {
                    insn::write_cr4(cr4 ^ CR4_PGE);
                    insn::write_cr4(cr4);
                }
                _ => insn::write_cr3(insn::read_cr3()),
            }
            insn::restore_interrupts(rflags);
        }
    }

    fn shoot(&self, req: Shootdown) {
        if let Some(hook) = self.shootdown {
            hook(&req);
        }
    }
}

#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
impl TlbFlush for X86Tlb {
    fn flush_page(&self, va: VirtAddr) {
        self.invlpg(va);
        self.shoot(Shootdown::Page(va));
    }

    fn flush_all(&self) {
        self.full_local();
        self.shoot(Shootdown::All);
    }

    fn flush_ceiling_pages(&self) -> u64 {
        self.ceiling
    }

    /// One shootdown for the whole range (not one per page).
    fn flush_range(&self, start: VirtAddr, end: VirtAddr, page_size: u64) {
        let pages = pages_in_range(start, end, page_size);
        if pages == 0 {
            return;
        }
        if pages > self.ceiling {
            self.flush_all();
            return;
        }
        let req = Shootdown::Range {
            start,
            end,
            page_size,
        };
        self.flush_local(&req);
        self.shoot(req);
    }

    /// One shootdown per [`MAX_SHOOTDOWN_RANGES`] ranges of the list; a full
    /// flush if together they exceed the ceiling.
    fn flush_ranges(&self, ranges: &[(VirtAddr, VirtAddr)], page_size: u64) {
        let pages: u64 = ranges
            .iter()
            .map(|&(s, e)| pages_in_range(s, e, page_size))
            .fold(0, u64::saturating_add);
        if pages == 0 {
            return;
        }
        if pages > self.ceiling {
            self.flush_all();
            return;
        }
        for chunk in ranges.chunks(MAX_SHOOTDOWN_RANGES) {
            let mut list = [(VirtAddr::new(0), VirtAddr::new(0)); MAX_SHOOTDOWN_RANGES];
            list[..chunk.len()].copy_from_slice(chunk);
            let req = Shootdown::Ranges {
                list,
                len: chunk.len(),
                page_size,
            };
            self.flush_local(&req);
            self.shoot(req);
        }
    }
}

/// The privileged instructions, one per function.
#[cfg(all(target_arch = "x86_64", any(target_os = "none", doc)))]
mod insn {
    use core::arch::asm;

    const RFLAGS_IF: u64 = 1 << 9;

    /// # Safety
    /// CPL 0.
    pub(super) unsafe fn invlpg(va: u64) {
        // SAFETY: the caller is at CPL 0. No `nomem`: the page-table stores
        // before it must not be moved after it.
        unsafe { asm!("invlpg [{}]", in(reg) va, options(nostack, preserves_flags)) }
    }

    /// INVPCID type 2: all PCIDs, global translations included.
    ///
    /// # Safety
    /// CPL 0 and CPUID.(EAX=07H,ECX=0):EBX\[10\] set.
    pub(super) unsafe fn invpcid_all_including_global() {
        // Types 2 and 3 ignore the descriptor, but it is still a memory operand.
        let desc = [0u64; 2];
        // SAFETY: the caller is at CPL 0 on a CPU with INVPCID; `desc` is a
        // readable 16-byte descriptor.
        unsafe {
            asm!(
                "invpcid {ty}, xmmword ptr [{desc}]",
                ty = in(reg) 2u64,
                desc = in(reg) &desc,
                options(nostack, preserves_flags),
            )
        }
    }

    /// # Safety
    /// CPL 0.
    pub(super) unsafe fn read_cr4() -> u64 {
        let v: u64;
        // SAFETY: the caller is at CPL 0; reading CR4 has no side effects.
        unsafe { asm!("mov {}, cr4", out(reg) v, options(nomem, nostack, preserves_flags)) };
        v
    }

    /// # Safety
    /// CPL 0; `v` a valid CR4 value for this CPU.
    pub(super) unsafe fn write_cr4(v: u64) {
        // SAFETY: per the caller. No `nomem`: it flushes translations.
        unsafe { asm!("mov cr4, {}", in(reg) v, options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// CPL 0.
    pub(super) unsafe fn read_cr3() -> u64 {
        let v: u64;
        // SAFETY: the caller is at CPL 0; reading CR3 has no side effects.
        unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) };
        v
    }

    /// # Safety
    /// CPL 0; `v` the current CR3 (same root table), or another valid one.
    pub(super) unsafe fn write_cr3(v: u64) {
        // Bit 63 set would mean "keep this PCID's translations" with PCIDE = 1.
        let v = v & !(1 << 63);
        // SAFETY: per the caller. No `nomem`: it flushes translations.
        unsafe { asm!("mov cr3, {}", in(reg) v, options(nostack, preserves_flags)) }
    }

    /// Returns RFLAGS, then disables maskable interrupts.
    ///
    /// # Safety
    /// CPL 0 (or IOPL permitting CLI).
    pub(super) unsafe fn save_flags_and_cli() -> u64 {
        let flags: u64;
        // SAFETY: pushfq/pop use the stack (no `nostack`) and leave it
        // balanced; CLI is allowed at CPL 0. No `nomem`: a compiler barrier
        // keeps the critical section's memory accesses inside it.
        unsafe { asm!("pushfq", "pop {}", "cli", out(reg) flags, options(preserves_flags)) };
        flags
    }

    /// Re-enables interrupts if `flags` (from [`save_flags_and_cli`]) had IF set.
    ///
    /// # Safety
    /// CPL 0.
    pub(super) unsafe fn restore_interrupts(flags: u64) {
        if flags & RFLAGS_IF != 0 {
            // SAFETY: the caller is at CPL 0; interrupts were on before.
            unsafe { asm!("sti", options(nostack, preserves_flags)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arch_api::DEFAULT_FLUSH_CEILING_PAGES;

    #[test]
    fn full_flush_method_follows_sdm_4_10_4() {
        // INVPCID wins whatever CR4 says.
        assert_eq!(FullFlush::choose(true, 0), FullFlush::Invpcid);
        assert_eq!(
            FullFlush::choose(true, CR4_PGE | CR4_PCIDE),
            FullFlush::Invpcid
        );
        // Global pages on: a CR3 load would keep them, so toggle PGE.
        // 0x0000_06a0 = PAE | PGE | OSFXSR | OSXMMEXCPT, a typical kernel CR4.
        assert_eq!(FullFlush::choose(false, 0x06a0), FullFlush::TogglePge);
        // PCIDs on without PGE: a CR3 load drops only the current PCID.
        assert_eq!(FullFlush::choose(false, 0x2_0620), FullFlush::TogglePge);
        // Neither: CR3 reload is complete.
        assert_eq!(FullFlush::choose(false, 0x0620), FullFlush::ReloadCr3);
    }

    #[test]
    fn page_counting_matches_the_ceiling_rule() {
        let v = VirtAddr::new;
        assert_eq!(pages_in_range(v(0x1000), v(0x1000), 4096), 0);
        assert_eq!(pages_in_range(v(0x2000), v(0x1000), 4096), 0);
        assert_eq!(pages_in_range(v(0x1000), v(0x2000), 4096), 1);
        // Unaligned ends touch both pages.
        assert_eq!(pages_in_range(v(0x1fff), v(0x2001), 4096), 2);
        // 33 pages is still page by page, 34 is a full flush.
        assert_eq!(
            pages_in_range(v(0), v(33 * 4096), 4096),
            DEFAULT_FLUSH_CEILING_PAGES
        );
        assert!(pages_in_range(v(0), v(34 * 4096), 4096) > DEFAULT_FLUSH_CEILING_PAGES);
        // 2 MiB pages: 4 MiB is two invlpgs.
        assert_eq!(pages_in_range(v(0x20_0000), v(0x60_0000), 0x20_0000), 2);
    }
}

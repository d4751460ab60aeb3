//! The kernel's own page tables, built through `arch_x86_64`'s
//! [`X86_64Pml4`] layout and [`Pml4Entry`] encoding, replacing the boot
//! tables of `boot.rs`.
//!
//! Every RAM range of the PVH memory map is identity-mapped (so the
//! workloads' `PhysMap` is an offset of 0), with 2 MiB pages where both
//! addresses are 2 MiB aligned and 4 KiB pages elsewhere, all global
//! (CR4.PGE is turned on after the switch), as Linux's direct map:
//!
//! | range | rights |
//! |---|---|
//! | page 0 | unmapped: a null dereference faults |
//! | `.text` | read, execute |
//! | `.rodata` (and the PVH note) | read |
//! | `.data`, `.bss`, stacks, the rest of RAM | read, write, no-execute |
//! | the page below each stack | unmapped (guard) |
//!
//! The rights hold because CR0.WP = 1 (supervisor writes honour R/W = 0)
//! and IA32_EFER.NXE = 1 (bit 63 is XD, not a reserved bit) on every CPU
//! before this map is loaded (`boot.rs`, the AP trampoline in `smp.rs`):
//! Intel SDM Vol. 3A §4.6, "Access Rights", and §4.5, where XD is reserved
//! (a #PF on any walk through it) unless NXE is set. The tables need no
//! cache maintenance: x86 page walks are coherent with the caches (§4.10,
//! "Caching Translation Information": walks use the paging structures'
//! memory type through CR3/PCD, WB here). `wx_check.rs` proves the rights
//! at boot. Nothing else is mapped: the 16550 and `isa-debug-exit` are I/O ports,
//! and vmap-lazy maps the vmalloc window into this same PML4
//! (`Vmalloc::attach`, `kernel/vmalloc_loop.rs`). Table pages come from a bump allocator right after the
//! image; [`free_ram`](super::free_ram) starts where it stopped.

use super::pvh::RamMap;
use arch_api::{EntryKind, MapFlags, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};
use arch_x86_64::{Pml4Entry, X86_64Pml4};
use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};

type L = X86_64Pml4;

/// CR4.PGE: global pages (translations kept across CR3 loads).
const CR4_PGE: u64 = 1 << 7;
const PAGE: u64 = 4096;

unsafe extern "C" {
    static __kernel_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __boot_stack_guard: u8;
    static __fault_stack_guard: u8;
    static __kernel_end: u8;
}

/// The live kernel PML4 (physical = virtual), once [`init`] ran.
pub static KERNEL_ROOT: AtomicU64 = AtomicU64::new(0);
/// `[start, end)` of the RAM left to hand out, once [`init`] ran.
pub static FREE_START: AtomicU64 = AtomicU64::new(0);
/// See [`FREE_START`].
pub static FREE_END: AtomicU64 = AtomicU64::new(0);
/// Table pages the kernel map took.
pub static TABLE_PAGES: AtomicU64 = AtomicU64::new(0);

fn sym(s: &u8) -> u64 {
    s as *const u8 as u64
}

/// Hands out zeroed 4 KiB frames from `[next, end)`.
struct Bump {
    next: u64,
    end: u64,
    taken: u64,
}

impl Bump {
    fn table(&mut self) -> PhysAddr {
        assert!(self.next + PAGE <= self.end, "no RAM left for page tables");
        let pa = self.next;
        self.next += PAGE;
        self.taken += 1;
        // SAFETY: `pa` is an unused RAM frame past the image (the bump owns
        // `[next, end)`), identity-mapped by the boot tables and page aligned.
        unsafe { core::ptr::write_bytes(pa as *mut u8, 0, PAGE as usize) };
        PhysAddr::new(pa)
    }
}

/// Maps `[start, end)` to itself with `flags`, 2 MiB leaves where possible.
fn map_identity(root: PhysAddr, bump: &mut Bump, start: u64, end: u64, flags: MapFlags) {
    let huge = L::entry_span(L::LEVELS - 2);
    let mut va = start;
    while va < end {
        let leaf_level = if va % huge == 0 && end - va >= huge {
            L::LEVELS - 2
        } else {
            L::LEVELS - 1
        };
        let slot = leaf_slot(root, bump, VirtAddr::new(va), leaf_level);
        // SAFETY: `slot` is an entry of a table page reached from `root`,
        // identity-mapped, and not live yet (or, for `map_page`, an empty
        // entry the hardware ignores until it is written).
        unsafe { slot.write(Pml4Entry::new_leaf(PhysAddr::new(va), flags, leaf_level).raw()) };
        va += L::entry_span(leaf_level);
    }
}

/// The entry at `leaf_level` translating `va` under `root`, allocating the
/// tables above it from `bump` as needed.
fn leaf_slot(root: PhysAddr, bump: &mut Bump, va: VirtAddr, leaf_level: usize) -> *mut u64 {
    let mut table = root;
    for level in 0..leaf_level {
        let slot = entry_ptr(table, va, level);
        // SAFETY: `slot` is inside a table page reached from `root`, all of
        // which are identity-mapped RAM owned by the kernel map.
        let e = Pml4Entry::from_raw(unsafe { slot.read() });
        table = match e.kind(level) {
            EntryKind::Table => e.addr(),
            EntryKind::None => {
                let t = bump.table();
                // SAFETY: as above; the new table is zeroed before it is
                // linked, so the MMU never sees garbage through it.
                unsafe { slot.write(Pml4Entry::new_table(t).raw()) };
                t
            }
            EntryKind::Leaf => panic!("kernel map: {va:?} already mapped by a leaf"),
        };
    }
    entry_ptr(table, va, leaf_level)
}

/// The 4 KiB entry (PTE) translating `va` in the kernel PML4, with its
/// tables taken from the start of the free RAM (which [`free_ram`]
/// then no longer reports). Boot only, before the frames are handed out.
///
/// [`free_ram`]: super::free_ram
pub fn kernel_pte(va: VirtAddr) -> *mut u64 {
    let mut bump = Bump {
        next: FREE_START.load(Ordering::Relaxed),
        end: FREE_END.load(Ordering::Relaxed),
        taken: 0,
    };
    let root = PhysAddr::new(KERNEL_ROOT.load(Ordering::Relaxed));
    let slot = leaf_slot(root, &mut bump, va, L::LEVELS - 1);
    FREE_START.store(bump.next, Ordering::Relaxed);
    TABLE_PAGES.fetch_add(bump.taken, Ordering::Relaxed);
    slot
}

/// Takes one frame from the start of the free RAM. Boot only, as
/// [`kernel_pte`].
pub fn take_frame() -> u64 {
    let pa = FREE_START.fetch_add(PAGE, Ordering::Relaxed);
    assert!(pa + PAGE <= FREE_END.load(Ordering::Relaxed), "no free RAM");
    pa
}

/// The entry of `table` (a table at `level`) that translates `va`.
fn entry_ptr(table: PhysAddr, va: VirtAddr, level: usize) -> *mut u64 {
    (table.as_u64() as *mut u64).wrapping_add(L::index(va, level))
}

/// Builds the kernel map, loads it into CR3 and turns global pages on.
///
/// # Safety
/// Boot, once, on the boot tables (identity map of the first GiB), with the
/// image at its link address and `ram` describing real RAM.
pub unsafe fn init(ram: &RamMap) {
    // SAFETY: linker-script symbols; only their addresses are used.
    let (k_start, text_end, rodata_end, stack_guard, fault_guard, k_end) = unsafe {
        (
            sym(&__kernel_start),
            sym(&__text_end),
            sym(&__rodata_end),
            sym(&__boot_stack_guard),
            sym(&__fault_stack_guard),
            sym(&__kernel_end),
        )
    };
    let home = ram
        .iter()
        .find(|&(s, e)| s <= k_start && k_end <= e)
        .expect("the kernel image is not in RAM");
    let mut bump = Bump {
        next: k_end,
        end: home.1,
        taken: 0,
    };
    let root = bump.table();

    let data = MapFlags::WRITE | MapFlags::GLOBAL;
    for (s, e) in ram.iter() {
        let s = s.max(PAGE); // page 0 stays unmapped
        // RAM outside the image; the image gets its own rights below.
        if s < k_start {
            map_identity(root, &mut bump, s, e.min(k_start), data);
        }
        if e > k_end {
            map_identity(root, &mut bump, s.max(k_end), e, data);
        }
    }
    let text = MapFlags::EXEC | MapFlags::GLOBAL;
    map_identity(root, &mut bump, k_start, text_end, text);
    map_identity(root, &mut bump, text_end, rodata_end, MapFlags::GLOBAL);
    map_identity(root, &mut bump, rodata_end, stack_guard, data);
    map_identity(root, &mut bump, stack_guard + PAGE, fault_guard, data);
    map_identity(root, &mut bump, fault_guard + PAGE, k_end, data);

    KERNEL_ROOT.store(root.as_u64(), Ordering::Relaxed);
    FREE_START.store(bump.next, Ordering::Relaxed);
    FREE_END.store(bump.end, Ordering::Relaxed);
    TABLE_PAGES.store(bump.taken, Ordering::Relaxed);

    // SAFETY: the new tables map everything in use — the code running now,
    // its stack, the statics, RAM — at the same addresses as the boot tables
    // (only with tighter rights); EFER.NXE was set at boot, so the XD bits
    // are valid. Setting CR4.PGE afterwards flushes the whole TLB, and from
    // then on the global kernel entries survive CR3 loads.
    unsafe {
        asm!("mov cr3, {}", in(reg) root.as_u64(), options(nostack, preserves_flags));
        let cr4: u64;
        asm!("mov {}, cr4", out(reg) cr4, options(nomem, nostack, preserves_flags));
        asm!("mov cr4, {}", in(reg) cr4 | CR4_PGE, options(nostack, preserves_flags));
    }
}

/// The physical address of the live root table (CR3 without its flag bits).
pub fn read_cr3() -> u64 {
    let v: u64;
    // SAFETY: CPL 0; reading CR3 has no side effects.
    unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v & 0x000f_ffff_ffff_f000
}

/// Loads CR3 with `root` (which must map the running kernel).
///
/// # Safety
/// `root` is a PML4 that maps the kernel's code, stacks and data as the
/// current one does.
pub unsafe fn write_cr3(root: u64) {
    // SAFETY: per the caller.
    unsafe { asm!("mov cr3, {}", in(reg) root, options(nostack, preserves_flags)) };
}

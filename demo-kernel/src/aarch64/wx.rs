//! W^X for the kernel's own mappings: the image split into 4 KiB pages by
//! the linker script's section symbols (text read-only executable, rodata
//! read-only, data/BSS/stacks and every other RAM block read/write and
//! never executable), the boot tables' cache maintenance before the MMU
//! reads them, and the boot-time walk that proves no leaf is both writable
//! and executable at EL1.

use super::{Layout, RAM_END, RAM_START};
use arch_aarch64::Descriptor4K;
use arch_api::{MapFlags, PageTableEntry, PageTableLayout, PhysAddr, VirtAddr};
use core::arch::asm;
use core::ptr::addr_of;

unsafe extern "C" {
    static __text_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __kernel_end: u8;
    static __bss_start: u8;
    static __bss_end: u8;
}

/// The linker script's section bounds, page aligned there.
struct Image {
    text: (u64, u64),
    rodata_end: u64,
    end: u64,
}

fn image() -> Image {
    // Only the symbols' addresses are taken; the linker script defines them.
    Image {
        text: (addr_of!(__text_start) as u64, addr_of!(__text_end) as u64),
        rodata_end: addr_of!(__rodata_end) as u64,
        end: addr_of!(__kernel_end) as u64,
    }
}

/// The flags of the kernel page at `pa` (inside the image).
fn image_page_flags(img: &Image, pa: u64) -> MapFlags {
    if (img.text.0..img.text.1).contains(&pa) {
        // Text: read-only (AP[2] = 1) and privileged-executable (PXN = 0).
        MapFlags::EXEC | MapFlags::GLOBAL
    } else if pa < img.rodata_end {
        // Rodata: read-only, PXN = UXN = 1.
        MapFlags::GLOBAL
    } else {
        // Data, BSS, stacks: read/write, PXN = UXN = 1.
        MapFlags::WRITE | MapFlags::GLOBAL
    }
}

/// Fills the RAM part of the identity map: 2 MiB read/write never-executable
/// blocks, except the blocks holding the image, which point to a level-3
/// table from `l3` each so the image's sections get their own permissions.
/// `set(table_pa, index, entry)` stores one entry.
///
/// Every entry is written once, while the MMU is off and before any TLB can
/// hold it, so no live entry changes here and break-before-make (Arm ARM
/// DDI 0487 M.a, D8.17.1 "Using break-before-make when updating
/// translation table entries") has nothing to order; the later changes (vmalloc's leaves in
/// TTBR1, the fault test's cleared valid bit) go from or to invalid.
pub(super) fn map_ram(l2: u64, l3: &[u64], mut set: impl FnMut(u64, usize, Descriptor4K)) {
    let img = image();
    let block = Layout::entry_span(2);
    let (first, last) = (img.text.0 & !(block - 1), (img.end - 1) & !(block - 1));
    assert!(
        ((last - first) / block) < l3.len() as u64,
        "kernel image spans more 2 MiB blocks than the boot map has level-3 tables"
    );
    let va = VirtAddr::new;
    let mut pa = RAM_START;
    while pa < RAM_END {
        let e = if (first..=last).contains(&pa) {
            let table = l3[((pa - first) / block) as usize];
            let mut page = pa;
            while page < pa + block {
                let flags = if (img.text.0..img.end).contains(&page) {
                    image_page_flags(&img, page)
                } else {
                    MapFlags::WRITE | MapFlags::GLOBAL
                };
                set(
                    table,
                    Layout::index(va(page), 3),
                    Descriptor4K::new_leaf(PhysAddr::new(page), flags, 3),
                );
                page += Layout::PAGE_SIZE;
            }
            Descriptor4K::new_table(PhysAddr::new(table))
        } else {
            Descriptor4K::new_leaf(PhysAddr::new(pa), MapFlags::WRITE | MapFlags::GLOBAL, 2)
        };
        set(l2, Layout::index(va(pa), 2), e);
        pa += block;
    }
}

/// Invalidates BSS (the boot tables and everything else written so far
/// with the MMU off) from the data caches to the point of coherency.
///
/// With SCTLR_EL1.M = 0 every data access is Device-nGnRnE, so the stores
/// that built the tables went to memory around the caches, while the MMU's
/// walks (TCR_EL1.IRGN/ORGN = write-back) and the kernel's own loads once
/// the MMU is on look in the caches first: a line left there by earlier
/// software or fetched speculatively would hide them. The Arm ARM (DDI
/// 0487 M.a, D7.5.6 "Behavior of caches at reset", D7.5.7 "Non-cacheable
/// accesses and instruction caches", and C5.3.37 "DC IVAC": invalidate by
/// VA to the PoC) requires software to invalidate such lines before it
/// relies on cacheable reads of data written non-cacheably. Invalidate, not clean: a
/// clean would write a stale dirty line over what was just stored.
pub(super) fn invalidate_bss_to_poc() {
    // Only the symbols' addresses are taken; the linker script defines them.
    let (start, end) = (addr_of!(__bss_start) as u64, addr_of!(__bss_end) as u64);
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe { asm!("mrs {c}, ctr_el0", c = out(reg) ctr, options(nomem, nostack)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    // BSS starts page aligned (linker script); its end is rounded up to a
    // line, and what follows it (the boot stack) was also only written with
    // the MMU off, so no dirty line of ours is discarded.
    let mut a = start & !(line - 1);
    // SAFETY: a barrier; the table stores complete before the maintenance.
    unsafe { asm!("dsb sy", options(nostack)) };
    while a < end {
        // SAFETY: invalidating a line of RAM that was only written with the
        // MMU off (so memory holds the value) changes no value.
        unsafe { asm!("dc ivac, {a}", a = in(reg) a, options(nostack)) };
        a += line;
    }
    // SAFETY: a barrier; the invalidations complete before the MMU is on.
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// Descriptor bits the check reads (Arm ARM DDI 0487 M.a, D8.3, Table
/// D8-52 "Stage 1 VMSAv8-64 Block and Page descriptor fields"; their
/// meaning for execution: D8.4.1.2.3 "Stage 1 instruction execution using
/// Direct permissions"): AP[2] (read-only), PXN.
const AP_RO: u64 = 1 << 7;
const PXN: u64 = 1 << 53;

/// What the walk found.
#[derive(Default)]
pub(crate) struct WxReport {
    pub(crate) rx: u64,
    pub(crate) ro: u64,
    pub(crate) rw_nx: u64,
    pub(crate) wx: u64,
}

fn walk(table: u64, level: usize, r: &mut WxReport) {
    for i in 0..512 {
        // SAFETY: `table` is a live translation table in identity-mapped
        // RAM; reading an entry changes nothing.
        let raw = unsafe { (table as *const u64).add(i).read_volatile() };
        if raw & 1 == 0 {
            continue;
        }
        let e = Descriptor4K::from_raw(raw);
        if level < 3 && raw & 2 != 0 {
            walk(e.addr().as_u64(), level + 1, r);
            continue;
        }
        match (raw & AP_RO != 0, raw & PXN == 0) {
            (false, true) => r.wx += 1,
            (true, true) => r.rx += 1,
            (true, false) => r.ro += 1,
            (false, false) => r.rw_nx += 1,
        }
    }
}

/// Walks both roots: leaves counted by EL1 permission, `wx` the writable
/// and executable ones (must be 0).
pub(crate) fn check(ttbr0: u64, ttbr1: u64) -> WxReport {
    let mut r = WxReport::default();
    walk(ttbr0, 0, &mut r);
    walk(ttbr1, 0, &mut r);
    r
}

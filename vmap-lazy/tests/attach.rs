//! vmalloc in the kernel's own page table: a PML4 built by the `x86_64`
//! crate (as a blog_os-style kernel has one) over the hosted arena, with
//! mappings outside the vmalloc window. vmalloc / touch / vfree / purge
//! work inside the window, the kernel's crate sees vmalloc's pages through
//! its own walk, and every mapping outside the window is untouched.

mod common;

use arch_api::{FrameSource, HostedCpus, PhysAddr, PhysArena, PhysMap, VirtAddr};
use common::*;
use std::collections::BTreeMap;
use vmap_core::ShardedVmap;
use vmap_lazy::{LazyMaxPages, NodeLazy, Vmalloc, VmallocMem};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, PhysFrame, Size4KiB,
    Translate,
};

struct Alloc<'a>(&'a PhysArena);

// SAFETY: every frame handed out is a fresh, unused arena frame.
unsafe impl FrameAllocator<Size4KiB> for Alloc<'_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame> {
        let pa = self.0.alloc(PAGE, PAGE).ok()?;
        Some(PhysFrame::containing_address(x86_64::PhysAddr::new(
            pa.as_u64(),
        )))
    }
}

/// The kernel: a PML4 in the arena, the `x86_64` crate's mapper over it.
struct Kernel<'a> {
    arena: &'a PhysArena,
    root: PhysAddr,
    offset: u64,
    /// What the kernel mapped itself, outside the vmalloc window.
    outside: BTreeMap<u64, PhysAddr>,
}

impl<'a> Kernel<'a> {
    fn boot(arena: &'a PhysArena, window_end: u64) -> Self {
        let root = arena.alloc(PAGE, PAGE).unwrap();
        // SAFETY: a fresh arena frame, zeroed: an empty PML4.
        unsafe { arena.phys_to_ptr(root).write_bytes(0, PAGE as usize) };
        let offset =
            (arena.phys_to_ptr(PhysArena::BASE) as u64).wrapping_sub(PhysArena::BASE.as_u64());
        let mut k = Kernel {
            arena,
            root,
            offset,
            outside: BTreeMap::new(),
        };
        // A direct map, a kernel image, and the pages right after the
        // window (sharing its PML4 entry and PDPT).
        for start in [0xffff_8880_0000_0000, 0xffff_ffff_8000_0000, window_end] {
            for i in 0..3 {
                let f = arena.alloc(PAGE, PAGE).unwrap();
                k.map(start + i * PAGE, f);
                k.outside.insert(start + i * PAGE, f);
            }
        }
        k
    }

    fn mapper(&self) -> OffsetPageTable<'static> {
        // SAFETY: the PML4 is arena memory, which lives as long as the test;
        // the arena maps every frame at `offset + pa`. The mapper is used
        // only while nothing else writes the tables.
        unsafe {
            let l4 = &mut *(self.arena.phys_to_ptr(self.root) as *mut PageTable);
            OffsetPageTable::new(l4, x86_64::VirtAddr::new(self.offset))
        }
    }

    fn map(&mut self, a: u64, f: PhysAddr) {
        let page: Page<Size4KiB> = Page::containing_address(x86_64::VirtAddr::new(a));
        let frame = PhysFrame::containing_address(x86_64::PhysAddr::new(f.as_u64()));
        let flags = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
        // SAFETY: a fresh frame at an address nothing maps.
        unsafe {
            self.mapper()
                .map_to(page, frame, flags, &mut Alloc(self.arena))
        }
        .unwrap()
        .ignore();
    }

    fn translate(&self, a: u64) -> Option<u64> {
        self.mapper()
            .translate_addr(x86_64::VirtAddr::new(a))
            .map(|p| p.as_u64())
    }

    fn outside_untouched(&self) {
        for (&a, &f) in &self.outside {
            assert_eq!(self.translate(a), Some(f.as_u64()), "{a:#x}");
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "OffsetPageTable: Miri's host addresses are no fixed offset from canonical ones"
)]
fn vmalloc_maps_into_the_kernels_own_table() {
    let arena = arena(16 << 20);
    let pages = 1 << 16;
    let window_end = VSTART + pages * PAGE;
    let kernel = Kernel::boot(&arena, window_end);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    // SAFETY: the kernel's PML4, in arena memory; nothing else writes
    // inside the window while `v` lives.
    let v: Vmalloc<'_, K<'_>> = unsafe {
        Vmalloc::attach(
            &mem,
            kernel.root,
            space(pages),
            tlb.on(0),
            cpus(),
            LazyMaxPages,
        )
    }
    .unwrap();
    assert_eq!(v.page_table_roots().0[0], kernel.root);
    let mut live = Vec::new();
    for round in 0..200u64 {
        let a = v.vmalloc((1 + round % 5) * PAGE).unwrap();
        for p in 0..1 + round % 5 {
            let x = va(a, p);
            v.write_byte(x, round as u8).unwrap();
            // The kernel's own walk finds vmalloc's page, at its frame.
            let frame = v.translate(x).unwrap().frame;
            assert_eq!(kernel.translate(x.as_u64()), Some(frame.as_u64()));
        }
        live.push(a);
        if live.len() > 8 {
            v.vfree(live.remove(0)).unwrap();
        }
    }
    for a in live {
        v.vfree(a).unwrap();
    }
    v.purge_vmap_area_lazy();
    v.check_consistency().unwrap();
    assert!(v.areas().is_empty());
    for p in 0..64 {
        assert_eq!(kernel.translate(VSTART + p * PAGE), None);
    }
    kernel.outside_untouched();
    // Every data frame went back: what vmalloc still holds is page-table
    // memory (the tables it linked into the window, its side store).
    let tables = v.pagetable_bytes();
    assert_eq!(mem.bytes_out(), tables);
    drop(v);
    // The tables it linked stay in the kernel's table (kernel page tables
    // are never freed); its side store of counts went back.
    assert!(mem.bytes_out() > 0 && mem.bytes_out() < tables);
    kernel.outside_untouched();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "OffsetPageTable: Miri's host addresses are no fixed offset from canonical ones"
)]
fn sharded_vmalloc_maps_into_the_kernels_own_table() {
    let arena = arena(16 << 20);
    let span = 1u64 << 32;
    let kernel = Kernel::boot(&arena, VSTART + span);
    let mem = VmallocMem::new(&arena);
    let tlb = tlb();
    let nodes: ShardedVmap<arch_api::sync::DefaultRawMutex, NodeLazy> = ShardedVmap::new(
        VirtAddr::new(VSTART),
        VirtAddr::new(VSTART + span),
        PAGE,
        CPUS,
    )
    .unwrap();
    // SAFETY: as above.
    let v: Vmalloc<'_, K<'_>, LazyMaxPages, _> =
        unsafe { Vmalloc::attach(&mem, kernel.root, nodes, tlb.on(0), cpus(), LazyMaxPages) }
            .unwrap();
    let mut got = Vec::new();
    for cpu in 0..CPUS {
        HostedCpus::run_on(cpu);
        let a = v.vmalloc(2 * PAGE).unwrap();
        v.write_byte(a, 7).unwrap();
        assert!(kernel.translate(a.as_u64()).is_some());
        got.push(a);
    }
    for a in got {
        v.vfree(a).unwrap();
        assert_eq!(kernel.translate(a.as_u64()), None);
    }
    v.purge_vmap_area_lazy();
    kernel.outside_untouched();
}

//! A walker attached to tables built by other code: the `x86_64` crate's
//! `OffsetPageTable` and `aarch64-paging`'s `Mapping`, over the hosted
//! `PhysArena`. The walker translates what they mapped, zaps part of its
//! window (returning exactly those frames), maps and zaps its own pages
//! there, and leaves every mapping outside the window as it was: the other
//! crate still walks it.

use arch_aarch64::Aarch64Granule4K;
use arch_api::{FrameSource, MapFlags, PhysAddr, PhysArena, PhysMap, SoftTlb, VirtAddr};
use arch_x86_64::X86_64Pml4;
use std::collections::BTreeMap;
use zap_walker::{Frames, Gather, Unbounded, WalkError, Walker};

const PS: u64 = 4096;

fn va(a: u64) -> VirtAddr {
    VirtAddr::new(a)
}

fn frame(arena: &PhysArena) -> PhysAddr {
    arena.alloc(PS, PS).unwrap()
}

/// Maps `pages` pages from `start` with `map`, each to a fresh arena frame;
/// the frames, by address.
fn map_pages(
    arena: &PhysArena,
    start: u64,
    pages: u64,
    mut map: impl FnMut(u64, PhysAddr),
) -> BTreeMap<u64, PhysAddr> {
    (0..pages)
        .map(|i| {
            let (a, f) = (start + i * PS, frame(arena));
            map(a, f);
            (a, f)
        })
        .collect()
}

mod x86 {
    use super::*;
    use x86_64::structures::paging::{
        FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, PhysFrame,
        Size4KiB, Translate,
    };

    struct Alloc<'a>(&'a PhysArena);

    // SAFETY: every frame handed out is a fresh, unused arena frame.
    unsafe impl FrameAllocator<Size4KiB> for Alloc<'_> {
        fn allocate_frame(&mut self) -> Option<PhysFrame> {
            let pa = self.0.alloc(PS, PS).ok()?;
            Some(PhysFrame::containing_address(x86_64::PhysAddr::new(
                pa.as_u64(),
            )))
        }
    }

    /// The kernel's vmalloc window (Linux's VMALLOC_START), 1 GiB of it:
    /// it shares its PML4 entry and PDPT with what lies just above.
    const WINDOW: u64 = 0xffff_c900_0000_0000;
    const WINDOW_END: u64 = WINDOW + (1 << 30);

    #[test]
    #[cfg_attr(
        miri,
        ignore = "OffsetPageTable: Miri's host addresses are no fixed offset from canonical ones"
    )]
    fn walker_adopts_tables_built_by_the_x86_64_crate() {
        let arena = PhysArena::new(64 << 20, PS).unwrap();
        let root = frame(&arena);
        // SAFETY: a fresh arena frame, zeroed here, is a valid empty PML4.
        let l4 = unsafe {
            let p = arena.phys_to_ptr(root);
            p.write_bytes(0, PS as usize);
            &mut *(p as *mut PageTable)
        };
        // The arena's host memory is a fixed offset from its physical
        // addresses: what `OffsetPageTable` wants.
        let offset =
            (arena.phys_to_ptr(PhysArena::BASE) as u64).wrapping_sub(PhysArena::BASE.as_u64());
        // SAFETY: every frame of the arena is mapped at `offset + pa`.
        let mut kernel = unsafe { OffsetPageTable::new(l4, x86_64::VirtAddr::new(offset)) };
        let flags = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
        let mut alloc = Alloc(&arena);
        let mut map = |a: u64, f: PhysAddr| {
            let page: Page<Size4KiB> = Page::containing_address(x86_64::VirtAddr::new(a));
            let frame = PhysFrame::containing_address(x86_64::PhysAddr::new(f.as_u64()));
            // SAFETY: a fresh frame at an address nothing else maps.
            unsafe { kernel.map_to(page, frame, flags, &mut alloc) }
                .unwrap()
                .ignore();
        };
        // Inside the window: two runs in two last-level tables. Outside: the
        // direct map, user space, and the pages right after the window (in
        // the window's own PML4 entry and PDPT).
        let mut inside = map_pages(&arena, WINDOW + 5 * PS, 40, &mut map);
        inside.extend(map_pages(&arena, WINDOW + (3 << 21), 3, &mut map));
        let mut outside = map_pages(&arena, 0xffff_8880_0000_0000, 4, &mut map);
        outside.extend(map_pages(&arena, 0x4000_0000, 4, &mut map));
        outside.extend(map_pages(&arena, WINDOW_END, 2, &mut map));

        // SAFETY: `root` is the PML4 just built, in arena memory; only the
        // walker writes inside the window from now on.
        let mut w =
            unsafe { Walker::<X86_64Pml4, _>::attach(&arena, root, va(WINDOW)..va(WINDOW_END)) }
                .unwrap();
        w.check_consistency().unwrap();
        for (&a, &f) in inside.iter().chain(&outside) {
            assert_eq!(w.translate(va(a)).map(|t| t.frame), Some(f), "{a:#x}");
        }
        // Out of the window: refused, nothing changed.
        let stray = frame(&arena);
        assert_eq!(
            w.map_range(
                va(WINDOW_END + 8 * PS),
                Frames::List(&[stray]),
                MapFlags::WRITE
            ),
            Err(WalkError::OutsideWindow {
                addr: va(WINDOW_END + 8 * PS)
            })
        );
        arena.free(stray, PS).unwrap();

        // Zap part of the window: exactly those frames go back.
        let tlb = SoftTlb::new(1, PS, Default::default());
        let mut g: Gather<_> = Gather::new(tlb.on(0));
        let (z0, z1) = (WINDOW + 10 * PS, WINDOW + 30 * PS);
        let before = arena.bytes_in_use();
        w.zap_range(va(z0), va(z1), &mut Unbounded::new(PS), &mut g)
            .unwrap();
        assert_eq!(
            before - arena.bytes_in_use(),
            20 * PS,
            "the 20 frames, no table"
        );
        inside.retain(|&a, _| !(z0..z1).contains(&a));
        w.check_consistency().unwrap();

        // The walker's own pages in the window, in a table it links.
        let mine = map_pages(&arena, WINDOW + (9 << 21), 3, |a, f| {
            w.map_range(va(a), Frames::List(&[f]), MapFlags::WRITE)
                .unwrap()
        });
        w.check_consistency().unwrap();

        // The x86_64 crate still walks everything, the walker's pages too.
        let kernel = {
            // SAFETY: as above; the walker is not changing the tables now.
            let l4 = unsafe { &mut *(arena.phys_to_ptr(root) as *mut PageTable) };
            // SAFETY: as above.
            unsafe { OffsetPageTable::new(l4, x86_64::VirtAddr::new(offset)) }
        };
        for (&a, &f) in inside.iter().chain(&outside).chain(&mine) {
            let t = kernel.translate_addr(x86_64::VirtAddr::new(a));
            assert_eq!(t.map(|p| p.as_u64()), Some(f.as_u64()), "{a:#x}");
        }
        for a in (z0..z1).step_by(PS as usize) {
            assert_eq!(kernel.translate_addr(x86_64::VirtAddr::new(a)), None);
        }

        // Zapping the whole window frees its frames and the walker's own
        // table, never a table the kernel built; outside stays.
        let tables_before = w.tables_in_use();
        assert_eq!(
            tables_before, 1,
            "the one last-level table the walker linked"
        );
        let before = arena.bytes_in_use();
        w.zap_range(va(WINDOW), va(WINDOW_END), &mut Unbounded::new(PS), &mut g)
            .unwrap();
        let frames = (inside.len() + mine.len()) as u64;
        assert_eq!(before - arena.bytes_in_use(), (frames + 1) * PS);
        assert_eq!(w.tables_in_use(), 0);
        w.check_consistency().unwrap();
        drop(w);
        for (&a, &f) in &outside {
            let t = kernel.translate_addr(x86_64::VirtAddr::new(a));
            assert_eq!(t.map(|p| p.as_u64()), Some(f.as_u64()), "{a:#x}");
        }
    }

    /// Other code may change the window between walker calls if it calls
    /// `rescan` before the next one; a change it does not announce is
    /// caught by `check_consistency` and repaired by `rescan`.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "OffsetPageTable: Miri's host addresses are no fixed offset from canonical ones"
    )]
    fn tables_linked_by_other_code_later_and_rescan() {
        let arena = PhysArena::new(16 << 20, PS).unwrap();
        let root = frame(&arena);
        // SAFETY: a fresh arena frame, zeroed: an empty PML4.
        unsafe { arena.phys_to_ptr(root).write_bytes(0, PS as usize) };
        let offset =
            (arena.phys_to_ptr(PhysArena::BASE) as u64).wrapping_sub(PhysArena::BASE.as_u64());
        let kernel = || {
            // SAFETY: the PML4 in arena memory, mapped at `offset + pa`; the
            // walker is not inside a call while the crate writes.
            unsafe {
                let l4 = &mut *(arena.phys_to_ptr(root) as *mut PageTable);
                OffsetPageTable::new(l4, x86_64::VirtAddr::new(offset))
            }
        };
        let map = |a: u64| {
            let f = frame(&arena);
            let page: Page<Size4KiB> = Page::containing_address(x86_64::VirtAddr::new(a));
            let pf = PhysFrame::containing_address(x86_64::PhysAddr::new(f.as_u64()));
            let flags = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
            // SAFETY: a fresh frame at an address nothing maps.
            unsafe { kernel().map_to(page, pf, flags, &mut Alloc(&arena)) }
                .unwrap()
                .ignore();
            f
        };
        // SAFETY: an empty PML4 in arena memory.
        let mut w =
            unsafe { Walker::<X86_64Pml4, _>::attach(&arena, root, va(WINDOW)..va(WINDOW_END)) }
                .unwrap();
        // Other code links a whole new chain of tables in the window, and
        // tells the walker.
        let late = map(WINDOW + (7 << 21) + 3 * PS);
        assert!(matches!(
            w.check_consistency(),
            Err(WalkError::Corrupt { .. })
        ));
        w.rescan().unwrap();
        w.check_consistency().unwrap();
        assert_eq!(
            w.translate(va(WINDOW + (7 << 21) + 3 * PS)).unwrap().frame,
            late
        );
        // The walker maps beside it and zaps both: the kernel's tables
        // stay, the counts are right.
        let mine = frame(&arena);
        let at = WINDOW + (7 << 21) + 9 * PS;
        w.map_range(va(at), Frames::List(&[mine]), MapFlags::WRITE)
            .unwrap();
        w.check_consistency().unwrap();
        let tlb = SoftTlb::new(1, PS, Default::default());
        let mut g: Gather<_> = Gather::new(tlb.on(0));
        let before = arena.bytes_in_use();
        w.zap_range(va(WINDOW), va(WINDOW_END), &mut Unbounded::new(PS), &mut g)
            .unwrap();
        assert_eq!(
            before - arena.bytes_in_use(),
            2 * PS,
            "the two frames, no table"
        );
        w.check_consistency().unwrap();
        // Against the contract: other code maps inside the window behind
        // the walker's back. The check sees it; a rescan makes it right.
        map(WINDOW + (7 << 21));
        assert!(matches!(
            w.check_consistency(),
            Err(WalkError::Corrupt { .. })
        ));
        w.rescan().unwrap();
        w.check_consistency().unwrap();
        w.zap_range(va(WINDOW), va(WINDOW_END), &mut Unbounded::new(PS), &mut g)
            .unwrap();
        assert_eq!(
            kernel().translate_addr(x86_64::VirtAddr::new(WINDOW + (7 << 21))),
            None
        );
        w.check_consistency().unwrap();
    }

    #[test]
    fn attach_checks_its_arguments() {
        let arena = PhysArena::new(1 << 20, PS).unwrap();
        let root = frame(&arena);
        // SAFETY: a zeroed arena frame is an empty PML4.
        unsafe { arena.phys_to_ptr(root).write_bytes(0, PS as usize) };
        let attach = |r: PhysAddr, s: u64, e: u64| {
            // SAFETY: an empty PML4 in arena memory (or a misaligned
            // address, which `attach` refuses before reading anything).
            unsafe { Walker::<X86_64Pml4, _>::attach(&arena, r, va(s)..va(e)) }.map(|_| ())
        };
        assert_eq!(
            attach(root, WINDOW + 1, WINDOW_END),
            Err(WalkError::Unaligned {
                addr: va(WINDOW + 1)
            })
        );
        assert_eq!(
            attach(root, WINDOW, WINDOW),
            Err(WalkError::Wraps { start: va(WINDOW) })
        );
        assert!(matches!(
            attach(root, 0x7fff_ffff_0000, 0x8000_0001_0000),
            Err(WalkError::NonCanonical { .. })
        ));
        assert!(matches!(
            attach(PhysAddr::new(root.as_u64() + 8), WINDOW, WINDOW_END),
            Err(WalkError::Unaligned { .. })
        ));
        assert_eq!(attach(root, WINDOW, WINDOW_END), Ok(()));
    }
}

mod aarch64 {
    use super::*;
    use aarch64_paging::Mapping;
    use aarch64_paging::paging::{
        Attributes, Constraints, MemoryRegion, PageTable, PhysicalAddress, Translation,
        TranslationRegime, VaRange,
    };
    use std::ptr::NonNull;

    struct Arena<'a>(&'a PhysArena);

    impl Translation for Arena<'_> {
        fn allocate_table(&mut self) -> (NonNull<PageTable>, PhysicalAddress) {
            let pa = frame(self.0);
            let p = self.0.phys_to_ptr(pa);
            // SAFETY: a fresh arena frame; the crate expects it zeroed.
            unsafe { p.write_bytes(0, PS as usize) };
            (
                NonNull::new(p as *mut PageTable).unwrap(),
                PhysicalAddress(pa.as_u64() as usize),
            )
        }
        unsafe fn deallocate_table(&mut self, _table: NonNull<PageTable>) {
            // Only when the mapping is dropped; the arena goes with it.
        }
        fn physical_to_virtual(&self, pa: PhysicalAddress) -> NonNull<PageTable> {
            NonNull::new(self.0.phys_to_ptr(PhysAddr::new(pa.0 as u64)) as *mut PageTable).unwrap()
        }
    }

    /// A vmalloc-like window in the TTBR1 half.
    const WINDOW: u64 = 0xffff_8000_1000_0000;
    const WINDOW_END: u64 = WINDOW + (1 << 30);

    /// What the crate's walk finds mapped (pages only), by address.
    fn leaves(m: &Mapping<Arena<'_>>, start: u64, end: u64) -> BTreeMap<u64, PhysAddr> {
        let mut out = BTreeMap::new();
        let region = MemoryRegion::new(start as usize, end as usize);
        m.walk_range(&region, &mut |r, d, level| {
            if level == 3 && d.is_valid() {
                out.insert(
                    r.start().0 as u64,
                    PhysAddr::new(d.output_address().0 as u64),
                );
            }
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn walker_adopts_tables_built_by_aarch64_paging() {
        let arena = PhysArena::new(64 << 20, PS).unwrap();
        let mut m = Mapping::new(
            Arena(&arena),
            1,
            0,
            TranslationRegime::El1And0,
            VaRange::Upper,
        );
        // Normal memory in the MAIR convention of arch-aarch64 (index 1);
        // index 0 is Device, whose frames a zap never frees.
        let attrs = Attributes::VALID
            | Attributes::ATTRIBUTE_INDEX_1
            | Attributes::ACCESSED
            | Attributes::INNER_SHAREABLE;
        let mut map = |a: u64, f: PhysAddr| {
            let region = MemoryRegion::new(a as usize, (a + PS) as usize);
            m.map_range(
                &region,
                PhysicalAddress(f.as_u64() as usize),
                attrs,
                Constraints::NO_BLOCK_MAPPINGS,
            )
            .unwrap();
        };
        let mut inside = map_pages(&arena, WINDOW + 7 * PS, 24, &mut map);
        inside.extend(map_pages(&arena, WINDOW + (5 << 21), 2, &mut map));
        let mut outside = map_pages(&arena, 0xffff_8000_0000_0000, 3, &mut map);
        outside.extend(map_pages(&arena, WINDOW_END, 2, &mut map));
        let root = PhysAddr::new(m.root_address().0 as u64);

        // SAFETY: `root` is the crate's TTBR1 table in arena memory; only
        // the walker writes inside the window while it is attached.
        let mut w = unsafe {
            Walker::<Aarch64Granule4K, _>::attach(&arena, root, va(WINDOW)..va(WINDOW_END))
        }
        .unwrap();
        w.check_consistency().unwrap();
        assert_eq!(w.roots(), &[root]);
        for (&a, &f) in inside.iter().chain(&outside) {
            assert_eq!(w.translate(va(a)).map(|t| t.frame), Some(f), "{a:#x}");
        }

        let tlb = SoftTlb::new(1, PS, Default::default());
        let mut g: Gather<_> = Gather::new(tlb.on(0));
        let (z0, z1) = (WINDOW, WINDOW + 20 * PS);
        let before = arena.bytes_in_use();
        w.zap_range(va(z0), va(z1), &mut Unbounded::new(PS), &mut g)
            .unwrap();
        assert_eq!(
            before - arena.bytes_in_use(),
            13 * PS,
            "pages 7..20, no table"
        );
        inside.retain(|&a, _| !(z0..z1).contains(&a));
        let mine = map_pages(&arena, WINDOW + (11 << 21), 2, |a, f| {
            w.map_range(va(a), Frames::List(&[f]), MapFlags::WRITE)
                .unwrap()
        });
        w.check_consistency().unwrap();
        drop(w);

        // The crate walks what is left, and the walker's pages, as they are.
        let mut want = inside.clone();
        want.extend(mine.clone());
        assert_eq!(leaves(&m, WINDOW, WINDOW_END), want);
        let mut all = want;
        all.extend(outside);
        assert_eq!(
            leaves(&m, 0xffff_8000_0000_0000, 0xffff_8001_0000_0000),
            all
        );
    }
}

//! The two x86_64 paging modes as [`PageTableLayout`]s (Intel SDM Vol. 3A,
//! §4.5 "4-Level Paging and 5-Level Paging").
//!
//! Both translate with 4 KiB tables of 512 eight-byte entries, so every level
//! consumes 9 bits of the linear address above the 12-bit page offset
//! (Figures 4-8 to 4-10):
//!
//! | level (4-level) | level (LA57) | table | VA bits | leaf |
//! |---|---|---|---|---|
//! | –  | 0 | PML5 | 56:48 | no |
//! | 0  | 1 | PML4 | 47:39 | no |
//! | 1  | 2 | PDPT | 38:30 | 1 GiB (PS = 1) |
//! | 2  | 3 | PD   | 29:21 | 2 MiB (PS = 1) |
//! | 3  | 4 | PT   | 20:12 | 4 KiB |
//!
//! 1 GiB pages need CPUID.80000001H:EDX.Page1GB\[bit 26\]
//! ([`crate::cpuid::has_1gib_pages`]); the layouts allow them, an OS on a CPU
//! without them simply never asks for a PDPT leaf.
//!
//! A linear address is canonical when its unused upper bits copy the top
//! translated bit: bits 63:47 for 4-level paging, 63:56 for 5-level (§3.3.7.1);
//! other addresses raise #GP before any walk.

use crate::entry::{La57Entry, Pml4Entry};
use arch_api::layout::sign_extended;
use arch_api::{PageTableLayout, VirtAddr};

/// 4-level paging (CR4.LA57 = 0): PML4 → PDPT → PD → PT, 48-bit linear
/// addresses. Linux's default x86_64 layout (`pgd`, `pud`, `pmd`, `pte`, with
/// the `p4d` folded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct X86_64Pml4;

/// 5-level paging (CR4.LA57 = 1): PML5 → PML4 → PDPT → PD → PT, 57-bit
/// linear addresses (Ice Lake and later; CPUID.(EAX=7,ECX=0):ECX.LA57\[bit 16\]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct X86_64La57;

/// Leaves at the PT (4 KiB), PD (2 MiB) and PDPT (1 GiB): the last three
/// levels of either tree.
const fn leaf_allowed(levels: usize, level: usize) -> bool {
    level < levels && level + 3 >= levels
}

impl PageTableLayout for X86_64Pml4 {
    const NAME: &'static str = "x86_64";
    const LEVELS: usize = 4;
    const PAGE_SHIFT: u32 = 12;
    const INDEX_BITS: &'static [u32] = &[9, 9, 9, 9];
    const VA_BITS: u32 = 48;
    type Entry = Pml4Entry;

    /// Bits 63:48 all equal bit 47.
    fn is_canonical(va: VirtAddr) -> bool {
        sign_extended(va, Self::VA_BITS)
    }

    fn leaf_allowed(level: usize) -> bool {
        leaf_allowed(Self::LEVELS, level)
    }
}

impl PageTableLayout for X86_64La57 {
    const NAME: &'static str = "x86_64-la57";
    const LEVELS: usize = 5;
    const PAGE_SHIFT: u32 = 12;
    const INDEX_BITS: &'static [u32] = &[9, 9, 9, 9, 9];
    const VA_BITS: u32 = 57;
    type Entry = La57Entry;

    /// Bits 63:57 all equal bit 56.
    fn is_canonical(va: VirtAddr) -> bool {
        sign_extended(va, Self::VA_BITS)
    }

    fn leaf_allowed(level: usize) -> bool {
        leaf_allowed(Self::LEVELS, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indices<L: PageTableLayout>(va: u64) -> std::vec::Vec<usize> {
        (0..L::LEVELS)
            .map(|l| L::index(VirtAddr::new(va), l))
            .collect()
    }

    // Each expectation below was worked out from Figure 4-8 (4-level: PML4
    // 47:39, PDPT 38:30, PD 29:21, PT 20:12) / Figure 4-9 (PML5 56:48 on top).
    // E.g. 0xffff_c900_1234_5000: bits 47:39 of 0xc900_1234_5000 are
    // 0xc9 << 1 = 0x192 = 402; bits 38:30 of 0x1234_5000 are 0;
    // 0x1234_5000 >> 21 = 0x91 = 145; 0x12345 & 0x1ff = 0x145 = 325.

    #[test]
    fn pml4_index_decomposition() {
        // Linux's direct map base (page_offset_base).
        assert_eq!(indices::<X86_64Pml4>(0xffff_8880_0000_0000), [273, 0, 0, 0]);
        // A vmalloc-area address.
        assert_eq!(
            indices::<X86_64Pml4>(0xffff_c900_1234_5000),
            [402, 0, 145, 325]
        );
        // The kernel image (__START_KERNEL_map): last PML4 slot, PDPT 510.
        assert_eq!(
            indices::<X86_64Pml4>(0xffff_ffff_8000_0000),
            [511, 510, 0, 0]
        );
        // The top of user space.
        assert_eq!(
            indices::<X86_64Pml4>(0x0000_7fff_ffff_f123),
            [255, 511, 511, 511]
        );
        // A classic ELF text address: PD 2, PT 1.
        assert_eq!(indices::<X86_64Pml4>(0x0000_0000_0040_1000), [0, 0, 2, 1]);
    }

    #[test]
    fn la57_index_decomposition() {
        // Linux's LA57 direct map base.
        assert_eq!(
            indices::<X86_64La57>(0xff11_0000_0000_0000),
            [273, 0, 0, 0, 0]
        );
        // Linux's LA57 vmalloc base.
        assert_eq!(
            indices::<X86_64La57>(0xffa0_0000_0000_0000),
            [416, 0, 0, 0, 0]
        );
        // The 4-level direct map base, seen through a 5-level tree: PML5 511,
        // then the 4-level indices.
        assert_eq!(
            indices::<X86_64La57>(0xffff_8880_0000_0000),
            [511, 273, 0, 0, 0]
        );
        assert_eq!(
            indices::<X86_64La57>(0xffff_ffff_8000_0000),
            [511, 511, 510, 0, 0]
        );
        // Just above the 48-bit user limit: PML5 0, PML4 256.
        assert_eq!(
            indices::<X86_64La57>(0x0000_8000_0000_0000),
            [0, 256, 0, 0, 0]
        );
        // 0x12 = 18; 0x3456 >> 7 = 0x68 = 104; and so on down.
        assert_eq!(
            indices::<X86_64La57>(0x0012_3456_789a_b000),
            [18, 104, 345, 452, 427]
        );
        // The top of LA57 user space.
        assert_eq!(
            indices::<X86_64La57>(0x00ff_ffff_ffff_f000),
            [255, 511, 511, 511, 511]
        );
    }

    #[test]
    fn spans_and_shifts() {
        assert_eq!(X86_64Pml4::entry_span(0), 1 << 39); // 512 GiB per PML4E
        assert_eq!(X86_64Pml4::entry_span(1), 1 << 30);
        assert_eq!(X86_64Pml4::entry_span(2), 1 << 21);
        assert_eq!(X86_64Pml4::entry_span(3), 1 << 12);
        assert_eq!(X86_64La57::entry_span(0), 1 << 48); // 256 TiB per PML5E
        assert_eq!(X86_64La57::level_shift(1), 39);
        assert_eq!(X86_64Pml4::table_bytes(0), 4096);
        assert_eq!(
            X86_64Pml4::entry_end(VirtAddr::new(0xffff_8880_0000_1000), 0),
            Some(VirtAddr::new(0xffff_8900_0000_0000))
        );
        assert_eq!(
            X86_64Pml4::entry_end(VirtAddr::new(0xffff_ff80_0000_0000), 0),
            None,
            "the last PML4 slot ends at the top of the address space"
        );
    }

    #[test]
    fn leaves_only_at_pdpt_pd_pt() {
        let l4: std::vec::Vec<bool> = (0..4).map(X86_64Pml4::leaf_allowed).collect();
        assert_eq!(l4, [false, true, true, true]);
        let l5: std::vec::Vec<bool> = (0..5).map(X86_64La57::leaf_allowed).collect();
        assert_eq!(l5, [false, false, true, true, true]);
        assert!(!X86_64Pml4::leaf_allowed(4));
        assert_eq!(X86_64Pml4::info().leaf_levels, 0b1110);
        assert_eq!(X86_64La57::info().leaf_levels, 0b11100);
    }

    #[test]
    fn canonical_addresses() {
        let c4 = |va| X86_64Pml4::is_canonical(VirtAddr::new(va));
        let c5 = |va| X86_64La57::is_canonical(VirtAddr::new(va));
        // 4-level: bits 63:47 all equal.
        assert!(c4(0));
        assert!(c4(0x0000_7fff_ffff_ffff));
        assert!(c4(0xffff_8000_0000_0000));
        assert!(c4(u64::MAX));
        assert!(!c4(0x0000_8000_0000_0000), "bit 47 set, 63:48 clear");
        assert!(!c4(0xffff_7fff_ffff_ffff), "bit 47 clear, 63:48 set");
        assert!(!c4(0x0001_0000_0000_0000));
        assert!(!c4(0xff11_0000_0000_0000), "the LA57 direct map");
        assert!(!c4(0xff00_0000_0000_0000));
        // 5-level: bits 63:56 all equal.
        assert!(
            c5(0x0000_8000_0000_0000),
            "canonical once bit 56 is the top"
        );
        assert!(c5(0x00ff_ffff_ffff_ffff));
        assert!(c5(0xff00_0000_0000_0000), "63:56 all ones: bit 56 is 1");
        assert!(c5(0xff11_0000_0000_0000));
        assert!(c5(0xffff_8880_0000_0000));
        assert!(!c5(0x0100_0000_0000_0000), "bit 56 set, 63:57 clear");
        assert!(!c5(0xfe00_0000_0000_0000), "bit 56 clear, 63:57 set");
        assert!(!c5(0x8000_0000_0000_0000));
    }

    #[test]
    fn names_match_the_harness() {
        assert_eq!(X86_64Pml4::NAME, "x86_64");
        assert_eq!(X86_64La57::NAME, "x86_64-la57");
        assert_eq!(X86_64Pml4::PAGE_SIZE, 4096);
        assert_eq!(X86_64La57::VA_BITS, 57);
    }
}

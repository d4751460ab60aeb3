//! What qemu's PVH loader tells the kernel: the `hvm_start_info` structure
//! (Xen's `xen/include/public/arch-x86/hvm/start_info.h`, version 1), of
//! which only the memory map is used.
//!
//! | offset | field |
//! |---|---|
//! | 0  | `magic` = 0x336e_c578 |
//! | 4  | `version` (1: has the memory map) |
//! | 40 | `memmap_paddr`: `hvm_memmap_table_entry[]` (`addr`, `size` u64, `type` u32, pad) |
//! | 48 | `memmap_entries` |
//!
//! Type 1 is RAM (the E820 numbering). Read before the boot tables are
//! replaced (the boot tables identity-map the first GiB, where qemu puts it).

/// `hvm_start_info.magic` ("xEn3" with the top bit clear).
const MAGIC: u32 = 0x336e_c578;
/// E820 / `XEN_HVM_MEMMAP_TYPE_RAM`.
const TYPE_RAM: u32 = 1;

/// The most RAM ranges kept (qemu reports 2 for `-m 256M`).
pub const MAX_RANGES: usize = 16;

/// RAM as `[start, end)` physical ranges, page aligned inwards.
#[derive(Clone, Copy, Debug)]
pub struct RamMap {
    /// The ranges; only the first `len` are meaningful.
    pub ranges: [(u64, u64); MAX_RANGES],
    /// How many ranges there are.
    pub len: usize,
    /// Whether the ranges came from the start info (false: the fallback).
    pub from_start_info: bool,
}

impl RamMap {
    /// What qemu's `pc` machine has with `-m 256M`, should a loader pass no
    /// memory map: 640 KiB low, then 1 MiB up to 256 MiB less the 128 KiB qemu
    /// reserves at the top for firmware tables.
    const FALLBACK: RamMap = {
        let mut ranges = [(0, 0); MAX_RANGES];
        ranges[0] = (0, 0x9f000);
        ranges[1] = (0x10_0000, 0x0ffe_0000);
        RamMap {
            ranges,
            len: 2,
            from_start_info: false,
        }
    };

    /// The ranges in use.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges[..self.len].iter().copied()
    }

    fn push(&mut self, start: u64, end: u64) {
        let start = start.next_multiple_of(4096);
        let end = end & !4095;
        if start < end && self.len < MAX_RANGES {
            self.ranges[self.len] = (start, end);
            self.len += 1;
        }
    }
}

/// Reads the RAM ranges from the start info at `paddr` (what `ebx` held).
///
/// # Safety
/// `paddr` is the address qemu passed in `ebx`, and its structure and memory
/// map are still identity-mapped and unmodified.
pub unsafe fn ram_map(paddr: u64) -> RamMap {
    let info = paddr as *const u8;
    // SAFETY: per the caller, `info` points at a readable `hvm_start_info`;
    // unaligned reads because nothing promises its alignment.
    let (magic, version, memmap, entries) = unsafe {
        (
            info.cast::<u32>().read_unaligned(),
            info.add(4).cast::<u32>().read_unaligned(),
            info.add(40).cast::<u64>().read_unaligned(),
            info.add(48).cast::<u32>().read_unaligned(),
        )
    };
    if paddr == 0 || magic != MAGIC || version < 1 || memmap == 0 || entries == 0 {
        return RamMap::FALLBACK;
    }
    let mut map = RamMap {
        ranges: [(0, 0); MAX_RANGES],
        len: 0,
        from_start_info: true,
    };
    for i in 0..entries as usize {
        let e = (memmap as *const u8).wrapping_add(i * 24);
        // SAFETY: version 1 start info: `memmap_entries` 24-byte entries at
        // `memmap_paddr`, in identity-mapped low memory (the caller's promise).
        let (addr, size, ty) = unsafe {
            (
                e.cast::<u64>().read_unaligned(),
                e.add(8).cast::<u64>().read_unaligned(),
                e.add(16).cast::<u32>().read_unaligned(),
            )
        };
        if ty == TYPE_RAM {
            map.push(addr, addr.saturating_add(size));
        }
    }
    if map.len == 0 {
        return RamMap::FALLBACK;
    }
    map
}

//! Shared test support: a tiny layout of our own (small tables, so every
//! boundary is close and miri stays fast), a frame source that counts every
//! free per base page and checks the TLB no longer holds the page, a PRNG,
//! and the per-layout windows the property tests walk in.
#![allow(dead_code)]

use arch_api::{
    CostModel, EntryKind, FrameError, FrameSource, MapFlags, PageTableEntry, PageTableLayout,
    PhysAddr, PhysArena, PhysMap, SoftTlb, VirtAddr, layout::sign_extended,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// 4 KiB pages, four levels of 2, 2, 2 and 3 index bits (a 21-bit VA,
/// sign-extended like x86_64), leaves allowed at levels 1–3.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tiny;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TinyEntry(u64);

const P: u64 = 1;
const TABLE: u64 = 2;
const W: u64 = 4;
const X: u64 = 8;
const U: u64 = 16;
const G: u64 = 32;
const D: u64 = 64;
const ADDR: u64 = 0x000f_ffff_ffff_f000;

impl PageTableEntry for TinyEntry {
    type Flags = u64;
    const EMPTY: Self = TinyEntry(0);
    fn from_raw(raw: u64) -> Self {
        TinyEntry(raw)
    }
    fn raw(self) -> u64 {
        self.0
    }
    fn is_present(self) -> bool {
        self.0 & P != 0
    }
    fn kind(self, level: usize) -> EntryKind {
        if !self.is_present() {
            EntryKind::None
        } else if level < 3 && self.0 & TABLE != 0 {
            EntryKind::Table
        } else {
            EntryKind::Leaf
        }
    }
    fn addr(self) -> PhysAddr {
        PhysAddr::new(self.0 & ADDR)
    }
    fn set_addr(&mut self, addr: PhysAddr) {
        self.0 = (self.0 & !ADDR) | (addr.as_u64() & ADDR);
    }
    fn flags(self) -> u64 {
        self.0 & !ADDR
    }
    fn set_flags(&mut self, flags: u64) {
        self.0 = (self.0 & ADDR) | (flags & !ADDR);
    }
    fn new_table(table: PhysAddr) -> Self {
        TinyEntry(table.as_u64() | P | TABLE)
    }
    fn new_leaf(frame: PhysAddr, flags: MapFlags, _level: usize) -> Self {
        let mut v = frame.as_u64() | P;
        for (f, b) in [
            (MapFlags::WRITE, W),
            (MapFlags::EXEC, X),
            (MapFlags::USER, U),
            (MapFlags::GLOBAL, G),
            (MapFlags::DEVICE, D),
        ] {
            if flags.contains(f) {
                v |= b;
            }
        }
        TinyEntry(v)
    }
    fn map_flags(self) -> MapFlags {
        let mut m = MapFlags::empty();
        for (f, b) in [
            (MapFlags::WRITE, W),
            (MapFlags::EXEC, X),
            (MapFlags::USER, U),
            (MapFlags::GLOBAL, G),
            (MapFlags::DEVICE, D),
        ] {
            if self.0 & b != 0 {
                m |= f;
            }
        }
        m
    }
}

impl PageTableLayout for Tiny {
    const NAME: &'static str = "tiny";
    const LEVELS: usize = 4;
    const PAGE_SHIFT: u32 = 12;
    const INDEX_BITS: &'static [u32] = &[2, 2, 2, 3];
    const VA_BITS: u32 = 21;
    type Entry = TinyEntry;
    fn is_canonical(va: VirtAddr) -> bool {
        sign_extended(va, Self::VA_BITS)
    }
    fn leaf_allowed(level: usize) -> bool {
        level >= 1
    }
}

/// Per base page: frees since armed, the virtual address it was mapped at,
/// and whether it is still armed (not reused as a table page since).
type Armed = (u32, Option<u64>, bool);

/// A frame source over a [`PhysArena`] that
/// * counts frees per base page since the page was armed,
/// * records a violation if a page armed with a virtual address is freed
///   while some CPU of `tlb` may still hold that translation (freed before
///   the flush),
/// * can be told to refuse allocations after a number of them.
pub struct Tracked {
    pub arena: PhysArena,
    pub tlb: SoftTlb,
    page: u64,
    frees: Mutex<HashMap<u64, Armed>>,
    pub allow_allocs: AtomicU64,
    pub violations: AtomicU64,
    /// Armed (mapped) pages freed so far: leaf frames only, not tables.
    pub leaf_pages_freed: AtomicU64,
}

impl Tracked {
    pub fn new(bytes: u64, page: u64) -> Self {
        Tracked {
            arena: PhysArena::new(bytes, 4096).expect("arena"),
            tlb: SoftTlb::new(2, page, CostModel::FREE),
            page,
            frees: Mutex::new(HashMap::new()),
            allow_allocs: AtomicU64::new(u64::MAX),
            violations: AtomicU64::new(0),
            leaf_pages_freed: AtomicU64::new(0),
        }
    }

    /// A fresh frame of one page for mapping at `va`, armed.
    pub fn frame(&self, va: u64) -> PhysAddr {
        let f = self
            .arena
            .alloc(self.page, self.page)
            .expect("arena has room for test frames");
        self.arm(f, Some(va));
        f
    }

    /// `pages` contiguous pages aligned to `align`, armed for `va..`.
    pub fn block(&self, pages: u64, align: u64, va: u64) -> PhysAddr {
        let f = self
            .arena
            .alloc(pages * self.page, align)
            .expect("arena has room for test blocks");
        for i in 0..pages {
            self.arm(
                PhysAddr::new(f.as_u64() + i * self.page),
                Some(va + i * self.page),
            );
        }
        f
    }

    pub fn arm(&self, frame: PhysAddr, va: Option<u64>) {
        self.frees
            .lock()
            .unwrap()
            .insert(frame.as_u64(), (0, va, true));
    }

    /// Frees of `frame` since it was armed.
    pub fn freed(&self, frame: PhysAddr) -> u32 {
        self.frees
            .lock()
            .unwrap()
            .get(&frame.as_u64())
            .map_or(0, |e| e.0)
    }

    /// Returns an unused armed frame to the arena (not through the walker).
    pub fn give_back(&self, frame: PhysAddr) {
        self.frees.lock().unwrap().remove(&frame.as_u64());
        self.arena.free(frame, self.page).unwrap();
    }
}

impl FrameSource for Tracked {
    fn granule(&self) -> u64 {
        self.arena.granule()
    }
    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        let left = self.allow_allocs.load(Ordering::Relaxed);
        if left == 0 {
            return Err(FrameError::OutOfFrames);
        }
        if left != u64::MAX {
            self.allow_allocs.store(left - 1, Ordering::Relaxed);
        }
        let pa = self.arena.alloc(size, align)?;
        // A table page: frees of it are not frees of the frame this memory
        // was armed as before (keep that count for the test to read).
        let mut m = self.frees.lock().unwrap();
        let mut off = 0;
        while off < size {
            if let Some(e) = m.get_mut(&(pa.as_u64() + off)) {
                e.2 = false;
            }
            off += self.page.min(size);
        }
        Ok(pa)
    }
    fn free(&self, addr: PhysAddr, size: u64) -> Result<(), FrameError> {
        {
            let mut m = self.frees.lock().unwrap();
            let mut off = 0;
            while off < size {
                let key = addr.as_u64() + off;
                let e = m.entry(key).or_insert((0, None, false));
                if !e.2 {
                    off += self.page.min(size);
                    continue;
                }
                e.0 += 1;
                self.leaf_pages_freed.fetch_add(1, Ordering::Relaxed);
                if let Some(va) = e.1
                    && self
                        .tlb
                        .may_hold(VirtAddr::new(va), VirtAddr::new(va + self.page))
                {
                    self.violations.fetch_add(1, Ordering::Relaxed);
                }
                off += self.page.min(size);
            }
        }
        self.arena.free(addr, size)
    }
}

impl PhysMap for Tracked {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        self.arena.phys_to_ptr(addr)
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        self.arena.ptr_to_phys(ptr)
    }
}

/// xorshift64*: small, deterministic, good enough to drive op sequences.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// The first non-canonical power of two above 0: the top of the low half.
pub fn low_top<L: PageTableLayout>() -> u64 {
    (1..64)
        .map(|b| 1u64 << b)
        .find(|&a| !L::is_canonical(VirtAddr::new(a)))
        .unwrap_or(1 << 63)
}

/// Canonical windows of `pages` pages that sit on interesting boundaries:
/// across the first root-entry boundary (every level's boundary at once),
/// across a level-1 boundary, against the top of the low half, against the
/// bottom of the high half (x86_64 / aarch64), and the ia64 region edges.
pub fn windows<L: PageTableLayout>(pages: u64) -> Vec<(u64, u64)> {
    let ps = L::PAGE_SIZE;
    let len = pages * ps;
    let span0 = L::entry_span(0);
    let span1 = L::entry_span(1);
    let mut v = vec![
        (span0 - len / 2, span0 + len / 2),
        (3 * span1 - len / 2, 3 * span1 + len / 2),
    ];
    let top = low_top::<L>();
    v.push((top - len, top));
    let high = top.wrapping_neg();
    if L::is_canonical(VirtAddr::new(high)) {
        v.push((high, high + len));
        v.push((high + span0 - len / 2, high + span0 + len / 2));
    }
    if L::NAME == "ia64-sim" {
        // Region 1 starts at 2^61; region 0 ends (for the tree) at 2^55,
        // already covered by `top`.
        v.push((1 << 61, (1 << 61) + len));
        v.push(((5 << 61) + span0 - len / 2, (5 << 61) + span0 + len / 2));
    }
    v
}

/// The virtual address `a`.
pub fn va(a: u64) -> VirtAddr {
    VirtAddr::new(a)
}

/// `on_every_layout!(name, f)`: a module `name` with one test per layout of
/// the workspace (and `Tiny`) running `f::<Layout>()`; the test file brings
/// `Tiny` into scope. Layouts with large tables are left to native runs
/// under miri.
#[allow(unused_macros)]
macro_rules! on_every_layout {
    ($name:ident, $f:ident) => {
        mod $name {
            use super::*;
            #[test]
            fn tiny() {
                $f::<Tiny>();
            }
            #[test]
            fn x86_64() {
                $f::<arch_x86_64::X86_64Pml4>();
            }
            #[test]
            fn x86_64_la57() {
                $f::<arch_x86_64::X86_64La57>();
            }
            #[test]
            fn aarch64_4k() {
                $f::<arch_aarch64::Aarch64Granule4K>();
            }
            #[test]
            #[cfg_attr(miri, ignore = "large tables: covered natively")]
            fn aarch64_16k() {
                $f::<arch_aarch64::Aarch64Granule16K>();
            }
            #[test]
            #[cfg_attr(miri, ignore = "large tables: covered natively")]
            fn aarch64_64k() {
                $f::<arch_aarch64::Aarch64Granule64K>();
            }
            #[test]
            #[cfg_attr(miri, ignore = "large tables: covered natively")]
            fn ia64_sim() {
                $f::<arch_ia64_sim::Ia64Sim>();
            }
        }
    };
}

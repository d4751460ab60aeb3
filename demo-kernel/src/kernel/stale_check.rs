//! The cross-CPU stale-TLB check of `smp-loop`.
//!
//! A CPU that only reads pages it allocated itself never holds a
//! translation another CPU's purge has to remove, so a missing shootdown
//! goes unseen. Here every CPU publishes its last [`RING`] vmalloc areas in
//! a shared table and reads the areas the *other* CPUs published, which
//! puts their translations in its TLB. When the owner frees an area, the
//! range is purged and reused, a CPU whose TLB kept the old translation
//! reads the old frame through the reused address: its stamp is not the
//! one the new owner wrote. With working shootdowns that never happens.
//!
//! Each page's first word holds a stamp (owner CPU, generation, page),
//! written by the owner through the virtual address. A reader compares
//! what it reads through the virtual address (its TLB) with the stamp the
//! slot's generation implies, and with the word read through the direct map
//! at the frame vmalloc's tables map (`vmalloc_to_phys`).
//!
//! A slot's word is the generation and the area's page index, or 0 while
//! unpublished. A reader raises the slot's reader count, then rereads the
//! word; the owner clears the word, then waits for the count to drop to 0
//! before it frees. Both sides are `SeqCst` (store then load, crossed), so
//! either the reader sees the cleared word and skips, or the owner sees the
//! reader and waits: no area is freed under a reader. Generations only
//! grow, so a republished slot never matches a word read before.

use super::kprint;
use super::vmalloc_loop::PAGES;
use crate::arch::{self, Layout as ArchLayout};
use crate::frames::Frames;
use crate::platform::DemoKernel;
use arch_api::{PageTableLayout, PhysMap, VirtAddr};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use vmap_core::VmapNodes;
use vmap_lazy::{NodeLazy, PurgePolicy, Vmalloc};

/// Any of the kernel's vmallocs: the shared one and each policy's own
/// (their windows all lie inside `VMALLOC_START..VMALLOC_END`, which the
/// slot words index).
type AnyVmalloc<P, N> = Vmalloc<'static, DemoKernel, P, N>;

/// CPUs the table has rows for.
pub const MAX: usize = 8;
/// Areas each CPU keeps published.
pub const RING: usize = 4;
/// Stale reads printed in full (the count covers all of them).
const PRINTED: u64 = 8;
/// Bits of a slot word holding the area's page index in the window.
const INDEX_BITS: u32 = 40;

struct Slot {
    word: AtomicU64,
    readers: AtomicU32,
}

static TABLE: [[Slot; RING]; MAX] = [const {
    [const {
        Slot {
            word: AtomicU64::new(0),
            readers: AtomicU32::new(0),
        }
    }; RING]
}; MAX];
/// Stale reads reported so far (all CPUs).
static REPORTED: AtomicU64 = AtomicU64::new(0);
/// Areas of other CPUs read, per reader.
static READS: [AtomicU64; MAX] = [const { AtomicU64::new(0) }; MAX];
/// Serializes the report lines.
static PRINT: spin::Mutex<()> = spin::Mutex::new(());
/// Set at the first stale read: the workers stop early, since a CPU with a
/// stale translation may also write through it into a freed frame.
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether a stale read was seen (the workers stop).
pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Areas of other CPUs read so far, all readers together.
pub fn cross_cpu_reads() -> u64 {
    READS.iter().map(|r| r.load(Ordering::Relaxed)).sum()
}

/// The stamp of page `page` of `owner`'s area of generation `generation`.
fn stamp(owner: usize, generation: u64, page: u64) -> u64 {
    (owner as u64 + 1) << 56 | generation << 8 | page
}

fn unpack(word: u64) -> (u64, u64) {
    let index = word & ((1 << INDEX_BITS) - 1);
    let va = arch::VMALLOC_START + index * ArchLayout::PAGE_SIZE;
    (word >> INDEX_BITS, va)
}

/// Reads the word at `va` through the frame vmalloc's tables map there.
fn through_direct_map<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
    vm: &AnyVmalloc<P, N>,
    va: u64,
) -> Option<u64> {
    vm.vmalloc_to_phys(VirtAddr::new(va)).map(|pa| {
        let p = Frames.phys_to_ptr(pa) as *const u64;
        // SAFETY: the frame of a mapped vmalloc page, identity-mapped RAM;
        // the caller keeps the area alive.
        unsafe { p.read_volatile() }
    })
}

/// Counts and (the first few) prints a stale read.
fn report(cpu: usize, va: u64, owner: usize, generation: u64, expected: u64, found: u64) {
    if REPORTED.fetch_add(1, Ordering::Relaxed) < PRINTED {
        // One line at a time: several CPUs may find stale reads at once.
        let _line = PRINT.lock();
        kprint!(
            "stale read: CPU {cpu} at {va:#x}: expected stamp {expected:#x} (CPU {owner}, generation {generation}), found {found:#x}\n"
        );
    }
    STOP.store(true, Ordering::Relaxed);
}

/// Checks every page of the area at `va` against its stamp; returns the
/// stale pages.
fn check_area<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
    vm: &AnyVmalloc<P, N>,
    me: usize,
    owner: usize,
    generation: u64,
    va: u64,
) -> u64 {
    let mut stale = 0;
    for p in 0..PAGES {
        let page = va + p * ArchLayout::PAGE_SIZE;
        let expected = stamp(owner, generation, p);
        // SAFETY: a page of a live, published area (the caller holds a
        // reader count or owns it); volatile, so the read goes through
        // this CPU's translation.
        let found = unsafe { (page as *const u64).read_volatile() };
        let direct = through_direct_map(vm, page);
        if found != expected || direct != Some(expected) {
            report(me, page, owner, generation, expected, found);
            stale += 1;
        }
    }
    stale
}

/// One CPU's side of the table.
pub struct Owner {
    cpu: usize,
    generation: u64,
    next: usize,
}

impl Owner {
    /// CPU `cpu`'s row, empty.
    pub fn new(cpu: usize) -> Self {
        Self {
            cpu,
            generation: 0,
            next: 0,
        }
    }

    /// Stamps the fresh area at `va` through its virtual addresses, checks
    /// the stamps both ways, and publishes it in place of the oldest area,
    /// which is freed once no reader is left in it. Returns (stale pages,
    /// vfree errors).
    pub fn publish<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
        &mut self,
        vm: &AnyVmalloc<P, N>,
        va: VirtAddr,
    ) -> (u64, u64) {
        self.generation += 1;
        let generation = self.generation;
        let index = (va.as_u64() - arch::VMALLOC_START) / ArchLayout::PAGE_SIZE;
        for p in 0..PAGES {
            let page = va.as_u64() + p * ArchLayout::PAGE_SIZE;
            // SAFETY: `page` was just mapped writable by vmalloc and is
            // this CPU's until it is published.
            unsafe { (page as *mut u64).write_volatile(stamp(self.cpu, generation, p)) };
        }
        let stale = check_area(vm, self.cpu, self.cpu, generation, va.as_u64());
        let errors = self.retire(vm, self.next);
        // The page index fits: the window is far below 2^40 pages, and 24
        // bits of generation outlast any run.
        debug_assert!(index < 1 << INDEX_BITS && generation < 1 << (64 - INDEX_BITS));
        // Release: a reader that sees the word sees the stamps.
        TABLE[self.cpu][self.next]
            .word
            .store(generation << INDEX_BITS | index, Ordering::Release);
        self.next = (self.next + 1) % RING;
        (stale, errors)
    }

    /// Unpublishes and frees slot `i`'s area, if any; returns vfree errors.
    fn retire<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
        &self,
        vm: &AnyVmalloc<P, N>,
        i: usize,
    ) -> u64 {
        let slot = &TABLE[self.cpu][i];
        let word = slot.word.swap(0, Ordering::SeqCst);
        if word == 0 {
            return 0;
        }
        while slot.readers.load(Ordering::SeqCst) != 0 {
            core::hint::spin_loop();
        }
        let (_, va) = unpack(word);
        u64::from(vm.vfree(VirtAddr::new(va)).is_err())
    }

    /// Frees every area still published; returns vfree errors.
    pub fn retire_all<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
        &self,
        vm: &AnyVmalloc<P, N>,
    ) -> u64 {
        (0..RING).map(|i| self.retire(vm, i)).sum()
    }
}

/// Reads every area the other online CPUs have published; returns the
/// stale pages seen.
pub fn read_others<P: PurgePolicy, N: VmapNodes<Lazy = NodeLazy>>(
    vm: &AnyVmalloc<P, N>,
    me: usize,
) -> u64 {
    let mut stale = 0;
    for (owner, row) in TABLE.iter().enumerate().take(arch::online().min(MAX)) {
        if owner == me {
            continue;
        }
        for slot in row {
            let word = slot.word.load(Ordering::Acquire);
            if word == 0 {
                continue;
            }
            slot.readers.fetch_add(1, Ordering::SeqCst);
            if slot.word.load(Ordering::SeqCst) == word {
                let (generation, va) = unpack(word);
                stale += check_area(vm, me, owner, generation, va);
                READS[me].fetch_add(1, Ordering::Relaxed);
            }
            slot.readers.fetch_sub(1, Ordering::Release);
        }
    }
    stale
}

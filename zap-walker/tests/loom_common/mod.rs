//! The loom model of [`LeafPath`]: an unlocked owner of one page and a
//! locked-walker owner of another page map and zap them at once inside the
//! same last-level table, which either exists or is linked by the locked
//! owner meanwhile, on a recycled page that still holds a stale entry at the
//! unlocked owner's slot. The unlocked owner must never see that entry (the
//! table is zeroed before the release store that links it); afterwards every
//! live count must still equal the entries it counts (and every occupancy
//! summary cover them), and a reader on the unlocked path sees a page either
//! absent or mapped to its own frame.
//!
//! Table memory is loom atomics here ([`LoomMem`]): under `--cfg kmm_loom`
//! the walker's table words are loom's `AtomicU64` (the crate's shim), so
//! loom explores the shipped code's accesses, not a copy of them.
#![allow(dead_code)]

use crate::common::{Tiny, TinyEntry, va};
use arch_api::{FrameError, FrameSource, PageTableEntry, PhysAddr, PhysMap, TlbFlush, VirtAddr};
use loom::sync::atomic::AtomicU64;
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use zap_walker::{Frames, Gather, LeafPath, MapFlags, Unbounded, Walker};

/// Words backing one frame: a Tiny table is at most 8 entries, the side
/// store of live counts 8 slots of 2 words.
const SLOT_WORDS: usize = 16;
/// Frames the model may allocate: the root, three tables below it for `C`,
/// the side store of counts and one more last-level table.
const FRAMES: usize = 6;
/// The frame the new last-level table gets: allocated after the root, `C`'s
/// three tables and the side store.
const NEW_TABLE_FRAME: usize = 5;
/// Tiny's base page (4 KiB).
const PS: u64 = 4096;

/// A frame source whose frames are loom atomics: frame `k` is physical
/// address `(k + 1) * 4096` (Tiny entries keep only page-aligned table
/// addresses) and words `k * SLOT_WORDS ..` of `words`.
pub struct LoomMem {
    words: Vec<AtomicU64>,
    next: AtomicUsize,
    freed: AtomicUsize,
}

impl LoomMem {
    /// Frames of zeroes, but for the one the new table will get: a recycled
    /// page holding a stale leaf at page `stale`'s slot.
    fn new(stale: u64) -> Self {
        let words: Vec<AtomicU64> = (0..FRAMES * SLOT_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let slot = ((stale / PS) % 8) as usize;
        let entry = TinyEntry::new_leaf(frame(0xdead_0000), MapFlags::WRITE, 3).raw();
        words[NEW_TABLE_FRAME * SLOT_WORDS + slot].store(entry, Ordering::Relaxed);
        LoomMem {
            words,
            next: AtomicUsize::new(0),
            freed: AtomicUsize::new(0),
        }
    }
}

impl FrameSource for LoomMem {
    /// Small enough that a Tiny table takes one 64-byte allocation, so the
    /// walker zeroes 8 words, not 512 (each store is a loom operation).
    fn granule(&self) -> u64 {
        64
    }

    fn alloc(&self, size: u64, align: u64) -> Result<PhysAddr, FrameError> {
        if size > (SLOT_WORDS * 8) as u64 || align > PS {
            return Err(FrameError::BadLayout);
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        if k >= FRAMES {
            return Err(FrameError::OutOfFrames);
        }
        Ok(PhysAddr::new((k as u64 + 1) * PS))
    }

    fn free(&self, _addr: PhysAddr, _size: u64) -> Result<(), FrameError> {
        self.freed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl PhysMap for LoomMem {
    fn phys_to_ptr(&self, addr: PhysAddr) -> *mut u8 {
        let pa = addr.as_u64();
        let word = (pa / PS - 1) as usize * SLOT_WORDS + (pa % PS / 8) as usize;
        assert!(word < self.words.len(), "{addr:?} is not a table frame");
        self.words.as_ptr().wrapping_add(word) as *mut u8
    }
    fn ptr_to_phys(&self, ptr: *const u8) -> Option<PhysAddr> {
        let off = (ptr as usize).wrapping_sub(self.words.as_ptr() as usize);
        let word = off / core::mem::size_of::<AtomicU64>();
        (word < self.words.len()).then(|| {
            let (k, w) = (word / SLOT_WORDS, word % SLOT_WORDS);
            PhysAddr::new((k as u64 + 1) * PS + w as u64 * 8)
        })
    }
}

/// The model flushes nothing: no TLB is simulated, only the tables.
struct NoTlb;

impl TlbFlush for NoTlb {
    fn flush_page(&self, _va: VirtAddr) {}
    fn flush_all(&self) {}
}

/// Mapped before the threads start, so every table down to the last-level
/// table at 32 KiB exists.
const C: u64 = 0x8000;

/// Where the two owners work: inside the last-level table `C` made
/// ([`Existing`](Table::Existing)), or inside the next one, which does not
/// exist yet ([`New`](Table::New)): the locked owner links it while the
/// unlocked owner looks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// The last-level table at 32 KiB.
    Existing,
    /// The last-level table at 64 KiB, made by the locked owner.
    New,
}

impl Table {
    /// Page `A` (the unlocked owner's) and page `B` (the locked owner's).
    fn pages(self) -> (u64, u64) {
        match self {
            Table::Existing => (0x9000, 0xa000),
            Table::New => (0x10000, 0x11000),
        }
    }
}

/// The data frame mapped at page `a` (never dereferenced).
fn frame(a: u64) -> PhysAddr {
    PhysAddr::new(0x10_0000 + a)
}

type W = Walker<'static, Tiny, LoomMem>;
type Path = LeafPath<'static, Tiny, LoomMem>;

fn map_locked(w: &Mutex<W>, a: u64) {
    w.lock()
        .unwrap()
        .map_range(va(a), Frames::List(&[frame(a)]), MapFlags::WRITE)
        .unwrap();
}

/// The unlocked owner of `a`: look, map, read back, zap. Before its map
/// the page must be absent, whatever the page under a new table held
/// before. In a new table it maps once the locked owner's table is
/// visible, retrying until then: loom keeps only the last access to each
/// atomic, so a first attempt that declines (and falls back to the locked
/// walker) would hide from it the race between the table's link and its
/// zeroing that this model is about.
fn unlocked_owner(table: Table, lp: Path, a: u64) {
    loop {
        if let Some(t) = lp.translate(va(a)) {
            panic!("a stale entry at {a:#x} through a new link: {t:?}");
        }
        match lp.map(va(a), &[frame(a)], MapFlags::WRITE) {
            Ok(true) => break,
            Ok(false) if table == Table::New => thread::yield_now(),
            other => panic!("the unlocked map of {a:#x} gave {other:?}"),
        }
    }
    assert_eq!(lp.translate(va(a)).map(|t| t.frame), Some(frame(a)));
    let mut out = [PhysAddr::new(0); 1];
    assert_eq!(
        lp.zap(va(a), va(a + PS), &mut out).map(|u| u.frames()),
        Some(1)
    );
    assert_eq!(out[0], frame(a));
}

/// The locked owner of `b`: map under the lock, look at `a` on the
/// unlocked path meanwhile, zap under the lock.
fn locked_owner(w: &Mutex<W>, lp: Path, a: u64, b: u64) {
    map_locked(w, b);
    if let Some(t) = lp.translate(va(a)) {
        assert_eq!(t.frame, frame(a), "a torn or foreign entry at {a:#x}");
    }
    let mut g: Gather<NoTlb, 4> = Gather::new(NoTlb);
    w.lock()
        .unwrap()
        .zap_range(va(b), va(b + PS), &mut Unbounded::new(PS), &mut g)
        .unwrap();
}

/// The model: both owners at once in `table`, then every count checked.
pub fn leaf_path_beside_locked_walker(table: Table) {
    let (a, b) = table.pages();
    loom::model(move || {
        // `loom::thread::spawn` wants 'static; one small leak per
        // execution is the price of sharing the frame source.
        let mem: &'static LoomMem = Box::leak(Box::new(LoomMem::new(a)));
        let mut w: W = Walker::new(mem).unwrap();
        w.map_range(va(C), Frames::List(&[frame(C)]), MapFlags::WRITE)
            .unwrap();
        let tables = w.tables_in_use() + u64::from(table == Table::New);
        // SAFETY: the path's copies live in the two threads, both joined
        // before `w` is dropped at the end of this closure.
        let lp = unsafe { w.leaf_path() }.unwrap();
        let w = Arc::new(Mutex::new(w));
        let t1 = thread::spawn(move || unlocked_owner(table, lp, a));
        let w2 = w.clone();
        let t2 = thread::spawn(move || locked_owner(&w2, lp, a, b));
        t1.join().unwrap();
        t2.join().unwrap();
        let w = w.lock().unwrap();
        w.check_consistency()
            .expect("a live count differs from the entries it counts");
        assert_eq!(w.translate(va(C)).map(|t| t.frame), Some(frame(C)));
        assert_eq!(w.translate(va(a)), None);
        assert_eq!(w.translate(va(b)), None);
        assert_eq!(
            w.tables_in_use(),
            tables,
            "a table was freed or added twice"
        );
    });
}

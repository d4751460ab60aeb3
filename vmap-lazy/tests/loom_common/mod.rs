//! The loom model of story 1's race: `vfree` (mark the area lazy, count its
//! pages, publish it on the lazy list) racing `purge_vmap_area_lazy` (take
//! the lists, release each area, subtract its pages). Uses the crate's own
//! `LazyAccount`, so the model runs the shipped ordering.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU8, Ordering};
use loom::thread;
use vmap_lazy::{LazyAccount, LazyRange};

type R = arch_api::sync::DefaultRawMutex;

const LIVE: u8 = 0;
const LAZY: u8 = 1;
const FREED: u8 = 2;

struct Model {
    lazy: LazyAccount<R>,
    /// The area state flags (Linux's `VM_LAZY_FREE`), one per area.
    state: [AtomicU8; 2],
}

fn range(i: usize) -> LazyRange {
    let start = 0x1000_0000 + i as u64 * 0x10_000;
    LazyRange {
        start,
        end: start + (i as u64 + 1) * 0x1000,
        pages: i as u64 + 1,
        released: false,
    }
}

fn vfree(m: &Model, i: usize) {
    assert_eq!(
        m.state[i].swap(LAZY, Ordering::AcqRel),
        LIVE,
        "area freed twice"
    );
    m.lazy.add(i, range(i));
}

/// One purge; every area it takes must be lazy and is released exactly once.
fn purge(m: &Model) {
    if let Some(batch) = m.lazy.take() {
        for r in &batch.ranges {
            let i = ((r.start - 0x1000_0000) / 0x10_000) as usize;
            assert_eq!(
                m.state[i].swap(FREED, Ordering::AcqRel),
                LAZY,
                "purged an area that was not lazy, or twice"
            );
        }
        m.lazy.retire(batch.pages);
    }
    assert_eq!(m.lazy.underflows(), 0, "vmap_lazy_nr went below zero");
}

/// Two vfrees (on two nodes' lists) racing one purge; then a final purge.
/// Afterwards: no underflow, every area released once, the counter at 0.
pub fn vfree_races_purge() {
    loom::model(|| {
        let m = Arc::new(Model {
            lazy: LazyAccount::new(2),
            state: [AtomicU8::new(LIVE), AtomicU8::new(LIVE)],
        });
        let m1 = m.clone();
        let t1 = thread::spawn(move || {
            vfree(&m1, 0);
            vfree(&m1, 1);
        });
        let m2 = m.clone();
        let t2 = thread::spawn(move || purge(&m2));
        t1.join().unwrap();
        t2.join().unwrap();
        purge(&m);
        for s in &m.state {
            assert_eq!(
                s.load(Ordering::Acquire),
                FREED,
                "a lazy area was forgotten"
            );
        }
        assert_eq!(m.lazy.nr(), 0, "vmap_lazy_nr counts pages no list holds");
        assert_eq!(m.lazy.underflows(), 0);
    });
}

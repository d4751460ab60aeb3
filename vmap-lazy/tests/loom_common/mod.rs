//! The loom model of story 1's race: `vfree` (mark the area lazy, publish
//! it on its node's lazy list, count its pages) racing
//! `purge_vmap_area_lazy` (take every node's list under that node's lock,
//! release each area, subtract the pages the lists had added to
//! `vmap_lazy_nr`). Uses the crate's own `NodeLazy` and `LazyCount`, so the
//! model runs the shipped accounting: the nodes' locks are the arch-api
//! mutex vmalloc's fronts use (loom's under `--cfg kmm_loom`).

use arch_api::sync::{DefaultRawMutex, Mutex};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU8, Ordering};
use loom::thread;
use vmap_lazy::{LazyCount, LazyRange, NodeLazy};

const LIVE: u8 = 0;
const LAZY: u8 = 1;
const FREED: u8 = 2;

struct Model {
    /// Two nodes' lazy state, each under its node's lock.
    nodes: [Mutex<DefaultRawMutex, NodeLazy>; 2],
    /// The shared `vmap_lazy_nr`, fed every page (a one-node front's
    /// batch; the order under test does not depend on the batch).
    count: LazyCount,
    /// The area state flags (Linux's `VM_LAZY_FREE`), one per area.
    state: [AtomicU8; 2],
}

fn range(i: usize) -> LazyRange {
    let start = 0x1000_0000 + i as u64 * 0x10_000;
    LazyRange {
        start,
        end: start + (i as u64 + 1) * 0x1000,
        pages: i as u64 + 1,
        lead: 0,
        released: false,
    }
}

/// Area `i` lives on node `i`.
fn vfree(m: &Model, i: usize) {
    assert_eq!(
        m.state[i].swap(LAZY, Ordering::AcqRel),
        LIVE,
        "area freed twice"
    );
    let late = m.nodes[i].lock().loom_publish(range(i), &m.count);
    m.count.add_late(late);
}

/// One purge; every area it takes must be lazy and is released exactly once.
fn purge(m: &Model) {
    let mut folded = 0;
    for node in &m.nodes {
        let (list, f) = node.lock().loom_take();
        folded += f;
        for r in &list {
            let i = ((r.start - 0x1000_0000) / 0x10_000) as usize;
            assert_eq!(
                m.state[i].swap(FREED, Ordering::AcqRel),
                LAZY,
                "purged an area that was not lazy, or twice"
            );
        }
    }
    m.count.retire(folded);
    assert_eq!(m.count.underflows(), 0, "vmap_lazy_nr went below zero");
}

/// Two vfrees (on two nodes' lists) racing one purge; then a final purge.
/// Afterwards: no underflow, every area released once, the counter at 0.
pub fn vfree_races_purge() {
    loom::model(|| {
        let m = Arc::new(Model {
            nodes: [
                Mutex::new(NodeLazy::default()),
                Mutex::new(NodeLazy::default()),
            ],
            count: LazyCount::new(1),
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
        assert_eq!(m.count.nr(), 0, "vmap_lazy_nr counts pages no list holds");
        assert_eq!(m.count.underflows(), 0);
    });
}

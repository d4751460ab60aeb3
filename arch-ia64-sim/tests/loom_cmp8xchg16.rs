//! loom models of [`Cmp8xchg16`] used as SLUB uses it.
//!
//! Under `--cfg kmm_loom` the cell is built from loom primitives, so the models
//! explore every interleaving of the fast path's two single-word loads (tid,
//! then freelist) and the CAS, going through this backend's `DwCas` impl.
//! The second model is the documented hazard: with a `hi` word that does not
//! step, loom must find the lost update.
#![cfg(kmm_loom)]

use arch_api::{DoubleWord, DwCas, DwCell};
use arch_ia64_sim::Cmp8xchg16;
use loom::sync::Arc;
use loom::sync::atomic::Ordering;
use loom::thread;

/// One fast-path "pop": read tid then freelist, CAS `(freelist + 1, tid + step)`,
/// retry on failure with the pair the CAS saw.
fn pop(cell: &DwCell, step: u64) {
    let tid = cell.load_hi(Ordering::Acquire);
    let freelist = cell.load_lo(Ordering::Acquire);
    let mut cur = DoubleWord::new(freelist, tid);
    loop {
        let new = DoubleWord::new(cur.lo + 1, cur.hi + step);
        match Cmp8xchg16::compare_exchange(cell, cur, new) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

fn two_cpus(step: u64) {
    loom::model(move || {
        let cell = Arc::new(DwCell::new(DoubleWord::new(0, 0)));
        let other = {
            let cell = cell.clone();
            thread::spawn(move || pop(&cell, step))
        };
        pop(&cell, step);
        other.join().unwrap();
        assert_eq!(
            cell.load(),
            DoubleWord::new(2, 2 * step),
            "an update was lost"
        );
    });
}

#[test]
fn stepped_tid_never_loses_an_update() {
    two_cpus(4096);
}

#[test]
#[should_panic(expected = "an update was lost")]
fn unstepped_hi_loses_an_update() {
    two_cpus(0);
}

//! (6) The deferred large-block list of `Kmalloc::free_deferred`: one
//! thread reserves a place (bound 3) and pushes a record while another
//! takes the whole list, frees one kind of record and puts the others back
//! as one chain. Every record must end freed once or still on the list,
//! and the count must match.

use loom::sync::Arc;
use slub_core::testing::{LargeList, Linked};
use std::collections::BTreeSet;

struct Rec {
    next: *mut Rec,
    id: usize,
}

// SAFETY: records are handed between threads only through the list.
unsafe impl Send for Rec {}

impl Linked for Rec {
    unsafe fn set_next(this: *mut Self, next: *mut Self) {
        // SAFETY: the caller owns the live record.
        unsafe { (*this).next = next };
    }
}

fn rec(id: usize) -> usize {
    Box::into_raw(Box::new(Rec {
        next: std::ptr::null_mut(),
        id,
    })) as usize
}

/// Takes the whole list: frees (reports) the records `free` picks,
/// puts the others back as one chain (as `Kmalloc`'s poll does).
fn poll(list: &LargeList<Rec>, free: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut freed = Vec::new();
    let (mut first, mut last) = (std::ptr::null_mut::<Rec>(), std::ptr::null_mut::<Rec>());
    let mut p = list.take_all();
    let mut seen = 0;
    while !p.is_null() {
        seen += 1;
        assert!(
            seen <= 3,
            "broken list: a cycle (a record linked to itself)"
        );
        // SAFETY: taken off the list: ours until freed or pushed back.
        let (next, id) = unsafe { ((*p).next, (*p).id) };
        if free(id) {
            // The record is "freed" by name only (leaked, a few bytes per
            // execution): under a broken list it may be reached twice, and
            // the check below must report that, not the allocator abort.
            list.done();
            freed.push(id);
        } else {
            if last.is_null() {
                first = p;
            } else {
                // SAFETY: `last` is ours (kept above).
                unsafe { (*last).next = p };
            }
            last = p;
        }
        p = next;
    }
    if !last.is_null() {
        // SAFETY: the chain `first`..`last` is ours (taken above).
        unsafe { list.push_chain(first, last) };
    }
    freed
}

pub fn take_while_pushing() {
    loom::model(|| {
        let list = Arc::new(LargeList::<Rec>::new());
        // Records 2 and 4 (kept by the poller, put back as a chain of two)
        // are on the list before the threads.
        for (id, before) in [(2, 0), (4, 1)] {
            assert_eq!(list.try_reserve(3), Ok(before));
            // SAFETY: a fresh record, its place reserved; the list owns it.
            unsafe { list.push(rec(id) as *mut Rec) };
        }
        // The bound holds a third place, not a fourth.
        assert_eq!(list.try_reserve(2), Err(2), "broken list: bound");
        assert_eq!(list.try_reserve(4), Ok(2));
        assert_eq!(list.try_reserve(4), Ok(3));
        assert_eq!(list.try_reserve(4), Err(4), "broken list: bound");
        list.unreserve();
        list.unreserve();
        let pusher = {
            let list = list.clone();
            loom::thread::spawn(move || {
                // Bound 3: records 2, 4 and this one.
                assert!(list.try_reserve(3).is_ok(), "broken list: bound");
                // SAFETY: a fresh record, its place reserved; the list owns it.
                unsafe { list.push(rec(1) as *mut Rec) };
            })
        };
        let poller = {
            let list = list.clone();
            loom::thread::spawn(move || poll(&list, |id| id % 2 == 1))
        };
        pusher.join().unwrap();
        let freed = poller.join().unwrap();
        // What is left: everything else, freed now.
        let left = poll(&list, |_| true);
        assert_eq!(list.count(), 0, "broken list: the count does not match");
        let all: BTreeSet<usize> = freed.iter().chain(&left).copied().collect();
        assert_eq!(
            freed.len() + left.len(),
            all.len(),
            "broken list: a record taken twice: {freed:?} {left:?}"
        );
        assert_eq!(
            all,
            BTreeSet::from([1, 2, 4]),
            "broken list: a record lost: freed {freed:?}, left {left:?}"
        );
        assert!(
            !freed.contains(&2) && !freed.contains(&4),
            "records 2 and 4 are kept by the poller"
        );
    });
}

//! Tests of the B-tree policy: node size, lowest fit against a scan, merges across leaves,
//! emptied leaves unlinked, exhaustion.

use super::node::BNode;
use super::*;
use crate::node::{Pool, test_pool};
use crate::tree::Tree;

const P: u64 = 0x1000;

fn fit(size: u64, align: u64) -> Fit {
    Fit {
        size,
        align,
        phase: 0,
        nocross: 0,
        vstart: 0,
        vend: 1 << 40,
    }
}

/// A tree over `[0, pages)` with the pages `busy` says taken, one by
/// one through the policy (claims of single pages).
fn with_busy(s: &mut Pool<4096>, pages: u64, busy: impl Iterator<Item = u64>) -> BTree {
    let mut t = BTree::init(s, 0, pages * P).unwrap();
    let mut empty: BusyTree = Tree::new();
    for p in busy {
        let mut v = 0;
        assert!(t.find_exact(s, &mut empty, p * P, P, &mut v));
        t.claim(s, p * P, P, NIL).unwrap();
    }
    t
}

fn blocks(t: &BTree, s: &Pool<4096>) -> std::vec::Vec<(u64, u64)> {
    let mut out = std::vec::Vec::new();
    t.walk(s, t.root, 0, &mut |a, b, _| {
        out.push((a / P, b / P));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn one_node_is_four_cache_lines() {
    assert_eq!(K, 4);
    assert_eq!(core::mem::size_of::<BNode>(), 256);
}

/// 200 busy pages at every third page: 200 free blocks of two pages,
/// three levels of nodes; lowest fit, alignment and windows agree with
/// a scan of the blocks.
#[test]
fn lowest_fit_over_many_leaves_matches_a_scan() {
    let mut s = test_pool::<4096>();
    let mut t = with_busy(&mut s, 600, (0..200).map(|k| 3 * k));
    assert!(t.depth >= 3, "depth {}", t.depth);
    let bl = blocks(&t, &s);
    assert_eq!(bl.len(), 200);
    assert_eq!(bl[0], (1, 3));
    // Grow one hole to 8 pages high up: the only fit for 5 pages.
    for p in [450, 453] {
        t.release(&mut s, p * P, (p + 1) * P, NIL, NIL);
    }
    let mut v = 0;
    let mut empty: BusyTree = Tree::new();
    assert_eq!(
        t.find_fit(&s, &mut empty, &fit(5 * P, P), &mut v),
        Some(448 * P)
    );
    assert_eq!(t.find_fit(&s, &mut empty, &fit(2 * P, P), &mut v), Some(P));
    // Aligned to 4 pages: the first 2-page hole at a multiple of 4.
    assert_eq!(
        t.find_fit(&s, &mut empty, &fit(2 * P, 4 * P), &mut v),
        Some(4 * P)
    );
    let mut w = fit(P, P);
    w.vstart = 300 * P;
    assert_eq!(t.find_fit(&s, &mut empty, &w, &mut v), Some(301 * P));
    w.vend = 301 * P;
    assert_eq!(t.find_fit(&s, &mut empty, &w, &mut v), None);
    assert_eq!(t.find_fit(&s, &mut empty, &fit(9 * P, P), &mut v), None);
}

/// Freeing every busy page in a shuffled order merges all blocks back
/// into one, crossing leaf boundaries both ways, and gives every node
/// but the root back.
#[test]
fn frees_merge_across_leaves_and_return_nodes() {
    let mut s = test_pool::<4096>();
    let mut t = with_busy(&mut s, 601, (0..300).map(|k| 2 * k + 1));
    let depth = t.depth;
    assert!(depth >= 3);
    let mut order: std::vec::Vec<u64> = (0..300).map(|k| 2 * k + 1).collect();
    let mut x = 7u64;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    for (n, &p) in order.iter().enumerate() {
        t.release(&mut s, p * P, (p + 1) * P, NIL, NIL);
        if n % 37 == 0 {
            let mut prev = 0;
            for (a, b) in blocks(&t, &s) {
                assert!(a > prev || a == 0, "{a} after {prev}");
                prev = b;
            }
        }
    }
    assert_eq!(blocks(&t, &s), [(0, 601)]);
    assert_eq!(t.depth, 1);
    assert_eq!(s.in_use(), (K as usize) * (1 + t.nspare));
}

/// Taking every page one by one from the front empties the leaves
/// below the root one after another.
#[test]
fn claims_that_empty_leaves_unlink_them() {
    let mut s = test_pool::<4096>();
    let mut t = with_busy(&mut s, 400, (0..100).map(|k| 4 * k));
    let mut empty: BusyTree = Tree::new();
    loop {
        let mut v = 0;
        let Some(a) = t.find_fit(&s, &mut empty, &fit(P, P), &mut v) else {
            break;
        };
        t.claim(&mut s, a, P, NIL).unwrap();
    }
    assert!(blocks(&t, &s).is_empty());
    assert_eq!(t.depth, 1);
    t.release(&mut s, 5 * P, 6 * P, NIL, NIL);
    assert_eq!(blocks(&t, &s), [(5, 6)]);
}

#[test]
fn claim_reports_exhaustion_unchanged() {
    let mut s = test_pool::<8>();
    let mut t = BTree::init(&mut s, 0, 10 * P).unwrap();
    let mut empty: BusyTree = Tree::new();
    let mut v = 0;
    assert_eq!(t.find_fit(&s, &mut empty, &fit(P, P), &mut v), Some(0));
    // The reserve wants two more nodes: the 8-slot pool has one.
    assert_eq!(
        t.claim(&mut s, 0, P, NIL),
        Err(VmapError::NodePoolExhausted)
    );
    let n = get(&s, t.root);
    assert_eq!((n.len, n.lo[0], n.hi[0]), (1, 0, 10 * P));
}

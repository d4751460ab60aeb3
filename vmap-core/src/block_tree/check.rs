//! `BlockTree`'s invariants, checked (for `VmapSpace::check_invariants`
//! and the tests): the leaf chain follows the tree in address order, each
//! leaf's `prev_end` is the end before it, separators bound their
//! children's starts, parent links point back, every inner slot holds the
//! exact largest gap below it, unused slots hold their fillers, and the
//! sentinel ends the space.

use super::{B, BlockTree, NONE};

/// What a subtree reports up: its largest gap and its lowest and highest
/// starts.
struct Sub {
    gap: u64,
    lo: u64,
    hi: u64,
}

impl BlockTree {
    /// Every invariant; returns the number of areas (the sentinel not
    /// counted).
    pub(crate) fn check_tree(&self) -> Result<usize, &'static str> {
        if self.height >= super::MAX_HEIGHT {
            return Err("block tree taller than a path holds");
        }
        let mut chain = (self.first_leaf(), self.start, 0);
        self.check_node(self.root, self.height, NONE, &mut chain)?;
        let (next, end, records) = chain;
        if next != NONE {
            return Err("leaf chain runs past the tree");
        }
        if end != self.end {
            return Err("the sentinel does not end the leaf chain");
        }
        if records != self.areas + 1 {
            return Err("area count mismatch");
        }
        Ok(self.areas)
    }

    /// Checks the subtree at `node` (at `height`, below `parent`);
    /// `chain` is the leaf the chain says comes next, the end of the last
    /// area seen and the records counted so far.
    fn check_node(
        &self,
        node: u32,
        height: usize,
        parent: u32,
        chain: &mut (u32, u64, usize),
    ) -> Result<Sub, &'static str> {
        if height == 0 {
            let l = self.leaves.get(node as usize).ok_or("leaf out of range")?;
            if l.parent != parent {
                return Err("leaf's parent link");
            }
            if node != chain.0 {
                return Err("the leaf chain does not follow the tree");
            }
            if l.n == 0 || l.n > B {
                return Err("leaf record count");
            }
            if l.prev_end != chain.1 {
                return Err("leaf's prev_end is not the end before it");
            }
            if l.rec[l.n..].iter().any(|r| r.start != u64::MAX) {
                return Err("unused leaf slot not filled");
            }
            for r in &l.rec[..l.n] {
                if r.start < chain.1 || r.end < r.start {
                    return Err("areas out of order or overlapping");
                }
                chain.1 = r.end;
            }
            chain.0 = l.next;
            chain.2 += l.n;
            let (lo, hi) = (l.rec[0].start, l.rec[l.n - 1].start);
            return Ok(Sub {
                gap: self.leaf_gap(node),
                lo,
                hi,
            });
        }
        let n = self
            .inners
            .get(node as usize)
            .ok_or("inner node out of range")?;
        if n.parent != parent {
            return Err("inner node's parent link");
        }
        if n.n == 0 || n.n > B || (node == self.root && n.n < 2) {
            return Err("inner node child count");
        }
        if n.gap[n.n..].iter().any(|&g| g != 0) || n.key[n.n..].iter().any(|&k| k != u64::MAX) {
            return Err("unused inner slot not filled");
        }
        let mut sub = Sub {
            gap: 0,
            lo: u64::MAX,
            hi: 0,
        };
        for c in 0..n.n {
            let s = self.check_node(n.child[c], height - 1, node, chain)?;
            if n.gap[c] != s.gap {
                return Err("inner slot's gap is not the largest below it");
            }
            if c > 0 && (n.key[c] > s.lo || n.key[c] <= sub.hi) {
                return Err("separator out of place");
            }
            sub.gap = sub.gap.max(s.gap);
            sub.lo = sub.lo.min(s.lo);
            sub.hi = sub.hi.max(s.hi);
        }
        Ok(sub)
    }
}

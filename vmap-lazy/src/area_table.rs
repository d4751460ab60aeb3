//! The area table: start address → [`AreaInfo`], what `find_vmap_area`
//! looks up on every `vfree`.
//!
//! `vfree` finds its area by start address, `vmalloc` inserts one, a purge
//! removes every lazy one; none of them needs order. With the ~8000 lazy
//! areas that `lazy_max_pages` lets pile up, an ordered map paid a tree
//! descent of a few hundred instructions for each of those operations, a
//! tenth of a whole vmalloc/vfree pair. This is a hash table instead: open
//! addressing with linear probing, at most half full, removal by backward
//! shift (no tombstones), so an operation is one or two probes. Listings
//! (vmallocinfo, the consistency check) sort.

use crate::area::AreaInfo;
use alloc::vec;
use alloc::vec::Vec;

/// Fibonacci hashing: the high bits of `key * 2^64 / phi` spread
/// page-aligned start addresses evenly.
const FIB: u64 = 0x9e37_79b9_7f4a_7c15;

/// Start address → area, unordered.
#[derive(Debug)]
pub(crate) struct AreaTable {
    /// A power-of-two number of slots (or none).
    slots: Vec<Option<AreaInfo>>,
    len: usize,
    /// `64 - log2(slots.len())`.
    shift: u32,
}

impl Default for AreaTable {
    fn default() -> Self {
        Self::new()
    }
}

impl AreaTable {
    /// An empty table (allocates on the first insert).
    pub(crate) const fn new() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
            shift: 64,
        }
    }

    /// Areas in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn home(&self, key: u64) -> usize {
        // `shift` is 64 only while there are no slots (never probed then).
        (key.wrapping_mul(FIB) >> self.shift) as usize
    }

    fn next(&self, i: usize) -> usize {
        (i + 1) & (self.slots.len() - 1)
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(key);
        loop {
            match &self.slots[i] {
                None => return None,
                Some(a) if a.start.as_u64() == key => return Some(i),
                Some(_) => i = self.next(i),
            }
        }
    }

    /// The area starting at `key`.
    #[cfg(feature = "testing")]
    pub(crate) fn get(&self, key: u64) -> Option<&AreaInfo> {
        self.find(key).and_then(|i| self.slots[i].as_ref())
    }

    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut AreaInfo> {
        let i = self.find(key)?;
        self.slots[i].as_mut()
    }

    /// Adds `info` (keyed by its start); returns the area it replaced.
    pub(crate) fn insert(&mut self, info: AreaInfo) -> Option<AreaInfo> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let key = info.start.as_u64();
        let mut i = self.home(key);
        loop {
            match &mut self.slots[i] {
                slot @ None => {
                    *slot = Some(info);
                    self.len += 1;
                    return None;
                }
                Some(a) if a.start.as_u64() == key => return Some(core::mem::replace(a, info)),
                Some(_) => i = self.next(i),
            }
        }
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = core::mem::replace(&mut self.slots, vec![None; cap]);
        self.shift = 64 - cap.trailing_zeros();
        self.len = 0;
        for a in old.into_iter().flatten() {
            self.insert(a);
        }
    }

    /// Takes the area starting at `key` out.
    pub(crate) fn remove(&mut self, key: u64) -> Option<AreaInfo> {
        let mut hole = self.find(key)?;
        let out = self.slots[hole].take();
        self.len -= 1;
        // Backward shift: pull later members of the probe run into the hole
        // when the hole lies between their home slot and where they sit.
        let mask = self.slots.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some(a) = self.slots[j] else { break };
            let home = self.home(a.start.as_u64());
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
        }
        out
    }

    /// Every area, in address order.
    pub(crate) fn sorted(&self) -> Vec<AreaInfo> {
        let mut v: Vec<AreaInfo> = self.slots.iter().flatten().copied().collect();
        v.sort_unstable_by_key(|a| a.start.as_u64());
        v
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;
    use crate::area::{AreaKind, AreaState};
    use alloc::collections::BTreeMap;
    use arch_api::VirtAddr;

    fn area(start: u64) -> AreaInfo {
        AreaInfo {
            start: VirtAddr::new(start),
            end: VirtAddr::new(start + 4096),
            pages: 1,
            caller: "t",
            kind: AreaKind::Vmalloc,
            state: AreaState::Live,
            flags: crate::VmFlags::empty(),
            spare: 0,
            large_leaves: 0,
            large_shift: 0,
        }
    }

    #[test]
    fn agrees_with_an_ordered_map() {
        let mut t = AreaTable::new();
        let mut m = BTreeMap::new();
        assert!(t.get_mut(0x1000).is_none() && t.remove(0x1000).is_none());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        // Miri interprets every probe: fewer steps there, still past
        // several grows and many removals inside probe runs.
        let steps: u32 = if cfg!(miri) { 3_000 } else { 20_000 };
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, so inserts, hits and removals all happen,
            // and long probe runs form around the removals.
            let key = (x % 600) << 12;
            match x >> 62 {
                0 | 1 => {
                    let mut a = area(key);
                    a.pages = u64::from(step);
                    assert_eq!(t.insert(a), m.insert(key, a));
                }
                2 => assert_eq!(t.remove(key), m.remove(&key)),
                _ => {
                    if let Some(a) = t.get_mut(key) {
                        a.state = AreaState::Lazy;
                    }
                    if let Some(a) = m.get_mut(&key) {
                        a.state = AreaState::Lazy;
                    }
                }
            }
            assert_eq!(t.len(), m.len());
        }
        assert_eq!(t.sorted(), m.values().copied().collect::<Vec<_>>());
        for k in m.keys() {
            assert_eq!(t.remove(*k).map(|a| a.start.as_u64()), Some(*k));
        }
        assert_eq!((t.len(), t.sorted().len()), (0, 0));
    }
}

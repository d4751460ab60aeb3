//! Which simulated CPUs may hold the translation of which page.
//!
//! Pages are grouped in aligned chunks of 64. One hash table maps each chunk
//! (and each group of 64 CPUs) that some CPU may translate into to a
//! [`Chunk`]: a bit per page saying whether any CPU holds it, and per page
//! the mask of CPUs holding it. A count per CPU says how many pages each
//! holds. The question lazy purging must never get wrong, "may any CPU still
//! hold a translation in `[a, b)`?", asked on every allocation, is then one
//! probe per chunk the range meets (one for a small area) and a mask test,
//! or one pass over the table when that is cheaper; its cost no longer grows
//! with the number of CPUs. Touching a small area is one probe too.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::vec;
use std::vec::Vec;

/// Multiplicative (Fx-style) hashing of chunk keys. The keys are page
/// numbers the simulation produces itself, so SipHash's resistance to chosen
/// keys buys nothing here and would cost most of a touch.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PageHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for PageHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Pages per chunk (the bits of `Chunk::present`).
const CHUNK: u64 = 64;

/// 64 aligned pages, as seen by 64 CPUs.
#[derive(Clone, Copy)]
struct Chunk {
    /// Bit `i`: some of these CPUs hold page `i` of the chunk (`masks[i] != 0`).
    present: u64,
    /// Per page, the CPUs holding it.
    masks: [u64; CHUNK as usize],
}

const EMPTY: Chunk = Chunk {
    present: 0,
    masks: [0; CHUNK as usize],
};

/// The bits of the pages of `[first, last)` inside chunk `c`.
fn bits_in(c: u64, first: u64, last: u64) -> u64 {
    let lo = first.max(c * CHUNK) - c * CHUNK;
    let hi = last.min((c + 1) * CHUNK).saturating_sub(c * CHUNK);
    if hi <= lo {
        return 0;
    }
    (u64::MAX >> (CHUNK - (hi - lo))) << lo
}

/// The per-page holder index of a [`SoftTlb`](super::SoftTlb).
pub(super) struct HeldPages {
    /// `(chunk << word_shift) | word` → the chunk as seen by CPUs
    /// `64 * word ..` (never all empty: an entry goes with its last page).
    map: HashMap<u64, Chunk, BuildHasherDefault<PageHasher>>,
    /// Pages each CPU holds.
    per_cpu: Vec<u64>,
    /// Mask words per page (`ceil(cpus / 64)`).
    words: u64,
    /// `log2` of `words` rounded up to a power of two.
    word_shift: u32,
}

/// A set of CPUs, one bit each (`words` words).
pub(super) type CpuMask = Vec<u64>;

impl HeldPages {
    /// An empty index for `cpus` CPUs (at least 1) and page numbers of
    /// `64 - page_shift` bits.
    pub(super) fn new(cpus: usize, page_shift: u32) -> Self {
        let words = cpus.max(1).div_ceil(64) as u64;
        let word_shift = words.next_power_of_two().trailing_zeros();
        assert!(
            word_shift <= page_shift,
            "{cpus} CPUs do not fit beside the page number of {}-byte pages",
            1u64 << page_shift
        );
        Self {
            map: HashMap::default(),
            per_cpu: vec![0; cpus.max(1)],
            words,
            word_shift,
        }
    }

    fn key(&self, chunk: u64, word: u64) -> u64 {
        (chunk << self.word_shift) | word
    }

    fn split(&self, key: u64) -> (u64, u64) {
        (key >> self.word_shift, key & ((1 << self.word_shift) - 1))
    }

    /// The chunks `[first, last)` meets, and whether probing each of them
    /// beats one pass over the table (whose cost follows its capacity).
    fn chunks(&self, first: u64, last: u64) -> (u64, u64, bool) {
        let (c0, c1) = (first / CHUNK, (last - 1) / CHUNK + 1);
        let probes = (c1 - c0).saturating_mul(self.words);
        (c0, c1, probes <= self.map.capacity() as u64 / 4 + 16)
    }

    /// `cpu` may now hold the translations of pages `[first, last)`.
    pub(super) fn insert_range(&mut self, cpu: usize, first: u64, last: u64) {
        if last <= first {
            return;
        }
        let word = (cpu / 64) as u64;
        let bit = 1u64 << (cpu % 64);
        let mut added = 0;
        for c in first / CHUNK..=(last - 1) / CHUNK {
            let key = self.key(c, word);
            let ch = self.map.entry(key).or_insert(EMPTY);
            let mut m = bits_in(c, first, last);
            ch.present |= m;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                added += u64::from(ch.masks[i] & bit == 0);
                ch.masks[i] |= bit;
                m &= m - 1;
            }
        }
        self.per_cpu[cpu] += added;
    }

    /// Pages `cpu` holds.
    /// A mask with no CPU in it.
    pub(super) fn no_cpus(&self) -> CpuMask {
        vec![0u64; self.words as usize]
    }

    /// Whether no CPU holds any translation.
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn count(&self, cpu: usize) -> u64 {
        self.per_cpu[cpu]
    }

    /// Whether `cpu` holds page `pn`.
    #[cfg(test)]
    fn holds(&self, cpu: usize, pn: u64) -> bool {
        self.map
            .get(&self.key(pn / CHUNK, (cpu / 64) as u64))
            .is_some_and(|ch| ch.masks[(pn % CHUNK) as usize] & (1 << (cpu % 64)) != 0)
    }

    /// The lowest page of `[first, last)` some CPU holds, and the lowest CPU
    /// holding it.
    pub(super) fn lowest(&self, first: u64, last: u64) -> Option<(usize, u64)> {
        if self.map.is_empty() || last <= first {
            return None;
        }
        let (c0, c1, probe) = self.chunks(first, last);
        if probe {
            for c in c0..c1 {
                let range = bits_in(c, first, last);
                // The lowest page over all words, then its lowest CPU.
                let mut best: Option<(u64, usize)> = None;
                for w in 0..self.words {
                    let Some(ch) = self.map.get(&self.key(c, w)) else {
                        continue;
                    };
                    let m = ch.present & range;
                    if m == 0 {
                        continue;
                    }
                    let i = u64::from(m.trailing_zeros());
                    if best.is_none_or(|(p, _)| i < p) {
                        let cpu = w as usize * 64 + ch.masks[i as usize].trailing_zeros() as usize;
                        best = Some((i, cpu));
                    }
                }
                if let Some((i, cpu)) = best {
                    return Some((cpu, c * CHUNK + i));
                }
            }
            return None;
        }
        self.map
            .iter()
            .filter_map(|(&k, ch)| {
                let (c, w) = self.split(k);
                let m = ch.present & bits_in(c, first, last);
                (m != 0).then(|| {
                    let i = m.trailing_zeros() as usize;
                    let cpu = w as usize * 64 + ch.masks[i].trailing_zeros() as usize;
                    (c * CHUNK + i as u64, cpu)
                })
            })
            .min()
            .map(|(pn, cpu)| (cpu, pn))
    }

    /// The CPUs holding some page of `[first, last)`, or any page at all
    /// (`None`).
    pub(super) fn holders(&self, span: Option<(u64, u64)>) -> CpuMask {
        let mut out = self.no_cpus();
        self.holders_into(span, &mut out);
        out
    }

    /// [`holders`](Self::holders), added into `out` (one mask for a list of
    /// ranges, without a mask per range).
    pub(super) fn holders_into(&self, span: Option<(u64, u64)>, out: &mut [u64]) {
        let (first, last) = match span {
            None => {
                for (cpu, &n) in self.per_cpu.iter().enumerate() {
                    if n != 0 {
                        out[cpu / 64] |= 1 << (cpu % 64);
                    }
                }
                return;
            }
            Some((f, l)) if l <= f || self.map.is_empty() => return,
            Some(s) => s,
        };
        let or_into = |o: &mut u64, c: u64, ch: &Chunk| {
            let mut m = ch.present & bits_in(c, first, last);
            while m != 0 {
                *o |= ch.masks[m.trailing_zeros() as usize];
                m &= m - 1;
            }
        };
        let (c0, c1, probe) = self.chunks(first, last);
        if probe {
            for c in c0..c1 {
                for (w, o) in out.iter_mut().enumerate() {
                    if let Some(ch) = self.map.get(&self.key(c, w as u64)) {
                        or_into(o, c, ch);
                    }
                }
            }
        } else {
            for (&k, ch) in &self.map {
                let (c, w) = self.split(k);
                or_into(&mut out[w as usize], c, ch);
            }
        }
    }

    /// Drops the pages `m` of `ch` for the CPUs in `cpus` (of word `w`),
    /// keeping the counts; whether the chunk is empty now.
    fn drop_pages(per_cpu: &mut [u64], w: u64, ch: &mut Chunk, mut m: u64, cpus: u64) -> bool {
        m &= ch.present;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            let mut gone = ch.masks[i] & cpus;
            ch.masks[i] &= !cpus;
            if ch.masks[i] == 0 {
                ch.present &= !(1 << i);
            }
            while gone != 0 {
                per_cpu[w as usize * 64 + gone.trailing_zeros() as usize] -= 1;
                gone &= gone - 1;
            }
            m &= m - 1;
        }
        ch.present == 0
    }

    /// Every CPU drops its translations of `[first, last)`.
    pub(super) fn remove_range(&mut self, first: u64, last: u64) {
        if self.map.is_empty() || last <= first {
            return;
        }
        let (c0, c1, probe) = self.chunks(first, last);
        let (shift, per_cpu) = (self.word_shift, &mut self.per_cpu);
        if probe {
            for c in c0..c1 {
                for w in 0..self.words {
                    let key = (c << shift) | w;
                    if let Some(ch) = self.map.get_mut(&key) {
                        if Self::drop_pages(per_cpu, w, ch, bits_in(c, first, last), !0) {
                            self.map.remove(&key);
                        }
                    }
                }
            }
            return;
        }
        self.map.retain(|&k, ch| {
            let (c, w) = (k >> shift, k & ((1 << shift) - 1));
            !Self::drop_pages(per_cpu, w, ch, bits_in(c, first, last), !0)
        });
    }

    /// Every CPU drops every translation.
    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.per_cpu.fill(0);
    }

    /// The CPUs in `cpus` drop every translation; the others keep theirs.
    pub(super) fn clear_cpus(&mut self, cpus: &CpuMask) {
        let (shift, per_cpu) = (self.word_shift, &mut self.per_cpu);
        self.map.retain(|&k, ch| {
            let w = k & ((1 << shift) - 1);
            !Self::drop_pages(per_cpu, w, ch, !0, cpus[w as usize])
        });
    }
}

/// CPUs in `mask`, leaving out `except`.
pub(super) fn count_except(mask: &CpuMask, except: usize) -> u64 {
    let all: u64 = mask.iter().map(|w| u64::from(w.count_ones())).sum();
    let own = mask
        .get(except / 64)
        .is_some_and(|w| w & (1 << (except % 64)) != 0);
    all - u64::from(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per CPU, the pages of `0..pages` it holds.
    fn model(h: &HeldPages, cpus: usize, pages: u64) -> Vec<Vec<u64>> {
        (0..cpus)
            .map(|c| (0..pages).filter(|&p| h.holds(c, p)).collect())
            .collect()
    }

    #[test]
    fn chunk_bits() {
        assert_eq!(bits_in(0, 0, 64), u64::MAX);
        assert_eq!(bits_in(1, 0, 1000), u64::MAX);
        assert_eq!(bits_in(1, 66, 68), 0b1100);
        assert_eq!(bits_in(1, 60, 65), 1);
        assert_eq!(bits_in(0, 60, 65), 0b1111 << 60);
        assert_eq!(bits_in(2, 60, 65), 0);
    }

    #[test]
    fn many_cpus_probe_and_scan_agree() {
        // 130 CPUs: three mask words per page.
        let mut h = HeldPages::new(130, 12);
        assert_eq!((h.words, h.word_shift), (3, 2));
        h.insert_range(129, 7, 8);
        h.insert_range(64, 9, 10);
        h.insert_range(3, 9, 10);
        h.insert_range(3, 9, 10);
        assert_eq!((h.count(3), h.count(64), h.count(129)), (1, 1, 1));
        // Probing (short range) and scanning (long range) find the same.
        assert_eq!(h.lowest(0, 8), Some((129, 7)));
        assert_eq!(h.lowest(0, 1 << 40), Some((129, 7)));
        assert_eq!(h.lowest(8, 10), Some((3, 9)));
        assert_eq!(h.lowest(8, 1 << 40), Some((3, 9)));
        assert_eq!(h.lowest(10, 1 << 40), None);
        let m = h.holders(Some((8, 1 << 40)));
        assert_eq!(m, vec![1 << 3, 1, 0]);
        assert_eq!(h.holders(Some((8, 10))), m);
        assert_eq!(count_except(&m, 64), 1);
        assert_eq!(count_except(&h.holders(None), 5), 3);
        // Removal by scan, then by probe.
        h.remove_range(8, 1 << 40);
        assert_eq!((h.count(3), h.count(64), h.count(129)), (0, 0, 1));
        h.remove_range(7, 8);
        assert!(h.map.is_empty());
        assert_eq!(h.count(129), 0);
    }

    #[test]
    fn ranges_across_chunks() {
        let mut h = HeldPages::new(8, 12);
        h.insert_range(2, 60, 200);
        h.insert_range(5, 130, 131);
        assert_eq!(h.count(2), 140);
        assert_eq!(model(&h, 8, 300)[2], (60..200).collect::<Vec<_>>());
        assert_eq!(h.lowest(0, 61), Some((2, 60)));
        assert_eq!(h.lowest(130, 131), Some((2, 130)));
        assert_eq!(h.lowest(200, 400), None);
        h.remove_range(61, 199);
        assert_eq!(model(&h, 8, 300)[2], vec![60, 199]);
        assert_eq!((h.count(2), h.count(5)), (2, 0));
        assert_eq!(h.map.len(), 2, "the emptied middle chunk went");
        assert_eq!(h.lowest(61, 199), None);
    }

    #[test]
    fn clear_cpus_keeps_the_others() {
        let mut h = HeldPages::new(4, 12);
        for p in 0..50 {
            h.insert_range((p % 4) as usize, p, p + 1);
            h.insert_range(0, p, p + 1);
        }
        assert_eq!(h.count(0), 50);
        h.clear_cpus(&vec![0b0101]);
        let m = model(&h, 4, 50);
        assert!(m[0].is_empty() && m[2].is_empty());
        assert_eq!(m[1], (0..50).filter(|p| p % 4 == 1).collect::<Vec<_>>());
        assert_eq!(m[3].len(), 12);
        assert_eq!((h.count(0), h.count(1), h.count(3)), (0, 13, 12));
        assert_eq!(h.lowest(0, 2), Some((1, 1)));
        h.clear();
        assert_eq!(h.lowest(0, 100), None);
        assert_eq!(h.count(1), 0);
    }

    #[test]
    fn hasher_spreads_consecutive_keys() {
        let mut seen = std::collections::BTreeSet::new();
        for p in 0..1024u64 {
            let mut s = PageHasher::default();
            s.write_u64(p);
            seen.insert(s.finish() & 1023);
        }
        assert_eq!(seen.len(), 1024, "consecutive chunks use distinct buckets");
    }
}

//! Shared by the integration tests: a tiny deterministic RNG and the
//! brute-force reference model the policies are checked against.
#![allow(dead_code)]

use vmap_core::{VmapArea, VmapError};

/// SplitMix64: deterministic, dependency-free.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The reference: a sorted list of busy ranges and a brute-force search that
/// tries every aligned address of every gap. Written independently of the
/// crate's `candidate` computation.
pub struct Reference {
    pub start: u64,
    pub end: u64,
    pub page: u64,
    pub busy: Vec<(u64, u64)>,
}

/// A request as the reference sees it.
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub size: u64,
    pub align: u64,
    pub phase: u64,
    pub nocross: u64,
    pub vstart: u64,
    pub vend: u64,
    pub exact: Option<u64>,
}

impl Reference {
    pub fn new(start: u64, end: u64, page: u64) -> Self {
        Self {
            start,
            end,
            page,
            busy: Vec::new(),
        }
    }

    fn check(&self, r: &Req) -> Result<(u64, u64), VmapError> {
        let p = self.page;
        let np = |what, value: u64| {
            if value % p != 0 {
                Err(VmapError::NotPageMultiple {
                    what,
                    value,
                    page_size: p,
                })
            } else {
                Ok(())
            }
        };
        if r.size == 0 {
            return Err(VmapError::ZeroSize);
        }
        np("size", r.size)?;
        if r.align == 0 || r.align & (r.align - 1) != 0 {
            return Err(VmapError::AlignNotPowerOfTwo { align: r.align });
        }
        np("align", r.align)?;
        np("phase", r.phase)?;
        if r.phase >= r.align {
            return Err(VmapError::PhaseTooLarge {
                phase: r.phase,
                align: r.align,
            });
        }
        if r.nocross != 0 {
            if r.nocross & (r.nocross - 1) != 0 {
                return Err(VmapError::NocrossNotPowerOfTwo { nocross: r.nocross });
            }
            if r.nocross < r.size {
                return Err(VmapError::NocrossTooSmall {
                    nocross: r.nocross,
                    size: r.size,
                });
            }
        }
        let (vs, ve) = match r.exact {
            Some(a) => {
                np("addr", a)?;
                let e = a.checked_add(r.size).ok_or(VmapError::Overflow {
                    vstart: a,
                    size: r.size,
                })?;
                (a, e)
            }
            None => (r.vstart, r.vend),
        };
        np("vstart", vs)?;
        np("vend", ve)?;
        if vs >= ve {
            return Err(VmapError::EmptyRange {
                vstart: vs,
                vend: ve,
            });
        }
        if vs.checked_add(r.size).is_none() {
            return Err(VmapError::Overflow {
                vstart: vs,
                size: r.size,
            });
        }
        if vs < self.start || ve > self.end {
            return Err(VmapError::OutsideSpace {
                vstart: vs,
                vend: ve,
                start: self.start,
                end: self.end,
            });
        }
        Ok((vs, ve))
    }

    fn ok_at(r: &Req, a: u64) -> bool {
        if a % r.align != r.phase {
            return false;
        }
        r.nocross == 0 || a / r.nocross == (a + r.size - 1) / r.nocross
    }

    /// Lowest fit by trying every address with the right residue.
    pub fn alloc(&mut self, r: &Req) -> Result<u64, VmapError> {
        let (vs, ve) = self.check(r)?;
        let no_space = VmapError::NoSpace {
            size: r.size,
            align: r.align,
            vstart: vs,
            vend: ve,
        };
        let mut found = None;
        let mut gap_start = self.start;
        let mut pos = 0;
        for k in 0..=self.busy.len() {
            let gap_end = if k < self.busy.len() {
                self.busy[k].0
            } else {
                self.end
            };
            let lo = gap_start.max(vs);
            let hi = gap_end.min(ve);
            if lo < hi && hi - lo >= r.size {
                // First address >= lo with a % align == phase.
                let mut a = lo + (r.phase + r.align - lo % r.align) % r.align;
                while a + r.size <= hi {
                    if Self::ok_at(r, a) {
                        found = Some(a);
                        break;
                    }
                    a += r.align;
                }
            }
            if found.is_some() {
                pos = k;
                break;
            }
            if k < self.busy.len() {
                gap_start = self.busy[k].1;
            }
            if gap_start >= ve {
                break;
            }
        }
        if r.exact.is_some() && found != Some(vs) {
            return Err(no_space);
        }
        let a = found.ok_or(no_space)?;
        self.busy.insert(pos, (a, a + r.size));
        Ok(a)
    }

    pub fn free(&mut self, addr: u64) -> Result<(u64, u64), VmapError> {
        match self.busy.binary_search_by_key(&addr, |x| x.0) {
            Ok(k) => Ok(self.busy.remove(k)),
            Err(_) => Err(VmapError::NotFound { addr }),
        }
    }

    pub fn find(&self, addr: u64) -> Option<(u64, u64)> {
        let k = self.busy.partition_point(|x| x.0 <= addr);
        (k > 0 && addr < self.busy[k - 1].1).then(|| self.busy[k - 1])
    }
}

pub fn span(a: &VmapArea) -> (u64, u64) {
    (a.va_start.as_u64(), a.va_end.as_u64())
}

//! `AllocRequest`: what an allocation asks for (size, alignment, the vmem
//! constraints `phase` and `nocross`, the `[vstart, vend)` window), its
//! validation, and the one place that computes where a candidate address may
//! start. Every policy and the reference model use [`Fit::candidate`], which
//! is why they agree on placement.

use crate::VirtAddr;
use crate::error::VmapError;

/// An allocation request. [`AllocRequest::new`] gives the plain Linux form
/// (`alloc_vmap_area(size, align, vstart, vend)`); the builder methods add
/// the vmem-style constraints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    /// Bytes, a non-zero multiple of the page size.
    pub size: u64,
    /// A power of two, a multiple of the page size.
    pub align: u64,
    /// The area starts at `a` with `a % align == phase` (0 = plain alignment).
    pub phase: u64,
    /// If non-zero, a power of two `>= size`: the area must not cross a
    /// multiple of it.
    pub nocross: u64,
    /// Lowest acceptable start.
    pub vstart: VirtAddr,
    /// The area must end at or below this address.
    pub vend: VirtAddr,
    /// If set, allocate exactly `[addr, addr + size)` or fail.
    pub exact: Option<VirtAddr>,
}

impl AllocRequest {
    /// The plain request: `size` bytes aligned to `align` inside `[vstart, vend)`.
    pub const fn new(size: u64, align: u64, vstart: VirtAddr, vend: VirtAddr) -> Self {
        Self {
            size,
            align,
            phase: 0,
            nocross: 0,
            vstart,
            vend,
            exact: None,
        }
    }

    /// Exactly `[addr, addr + size)`, if it is free (vmem's `VM_...` exact
    /// allocation, `vmem_xalloc(minaddr = addr, maxaddr = addr + size)`).
    pub const fn exact(addr: VirtAddr, size: u64, page_size: u64) -> Self {
        Self {
            size,
            align: page_size,
            phase: 0,
            nocross: 0,
            vstart: addr,
            vend: VirtAddr::new(addr.as_u64().wrapping_add(size)),
            exact: Some(addr),
        }
    }

    /// Sets the phase: the start satisfies `a % align == phase`.
    pub const fn phase(mut self, phase: u64) -> Self {
        self.phase = phase;
        self
    }

    /// Sets the boundary the area must not cross (0 = none).
    pub const fn nocross(mut self, nocross: u64) -> Self {
        self.nocross = nocross;
        self
    }

    /// Checks the request against a space `[start, end)` with `page_size`.
    ///
    /// The plain request (no phase, no `nocross`, no exact address, every
    /// field page-aligned and inside the space) is checked inline with one
    /// test per condition; anything else, errors included, takes the full
    /// check out of line. Both give the same answer.
    #[inline]
    pub(crate) fn validate(&self, start: u64, end: u64, page_size: u64) -> Result<Fit, VmapError> {
        let (size, align, vstart, vend) = (
            self.size,
            self.align,
            self.vstart.as_u64(),
            self.vend.as_u64(),
        );
        let plain = self.exact.is_none()
            && self.phase == 0
            && self.nocross == 0
            && size != 0
            && (size | align | vstart | vend) & (page_size - 1) == 0
            && align.is_power_of_two()
            && start <= vstart
            && vstart < vend
            && vend <= end;
        // An overflowing `vstart + size` is an error: the full check says which.
        if plain && vstart.checked_add(size).is_some() {
            return Ok(Fit {
                size,
                align,
                phase: 0,
                nocross: 0,
                vstart,
                vend,
            });
        }
        self.validate_full(start, end, page_size)
    }

    /// [`validate`](Self::validate) for every request: the error paths and
    /// the vmem constraints.
    #[cold]
    #[inline(never)]
    fn validate_full(&self, start: u64, end: u64, page_size: u64) -> Result<Fit, VmapError> {
        let mask = page_size - 1;
        let (size, align, phase, nocross) = (self.size, self.align, self.phase, self.nocross);
        if size == 0 {
            return Err(VmapError::ZeroSize);
        }
        let page = |what, value: u64| {
            if value & mask != 0 {
                Err(VmapError::NotPageMultiple {
                    what,
                    value,
                    page_size,
                })
            } else {
                Ok(())
            }
        };
        page("size", size)?;
        if !align.is_power_of_two() {
            return Err(VmapError::AlignNotPowerOfTwo { align });
        }
        page("align", align)?;
        page("phase", phase)?;
        if phase >= align {
            return Err(VmapError::PhaseTooLarge { phase, align });
        }
        if nocross != 0 {
            if !nocross.is_power_of_two() {
                return Err(VmapError::NocrossNotPowerOfTwo { nocross });
            }
            if nocross < size {
                return Err(VmapError::NocrossTooSmall { nocross, size });
            }
        }
        let (vstart, vend) = match self.exact {
            Some(a) => {
                let a = a.as_u64();
                page("addr", a)?;
                let e = a
                    .checked_add(size)
                    .ok_or(VmapError::Overflow { vstart: a, size })?;
                (a, e)
            }
            None => (self.vstart.as_u64(), self.vend.as_u64()),
        };
        page("vstart", vstart)?;
        page("vend", vend)?;
        if vstart >= vend {
            return Err(VmapError::EmptyRange { vstart, vend });
        }
        if vstart.checked_add(size).is_none() {
            return Err(VmapError::Overflow { vstart, size });
        }
        if vstart < start || vend > end {
            return Err(VmapError::OutsideSpace {
                vstart,
                vend,
                start,
                end,
            });
        }
        Ok(Fit {
            size,
            align,
            phase,
            nocross,
            vstart,
            vend,
        })
    }
}

/// A validated request, in raw `u64`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    pub(crate) size: u64,
    pub(crate) align: u64,
    pub(crate) phase: u64,
    pub(crate) nocross: u64,
    pub(crate) vstart: u64,
    pub(crate) vend: u64,
}

impl Fit {
    /// Lowest `a >= x` with `a % align == phase`; `None` on overflow.
    #[inline]
    fn aligned(&self, x: u64) -> Option<u64> {
        if x <= self.phase {
            return Some(self.phase);
        }
        let k = (x - self.phase).checked_add(self.align - 1)? & !(self.align - 1);
        k.checked_add(self.phase)
    }

    /// Lowest `a >= x` that satisfies alignment, phase and `nocross`; `None`
    /// if no such address exists in the address width (overflow, or a
    /// `nocross` window that can never hold the area at this phase).
    #[inline]
    pub(crate) fn candidate(&self, x: u64) -> Option<u64> {
        let a = self.aligned(x)?;
        if self.nocross == 0 || !self.crosses(a)? {
            return Some(a);
        }
        // Move to the next boundary; the first candidate there leaves the
        // most room in its window, so if it still crosses, every one does.
        let b = (a | (self.nocross - 1)).checked_add(1)?;
        let a = self.aligned(b)?;
        if self.crosses(a)? { None } else { Some(a) }
    }

    #[inline]
    fn crosses(&self, a: u64) -> Option<bool> {
        let last = a.checked_add(self.size - 1)?;
        Some((a ^ last) & !(self.nocross - 1) != 0)
    }

    /// Lowest fit inside the free gap `[gs, ge)`, clipped to `[vstart, vend)`.
    #[inline]
    pub(crate) fn fit_in(&self, gs: u64, ge: u64) -> Option<u64> {
        let lo = if gs > self.vstart { gs } else { self.vstart };
        let hi = if ge < self.vend { ge } else { self.vend };
        if lo >= hi || hi - lo < self.size {
            return None;
        }
        let a = self.candidate(lo)?;
        match a.checked_add(self.size) {
            Some(e) if e <= hi => Some(a),
            _ => None,
        }
    }

    /// Whether `a` itself satisfies the constraints (for pool reuse).
    #[inline]
    pub(crate) fn accepts(&self, a: u64) -> bool {
        if self.phase == 0 && self.nocross == 0 {
            // Plain alignment: `candidate(a) == Some(a)` says no more.
            return a >= self.vstart
                && a & (self.align - 1) == 0
                && a.checked_add(self.size).is_some_and(|e| e <= self.vend);
        }
        a >= self.vstart
            && a.checked_add(self.size).is_some_and(|e| e <= self.vend)
            && self.candidate(a) == Some(a)
    }

    /// The error for "searched and found nothing".
    pub(crate) fn no_space(&self) -> VmapError {
        VmapError::NoSpace {
            size: self.size,
            align: self.align,
            vstart: self.vstart,
            vend: self.vend,
        }
    }
}

#[cfg(all(test, not(kmm_loom)))]
mod tests {
    use super::*;

    const P: u64 = 0x1000;

    fn fit(size: u64, align: u64, phase: u64, nocross: u64) -> Fit {
        Fit {
            size,
            align,
            phase,
            nocross,
            vstart: 0,
            vend: u64::MAX,
        }
    }

    #[test]
    fn candidate_alignment_and_phase() {
        let f = fit(P, 4 * P, P, 0);
        assert_eq!(f.candidate(0), Some(P));
        assert_eq!(f.candidate(P), Some(P));
        assert_eq!(f.candidate(2 * P), Some(5 * P));
        assert_eq!(f.candidate(u64::MAX - P), None);
    }

    #[test]
    fn candidate_nocross() {
        let f = fit(2 * P, P, 0, 4 * P);
        assert_eq!(f.candidate(3 * P), Some(4 * P));
        assert_eq!(f.candidate(2 * P), Some(2 * P));
        // phase 3 pages, size 2 pages, window 4 pages: never fits.
        let g = fit(2 * P, 4 * P, 3 * P, 4 * P);
        assert_eq!(g.candidate(0), None);
    }

    /// The inline fast paths (`validate`'s plain request, `accepts`'s plain
    /// alignment) answer exactly as the general code on a grid of requests,
    /// bad ones included.
    #[test]
    #[cfg_attr(miri, ignore)] // ~150k checks: arithmetic only, no unsafe
    fn fast_paths_agree_with_full_checks() {
        let (start, end) = (16 * P, 64 * P);
        let vals = [
            0,
            1,
            P,
            2 * P,
            3 * P,
            4 * P,
            16 * P,
            17 * P,
            63 * P,
            64 * P,
            80 * P,
        ];
        let mut plain = 0;
        for size in [0, 1, P, 2 * P, 3 * P, 48 * P, !(P - 1)] {
            for align in [0, 1, P, 2 * P, 3 * P, 8 * P] {
                for (vs, ve) in vals.iter().flat_map(|&a| vals.iter().map(move |&b| (a, b))) {
                    for (phase, nocross) in [(0, 0), (P, 0), (0, 64 * P)] {
                        let r =
                            AllocRequest::new(size, align, VirtAddr::new(vs), VirtAddr::new(ve))
                                .phase(phase)
                                .nocross(nocross);
                        let fast = r.validate(start, end, P);
                        assert_eq!(fast, r.validate_full(start, end, P), "{r:?}");
                        let Ok(f) = fast else { continue };
                        plain += usize::from(phase == 0 && nocross == 0);
                        for a in (0..70).map(|k| k * P).chain([!(P - 1)]) {
                            let general = a >= f.vstart
                                && a.checked_add(f.size).is_some_and(|e| e <= f.vend)
                                && f.candidate(a) == Some(a);
                            assert_eq!(f.accepts(a), general, "{r:?} at {a:#x}");
                        }
                    }
                }
            }
        }
        assert!(plain > 50, "the grid reaches the fast path: {plain}");
        let exact = AllocRequest::exact(VirtAddr::new(20 * P), P, P);
        assert_eq!(
            exact.validate(start, end, P),
            exact.validate_full(start, end, P)
        );
    }

    #[test]
    fn fit_in_clips() {
        let mut f = fit(2 * P, 2 * P, 0, 0);
        f.vstart = 3 * P;
        assert_eq!(f.fit_in(0, 6 * P), Some(4 * P));
        assert_eq!(f.fit_in(0, 5 * P), None);
        assert!(f.accepts(4 * P));
        assert!(!f.accepts(5 * P));
    }
}

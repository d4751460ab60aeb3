//! Frees that do not go to the CPU freelist: the object is not in the
//! freeing CPU's current slab (a remote free, or a free into a partial or
//! full slab). They go straight to the slab's own freelist with a slab-level
//! DW-CAS on `(freelist, counters)` (`__slab_free`); a frozen slab just
//! collects them for its CPU, an unfrozen one may move between lists. A
//! free that makes a full slab partial may instead freeze it for the
//! freeing CPU in the same CAS (the tid front then puts it on that CPU's
//! partial list, `put_cpu_partial`), so it takes no node lock.

use super::Slabs;
use crate::cpu_local::CpuLocal;
use crate::error::FreeError;
use crate::freelist::{end_token, walk};
use crate::page_source::PageSource;
use crate::slab::{Counters, Slab};
use crate::stats::StatItem;
use arch_api::sync::RawMutex;
use arch_api::{DoubleWord, DwCas};
use core::sync::atomic::Ordering;

/// What one try of `__slab_free`'s CAS came to.
enum Attempt {
    /// Pushed: the slab's frozen bit, its freelist before, objects in use after.
    Done {
        frozen: bool,
        prior: u64,
        inuse: usize,
    },
    /// The CAS lost a race: try again.
    Retry,
    /// The slab may change lists: redo under the node lock.
    NeedsLock,
    /// The chain's tail is not known ([`NO_TAIL`]) and the slab's freelist
    /// is not empty, so the chain cannot become it: find the tail.
    NeedsTail,
    /// The slab was full and on no list: the free made it partial and froze
    /// it for the freeing CPU, whose partial list the caller puts it on.
    Froze,
}

/// How [`free_attempt`](Slabs::free_attempt) may treat a slab that would
/// change lists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Without the node lock: answer `NeedsLock`.
    Unlocked,
    /// Without the node lock, but a full slab is frozen for the caller's
    /// CPU (`Froze`); an emptied one still needs the lock.
    Freezing,
    /// Under the node lock: push; the caller moves the slab.
    Locked,
}

/// A chain's tail that is not known: the chain ends in its slab's end
/// token (no object lies at address 0).
const NO_TAIL: usize = 0;

/// What `__slab_free` pushes: the chain `head..=tail` of `cnt` linked
/// objects of slab `x` (`tail` may be [`NO_TAIL`] for a chain that ends in
/// the slab's end token); `single`: one object from a caller, whose double
/// free is reported.
#[derive(Clone, Copy)]
struct Chain {
    x: *mut Slab,
    head: usize,
    tail: usize,
    cnt: usize,
    single: bool,
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Slabs<P, C, D, R> {
    /// A single-object free that missed the CPU slab: ownership check (the
    /// slab header's magic; a line the CAS touches anyway), then
    /// `__slab_free`. In a cache with CPU partial lists, a full slab the
    /// free makes partial is frozen instead of listed under the node lock,
    /// and returned: the caller owes it a place on its CPU's partial list
    /// (`put_cpu_partial`; Linux's `__slab_free` since 3.2).
    pub(crate) fn free_to_slab(&self, p: usize) -> Result<Option<*mut Slab>, FreeError> {
        #[cfg(not(feature = "debug"))]
        // SAFETY: the `free` contract: `p` is in mapped memory.
        unsafe {
            self.check_owner(p)?
        };
        self.slab_free_in(self.single(p), self.freezing())
    }

    /// A chain of `cnt` objects of slab `x` from `head`, that a CPU linked
    /// while freeing them (its detached freelist, whose slab was checked
    /// when the chain was started), given back to `x` as
    /// [`free_to_slab`](Self::free_to_slab) gives one object: the slab if
    /// the chain made it partial and froze it for the caller's CPU.
    ///
    /// The chain ends in `x`'s end token and its tail is not known: while
    /// `x` has no free objects the chain simply becomes its freelist (a
    /// run of frees into a full slab, the common case), and only otherwise
    /// is it walked to find the tail.
    pub(crate) fn free_detached_chain(
        &self,
        x: *mut Slab,
        head: usize,
        cnt: usize,
    ) -> Result<Option<*mut Slab>, FreeError> {
        let chain = Chain {
            x,
            head,
            tail: NO_TAIL,
            cnt,
            single: false,
        };
        self.slab_free_in(chain, self.freezing())
    }

    /// The tail of chain `c`, found by walking it; a chain that is
    /// corrupt or not `c.cnt` long (a double free linked it into a loop)
    /// is an error.
    #[cold]
    fn find_tail(&self, c: Chain) -> Result<usize, FreeError> {
        // SAFETY: the chain is the caller's (a detached freelist taken
        // over), its head an object of the live slab `c.x`.
        match unsafe { walk(&self.codec, &self.geo, c.head as u64) } {
            Some((tail, n)) if n == c.cnt => Ok(tail),
            _ => Err(FreeError::DoubleFree { ptr: c.head }),
        }
    }

    /// How a free from a CPU treats a full slab it makes partial: frozen
    /// for that CPU where CPUs keep partial slabs, else onto the node list.
    #[inline(always)]
    fn freezing(&self) -> Mode {
        if self.cpu_partial > 0 {
            Mode::Freezing
        } else {
            Mode::Unlocked
        }
    }

    /// The common single-object free that missed the CPU slab, in one try
    /// and inline (the fast path's `FastFree::ToSlab`): the ownership
    /// check of [`free_to_slab`](Self::free_to_slab), then one attempt of
    /// its CAS for a slab that stays where it is (frozen for a CPU, or
    /// partial and not emptied). `false`, with the slab untouched, for
    /// everything else (a foreign pointer, a suspected double free, a slab
    /// that would change lists, a lost CAS): the caller then takes
    /// `free_to_slab`, which starts over and reports any error. A remote
    /// free is the common case of a producer/consumer workload; through
    /// `free_to_slab` it paid two out-of-line calls and spilled its chain
    /// to the stack (191 instructions per remote free against 121 now,
    /// BENCHMARKS.md session 18).
    #[inline(always)]
    #[cfg_attr(feature = "debug", allow(dead_code))]
    pub(crate) fn try_free_to_slab(&self, p: usize) -> bool {
        // SAFETY: the `free` contract: `p` is in mapped memory.
        if unsafe { self.check_owner(p) }.is_err() {
            return false;
        }
        let mode = if crate::loom_hooks::remote_try_ignores_lists() {
            // Broken variant: push as the locked path does, moving nothing.
            Mode::Locked
        } else {
            Mode::Unlocked
        };
        match self.free_attempt(self.single(p), mode) {
            Ok(Attempt::Done { frozen, .. }) => {
                self.count_pushed(frozen);
                true
            }
            _ => false,
        }
    }

    /// Whether `p` heads its slab's own freelist: freeing it again is a
    /// double free.
    ///
    /// `p` is an object of a live slab of this cache.
    #[inline(always)]
    pub(crate) fn heads_slab_freelist(&self, p: usize) -> bool {
        let x = self.geo.base_of(p) as *const Slab;
        // SAFETY: `x` is a live slab of this cache (the caller's check).
        unsafe { (*x).state.load_lo(Ordering::Acquire) == p as u64 }
    }

    /// The counters of a push onto a slab's freelist: `free_slowpath`, and
    /// `free_remote` when a CPU held the slab frozen.
    #[inline(always)]
    fn count_pushed(&self, frozen: bool) {
        self.stat_here(StatItem::FreeSlowpath);
        if frozen {
            self.stat_here(StatItem::FreeRemote);
        }
    }

    /// Object `p` of this cache as a chain of one, freed by a caller (its
    /// double free is reported).
    #[inline(always)]
    fn single(&self, p: usize) -> Chain {
        Chain {
            x: self.geo.base_of(p) as *mut Slab,
            head: p,
            tail: p,
            cnt: 1,
            single: true,
        }
    }

    /// Frees one object the cache itself held (a sheaf's) straight to its
    /// slab: no ownership check, and a double free is not reported.
    pub(crate) fn free_object(&self, o: usize) {
        let _ = self.slab_free_chain(self.geo.base_of(o) as *mut Slab, o, o, 1, false);
    }

    /// `__slab_free`: pushes the chain `head..=tail` (`cnt` objects of slab
    /// `x`, linked) on the slab's freelist. The common case (the slab stays
    /// on its list) is one DW-CAS; a free that may move the slab between
    /// lists (it becomes empty, or was full) is redone under the node lock
    /// by [`slab_free_locked`](Self::slab_free_locked), out of line so that
    /// this loop stays small.
    pub(crate) fn slab_free_chain(
        &self,
        x: *mut Slab,
        head: usize,
        tail: usize,
        cnt: usize,
        single: bool,
    ) -> Result<(), FreeError> {
        let chain = Chain {
            x,
            head,
            tail,
            cnt,
            single,
        };
        self.slab_free_in(chain, Mode::Unlocked).map(|_| ())
    }

    /// The loop of [`slab_free_chain`](Self::slab_free_chain) in `mode`
    /// (`Unlocked` or `Freezing`): the slab if the free froze it.
    #[inline(always)]
    fn slab_free_in(&self, mut c: Chain, mode: Mode) -> Result<Option<*mut Slab>, FreeError> {
        loop {
            match self.free_attempt(c, mode)? {
                Attempt::Done { frozen, .. } => {
                    self.count_pushed(frozen);
                    return Ok(None);
                }
                Attempt::Froze => {
                    self.stat_here(StatItem::FreeSlowpath);
                    return Ok(Some(c.x));
                }
                Attempt::NeedsLock => {
                    if c.tail == NO_TAIL {
                        c.tail = self.find_tail(c)?;
                    }
                    return self.slab_free_locked(c).map(|()| None);
                }
                Attempt::NeedsTail => c.tail = self.find_tail(c)?,
                Attempt::Retry => self.stat_here(StatItem::CmpxchgDoubleFail),
            }
        }
    }

    /// [`slab_free_chain`](Self::slab_free_chain) under the node lock: after
    /// the CAS a slab that became empty is discarded (beyond
    /// `min_partial`), one that was full goes on the partial list.
    #[cold]
    #[inline(never)]
    fn slab_free_locked(&self, c: Chain) -> Result<(), FreeError> {
        let x = c.x;
        let end = end_token(x as usize);
        let mut n = self.node.lock();
        let (frozen, prior, inuse) = loop {
            match self.free_attempt(c, Mode::Locked)? {
                Attempt::Done {
                    frozen,
                    prior,
                    inuse,
                } => break (frozen, prior, inuse),
                Attempt::NeedsLock | Attempt::Froze | Attempt::NeedsTail => {
                    unreachable!(
                        "free_attempt asks for the lock, or freezes, only unlocked; \
                         the tail is known here"
                    )
                }
                Attempt::Retry => self.stat_here(StatItem::CmpxchgDoubleFail),
            }
        };
        self.count_pushed(frozen);
        if frozen {
            return Ok(());
        }
        if inuse == 0 && n.nr >= self.min_partial {
            // SAFETY: under the node lock.
            if unsafe { n.contains(x) } {
                // SAFETY: under the node lock; x is on the list.
                unsafe { n.remove(x) };
            }
            drop(n);
            self.discard_slab(x);
        } else if prior == end {
            // Was full and unfrozen (on no list): now partial.
            // SAFETY: under the node lock; x is on no list.
            unsafe { n.add(x) };
            self.stat_here(StatItem::FreeAddPartial);
        }
        Ok(())
    }

    /// One try of `__slab_free`'s CAS: the double-free checks, then the
    /// chain pushed with the counters updated. Without the node lock, a
    /// free that may move an unfrozen slab between lists is not tried but
    /// answered `NeedsLock`, except, `Freezing`, a free into a full slab:
    /// it is pushed with the frozen bit set (`Froze`), so the slab goes to
    /// the caller's CPU instead of a node list.
    #[inline(always)]
    fn free_attempt(&self, chain: Chain, mode: Mode) -> Result<Attempt, FreeError> {
        let Chain {
            x,
            head,
            tail,
            cnt,
            single,
        } = chain;
        // SAFETY: `x` is a live slab of this cache (checked by the caller).
        let st = unsafe { &(*x).state };
        let hi = st.load_hi(Ordering::Acquire);
        let lo = st.load_lo(Ordering::Acquire);
        if single && lo == head as u64 {
            return Err(FreeError::DoubleFree { ptr: head });
        }
        let c = Counters(hi);
        let Some(inuse) = c.inuse().checked_sub(cnt) else {
            // More frees than objects out: a double free.
            return Err(FreeError::DoubleFree { ptr: head });
        };
        let frozen = c.frozen();
        let was_full = lo == end_token(x as usize);
        let froze = mode == Mode::Freezing && !frozen && was_full;
        if mode != Mode::Locked && !frozen && !froze && (inuse == 0 || was_full) {
            return Ok(Attempt::NeedsLock);
        }
        if tail != NO_TAIL {
            // SAFETY: `tail` is an object being freed by us.
            unsafe { self.codec.set(tail, lo) };
        } else if !was_full {
            return Ok(Attempt::NeedsTail);
        }
        if D::compare_exchange(
            st,
            DoubleWord::new(lo, hi),
            DoubleWord::new(head as u64, c.next(inuse, frozen || froze).0),
        )
        .is_ok()
        {
            if froze {
                return Ok(Attempt::Froze);
            }
            return Ok(Attempt::Done {
                frozen,
                prior: lo,
                inuse,
            });
        }
        Ok(Attempt::Retry)
    }

    /// `get_freelist` for a slab this CPU holds frozen: takes its whole
    /// freelist (remote frees), leaving it frozen with every object counted
    /// in use. Returns the end token when there was nothing.
    pub(crate) fn take_freelist_frozen(&self, x: *mut Slab) -> u64 {
        // SAFETY: `x` is a live slab frozen by the caller's CPU.
        let st = unsafe { &(*x).state };
        let end = end_token(x as usize);
        loop {
            let hi = st.load_hi(Ordering::Acquire);
            let lo = st.load_lo(Ordering::Acquire);
            if lo == end {
                return end;
            }
            let c = Counters(hi);
            let new = DoubleWord::new(end, c.next(c.objects(), true).0);
            if D::compare_exchange(st, DoubleWord::new(lo, hi), new).is_ok() {
                return lo;
            }
            self.stat_here(StatItem::CmpxchgDoubleFail);
        }
    }
}

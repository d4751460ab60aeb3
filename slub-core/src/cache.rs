//! `kmem_cache`: one object size, its slabs, its per-CPU state and its node.
//!
//! Start here: [`KmemCache::new`], [`KmemCache::alloc`], [`KmemCache::free`],
//! [`KmemCache::shrink`], [`KmemCache::destroy`]. The front (tid fast path or
//! sheaves) is chosen per cache with [`CacheFlags::SHEAVES`]; both share the
//! slab layer (`partial.rs`, `remote.rs`).

use crate::cpu_local::CpuLocal;
use crate::error::{AllocError, CacheError, DestroyError, FreeError};
use crate::fast_tid::{CpuSlab, FastFree};
use crate::freelist::Codec;
use crate::page_source::PageSource;
use crate::partial::Node;
use crate::sheaves::Barn;
use crate::slab::{Geometry, SLAB_MAGIC, Slab};
use arch_api::DwCas;
use arch_api::sync::{DefaultRawMutex, RawMutex};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

bitflags::bitflags! {
    /// Per-cache options (Linux's `SLAB_*` flags that matter here). The
    /// empty set is the default: the tid front with ordered freelists.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct CacheFlags: u32 {
        /// Use the sheaves front instead of the tid fast path.
        const SHEAVES = 1;
        /// Randomise the freelist order of new slabs
        /// (`CONFIG_SLAB_FREELIST_RANDOM`).
        const RANDOM_FREELIST = 2;
    }
}

/// Tunables, with Linux's defaults where it has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Empty slabs kept on the node partial list before returning them
    /// (`min_partial`, Linux: 5..10).
    pub min_partial: usize,
    /// Frozen slabs a CPU keeps on its partial list (`cpu_partial_slabs`).
    pub cpu_partial: usize,
    /// Objects per slab at most (tests use 2–4 to keep loom models small).
    pub max_objects: usize,
    /// Object pointers per sheaf (sheaves front).
    pub sheaf_capacity: usize,
    /// Full sheaves the barn keeps before a free flushes to slabs.
    pub barn_max_full: usize,
    /// Empty sheaves the barn keeps.
    pub barn_max_empty: usize,
    /// Seed mixed into the freelist secret and the shuffle (0: derived from
    /// addresses and a counter).
    pub seed: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            min_partial: 5,
            cpu_partial: 2,
            max_objects: usize::MAX,
            sheaf_capacity: 32,
            barn_max_full: 10,
            barn_max_empty: 20,
            seed: 0,
        }
    }
}

/// A SLUB cache of fixed-size objects (`struct kmem_cache`).
///
/// Generic over the page source `P`, the per-CPU backend `C`, the DW-CAS `D`
/// (default: the target's, see [`crate::DefaultDwCas`]) and the raw lock `R`
/// of the node lists and the barn.
pub struct KmemCache<
    P: PageSource,
    C: CpuLocal,
    D: DwCas = crate::DefaultDwCas,
    R: RawMutex = DefaultRawMutex,
> {
    // Read on every fast-path operation; kept together.
    pub(crate) cpu: NonNull<CpuSlab>,
    pub(crate) geo: Geometry,
    pub(crate) codec: Codec,
    pub(crate) tid_step: u64,
    /// The front and whether the cache is destroyed, in the one byte every
    /// `alloc`/`free` reads first: [`MODE_TID`], [`MODE_SHEAVES`] or
    /// [`MODE_DESTROYED`].
    mode: AtomicU8,
    pub(crate) cpus: C,
    pub(crate) pages: P,
    pub(crate) flags: CacheFlags,
    pub(crate) config: CacheConfig,
    pub(crate) node: Node<R>,
    pub(crate) barn: Barn<R>,
    /// Slabs obtained from the page source and not yet returned.
    pub(crate) nr_slabs: AtomicUsize,
    pub(crate) rng: AtomicU64,
    pub(crate) magic: u64,
    pub(crate) name: &'static str,
    nr_cpus: usize,
    cpu_bytes: usize,
    _cas: PhantomData<D>,
}

// SAFETY: all shared state is behind atomics, DW-CAS cells, the node lock,
// the barn lock or the CpuLocal guard (see each field's users); the raw
// pointers refer to memory the cache owns.
unsafe impl<P: PageSource + Send, C: CpuLocal + Send, D: DwCas, R: RawMutex + Send> Send
    for KmemCache<P, C, D, R>
{
}
// SAFETY: as above.
unsafe impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex + Sync + Send> Sync
    for KmemCache<P, C, D, R>
{
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> core::fmt::Debug for KmemCache<P, C, D, R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KmemCache")
            .field("name", &self.name)
            .field("size", &self.geo.size)
            .field("slot", &self.geo.slot)
            .field("objects", &self.geo.objects)
            .field("slab_bytes", &self.geo.slab_bytes)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

static CACHE_SEQ: AtomicU64 = AtomicU64::new(0);

/// `KmemCache::mode`: a live cache with the sheaves front (0: the front
/// with no atomic instruction gets the shortest dispatch, a zero test).
const MODE_SHEAVES: u8 = 0;
/// `KmemCache::mode`: a live cache with the tid front.
const MODE_TID: u8 = 1;
/// `KmemCache::mode`: destroyed.
const MODE_DESTROYED: u8 = 2;

/// splitmix64: mixes seeds into secrets.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> KmemCache<P, C, D, R> {
    /// `kmem_cache_create`: a cache of `size`-byte objects aligned to `align`
    /// (a power of two; at least 8 is used), with default tunables.
    pub fn new(
        name: &'static str,
        size: usize,
        align: usize,
        flags: CacheFlags,
        pages: P,
        cpus: C,
    ) -> Result<Self, CacheError> {
        Self::with_config(
            name,
            size,
            align,
            flags,
            pages,
            cpus,
            CacheConfig::default(),
        )
    }

    /// As [`new`](Self::new), with explicit tunables.
    pub fn with_config(
        name: &'static str,
        size: usize,
        align: usize,
        flags: CacheFlags,
        pages: P,
        cpus: C,
        config: CacheConfig,
    ) -> Result<Self, CacheError> {
        if !align.is_power_of_two() {
            return Err(CacheError::BadAlign);
        }
        let page = pages.page_size();
        if size == 0 || size > (page << crate::slab::MAX_ORDER) {
            return Err(CacheError::BadSize);
        }
        if align > page << crate::slab::MAX_ORDER {
            return Err(CacheError::BadAlign);
        }
        let align = align.max(8);
        // Normalised once: the sheaves fast path compares against it.
        let config = CacheConfig {
            sheaf_capacity: config.sheaf_capacity.max(1),
            ..config
        };
        let (slot, fp_off) = crate::hardening::layout(size, align);
        let nr_cpus = cpus.nr_cpus().max(1);
        let geo = Geometry::new(
            size,
            slot,
            fp_off,
            align,
            page,
            config.max_objects.max(1),
            crate::slab::min_objects(nr_cpus),
        )
        .ok_or(CacheError::BadSize)?;
        let cpu_bytes = (nr_cpus * core::mem::size_of::<CpuSlab>()).next_multiple_of(page);
        let cpu_mem = pages
            .alloc_pages(cpu_bytes, page)
            .ok_or(CacheError::OutOfMemory)?;
        let cpu = cpu_mem.cast::<CpuSlab>();
        for i in 0..nr_cpus {
            // SAFETY: `cpu_mem` holds `nr_cpus` CpuSlabs (size checked above),
            // is page aligned (so aligned for CpuSlab's 64 bytes) and ours.
            unsafe { CpuSlab::init_in_place(cpu.as_ptr().add(i), i as u64) };
        }
        let seq = CACHE_SEQ.fetch_add(1, Ordering::Relaxed);
        let seed = mix(config.seed ^ mix(cpu_mem.as_ptr() as u64 ^ seq.rotate_left(32)));
        #[cfg(all(feature = "std", not(kmm_loom), not(miri)))]
        let seed = seed
            ^ mix(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64));
        let secret = mix(seed) | 1;
        Ok(Self {
            cpu,
            geo,
            codec: Codec { secret, fp_off },
            tid_step: (nr_cpus as u64).next_power_of_two(),
            mode: AtomicU8::new(if flags.contains(CacheFlags::SHEAVES) {
                MODE_SHEAVES
            } else {
                MODE_TID
            }),
            cpus,
            pages,
            flags,
            config,
            node: Node::new(),
            barn: Barn::new(),
            nr_slabs: AtomicUsize::new(0),
            rng: AtomicU64::new(mix(seed ^ 0x5eed)),
            magic: SLAB_MAGIC ^ secret,
            name,
            nr_cpus,
            cpu_bytes,
            _cas: PhantomData,
        })
    }

    /// Whether [`destroy`](Self::destroy) has succeeded.
    fn is_destroyed(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == MODE_DESTROYED
    }

    /// The cache's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The object size asked for.
    pub fn object_size(&self) -> usize {
        self.geo.size
    }

    /// The stride between objects (size, alignment and debug metadata).
    pub fn slot_size(&self) -> usize {
        self.geo.slot
    }

    /// Objects per slab.
    pub fn objects_per_slab(&self) -> usize {
        self.geo.objects
    }

    /// Bytes per slab (slabs are aligned to this).
    pub fn slab_bytes(&self) -> usize {
        self.geo.slab_bytes
    }

    /// The flags the cache was created with; the front serving it is
    /// `flags().contains(CacheFlags::SHEAVES)` (sheaves) or not (tid).
    pub fn flags(&self) -> CacheFlags {
        self.flags
    }

    /// The tid step: a power of two at least the number of CPUs.
    pub fn tid_step(&self) -> u64 {
        self.tid_step
    }

    /// The per-CPU backend.
    pub fn cpus(&self) -> &C {
        &self.cpus
    }

    /// The page source.
    pub fn pages(&self) -> &P {
        &self.pages
    }

    /// Slabs currently held from the page source.
    pub fn nr_slabs(&self) -> usize {
        self.nr_slabs.load(Ordering::Relaxed)
    }

    /// The `(freelist, tid)` pair of CPU `cpu` (tests and diagnostics).
    pub fn cpu_state(&self, cpu: usize) -> Option<arch_api::DoubleWord> {
        (cpu < self.nr_cpus).then(|| self.cpu_slab(cpu).cell.load())
    }

    #[inline(always)]
    pub(crate) fn cpu_slab(&self, cpu: usize) -> &CpuSlab {
        debug_assert!(cpu < self.nr_cpus);
        // SAFETY: the CpuLocal contract gives ids below `nr_cpus`, and the
        // array holds `nr_cpus` initialised CpuSlabs for the cache's life.
        unsafe { &*self.cpu.as_ptr().add(cpu) }
    }

    /// Number of CPU slots.
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// `kmem_cache_alloc`: one object, or an error (out of memory, a detected
    /// freelist corruption, a destroyed cache). Never panics.
    #[inline(always)]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        // The inlined part is leaf code that only succeeds; everything else
        // (guards, refills, errors, retries) is one out-of-line call, so the
        // fast path needs no stack frame.
        if let Some(p) = self.alloc_fast() {
            return Ok(p);
        }
        let mut err = AllocError::OutOfMemory;
        match self.alloc_slow_into(&mut err) {
            Some(p) => Ok(p),
            None => Err(err),
        }
    }

    /// One try of the front's fast path; `None` sends the caller to the slow
    /// path, which starts over.
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    fn alloc_fast(&self) -> Option<NonNull<u8>> {
        // One byte decides the front and "destroyed".
        let mode = self.mode.load(Ordering::Relaxed);
        let p = if mode == MODE_SHEAVES {
            self.alloc_sheaves_fast()?
        } else if mode == MODE_TID {
            self.alloc_tid_fast()?
        } else {
            return None;
        };
        // SAFETY: objects are inside slab memory, never at address 0.
        Some(unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// Under `debug` every allocation takes the slow path (which checks the
    /// poison).
    #[cfg(feature = "debug")]
    #[inline(always)]
    fn alloc_fast(&self) -> Option<NonNull<u8>> {
        None
    }

    /// [`alloc_slow`](Self::alloc_slow) with the error stored in `err`: the
    /// object comes back in a register and the caller's fast path never
    /// shares a stack slot with this call's result.
    #[inline(never)]
    fn alloc_slow_into(&self, err: &mut AllocError) -> Option<NonNull<u8>> {
        self.alloc_slow().map_err(|e| *err = e).ok()
    }

    /// The whole allocation: fast path (again), slow path and errors.
    #[inline]
    fn alloc_slow(&self) -> Result<NonNull<u8>, AllocError> {
        let p = match self.mode.load(Ordering::Relaxed) {
            MODE_SHEAVES => self.alloc_sheaves()?,
            MODE_TID => self.alloc_tid()?,
            _ => return Err(AllocError::Destroyed),
        };
        #[cfg(feature = "debug")]
        crate::hardening::on_alloc(&self.geo, p)?;
        // SAFETY: objects are inside slab memory, never at address 0.
        Ok(unsafe { NonNull::new_unchecked(p as *mut u8) })
    }

    /// `kmem_cache_free`, checked: refuses (with an error, leaving the object
    /// alone) a pointer that is not at an object boundary of this cache, a
    /// double free of the object at the head of the CPU freelist, and, under
    /// `debug`, any foreign pointer, double free or red-zone overwrite.
    ///
    /// # Safety
    /// `ptr` must not be used after a successful free. Without `debug`, `ptr`
    /// must point into mapped memory, because the header of the naturally
    /// aligned block containing it may be read to check ownership (with
    /// `debug`, and a page source that answers [`PageSource::owns`], foreign
    /// pointers are refused before any read).
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        // As `alloc`: an inlined leaf that only succeeds (or, on the tid
        // front, hands an object of another slab to that slab), then one
        // call.
        let p = ptr.as_ptr() as usize;
        match self.free_fast(p) {
            FastFree::Done => Ok(()),
            FastFree::ToSlab => self.free_to_slab(p),
            // SAFETY: the caller's contract.
            FastFree::Slow => unsafe { self.free_slow_call(ptr) },
        }
    }

    /// One try of the front's fast free, with every check of
    /// [`free_slow`](Self::free_slow) before it frees: [`FastFree::Slow`]
    /// (destroyed, not an object boundary, a suspected double free, a full
    /// sheaf, a lost CAS, …) sends the caller there, which starts over and
    /// reports the error if any.
    #[cfg(not(feature = "debug"))]
    #[inline(always)]
    fn free_fast(&self, p: usize) -> FastFree {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED || !self.geo.is_object_in_own_slab(p) {
            return FastFree::Slow;
        }
        if mode == MODE_SHEAVES {
            self.free_sheaves_fast(p)
        } else {
            self.free_tid_fast(p)
        }
    }

    /// Under `debug` every free takes the slow path (ownership, red zones,
    /// poison).
    #[cfg(feature = "debug")]
    #[inline(always)]
    fn free_fast(&self, p: usize) -> FastFree {
        let _ = p;
        FastFree::Slow
    }

    /// Out-of-line [`free_slow`](Self::free_slow).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_slow_call(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        // SAFETY: the caller's contract.
        unsafe { self.free_slow(ptr) }
    }

    /// The whole free: checks, fast path (again), slow path and errors.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline]
    unsafe fn free_slow(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let p = ptr.as_ptr() as usize;
        let base = self.geo.base_of(p);
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == MODE_DESTROYED {
            return Err(FreeError::Destroyed);
        }
        #[cfg(feature = "debug")]
        {
            // SAFETY: the caller's contract; `owns` is consulted first.
            unsafe { self.check_owner(p)? };
        }
        if !self.geo.is_object(base, p) {
            return Err(FreeError::Misaligned { ptr: p });
        }
        #[cfg(feature = "debug")]
        crate::hardening::on_free(&self.geo, p)?;
        if mode == MODE_SHEAVES {
            self.free_sheaves(p)
        } else {
            self.free_tid(p)
        }
    }

    /// Whether `p` is inside a slab of this cache: the page source does not
    /// disown it and the slab header carries this cache's magic.
    ///
    /// # Safety
    /// If the page source cannot tell ownership, `p`'s naturally aligned
    /// block must be mapped memory.
    pub(crate) unsafe fn check_owner(&self, p: usize) -> Result<(), FreeError> {
        let base = self.geo.base_of(p);
        if p == 0 || self.pages.owns(base) == Some(false) {
            return Err(FreeError::ForeignPointer { ptr: p });
        }
        // SAFETY: the page source owns `base` or the caller vouches that it is
        // mapped; `magic` is a plain field at a fixed offset of the header.
        let magic = unsafe { core::ptr::addr_of!((*(base as *const Slab)).magic).read_volatile() };
        if magic != self.magic {
            return Err(FreeError::ForeignPointer { ptr: p });
        }
        Ok(())
    }

    /// `kmem_cache_shrink`: flushes the calling CPU's slab, partial slabs and
    /// sheaves, then returns every empty slab on the node partial list to the
    /// page source. Returns how many slabs were returned.
    pub fn shrink(&self) -> usize {
        if self.is_destroyed() {
            return 0;
        }
        {
            let (_g, cpu) = self.cpus.pin();
            if self.flags.contains(CacheFlags::SHEAVES) {
                self.flush_cpu_sheaves(cpu);
            }
            self.flush_cpu(cpu);
        }
        self.flush_barn();
        self.discard_empty_partials()
    }

    /// `kmem_cache_destroy`. With objects still allocated it fails with
    /// [`DestroyError::LiveObjects`] naming how many, freeing nothing under
    /// them (the cache stays usable). Otherwise every slab page, the per-CPU
    /// array and the sheaves go back to the page source; later calls fail
    /// with `Destroyed`.
    pub fn destroy(&mut self) -> Result<(), DestroyError> {
        if self.is_destroyed() {
            return Err(DestroyError::AlreadyDestroyed);
        }
        // Exclusive access: no CPU runs on this cache, so every CPU's state
        // can be flushed from here (what Linux does with an IPI per CPU).
        for cpu in 0..self.nr_cpus {
            if self.flags.contains(CacheFlags::SHEAVES) {
                self.flush_cpu_sheaves(cpu);
            }
            self.flush_cpu(cpu);
        }
        self.flush_barn();
        let free = self.node.free_objects();
        let held = self.nr_slabs.load(Ordering::Acquire) * self.geo.objects;
        if held > free {
            return Err(DestroyError::LiveObjects {
                remaining: held - free,
            });
        }
        self.discard_empty_partials();
        let left = self.nr_slabs.load(Ordering::Acquire);
        if left != 0 {
            return Err(DestroyError::LeakedSlabs { slabs: left });
        }
        self.release_sheaf_pool();
        self.mode.store(MODE_DESTROYED, Ordering::Release);
        for i in 0..self.nr_cpus {
            // SAFETY: initialised in `with_config`, dropped once, here.
            unsafe { core::ptr::drop_in_place(self.cpu.as_ptr().add(i)) };
        }
        // SAFETY: allocated in `with_config` with exactly this size and
        // alignment; nothing refers to it any more.
        unsafe {
            self.pages
                .free_pages(self.cpu.cast(), self.cpu_bytes, self.pages.page_size())
        };
        Ok(())
    }

    /// Allocates and initialises a new slab; returns it and its freelist
    /// head (the whole list, which the caller owns: the slab is frozen with
    /// every object counted in use).
    pub(crate) fn new_slab(&self) -> Result<(*mut Slab, u64), AllocError> {
        let g = &self.geo;
        let mem = self
            .pages
            .alloc_pages(g.slab_bytes, g.slab_bytes)
            .ok_or(AllocError::OutOfMemory)?;
        let base = mem.as_ptr() as usize;
        let slab = mem.as_ptr().cast::<Slab>();
        // SAFETY: fresh, exclusively owned, slab_bytes-aligned memory, large
        // enough for the header (the geometry puts objects after it).
        unsafe {
            slab.write(Slab {
                state: arch_api::DwCell::new(arch_api::DoubleWord::new(
                    crate::freelist::end_token(base),
                    crate::slab::Counters::new(g.objects, g.objects, true).0,
                )),
                next: crate::sync::UnsafeCellPtr::null(),
                prev: crate::sync::UnsafeCellPtr::null(),
                magic: self.magic,
                on_partial: core::cell::UnsafeCell::new(false),
            })
        };
        #[cfg(feature = "debug")]
        crate::hardening::init_slab(g, base);
        let head = self.build_freelist(base);
        self.nr_slabs.fetch_add(1, Ordering::AcqRel);
        crate::stat!(self, AllocSlab);
        Ok((slab, head))
    }

    /// Links the objects of a fresh slab, in address order or (with
    /// `RANDOM_FREELIST`) in a random order: a random start and a random
    /// stride coprime with the object count visit every object once.
    fn build_freelist(&self, base: usize) -> u64 {
        let g = &self.geo;
        let n = g.objects;
        let (mut idx, stride) = if self.flags.contains(CacheFlags::RANDOM_FREELIST) && n > 1 {
            let r = mix(self.rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed));
            let mut stride = (r >> 32) as usize % n;
            while stride == 0 || gcd(stride, n) != 1 {
                stride = (stride + 1) % n;
            }
            (r as usize % n, stride)
        } else {
            (0, 1)
        };
        let head = g.object(base, idx);
        let mut cur = head;
        for _ in 1..n {
            idx = (idx + stride) % n;
            let next = g.object(base, idx);
            // SAFETY: `cur` is an object of the fresh slab we own.
            unsafe { self.codec.set(cur, next as u64) };
            cur = next;
        }
        // SAFETY: as above.
        unsafe { self.codec.set(cur, crate::freelist::end_token(base)) };
        head as u64
    }

    /// Returns a slab to the page source (`discard_slab`). The slab must be
    /// empty and on no list.
    pub(crate) fn discard_slab(&self, slab: *mut Slab) {
        // SAFETY: the caller guarantees the slab is empty, unreachable from
        // every list and CPU, so we own it; it was written in `new_slab`.
        unsafe {
            core::ptr::drop_in_place(slab);
            self.pages.free_pages(
                NonNull::new_unchecked(slab.cast()),
                self.geo.slab_bytes,
                self.geo.slab_bytes,
            );
        }
        self.nr_slabs.fetch_sub(1, Ordering::AcqRel);
        crate::stat!(self, FreeSlab);
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<P: PageSource, C: CpuLocal, D: DwCas, R: RawMutex> Drop for KmemCache<P, C, D, R> {
    /// Destroys the cache if that is still possible; with live objects the
    /// slabs are leaked rather than freed under them.
    fn drop(&mut self) {
        if !self.is_destroyed() {
            let _ = self.destroy();
        }
    }
}

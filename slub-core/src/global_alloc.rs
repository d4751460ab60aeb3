//! A `GlobalAlloc` adapter so a kernel (or a hosted program) can make the
//! kmalloc caches its `#[global_allocator]`.
//!
//! The caches are created on first use (a `static` cannot run
//! `KmemCache::new`). The platform's `Mem` must not allocate through the global
//! allocator (use [`crate::SystemPages`] when hosted). A refused free (double
//! free, foreign or misaligned pointer) cannot be returned from `dealloc`,
//! so it aborts with a message naming the pointer and the reason.

use crate::cache::CacheFlags;
use crate::error::FreeError;
use crate::kmalloc::Kmalloc;
use arch_api::Platform;
use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;

/// kmalloc on the platform `K` as the global allocator.
pub struct SlubGlobalAlloc<K: Platform> {
    mem: K::Mem,
    cpus: K::Cpu,
    flags: CacheFlags,
    state: AtomicU8,
    served: AtomicUsize,
    km: UnsafeCell<MaybeUninit<Kmalloc<K>>>,
}

// SAFETY: `km` is written once, by the thread that wins the UNINIT->BUSY
// race, and only read after READY is published with Release (readers load
// it with Acquire); Kmalloc itself is Sync.
unsafe impl<K: Platform> Sync for SlubGlobalAlloc<K>
where
    K::Mem: Send,
    K::Cpu: Send,
    K::Lock: Send + Sync,
{
}

impl<K: Platform> core::fmt::Debug for SlubGlobalAlloc<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SlubGlobalAlloc")
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

impl<K: Platform> SlubGlobalAlloc<K> {
    /// An adapter whose caches will use `mem` and `cpus` (tid front).
    pub const fn new(mem: K::Mem, cpus: K::Cpu) -> Self {
        Self::with_flags(mem, cpus, CacheFlags::empty())
    }

    /// As [`new`](Self::new) with cache flags (e.g. the sheaves front).
    pub const fn with_flags(mem: K::Mem, cpus: K::Cpu, flags: CacheFlags) -> Self {
        Self {
            mem,
            cpus,
            flags,
            state: AtomicU8::new(UNINIT),
            served: AtomicUsize::new(0),
            km: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Allocations served so far (shows the adapter is really in use).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }
}

impl<K: Platform> SlubGlobalAlloc<K>
where
    K::Mem: Clone,
    K::Cpu: Clone,
{
    /// The kmalloc caches, created on first call (`None` if that failed).
    pub fn kmalloc(&self) -> Option<&Kmalloc<K>> {
        if self.state.load(Ordering::Acquire) != READY {
            self.init()?;
        }
        // SAFETY: READY was published after `km` was written.
        Some(unsafe { (*self.km.get()).assume_init_ref() })
    }

    #[cold]
    fn init(&self) -> Option<()> {
        loop {
            match self
                .state
                .compare_exchange(UNINIT, BUSY, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => {
                    let Ok(km) = Kmalloc::new(self.mem.clone(), self.cpus.clone(), self.flags)
                    else {
                        self.state.store(UNINIT, Ordering::Release);
                        return None;
                    };
                    // SAFETY: we won the race, so we are the only writer, and
                    // no reader looks before READY.
                    unsafe { (*self.km.get()).write(km) };
                    self.state.store(READY, Ordering::Release);
                    return Some(());
                }
                Err(READY) => return Some(()),
                Err(_) => core::hint::spin_loop(),
            }
        }
    }
}

/// Aborts with a message: a panic that cannot unwind (it starts in an
/// `extern "C"` function), so the panic handler prints it and the process
/// (or kernel) stops, with or without `panic = "abort"`.
#[cold]
#[inline(never)]
extern "C" fn abort_bad_free(ptr: usize, size: usize, kind: u8) -> ! {
    let why = match kind {
        0 => "null pointer",
        1 => "foreign pointer (not from this allocator)",
        2 => "misaligned pointer (not an object boundary)",
        3 => "double free",
        4 => "red zone overwritten (buffer overflow)",
        5 => "cache destroyed",
        _ => "deferred-free backlog",
    };
    panic!("slub-core: invalid dealloc of {ptr:#x} (size {size}): {why}; aborting");
}

fn kind(e: FreeError) -> u8 {
    match e {
        FreeError::Null => 0,
        FreeError::ForeignPointer { .. } => 1,
        FreeError::Misaligned { .. } => 2,
        FreeError::DoubleFree { .. } => 3,
        FreeError::RedZoneOverwritten { .. } => 4,
        FreeError::Destroyed => 5,
        // Not a `dealloc` error (only `free_deferred` returns it).
        FreeError::DeferredBacklog { .. } => 6,
    }
}

// SAFETY: `alloc` returns blocks of at least `layout.size()` bytes aligned to
// `layout.align()` (class objects are naturally aligned to the power-of-two
// class, which is at least the size and the alignment; large blocks are
// page-aligned or more) or null; `dealloc` only accepts what `alloc` gave
// (and aborts on anything else rather than corrupt memory).
unsafe impl<K: Platform> GlobalAlloc for SlubGlobalAlloc<K>
where
    K::Mem: Clone,
    K::Cpu: Clone,
{
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(km) = self.kmalloc() else {
            return null_mut();
        };
        match km.alloc(layout) {
            Ok(p) => {
                #[cfg(feature = "stats")]
                self.served.fetch_add(1, Ordering::Relaxed);
                #[cfg(not(feature = "stats"))]
                {
                    // A cheap "in use" marker without an RMW on every call.
                    if self.served.load(Ordering::Relaxed) == 0 {
                        self.served.store(1, Ordering::Relaxed);
                    }
                }
                p.as_ptr()
            }
            Err(_) => null_mut(),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(p) = NonNull::new(ptr) else {
            abort_bad_free(0, layout.size(), 0);
        };
        let Some(km) = self.kmalloc() else {
            abort_bad_free(ptr as usize, layout.size(), 1);
        };
        // SAFETY: GlobalAlloc's contract: `ptr` came from `alloc` with `layout`.
        if let Err(e) = unsafe { km.free(p, layout) } {
            abort_bad_free(ptr as usize, layout.size(), kind(e));
        }
    }
}

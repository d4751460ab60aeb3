//! The C allocation interface (`#[unsafe(no_mangle)]`, so a preloaded copy
//! interposes on libc's). Not exported from this crate's own unit tests.

use crate::region::{self, LARGE, PAGE};
use crate::{REGION, boot, die, kmalloc, kmalloc_ready};
use core::ffi::c_void;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::Ordering;
use slub_core::{
    FreeError, KMALLOC_MAX_CACHE_SIZE, KMALLOC_MIN_SIZE, NR_KMALLOC_CLASSES, kmalloc_index,
};

/// Largest block served from the region's page blocks; above, `mmap`.
const REGION_MAX: usize = 1 << 20;
/// `malloc`'s alignment for any block of 16 bytes or more.
const MIN_ALIGN: usize = 16;

/// The alignment `malloc(size)` owes: 16, or less for a block too small to
/// hold anything that needs 16.
#[inline(always)]
fn natural_align(size: usize) -> usize {
    if size >= MIN_ALIGN {
        MIN_ALIGN
    } else {
        size.next_power_of_two()
    }
}

fn set_enomem() {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
}

/// `size` bytes aligned to `align` (a power of two), or null (errno set).
///
/// The inlined part is the class's per-CPU fast path and nothing else, so
/// `malloc` needs no stack frame; everything else is one tail call.
#[inline(always)]
pub(crate) fn alloc(size: usize, align: usize) -> *mut u8 {
    if let Some(km) = crate::kmalloc_if_ready()
        && let Some(i) = kmalloc_index(size, align)
    {
        if let Some(p) = km.try_alloc_class(i) {
            return p.as_ptr();
        }
        return alloc_class_slow(i);
    }
    alloc_slow(size, align)
}

/// Class `i`'s whole allocation (the caches are set up): the tid front's
/// fast path, a refill, an error (`extern "C"` as [`alloc_slow`]).
#[inline(never)]
extern "C" fn alloc_class_slow(i: usize) -> *mut u8 {
    // SAFETY: called after `kmalloc_if_ready` answered.
    let km = unsafe { kmalloc_ready() };
    match km.alloc_class(i) {
        Ok(p) => p.as_ptr(),
        Err(_) => {
            set_enomem();
            null_mut()
        }
    }
}

/// The whole `malloc`: set-up, the slow paths, large blocks, errors.
/// `extern "C"` (so a panic aborts here): the fast path's call then needs
/// no unwind landing pad and is a tail call.
#[inline(never)]
extern "C" fn alloc_slow(size: usize, align: usize) -> *mut u8 {
    let Some(km) = kmalloc() else {
        let p = boot::alloc(size, align);
        if p.is_null() {
            set_enomem();
        }
        return p;
    };
    if let Some(i) = kmalloc_index(size, align) {
        return match km.alloc_class(i) {
            Ok(p) => p.as_ptr(),
            Err(_) => {
                set_enomem();
                null_mut()
            }
        };
    }
    alloc_large(size, align)
}

#[inline(never)]
fn alloc_large(size: usize, align: usize) -> *mut u8 {
    let Some(bytes) = size.max(1).checked_next_multiple_of(PAGE) else {
        set_enomem();
        return null_mut();
    };
    let align = align.max(PAGE);
    if bytes <= REGION_MAX {
        let p = REGION.alloc_block(bytes, align, region::Kind::Large);
        if !p.is_null() {
            if let Some(e) = REGION.entry(p as usize) {
                e.store(LARGE | (bytes / PAGE) as u32, Ordering::Relaxed);
            }
            return p;
        }
    }
    let p = region::huge_alloc(&REGION, bytes, align);
    if p.is_null() {
        set_enomem();
    }
    p
}

/// What `p` is: its usable size, or `None` if it is none of ours.
fn usable(p: usize) -> Option<usize> {
    if let Some(n) = boot::size_of(p) {
        return Some(n);
    }
    if let Some(e) = REGION.entry(p) {
        let v = e.load(Ordering::Relaxed);
        return match v {
            0 => None,
            v if v & LARGE != 0 => Some((v & !LARGE) as usize * PAGE),
            v => Some(KMALLOC_MIN_SIZE << (v - 1)),
        };
    }
    // SAFETY: a pointer `malloc` returned (the caller's contract); a
    // page-aligned one has its header page mapped before it.
    unsafe { region::huge_header(p) }.map(|(_, _, bytes)| bytes)
}

/// `free`: as [`alloc`], the class's fast path inlined and the rest one
/// tail call.
#[inline(always)]
fn dealloc(p: *mut u8) {
    let a = p as usize;
    // 0 (outside the region, a null pointer included) and large blocks
    // wrap to at least `NR_KMALLOC_CLASSES`: one test for "a slab object".
    let i = (REGION.entry_value(a) as usize).wrapping_sub(1);
    if i < NR_KMALLOC_CLASSES {
        // SAFETY: inside the region, so not null.
        let ptr = unsafe { NonNull::new_unchecked(p) };
        // SAFETY: as in `dealloc_slow`.
        let km = unsafe { kmalloc_ready() };
        // SAFETY: as in `dealloc_slow`.
        if unsafe { km.try_free_class(i, ptr) } {
            return;
        }
    }
    dealloc_slow(p)
}

/// The whole `free`: the slow paths, large and foreign blocks, errors
/// (`extern "C"` as [`alloc_slow`]).
#[inline(never)]
extern "C" fn dealloc_slow(p: *mut u8) {
    let Some(ptr) = NonNull::new(p) else {
        return;
    };
    let a = p as usize;
    if let Some(e) = REGION.entry(a) {
        let v = e.load(Ordering::Relaxed);
        if v != 0 && v & LARGE == 0 {
            // SAFETY: a class entry is written only for a new slab of the
            // caches, so after they were set up, and this free is ordered
            // after the `malloc` that took `p` from that slab (so no READY
            // check here: one load and branch less).
            let km = unsafe { kmalloc_ready() };
            // SAFETY: the table says `p` was handed out by class `v - 1`;
            // the cache checks the rest (its slab header is mapped: region).
            if let Err(err) = unsafe { km.free_class(v as usize - 1, ptr) } {
                free_error(err, a);
            }
            return;
        }
        dealloc_large(e, v, a);
        return;
    }
    dealloc_other(a);
}

#[cold]
#[inline(never)]
fn dealloc_large(e: &core::sync::atomic::AtomicU32, v: u32, a: usize) {
    if v == 0 || a % PAGE != 0 {
        die("free(): double free or invalid pointer", a);
    }
    if e.compare_exchange(v, 0, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        die("free(): double free of a large block", a);
    }
    // SAFETY: a live large block of `v & !LARGE` pages, now ours.
    unsafe { REGION.free_block(a as *mut u8, (v & !LARGE) as usize * PAGE) };
}

#[cold]
#[inline(never)]
fn dealloc_other(a: usize) {
    if boot::size_of(a).is_some() {
        return;
    }
    if a % PAGE != 0 {
        die("free(): invalid pointer (not from this allocator)", a);
    }
    // SAFETY: a page-aligned pointer `malloc` returned has its header page.
    match unsafe { region::huge_header(a) } {
        // SAFETY: the header of a live block.
        Some((m, len, _)) => unsafe { region::huge_free(&REGION, a, m, len) },
        None => die("free(): double free or invalid pointer", a),
    }
}

#[cold]
#[inline(never)]
fn free_error(err: FreeError, a: usize) -> ! {
    match err {
        FreeError::DoubleFree { .. } => die("free(): double free detected", a),
        FreeError::Misaligned { .. } => die("free(): invalid pointer (not an object boundary)", a),
        FreeError::ForeignPointer { .. } => die(
            "free(): invalid pointer or slab corruption (bad slab header)",
            a,
        ),
        FreeError::RedZoneOverwritten { .. } => die("free(): red zone overwritten", a),
        _ => die("free(): refused", a),
    }
}

fn realloc_impl(p: *mut u8, n: usize) -> *mut u8 {
    if p.is_null() {
        return alloc(n, MIN_ALIGN);
    }
    let Some(old) = usable(p as usize) else {
        die("realloc(): invalid pointer", p as usize);
    };
    if n == 0 {
        dealloc(p);
        return null_mut();
    }
    // Same class (or a shrink that keeps at least half): in place.
    let fits = if old <= KMALLOC_MAX_CACHE_SIZE {
        kmalloc_index(n, 1).map(|i| KMALLOC_MIN_SIZE << i) == Some(old)
    } else {
        n <= old && n > old / 2
    };
    if fits && boot::size_of(p as usize).is_none() {
        return p;
    }
    let q = alloc(n, MIN_ALIGN);
    if q.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks hold at least `min(old, n)` bytes and are distinct.
    unsafe { core::ptr::copy_nonoverlapping(p, q, old.min(n)) };
    dealloc(p);
    q
}

fn memalign_impl(align: usize, size: usize) -> *mut u8 {
    if !align.is_power_of_two() {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return null_mut();
    }
    alloc(size, align.max(natural_align(size)))
}

#[cfg(not(test))]
mod c {
    use super::*;

    /// `malloc(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn malloc(size: usize) -> *mut c_void {
        // Alignment 1 asks for no more than the class gives: each cache's
        // objects are aligned to its size, a power of two at least `size`
        // and so at least `natural_align(size)`; large blocks are
        // page-aligned; the bootstrap arena aligns to 16. One class
        // computation fewer on every call.
        alloc(size, 1).cast()
    }

    /// `free(3)`.
    ///
    /// # Safety
    /// `p` is null or a live block of this allocator.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn free(p: *mut c_void) {
        dealloc(p.cast())
    }

    /// `calloc(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
        let Some(total) = n.checked_mul(size) else {
            set_enomem();
            return null_mut();
        };
        let p = alloc(total, natural_align(total));
        if !p.is_null() {
            // SAFETY: `p` holds `total` bytes.
            unsafe { core::ptr::write_bytes(p, 0, total) };
        }
        p.cast()
    }

    /// `realloc(3)`.
    ///
    /// # Safety
    /// `p` is null or a live block of this allocator.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
        realloc_impl(p.cast(), n).cast()
    }

    /// `reallocarray(3)`.
    ///
    /// # Safety
    /// As `realloc`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
        match n.checked_mul(size) {
            Some(t) => realloc_impl(p.cast(), t).cast(),
            None => {
                set_enomem();
                null_mut()
            }
        }
    }

    /// `posix_memalign(3)`.
    ///
    /// # Safety
    /// `out` is valid for a pointer write.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn posix_memalign(
        out: *mut *mut c_void,
        align: usize,
        size: usize,
    ) -> i32 {
        if !align.is_power_of_two() || align % core::mem::size_of::<usize>() != 0 {
            return libc::EINVAL;
        }
        let p = alloc(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: the caller's contract.
        unsafe { *out = p.cast() };
        0
    }

    /// `aligned_alloc(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
        memalign_impl(align, size).cast()
    }

    /// `memalign(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
        memalign_impl(align, size).cast()
    }

    /// `valloc(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn valloc(size: usize) -> *mut c_void {
        alloc(size, PAGE).cast()
    }

    /// `pvalloc(3)`.
    #[unsafe(no_mangle)]
    pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
        match size.max(1).checked_next_multiple_of(PAGE) {
            Some(s) => alloc(s, PAGE).cast(),
            None => {
                set_enomem();
                null_mut()
            }
        }
    }

    /// `malloc_usable_size(3)`.
    ///
    /// # Safety
    /// `p` is null or a live block of this allocator.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
        if p.is_null() {
            return 0;
        }
        usable(p as usize).unwrap_or(0)
    }

    /// Bytes the allocator holds now (slab pages, per-CPU arrays, sheaves,
    /// large blocks): with every block freed, its caching overhead. For
    /// benchmarks (`harness malloc-bench`), found with `dlsym`.
    #[unsafe(no_mangle)]
    pub extern "C" fn kmm_malloc_held_bytes() -> usize {
        REGION.in_use()
    }

    /// `malloc_trim(3)`: shrinks every cache (on every CPU) and gives
    /// freed page blocks back to the kernel; 1 if anything was given back.
    #[unsafe(no_mangle)]
    pub extern "C" fn malloc_trim(_pad: usize) -> i32 {
        i32::from(crate::trim() > 0)
    }
}

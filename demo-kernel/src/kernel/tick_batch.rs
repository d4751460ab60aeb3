//! What a timer tick does on either architecture: free the objects this
//! CPU's previous tick allocated (checking they still hold its pattern) and
//! allocate a new batch, through the global allocator (slub-core), on the
//! same caches the interrupted code may be in the middle of using. That is
//! the point: the unguarded tid fast path must survive an interrupt between
//! its loads and its CPU-local DW-CAS, and everything under `pin` must not
//! see the tick at all.

use alloc::alloc::{alloc, dealloc};
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

/// CPU slots (both ports have 8).
const MAX_CPUS: usize = 8;
/// Sizes the tick allocates (kmalloc classes the workloads use too).
const SIZES: [usize; 3] = [16, 64, 256];
/// Objects of each size a CPU's tick keeps until its next tick: freeing
/// and refilling a batch per tick sends the tick through slab refills and
/// partial-list moves, not just the per-CPU freelist, so it meets the
/// interrupted code's slow paths (the ones `pin` must shield) often.
const BATCH: usize = 16;

/// Per CPU, per size, the objects kept from the last tick (touched only
/// by that CPU's tick handler, with interrupts masked).
static STASH: [[[AtomicPtr<u8>; BATCH]; SIZES.len()]; MAX_CPUS] =
    [const { [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; BATCH] }; SIZES.len()] };
        MAX_CPUS];

/// Frees last tick's batch of `size` (checking each still holds its
/// pattern) and allocates a new one; returns (allocations, bad objects).
fn churn(cpu: usize, k: usize, size: usize) -> (u64, u64) {
    let Ok(layout) = Layout::from_size_align(size, 8) else {
        return (0, 0);
    };
    let tag = (cpu as u8) << 4 | k as u8 | 0x80;
    let (mut done, mut bad) = (0, 0);
    for slot in &STASH[cpu][k] {
        let old = slot.swap(core::ptr::null_mut(), Relaxed);
        if !old.is_null() {
            // SAFETY: allocated by this CPU's previous tick with `layout`
            // and filled with `tag`; freed once here.
            unsafe {
                if core::slice::from_raw_parts(old, size)
                    .iter()
                    .any(|&b| b != tag)
                {
                    bad += 1;
                }
                dealloc(old, layout);
            }
        }
        // SAFETY: a non-zero-size layout; filled and kept until the next
        // tick on this CPU.
        let p = unsafe { alloc(layout) };
        if !p.is_null() {
            // SAFETY: a fresh object of `size` bytes.
            unsafe { p.write_bytes(tag, size) };
            slot.store(p, Relaxed);
            done += 1;
        }
    }
    (done, bad)
}

/// The size the tick takes through `kmalloc_nolock` / `kfree_nolock`
/// (issue 19: allocation from any context), beside the normal batches.
const NOLOCK_SIZE: usize = 128;

/// Per CPU, the nolock objects kept from the last tick.
static NOLOCK_STASH: [[AtomicPtr<u8>; BATCH]; MAX_CPUS] =
    [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; BATCH] }; MAX_CPUS];

/// Over all CPUs: nolock allocations, nolock allocations refused (it would
/// have had to wait: another CPU holds a lock it needs), nolock frees the
/// allocator refused.
pub static NOLOCK: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Frees last tick's nolock batch and allocates a new one, never waiting
/// for a lock; returns (allocations, bad objects).
fn churn_nolock(cpu: usize) -> (u64, u64) {
    let Some(km) = super::ALLOC.kmalloc() else {
        return (0, 0);
    };
    let Ok(layout) = Layout::from_size_align(NOLOCK_SIZE, 8) else {
        return (0, 0);
    };
    let tag = (cpu as u8) << 4 | 0x4c;
    let (mut done, mut bad) = (0, 0);
    for slot in &NOLOCK_STASH[cpu] {
        if let Some(old) = NonNull::new(slot.swap(core::ptr::null_mut(), Relaxed)) {
            // SAFETY: allocated by this CPU's previous tick with `layout`
            // and filled with `tag`; freed once here.
            unsafe {
                if core::slice::from_raw_parts(old.as_ptr(), NOLOCK_SIZE)
                    .iter()
                    .any(|&b| b != tag)
                {
                    bad += 1;
                }
                if km.free_nolock(old, layout).is_err() {
                    NOLOCK[2].fetch_add(1, Relaxed);
                    bad += 1;
                }
            }
        }
        match km.alloc_nolock(layout) {
            Ok(p) => {
                // SAFETY: a fresh object of `NOLOCK_SIZE` bytes.
                unsafe { p.as_ptr().write_bytes(tag, NOLOCK_SIZE) };
                slot.store(p.as_ptr(), Relaxed);
                NOLOCK[0].fetch_add(1, Relaxed);
                done += 1;
            }
            Err(_) => {
                NOLOCK[1].fetch_add(1, Relaxed);
            }
        }
    }
    (done, bad)
}

/// One tick's batch on CPU `cpu` (in its interrupt handler, interrupts
/// masked): (allocations, objects of the previous tick found overwritten).
pub fn run(cpu: usize) -> (u64, u64) {
    // And on slab-smp's cache while it runs (`tick_cache.rs`).
    let (mut done, mut bad) = super::tick_cache::run(cpu);
    for (k, size) in SIZES.into_iter().enumerate() {
        let (d, b) = churn(cpu, k, size);
        done += d;
        bad += b;
    }
    let (d, b) = churn_nolock(cpu);
    (done + d, bad + b)
}

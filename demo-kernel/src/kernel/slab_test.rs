//! `slab-test` on bare metal: kmalloc through the `#[global_allocator]`
//! (slub-core's tid fast path with the CPU-local DW-CAS), sizes 8..16384.
//!
//! Besides the cycle counts it checks what an allocator owes its callers:
//! every object aligned, and no two live objects overlapping (each is
//! filled with its own byte and read back once all are allocated).

use super::{check, kprint};
use crate::arch;
use alloc::alloc::{alloc, dealloc};
use alloc::vec::Vec;
use core::alloc::Layout;

/// Objects per size (the harness's `--count`).
const COUNT: usize = 1000;
/// Sizes 8, 16, …, 16384 (the kmalloc classes).
const SIZES: [usize; 12] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/// Runs the test and prints its JSON line.
pub fn run() {
    let mut ptrs: Vec<*mut u8> = Vec::with_capacity(COUNT);
    let mut violations = 0u64;
    kprint!(
        "{{\"workload\":\"slab-test\",\"arch\":\"{}\",\"cpus\":1,\"results\":[{{\"allocator\":\"slub\",\"count\":{COUNT},\"sizes\":[",
        arch::NAME
    );
    for (k, &size) in SIZES.iter().enumerate() {
        let Ok(layout) = Layout::from_size_align(size, 8) else {
            continue;
        };
        ptrs.clear();
        let t0 = arch::cycles();
        for _ in 0..COUNT {
            // SAFETY: the layout has a non-zero size.
            ptrs.push(unsafe { alloc(layout) });
        }
        let t1 = arch::cycles();
        for (i, &p) in ptrs.iter().enumerate() {
            if p.is_null() || (p as usize) % 8 != 0 {
                violations += 1;
                continue;
            }
            // SAFETY: a live allocation of `size` bytes.
            unsafe { p.write_bytes(i as u8, size) };
        }
        for (i, &p) in ptrs.iter().enumerate() {
            if p.is_null() {
                continue;
            }
            // SAFETY: as above; reading what was written.
            let obj = unsafe { core::slice::from_raw_parts(p, size) };
            if obj.iter().any(|&b| b != i as u8) {
                violations += 1;
            }
        }
        let t2 = arch::cycles();
        for &p in &ptrs {
            if !p.is_null() {
                // SAFETY: allocated above with `layout`, freed once.
                unsafe { dealloc(p, layout) };
            }
        }
        let t3 = arch::cycles();
        for _ in 0..COUNT {
            // SAFETY: as above; the pair frees what it allocated.
            unsafe {
                let p = alloc(layout);
                if p.is_null() {
                    violations += 1;
                } else {
                    p.write_volatile(1);
                    dealloc(p, layout);
                }
            }
        }
        let t4 = arch::cycles();
        let n = COUNT as u64;
        kprint!(
            "{}{{\"size\":{size},\"alloc_cycles\":{},\"free_cycles\":{},\"pair_cycles\":{}}}",
            if k == 0 { "" } else { "," },
            (t1 - t0) / n,
            (t3 - t2) / n,
            (t4 - t3) / n,
        );
    }
    kprint!("]}}],\"violations\":{violations}}}\n");
    check(
        violations == 0,
        format_args!("slab-test: {violations} bad or overlapping objects"),
    );
}

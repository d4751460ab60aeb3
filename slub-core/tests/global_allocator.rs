//! This test binary runs with slub-core's kmalloc as its `#[global_allocator]`
//! (pages from `std::alloc::System`, which does not recurse into it).
#![cfg(not(kmm_loom))]

use slub_core::testing::HostedPlatform;
use slub_core::{SlubGlobalAlloc, SystemPages, ThreadCpus};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;

static PAGES: SystemPages = SystemPages::new();

#[global_allocator]
static GLOBAL: SlubGlobalAlloc<HostedPlatform<&SystemPages, ThreadCpus>> =
    SlubGlobalAlloc::new(&PAGES, ThreadCpus::new());

#[test]
fn std_collections_run_on_it() {
    let mut v: Vec<String> = (0..if cfg!(miri) { 100 } else { 10_000 })
        .map(|i| format!("item {i}"))
        .collect();
    v.sort();
    let m: BTreeMap<_, _> = v.iter().enumerate().map(|(i, s)| (s.clone(), i)).collect();
    assert_eq!(m.len(), v.len());
    // Past every kmalloc cache either way; smaller under miri, which
    // interprets each byte's write and read.
    let bytes = if cfg!(miri) { 1 << 16 } else { 1 << 20 };
    let big = vec![7u8; bytes];
    assert_eq!(big.iter().map(|&b| b as usize).sum::<usize>(), 7 * bytes);
    assert!(GLOBAL.served() > 0, "the adapter really served these");
    assert!(PAGES.bytes_in_use() > 0);
}

#[test]
fn threads_allocate_and_free_across_each_other() {
    let n = if cfg!(miri) { 50 } else { 20_000 };
    let (tx, rx) = std::sync::mpsc::channel::<Box<[u64; 4]>>();
    let producer = std::thread::spawn(move || {
        for i in 0..n {
            tx.send(Box::new([i; 4])).unwrap();
        }
    });
    let mut sum = 0;
    for b in rx {
        sum += b[3];
    }
    producer.join().unwrap();
    assert_eq!(sum, (0..n).sum::<u64>());
}

#[test]
fn every_layout_is_aligned() {
    for size in [1usize, 7, 8, 9, 100, 4096, 16384, 16385, 200_000] {
        for align in [1usize, 8, 16, 256, 4096] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { GLOBAL.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0);
            // SAFETY: allocated above with `l`.
            unsafe {
                p.write_bytes(1, size);
                GLOBAL.dealloc(p, l);
            }
        }
    }
}

/// A double free through `dealloc` aborts with a message (checked in a child
/// process, since it kills the process).
#[test]
fn double_free_through_dealloc_aborts_with_a_message() {
    if std::env::var_os("SLUB_DOUBLE_FREE_CHILD").is_some() {
        let l = Layout::new::<u64>();
        // SAFETY: deliberately invalid: the second dealloc must abort.
        unsafe {
            let p = GLOBAL.alloc(l);
            GLOBAL.dealloc(p, l);
            GLOBAL.dealloc(p, l);
        }
        unreachable!("the second dealloc returned");
    }
    // The check re-executes this test binary as a child. Under miri there is
    // no process to spawn, and under qemu-user (the aarch64 CI rows) the child
    // is an aarch64 binary exec'd without cargo's runner, so it never reaches
    // the allocator: run the check natively on x86_64 only.
    if cfg!(miri) || cfg!(not(target_arch = "x86_64")) {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "double_free_through_dealloc_aborts_with_a_message",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SLUB_DOUBLE_FREE_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "child survived: {err}");
    assert!(
        err.contains("slub-core: invalid dealloc") && err.contains("double free"),
        "{err}"
    );
}

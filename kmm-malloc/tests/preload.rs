//! The C interface through `LD_PRELOAD`: this test binary re-runs itself
//! with the library preloaded (`KMM_CHILD` names the case), so every
//! allocation of the child, the Rust runtime's included, goes through it.

use std::path::PathBuf;

unsafe extern "C" {
    fn valloc(size: usize) -> *mut libc::c_void;
    fn pvalloc(size: usize) -> *mut libc::c_void;
}
use std::process::Command;

/// The library `cargo test` built beside this binary
/// (`target/<profile>/deps/libkmm_malloc.so`: the crate is also an `rlib`
/// so that cargo builds it for its tests), else the one `cargo build` left
/// in `target/<profile>/`.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libkmm_malloc.so"))
        .find(|lib| lib.exists())
        .unwrap_or_else(|| panic!("libkmm_malloc.so not built beside {}", exe.display()))
}

fn child(case: &str, front: &str) -> std::process::Output {
    child_cmd(case)
        .env("KMM_SLUB_FRONT", front)
        .env("LD_PRELOAD", library())
        .output()
        .unwrap()
}

/// This binary re-run for `case` alone.
fn child_cmd(case: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("KMM_CHILD", case);
    c
}

/// Panics with the child's output unless it succeeded and said so.
#[track_caller]
fn assert_child_ok(what: &str, out: &std::process::Output) {
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && so.contains("CHILD-OK"),
        "{what}: {:?}\n{so}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the case named by `KMM_CHILD` (a no-op in the parent run).
#[test]
fn child_entry() {
    match std::env::var("KMM_CHILD").as_deref() {
        Ok("api") => api(),
        Ok("threads") => threads(),
        Ok("fork") => fork(),
        Ok("fork_stress") => fork_stress(),
        Ok("double_free") => double_free(),
        Ok("large_double_free") => large_double_free(),
        Ok("misaligned_free") => misaligned_free(),
        Ok("dlclose") => dlclose(),
        _ => {}
    }
}

fn api() {
    // SAFETY: the C allocation interface used as documented.
    unsafe {
        for size in [
            0usize,
            1,
            8,
            15,
            16,
            100,
            4096,
            16384,
            16385,
            100_000,
            5 << 20,
        ] {
            let p = libc::malloc(size) as *mut u8;
            assert!(!p.is_null());
            assert!(libc::malloc_usable_size(p.cast()) >= size);
            if size >= 16 {
                assert_eq!(p as usize % 16, 0, "malloc({size}) 16-aligned");
            }
            p.write_bytes(0xa5, size);
            let q = libc::realloc(p.cast(), size * 2 + 1) as *mut u8;
            assert!(
                (0..size).all(|i| *q.add(i) == 0xa5),
                "realloc keeps content"
            );
            libc::free(q.cast());
        }
        let z = libc::calloc(1000, 8) as *const u64;
        assert!((0..1000).all(|i| *z.add(i) == 0));
        libc::free(z as *mut _);
        for align in [8usize, 16, 64, 4096, 65536, 1 << 21] {
            let mut p = core::ptr::null_mut();
            assert_eq!(libc::posix_memalign(&mut p, align, 100), 0);
            assert_eq!(p as usize % align, 0);
            libc::free(p);
            let p = libc::aligned_alloc(align, align * 2);
            assert_eq!(p as usize % align, 0);
            libc::free(p);
            let p = libc::memalign(align, 3);
            assert_eq!(p as usize % align, 0);
            libc::free(p);
        }
        let mut p = core::ptr::null_mut();
        assert_eq!(libc::posix_memalign(&mut p, 24, 8), libc::EINVAL);
        let v = valloc(10);
        assert_eq!(v as usize % 4096, 0);
        libc::free(v);
        let v = pvalloc(10);
        assert!(libc::malloc_usable_size(v) >= 4096);
        libc::free(v);
        let r = libc::reallocarray(core::ptr::null_mut(), usize::MAX / 2, 4);
        assert!(r.is_null(), "overflow refused");
        // `black_box`: a release build may assume a malloc that only meets a
        // null test succeeded and drop the call.
        assert!(std::hint::black_box(libc::malloc(usize::MAX - 100)).is_null());
        libc::free(core::ptr::null_mut());
    }
    println!("CHILD-OK");
}

fn threads() {
    // Rust's own collections, on 8 threads, objects freed by other threads.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    let hs: Vec<_> = (0..8)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..2000 {
                    tx.send((0..10).map(|k| format!("{t}-{i}-{k}")).collect())
                        .unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let n: usize = rx.iter().map(|v| v.len()).sum();
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(n, 8 * 2000 * 10);
    println!("CHILD-OK");
}

fn fork() {
    let keep: Vec<Box<[u8; 64]>> = (0..1000).map(|_| Box::new([1; 64])).collect();
    let t = std::thread::spawn(|| {
        for _ in 0..200_000 {
            drop(std::hint::black_box(vec![0u8; 48]));
        }
    });
    // SAFETY: the child only allocates, frees and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let v: Vec<Vec<u8>> = (0..10_000).map(|i| vec![i as u8; i % 300]).collect();
        let ok = v.len() == 10_000 && keep.len() == 1000;
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    t.join().unwrap();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    println!("CHILD-OK");
}

/// Forks while other threads are inside every path of the allocator:
/// remote frees (objects handed to another thread, which frees them: the
/// slab layer's node lock), sizes across the classes (slab refills, the
/// barn), large blocks (the region). A child that finds a lock held by a
/// thread that does not exist in it hangs: the alarm kills it and the
/// parent reports it.
fn fork_stress() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    const FORKS: usize = 300;
    /// Stops the workers however the fork loop ends (a failed check too),
    /// so the process exits and reports instead of running on.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    let stop = &stop;
    std::thread::scope(|s| {
        let _stop = StopOnDrop(stop);
        let (tx, rx) = mpsc::sync_channel::<Vec<Vec<u8>>>(8);
        s.spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<Vec<u8>> =
                    (0..64).map(|k| vec![k as u8; 8 + (i + k) % 2000]).collect();
                if tx.send(batch).is_err() {
                    break;
                }
                i += 1;
            }
        });
        s.spawn(move || {
            for batch in rx {
                drop(std::hint::black_box(batch));
            }
        });
        s.spawn(|| {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let v = vec![1u8; 16 << 10 << (i % 5)];
                drop(std::hint::black_box(v));
                i += 1;
            }
        });
        for n in 0..FORKS {
            // SAFETY: the child allocates, frees and leaves with `_exit`.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: a plain syscall; SIGALRM ends a hung child.
                unsafe { libc::alarm(10) };
                let v: Vec<Vec<u8>> = (0..2000).map(|i| vec![i as u8; 1 + i * 7 % 3000]).collect();
                let big = vec![2u8; 200 << 10];
                let ok = v
                    .iter()
                    .enumerate()
                    .all(|(i, x)| x.iter().all(|&b| b == i as u8))
                    && big[1000] == 2;
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "child {n} of {FORKS}: status {status:#x} (signal {}: 14 is the alarm of a hung child)",
                if libc::WIFSIGNALED(status) {
                    libc::WTERMSIG(status)
                } else {
                    0
                }
            );
        }
    });
    println!("CHILD-OK");
}

fn double_free() {
    // SAFETY: deliberately wrong: the library must abort with a message.
    unsafe {
        // `black_box`: LLVM would otherwise drop the malloc / free pair.
        let p = std::hint::black_box(libc::malloc(40));
        libc::free(std::hint::black_box(p));
        libc::free(std::hint::black_box(p));
    }
}

fn large_double_free() {
    // SAFETY: as above.
    unsafe {
        // `black_box`: LLVM would otherwise drop the malloc / free pair.
        let p = std::hint::black_box(libc::malloc(100_000));
        libc::free(std::hint::black_box(p));
        libc::free(std::hint::black_box(p));
    }
}

fn misaligned_free() {
    // SAFETY: as above: a pointer inside a block, not its start. The block
    // is freed and allocated first, so that its class's sheaf (or CPU
    // freelist) is warm: the inlined fast path sees this free.
    unsafe {
        let p = std::hint::black_box(libc::malloc(40));
        libc::free(std::hint::black_box(p));
        let p = std::hint::black_box(libc::malloc(40)).cast::<u8>();
        libc::free(std::hint::black_box(p.add(8)).cast());
    }
}

/// Opens the library (not preloaded: glibc's malloc stays the process's),
/// closes it, and looks it up again without loading it.
fn dlclose() {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(library().as_os_str().as_bytes()).unwrap();
    // SAFETY: dlopen/dlclose of a library whose initialisers only set up
    // its own state; nothing of it is called.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen failed");
        assert_eq!(libc::dlclose(h), 0);
        let again = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(
            !again.is_null(),
            "dlclose unmapped the library (its rseq descriptors with it)"
        );
        libc::dlclose(again);
    }
    println!("CHILD-OK");
}

/// arch-api's `rseq-resident` leaves a thread's `rseq_cs` pointing into
/// the library after a section: `dlclose` must never unmap it (`-z
/// nodelete`, build.rs).
#[test]
fn dlclose_never_unmaps_the_library() {
    assert_child_ok("dlclose", &child_cmd("dlclose").output().unwrap());
}

#[test]
fn c_interface_threads_and_fork_on_both_fronts() {
    for front in ["tid", "sheaves"] {
        for case in ["api", "threads", "fork", "fork_stress"] {
            assert_child_ok(&format!("{case} on {front}"), &child(case, front));
        }
    }
}

#[test]
fn double_free_aborts_with_a_message() {
    for (case, front) in [("double_free", "tid"), ("large_double_free", "sheaves")] {
        let out = child(case, front);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case}: must abort");
        assert!(
            err.contains("kmm-malloc: free(): double free"),
            "{case}: {err}"
        );
    }
}

#[test]
fn a_free_inside_a_block_aborts_with_a_message_on_both_fronts() {
    for front in ["tid", "sheaves"] {
        let out = child("misaligned_free", front);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{front}: must abort");
        assert!(
            err.contains("kmm-malloc: free(): invalid pointer (not an object boundary)"),
            "{front}: {err}"
        );
    }
}

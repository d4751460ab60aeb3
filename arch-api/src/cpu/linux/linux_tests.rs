//! `LinuxCpus`' unit tests (`linux.rs`).
use super::*;

#[test]
fn parses_cpu_lists() {
    assert_eq!(parse_possible(b"0-15\n"), Some(16));
    assert_eq!(parse_possible(b"0\n"), Some(1));
    assert_eq!(parse_possible(b"0-3,8-11"), Some(12));
    assert_eq!(parse_possible(b"x"), None);
    assert_eq!(parse_possible(b""), None);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "rseq / getcpu / sysfs: syscalls and inline asm Miri cannot run"
)]
fn ids_are_in_range_and_agree_with_the_kernel() {
    let cpus = LinuxCpus::new();
    assert!(cpus.nr_cpus() >= 1);
    for _ in 0..100 {
        assert!(cpus.current_cpu().unwrap() < cpus.nr_cpus());
    }
    if let Some(id) = rseq_cpu() {
        // Both read the kernel's idea; a migration in between is
        // possible but rare, so compare a few times.
        assert!((0..50).any(|_| rseq_cpu() == Some(getcpu_cpu())), "{id}");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "rseq / getcpu / sysfs: syscalls and inline asm Miri cannot run"
)]
fn on_each_cpu_holds_each_ids_lock_once() {
    let cpus = LinuxCpus::new();
    let seen = std::sync::Mutex::new(std::vec::Vec::new());
    let ran = cpus.on_each_cpu(&|id| {
        assert!(cpus.try_pin_id(id).is_none(), "CPU {id}'s lock is free");
        seen.lock().unwrap().push(id);
    });
    let seen = seen.into_inner().unwrap();
    assert_eq!(ran, cpus.nr_cpus());
    assert_eq!(seen, (0..cpus.nr_cpus()).collect::<std::vec::Vec<_>>());
    // Every lock given back.
    assert!((0..cpus.nr_cpus()).all(|id| cpus.try_pin_id(id).is_some()));
}

/// Threads pinning their CPU (`pin`, `try_pin`) and one taking random
/// CPUs' locks (`try_pin_id`): never two holders of one id at once.
fn exclusion_under_load(cpus: &LinuxCpus) {
    use std::sync::atomic::{AtomicU64, AtomicUsize};
    let owner: std::vec::Vec<AtomicUsize> =
        (0..cpus.nr_cpus()).map(|_| AtomicUsize::new(0)).collect();
    let overlaps = AtomicU64::new(0);
    let enter_exit = |id: usize, me: usize| {
        if owner[id].swap(me, Ordering::SeqCst) != 0 {
            overlaps.fetch_add(1, Ordering::Relaxed);
        }
        core::hint::spin_loop();
        if owner[id]
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            overlaps.fetch_add(1, Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        for t in 1..=6usize {
            let enter_exit = &enter_exit;
            s.spawn(move || {
                for i in 0..20_000 {
                    if i % 2 == 0 {
                        let (_g, id) = cpus.pin();
                        enter_exit(id, t);
                    } else if let Some((_g, id)) = cpus.try_pin() {
                        enter_exit(id, t);
                    }
                }
            });
        }
        let enter_exit = &enter_exit;
        s.spawn(move || {
            for i in 0..5_000 {
                let id = i % cpus.nr_cpus();
                if let Some(_g) = cpus.try_pin_id(id) {
                    enter_exit(id, 100);
                }
            }
        });
    });
    assert_eq!(overlaps.load(Ordering::Relaxed), 0);
}

/// One pop and one push on the caller's CPU's stack (one token each,
/// room for more): both commit in rseq mode, and outside it both miss,
/// leaving the stacks as they were. Never `Pin` on x86_64 (the sections
/// handle lines a line apart).
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
fn local_steps(cpus: &LinuxCpus, rseq: bool) {
    #[repr(C, align(64))]
    struct Line {
        slots: *mut usize,
        len: usize,
        cap: usize,
    }
    let nr = cpus.nr_cpus();
    let mut store: std::vec::Vec<[usize; 4]> = (0..nr).map(|i| [i + 1, 0, 0, 0]).collect();
    let lines: std::vec::Vec<Line> = store
        .iter_mut()
        .map(|s| Line {
            slots: s.as_mut_ptr(),
            len: 1,
            cap: 4,
        })
        .collect();
    // SAFETY: one 64-byte line per CPU id, each pointing to 4 slots
    // that `store` keeps alive; only this thread touches them.
    let stacks = unsafe { LocalStacks::new(lines.as_ptr().cast(), LocalStacks::LINE) };
    // In rseq mode a step preempted inside its section misses too: a
    // few tries.
    let tries = if rseq { 1000 } else { 1 };
    let step = |f: &dyn Fn() -> LocalOp| {
        (0..tries)
            .map(|_| f())
            .find(|op| !matches!(op, LocalOp::Miss))
            .unwrap_or(LocalOp::Miss)
    };
    // SAFETY: as above; no guard holder writes these stacks.
    let popped = step(&|| unsafe { cpus.pop_local(&stacks) });
    // SAFETY: as above.
    let pushed = step(&|| unsafe { cpus.push_local(&stacks, 99) });
    let total: usize = lines.iter().map(|l| l.len).sum();
    match (rseq, popped, pushed) {
        (true, LocalOp::Done { cpu, value }, LocalOp::Done { .. }) => {
            assert_eq!(value, cpu + 1);
            assert_eq!(total, nr);
        }
        (false, LocalOp::Miss, LocalOp::Miss) => assert_eq!(total, nr),
        other => panic!("rseq {rseq}: {other:?}"),
    }
}

#[test]
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[cfg_attr(miri, ignore = "rseq sections: inline asm Miri cannot run")]
fn local_steps_commit_in_rseq_mode() {
    let cpus = LinuxCpus::new();
    if cpus.uses_rseq() {
        local_steps(&cpus, true);
    }
}

#[test]
#[cfg_attr(miri, ignore = "threads on real CPUs: syscalls Miri cannot run")]
fn pins_exclude_under_load() {
    let cpus = LinuxCpus::new();
    std::eprintln!("uses rseq: {}", cpus.uses_rseq());
    exclusion_under_load(&cpus);
}

/// The same in a process where glibc registered no rseq area (its
/// tunable), so every lock is taken by compare-exchange: the test
/// binary runs this test again in a child with the tunable set.
#[test]
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))] // elsewhere no rseq mode
#[cfg_attr(miri, ignore = "spawns a process")]
fn without_an_rseq_area_the_locks_are_compare_exchanged() {
    const NAME: &str = "cpu::linux::tests::without_an_rseq_area_the_locks_are_compare_exchanged";
    if std::env::var_os("ARCH_API_CHILD_NO_RSEQ").is_some() {
        let cpus = LinuxCpus::new();
        assert!(!cpus.uses_rseq(), "glibc.pthread.rseq=0 left an rseq area");
        exclusion_under_load(&cpus);
        local_steps(&cpus, false);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--test-threads", "1"])
        .env("GLIBC_TUNABLES", "glibc.pthread.rseq=0")
        .env("ARCH_API_CHILD_NO_RSEQ", "1")
        .output()
        .unwrap();
    let stdout = std::string::String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        std::string::String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(miri, ignore = "sysfs and sched_getcpu: syscalls Miri cannot run")]
fn pin_excludes_and_try_pin_fails_while_held() {
    let cpus = LinuxCpus::new();
    let (g, id) = cpus.pin();
    assert!(cpus.try_pin_id(id).is_none());
    std::thread::scope(|s| {
        s.spawn(|| {
            let r = cpus.try_pin_id(id);
            assert!(
                r.is_none(),
                "held by another thread {id} {r:?} {:?}",
                cpus.locks()
            );
        });
    });
    drop(g);
    assert!(cpus.try_pin_id(id).is_some());
}

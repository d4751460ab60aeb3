//! What `harness all` runs: every workload at a scale that finishes in
//! minutes on a 2-core machine (`--quick`: under one minute). Each step is a
//! child run of this same binary with `--json`, so a workload's figures in
//! the report are exactly what its own subcommand prints.

/// One child run of the harness.
#[derive(Clone, Debug)]
pub struct Step {
    /// The subcommand (also the progress bar it belongs to).
    pub workload: &'static str,
    /// Its flags after the subcommand name (the common flags are added by
    /// the runner).
    pub args: Vec<String>,
}

impl Step {
    fn new(workload: &'static str, args: &[&str]) -> Self {
        Self {
            workload,
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The command line as a user would type it.
    pub fn command_line(&self) -> String {
        let mut s = format!("harness --json {}", self.workload);
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// The 16 TiB (minus one page table's worth) of story 2.
pub const STORY2_SIZE: &str = "17592182882304";

/// Thread counts of the test-vmalloc sweep.
pub fn test_vmalloc_threads(quick: bool) -> &'static [u32] {
    if quick { &[1, 2, 8] } else { &[1, 2, 8, 64] }
}

/// The test_vmalloc cases of the thread sweep: fix_size, random_size,
/// fix_align and vm_map_ram (the full list, with its 15000-area busy list
/// per thread, runs once at 2 threads for pass/fail).
pub const SWEEP_MASK: u32 = 1 | 8 | 16 | 1024;
/// Every case test-vmalloc implements.
pub const FULL_MASK: u32 = 127 | 1024 | 2048 | 4096;

/// Loops per case in the thread sweep.
pub fn sweep_loops(quick: bool) -> u64 {
    if quick { 500 } else { 5000 }
}

/// Sizes of the munmap budget sweep (all on ia64-sim, as in 2005).
pub fn munmap_sizes(quick: bool) -> &'static [&'static str] {
    if quick {
        &["1G", "64G", "1T"]
    } else {
        &["1G", "1T", STORY2_SIZE]
    }
}

/// Iterations of the vmalloc-loop (per policy).
pub fn vmalloc_iterations(quick: bool) -> u64 {
    if quick { 20_000 } else { 200_000 }
}

/// Map+unmap cycles of the 1 TiB cycle.
pub fn munmap_cycles(quick: bool) -> u64 {
    if quick { 100 } else { 1000 }
}

/// The steps, grouped by workload in report order.
pub fn steps(quick: bool) -> Vec<Step> {
    let q = |quick_v: &'static str, full_v: &'static str| if quick { quick_v } else { full_v };
    let mut s = Vec::new();
    let iters = vmalloc_iterations(quick).to_string();
    s.push(Step::new(
        "vmalloc-loop",
        &["--policy", "all", "--iterations", &iters, "--pages", "4"],
    ));
    // Story 1's huge-vmalloc row: a 64 MiB area, base pages vs huge.
    s.push(Step::new(
        "vmalloc-huge",
        &["--size", "64M", "--iterations", q("5", "20")],
    ));
    let loops = sweep_loops(quick).to_string();
    let mask = SWEEP_MASK.to_string();
    for &t in test_vmalloc_threads(quick) {
        for nodes in ["global", "sharded"] {
            let t = t.to_string();
            s.push(Step::new(
                "test-vmalloc",
                &[
                    "--run-test-mask",
                    &mask,
                    "--nr-threads",
                    &t,
                    "--test-loop-count",
                    &loops,
                    "--nodes",
                    nodes,
                ],
            ));
        }
    }
    let full = FULL_MASK.to_string();
    for nodes in ["global", "sharded"] {
        s.push(Step::new(
            "test-vmalloc",
            &[
                "--run-test-mask",
                &full,
                "--nr-threads",
                "2",
                "--test-loop-count",
                q("100", "500"),
                "--nodes",
                nodes,
            ],
        ));
    }
    s.push(Step::new(
        "vfree-search",
        &["--iterations", q("100000", "1000000")],
    ));
    for p in ["fix_size", "random_size", "fix_align", "random_size_align"] {
        s.push(Step::new(
            "vmap-bench",
            &["--pattern", p, "--ops", q("2000", "20000")],
        ));
    }
    // An aged space at three sizes (the chart's x axis).
    for live in ["1000", "10000", "100000"] {
        s.push(Step::new(
            "vmap-bench",
            &[
                "--pattern",
                "aged",
                "--live",
                live,
                "--ops",
                q("2000", "20000"),
            ],
        ));
    }
    // vm-allocator walks the whole busy list per op (~1 ms): few ops.
    s.push(Step::new(
        "vmap-bench",
        &["--pattern", "long_busy_list", "--ops", q("20", "200")],
    ));
    for size in munmap_sizes(quick) {
        for budget in ["work", "address", "unbounded"] {
            s.push(Step::new(
                "munmap",
                &["--arch", "ia64-sim", "--size", size, "--budget", budget],
            ));
        }
    }
    let cycles = munmap_cycles(quick).to_string();
    let cycle = ["--arch", "ia64-sim", "--size", "1T", "--touch-pages", "4"];
    let mut work = cycle.to_vec();
    work.extend(["--budget", "work", "--repeat", &cycles]);
    s.push(Step::new("munmap", &work));
    let mut packed = work.clone();
    packed.push("--packed");
    s.push(Step::new("munmap", &packed));
    let mut addr = cycle.to_vec();
    addr.extend(["--budget", "address", "--repeat", "1"]);
    s.push(Step::new("munmap", &addr));
    let dense = q("32M", "256M");
    for (arch, walker) in [
        ("x86_64", "zap"),
        ("x86_64", "x86_64-crate"),
        ("aarch64-4k", "zap"),
        ("aarch64-4k", "aarch64-paging"),
    ] {
        s.push(Step::new(
            "unmap-dense",
            &["--arch", arch, "--size", dense, "--walker", walker],
        ));
    }
    s.push(Step::new("slab-test", &["--count", q("1000", "10000")]));
    s.push(Step::new("kmem-bench", &["--loops", q("20000", "200000")]));
    s.push(Step::new("vmallocinfo", &[]));
    s.push(Step::new("slabinfo", &[]));
    s.push(Step::new(
        "soak",
        &["--seconds", q("2", "10"), "--threads", "2"],
    ));
    s
}

/// Thread counts of malloc-bench in `all` (issue 18's targets).
pub const MALLOC_THREADS: [u32; 2] = [1, 2];

/// The malloc-bench runs of `harness all`: one per thread count, each
/// workload and allocator a child of its own (on 2 cores here, both runs
/// together: about 4 s with `--quick`, scale 1, median of 3; else about
/// 20 s, scale 4, median of 3); every allocator when the preloadable
/// library is there, else mimalloc and glibc only.
pub fn malloc_steps(quick: bool, have_preload: bool) -> Vec<Step> {
    let (scale, repeat) = if quick { ("1", "3") } else { ("4", "3") };
    let mut s = Vec::new();
    for t in MALLOC_THREADS {
        let t = t.to_string();
        let base = ["--threads", &t, "--scale", scale, "--repeat", repeat];
        if have_preload {
            s.push(Step::new("malloc-bench", &base));
        } else {
            for a in ["mimalloc", "system"] {
                let mut args = base.to_vec();
                args.extend(["--allocator", a]);
                s.push(Step::new("malloc-bench", &args));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_is_a_subset_in_scale_of_the_full_one() {
        let (q, f) = (steps(true), steps(false));
        assert_eq!(q.len(), f.len() - 2, "full adds the 64-thread runs");
        assert!(q.iter().all(|s| !s.args.iter().any(|a| a == STORY2_SIZE)));
        assert!(f.iter().any(|s| s.args.iter().any(|a| a == STORY2_SIZE)));
        assert!(
            f[0].command_line()
                .starts_with("harness --json vmalloc-loop")
        );
    }
}

//! The harness: reproduces the field's workloads (SPEC.md) against this
//! workspace's crates and their peers. Its command line is a contract
//! (`shared/HARNESS.md`): names and JSON keys are kept, new ones are added.
//!
//! Each workload lives in its own file and lands with the crate it exercises:
//! `info` (layouts, DW-CAS, TLB model), `vmap-bench` / `vfree-search`
//! (vmap-core), `munmap` / `unmap-dense` (zap-walker), `vmalloc-loop` /
//! `test-vmalloc` / `vmallocinfo` (vmap-lazy), `slab-test` / `kmem-bench` /
//! `slabinfo` (slub-core). `all` (issue 7) runs every workload and writes
//! the report; `soak` (issue 7) runs every component at once under random
//! mixes and accounts for every frame, table page, object and range.

mod all;
mod arch;
mod cli;
mod info;
mod malloc_bench;
mod munmap;
mod slab_bench;
mod soak;
mod test_vmalloc;
mod unmap_dense;
mod vfree_search;
mod vmalloc_huge;
mod vmalloc_loop;
mod vmallocinfo;
mod vmap_bench;
mod zap_common;

use clap::{Parser, Subcommand};

/// Reproduces the kernel memory-management workloads of SPEC.md.
#[derive(Parser, Debug)]
#[command(name = "harness", version, about)]
struct Cli {
    #[command(flatten)]
    common: cli::Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the configured page-table layouts, the host's double-word CAS and
    /// the software TLB model with its charged costs.
    Info {
        #[command(flatten)]
        arch: cli::ArchArg,
    },
    /// vmap-core's default policy against vm-allocator, range-alloc and
    /// offset-allocator on the test_vmalloc allocation patterns.
    VmapBench(vmap_bench::VmapBenchArgs),
    /// vfree with one tree search (find_unlink) against two (find + unlink).
    VfreeSearch(vfree_search::VfreeSearchArgs),
    /// Story 2: map a few pages inside a huge range and unmap it, per
    /// ZapBudget policy (work / address / unbounded) and layout.
    Munmap(munmap::MunmapArgs),
    /// Unmap a range of present base pages: the zap walker against the
    /// x86_64 crate's per-page unmap and aarch64-paging.
    UnmapDense(unmap_dense::UnmapDenseArgs),
    /// Story 1: N x (vmalloc k pages, touch, vfree) per purge/search policy.
    VmallocLoop(vmalloc_loop::VmallocLoopArgs),
    /// One large area (64 MiB) vmalloc'd, touched and vfreed, base pages
    /// against vmalloc_huge's large leaves: time and page-table bytes.
    VmallocHuge(vmalloc_huge::VmallocHugeArgs),
    /// Story 4: Linux's test_vmalloc case list on the global lock or the
    /// sharded nodes, with real threads.
    TestVmalloc(test_vmalloc::TestVmallocArgs),
    /// A short vmalloc workload, then a /proc/vmallocinfo-like dump.
    Vmallocinfo,
    /// slub-core (tid and sheaves fronts) against glibc, mimalloc and
    /// slabmalloc: per-size alloc/free cycles (story 3).
    SlabTest(slab_bench::SlabTestArgs),
    /// 256-byte cache: fastpath reuse, N-pattern, remote free (story 3).
    KmemBench(slab_bench::KmemBenchArgs),
    /// A short kmalloc workload, then a /proc/slabinfo-like dump.
    Slabinfo(slab_bench::SlabinfoArgs),
    /// The field's allocator workloads (larson, xmalloc-test, mstress,
    /// cache-scratch, sh6bench, alloc-test, glibc-simple/thread): slub-core's
    /// malloc (preloaded, both fronts) against mimalloc and glibc, time,
    /// peak RSS and caching overhead (issue 18).
    MallocBench(malloc_bench::MallocBenchArgs),
    /// Every workload at a scale that finishes in minutes: each story's
    /// table beside the story's figures and the peers, a report with charts
    /// (report.md, report.json, report.html), and the invariants summed.
    All(all::AllArgs),
    /// Random mixes of every component at once on real threads, invariants
    /// checked throughout; at the end every frame, table page, slab page,
    /// object and virtual range must be accounted for.
    Soak(soak::SoakArgs),
}

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| cli::exit_on_clap_error(e));
    let status = match &cli.command {
        Command::Info { arch } => info::run(&cli.common, arch.arch),
        Command::VmapBench(a) => vmap_bench::run(&cli.common, a),
        Command::VfreeSearch(a) => vfree_search::run(&cli.common, a),
        Command::Munmap(a) => munmap::run(&cli.common, a),
        Command::UnmapDense(a) => unmap_dense::run(&cli.common, a),
        Command::VmallocLoop(a) => vmalloc_loop::run(&cli.common, a),
        Command::VmallocHuge(a) => vmalloc_huge::run(&cli.common, a),
        Command::TestVmalloc(a) => test_vmalloc::run(&cli.common, a),
        Command::Vmallocinfo => vmallocinfo::run(&cli.common),
        Command::SlabTest(a) => slab_bench::slab_test(&cli.common, a),
        Command::KmemBench(a) => slab_bench::kmem_bench(&cli.common, a),
        Command::Slabinfo(a) => slab_bench::slabinfo(&cli.common, a),
        Command::MallocBench(a) => malloc_bench::run(&cli.common, a),
        Command::All(a) => all::run(&cli.common, a),
        Command::Soak(a) => soak::run(&cli.common, a),
    };
    std::process::exit(status);
}

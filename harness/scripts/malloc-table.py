#!/usr/bin/env python3
"""The issue-18 table from repeated malloc-bench runs (BENCHMARKS.md, session 15).

    harness/scripts/malloc-table.py [HARNESS] [INVOCATIONS]

Runs `HARNESS --json malloc-bench --threads T --repeat 5` INVOCATIONS times
for T = 1 and 2 (default: target/release/harness, 6), then prints a
Markdown table: each front's, mimalloc's and glibc's median wall time, the
better front's time over mimalloc's in each invocation and their median,
and the better front's peak RSS over mimalloc's. The harness looks for
libkmm_malloc.so beside itself (`cargo build --release -p kmm-malloc`).
"""
import json
import statistics
import subprocess
import sys

WORKLOADS = ["larson", "xmalloc", "mstress", "cache-scratch", "sh6bench",
             "alloc-test", "glibc-simple", "glibc-thread", "rptest"]
ALLOCATORS = ["slub", "sheaves", "mimalloc", "system"]


def main():
    harness = sys.argv[1] if len(sys.argv) > 1 else "target/release/harness"
    invocations = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    # (workload, threads) -> one {allocator: row} per invocation
    sets = {}
    for _ in range(invocations):
        for threads in (1, 2):
            out = subprocess.run(
                [harness, "--json", "malloc-bench", "--threads", str(threads), "--repeat", "5"],
                capture_output=True, text=True, check=True).stdout
            this = {}
            for r in json.loads(out)["results"]:
                this.setdefault((r["workload"], r["threads"]), {})[r["allocator"]] = r
            for key, rows in this.items():
                sets.setdefault(key, []).append(rows)

    print("| workload | T | slub (tid) ms | sheaves ms | mimalloc ms | glibc ms "
          "| best / mimalloc (per set) | median | peak RSS best / mimalloc |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    met = total = 0
    for threads in (1, 2):
        for w in WORKLOADS:
            runs = [s for s in sets.get((w, threads), []) if all(a in s for a in ALLOCATORS)]
            if not runs:
                continue
            ms = {a: statistics.median(s[a]["wall_ns"] for s in runs) / 1e6 for a in ALLOCATORS}
            ratios, rss = [], []
            for s in runs:
                best = min((s["slub"], s["sheaves"]), key=lambda r: r["wall_ns"])
                ratios.append(best["wall_ns"] / s["mimalloc"]["wall_ns"])
                rss.append(best["peak_rss_bytes"] / s["mimalloc"]["peak_rss_bytes"])
            median = statistics.median(ratios)
            total += 1
            met += median <= 1.25
            print(f"| {w} | {threads} | {ms['slub']:.2f} | {ms['sheaves']:.2f} "
                  f"| {ms['mimalloc']:.2f} | {ms['system']:.2f} "
                  f"| {' / '.join(f'{x:.2f}' for x in ratios)} | {median:.2f} "
                  f"| {min(rss):.2f}-{max(rss):.2f} |")
    print(f"\n{met} of {total} rows with the median of best / mimalloc at most 1.25")


if __name__ == "__main__":
    main()

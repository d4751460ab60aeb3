//! What reading "the CPU I run on" costs on this machine, for
//! `LinuxCpus`: the rseq area's `cpu_id` (one load) against
//! `sched_getcpu()` (the vDSO, or rseq inside newer glibc):
//! `cargo run --release -p arch-api --features std --example cpu_id_cost [calls] [rseq|getcpu|both]`.
//! Under callgrind, run one method at a time and divide by `calls`.

#[cfg(target_os = "linux")]
fn main() {
    use arch_api::cpu::linux::{getcpu_cpu, rseq_cpu};
    use std::hint::black_box;
    use std::time::Instant;
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let which = args.next().unwrap_or_else(|| "both".into());
    println!("rseq registered: {}", rseq_cpu().is_some());
    if which == "rseq" || which == "both" {
        let t = Instant::now();
        let mut s = 0usize;
        for _ in 0..n {
            s = s.wrapping_add(black_box(rseq_cpu()).unwrap_or(0));
        }
        println!(
            "rseq cpu_id: {:.2} ns/call ({s})",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
    if which == "getcpu" || which == "both" {
        let t = Instant::now();
        let mut s = 0usize;
        for _ in 0..n {
            s = s.wrapping_add(black_box(getcpu_cpu()));
        }
        println!(
            "sched_getcpu: {:.2} ns/call ({s})",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}

//! Options shared by every workload, and the one-line error rule of HARNESS.md.

use crate::arch::Arch;
use arch_api::CostModel;
use clap::Args;

/// Flags every workload accepts (HARNESS.md "Common rules").
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Print exactly one JSON object on stdout (tables and progress go to stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// Seed for randomised workloads.
    #[arg(long, global = true, default_value_t = 1)]
    pub seed: u64,
    /// Number of simulated CPUs.
    #[arg(long, global = true, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: u32,
    /// Charged cost of one single-page TLB invalidation, ns (0 = off).
    /// Default: Linux x86's "about 100 ns" per single flush.
    #[arg(long, global = true, default_value_t = CostModel::default().page_flush_ns)]
    pub flush_cost_ns: u64,
    /// Charged cost of a full TLB flush, ns (0 = off). Default: 33 x 100 ns,
    /// the break-even behind Linux's 33-page flush ceiling.
    #[arg(long, global = true, default_value_t = CostModel::default().full_flush_ns)]
    pub full_flush_cost_ns: u64,
    /// Charged cost of one shootdown IPI to one remote CPU, ns (0 = off).
    /// Default: 1 us, the low end of the microseconds a shootdown takes
    /// (Amit, USENIX ATC 2017).
    #[arg(long, global = true, default_value_t = CostModel::default().ipi_ns)]
    pub ipi_cost_ns: u64,
}

impl Common {
    /// The TLB cost model these flags describe.
    pub fn cost_model(&self) -> CostModel {
        CostModel {
            page_flush_ns: self.flush_cost_ns,
            full_flush_ns: self.full_flush_cost_ns,
            ipi_ns: self.ipi_cost_ns,
        }
    }
}

/// An `--arch` flag; `None` means every layout where a workload allows it.
#[derive(Args, Clone, Debug)]
pub struct ArchArg {
    /// Page-table layout.
    #[arg(long, value_enum)]
    pub arch: Option<Arch>,
}

/// Turns a clap error into HARNESS.md's rule: one line naming the flag and the
/// accepted values, exit status 2. Help and version output pass through.
pub fn exit_on_clap_error(err: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) || err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        err.exit();
    }
    let text = err.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("Usage:")
        })
        .collect::<Vec<_>>()
        .join("; ");
    eprintln!("{line}");
    std::process::exit(2);
}

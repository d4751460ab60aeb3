//! The harness: reproduces the field's workloads (SPEC.md) against this
//! workspace's crates and their peers. Its command line is a contract
//! (`shared/HARNESS.md`): names and JSON keys are kept, new ones are added.
//!
//! Workloads land with the crates they exercise; today `info` prints the
//! configured architectures, layouts and TLB model.

mod arch;
mod cli;
mod info;

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
}

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| cli::exit_on_clap_error(e));
    let status = match &cli.command {
        Command::Info { arch } => info::run(&cli.common, arch.arch),
    };
    std::process::exit(status);
}

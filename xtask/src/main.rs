//! `cargo xtask`: runs every step over every target and configuration (arguments and dispatch).

mod excerpt;
mod qemu;
mod report;
mod run;
mod setup;
mod steps;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use run::{Options, Sink};
use steps::{Selection, StepKind};

/// The default per-row limit, so a hung test cannot hold CI past its budget.
/// A guard against hangs, not a budget (CI's whole run has one): the
/// longest rows, slub-core's and zap-walker's Miri, took 1 135 and 896 s in
/// a full run on a machine half as fast as the one of session 16.
const DEFAULT_STEP_TIMEOUT_S: u64 = 1800;

/// `cargo xtask`: the build and test matrix, and the demo kernels under qemu.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every step in order (continuing after failures), stream the tools' output, then
    /// print the matrix table; exit 1 if any row failed.
    Ci(RunFlags),
    /// The same run; prints every (target x config x step) row with pass/fail/skipped and
    /// seconds.
    Matrix {
        #[command(flatten)]
        run: RunFlags,
        /// stdout carries exactly one JSON object {"rows":[...]}; the tools' output goes to
        /// stderr.
        #[arg(long)]
        json: bool,
    },
    /// Build demo-kernel for ARCH and boot it under qemu-system-ARCH; fail unless it printed
    /// "all checks passed" and exited with success (see --fault-test for the broken builds).
    Qemu(qemu::QemuCli),
}

/// The flags `ci` and `matrix` share.
#[derive(Debug, clap::Args)]
struct RunFlags {
    /// Only fmt, clippy (default), host tests (default), the bare-metal builds (default) and
    /// doc, with the setup they need; other rows are skipped.
    #[arg(long)]
    quick: bool,
    /// Run only these steps (comma-separated or repeated).
    #[arg(long, value_name = "STEP", value_delimiter = ',', value_parser = parse_step)]
    only: Vec<StepKind>,
    /// Kill a row after SECS seconds (0: no limit).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_STEP_TIMEOUT_S)]
    step_timeout: u64,
}

/// `--only`'s values: clap's PossibleValues would need `StepKind: ValueEnum`; the names
/// already live in steps.rs, so the error lists them from there.
fn parse_step(name: &str) -> Result<StepKind, String> {
    StepKind::from_name(name.trim()).ok_or_else(|| {
        let names: Vec<&str> = StepKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown step `{name}`; expected: {}", names.join(", "))
    })
}

/// The parsed `ci` / `matrix` command line.
struct Args {
    json: bool,
    selection: Selection,
    timeout: Option<Duration>,
}

impl Args {
    fn new(run: RunFlags, json: bool) -> Args {
        Args {
            json,
            selection: Selection {
                quick: run.quick,
                only: run.only.into_iter().collect(),
            },
            timeout: (run.step_timeout > 0).then(|| Duration::from_secs(run.step_timeout)),
        }
    }
}

/// The workspace root (xtask lives one level below it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Notes crate directories that none of xtask's crate lists name, so a new crate is not silently
/// left out of the bare-metal builds, qemu tests and loom discovery.
fn note_unlisted_crates(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut unlisted: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !steps::LIB_CRATES.contains(&name.as_str()))
        .filter(|name| !steps::BIN_CRATES.contains(&name.as_str()))
        .collect();
    unlisted.sort();
    for name in unlisted {
        eprintln!(
            "note: crate `{name}` is in neither LIB_CRATES nor BIN_CRATES (xtask/src/steps.rs)"
        );
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 and `--help` exits 0, as clap does by default.
    let args = match Cli::parse().command {
        Command::Qemu(q) => return qemu::main(&workspace_root(), q),
        Command::Ci(run) => Args::new(run, false),
        Command::Matrix { run, json } => Args::new(run, json),
    };

    let root = workspace_root();
    note_unlisted_crates(&root);
    let matrix = steps::matrix(&root, &args.selection);
    let opts = Options {
        sink: if args.json {
            Sink::Stderr
        } else {
            Sink::Inherit
        },
        timeout: args.timeout,
    };
    let start = std::time::Instant::now();
    let rows = run::run_all(&root, &matrix, opts);

    if args.json {
        println!("{}", report::json(&rows));
    } else {
        print!("{}{}", report::excerpts(&rows), report::table(&rows));
        // Rows in lanes overlap, so their seconds add up to more than this.
        println!("wall clock: {:.0} s", start.elapsed().as_secs_f64());
    }
    if report::any_failed(&rows) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("xtask").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_help() {
        for sub in [
            &["--help"][..],
            &["ci", "--help"],
            &["matrix", "--help"],
            &["qemu", "--help"],
            &["help", "matrix"],
        ] {
            let e = parse(sub).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{sub:?}");
        }
    }

    #[test]
    fn ci_and_matrix_flags() {
        let Command::Ci(run) = parse(&["ci", "--quick", "--only", "fmt,clippy", "--only=doc"])
            .unwrap()
            .command
        else {
            panic!("not ci");
        };
        let a = Args::new(run, false);
        assert!(a.selection.quick);
        assert_eq!(
            a.selection.only.into_iter().collect::<Vec<_>>(),
            [StepKind::Fmt, StepKind::Clippy, StepKind::Doc]
        );
        assert_eq!(a.timeout, Some(Duration::from_secs(DEFAULT_STEP_TIMEOUT_S)));
        let Command::Matrix { run, json } = parse(&["matrix", "--json", "--step-timeout", "0"])
            .unwrap()
            .command
        else {
            panic!("not matrix");
        };
        assert!(json);
        assert_eq!(Args::new(run, json).timeout, None);
        assert!(parse(&["ci", "--json"]).is_err(), "--json is matrix's");
        let e = parse(&["ci", "--only", "bogus"]).unwrap_err().to_string();
        assert!(e.contains("qemu-system"), "{e}");
        assert!(parse(&["ci", "--step-timeout", "x"]).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&["bogus"]).is_err());
    }
}

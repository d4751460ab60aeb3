//! `cargo xtask`: runs every step over every target and configuration (arguments and dispatch).

mod qemu;
mod report;
mod run;
mod setup;
mod steps;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use run::{Options, Sink};
use steps::{Selection, StepKind};

/// The default per-row limit, so a hung test cannot hold CI past its budget.
const DEFAULT_STEP_TIMEOUT_S: u64 = 1200;

const USAGE: &str = "\
usage: cargo xtask <command> [flags]

commands:
  ci       run every step in order (continuing after failures), stream the tools' output,
           then print the matrix table; exit 1 if any row failed
  matrix   the same run; prints every (target x config x step) row with pass/fail/skipped
           and seconds
  qemu ARCH [--smp N] [--fault-test[=no-shootdown]] [--timeout SECS]
           build demo-kernel for ARCH (aarch64, x86_64) and boot it under qemu-system-ARCH
           with N CPUs (1..8, default 1);
           fail unless it printed \"all checks passed\" and exited with success (with
           --fault-test: unless it reported a fault and exited with status 3; with
           --fault-test=no-shootdown, a build whose TLB flushes stay on the executing CPU:
           unless it reported a \"stale read:\" and exited with status 1)
  help     print this text

flags:
  --quick              only fmt, clippy (default), host tests (default), the bare-metal builds
                       (default) and doc, with the setup they need; other rows are skipped
  --json               (matrix only) stdout carries exactly one JSON object {\"rows\":[...]};
                       the tools' output goes to stderr
  --only STEP[,STEP]   run only these steps: setup, fmt, clippy, test, test-qemu, build-none,
                       package, msrv, qemu-system, loom, miri, doc
  --step-timeout SECS  kill a row after SECS seconds (default 1200; 0: no limit)
";

/// The parsed command line.
struct Args {
    json: bool,
    selection: Selection,
    timeout: Option<Duration>,
}

/// A usage error: one line, exit status 2.
fn usage_error(message: String) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn step_names() -> String {
    StepKind::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_flags(command: &str, flags: &[String]) -> Result<Args, String> {
    let accepted = match command {
        "ci" => "--quick, --only, --step-timeout",
        _ => "--json, --quick, --only, --step-timeout",
    };
    let mut args = Args {
        json: false,
        selection: Selection::default(),
        timeout: Some(Duration::from_secs(DEFAULT_STEP_TIMEOUT_S)),
    };
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (flag.as_str(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("`{name}` needs {what}"))
        };
        match name {
            "--quick" if inline.is_none() => args.selection.quick = true,
            "--json" if inline.is_none() && command == "matrix" => args.json = true,
            "--only" => {
                for step in value("a comma-separated list of steps")?.split(',') {
                    let kind = StepKind::from_name(step.trim()).ok_or_else(|| {
                        format!(
                            "unknown step `{step}` for --only; expected: {}",
                            step_names()
                        )
                    })?;
                    args.selection.only.insert(kind);
                }
            }
            "--step-timeout" => {
                let v = value("a number of seconds")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--step-timeout expects whole seconds, got `{v}`"))?;
                args.timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            _ => {
                return Err(format!(
                    "unknown flag `{flag}` for `{command}`; expected: {accepted}"
                ));
            }
        }
    }
    Ok(args)
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
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = argv.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match command.as_str() {
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        "ci" | "matrix" => {}
        "qemu" => return qemu::main(&workspace_root(), &argv[1..]),
        other => {
            return usage_error(format!(
                "unknown command `{other}`; expected one of: ci, matrix, qemu, help"
            ));
        }
    }
    let args = match parse_flags(command, &argv[1..]) {
        Ok(args) => args,
        Err(message) => return usage_error(message),
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
    let rows = run::run_all(&root, &matrix, opts);

    if args.json {
        println!("{}", report::json(&rows));
    } else {
        print!("{}", report::table(&rows));
    }
    if report::any_failed(&rows) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

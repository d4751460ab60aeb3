//! The row types: the kinds of step, a row (`Step`) and what it runs, and which rows run (`Selection`).

use std::collections::BTreeSet;

use crate::run::Cmd;
use crate::setup::Needs;

use super::lists::{BARE_METAL_TARGETS, QEMU_TARGET};

/// The kinds of step, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StepKind {
    /// Install missing targets, components, nightly Miri and the aarch64 cross tools.
    Setup,
    /// `cargo fmt --check`.
    Fmt,
    /// `cargo clippy -D warnings`.
    Clippy,
    /// Host tests.
    Test,
    /// Real programs (python3, sqlite3, gzip, xz, sort, git) with slub-core's
    /// malloc preloaded, output compared with glibc's (issue 18's smoke).
    RealPrograms,
    /// aarch64 tests under qemu.
    TestQemu,
    /// Bare-metal `no_std` builds.
    BuildNone,
    /// `cargo package` of every library crate, as it would be published.
    Package,
    /// The library crates checked with the minimum supported Rust version.
    Msrv,
    /// The demo kernels booted under qemu-system-* (`cargo xtask qemu`).
    QemuSystem,
    /// Loom model checks.
    Loom,
    /// Miri on the unsafe crates.
    Miri,
    /// Each `cargo fuzz` target for a bounded time.
    Fuzz,
    /// rustdoc with warnings denied.
    Doc,
}

impl StepKind {
    /// Every kind, in run order.
    pub const ALL: &[StepKind] = &[
        StepKind::Setup,
        StepKind::Fmt,
        StepKind::Clippy,
        StepKind::Test,
        StepKind::RealPrograms,
        StepKind::TestQemu,
        StepKind::BuildNone,
        StepKind::Package,
        StepKind::Msrv,
        StepKind::QemuSystem,
        StepKind::Loom,
        StepKind::Miri,
        StepKind::Fuzz,
        StepKind::Doc,
    ];

    /// The name used in headers, the table, the JSON and `--only`.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Setup => "setup",
            StepKind::Fmt => "fmt",
            StepKind::Clippy => "clippy",
            StepKind::Test => "test",
            StepKind::RealPrograms => "real-programs",
            StepKind::TestQemu => "test-qemu",
            StepKind::BuildNone => "build-none",
            StepKind::Package => "package",
            StepKind::Msrv => "msrv",
            StepKind::QemuSystem => "qemu-system",
            StepKind::Loom => "loom",
            StepKind::Miri => "miri",
            StepKind::Fuzz => "fuzz",
            StepKind::Doc => "doc",
        }
    }

    /// The kind called `name`, if any.
    pub fn from_name(name: &str) -> Option<StepKind> {
        StepKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Whether `--quick` runs this kind in the given configuration (and on the given target).
    pub(super) fn in_quick(self, config: &str) -> bool {
        match self {
            StepKind::Setup | StepKind::Fmt | StepKind::Doc => true,
            StepKind::Clippy | StepKind::Test | StepKind::BuildNone => config == "default",
            StepKind::TestQemu
            | StepKind::RealPrograms
            | StepKind::Package
            | StepKind::Msrv
            | StepKind::QemuSystem
            | StepKind::Loom
            | StepKind::Miri
            | StepKind::Fuzz => false,
        }
    }

    /// What `setup` must provide for this kind on `target`.
    pub(super) fn needs(self, target: &str, needs: &mut Needs) {
        match self {
            StepKind::Setup
            | StepKind::Test
            | StepKind::RealPrograms
            | StepKind::Package
            | StepKind::Loom
            | StepKind::Doc => {}
            StepKind::Msrv => needs.msrv = true,
            StepKind::Fmt => {
                needs.components.insert("rustfmt");
            }
            StepKind::Clippy => {
                needs.components.insert("clippy");
                // The nightly-peers row checks with nightly.
                needs.nightly_miri = true;
            }
            StepKind::TestQemu => {
                needs.targets.insert(QEMU_TARGET);
                needs.cross = true;
            }
            // `cargo xtask qemu` installs qemu-system-* itself (or says how).
            StepKind::BuildNone | StepKind::QemuSystem => {
                for t in BARE_METAL_TARGETS {
                    if *t == target {
                        needs.targets.insert(t);
                    }
                }
            }
            StepKind::Miri => needs.nightly_miri = true,
            StepKind::Fuzz => needs.cargo_fuzz = true,
        }
    }
}

/// What a row does when it runs.
#[derive(Debug)]
pub enum Action {
    /// Run one command.
    Cmd(Cmd),
    /// Install what the rows that run need.
    Setup(Needs),
    /// Nothing to run (the row is always skipped).
    Nothing,
}

/// One row of the matrix.
#[derive(Debug)]
pub struct Step {
    /// What kind of step this is.
    pub kind: StepKind,
    /// The target triple, or `host` for target-independent steps.
    pub target: String,
    /// The configuration (`default`, `stats`, `debug`, `ldxp-stxp`, `lse`, `loom`, or `-`).
    pub config: String,
    /// Extra identification where one (target, config, step) has several rows (loom test files).
    pub detail: Option<String>,
    /// What to run.
    pub action: Action,
    /// Why the row is skipped, if it is.
    pub skip: Option<String>,
}

impl Step {
    pub(super) fn new(kind: StepKind, target: &str, config: &str, action: Action) -> Step {
        Step {
            kind,
            target: target.to_string(),
            config: config.to_string(),
            detail: None,
            action,
            skip: None,
        }
    }

    /// The command line as shown in headers and reports.
    pub fn command_line(&self) -> String {
        match &self.action {
            Action::Cmd(cmd) => cmd.display(),
            Action::Setup(needs) => format!("ensure installed: {}", needs.describe()),
            Action::Nothing => String::new(),
        }
    }
}

/// Which rows run.
#[derive(Debug, Default)]
pub struct Selection {
    /// `--quick`: only the fast rows.
    pub quick: bool,
    /// `--only`: only these kinds (empty: all).
    pub only: BTreeSet<StepKind>,
}

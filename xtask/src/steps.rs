//! The matrix definition: every (target, configuration, step) row that `cargo xtask ci` runs, in order.

use std::collections::BTreeSet;
use std::path::Path;

use crate::run::Cmd;
use crate::setup::Needs;

// ---------------------------------------------------------------------------
// Crate lists. A new crate is one line here; every step picks it up.
// ---------------------------------------------------------------------------

/// Library crates: all `#![no_std]` with default features (the kernel build), hosted pieces
/// behind `std`; `stats` and `debug` where a crate has something to gate (see
/// [`crates_with_feature`]). They are linted, tested on the host and under qemu, built
/// bare-metal, packaged, checked on the MSRV, and searched for `tests/loom_*.rs`. Some also have
/// `testing` (test support, not part of the API): their own tests turn it on through a
/// dev-dependency on themselves, so no row has to name it.
pub const LIB_CRATES: &[&str] = &[
    "arch-api",
    "arch-x86_64",
    "arch-aarch64",
    "arch-ia64-sim",
    "vmap-core",
    "zap-walker",
    "vmap-lazy",
    "slub-core",
];

/// Binary crates (and the preloadable `cdylib`): linted, tested and documented through
/// `--workspace` only.
pub const BIN_CRATES: &[&str] = &["harness", "xtask", "demo-kernel", "kmm-malloc"];

/// Crates with `unsafe` code that Miri checks (`cargo +nightly miri test -p …`).
/// Longest Miri run first: the Miri rows run in lanes (`run.rs`), each
/// taking the next row when it is free, so the long ones must not come last.
pub const UNSAFE_CRATES: &[&str] = &[
    "vmap-core",
    "zap-walker",
    "slub-core",
    "vmap-lazy",
    "arch-api",
    "arch-x86_64",
    "arch-aarch64",
    "arch-ia64-sim",
];

/// Per-crate MIRIFLAGS. slub-core:
/// - reuses slab memory that held atomics (the per-CPU and slab DW-CAS words)
///   for plain objects; miri's weak-memory store-buffer emulation aborts on
///   that with an internal error ("cannot have empty store buffer", not a UB
///   report), so the emulation is off (aliasing, data-race and UB checks stay);
/// - has a test binary whose `#[global_allocator]` is a static slab allocator
///   that, like a kernel's, keeps its slab pages until the process ends, which
///   miri reports as leaks; the other tests check that every page comes back
///   explicitly (`PhysArena::frames_in_use() == 0` after `destroy`).
pub const MIRI_FLAGS: &[(&str, &str)] = &[(
    "slub-core",
    "-Zmiri-disable-weak-memory-emulation -Zmiri-ignore-leaks",
)];

/// The `cargo fuzz` targets: (crate, target). Each crate's `fuzz/` is its own
/// cargo-fuzz workspace (listed in the root `exclude`); each target runs for
/// [`FUZZ_SECONDS`] in the `fuzz` rows.
pub const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("vmap-core", "differential"),
    ("zap-walker", "walk"),
    ("slub-core", "ops"),
];
/// Seconds each fuzz target runs in CI (libFuzzer's `-max_total_time`).
pub const FUZZ_SECONDS: u32 = 60;
/// libFuzzer options of the CI rows besides the time: inputs of up to 4 KiB
/// from the start (`-len_control=0`; the targets read operation sequences,
/// and a minute is too short for libFuzzer's slow growth from 4 bytes).
const FUZZ_FLAGS: &[&str] = &["-len_control=0", "-max_len=4096"];

/// The crates whose code differs between LSE (`casp`) and `ldxp`/`stxp`: the
/// DW-CAS users. The `lse` qemu configuration tests only these.
pub const DWCAS_CRATES: &[&str] = &["arch-api", "arch-aarch64", "arch-ia64-sim", "slub-core"];

/// Library crates that are not tested on the aarch64 (qemu) target.
pub const NOT_ON_AARCH64: &[&str] = &["arch-x86_64"];

// ---------------------------------------------------------------------------
// Targets and configurations (SPEC.md "Targets and configurations").
// ---------------------------------------------------------------------------

/// The hosted target tests run on natively.
pub const HOST_TARGET: &str = "x86_64-unknown-linux-gnu";
/// The hosted target tests run on under `qemu-aarch64 -cpu max` (runner in .cargo/config.toml).
pub const QEMU_TARGET: &str = "aarch64-unknown-linux-gnu";
/// The bare-metal targets every library crate must build for without `std`.
pub const BARE_METAL_TARGETS: &[&str] = &["x86_64-unknown-none", "aarch64-unknown-none"];
/// Feature configurations: `default` adds no feature, the others enable `<crate>/<config>` for
/// every library crate that declares the feature `<config>`.
pub const FEATURE_CONFIGS: &[&str] = &["default", "stats", "debug"];
/// The qemu configurations: (name, RUSTFLAGS or none, target directory).
const QEMU_CONFIGS: &[(&str, Option<&str>, &str)] = &[
    ("ldxp-stxp", None, "target/xtask/aarch64"),
    (
        "lse",
        Some("-C target-feature=+lse"),
        "target/xtask/aarch64-lse",
    ),
];
/// The minimum supported Rust version: `rust-version` in the workspace `Cargo.toml`, as a rustup
/// toolchain name. The `msrv` rows check the library crates with it.
pub const MSRV_TOOLCHAIN: &str = "1.85.0";
/// Loom's bound on preemptions per execution.
const LOOM_MAX_PREEMPTIONS: &str = "3";

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
    fn in_quick(self, config: &str) -> bool {
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
    fn needs(self, target: &str, needs: &mut Needs) {
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
    fn new(kind: StepKind, target: &str, config: &str, action: Action) -> Step {
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

/// `--features a/CONFIG,b/CONFIG,…` for the crates in `crates`, or nothing for `default` (or
/// when `crates` is empty).
fn feature_args<S: AsRef<str>>(crates: &[S], config: &str) -> Vec<String> {
    if config == "default" || crates.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> = crates
        .iter()
        .map(|c| format!("{}/{config}", c.as_ref()))
        .collect();
    vec!["--features".to_string(), list.join(",")]
}

/// The names declared in the `[features]` table of `manifest` (a `Cargo.toml`'s text).
fn declared_features(manifest: &str) -> Vec<String> {
    let mut in_features = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_features = line == "[features]";
        } else if in_features && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                found.push(name.trim().to_string());
            }
        }
    }
    found
}

/// The library crates that declare the feature `feature` (a crate declares only the features
/// that gate something, so `stats` and `debug` are not in every crate).
pub fn crates_with_feature(root: &Path, feature: &str) -> Vec<&'static str> {
    LIB_CRATES
        .iter()
        .copied()
        .filter(|c| {
            std::fs::read_to_string(root.join(c).join("Cargo.toml"))
                .map(|m| declared_features(&m).iter().any(|f| f == feature))
                .unwrap_or(false)
        })
        .collect()
}

/// `-p a -p b …`.
fn package_args(crates: &[&str]) -> Vec<String> {
    crates
        .iter()
        .flat_map(|c| ["-p".to_string(), c.to_string()])
        .collect()
}

/// The `tests/loom_*.rs` files of every library crate, as (crate, test name), sorted.
pub fn loom_tests(root: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for krate in LIB_CRATES {
        let Ok(entries) = std::fs::read_dir(root.join(krate).join("tests")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".rs") {
                if stem.starts_with("loom_") && entry.path().is_file() {
                    found.push((krate.to_string(), stem.to_string()));
                }
            }
        }
    }
    found.sort();
    found
}

/// Every row, in run order, with skip reasons filled in from `sel`.
pub fn matrix(root: &Path, sel: &Selection) -> Vec<Step> {
    let mut rows = Vec::new();

    rows.push(Step::new(
        StepKind::Fmt,
        "host",
        "-",
        Action::Cmd(Cmd::new("cargo").args(["fmt", "--all", "--", "--check"])),
    ));

    for config in FEATURE_CONFIGS {
        let cmd = Cmd::new("cargo")
            .args(["clippy", "--workspace", "--all-targets"])
            .args(feature_args(&crates_with_feature(root, config), config))
            .args(["--", "-D", "warnings"]);
        rows.push(Step::new(
            StepKind::Clippy,
            "host",
            config,
            Action::Cmd(cmd),
        ));
    }

    // The nightly-only peer of `harness vmap-bench` (the `vmem` crate):
    // type-checked on the nightly that the Miri rows install.
    let nightly = Cmd::new("cargo")
        .args([
            "+nightly",
            "check",
            "-p",
            "harness",
            "--features",
            "nightly-peers",
        ])
        .env("CARGO_TARGET_DIR", "target/xtask/nightly");
    rows.push(Step::new(
        StepKind::Clippy,
        "host",
        "nightly-peers",
        Action::Cmd(nightly),
    ));

    for config in FEATURE_CONFIGS {
        let cmd = Cmd::new("cargo")
            .args(["test", "--workspace"])
            .args(feature_args(&crates_with_feature(root, config), config));
        rows.push(Step::new(
            StepKind::Test,
            HOST_TARGET,
            config,
            Action::Cmd(cmd),
        ));
    }

    // Optimised code once too: inline asm register allocation differs with
    // optimisation (a cmpxchg16b operand landing in RBX only crashed in release).
    rows.push(Step::new(
        StepKind::Test,
        HOST_TARGET,
        "release",
        Action::Cmd(Cmd::new("cargo").args(["test", "--workspace", "--release"])),
    ));

    // The preloadable malloc under real programs, small inputs (< 2 min):
    // the script installs the Debian packages it needs when root (as `setup`
    // does for the cross tools) and fails on any output that differs from
    // glibc's or any crash. The long runs: `harness/scripts/real-programs.sh`.
    let real = Cmd::new("sh").args([
        "-c",
        "cargo build --release -p kmm-malloc && \
         harness/scripts/real-programs.sh --quick --install",
    ]);
    rows.push(Step::new(
        StepKind::RealPrograms,
        HOST_TARGET,
        "default",
        Action::Cmd(real),
    ));

    let aarch64_crates: Vec<&str> = LIB_CRATES
        .iter()
        .copied()
        .filter(|c| !NOT_ON_AARCH64.contains(c))
        .collect();
    for (config, rustflags, target_dir) in QEMU_CONFIGS {
        let crates: Vec<&str> = if rustflags.is_some() {
            DWCAS_CRATES.to_vec()
        } else {
            aarch64_crates.clone()
        };
        let mut cmd = Cmd::new("cargo")
            .args(["test", "--target", QEMU_TARGET])
            .args(package_args(&crates));
        if let Some(flags) = rustflags {
            // Doc-tests are compiled by rustdoc, which reads RUSTDOCFLAGS:
            // without the same target features, the generic code they
            // instantiate would be assembled for the baseline (no `casp`).
            cmd = cmd.env("RUSTFLAGS", flags).env("RUSTDOCFLAGS", flags);
        }
        cmd = cmd.env("CARGO_TARGET_DIR", target_dir);
        rows.push(Step::new(
            StepKind::TestQemu,
            QEMU_TARGET,
            config,
            Action::Cmd(cmd),
        ));
    }

    // Default features are the kernel build (no `std`), so these build exactly what a
    // kernel that names the crates gets.
    for target in BARE_METAL_TARGETS {
        for config in FEATURE_CONFIGS {
            let cmd = Cmd::new("cargo")
                .args(["build", "--target", target])
                .args(package_args(LIB_CRATES))
                .args(feature_args(&crates_with_feature(root, config), config));
            rows.push(Step::new(
                StepKind::BuildNone,
                target,
                config,
                Action::Cmd(cmd),
            ));
        }
    }

    // Every library crate packaged as it would be published: the manifest as rewritten for the
    // registry (versions beside path dependencies, no path-only dev-dependencies), the files
    // the package holds, and a build of each from its package alone (interdependent crates
    // through cargo's local overlay registry). `--allow-dirty`: local runs on a work tree.
    // Cargo unpacks the overlay's crates under `$CARGO_HOME/registry/{src,cache}/-<hash>/`,
    // keyed by the workspace's path and the version, and does not unpack them again: a second
    // run in the same folder after a change (same version) would build the first run's
    // sources, and a reused target directory its builds of them (registry crates are taken
    // as immutable). So both go first: the unpacked copies of our crates (only under the
    // overlay registries, whose directory names start with `-`) and the step's own target
    // directory, `target/xtask/package`.
    let stale: Vec<String> = LIB_CRATES
        .iter()
        .flat_map(|c| {
            [
                format!("\"$reg\"/src/-*/{c}-[0-9]*"),
                format!("\"$reg\"/cache/-*/{c}-[0-9]*.crate"),
            ]
        })
        .collect();
    let excludes: Vec<String> = BIN_CRATES
        .iter()
        .map(|c| format!("--exclude {c}"))
        .collect();
    let script = format!(
        "reg=\"${{CARGO_HOME:-$HOME/.cargo}}/registry\"; rm -rf target/xtask/package {}; \
         CARGO_TARGET_DIR=target/xtask/package exec cargo package --workspace --allow-dirty {}",
        stale.join(" "),
        excludes.join(" ")
    );
    let package = Cmd::new("sh").args(["-c", script.as_str()]);
    rows.push(Step::new(
        StepKind::Package,
        "host",
        "default",
        Action::Cmd(package),
    ));

    // The MSRV: the library crates as a kernel builds them (default features) and hosted
    // (`std`), on the oldest toolchain `rust-version` promises. Libraries only: the tests,
    // benches and the harness may use newer dev-dependencies.
    for config in ["default", "std"] {
        let cmd = Cmd::new("cargo")
            .args([format!("+{MSRV_TOOLCHAIN}"), "check".to_string()])
            .args(package_args(LIB_CRATES))
            .args(feature_args(&crates_with_feature(root, config), config))
            .env("CARGO_TARGET_DIR", "target/xtask/msrv");
        rows.push(Step::new(StepKind::Msrv, "host", config, Action::Cmd(cmd)));
    }

    // The demo kernels: a normal boot and the deliberate-fault boot per port,
    // each on one CPU and on 4, and at 4 CPUs the build without shootdowns,
    // which smp-loop's cross-CPU stale check must catch, and on one CPU the
    // two W^X boots (a write to text, a call into data: each must fault)
    // and the guard-page boot (a write one byte past a vmalloc area must be
    // reported as a guard page hit; issue 17), and on x86_64 at 4 CPUs the
    // build whose `pin` guard masks no interrupt (a check must fail) (issue 16; 1 to 5 s each under TCG on 2 host cores).
    const ONE_CPU: &[(&str, &[&str])] = &[
        ("default", &[]),
        ("fault-test", &["--fault-test"]),
        ("wx-write", &["--fault-test=wx-write"]),
        ("wx-exec", &["--fault-test=wx-exec"]),
        ("guard", &["--fault-test=guard"]),
    ];
    const SMP4: &[(&str, &[&str])] = &[
        ("smp4", &["--smp", "4"]),
        ("smp4-fault-test", &["--smp", "4", "--fault-test"]),
        (
            "smp4-no-shootdown",
            &["--smp", "4", "--fault-test=no-shootdown"],
        ),
    ];
    // The build whose `pin` masks nothing, on x86_64 only: caught in 16 of
    // 16 boots there, but in 23 of 32 on aarch64, where qemu takes an
    // interrupt only between translated blocks and a tick seldom lands
    // inside a pinned section (`cargo xtask qemu aarch64 --smp 4
    // --fault-test=no-pin` runs it by hand).
    const X86_ONLY: &[(&str, &[&str])] = &[("smp4-no-pin", &["--smp", "4", "--fault-test=no-pin"])];
    for port in crate::qemu::PORTS {
        let x86_only = if port.name == "x86_64" { X86_ONLY } else { &[] };
        for &(config, extra) in ONE_CPU.iter().chain(SMP4).chain(x86_only) {
            let cmd = Cmd::new("cargo")
                .args(["xtask", "qemu", port.name])
                .args(extra.iter().copied());
            rows.push(Step::new(
                StepKind::QemuSystem,
                port.target,
                config,
                Action::Cmd(cmd),
            ));
        }
    }

    let loom = loom_tests(root);
    if loom.is_empty() {
        let mut step = Step::new(StepKind::Loom, "host", "loom", Action::Nothing);
        step.skip = Some("no tests/loom_*.rs in any library crate".to_string());
        rows.push(step);
    }
    for (krate, test) in loom {
        let cmd = Cmd::new("cargo")
            .args(["test", "--release", "-p", &krate, "--test", &test])
            .env("RUSTFLAGS", "--cfg kmm_loom")
            .env("LOOM_MAX_PREEMPTIONS", LOOM_MAX_PREEMPTIONS)
            .env("CARGO_TARGET_DIR", "target/xtask/loom");
        let mut step = Step::new(StepKind::Loom, "host", "loom", Action::Cmd(cmd));
        step.detail = Some(format!("{krate}/{test}"));
        rows.push(step);
    }

    // One row per crate, so a failure names its crate and a crate can carry
    // its own MIRIFLAGS.
    for krate in UNSAFE_CRATES {
        let mut miri = Cmd::new("cargo")
            .args(["+nightly", "miri", "test", "-p", krate])
            .env("CARGO_TARGET_DIR", "target/xtask/miri");
        if let Some((_, flags)) = MIRI_FLAGS.iter().find(|(c, _)| c == krate) {
            miri = miri.env("MIRIFLAGS", flags);
        }
        let mut step = Step::new(StepKind::Miri, "host", "default", Action::Cmd(miri));
        step.detail = Some((*krate).to_string());
        rows.push(step);
    }

    // Each fuzz target for a bounded time, from its crate's cargo-fuzz
    // workspace (nightly, libFuzzer, AddressSanitizer). The corpus is kept in
    // `<crate>/fuzz/corpus/<target>` (ignored by git), so a local rerun starts
    // from what earlier runs found; a crash fails the row and leaves its
    // input in `<crate>/fuzz/artifacts/<target>/` (turn it into a regression
    // test in the crate's `tests/`).
    for (krate, target) in FUZZ_TARGETS {
        let time = format!("-max_total_time={FUZZ_SECONDS}");
        let fuzz = Cmd::new("cargo")
            .args(["+nightly", "fuzz", "run", "--fuzz-dir"])
            .args([
                format!("{krate}/fuzz"),
                target.to_string(),
                "--".to_string(),
                time,
            ])
            .args(FUZZ_FLAGS.iter().copied())
            .env("CARGO_TARGET_DIR", "target/xtask/fuzz");
        let mut step = Step::new(StepKind::Fuzz, "host", "default", Action::Cmd(fuzz));
        step.detail = Some(format!("{krate}/{target}"));
        rows.push(step);
    }

    // The workspace's docs (the harness turns `std` on everywhere) ...
    let doc = Cmd::new("cargo")
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    rows.push(Step::new(
        StepKind::Doc,
        "host",
        "default",
        Action::Cmd(doc),
    ));
    // ... and the library crates' docs as a kernel (default features) builds them: no link
    // may point at a hosted-only item.
    let doc_kernel = Cmd::new("cargo")
        .args(["doc", "--no-deps"])
        .args(package_args(LIB_CRATES))
        .env("RUSTDOCFLAGS", "-D warnings")
        .env("CARGO_TARGET_DIR", "target/xtask/doc-kernel");
    rows.push(Step::new(
        StepKind::Doc,
        "host",
        "kernel",
        Action::Cmd(doc_kernel),
    ));
    // Each library crate's example (the doc-test at the top of its `lib.rs`) also runs in every
    // `cargo test` row above (no target selection: unit, integration and doc-tests); this row
    // runs them alone, with `std` named, as a reader of the docs would.
    let doctest = Cmd::new("cargo")
        .args(["test", "--doc"])
        .args(package_args(LIB_CRATES))
        .args(feature_args(&crates_with_feature(root, "std"), "std"));
    rows.push(Step::new(
        StepKind::Doc,
        "host",
        "doctest",
        Action::Cmd(doctest),
    ));

    // Skip reasons: --only first (the developer's explicit choice), then --quick.
    let selected = |kind: StepKind| sel.only.is_empty() || sel.only.contains(&kind);
    for row in &mut rows {
        if row.skip.is_some() {
            continue;
        }
        if !selected(row.kind) {
            row.skip = Some("--only".to_string());
        } else if sel.quick && !row.kind.in_quick(&row.config) {
            row.skip = Some("--quick".to_string());
        }
    }

    // Setup installs exactly what the rows that run need.
    // `--only setup` on its own prepares for every row (that --quick would keep).
    let only_setup = sel.only.len() == 1 && sel.only.contains(&StepKind::Setup);
    let mut needs = Needs::default();
    for row in &rows {
        let wanted = only_setup
            && row.skip.as_deref() == Some("--only")
            && (!sel.quick || row.kind.in_quick(&row.config));
        if row.skip.is_none() || wanted {
            row.kind.needs(&row.target, &mut needs);
        }
    }
    let mut setup = Step::new(StepKind::Setup, "host", "-", Action::Setup(needs));
    if !selected(StepKind::Setup) {
        setup.skip = Some("--only".to_string());
    }
    rows.insert(0, setup);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(sel: &Selection) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        matrix(root, sel)
            .iter()
            .filter(|s| s.skip.is_none())
            .map(|s| format!("{}/{}/{}", s.kind.name(), s.target, s.config))
            .collect()
    }

    #[test]
    fn quick_runs_the_fast_rows_only() {
        let sel = Selection {
            quick: true,
            ..Selection::default()
        };
        assert_eq!(
            running(&sel),
            [
                "setup/host/-",
                "fmt/host/-",
                "clippy/host/default",
                "test/x86_64-unknown-linux-gnu/default",
                "build-none/x86_64-unknown-none/default",
                "build-none/aarch64-unknown-none/default",
                "doc/host/default",
                "doc/host/kernel",
                "doc/host/doctest",
            ]
        );
    }

    #[test]
    fn qemu_system_rows_boot_both_ports_twice() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let rows: Vec<String> = matrix(root, &Selection::default())
            .iter()
            .filter(|s| s.kind == StepKind::QemuSystem)
            .map(|s| format!("{}/{}: {}", s.target, s.config, s.command_line()))
            .collect();
        assert_eq!(
            rows,
            [
                "aarch64-unknown-none/default: cargo xtask qemu aarch64",
                "aarch64-unknown-none/fault-test: cargo xtask qemu aarch64 --fault-test",
                "aarch64-unknown-none/wx-write: cargo xtask qemu aarch64 --fault-test=wx-write",
                "aarch64-unknown-none/wx-exec: cargo xtask qemu aarch64 --fault-test=wx-exec",
                "aarch64-unknown-none/guard: cargo xtask qemu aarch64 --fault-test=guard",
                "aarch64-unknown-none/smp4: cargo xtask qemu aarch64 --smp 4",
                "aarch64-unknown-none/smp4-fault-test: cargo xtask qemu aarch64 --smp 4 --fault-test",
                "aarch64-unknown-none/smp4-no-shootdown: cargo xtask qemu aarch64 --smp 4 --fault-test=no-shootdown",
                "x86_64-unknown-none/default: cargo xtask qemu x86_64",
                "x86_64-unknown-none/fault-test: cargo xtask qemu x86_64 --fault-test",
                "x86_64-unknown-none/wx-write: cargo xtask qemu x86_64 --fault-test=wx-write",
                "x86_64-unknown-none/wx-exec: cargo xtask qemu x86_64 --fault-test=wx-exec",
                "x86_64-unknown-none/guard: cargo xtask qemu x86_64 --fault-test=guard",
                "x86_64-unknown-none/smp4: cargo xtask qemu x86_64 --smp 4",
                "x86_64-unknown-none/smp4-fault-test: cargo xtask qemu x86_64 --smp 4 --fault-test",
                "x86_64-unknown-none/smp4-no-shootdown: cargo xtask qemu x86_64 --smp 4 --fault-test=no-shootdown",
                "x86_64-unknown-none/smp4-no-pin: cargo xtask qemu x86_64 --smp 4 --fault-test=no-pin",
            ]
        );
    }

    #[test]
    fn features_name_the_crates_that_declare_them() {
        assert!(feature_args(LIB_CRATES, "default").is_empty());
        assert!(feature_args::<&str>(&[], "stats").is_empty());
        let args = feature_args(&["a", "b"], "stats");
        assert_eq!(args, ["--features", "a/stats,b/stats"]);
        let manifest = "[package]\nname = \"x\"\n[features]\n# c\ndefault = []\nstd = [\"y/std\"]\n\n[dependencies]\nz = \"1\"\n";
        assert_eq!(declared_features(manifest), ["default", "std"]);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(crates_with_feature(root, "std"), LIB_CRATES);
        let stats = crates_with_feature(root, "stats");
        assert!(stats.contains(&"slub-core") && !stats.contains(&"arch-api"));
    }

    /// The first fenced code block of `text` whose opening fence is `fence`, its lines as
    /// written.
    fn first_block<'a>(text: impl Iterator<Item = &'a str>, fence: &str) -> Vec<&'a str> {
        text.skip_while(|l| l.trim_end() != fence)
            .skip(1)
            .take_while(|l| l.trim_end() != "```")
            .collect()
    }

    #[test]
    fn readme_examples_are_the_crate_doc_tests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for krate in LIB_CRATES {
            let lib = std::fs::read_to_string(root.join(krate).join("src/lib.rs")).unwrap();
            let docs = lib
                .lines()
                .map_while(|l| l.strip_prefix("//!"))
                .map(|l| l.strip_prefix(' ').unwrap_or(l));
            // Hidden doc-test lines (`# …`) are not shown in the README.
            let doc_test: Vec<&str> = first_block(docs, "```")
                .into_iter()
                .filter(|l| *l != "#" && !l.starts_with("# "))
                .collect();
            let readme = std::fs::read_to_string(root.join(krate).join("README.md")).unwrap();
            let shown = first_block(readme.lines(), "```rust");
            assert!(
                !doc_test.is_empty(),
                "{krate}: lib.rs opens with no example"
            );
            assert_eq!(
                shown, doc_test,
                "{krate}: README.md's example differs from the doc-test at the top of src/lib.rs"
            );
        }
    }

    #[test]
    fn msrv_toolchain_is_the_declared_rust_version() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let declared = manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = "))
            .expect("workspace rust-version")
            .trim_matches('"');
        assert!(
            MSRV_TOOLCHAIN == declared || MSRV_TOOLCHAIN.starts_with(&format!("{declared}.")),
            "rust-version {declared} but the msrv rows use {MSRV_TOOLCHAIN}"
        );
    }

    #[test]
    fn only_setup_prepares_for_everything() {
        let sel = Selection {
            only: [StepKind::Setup].into(),
            ..Selection::default()
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let rows = matrix(root, &sel);
        let Action::Setup(needs) = &rows[0].action else {
            panic!("setup is the first row")
        };
        assert!(needs.cross && needs.nightly_miri && needs.msrv && needs.cargo_fuzz);
        assert!(needs.targets.contains(QEMU_TARGET));
        assert_eq!(running(&sel), ["setup/host/-"]);
    }

    #[test]
    fn every_fuzz_crate_has_its_rows_and_is_excluded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        for (krate, target) in FUZZ_TARGETS {
            let dir = root.join(krate).join("fuzz");
            let fuzz = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            assert!(
                fuzz.contains(&format!("name = \"{target}\"")),
                "{krate}: {target}"
            );
            assert!(
                manifest.contains(&format!("\"{krate}/fuzz\"")),
                "{krate}/fuzz is in the root `exclude`"
            );
        }
        let sel = Selection {
            only: [StepKind::Fuzz].into(),
            ..Selection::default()
        };
        let rows: Vec<String> = matrix(root, &sel)
            .iter()
            .filter(|s| s.skip.is_none() && s.kind == StepKind::Fuzz)
            .map(|s| s.command_line())
            .collect();
        assert_eq!(rows.len(), FUZZ_TARGETS.len());
        assert!(
            rows[0].contains("fuzz run --fuzz-dir vmap-core/fuzz differential -- -max_total_time=")
        );
    }
}

//! Building the row list: every row in run order, the per-crate arguments it needs, and the skip reasons from the selection.

use std::path::Path;

use crate::run::Cmd;
use crate::setup::Needs;

use super::lists::*;
use super::row::{Action, Selection, Step, StepKind};

/// `--features a/CONFIG,b/CONFIG,…` for the crates in `crates`, or nothing for `default` (or
/// when `crates` is empty).
pub(super) fn feature_args<S: AsRef<str>>(crates: &[S], config: &str) -> Vec<String> {
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
pub(super) fn declared_features(manifest: &str) -> Vec<String> {
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

    // The feature configurations change only the library crates, so their
    // rows test those; the harness, the preloadable malloc and the demo
    // kernel's host tests (a large part of a workspace row's build and run)
    // run in the default and release rows, so CI fits its budget on a slow
    // day.
    for config in FEATURE_CONFIGS {
        let crates = if *config == "default" {
            vec!["--workspace".to_string()]
        } else {
            package_args(LIB_CRATES)
        };
        let cmd = Cmd::new("cargo")
            .args(["test"])
            .args(crates)
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

    // arch-api alone: in the workspace its features unify with kmm-malloc's
    // `rseq-resident`, so the rows above test the rseq sections that stay
    // armed; this one tests the default build, which disarms them.
    rows.push(Step::new(
        StepKind::Test,
        HOST_TARGET,
        "arch-api-alone",
        Action::Cmd(Cmd::new("cargo").args([
            "test",
            "-p",
            "arch-api",
            "--features",
            "testing",
            "--lib",
        ])),
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

    // One row per crate, so a failure names its crate and a crate can carry
    // its own MIRIFLAGS. Miri, loom and fuzz rows come together, Miri's
    // longest first: `run_all` runs them side by side in lanes, and the short
    // loom and fuzz rows then fill whichever lane frees up.
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

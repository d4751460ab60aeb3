//! Tests of the matrix: which rows run, their commands, and the files they must agree with.

use std::path::Path;

use super::matrix::{declared_features, feature_args};
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

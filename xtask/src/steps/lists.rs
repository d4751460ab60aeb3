//! The crate lists, targets and configurations the matrix is built from.

// ---------------------------------------------------------------------------
// Crate lists. A new crate is one line here; every step picks it up.
// ---------------------------------------------------------------------------

/// Library crates: all `#![no_std]` with default features (the kernel build), hosted pieces
/// behind `std`; `stats` and `debug` where a crate has something to gate (see
/// [`crates_with_feature`](super::crates_with_feature)). They are linted, tested on the host
/// and under qemu, built bare-metal, packaged, checked on the MSRV, and searched for
/// `tests/loom_*.rs`. Some also have `testing` (test support, not part of the API): their own
/// tests turn it on through a dev-dependency on themselves, so no row has to name it.
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
pub const FUZZ_SECONDS: u32 = 30;
/// libFuzzer options of the CI rows besides the time: inputs of up to 4 KiB
/// from the start (`-len_control=0`; the targets read operation sequences,
/// and a minute is too short for libFuzzer's slow growth from 4 bytes).
pub(super) const FUZZ_FLAGS: &[&str] = &["-len_control=0", "-max_len=4096"];

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
pub(super) const QEMU_CONFIGS: &[(&str, Option<&str>, &str)] = &[
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
pub(super) const LOOM_MAX_PREEMPTIONS: &str = "3";

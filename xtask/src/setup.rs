//! The `setup` row: installs the rustup targets, components, nightly Miri and aarch64 cross tools
//! that the rows which run need, and only those that are missing.

use std::collections::BTreeSet;
use std::path::Path;

use crate::run::{Cmd, Sink};

/// The Debian packages that provide the aarch64 cross linker, libc and qemu-user runner.
const CROSS_PACKAGES: &[&str] = &[
    "qemu-user",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
];
/// The aarch64 sysroot that `qemu-aarch64 -L` and the cross linker use.
const CROSS_SYSROOT: &str = "/usr/aarch64-linux-gnu/lib";

/// What the rows that run need installed.
#[derive(Clone, Debug, Default)]
pub struct Needs {
    /// rustup targets of the default toolchain.
    pub targets: BTreeSet<&'static str>,
    /// rustup components of the default toolchain (`rustfmt`, `clippy`).
    pub components: BTreeSet<&'static str>,
    /// A nightly toolchain with `miri` and `rust-src`.
    pub nightly_miri: bool,
    /// A nightly toolchain and `cargo-fuzz` (the `fuzz` rows).
    pub cargo_fuzz: bool,
    /// `qemu-aarch64`, `aarch64-linux-gnu-gcc` and the aarch64 libc.
    pub cross: bool,
    /// The MSRV toolchain (`steps::MSRV_TOOLCHAIN`, minimal profile).
    pub msrv: bool,
}

impl Needs {
    /// A short list for the header, e.g. `targets x86_64-unknown-none; components clippy`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.targets.is_empty() {
            parts.push(format!("targets {}", join(&self.targets)));
        }
        if !self.components.is_empty() {
            parts.push(format!("components {}", join(&self.components)));
        }
        if self.nightly_miri {
            parts.push("nightly with miri, rust-src".to_string());
        }
        if self.cargo_fuzz {
            parts.push("nightly with cargo-fuzz".to_string());
        }
        if self.cross {
            parts.push("qemu-aarch64, aarch64-linux-gnu-gcc".to_string());
        }
        if self.msrv {
            parts.push(format!("toolchain {}", crate::steps::MSRV_TOOLCHAIN));
        }
        if parts.is_empty() {
            "nothing".to_string()
        } else {
            parts.join("; ")
        }
    }
}

fn join(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(", ")
}

/// Checks each need, installs what is missing; `Err` lists everything that could not be provided.
pub fn run(root: &Path, needs: &Needs, sink: Sink) -> Result<(), String> {
    let setup = Setup { root, sink };
    let mut problems = Vec::new();
    if !needs.targets.is_empty() {
        problems.extend(setup.targets(&needs.targets).err());
    }
    if !needs.components.is_empty() {
        problems.extend(setup.components(&needs.components).err());
    }
    if needs.nightly_miri {
        problems.extend(setup.nightly_miri().err());
    }
    if needs.cargo_fuzz {
        problems.extend(setup.cargo_fuzz().err());
    }
    if needs.cross {
        problems.extend(setup.cross().err());
    }
    if needs.msrv {
        problems.extend(setup.msrv().err());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

struct Setup<'a> {
    root: &'a Path,
    sink: Sink,
}

impl Setup<'_> {
    fn capture(&self, program: &str, args: &[&str]) -> Option<String> {
        Cmd::new(program).args(args).capture(self.root)
    }

    fn install(&self, cmd: Cmd) -> Result<(), String> {
        let line = cmd.display();
        eprintln!("    setup: {line}");
        cmd.stream(self.root, self.sink, None)
            .map_err(|e| format!("`{line}` failed: {e}"))
    }

    fn rustup_list(&self, args: &[&str]) -> Result<Vec<String>, String> {
        let out = self.capture("rustup", args).ok_or_else(|| {
            format!(
                "`rustup {}` failed (is rustup installed? see https://rustup.rs)",
                args.join(" ")
            )
        })?;
        Ok(out.lines().map(|l| l.trim().to_string()).collect())
    }

    fn targets(&self, wanted: &BTreeSet<&str>) -> Result<(), String> {
        let installed = self.rustup_list(&["target", "list", "--installed"])?;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|t| !installed.iter().any(|i| i == t))
            .collect();
        if missing.is_empty() {
            eprintln!("    setup: targets present: {}", join(wanted));
            return Ok(());
        }
        self.install(Cmd::new("rustup").args(["target", "add"]).args(missing))
    }

    fn components(&self, wanted: &BTreeSet<&str>) -> Result<(), String> {
        // Installed components are listed as `clippy-x86_64-unknown-linux-gnu` or `rust-src`.
        let installed = self.rustup_list(&["component", "list", "--installed"])?;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|c| !installed.iter().any(|i| component_is(i, c)))
            .collect();
        if missing.is_empty() {
            eprintln!("    setup: components present: {}", join(wanted));
            return Ok(());
        }
        self.install(Cmd::new("rustup").args(["component", "add"]).args(missing))
    }

    /// The toolchain, then Miri's sysroot (`cargo miri setup`): built here,
    /// once, because the Miri rows then run in parallel lanes and must not
    /// race to build it.
    fn nightly_miri(&self) -> Result<(), String> {
        self.nightly_miri_toolchain()?;
        self.install(Cmd::new("cargo").args(["+nightly", "miri", "setup"]))
    }

    fn nightly_miri_toolchain(&self) -> Result<(), String> {
        if self
            .capture("cargo", &["+nightly", "miri", "--version"])
            .is_some()
        {
            let installed = self.rustup_list(&["+nightly", "component", "list", "--installed"])?;
            if installed.iter().any(|i| component_is(i, "rust-src")) {
                eprintln!("    setup: nightly with miri and rust-src present");
                return Ok(());
            }
            return self.install(Cmd::new("rustup").args([
                "+nightly",
                "component",
                "add",
                "rust-src",
            ]));
        }
        let toolchains = self.rustup_list(&["toolchain", "list"])?;
        if toolchains.iter().any(|t| t.starts_with("nightly")) {
            self.install(Cmd::new("rustup").args([
                "+nightly",
                "component",
                "add",
                "miri",
                "rust-src",
            ]))
        } else {
            self.install(Cmd::new("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
                "--component",
                "miri,rust-src",
            ]))
        }
    }

    /// A nightly toolchain (minimal, if there is none) and `cargo-fuzz` from
    /// crates.io (`cargo install --locked`: about 75 s of building on two
    /// loaded cores, once; later runs find it on PATH).
    fn cargo_fuzz(&self) -> Result<(), String> {
        let toolchains = self.rustup_list(&["toolchain", "list"])?;
        if !toolchains.iter().any(|t| t.starts_with("nightly")) {
            self.install(Cmd::new("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
            ]))?;
        }
        if let Some(v) = self.capture("cargo", &["fuzz", "--version"]) {
            eprintln!("    setup: nightly and {} present", v.trim());
            return Ok(());
        }
        self.install(Cmd::new("cargo").args(["install", "--locked", "cargo-fuzz"]))
    }

    fn msrv(&self) -> Result<(), String> {
        let msrv = crate::steps::MSRV_TOOLCHAIN;
        let toolchains = self.rustup_list(&["toolchain", "list"])?;
        if toolchains
            .iter()
            .any(|t| t.starts_with(&format!("{msrv}-")))
        {
            eprintln!("    setup: toolchain {msrv} present");
            return Ok(());
        }
        self.install(Cmd::new("rustup").args([
            "toolchain",
            "install",
            msrv,
            "--profile",
            "minimal",
        ]))
    }

    fn cross(&self) -> Result<(), String> {
        let missing = missing_cross_tools();
        if missing.is_empty() {
            eprintln!("    setup: qemu-aarch64, aarch64-linux-gnu-gcc and {CROSS_SYSROOT} present");
            return Ok(());
        }
        let is_root = self.capture("id", &["-u"]).is_some_and(|u| u.trim() == "0");
        let apt_install = format!("apt-get install -y {}", CROSS_PACKAGES.join(" "));
        if !is_root {
            eprintln!(
                "    setup: missing {}; as root run: apt-get update && {apt_install}",
                missing.join(", ")
            );
            return Err(format!(
                "missing {} and not root: run `apt-get update && {apt_install}` as root",
                missing.join(", ")
            ));
        }
        self.install(
            Cmd::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["update"]),
        )?;
        self.install(
            Cmd::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y"])
                .args(CROSS_PACKAGES),
        )?;
        let still = missing_cross_tools();
        if still.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "still missing after apt-get install: {}",
                still.join(", ")
            ))
        }
    }
}

/// Whether a `rustup component list --installed` line (`clippy-x86_64-unknown-linux-gnu`,
/// `rust-src`) names `component`.
fn component_is(line: &str, component: &str) -> bool {
    line == component || line.starts_with(&format!("{component}-{}", std::env::consts::ARCH))
}

/// The cross tools (programs on PATH, and the aarch64 sysroot) that are missing.
fn missing_cross_tools() -> Vec<String> {
    let mut missing: Vec<String> = ["qemu-aarch64", "aarch64-linux-gnu-gcc"]
        .into_iter()
        .filter(|p| !on_path(p))
        .map(str::to_string)
        .collect();
    if !Path::new(CROSS_SYSROOT).is_dir() {
        missing.push(CROSS_SYSROOT.to_string());
    }
    missing
}

fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

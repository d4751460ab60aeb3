//! `cargo xtask qemu aarch64|x86_64 [--smp N] [--fault-test[=no-shootdown|wx-write|wx-exec|guard|no-pin]] [--timeout SECS]`:
//! builds `demo-kernel` for the bare-metal target in release, boots it under
//! `qemu-system-*` (`-smp N`, default 1) with a timeout, streams its console, and passes only if
//! it printed `all checks passed` and exited with success — or, with
//! `--fault-test`, if it reported a `fault:` and exited with the fault status — or, with
//! `--fault-test=no-shootdown` (the build whose TLB flushes stay on the executing CPU), if it
//! reported a `stale read:` and exited with the failure status — or, with `--fault-test=guard`
//! (a write one byte past a vmalloc area), if it reported the fault and a `guard page hit` — or,
//! with `--fault-test=no-pin` (a `pin` guard that masks no interrupt), if a check failed or a
//! fault was reported.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The default limit for one boot (the runs take seconds; a hang is a failure).
const DEFAULT_TIMEOUT_S: u64 = 120;

/// The most CPUs `--smp` accepts: GICv2, the aarch64 `virt` default under
/// TCG, has 8 CPU interfaces.
pub const MAX_SMP: u32 = 8;

/// The Debian 12 packages; the image's newer `qemu-utils` blocks them, hence the pin.
pub const INSTALL_COMMAND: &str = "apt-get install -y --allow-downgrades qemu-system-arm \
                                   qemu-system-x86 qemu-utils=1:7.2+dfsg-7+deb12u18+b3";

/// What the kernel prints when every check passed.
const PASS_LINE: &str = "all checks passed";
/// How the exception vectors start their report.
const FAULT_PREFIX: &str = "fault:";
/// How smp-loop's cross-CPU stale check starts its report.
const STALE_PREFIX: &str = "stale read:";
/// How the fault path reports a fault on a vmalloc guard page.
const GUARD_PREFIX: &str = "guard page hit:";

/// One demo-kernel port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// `aarch64` / `x86_64`, as on the command line.
    pub name: &'static str,
    /// The Rust target.
    pub target: &'static str,
    /// The qemu binary.
    pub qemu: &'static str,
    /// qemu's arguments before `-kernel FILE`.
    pub args: &'static [&'static str],
    /// qemu's exit status when the kernel calls `exit(0)`.
    pub success_status: i32,
    /// qemu's exit status when the kernel calls `exit(3)` (a fault).
    pub fault_status: i32,
    /// qemu's exit status when the kernel calls `exit(1)` (a failed check).
    pub failure_status: i32,
}

/// The two ports.
pub const PORTS: &[Port] = &[
    Port {
        name: "aarch64",
        target: "aarch64-unknown-none",
        qemu: "qemu-system-aarch64",
        args: &[
            "-M",
            "virt",
            "-cpu",
            "max",
            "-m",
            "256M",
            "-nographic",
            "-semihosting-config",
            "enable=on,target=native",
        ],
        // Semihosting SYS_EXIT hands the status through unchanged.
        success_status: 0,
        fault_status: 3,
        failure_status: 1,
    },
    Port {
        name: "x86_64",
        target: "x86_64-unknown-none",
        qemu: "qemu-system-x86_64",
        args: &[
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-serial",
            "stdio",
            "-display",
            "none",
            "-no-reboot",
            "-m",
            "256M",
        ],
        // isa-debug-exit makes qemu exit with `(code << 1) | 1`.
        success_status: 1,
        fault_status: 7,
        failure_status: 3,
    },
];

/// The port called `name`.
pub fn port(name: &str) -> Option<&'static Port> {
    PORTS.iter().find(|p| p.name == name)
}

/// Which kernel is built and what its boot must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The normal kernel: every check passes.
    Normal,
    /// `--fault-test`: the wrong page-table entry must be reported as a fault.
    Fault,
    /// `--fault-test=no-shootdown`: flushes stay local; stale reads must be reported.
    NoShootdown,
    /// `--fault-test=wx-write`: the kernel writes to its own text; the fault must be reported.
    WxWrite,
    /// `--fault-test=wx-exec`: the kernel calls into .data; the fault must be reported.
    WxExec,
    /// `--fault-test=guard`: a write one byte past a vmalloc area; the fault must be
    /// reported as a guard page hit.
    Guard,
    /// `--fault-test=no-pin`: `pin`'s guard masks nothing; the tick cutting into pinned
    /// sections must make a check fail (or a fault).
    NoPin,
}

impl Mode {
    /// The demo-kernel feature the mode builds with.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Mode::Normal => None,
            Mode::Fault => Some("fault-test"),
            Mode::NoShootdown => Some("no-shootdown"),
            Mode::WxWrite => Some("wx-write-test"),
            Mode::WxExec => Some("wx-exec-test"),
            Mode::Guard => Some("guard-test"),
            Mode::NoPin => Some("no-pin"),
        }
    }

    /// The flag, as on the command line.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Normal => "",
            Mode::Fault => " --fault-test",
            Mode::NoShootdown => " --fault-test=no-shootdown",
            Mode::WxWrite => " --fault-test=wx-write",
            Mode::WxExec => " --fault-test=wx-exec",
            Mode::Guard => " --fault-test=guard",
            Mode::NoPin => " --fault-test=no-pin",
        }
    }

    /// Whether the run must end in a reported fault (exit status 3).
    fn expects_fault(self) -> bool {
        matches!(
            self,
            Mode::Fault | Mode::WxWrite | Mode::WxExec | Mode::Guard
        )
    }
}

/// The parsed `qemu` command line.
#[derive(Debug, PartialEq, Eq)]
pub struct QemuArgs {
    /// Which kernel.
    pub port: &'static Port,
    /// The kernel built and the verdict applied.
    pub mode: Mode,
    /// Limit for the boot.
    pub timeout: Duration,
    /// CPUs qemu emulates (`-smp`), 1..=[`MAX_SMP`].
    pub smp: u32,
}

/// `cargo xtask qemu`'s command line.
#[derive(Debug, clap::Args)]
pub struct QemuCli {
    /// The demo-kernel port to build and boot.
    #[arg(value_name = "ARCH", value_parser = port_name)]
    port: &'static Port,
    /// CPUs qemu emulates (-smp N).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_SMP as i64))]
    smp: u32,
    /// Build with feature fault-test: a wrong page-table entry must be reported as a `fault:`
    /// and the kernel exit with status 3. `--fault-test=no-shootdown`: a build whose TLB
    /// flushes stay on the executing CPU must report a `stale read:` and exit with status 1.
    /// `--fault-test=wx-write` / `=wx-exec`: the kernel writes to its text / calls into its
    /// data; W^X must make that a reported fault (status 3). `--fault-test=guard`: the kernel
    /// writes one byte past a vmalloc area; the fault must be reported as a `guard page hit:`
    /// with the address and the area (status 3). `--fault-test=no-pin`: `pin`'s guard masks no
    /// interrupt; a check must fail (status 1) or a fault be reported (status 3).
    #[arg(long, value_name = "KIND", num_args = 0..=1, require_equals = true,
          value_parser = ["no-shootdown", "wx-write", "wx-exec", "guard", "no-pin"])]
    fault_test: Option<Option<String>>,
    /// Kill the boot after SECS seconds.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_TIMEOUT_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
}

/// `ARCH` through [`PORTS`], so the error lists the ports.
fn port_name(name: &str) -> Result<&'static Port, String> {
    port(name).ok_or_else(|| {
        let names: Vec<&str> = PORTS.iter().map(|p| p.name).collect();
        format!("expected {}", names.join(" or "))
    })
}

impl From<QemuCli> for QemuArgs {
    fn from(c: QemuCli) -> QemuArgs {
        QemuArgs {
            port: c.port,
            mode: match c.fault_test {
                None => Mode::Normal,
                Some(None) => Mode::Fault,
                Some(Some(kind)) => match kind.as_str() {
                    "wx-write" => Mode::WxWrite,
                    "wx-exec" => Mode::WxExec,
                    "guard" => Mode::Guard,
                    "no-pin" => Mode::NoPin,
                    // The value parser admits these five only.
                    _ => Mode::NoShootdown,
                },
            },
            timeout: Duration::from_secs(c.timeout),
            smp: c.smp,
        }
    }
}

/// Parses `ARCH [--smp N] [--fault-test[=no-shootdown|wx-write|wx-exec|guard|no-pin]] [--timeout SECS]` (the tests' way in).
#[cfg(test)]
pub fn parse(args: &[String]) -> Result<QemuArgs, String> {
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        q: QemuCli,
    }
    use clap::Parser;
    Wrap::try_parse_from(std::iter::once("qemu").chain(args.iter().map(String::as_str)))
        .map(|w| w.q.into())
        .map_err(|e| e.to_string())
}

/// Whether a finished boot is a pass: `status` is qemu's exit status
/// (`None`: killed, e.g. by the timeout), `output` the console.
pub fn verdict(port: &Port, mode: Mode, status: Option<i32>, output: &str) -> Result<(), String> {
    let passed = output.lines().any(|l| l.trim() == PASS_LINE);
    let faulted = output.lines().any(|l| l.starts_with(FAULT_PREFIX));
    // A broken pin may leave a CPU spinning on a corrupted lock or list
    // with interrupts masked: a hang is the broken build not passing too.
    if mode == Mode::NoPin && status.is_none() && !passed {
        return Ok(());
    }
    let Some(status) = status else {
        return Err("qemu did not exit by itself (timeout or signal)".to_string());
    };
    if mode == Mode::NoShootdown {
        if !output.lines().any(|l| l.starts_with(STALE_PREFIX)) {
            return Err(
                "--fault-test=no-shootdown: the kernel reported no `stale read:`".to_string(),
            );
        }
        // A CPU with a stale translation may have written through it before
        // the check stopped the workers: a fault afterwards is no surprise.
        if status != port.failure_status && status != port.fault_status {
            return Err(format!(
                "--fault-test=no-shootdown: qemu exited {status}, expected {} (kernel exit 1)",
                port.failure_status
            ));
        }
        return Ok(());
    }
    if mode == Mode::NoPin {
        let failed = output.lines().any(|l| l.starts_with("check failed:"));
        if passed || !(failed || faulted) {
            return Err(
                "--fault-test=no-pin: the broken pin guard went unnoticed (no failed check, no fault)"
                    .to_string(),
            );
        }
        if status != port.failure_status && status != port.fault_status {
            return Err(format!(
                "--fault-test=no-pin: qemu exited {status}, expected {} or {} (kernel exit 1 or 3)",
                port.failure_status, port.fault_status
            ));
        }
        return Ok(());
    }
    if mode.expects_fault() {
        let flag = mode.flag().trim();
        if !faulted {
            return Err(format!("{flag}: the kernel reported no `fault:`"));
        }
        if mode == Mode::Guard && !output.lines().any(|l| l.starts_with(GUARD_PREFIX)) {
            return Err(format!(
                "{flag}: the fault was not reported as a `{GUARD_PREFIX}`"
            ));
        }
        if status != port.fault_status {
            return Err(format!(
                "{flag}: qemu exited {status}, expected {} (kernel exit 3)",
                port.fault_status
            ));
        }
        return Ok(());
    }
    if faulted {
        return Err("the kernel reported a fault".to_string());
    }
    if !passed {
        return Err(format!("the kernel did not print `{PASS_LINE}`"));
    }
    if status != port.success_status {
        return Err(format!(
            "qemu exited {status}, expected {} (kernel exit 0)",
            port.success_status
        ));
    }
    Ok(())
}

/// Whether `program` is on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs qemu-system-* through apt-get when root; otherwise says how.
fn ensure_qemu(port: &Port) -> Result<(), String> {
    if on_path(port.qemu) {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "{} is not installed; as root run: apt-get update && {INSTALL_COMMAND}",
            port.qemu
        ));
    }
    eprintln!(
        "==> installing {}: apt-get update && {INSTALL_COMMAND}",
        port.qemu
    );
    let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
    if !ok(Command::new("apt-get").arg("update")) {
        return Err("apt-get update failed".to_string());
    }
    if !ok(Command::new("sh").args(["-c", INSTALL_COMMAND])) {
        return Err(format!("`{INSTALL_COMMAND}` failed"));
    }
    if on_path(port.qemu) {
        Ok(())
    } else {
        Err(format!("{} still missing after the install", port.qemu))
    }
}

/// Where cargo puts the kernel: `$CARGO_TARGET_DIR` (relative to the
/// workspace root) or `target/`.
fn kernel_path(root: &Path, target: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    root.join(dir)
        .join(target)
        .join("release")
        .join("demo-kernel")
}

fn build(root: &Path, a: &QemuArgs) -> Result<PathBuf, String> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args([
        "build",
        "-p",
        "demo-kernel",
        "--release",
        "--target",
        a.port.target,
    ]);
    if let Some(f) = a.mode.feature() {
        cmd.args(["--features", f]);
    }
    eprintln!(
        "==> cargo build -p demo-kernel --release --target {}{}",
        a.port.target,
        a.mode
            .feature()
            .map_or(String::new(), |f| format!(" --features {f}"))
    );
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building demo-kernel for {} failed", a.port.target));
    }
    Ok(kernel_path(root, a.port.target))
}

/// Boots `kernel`, echoing the console; returns (exit status, console).
fn boot(a: &QemuArgs, kernel: &Path) -> Result<(Option<i32>, String), String> {
    let smp = a.smp.to_string();
    let mut cmd = Command::new(a.port.qemu);
    cmd.args(a.port.args)
        .args(["-smp", &smp])
        .arg("-kernel")
        .arg(kernel)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    eprintln!(
        "==> {} {} -smp {smp} -kernel {}",
        a.port.qemu,
        a.port.args.join(" "),
        kernel.display()
    );
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", a.port.qemu))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let line = line.trim_end_matches('\r').to_string();
            println!("{line}");
            let _ = std::io::stdout().flush();
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.code(),
            Ok(None) if start.elapsed() > a.timeout => {
                eprintln!("==> timeout after {} s: killing qemu", a.timeout.as_secs());
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for qemu: {e}")),
        }
    };
    let output = reader.join().unwrap_or_default();
    Ok((status, output))
}

/// `cargo xtask qemu …`.
pub fn main(root: &Path, cli: QemuCli) -> ExitCode {
    let a = QemuArgs::from(cli);
    let run = || -> Result<(), String> {
        ensure_qemu(a.port)?;
        let kernel = build(root, &a)?;
        let start = Instant::now();
        let (status, output) = boot(&a, &kernel)?;
        let status_text = status.map_or("none".to_string(), |s| s.to_string());
        eprintln!(
            "==> qemu exited with status {status_text} after {:.1} s",
            start.elapsed().as_secs_f64()
        );
        verdict(a.port, a.mode, status, &output)
    };
    let what = format!(
        "{}{}",
        if a.smp == 1 {
            String::new()
        } else {
            format!(" --smp {}", a.smp)
        },
        a.mode.flag()
    );
    match run() {
        Ok(()) => {
            eprintln!("qemu {}{what}: passed", a.port.name);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("qemu {}{what}: FAILED: {e}", a.port.name);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_ports_and_flags() {
        let a = parse(&args(&["x86_64", "--fault-test", "--timeout", "30"])).unwrap();
        assert_eq!(a.port.target, "x86_64-unknown-none");
        assert_eq!(a.mode, Mode::Fault);
        assert_eq!(a.timeout, Duration::from_secs(30));
        let a = parse(&args(&["aarch64"])).unwrap();
        assert_eq!(a.port.qemu, "qemu-system-aarch64");
        assert_eq!(a.mode, Mode::Normal);
        assert_eq!(a.smp, 1);
        let a = parse(&args(&[
            "x86_64",
            "--smp",
            "4",
            "--fault-test=no-shootdown",
        ]))
        .unwrap();
        assert_eq!(a.mode, Mode::NoShootdown);
        assert_eq!(a.mode.feature(), Some("no-shootdown"));
        assert!(parse(&args(&["x86_64", "--fault-test=bogus"])).is_err());
        let a = parse(&args(&["aarch64", "--fault-test=wx-write"])).unwrap();
        assert_eq!(a.mode.feature(), Some("wx-write-test"));
        let a = parse(&args(&["x86_64", "--fault-test=wx-exec"])).unwrap();
        assert_eq!(a.mode, Mode::WxExec);
        assert!(verdict(port("x86_64").unwrap(), a.mode, Some(7), "fault: #PF\n").is_ok());
        let a = parse(&args(&["aarch64", "--fault-test=guard"])).unwrap();
        assert_eq!(a.mode, Mode::Guard);
        assert_eq!(a.mode.feature(), Some("guard-test"));
        assert!(
            verdict(
                port("x86_64").unwrap(),
                a.mode,
                Some(1),
                "all checks passed\n"
            )
            .is_err()
        );
        assert_eq!(parse(&args(&["aarch64", "--smp", "4"])).unwrap().smp, 4);
        assert!(parse(&args(&["aarch64", "--smp", "0"])).is_err());
        assert!(parse(&args(&["aarch64", "--smp", "9"])).is_err());
        assert!(parse(&args(&["aarch64", "--smp"])).is_err());
        assert!(parse(&args(&[])).unwrap_err().contains("<ARCH>"));
        assert!(
            parse(&args(&["riscv64"]))
                .unwrap_err()
                .contains("aarch64 or x86_64")
        );
        assert!(parse(&args(&["aarch64", "--timeout", "0"])).is_err());
        assert!(parse(&args(&["aarch64", "--bogus"])).is_err());
        assert!(parse(&args(&["aarch64", "x86_64"])).is_err());
    }

    #[test]
    fn verdict_needs_the_line_and_the_status() {
        let arm = port("aarch64").unwrap();
        let x86 = port("x86_64").unwrap();
        let good = "{\"workload\":\"munmap\"}\nall checks passed\n";
        assert!(verdict(arm, Mode::Normal, Some(0), good).is_ok());
        assert!(verdict(x86, Mode::Normal, Some(1), good).is_ok());
        // The right status without the line (qemu's own failure on x86 is 1 too).
        assert!(verdict(x86, Mode::Normal, Some(1), "qemu: could not load kernel\n").is_err());
        assert!(verdict(arm, Mode::Normal, Some(1), good).is_err());
        assert!(verdict(arm, Mode::Normal, None, good).is_err());
        let fault = "fault: synchronous exception\n";
        assert!(verdict(arm, Mode::Normal, Some(0), &format!("{fault}{good}")).is_err());
        assert!(verdict(arm, Mode::Fault, Some(3), fault).is_ok());
        assert!(verdict(x86, Mode::Fault, Some(7), fault).is_ok());
        assert!(
            verdict(arm, Mode::Fault, Some(0), good).is_err(),
            "no fault reported"
        );
        assert!(
            verdict(arm, Mode::Fault, Some(1), fault).is_err(),
            "wrong status"
        );
    }

    #[test]
    fn guard_verdict_needs_the_guard_report() {
        let arm = port("aarch64").unwrap();
        let x86 = port("x86_64").unwrap();
        let fault = "fault: CPU 0: vector 14 (#PF) at RIP 0x1, CR2 0xffff800000002000\n";
        let hit = "guard page hit: CPU 0: address 0xffff800000002000 on the guard page of area \
                   0xffff800000001000-0xffff800000002000 (1 pages)\n";
        assert!(verdict(x86, Mode::Guard, Some(7), &format!("{fault}{hit}")).is_ok());
        assert!(verdict(arm, Mode::Guard, Some(3), &format!("{fault}{hit}")).is_ok());
        assert!(
            verdict(x86, Mode::Guard, Some(7), fault).is_err(),
            "a fault, but not on a guard page"
        );
        assert!(verdict(arm, Mode::Guard, Some(1), hit).is_err(), "no fault");
        assert!(
            verdict(arm, Mode::Guard, Some(0), "all checks passed\n").is_err(),
            "the write went through"
        );
    }

    #[test]
    fn no_pin_verdict_needs_a_failure() {
        let arm = port("aarch64").unwrap();
        let x86 = port("x86_64").unwrap();
        let np = Mode::NoPin;
        assert_eq!(
            parse(&args(&["x86_64", "--smp", "4", "--fault-test=no-pin"]))
                .unwrap()
                .mode,
            np
        );
        assert_eq!(np.feature(), Some("no-pin"));
        let failed =
            "check failed: slab-smp slab-smp-sheaves: 7 slabs, destroy: Err(..)\n1 checks failed\n";
        assert!(verdict(arm, np, Some(1), failed).is_ok());
        assert!(verdict(x86, np, Some(3), failed).is_ok());
        assert!(verdict(x86, np, Some(7), "fault: CPU 0: vector 14 (#PF)\n").is_ok());
        assert!(
            verdict(arm, np, Some(0), "all checks passed\n").is_err(),
            "unnoticed"
        );
        assert!(
            verdict(arm, np, Some(1), "1 checks failed\n").is_err(),
            "no check named"
        );
        assert!(
            verdict(arm, np, None, failed).is_ok(),
            "a hang is caught too"
        );
        assert!(verdict(arm, np, None, "all checks passed\n").is_err());
    }

    #[test]
    fn no_shootdown_verdict_needs_a_stale_read_and_a_failure() {
        let arm = port("aarch64").unwrap();
        let x86 = port("x86_64").unwrap();
        let ns = Mode::NoShootdown;
        let stale = "stale read: CPU 2 at 0xffff800000004000: expected stamp 0x1, found 0x2\n1 checks failed\n";
        assert!(verdict(arm, ns, Some(1), stale).is_ok());
        assert!(verdict(x86, ns, Some(3), stale).is_ok());
        assert!(
            verdict(x86, ns, Some(7), stale).is_ok(),
            "a fault after the report"
        );
        let caught_nothing =
            "{\"workload\":\"smp-loop\",\"stale_tlb_violations\":0}\nall checks passed\n";
        assert!(verdict(arm, ns, Some(0), caught_nothing).is_err());
        assert!(verdict(x86, ns, Some(1), caught_nothing).is_err());
        assert!(verdict(arm, ns, Some(0), stale).is_err(), "exit 0");
        assert!(verdict(arm, ns, None, stale).is_err(), "a hang");
    }
}

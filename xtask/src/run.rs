//! Executing rows: one runner that spawns a command, streams its output, times it, and kills it
//! (with everything it started) if it runs past the step timeout.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::excerpt::Excerpt;
use crate::report::{Row, Status};
use crate::setup;
use crate::steps::{Action, Step, StepKind};

/// The target directory every cargo command uses unless its row names another. Set explicitly so
/// an exported `CARGO_TARGET_DIR` (e.g. the one used to build xtask itself) is not inherited.
const MAIN_TARGET_DIR: &str = "target";

/// A command line with its environment additions.
#[derive(Clone, Debug)]
pub struct Cmd {
    /// The program (looked up on PATH).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it (shown in the header).
    pub env: Vec<(String, String)>,
}

impl Cmd {
    /// `program` with no arguments.
    pub fn new(program: &str) -> Cmd {
        Cmd {
            program: program.to_string(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Cmd {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The command as a shell would take it: `KEY="v a l" program args…`.
    pub fn display(&self) -> String {
        let env = self.env.iter().map(|(k, v)| format!("{k}={}", quote(v)));
        let words = std::iter::once(quote(&self.program)).chain(self.args.iter().map(|a| quote(a)));
        env.chain(words).collect::<Vec<_>>().join(" ")
    }

    fn command(&self, root: &Path) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args).current_dir(root);
        command.env("CARGO_TARGET_DIR", MAIN_TARGET_DIR);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Runs to completion with output streamed to `sink`; `Err` says why it failed.
    pub fn stream(&self, root: &Path, sink: Sink, timeout: Option<Duration>) -> Result<(), String> {
        self.stream_kept(root, sink, timeout).0
    }

    /// [`Cmd::stream`], also keeping the [`Excerpt`] of what it printed:
    /// its stdout and stderr pass through this process, line by line.
    pub fn stream_kept(
        &self,
        root: &Path,
        sink: Sink,
        timeout: Option<Duration>,
    ) -> (Result<(), String>, Excerpt) {
        let excerpt = Arc::new(Mutex::new(Excerpt::default()));
        let (done, finished) = mpsc::channel();
        let mut readers = 0;
        let result = self.run_to(root, Stdio::piped(), Stdio::piped(), timeout, |child| {
            let out = child
                .stdout
                .take()
                .map(|o| (Box::new(o) as Box<dyn Read + Send>, sink));
            let err = child
                .stderr
                .take()
                .map(|e| (Box::new(e) as Box<dyn Read + Send>, Sink::Stderr));
            for (from, to) in out.into_iter().chain(err) {
                let (excerpt, done) = (Arc::clone(&excerpt), done.clone());
                readers += 1;
                std::thread::spawn(move || {
                    tee(from, to, &excerpt);
                    let _ = done.send(());
                });
            }
        });
        // A grandchild left running (killed at the timeout, or a daemon)
        // may hold a pipe open: wait a little, not for ever.
        for _ in 0..readers {
            if finished.recv_timeout(Duration::from_secs(5)).is_err() {
                break;
            }
        }
        let excerpt = std::mem::take(&mut *excerpt.lock().unwrap_or_else(|e| e.into_inner()));
        (result, excerpt)
    }

    /// Runs to completion with stdout and stderr into `out`; `Err` says why it failed.
    fn run_into(
        &self,
        root: &Path,
        out: &std::fs::File,
        timeout: Option<Duration>,
    ) -> Result<(), String> {
        let (o, e) = (out.try_clone(), out.try_clone());
        let (o, e) = o
            .and_then(|o| e.map(|e| (o, e)))
            .map_err(|e| e.to_string())?;
        self.run_to(root, Stdio::from(o), Stdio::from(e), timeout, |_| {})
    }

    fn run_to(
        &self,
        root: &Path,
        stdout: Stdio,
        stderr: Stdio,
        timeout: Option<Duration>,
        started: impl FnOnce(&mut Child),
    ) -> Result<(), String> {
        let mut child = self
            .command(root)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", self.program))?;
        started(&mut child);
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return check(status),
                Ok(None) => {}
                Err(e) => return Err(format!("waiting for `{}`: {e}", self.program)),
            }
            if let Some(limit) = timeout {
                if start.elapsed() > limit {
                    kill_tree(child.id());
                    let _ = child.wait();
                    return Err(format!("timed out after {} s", limit.as_secs()));
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs quietly; its stdout if it succeeded.
    pub fn capture(&self, root: &Path) -> Option<String> {
        let out = self
            .command(root)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Quotes a word for display if a shell would need it.
fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./,+=:@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

fn check(status: ExitStatus) -> Result<(), String> {
    if status.success() {
        Ok(())
    } else if let Some(code) = status.code() {
        Err(format!("exit status {code}"))
    } else {
        Err(format!("killed by signal {}", status.signal().unwrap_or(0)))
    }
}

/// Kills `pid` and all its descendants (found through /proc), so a timed-out `cargo test` does not
/// leave its test binary running.
fn kill_tree(pid: u32) {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ppid …"; comm may contain spaces and parentheses.
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((child, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parent_of
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(tree.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Copies `from` to `to` line by line, feeding `excerpt`.
fn tee(from: Box<dyn Read + Send>, to: Sink, excerpt: &Mutex<Excerpt>) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match from.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let _ = match to {
            Sink::Inherit => io::stdout().lock().write_all(&line),
            Sink::Stderr => io::stderr().lock().write_all(&line),
            #[cfg(test)]
            Sink::Null => Ok(()),
        };
        excerpt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(&String::from_utf8_lossy(&line));
    }
}

/// Where children's stdout goes. Their stderr always goes to ours.
#[derive(Clone, Copy, Debug)]
pub enum Sink {
    /// Our stdout (`ci`, `matrix`): CI shows cargo test's own "test result:" lines.
    Inherit,
    /// Our stderr (`matrix --json`): stdout carries only the JSON.
    Stderr,
    /// Nowhere (the tests' made-up failures must not look like real ones
    /// in a CI log).
    #[cfg(test)]
    Null,
}

/// How the rows run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Where children's stdout goes.
    pub sink: Sink,
    /// Per-row limit; `None` for no limit.
    pub timeout: Option<Duration>,
}

/// Runs every row in order, continuing after failures, and reports each.
/// A run of consecutive single-core rows (see [`runs_in_a_lane`]) goes
/// through [`run_in_lanes`]: together they are most of CI's time.
pub fn run_all(root: &Path, steps: &[Step], opts: Options) -> Vec<Row> {
    let mut rows = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j < steps.len() && runs_in_a_lane(&steps[j]) {
            j += 1;
        }
        if j - i >= 2 {
            rows.extend(run_in_lanes(root, &steps[i..j], opts));
            i = j;
        } else {
            rows.push(run_one(root, &steps[i], opts));
            i += 1;
        }
    }
    rows
}

/// Rows whose work runs on one core once built: Miri interprets on one,
/// a loom model explores its interleavings on one, libFuzzer fuzzes on one
/// (each builds into its own target directory, so two can run side by
/// side). The matrix puts them next to each other, Miri's longest rows
/// first, so the short loom and fuzz rows fill whichever lane is free.
fn runs_in_a_lane(step: &Step) -> bool {
    matches!(step.kind, StepKind::Loom | StepKind::Miri | StepKind::Fuzz) && step.skip.is_none()
}

/// Runs `steps` (cargo commands) on as many lanes as the machine has cores
/// (at least 2), each lane taking the next row when it is free and building
/// into its own target directory (`<dir>-lane<k>`: cargo locks a target
/// directory for the whole run). A row's output is kept in a file and
/// printed whole, after its header, when the row ends, so logs do not
/// interleave. Rows come back in their order.
fn run_in_lanes(root: &Path, steps: &[Step], opts: Options) -> Vec<Row> {
    use std::sync::Mutex;
    let lanes = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, steps.len());
    let next = Mutex::new(0usize);
    let done: Mutex<Vec<Option<Row>>> = Mutex::new(steps.iter().map(|_| None).collect());
    let print = Mutex::new(());
    std::thread::scope(|s| {
        for lane in 0..lanes {
            let (next, done, print) = (&next, &done, &print);
            s.spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(step) = steps.get(i) else { break };
                    let row = run_captured(root, step, lane, opts, print);
                    done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(row);
                }
            });
        }
    });
    done.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every row ran"))
        .collect()
}

/// One row of [`run_in_lanes`].
fn run_captured(
    root: &Path,
    step: &Step,
    lane: usize,
    opts: Options,
    print: &std::sync::Mutex<()>,
) -> Row {
    let mut row = row_for(step);
    let header = header_of(step);
    let Action::Cmd(cmd) = &step.action else {
        return run_one(root, step, opts);
    };
    let mut cmd = cmd.clone();
    for (k, v) in &mut cmd.env {
        if k == "CARGO_TARGET_DIR" {
            *v = format!("{v}-lane{lane}");
        }
    }
    // One core per lane: a lane's cargo build on both cores competes with
    // the Miri row beside it, and Miri rows are CI's longest (slub-core's
    // took 1 135 s in a full local run with loom builds beside it).
    let cmd = cmd.env("CARGO_BUILD_JOBS", "1");
    {
        let _p = print.lock().unwrap_or_else(|e| e.into_inner());
        eprintln!("{header}: started on lane {lane}: {}", cmd.display());
    }
    let log = std::env::temp_dir().join(format!("xtask-lane{lane}-{}.log", std::process::id()));
    let start = Instant::now();
    let result = std::fs::File::create(&log)
        .map_err(|e| format!("cannot create {}: {e}", log.display()))
        .and_then(|f| cmd.run_into(root, &f, opts.timeout));
    row.seconds = start.elapsed().as_secs_f64();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let _p = print.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!("==> output of {}", &header[4..]);
    eprint!("{output}");
    finish(&mut row, &header, result, Excerpt::of(&output));
    let _ = io::stderr().flush();
    row
}

fn header_of(step: &Step) -> String {
    let label = match &step.detail {
        Some(detail) => format!("{} {detail}", step.kind.name()),
        None => step.kind.name().to_string(),
    };
    format!("==> [{}/{}] {label}", step.target, step.config)
}

fn row_for(step: &Step) -> Row {
    Row {
        target: step.target.clone(),
        config: step.config.clone(),
        step: step.kind.name().to_string(),
        test: step.detail.clone(),
        status: Status::Skipped,
        seconds: 0.0,
        reason: None,
        command: step.command_line(),
        excerpt: None,
    }
}

/// Prints how the row ended and records it, with `excerpt` if it failed.
fn finish(row: &mut Row, header: &str, result: Result<(), String>, excerpt: Excerpt) {
    match result {
        Ok(()) => {
            // CI has a wall-clock budget: every row says what it cost, so a log that ends
            // early (killed at the limit) still tells which rows to trim.
            eprintln!("{header}: pass in {:.0} s", row.seconds);
            row.status = Status::Pass;
        }
        Err(reason) => {
            eprintln!("{header}: FAILED in {:.0} s ({reason})", row.seconds);
            row.status = Status::Fail;
            row.reason = Some(reason);
            row.excerpt = Some(excerpt.render());
        }
    }
}

fn run_one(root: &Path, step: &Step, opts: Options) -> Row {
    let header = header_of(step);
    let mut row = row_for(step);
    if let Some(reason) = &step.skip {
        // Rows left out by --only are a developer's choice: keep the log short.
        if reason != "--only" {
            eprintln!("{header}: skipped ({reason})");
        }
        row.reason = Some(reason.clone());
        return row;
    }
    eprintln!("{header}: {}", row.command);
    let _ = io::stderr().flush();

    let start = Instant::now();
    let (result, excerpt) = match &step.action {
        Action::Cmd(cmd) => cmd.stream_kept(root, opts.sink, opts.timeout),
        Action::Setup(needs) => (setup::run(root, needs, opts.sink), Excerpt::default()),
        Action::Nothing => (Ok(()), Excerpt::default()),
    };
    row.seconds = start.elapsed().as_secs_f64();
    finish(&mut row, &header, result, excerpt);
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_what_needs_it() {
        let cmd = Cmd::new("cargo")
            .args(["test", "--features", "a/stats,b/stats"])
            .env("RUSTFLAGS", "--cfg kmm_loom");
        assert_eq!(
            cmd.display(),
            "RUSTFLAGS=\"--cfg kmm_loom\" cargo test --features a/stats,b/stats"
        );
    }

    #[test]
    fn a_failure_keeps_what_it_printed_on_either_stream() {
        let script =
            "echo 'test a ... FAILED'; echo 'thread a panicked at x.rs:1:1:' >&2; exit 101";
        let (result, excerpt) =
            Cmd::new("sh")
                .args(["-c", script])
                .stream_kept(Path::new("."), Sink::Null, None);
        assert_eq!(result, Err("exit status 101".to_string()));
        let r = excerpt.render();
        assert!(
            r.contains("test a ... FAILED") && r.contains("panicked at x.rs"),
            "{r}"
        );
    }

    #[test]
    fn failures_and_timeouts_are_reported() {
        let root = Path::new(".");
        assert_eq!(Cmd::new("true").stream(root, Sink::Stderr, None), Ok(()));
        assert_eq!(
            Cmd::new("sh")
                .args(["-c", "exit 3"])
                .stream(root, Sink::Stderr, None),
            Err("exit status 3".to_string())
        );
        // The grandchild (the backgrounded sleep) must die with the child.
        let marker = format!("/tmp/xtask-timeout-{}", std::process::id());
        let script = format!("(sleep 1; touch {marker}) & sleep 30");
        let start = Instant::now();
        let result = Cmd::new("sh").args(["-c", &script]).stream(
            root,
            Sink::Stderr,
            Some(Duration::from_millis(200)),
        );
        assert_eq!(result, Err("timed out after 0 s".to_string()));
        assert!(start.elapsed() < Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            !Path::new(&marker).exists(),
            "grandchild survived the timeout"
        );
    }
}

//! What a row printed that says why it failed, kept so that the report can
//! repeat it under the table: CI keeps only the end of a log, and a row that
//! fails early (a flaky test in the first `cargo test`) is far from it.

use std::collections::VecDeque;

/// The lines of a row's output that explain a failure: libtest's
/// `failures:` section, panics, compiler errors and `FAILED` lines, then
/// the row's last lines.
#[derive(Debug, Default)]
pub struct Excerpt {
    kept: Vec<String>,
    /// Lines still to keep after a panic or an error (its message).
    follow: usize,
    /// Inside libtest's `failures:` section (captured output of each
    /// failed test, then their names), which ends at `test result:`.
    in_failures: bool,
    /// Kept lines dropped past [`Excerpt::KEEP`].
    dropped: usize,
    tail: VecDeque<String>,
}

impl Excerpt {
    /// At most this many lines of explanation.
    const KEEP: usize = 120;
    /// And the last lines of the output.
    const TAIL: usize = 15;

    /// The excerpt of a whole output.
    pub fn of(text: &str) -> Excerpt {
        let mut e = Excerpt::default();
        text.lines().for_each(|l| e.push(l));
        e
    }

    /// Takes the next line of the output.
    pub fn push(&mut self, line: &str) {
        let line = line.trim_end();
        if line == "failures:" {
            self.in_failures = true;
        }
        let starts = line.contains("panicked at")
            || line.starts_with("error")
            || line.contains("FAILED")
            || line.contains("Segmentation fault")
            || line.contains("(signal: ");
        if starts {
            self.follow = 3;
        }
        if self.in_failures || starts || self.follow > 0 {
            if self.kept.len() < Self::KEEP {
                self.kept.push(line.to_string());
            } else {
                self.dropped += 1;
            }
            if !starts {
                self.follow = self.follow.saturating_sub(1);
            }
        }
        if line.starts_with("test result:") {
            self.in_failures = false;
        }
        if self.tail.len() == Self::TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_string());
    }

    /// The kept lines, a marker for what was dropped, and the tail.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.kept {
            out.push_str(l);
            out.push('\n');
        }
        if self.dropped > 0 {
            out.push_str(&format!("[... {} more such lines ...]\n", self.dropped));
        }
        out.push_str("[last lines]\n");
        for l in &self.tail {
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_failure_and_the_tail_not_the_noise() {
        let mut log = String::new();
        log.push_str("   Compiling a v0.1.0\n");
        for i in 0..500 {
            log.push_str(&format!("test ok_{i} ... ok\n"));
        }
        log.push_str("test flaky ... FAILED\n\nfailures:\n\n---- flaky stdout ----\n");
        log.push_str("thread 'flaky' panicked at src/lib.rs:9:5:\nassertion failed: caught\n");
        log.push_str("\nfailures:\n    flaky\n\ntest result: FAILED. 500 passed; 1 failed\n");
        for i in 0..50 {
            log.push_str(&format!("noise {i}\n"));
        }
        let r = Excerpt::of(&log).render();
        assert!(r.contains("test flaky ... FAILED"));
        assert!(r.contains("assertion failed: caught"));
        assert!(r.contains("    flaky"));
        assert!(r.contains("noise 49"), "the tail");
        assert!(!r.contains("ok_3 "), "passing tests are noise");
        assert!(!r.contains("noise 10\n"), "only the last lines of the tail");
        assert!(r.lines().count() < 40, "{r}");
    }

    #[test]
    fn a_flood_of_errors_is_capped() {
        let log: String = (0..1000).map(|i| format!("error: e{i}\n")).collect();
        let r = Excerpt::of(&log).render();
        assert!(r.contains("[... 880 more such lines ...]"), "{r}");
        assert!(r.contains("error: e999"));
    }
}

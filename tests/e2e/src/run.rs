//! Running a child process with a deadline and keeping everything it printed.

use std::fmt;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One finished command: what was run, how it ended and everything it printed.
#[derive(Debug, Clone)]
pub struct Run {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// stdout and stderr together, for "does the output mention X" checks.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "$ {}\n  ({}, {:.1} s)",
            self.command,
            self.status,
            self.elapsed.as_secs_f64()
        )?;
        if !self.stdout.trim().is_empty() {
            writeln!(f, "--- stdout\n{}", self.stdout.trim_end())?;
        }
        if !self.stderr.trim().is_empty() {
            writeln!(f, "--- stderr\n{}", self.stderr.trim_end())?;
        }
        Ok(())
    }
}

/// Runs `cmd` to completion, killing it after `timeout`.
///
/// The output is also printed to the test's (captured) stderr, so `cargo test` shows the
/// whole transcript of a failing test and nothing for a passing one.
pub(crate) fn run(mut cmd: Command, label: String, timeout: Duration) -> Run {
    let started = Instant::now();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{label}`: {e}"));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let out = stdout.join().unwrap_or_default();
            let err = stderr.join().unwrap_or_default();
            panic!(
                "`{label}` did not finish within {} s; killed.\n--- stdout\n{out}\n--- stderr\n{err}",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        command: label,
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    };
    eprintln!("{run}");
    run
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

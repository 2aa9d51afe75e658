//! The local AWS world's farm (`tests/aws-local/joiner_local/farm.py`): one Python process
//! per test process that has imported moto and built its default backends once, and forks a
//! fresh server for each [`crate::MotoServer`]. A cold server costs about 4 s of CPU (imports,
//! then the AWS managed policies on the first IAM call); the suite starts hundreds.
//!
//! The farm reads requests on its stdin, which only this process holds: when this process
//! ends, however it ends, the farm sees end-of-file and exits, and its servers die with it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use crate::{moto_python, moto_server_bin, workspace_root};

struct Farm {
    _process: Child,
    requests: ChildStdin,
    answers: BufReader<ChildStdout>,
}

static FARM: Mutex<Option<Farm>> = Mutex::new(None);

impl Farm {
    fn start() -> Farm {
        let python = moto_python();
        assert!(
            python.exists() && moto_server_bin().exists(),
            "{} is missing: run scripts/install-tools.sh first",
            moto_server_bin().display()
        );
        let mut process = Command::new(python)
            .args(["-m", "joiner_local.farm"])
            .env("PYTHONPATH", workspace_root().join("tests/aws-local"))
            .env("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("spawn the local AWS world's farm (joiner_local.farm): {e}")
            });
        let requests = process.stdin.take().expect("piped stdin");
        let mut answers = BufReader::new(process.stdout.take().expect("piped stdout"));
        let mut ready = String::new();
        answers
            .read_line(&mut ready)
            .expect("read from the local AWS world's farm");
        assert_eq!(
            ready.trim(),
            "ready",
            "the local AWS world's farm did not start (its errors are above)"
        );
        Farm {
            _process: process,
            requests,
            answers,
        }
    }

    fn ask(&mut self, line: &str) -> std::io::Result<String> {
        writeln!(self.requests, "{line}")?;
        self.requests.flush()?;
        let mut answer = String::new();
        if self.answers.read_line(&mut answer)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(answer.trim().to_string())
    }
}

/// Sends one request to this process's farm (starting it on first use) and returns its
/// one-line answer.
pub(crate) fn request(line: &str) -> String {
    // A test that panicked while holding the lock leaves the farm as it was: still usable.
    let mut farm = FARM.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let answer = farm.get_or_insert_with(Farm::start).ask(line);
    match answer {
        Ok(answer) if !answer.starts_with("error") => answer,
        Ok(error) => panic!("the local AWS world's farm refused {line:?}: {error}"),
        Err(e) => {
            *farm = None;
            panic!("the local AWS world's farm is gone ({e}) while asked {line:?}")
        }
    }
}

/// Asks the farm to kill a server, if there is a farm: never panics (it runs in `Drop`,
/// possibly while a failed test unwinds). Without a farm the server is already gone.
pub(crate) fn kill(pid: u32) {
    let mut farm = FARM.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(f) = farm.as_mut() {
        if f.ask(&format!("kill {pid}")).is_err() {
            *farm = None;
        }
    }
}

//! One control-plane process, tied to this test process by a pipe.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The watchdog: runs the component with its stdin on /dev/null, records its pid, and
/// terminates it as soon as its own stdin (our pipe) reaches end of file, which happens when
/// we drop the pipe or when this process dies for any reason; SIGKILL follows 5 s later
/// (kube-apiserver can hang in shutdown once etcd, stopped at the same moment, is gone). It exits with the component's
/// status, so waiting on the shell is waiting on the component.
const WATCHDOG: &str = r#"
pidfile=$1; shift
exec 3<&0
"$@" </dev/null 3<&- &
pid=$!
echo "$pid" >"$pidfile"
( read -r _ <&3; kill -TERM "$pid" 2>/dev/null; sleep 5; kill -KILL "$pid" 2>/dev/null ) &
wait "$pid"
"#;

pub(crate) struct Component {
    name: &'static str,
    child: Child,
    pipe: Option<ChildStdin>,
    pidfile: PathBuf,
    log: PathBuf,
}

impl Component {
    pub(crate) fn spawn(
        name: &'static str,
        bin: &Path,
        args: &[String],
        dir: &Path,
    ) -> anyhow::Result<Component> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("create {name}.log"))?;
        let pidfile = dir.join(format!("{name}.pid"));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(&pidfile)
            .arg(bin)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("start {name} ({})", bin.display()))?;
        let pipe = child.stdin.take();
        Ok(Component {
            name,
            child,
            pipe,
            pidfile,
            log,
        })
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status, if the component has already ended.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM through the watchdog, then SIGKILL if it has not ended within 10 s.
    pub(crate) fn stop(mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(pid) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes `dir` once our end of its pipe closes, however this process ends: the shared
/// control plane lives in a static that is never dropped, and its etcd data (a 64 MiB
/// preallocated WAL in /dev/shm) must not outlive the test process.
pub(crate) struct Reaper {
    _child: Child,
    _pipe: Option<ChildStdin>,
}

impl Reaper {
    pub(crate) fn spawn(dir: &Path) -> anyhow::Result<Reaper> {
        let mut child = Command::new("sh")
            .arg("-c")
            // Give the watchdogs a moment to end the components first.
            .arg(r#"read -r _; sleep 2; rm -rf "$1""#)
            .arg("sh")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start the directory reaper")?;
        let pipe = child.stdin.take();
        Ok(Reaper {
            _child: child,
            _pipe: pipe,
        })
    }
}

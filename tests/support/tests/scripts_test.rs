//! `scripts/test` (what CI runs) refuses to run, and so never says "all checks passed", on a
//! machine where `cargo fmt` or `cargo clippy` is missing. Its `--preflight` runs only that
//! check; here it runs with a `cargo` on `PATH` that lacks one of the two subcommands.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use joiner_test_support::workspace_root;

/// Runs `scripts/test --preflight` with a `cargo` that fails `cargo <lacking> --version`
/// (as rustup's proxy does when the component is not installed) and passes everything else
/// to the real cargo. Returns the exit code and stderr.
fn preflight_without(lacking: Option<&str>) -> (Option<i32>, String) {
    let dir = tempfile_dir();
    let real = which("cargo").expect("cargo on PATH");
    let fake = dir.join("cargo");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = '{}' ]; then echo \"error: no such command: $1\" >&2; exit 101; fi\nexec '{}' \"$@\"\n",
            lacking.unwrap_or("-none-"),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new(workspace_root().join("scripts/test"))
        .arg("--preflight")
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/test --preflight");
    // A script that goes on past the check would install tools and build: stop it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/test --preflight did not stop after its check");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (status.code(), err)
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "joiner-preflight-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[test]
fn a_missing_rustfmt_or_clippy_fails_the_run() {
    for (lacking, component) in [("fmt", "rustfmt"), ("clippy", "clippy")] {
        let (code, err) = preflight_without(Some(lacking));
        assert_eq!(code, Some(1), "without cargo {lacking}: {err}");
        assert!(
            err.contains(&format!("rustup component add {component}")),
            "says what to install: {err}"
        );
        assert!(!err.contains("all checks passed"), "{err}");
    }
}

#[test]
fn with_both_the_preflight_passes() {
    let (code, err) = preflight_without(None);
    assert_eq!(code, Some(0), "{err}");
}

//! The `kube-sim` binary: prints its address, writes a kubeconfig kubectl can use, and
//! exits cleanly on SIGTERM.

use std::io::BufRead;
use std::process::{Command, Stdio};

#[test]
fn binary_serves_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--cluster-name",
            "sandbox",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.trim().starts_with("https://127.0.0.1:"),
        "address line: {line:?}"
    );
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains(line.trim()) && text.contains("current-context: sandbox"),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "kubeconfig holds tokens: owner-only");
    }
    let out = Command::new("kubectl")
        .env("KUBECONFIG", &kubeconfig)
        .args(["get", "namespaces", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("namespace/kube-system"));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "exit status on SIGTERM: {exit}");
}

#[test]
fn bad_flags_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["--kubeconfig", "/tmp/x", "--boot-delay", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--boot-delay") && err.contains("500ms"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["--kubeconfig", "/tmp/x", "--disable", "kubeproxy"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("kubeproxy") && err.contains("scheduler"),
        "{err}"
    );
}

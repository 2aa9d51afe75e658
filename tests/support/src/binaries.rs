//! Locating the workspace's binaries under test, building them first when needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PROVIDER: &str = "terraform-provider-joiner";

/// The provider binary the tests drive.
///
/// `$JOINER_PROVIDER_BIN` wins (scripts/test points it at the binary its build step made; a
/// release build can be tested the same way). Otherwise see [`workspace_bin`].
pub fn provider_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_bin("JOINER_PROVIDER_BIN", PROVIDER, PROVIDER))
}

/// The `joiner-agent` binary, for tests that run the agent as kube-sim pods.
/// `$JOINER_AGENT_BIN` wins; otherwise see [`workspace_bin`].
pub fn agent_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_bin("JOINER_AGENT_BIN", "joiner-agent", "joiner-agent"))
}

/// A binary of another workspace package: `$env_var` when set, else the one in the same
/// target directory and profile as the running test executable, after `cargo build` has run
/// once per test process (cargo knows better than we do whether it is stale, and
/// `cargo test -p joiner-e2e` alone would not build another package's binary).
///
/// scripts/test sets the variables. The fallback builds with `--workspace`: a lone
/// `cargo build -p <package>` resolves features differently from the workspace's test build,
/// so it would rebuild the dependency tree a second time, minutes on 2 cores and gigabytes
/// of disk.
pub fn workspace_bin(env_var: &str, package: &str, bin: &str) -> PathBuf {
    match std::env::var_os(env_var) {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "{env_var}={} does not exist", p.display());
            p
        }
        _ => build_next_to_test_executable(package, bin),
    }
}

fn build_next_to_test_executable(package: &str, bin_name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // <target>/<profile>/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in <target>/<profile>/deps");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::workspace_root())
        // `--workspace`, not `-p`: resolved as the workspace's test build resolves it (see
        // tests/agent-world/Cargo.toml), so the build just made by `cargo test` is reused.
        .args(["build", "--quiet", "--workspace", "--bin", bin_name]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    // The build goes to the directory the test executable came from, whatever
    // CARGO_TARGET_DIR says, so the binary we run is the one we just built.
    if let Some(target_dir) = profile_dir.parent() {
        cmd.arg("--target-dir").arg(target_dir);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run cargo build for {bin_name}: {e}"));
    assert!(
        out.status.success(),
        "cargo build --workspace --bin {bin_name} (package {package}) failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join(bin_name);
    assert!(
        bin.is_file(),
        "cargo build succeeded but {} is missing",
        bin.display()
    );
    bin
}

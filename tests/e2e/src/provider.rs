//! Locating the provider binary under test, building it first when needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The source address configurations use in `required_providers`.
pub const PROVIDER_SOURCE: &str = "joiner/joiner";
/// The fully qualified address Terraform keys reattached providers by.
pub const PROVIDER_ADDRESS: &str = "registry.terraform.io/joiner/joiner";
pub(crate) const BINARY_NAME: &str = "terraform-provider-joiner";

/// The provider binary the tests drive.
///
/// `$JOINER_PROVIDER_BIN` wins (to test a release build). Otherwise the binary is the one in
/// the same target directory and profile as the running test executable, and `cargo build`
/// runs once per test process first: cargo knows better than we do whether it is stale, and
/// `cargo test -p joiner-e2e` alone would not build another package's binary.
pub fn provider_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("JOINER_PROVIDER_BIN") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "JOINER_PROVIDER_BIN={} does not exist",
                p.display()
            );
            p
        }
        _ => build_next_to_test_executable(),
    })
}

fn build_next_to_test_executable() -> PathBuf {
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
    cmd.current_dir(joiner_test_support::workspace_root())
        .args(["build", "--quiet", "-p", BINARY_NAME, "--bin", BINARY_NAME]);
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
        .unwrap_or_else(|e| panic!("run cargo build for {BINARY_NAME}: {e}"));
    assert!(
        out.status.success(),
        "cargo build -p {BINARY_NAME} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join(BINARY_NAME);
    assert!(
        bin.is_file(),
        "cargo build succeeded but {} is missing",
        bin.display()
    );
    bin
}

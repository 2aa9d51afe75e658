//! A Terraform working directory wired to the provider under test and one emulator.

use crate::diagnostics::Diagnostic;
use crate::provider::{BINARY_NAME, PROVIDER_SOURCE};
use crate::reattach::DebugProvider;
use crate::run::{run, Run};
use crate::state::{diff_values, Plan, State};
use joiner_test_support::provider_bin;
use joiner_test_support::{terraform_bin, MotoServer};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tempfile::TempDir;

/// Everything Terraform needs to find the provider: the test's `required_providers` block.
const VERSIONS_TF: &str = r#"terraform {
  required_providers {
    joiner = {
      source = "joiner/joiner"
    }
  }
}
"#;

/// A temporary Terraform working directory with its own state, pointed at the freshly
/// built provider through `dev_overrides` (no `terraform init` needed: Terraform 1.0.3
/// loads overridden providers straight from the directory) or at a `--debug` provider
/// through `TF_REATTACH_PROVIDERS`.
///
/// The test's configuration goes in `main.tf` (`write_config`), so line numbers in
/// diagnostics are the test's own; `versions.tf` holds `required_providers`.
///
/// Every step panics with the full transcript when it does not go as expected.
/// Set `JOINER_E2E_KEEP=1` to keep the directory for a look afterwards.
pub struct Workspace {
    dir: TempDir,
    env: Vec<(String, String)>,
    timeout: Duration,
}

impl Workspace {
    /// A workspace whose provider talks to `moto`.
    pub fn new(moto: &MotoServer) -> Workspace {
        Workspace::with_env(moto.env())
    }

    /// A workspace whose provider gets `env` (on top of a scrubbed copy of ours).
    pub fn with_env(env: Vec<(String, String)>) -> Workspace {
        check_terraform_installed();
        let ws = Workspace::empty(env);
        let plugins = ws.path().join(".provider");
        std::fs::create_dir_all(&plugins).expect("create provider dir");
        // A link rather than the target directory itself: the override then holds exactly
        // one candidate executable, whatever else cargo leaves next to it.
        std::os::unix::fs::symlink(provider_bin(), plugins.join(BINARY_NAME))
            .expect("link provider binary");
        ws.write_cli_config(&format!(
            "provider_installation {{\n  dev_overrides {{\n    \"{PROVIDER_SOURCE}\" = \"{}\"\n  }}\n  direct {{}}\n}}\n",
            plugins.display()
        ));
        ws
    }

    /// A workspace that gets the provider the way users do, by `terraform init`, from
    /// wherever `cli_config` (its whole CLI configuration: a `provider_installation` block
    /// naming mirrors, no `dev_overrides`) says; `env` on top of a scrubbed copy of ours.
    pub fn installing(env: Vec<(String, String)>, cli_config: &str) -> Workspace {
        check_terraform_installed();
        let ws = Workspace::empty(env);
        ws.write_cli_config(cli_config);
        ws
    }

    /// A workspace whose Terraform attaches to an already running `--debug` provider
    /// instead of starting one. No `dev_overrides`: the reattach value alone must do.
    pub fn reattached(provider: &DebugProvider) -> Workspace {
        check_terraform_installed();
        let ws = Workspace::empty(vec![(
            "TF_REATTACH_PROVIDERS".into(),
            provider.reattach_value().to_string(),
        )]);
        ws.write_cli_config("");
        ws
    }

    fn empty(env: Vec<(String, String)>) -> Workspace {
        let ws = Workspace {
            dir: temp_dir(),
            env,
            timeout: Duration::from_secs(180),
        };
        ws.write_file("versions.tf", VERSIONS_TF);
        ws
    }

    fn write_cli_config(&self, body: &str) {
        // No plugin_cache_dir: every workspace resolves the provider on its own.
        self.write_file(".terraformrc", body);
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Per-command time limit (default 180 s); a hung provider fails the test instead of CI.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Replaces the test's configuration (`main.tf`).
    pub fn write_config(&self, hcl: &str) {
        self.write_file("main.tf", hcl);
    }

    pub fn write_file(&self, name: &str, content: &str) {
        let p = self.path().join(name);
        std::fs::write(&p, content).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    /// Runs terraform with `args` in this workspace and returns whatever happened.
    pub fn terraform(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(terraform_bin());
        cmd.current_dir(self.path()).args(args);
        // Nothing from the developer's own setup leaks in: no real AWS credentials or
        // profile, no plugin cache, no CLI args or workspace selection.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("AWS_")
                || (k.starts_with("TF_") && k != "TF_LOG" && k != "TF_LOG_PATH")
            {
                cmd.env_remove(k.as_ref());
            }
        }
        cmd.env("TF_CLI_CONFIG_FILE", self.path().join(".terraformrc"))
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let label = format!(
            "terraform {}   # in {}",
            args.join(" "),
            self.path().display()
        );
        run(cmd, label, self.timeout)
    }

    fn must(&self, args: &[&str], what: &str) -> Run {
        let r = self.terraform(args);
        assert!(r.success(), "{what} failed:\n{r}");
        r
    }

    /// `terraform plan`, saved and read back as JSON, so tests can ask what it would do.
    pub fn plan(&self) -> Plan {
        self.must(
            &["plan", "-no-color", "-input=false", "-out=tfplan"],
            "plan",
        );
        let shown = self.must(&["show", "-no-color", "-json", "tfplan"], "show plan");
        Plan(parse_json(&shown))
    }

    /// `terraform apply -auto-approve`, which must succeed.
    pub fn apply(&self) -> Run {
        self.must(
            &["apply", "-no-color", "-input=false", "-auto-approve"],
            "apply",
        )
    }

    /// An apply that must fail with an error mentioning `message` (whitespace-insensitive).
    /// Returns the error diagnostic.
    pub fn apply_fails_with(&self, message: &str) -> Diagnostic {
        let r = self.terraform(&[
            "apply",
            "-no-color",
            "-input=false",
            "-auto-approve",
            "-json",
        ]);
        expect_error(&r, "apply", message)
    }

    /// Step 2 of the replay: a plan without refresh must propose nothing, i.e. what apply
    /// stored is exactly what the configuration asks for.
    pub fn plan_is_empty(&self) {
        self.expect_empty(&["-refresh=false"], "non-refresh plan");
    }

    /// Step 3: a plan after refresh must propose nothing, i.e. reading the remote object
    /// back gives the state apply stored.
    pub fn refresh_plan_is_empty(&self) {
        self.expect_empty(&[], "refresh plan");
    }

    fn expect_empty(&self, extra: &[&str], what: &str) {
        let mut args = vec!["plan", "-no-color", "-input=false", "-detailed-exitcode"];
        args.extend_from_slice(extra);
        let r = self.terraform(&args);
        match r.code() {
            Some(0) => {}
            Some(2) => panic!("{what} is not empty:\n{r}"),
            _ => panic!("{what} failed:\n{r}"),
        }
    }

    /// A plan that must fail with an error that mentions `message` and that Terraform
    /// attributes to the attribute `attribute` (the source line it shows starts with
    /// `attribute =`). Returns the diagnostic for further checks.
    pub fn plan_fails_with(&self, attribute: &str, message: &str) -> Diagnostic {
        let r = self.terraform(&["plan", "-no-color", "-input=false", "-json"]);
        let d = expect_error(&r, "plan", message);
        assert_eq!(
            d.attribute().as_deref(),
            Some(attribute),
            "the error does not point at attribute `{attribute}` (no or wrong attribute path?):\n{d}\n{r}"
        );
        d
    }

    /// A plan that must succeed, run with `-json` and `extra` arguments: the warnings it
    /// reported (provider warnings included), with the source line each points at.
    pub fn plan_warnings(&self, extra: &[&str]) -> Vec<Diagnostic> {
        let mut args = vec!["plan", "-no-color", "-input=false", "-json"];
        args.extend_from_slice(extra);
        let r = self.must(&args, "plan");
        Diagnostic::parse_stream(&r.stdout)
            .into_iter()
            .filter(|d| d.severity == "warning")
            .collect()
    }

    /// The state, as `terraform show -json` prints it.
    pub fn state(&self) -> State {
        let r = self.must(&["show", "-no-color", "-json"], "show");
        State(parse_json(&r))
    }

    /// The attribute values of `address`, which must be in state.
    pub fn values(&self, address: &str) -> Value {
        let s = self.state();
        s.values(address)
            .cloned()
            .unwrap_or_else(|| panic!("{address} is not in state; state has {:?}", s.addresses()))
    }

    /// One attribute of `address` (null when unset).
    pub fn attr(&self, address: &str, attribute: &str) -> Value {
        self.values(address)[attribute].clone()
    }

    /// A root module output.
    pub fn output(&self, name: &str) -> Value {
        let r = self.must(&["output", "-no-color", "-json", name], "output");
        parse_json(&r)
    }

    /// `terraform import <address> <id>` into this workspace's state.
    pub fn import(&self, address: &str, id: &str) -> Run {
        self.must(
            &["import", "-no-color", "-input=false", address, id],
            &format!("import {address} {id}"),
        )
    }

    /// Step 4: imports `id` into a fresh state beside this one (same configuration and
    /// emulator) and checks that the imported attributes equal the applied ones, except
    /// `ignore` (attributes the read cannot recover, like ImportStateVerifyIgnore).
    /// Returns the fresh workspace, e.g. to check that its plan is empty.
    pub fn import_verify(&self, address: &str, id: &str, ignore: &[&str]) -> Workspace {
        let applied = self.values(address);
        let fresh = self.sibling();
        fresh.import(address, id);
        let imported = fresh.values(address);
        let diffs = diff_values(&applied, &imported, ignore);
        assert!(
            diffs.is_empty(),
            "importing {address} by `{id}` does not reproduce the applied state:\n{}",
            diffs.join("\n")
        );
        fresh
    }

    /// A new workspace with the same configuration files, provider wiring and environment,
    /// but no state.
    pub fn sibling(&self) -> Workspace {
        let ws = Workspace {
            dir: temp_dir(),
            env: self.env.clone(),
            timeout: self.timeout,
        };
        copy_config(self.path(), ws.path());
        ws
    }

    /// Forgets `address` without touching the remote object.
    pub fn state_rm(&self, address: &str) -> Run {
        self.must(&["state", "rm", "-no-color", address], "state rm")
    }

    /// Step 5: `terraform destroy -auto-approve`, which must succeed and empty the state.
    pub fn destroy(&self) -> Run {
        let r = self.must(
            &["destroy", "-no-color", "-input=false", "-auto-approve"],
            "destroy",
        );
        let left = self.state().addresses();
        let managed: Vec<_> = left.iter().filter(|a| !a.starts_with("data.")).collect();
        assert!(managed.is_empty(), "destroy left {managed:?} in state");
        r
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if keep_dirs() {
            eprintln!("kept workspace {}", self.path().display());
        }
    }
}

fn keep_dirs() -> bool {
    std::env::var_os("JOINER_E2E_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

fn temp_dir() -> TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix("joiner-e2e-")
        .tempdir()
        .expect("create temp dir");
    dir.disable_cleanup(keep_dirs());
    dir
}

fn check_terraform_installed() {
    let tf = terraform_bin();
    assert!(
        tf.exists(),
        "{} is missing: run scripts/install-tools.sh (or set TERRAFORM)",
        tf.display()
    );
}

/// Copies the top-level files (configuration, CLI config) and the provider link.
fn copy_config(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read workspace").flatten() {
        let name = entry.file_name();
        let name_s = name.to_string_lossy();
        let src = entry.path();
        if name_s == ".provider" {
            let target = std::fs::read_link(src.join(BINARY_NAME)).expect("provider link");
            std::fs::create_dir_all(to.join(".provider")).expect("create provider dir");
            std::os::unix::fs::symlink(target, to.join(".provider").join(BINARY_NAME))
                .expect("link provider");
        } else if name_s.ends_with(".tf") || name_s == ".terraformrc" {
            let text = std::fs::read_to_string(&src).expect("read config file");
            let text = text.replace(&from.display().to_string(), &to.display().to_string());
            std::fs::write(to.join(&name), text).expect("write config file");
        }
    }
}

fn parse_json(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("`{}` printed no JSON ({e}):\n{r}", r.command))
}

fn expect_error(r: &Run, what: &str, message: &str) -> Diagnostic {
    assert!(
        !r.success(),
        "{what} succeeded but should have failed with `{message}`:\n{r}"
    );
    let diags = Diagnostic::parse_stream(&r.stdout);
    let errors: Vec<_> = diags.iter().filter(|d| d.is_error()).collect();
    errors
        .iter()
        .find(|d| d.mentions(message))
        .map(|d| (*d).clone())
        .unwrap_or_else(|| {
            let shown: Vec<String> = errors.iter().map(|d| d.to_string()).collect();
            panic!(
                "{what} failed, but no error mentions `{message}`. Errors:\n{}\n{r}",
                shown.join("\n")
            )
        })
}

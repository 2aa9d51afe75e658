//! The real Terraform CLI on a copy of the example, with the provider from this build.
//!
//! The copy keeps the repository's layout (`examples/<name>` next to `terraform-modules/`)
//! so the example's relative module sources resolve, and nothing is written into the
//! checkout. `dev_overrides` points Terraform at the built provider (no registry). The
//! provider reaches kube-sim with its default, an EKS token: the local world binds the
//! cluster's endpoint to kube-sim (`procs::bind_eks_endpoint`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub struct Terraform {
    pub bin: PathBuf,
    /// The example's directory inside the copy: where terraform runs.
    pub dir: PathBuf,
    pub cli_config: PathBuf,
    env: Vec<(String, String)>,
    logs: PathBuf,
}

pub struct Output {
    pub ok: bool,
    pub text: String,
    pub elapsed: Duration,
}

impl Terraform {
    /// Copies `example` (relative to `root`) and `terraform-modules/` into `work/tf`.
    pub fn prepare(
        bin: &Path,
        root: &Path,
        example: &str,
        work: &Path,
        provider: &Path,
        env: Vec<(String, String)>,
    ) -> Result<Terraform> {
        let tf_root = work.join("tf");
        copy_tf_tree(
            &root.join("terraform-modules"),
            &tf_root.join("terraform-modules"),
        )?;
        let dir = tf_root.join(example);
        copy_tf_tree(&root.join(example), &dir)?;
        let plugins = work.join("plugins");
        std::fs::create_dir_all(&plugins)?;
        let link = plugins.join("terraform-provider-joiner");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(provider, &link)?;
        let cli_config = work.join("terraformrc");
        std::fs::write(
            &cli_config,
            format!(
                "provider_installation {{\n  dev_overrides {{\n    \"joiner/joiner\" = \"{}\"\n  }}\n  direct {{}}\n}}\n",
                plugins.display()
            ),
        )?;
        let logs = work.join("logs");
        std::fs::create_dir_all(&logs)?;
        Ok(Terraform {
            bin: bin.to_path_buf(),
            dir,
            cli_config,
            env,
            logs,
        })
    }

    /// The same working directory again, from another thread.
    pub fn reopen(
        bin: PathBuf,
        dir: PathBuf,
        cli_config: PathBuf,
        env: Vec<(String, String)>,
        logs: PathBuf,
    ) -> Terraform {
        Terraform {
            bin,
            dir,
            cli_config,
            env,
            logs,
        }
    }

    pub fn write_override(&self, name: &str, body: &str) -> Result<()> {
        let p = self.dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("write {}", p.display()))
    }

    pub fn remove_override(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(name));
    }

    /// The environment (besides the CLI config) a user needs to run terraform here.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Runs terraform, logging its output to `logs/<log>.log`; fails after `timeout`.
    pub fn run(&self, args: &[&str], log: &str, timeout: Duration) -> Result<Output> {
        let log_path = self.logs.join(format!("{log}.log"));
        let out = std::fs::File::create(&log_path)?;
        let mut cmd = Command::new(&self.bin);
        cmd.current_dir(&self.dir).args(args);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("AWS_") || (k.starts_with("TF_") && k != "TF_LOG") {
                cmd.env_remove(k.as_ref());
            }
        }
        cmd.env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start {}", self.bin.display()))?;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "terraform {} did not finish within {} s; the end of {}:\n{}",
                    args.join(" "),
                    timeout.as_secs(),
                    log_path.display(),
                    crate::procs::tail(&log_path, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        Ok(Output {
            ok: status.success(),
            text,
            elapsed: start.elapsed(),
        })
    }
}

/// Copies `*.tf`, `*.tfvars` and `*.md` files, recursively, skipping Terraform's own state
/// and caches (a user may have run terraform in the checkout).
fn copy_tf_tree(from: &Path, to: &Path) -> Result<()> {
    if !from.is_dir() {
        bail!("{} does not exist", from.display());
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let name_s = name.to_string_lossy();
        let path = entry.path();
        if name_s.starts_with('.') || name_s.starts_with("terraform.tfstate") {
            continue;
        }
        if path.is_dir() {
            copy_tf_tree(&path, &to.join(&name))?;
        } else if name_s.ends_with(".tf") || name_s.ends_with(".tfvars") || name_s.ends_with(".md")
        {
            std::fs::copy(&path, to.join(&name))
                .with_context(|| format!("copy {}", path.display()))?;
        }
    }
    Ok(())
}

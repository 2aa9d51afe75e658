//! The provider's own resource use during a Terraform command: the workspace's provider
//! link is swapped for a script that runs it under `/usr/bin/time`, one record per provider
//! process Terraform starts. For benchmarks (figures), never for pass/fail.

use std::path::{Path, PathBuf};

use crate::Workspace;

/// What the provider processes of one or more commands used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProviderUsage {
    pub processes: usize,
    /// Sum of user + system CPU seconds over the processes.
    pub cpu_seconds: f64,
    /// The largest peak RSS of any one process, in KiB.
    pub peak_rss_kib: u64,
}

/// Wraps the workspace's provider; returns the directory the records go to, or None when
/// `/usr/bin/time` is not installed.
pub fn measure_provider(tf: &Workspace) -> Option<PathBuf> {
    if !Path::new("/usr/bin/time").exists() {
        return None;
    }
    let link = tf.path().join(".provider/terraform-provider-joiner");
    let real = std::fs::read_link(&link).ok()?;
    let dir = tf.path().join("usage");
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::remove_file(&link).ok()?;
    std::fs::write(
        &link,
        format!(
            "#!/bin/sh\nexec /usr/bin/time -f 'usage %U %S %M' -o '{}/p.'$$ '{}' \"$@\"\n",
            dir.display(),
            real.display()
        ),
    )
    .ok()?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o755)).ok()?;
    Some(dir)
}

/// Reads and removes the records written so far (so the next command starts afresh).
pub fn take_usage(dir: &Path) -> ProviderUsage {
    let mut u = ProviderUsage::default();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let _ = std::fs::remove_file(entry.path());
        let Some(line) = text.lines().find(|l| l.starts_with("usage ")) else {
            continue;
        };
        let f: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() == 3 {
            u.processes += 1;
            u.cpu_seconds += f[0] + f[1];
            u.peak_rss_kib = u.peak_rss_kib.max(f[2] as u64);
        }
    }
    u
}

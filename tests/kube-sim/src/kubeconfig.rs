//! The kubeconfig kube-sim writes: one cluster (its address and CA), an admin user and a
//! read-only viewer user, each with a bearer token, and a context for each.

use base64::Engine;

pub fn render(cluster: &str, url: &str, ca_pem: &str, token: &str, viewer_token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {cluster}-admin
  user:
    token: {token}
- name: {cluster}-viewer
  user:
    token: {viewer_token}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {cluster}-admin
    namespace: default
- name: {cluster}-viewer
  context:
    cluster: {cluster}
    user: {cluster}-viewer
    namespace: default
current-context: {cluster}
preferences: {{}}
"
    )
}

/// Writes a file readable by its owner only: it holds bearer tokens.
pub fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    f.write_all(contents.as_bytes())
}

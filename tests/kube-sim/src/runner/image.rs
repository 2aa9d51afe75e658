//! Where a container's program comes from: a local binary, or an unpacked OCI root
//! filesystem with the image's entrypoint, default arguments and environment.
//!
//! kube-sim has no container runtime: the "image" is only a way to find a program and the
//! defaults Kubernetes would take from the image config, so that a pod spec runs the same
//! command line it would run on a node.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

/// The parts of an OCI image config (`config` object) a kubelet uses to start a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` entries.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

impl ImageConfig {
    /// From an OCI image config document (the blob a manifest's `config` points at).
    pub fn from_image_config(doc: &Value) -> ImageConfig {
        let c = &doc["config"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        ImageConfig {
            entrypoint: strings(&c["Entrypoint"]),
            cmd: strings(&c["Cmd"]),
            env: strings(&c["Env"]),
            working_dir: c["WorkingDir"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            user: c["User"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        }
    }
}

/// A local stand-in for a container image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// A binary on this machine: it is the image's entrypoint, and the image has no default
    /// arguments. The process inherits this machine's `PATH`.
    Binary(PathBuf),
    /// An unpacked root filesystem: absolute program paths resolve inside it.
    Rootfs { root: PathBuf, config: ImageConfig },
}

/// File name of an OCI image config kept next to an unpacked root filesystem. An OCI runtime
/// bundle (what `umoci unpack` writes) merges Entrypoint and Cmd into `process.args`, which
/// loses the split a pod's `args` needs; this file restores it when present.
pub const IMAGE_CONFIG_FILE: &str = "image-config.json";

impl ImageSource {
    /// A binary path, or a directory: an OCI runtime bundle (`config.json` + its root
    /// filesystem) or a bare root filesystem, with [`IMAGE_CONFIG_FILE`] beside it if any.
    pub fn from_path(path: &Path) -> anyhow::Result<ImageSource> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("image source {}", path.display()))?;
        if meta.is_file() {
            return Ok(ImageSource::Binary(path.to_path_buf()));
        }
        if !meta.is_dir() {
            bail!(
                "image source {}: neither a file nor a directory",
                path.display()
            );
        }
        let image_config = path.join(IMAGE_CONFIG_FILE);
        let explicit = if image_config.is_file() {
            let text = std::fs::read_to_string(&image_config)
                .with_context(|| format!("read {}", image_config.display()))?;
            let doc: Value = serde_json::from_str(&text)
                .with_context(|| format!("parse {}", image_config.display()))?;
            Some(ImageConfig::from_image_config(&doc))
        } else {
            None
        };
        let bundle_config = path.join("config.json");
        if bundle_config.is_file() {
            let text = std::fs::read_to_string(&bundle_config)
                .with_context(|| format!("read {}", bundle_config.display()))?;
            let spec: Value = serde_json::from_str(&text)
                .with_context(|| format!("parse {}", bundle_config.display()))?;
            if spec["process"].is_object() {
                let root = path.join(spec["root"]["path"].as_str().unwrap_or("rootfs"));
                if !root.is_dir() {
                    bail!(
                        "image source {}: the bundle's root filesystem {} is missing",
                        path.display(),
                        root.display()
                    );
                }
                let config = explicit.unwrap_or_else(|| runtime_process_as_config(&spec));
                return Ok(ImageSource::Rootfs { root, config });
            }
        }
        Ok(ImageSource::Rootfs {
            root: path.to_path_buf(),
            config: explicit.unwrap_or_default(),
        })
    }

    /// The image's Entrypoint and Cmd.
    pub fn defaults(&self) -> (Vec<String>, Vec<String>) {
        match self {
            ImageSource::Binary(p) => (vec![p.display().to_string()], vec![]),
            ImageSource::Rootfs { config, .. } => (config.entrypoint.clone(), config.cmd.clone()),
        }
    }
}

/// Without the image config, a runtime bundle's `process.args` is Entrypoint + Cmd merged.
/// kube-sim takes the first word as the Entrypoint and the rest as Cmd: right for images
/// with a one-word entrypoint (the usual `ENTRYPOINT ["/binary"]`), documented otherwise.
fn runtime_process_as_config(spec: &Value) -> ImageConfig {
    let p = &spec["process"];
    let args: Vec<String> = p["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let (entrypoint, cmd) = match args.split_first() {
        Some((first, rest)) => (vec![first.clone()], rest.to_vec()),
        None => (vec![], vec![]),
    };
    ImageConfig {
        entrypoint,
        cmd,
        env: p["env"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        working_dir: p["cwd"].as_str().map(str::to_string),
        user: None,
    }
}

/// The repository part of an image reference: without `@digest` and without `:tag` (a
/// colon after the last `/` only, so `host:5000/x` keeps its port).
pub fn image_name(reference: &str) -> &str {
    let no_digest = reference.split('@').next().unwrap_or(reference);
    let last_slash = no_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match no_digest[last_slash..].rfind(':') {
        Some(i) => &no_digest[..last_slash + i],
        None => no_digest,
    }
}

/// The configured source for an image reference: the first entry whose name equals the
/// reference's repository, or is a prefix of it.
pub fn lookup<'a>(images: &'a [(String, ImageSource)], reference: &str) -> Option<&'a ImageSource> {
    let name = image_name(reference);
    images
        .iter()
        .find(|(k, _)| name == k || (!k.is_empty() && name.starts_with(k.as_str())))
        .map(|(_, s)| s)
}

/// Parses the CLI form `NAME=PATH`.
pub fn parse_image_arg(s: &str) -> Result<(String, ImageSource), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("--image {s:?}: expected NAME=PATH"))?;
    if name.is_empty() {
        return Err(format!("--image {s:?}: the image name is empty"));
    }
    let source = ImageSource::from_path(Path::new(path)).map_err(|e| format!("--image: {e:#}"))?;
    Ok((name.to_string(), source))
}

/// Resolves a program name the way a container runtime would inside the image: absolute
/// paths under the root filesystem, bare names through the image's `PATH`.
pub fn resolve_program(root: &Path, program: &str, image_env: &[String]) -> Option<PathBuf> {
    if program.starts_with('/') {
        let p = root.join(program.trim_start_matches('/'));
        return p.is_file().then_some(p);
    }
    if program.contains('/') {
        let p = root.join(program);
        return p.is_file().then_some(p);
    }
    let path = image_env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| root.join(d.trim_start_matches('/')).join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_drop_tag_and_digest_but_keep_registry_port() {
        assert_eq!(
            image_name("public.ecr.aws/joiner/joiner-agent:0.1.0"),
            "public.ecr.aws/joiner/joiner-agent"
        );
        assert_eq!(image_name("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(image_name("localhost:5000/x:v1"), "localhost:5000/x");
        assert_eq!(image_name("x@sha256:abcd"), "x");
        assert_eq!(image_name("busybox"), "busybox");
    }

    #[test]
    fn lookup_matches_exact_names_and_prefixes() {
        let images = vec![
            ("joiner-agent".to_string(), ImageSource::Binary("/a".into())),
            (
                "public.ecr.aws/joiner/".to_string(),
                ImageSource::Binary("/b".into()),
            ),
        ];
        assert_eq!(
            lookup(&images, "joiner-agent:1"),
            Some(&ImageSource::Binary("/a".into()))
        );
        assert_eq!(
            lookup(&images, "public.ecr.aws/joiner/joiner-agent:0.1.0"),
            Some(&ImageSource::Binary("/b".into()))
        );
        assert_eq!(lookup(&images, "nginx:1.27"), None);
    }

    #[test]
    fn a_runtime_bundle_without_image_config_splits_off_the_first_word() {
        let spec = serde_json::json!({"process": {"args": ["/joiner-agent", "run"], "env": ["PATH=/bin"], "cwd": "/"}});
        let c = runtime_process_as_config(&spec);
        assert_eq!(c.entrypoint, vec!["/joiner-agent"]);
        assert_eq!(c.cmd, vec!["run"]);
        assert_eq!(c.env, vec!["PATH=/bin"]);
    }

    #[test]
    fn cli_form_is_name_equals_path() {
        assert!(parse_image_arg("no-equals").is_err());
        assert!(parse_image_arg("=/bin/true").is_err());
        assert!(parse_image_arg("x=/definitely/not/here")
            .unwrap_err()
            .contains("/definitely/not/here"));
        let (name, src) = parse_image_arg("sh=/bin/sh").unwrap();
        assert_eq!(name, "sh");
        assert_eq!(src, ImageSource::Binary("/bin/sh".into()));
    }
}

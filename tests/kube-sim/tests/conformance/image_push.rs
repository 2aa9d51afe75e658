//! Publishing the agent's image: `scripts/image --push` uploads the layout it builds to an
//! OCI registry, here distribution/distribution (Debian's `docker-registry`, installed into
//! .tools by `scripts/install-registry.sh`) on loopback, and the image comes back by digest
//! exactly as built: the manifest's bytes and digest, the config and the layer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The checkout this test was built from (its scripts, examples and modules).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image's statically linked agent (`JOINER_AGENT_STATIC_BIN`, as scripts/test sets it),
/// else the one `scripts/static-agent --profile dev` builds: `scripts/image` refuses a
/// dynamically linked binary.
fn agent_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("JOINER_AGENT_STATIC_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let out = run(Command::new(root().join("scripts/static-agent"))
        .current_dir(root())
        .args(["--profile", "dev"]));
    PathBuf::from(out.trim())
}

fn sha256_of(file: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(file));
    format!("sha256:{}", out.split_whitespace().next().unwrap())
}

/// The registry on a free loopback port, its storage in `dir`; killed on drop.
struct Registry {
    child: Child,
    host: String,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let bin = run(&mut Command::new(
            root().join("scripts/install-registry.sh"),
        ))
        .trim()
        .to_string();
        let port = joiner_test_support::free_port();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .expect("start the registry");
        let mut registry = Registry {
            child,
            host: format!("127.0.0.1:{port}"),
        };
        // Up when the API root answers (the distribution spec's version check).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new("curl")
                .args(["-fsS", "-o", "/dev/null"])
                .arg(format!("http://{}/v2/", registry.host))
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return registry;
            }
            if let Ok(Some(status)) = registry.child.try_wait() {
                panic!("the registry exited with {status}");
            }
            assert!(
                Instant::now() < deadline,
                "the registry did not answer in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GETs `path` under `/v2/joiner/joiner-agent/` into `to`; returns the response headers.
    fn get(&self, path: &str, accept: &str, to: &Path) -> String {
        run(Command::new("curl")
            .args(["-fsS", "-D", "-", "-H"])
            .arg(format!("Accept: {accept}"))
            .arg("-o")
            .arg(to)
            .arg(format!(
                "http://{}/v2/joiner/joiner-agent/{path}",
                self.host
            )))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

#[test]
fn scripts_image_pushes_to_a_registry_and_the_image_pulls_back_by_digest() {
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start(work.path());
    let layout = work.path().join("layout");
    let push = |out: &Path| {
        run(Command::new(root().join("scripts/image"))
            .arg("--binary")
            .arg(agent_binary())
            .arg("--out")
            .arg(out)
            .arg("--push")
            .arg(format!("{}/joiner/joiner-agent", registry.host)))
    };
    let printed = push(&layout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 2, "{printed}");
    let pinned = lines[1];
    let (repo, digest) = pinned.split_once('@').expect("REPOSITORY@DIGEST");
    assert_eq!(repo, format!("{}/joiner/joiner-agent", registry.host));

    // The layout's manifest is the one pinned.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"][0]["digest"], digest, "{index}");
    let built = |d: &str| {
        layout
            .join("blobs/sha256")
            .join(d.trim_start_matches("sha256:"))
    };

    // By digest: the same bytes, which hash to the digest, as the registry also says.
    let pulled = work.path().join("manifest.json");
    let headers = registry.get(&format!("manifests/{digest}"), MANIFEST, &pulled);
    assert_eq!(sha256_of(&pulled), digest);
    assert_eq!(
        header(&headers, "Docker-Content-Digest"),
        Some(digest),
        "{headers}"
    );
    assert_eq!(
        header(&headers, "Content-Type"),
        Some(MANIFEST),
        "{headers}"
    );
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(built(digest)).unwrap()
    );

    // Its config and layer, each by digest, byte for byte.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&pulled).unwrap()).unwrap();
    let mut blobs = vec![manifest["config"]["digest"].as_str().unwrap().to_string()];
    for layer in manifest["layers"].as_array().unwrap() {
        blobs.push(layer["digest"].as_str().unwrap().to_string());
    }
    assert_eq!(blobs.len(), 2, "{manifest}");
    for d in &blobs {
        let to = work.path().join("blob");
        registry.get(&format!("blobs/{d}"), "*/*", &to);
        assert_eq!(&sha256_of(&to), d);
        assert_eq!(
            std::fs::read(&to).unwrap(),
            std::fs::read(built(d)).unwrap(),
            "{d}"
        );
    }

    // The tag (the version) names the same manifest.
    let version = std::fs::read_to_string(root().join("agent/Cargo.toml"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("version = \"")?
                .strip_suffix('"')
                .map(str::to_string)
        })
        .unwrap();
    let by_tag = work.path().join("by-tag.json");
    let headers = registry.get(&format!("manifests/{version}"), MANIFEST, &by_tag);
    assert_eq!(
        header(&headers, "Docker-Content-Digest"),
        Some(digest),
        "{headers}"
    );

    // Pushing the same build again is a no-op with the same digest (reproducible layout,
    // blobs the registry has are not sent again).
    let again = push(&work.path().join("layout-again"));
    assert_eq!(again.lines().nth(1), Some(pinned));
}

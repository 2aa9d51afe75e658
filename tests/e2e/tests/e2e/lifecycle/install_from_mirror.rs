//! The provider as users install it: `terraform init` from release files, no `dev_overrides`.
//!
//! `scripts/release` archives the provider binary the suite built (`JOINER_PROVIDER_BIN`, a
//! debug build: a release build would cost minutes of CPU and prove nothing more about the
//! packaging) into the registry's files, signs the checksums with a throwaway GPG key made
//! here, and writes a mirror directory. Then, under whatever CLI `TERRAFORM` names
//! (Terraform 1.0.3, OpenTofu, current Terraform: `scripts/test` runs it under each),
//! `examples/quickstart` is initialised and planned against the emulator, its provider
//! installed from:
//! 1. a filesystem mirror, packed layout (the zips as released);
//! 2. a filesystem mirror, unpacked layout (`VERSION/OS_ARCH/` directories);
//! 3. a network mirror (the Provider Network Mirror Protocol) served over HTTPS on loopback
//!    with a test CA the CLI trusts through `SSL_CERT_FILE` (Go's crypto/x509 reads it on
//!    Linux).
//!
//! The CLI configuration names only the mirror (no `direct` method) and every request to
//! anywhere but loopback goes to a proxy that refuses connections, so nothing reaches a
//! public registry. The lock file must record the package's `h1:` hash, the one the mirror
//! publishes (computed by scripts/release independently of the CLI); a second `init` with
//! that lock file installs again, and a tampered archive is refused, by the lock file in
//! the filesystem mirror case and by the network mirror's published hashes in the other.
//!
//! The lock file holds no `zh:` hash here: the CLIs record the zip hashes of the
//! SHA256SUMS file only for packages whose signature they verified, which happens when
//! installing from a registry, never from a mirror (hashicorp/terraform
//! internal/providercache/installer.go, `SignedByAnyParty`). The test checks the `zh:` the
//! network mirror publishes against SHA256SUMS instead, and the CLI checks the download
//! against it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use joiner_e2e::{provider_bin, terraform_bin, Aws, MotoServer, Workspace};
use serde_json::{json, Value};

const NAME: &str = "terraform-provider-joiner";
const PLATFORM: &str = "linux_amd64";

/// The checkout this test was built from (its scripts, examples and modules).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn version() -> String {
    let toml = std::fs::read_to_string(root().join("provider/Cargo.toml")).unwrap();
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("version in provider/Cargo.toml")
        .to_string()
}

/// The registry host `joiner/joiner` stands for under the CLI being tested.
fn registry_host() -> &'static str {
    static HOST: OnceLock<&'static str> = OnceLock::new();
    HOST.get_or_init(|| {
        let out = Command::new(terraform_bin())
            .arg("version")
            .env("CHECKPOINT_DISABLE", "1")
            .output()
            .expect("run terraform version");
        if String::from_utf8_lossy(&out.stdout).contains("OpenTofu") {
            "registry.opentofu.org"
        } else {
            "registry.terraform.io"
        }
    })
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// A throwaway signing key in its own GNUPGHOME; returns its fingerprint. RSA, as the
/// Terraform Registry requires of the keys it verifies releases with.
fn test_key(gnupg: &Path) -> String {
    std::fs::create_dir_all(gnupg).unwrap();
    std::fs::set_permissions(gnupg, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    sh(Command::new("gpg")
        .env("GNUPGHOME", gnupg)
        .args(["--batch", "--quiet", "--passphrase", "", "--quick-gen-key"])
        .args([
            "joiner release test <release-test@joiner.invalid>",
            "rsa2048",
            "sign",
            "1d",
        ]));
    let listed = sh(Command::new("gpg").env("GNUPGHOME", gnupg).args([
        "--batch",
        "--with-colons",
        "--list-secret-keys",
    ]));
    listed
        .lines()
        .find_map(|l| l.strip_prefix("fpr:"))
        .map(|l| l.trim_matches(':').to_string())
        .expect("the test key's fingerprint")
}

/// Hard links (copies across file systems) every file of `from` into `to`, so that each
/// case can tamper with its own mirror.
fn link_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            link_tree(&src, &dst);
        } else if std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Replaces `zip` with an archive holding the same binary plus one more file: another
/// package under the same name.
fn tamper(zip: &Path) {
    let bytes = std::fs::read(zip).unwrap();
    std::fs::remove_file(zip).unwrap();
    std::fs::write(zip, bytes).unwrap();
    let extra = zip.with_file_name("README.txt");
    std::fs::write(&extra, "not from the release\n").unwrap();
    sh(Command::new("zip").arg("-q").arg("-j").arg(zip).arg(&extra));
    std::fs::remove_file(extra).unwrap();
}

/// The provider block of `.terraform.lock.hcl` for `address`: its version and hashes.
fn locked(ws: &Workspace, address: &str) -> (String, BTreeSet<String>) {
    let path = ws.path().join(".terraform.lock.hcl");
    let text = std::fs::read_to_string(&path).expect("init wrote .terraform.lock.hcl");
    let head = format!("provider \"{address}\" {{");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("no `{head}` in the lock file:\n{text}"));
    let block = &text[start..];
    let block = &block[..block.find("\n}").expect("block end")];
    let quoted = |line: &str| line.split('"').nth(1).map(str::to_string);
    let version = block
        .lines()
        .find(|l| l.trim_start().starts_with("version "))
        .and_then(quoted)
        .expect("a locked version");
    let hashes = block
        .lines()
        .filter_map(quoted)
        .filter(|h| h.starts_with("h1:") || h.starts_with("zh:"))
        .collect();
    (version, hashes)
}

/// The release files, built once: the directory they are in and the mirror written beside.
struct Release {
    _dir: tempfile::TempDir,
    out: PathBuf,
    mirror: PathBuf,
    gnupg: PathBuf,
    version: String,
}

fn release() -> Release {
    let dir = tempfile::Builder::new()
        .prefix("joiner-release-")
        .tempdir()
        .unwrap();
    let gnupg = dir.path().join("gnupg");
    let key = test_key(&gnupg);
    let (out, mirror) = (dir.path().join("release"), dir.path().join("mirror"));
    let printed = sh(Command::new(root().join("scripts/release"))
        .env("GNUPGHOME", &gnupg)
        .arg("--out")
        .arg(&out)
        .arg("--binary")
        .arg(format!("{PLATFORM}={}", provider_bin().display()))
        .args(["--sign-key", &key])
        .arg("--mirror")
        .arg(&mirror));
    assert_eq!(printed.trim(), out.display().to_string());
    Release {
        _dir: dir,
        out,
        mirror,
        gnupg,
        version: version(),
    }
}

/// The files the registry takes: names, the archive's one binary, the manifest, the
/// checksums and their signature.
fn check_release_files(r: &Release) {
    let v = &r.version;
    let zip = format!("{NAME}_{v}_{PLATFORM}.zip");
    let manifest = format!("{NAME}_{v}_manifest.json");
    let sums = format!("{NAME}_{v}_SHA256SUMS");
    let names: BTreeSet<String> = std::fs::read_dir(&r.out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let want: BTreeSet<String> = [&zip, &manifest, &sums, &format!("{sums}.sig")]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(names, want, "release files");

    let listed = sh(Command::new("unzip").arg("-Z1").arg(r.out.join(&zip)));
    assert_eq!(listed.lines().collect::<Vec<_>>(), [format!("{NAME}_v{v}")]);
    let bytes = Command::new("unzip")
        .arg("-p")
        .arg(r.out.join(&zip))
        .output()
        .expect("unzip -p")
        .stdout;
    assert!(
        bytes == std::fs::read(provider_bin()).unwrap(),
        "the archived binary is not the provider binary"
    );

    assert_eq!(
        read_json(&r.out.join(&manifest)),
        json!({"version": 1, "metadata": {"protocol_versions": ["6.0"]}})
    );

    let sums_text = std::fs::read_to_string(r.out.join(&sums)).unwrap();
    let summed: BTreeSet<&str> = sums_text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(summed, BTreeSet::from([zip.as_str(), manifest.as_str()]));
    sh(Command::new("sha256sum")
        .current_dir(&r.out)
        .args(["--check", "--strict", &sums]));

    let verify = |file: &Path| {
        Command::new("gpg")
            .env("GNUPGHOME", &r.gnupg)
            .args(["--batch", "--verify"])
            .arg(r.out.join(format!("{sums}.sig")))
            .arg(file)
            .output()
            .expect("gpg --verify")
    };
    let good = verify(&r.out.join(&sums));
    assert!(
        good.status.success(),
        "the signature does not verify:\n{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let forged = r.out.join("forged");
    std::fs::write(&forged, sums_text.replacen('0', "1", 1)).unwrap();
    assert!(
        !verify(&forged).status.success(),
        "the signature verifies changed checksums too"
    );
    std::fs::remove_file(forged).unwrap();
}

/// The mirror's protocol files for the CLI's host; returns the published `h1:` hash.
fn check_mirror_metadata(r: &Release) -> String {
    let v = &r.version;
    let dir = r.mirror.join(registry_host()).join("joiner/joiner");
    assert_eq!(
        read_json(&dir.join("index.json")),
        json!({"versions": {v.as_str(): {}}})
    );
    let meta = read_json(&dir.join(format!("{v}.json")));
    let archive = &meta["archives"][PLATFORM];
    let zip = format!("{NAME}_{v}_{PLATFORM}.zip");
    assert_eq!(archive["url"], json!(zip), "{meta}");
    assert!(dir.join(&zip).is_file(), "the mirror holds {zip}");
    let hashes: Vec<&str> = archive["hashes"]
        .as_array()
        .expect("hashes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let sums = std::fs::read_to_string(r.out.join(format!("{NAME}_{v}_SHA256SUMS"))).unwrap();
    let zh = sums
        .lines()
        .find(|l| l.ends_with(&zip))
        .and_then(|l| l.split_whitespace().next())
        .expect("the zip in SHA256SUMS");
    assert!(hashes.contains(&format!("zh:{zh}").as_str()), "{meta}");
    hashes
        .iter()
        .find(|h| h.starts_with("h1:"))
        .map(|h| h.to_string())
        .expect("an h1: hash")
}

/// A VPC with subnets and a security group tagged `joiner.dev/discovery = quickstart`.
fn network(aws: &Aws) {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let tag = |rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .tags(
                    Tag::builder()
                        .key("joiner.dev/discovery")
                        .value("quickstart")
                        .build(),
                )
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.7.0.0/16")
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
        for (i, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            ec2.create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(*zone)
                .cidr_block(format!("10.7.{}.0/20", i * 16))
                .tag_specifications(tag(ResourceType::Subnet))
                .send()
                .await
                .expect("ec2:CreateSubnet");
        }
        ec2.create_security_group()
            .group_name("quickstart-nodes")
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tag(ResourceType::SecurityGroup))
            .send()
            .await
            .expect("ec2:CreateSecurityGroup");
    });
}

/// `examples/quickstart` as is (module sources pointed at a copy of `terraform-modules/`
/// beside it), its provider installed as `cli_config` says.
fn quickstart(moto: &MotoServer, cli_config: &str, extra_env: &[(&str, &str)]) -> Workspace {
    let mut env = moto.env();
    // Anything but loopback goes to a closed port: no public registry is ever reached.
    env.push(("HTTPS_PROXY".into(), "http://127.0.0.1:9".into()));
    env.push(("HTTP_PROXY".into(), "http://127.0.0.1:9".into()));
    env.push(("NO_PROXY".into(), "127.0.0.1,localhost".into()));
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut tf = Workspace::installing(env, cli_config);
    tf.set_timeout(Duration::from_secs(300));
    tf.write_file("versions.tf", "");
    let main = std::fs::read_to_string(root().join("examples/quickstart/main.tf")).unwrap();
    tf.write_config(&main.replace("\"../../terraform-modules/", "\"./terraform-modules/"));
    copy_modules(
        &root().join("terraform-modules"),
        &tf.path().join("terraform-modules"),
    );
    tf
}

fn copy_modules(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_modules(&p, &to.join(e.file_name()));
        } else if p.extension().is_some_and(|x| x == "tf") {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn init(tf: &Workspace) -> joiner_e2e::Run {
    tf.terraform(&["init", "-no-color", "-input=false"])
}

/// `init` succeeds, the lock file holds the version and the `h1:` the mirror published,
/// and `plan` runs the installed provider: the quickstart's cluster, agent and NodePools.
fn installs_and_plans(tf: &Workspace, version: &str, h1: &str) {
    let r = init(tf);
    assert!(r.success(), "init failed:\n{r}");
    let address = format!("{}/joiner/joiner", registry_host());
    let (locked_version, hashes) = locked(tf, &address);
    assert_eq!(locked_version, version);
    assert!(
        hashes.contains(h1),
        "the lock file does not record the package's {h1}: {hashes:?}"
    );
    let installed = tf
        .path()
        .join(".terraform/providers")
        .join(&address)
        .join(version)
        .join(PLATFORM);
    assert!(
        installed.join(format!("{NAME}_v{version}")).is_file(),
        "init did not install the binary into {}",
        installed.display()
    );
    let plan = tf.plan();
    for address in [
        "module.cluster.joiner_cluster.this[0]",
        "module.cluster.joiner_agent.this",
        "module.cluster.joiner_node_class.default",
    ] {
        assert_eq!(plan.actions(address), ["create"], "{address} in the plan");
    }
}

fn forget_installation(tf: &Workspace) {
    std::fs::remove_dir_all(tf.path().join(".terraform")).unwrap();
}

fn refuses_checksum(r: &joiner_e2e::Run) {
    assert!(!r.success(), "init installed a tampered package:\n{r}");
    assert!(
        r.output().to_lowercase().contains("checksum"),
        "init failed, but not with a checksum error:\n{r}"
    );
}

/// The HTTPS static file server (tests/e2e/support/https_static.py) with a test CA.
struct Mirror {
    child: Child,
    url: String,
    ca: PathBuf,
    log: PathBuf,
}

impl Mirror {
    fn serve(dir: &Path, tls: &Path) -> Mirror {
        std::fs::create_dir_all(tls).unwrap();
        let (ca, cert, key) = (
            tls.join("ca.pem"),
            tls.join("server.pem"),
            tls.join("server.key"),
        );
        let ext = tls.join("server.ext");
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let openssl = |args: &[&str]| {
            sh(Command::new("openssl").current_dir(tls).args(args));
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=joiner test CA",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "server.ext",
        ]);
        let log = tls.join("requests.log");
        let mut child = Command::new(joiner_test_support::moto_python())
            .arg(root().join("tests/e2e/support/https_static.py"))
            .arg(dir)
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the HTTPS mirror");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .unwrap_or_else(|| panic!("the mirror did not start: {line:?}"));
        Mirror {
            child,
            url: format!("https://127.0.0.1:{port}/"),
            ca,
            log,
        }
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn terraform_init_installs_the_provider_from_release_files_in_mirrors() {
    let r = release();
    check_release_files(&r);
    let h1 = check_mirror_metadata(&r);
    let v = r.version.clone();
    let host = registry_host();
    let zip_in = |mirror: &Path| {
        mirror
            .join(host)
            .join("joiner/joiner")
            .join(format!("{NAME}_{v}_{PLATFORM}.zip"))
    };

    let moto = MotoServer::start();
    network(&Aws::new(&moto));
    let cases = tempfile::Builder::new()
        .prefix("joiner-mirrors-")
        .tempdir()
        .unwrap();

    // 1. Filesystem mirror, packed: the release zips where the CLI looks for them.
    let packed = cases.path().join("packed");
    link_tree(&r.mirror, &packed);
    let tf = quickstart(
        &moto,
        &format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path = \"{}\"\n  }}\n}}\n",
            packed.display()
        ),
        &[],
    );
    installs_and_plans(&tf, &v, &h1);
    // The lock file now vouches for the package: a fresh init installs it again...
    forget_installation(&tf);
    let again = init(&tf);
    assert!(again.success(), "init with the lock file failed:\n{again}");
    // ...and refuses another one under the same name.
    forget_installation(&tf);
    tamper(&zip_in(&packed));
    refuses_checksum(&init(&tf));
    drop(tf);

    // 2. Filesystem mirror, unpacked: HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/<binary>. Its h1:
    // is the zip's: the hash is of the files, not of the archive.
    let unpacked = cases.path().join("unpacked");
    let bin_dir = unpacked
        .join(host)
        .join("joiner/joiner")
        .join(&v)
        .join(PLATFORM);
    std::fs::create_dir_all(&bin_dir).unwrap();
    sh(Command::new("unzip")
        .arg("-q")
        .arg(zip_in(&r.mirror))
        .arg("-d")
        .arg(&bin_dir));
    let tf = quickstart(
        &moto,
        &format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path = \"{}\"\n  }}\n}}\n",
            unpacked.display()
        ),
        &[],
    );
    installs_and_plans(&tf, &v, &h1);
    drop(tf);

    // 3. Network mirror over HTTPS, the CLI trusting the test CA.
    let served = cases.path().join("served");
    link_tree(&r.mirror, &served);
    let mirror = Mirror::serve(&served, &cases.path().join("tls"));
    let ca = mirror.ca.display().to_string();
    let cli_config = format!(
        "provider_installation {{\n  network_mirror {{\n    url = \"{}\"\n  }}\n}}\n",
        mirror.url
    );
    // Not trusting the test CA, the CLI refuses the mirror: TLS is really checked.
    let untrusted = quickstart(&moto, &cli_config, &[("SSL_CERT_FILE", "/dev/null")]);
    let r = init(&untrusted);
    // (OpenTofu wraps its diagnostics, so the words may stand on two lines.)
    let said = r.output().split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !r.success() && said.contains("unknown authority"),
        "init without the test CA should fail on the certificate:\n{r}"
    );
    drop(untrusted);
    let tf = quickstart(&moto, &cli_config, &[("SSL_CERT_FILE", &ca)]);
    installs_and_plans(&tf, &v, &h1);
    let requests = mirror.requests();
    for path in [
        format!("GET /{host}/joiner/joiner/index.json 200"),
        format!("GET /{host}/joiner/joiner/{v}.json 200"),
        format!("GET /{host}/joiner/joiner/{NAME}_{v}_{PLATFORM}.zip 200"),
    ] {
        assert!(
            requests.contains(&path),
            "the mirror never served `{path}`:\n{requests}"
        );
    }
    // Without a lock file, the hashes the mirror publishes refuse a tampered archive.
    forget_installation(&tf);
    std::fs::remove_file(tf.path().join(".terraform.lock.hcl")).unwrap();
    tamper(&zip_in(&served));
    refuses_checksum(&init(&tf));
}

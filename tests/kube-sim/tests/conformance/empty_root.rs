//! kube-sim's runner starts an image's container in an empty root: only the image's files,
//! `/proc`, `/dev`'s device nodes, `/sys`, the kubelet's `/etc` files and the token volumes are
//! visible; the pod's user, groups and `readOnlyRootFilesystem` hold. A small static C program
//! (built here with `cc -static`, as glibc's libc.a allows) reports what it sees.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{kubectl, kubectl_json, kubectl_stdin, wait_for};
use kube_sim::runner::ImageConfig;
use kube_sim::{ImageSource, Options, TargetCluster};
use serde_json::{json, Value};

/// Prints its identity, whether it can write `/tmp/probe`, and which paths it can open.
const PROBE_C: &str = r#"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
  gid_t groups[16];
  int n = getgroups(16, groups);
  printf("uid=%d gid=%d groups=", (int)getuid(), (int)getgid());
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", (int)groups[i]);
  printf("\n");
  int fd = open("/tmp/probe", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  printf("write /tmp/probe: %s\n", fd >= 0 ? "ok" : strerror(errno));
  const char *paths[] = {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
    "/bin/sh", "/etc/passwd", "/root", "/tmp/kube-sim-runner-host-marker",
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "/etc/hosts", "/etc/resolv.conf",
    "/proc/self/status", "/dev/null", 0};
  for (int i = 0; paths[i]; i++) {
    int f = open(paths[i], O_RDONLY);
    printf("read %s: %s\n", paths[i], f >= 0 ? "ok" : strerror(errno));
    if (f >= 0) close(f);
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char cwd[256] = {0};
  printf("hostname=%s cwd=%s\n", host, getcwd(cwd, sizeof cwd) ? cwd : strerror(errno));
  /* Name resolution through the static libc's built-in NSS `files`: the kubelet's hosts file. */
  const char *names[] = {"localhost", host, 0};
  for (int i = 0; names[i]; i++) {
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(names[i], "443", &hints, &res);
    char addr[64] = "?";
    if (!e) inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, addr, sizeof addr);
    printf("resolve %s: %s\n", names[i], e ? gai_strerror(e) : addr);
  }
  return 0;
}
"#;

/// A root filesystem with only the static probe at /probe and a world-writable /tmp.
fn probe_rootfs(dir: &Path) -> ImageSource {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/nsswitch.conf"), "hosts: files dns\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(&src, PROBE_C).unwrap();
    let out = Command::new("cc")
        // getaddrinfo's link-time warning is about NSS modules other than files and dns.
        .args(["-static", "-O1", "-o"])
        .arg(root.join("probe"))
        .arg(&src)
        .output()
        .expect("cc (needed to link Rust as well)");
    assert!(
        out.status.success(),
        "cc -static: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ImageSource::Rootfs {
        root,
        config: ImageConfig {
            entrypoint: vec!["/probe".into()],
            user: Some("65532:65532".into()),
            ..Default::default()
        },
    }
}

fn pod(name: &str, pod_sc: Value, container_sc: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "securityContext": pod_sc,
            "containers": [{"name": "probe", "image": "example.com/probe:1", "securityContext": container_sc}]}})
}

/// The pod's phase once it is Succeeded or Failed, or its container's waiting state.
fn outcome(target: &TargetCluster, name: &str) -> Value {
    wait_for(
        &format!("pod {name} settled"),
        Duration::from_secs(60),
        || {
            let p = kubectl_json(target, &["get", "pod", name, "-o", "json"]);
            let phase = p["status"]["phase"].as_str().unwrap_or("");
            let waiting = &p["status"]["containerStatuses"][0]["state"]["waiting"];
            let settled = phase == "Succeeded"
                || phase == "Failed"
                || waiting["reason"]
                    .as_str()
                    .is_some_and(|r| r != "ContainerCreating");
            settled.then_some(p)
        },
    )
}

fn logs(target: &TargetCluster, name: &str) -> String {
    String::from_utf8_lossy(&kubectl(target, &["logs", name]).stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_container_sees_only_its_image_and_the_kubelet_mounts() {
    let work = tempfile::tempdir().unwrap();
    let source = probe_rootfs(work.path());
    // A file on this machine the container must not see.
    let marker = Path::new("/tmp/kube-sim-runner-host-marker");
    std::fs::write(marker, "host").unwrap();
    let target = TargetCluster::sim_with(Options {
        cluster_name: "empty-root".into(),
        images: vec![("example.com/probe".into(), source)],
        ..Default::default()
    })
    .unwrap();
    common::add_fake_node(&target, "node-a", "4", "16Gi", &[]);
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        // What joiner_agent renders for the agent: non-root user, fsGroup, read-only root.
        pod("read-only",
            json!({"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532}),
            json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false})),
        pod("writable", json!({}), json!({})),
        pod("root-refused", json!({"runAsNonRoot": true}), json!({"runAsUser": 0})),
    ]});
    let out = kubectl_stdin(&target, &["apply", "-f", "-"], Some(&objects.to_string()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ro = outcome(&target, "read-only");
    assert_eq!(ro["status"]["phase"], "Succeeded", "{ro}");
    let log = logs(&target, "read-only");
    let expect = [
        // runAsUser without runAsGroup: group 0 (no passwd in the image), fsGroup added.
        "uid=65532 gid=0 groups=65532",
        "write /tmp/probe: Read-only file system",
        // Nothing of this machine: no libc, no loader, no shell, no /etc/passwd, no /tmp file.
        "read /usr/lib/x86_64-linux-gnu/libc.so.6: No such file or directory",
        "read /lib64/ld-linux-x86-64.so.2: No such file or directory",
        "read /bin/sh: No such file or directory",
        "read /etc/passwd: No such file or directory",
        "read /root: No such file or directory",
        "read /tmp/kube-sim-runner-host-marker: No such file or directory",
        // The kubelet's mounts, readable by the pod's user through fsGroup.
        "read /var/run/secrets/kubernetes.io/serviceaccount/token: ok",
        "read /var/run/secrets/kubernetes.io/serviceaccount/ca.crt: ok",
        "read /etc/hosts: ok",
        "read /etc/resolv.conf: ok",
        "read /proc/self/status: ok",
        "read /dev/null: ok",
        "hostname=read-only cwd=/",
    ];
    for line in expect {
        assert!(log.lines().any(|l| l == line), "{line:?} not in:\n{log}");
    }
    assert!(log.contains("resolve localhost: 127.0.0.1\n"), "{log}");
    let ip = ro["status"]["podIP"].as_str().unwrap();
    assert!(log.contains(&format!("resolve read-only: {ip}\n")), "{log}");

    // Without readOnlyRootFilesystem the image's user (65532:65532) writes its own /tmp.
    let rw = outcome(&target, "writable");
    assert_eq!(rw["status"]["phase"], "Succeeded", "{rw}");
    let log = logs(&target, "writable");
    assert!(log.contains("uid=65532 gid=65532 groups=\n"), "{log}");
    assert!(log.contains("write /tmp/probe: ok\n"), "{log}");
    // Its token volume has no fsGroup: it belongs to the container's user.
    assert!(
        log.contains("read /var/run/secrets/kubernetes.io/serviceaccount/token: ok\n"),
        "{log}"
    );

    // runAsNonRoot with user 0: kubelet's refusal, and the process never starts.
    let refused = outcome(&target, "root-refused");
    let waiting = &refused["status"]["containerStatuses"][0]["state"]["waiting"];
    assert_eq!(waiting["reason"], "CreateContainerConfigError", "{refused}");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap_or("")
            .contains("container has runAsNonRoot and image will run as root"),
        "{refused}"
    );
    let _ = std::fs::remove_file(marker);
}

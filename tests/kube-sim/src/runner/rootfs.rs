//! A container of an image runs in an empty root: its own mount namespace whose root is the
//! image's unpacked root filesystem, with nothing from this machine visible but what a kubelet
//! gives a pod (`/proc`, a few device nodes, `/sys` read-only, `/etc/hosts`, `/etc/resolv.conf`,
//! `/etc/hostname` and the service-account token volumes). So an image that needs a library,
//! a CA bundle or a writable root it does not have fails here as it would on a node, instead of
//! borrowing them from the machine running the tests.
//!
//! The setup runs in the forked child just before `execve` ([`EmptyRoot::enter`]): `unshare`
//! of the mount and UTS namespaces, bind mounts, `pivot_root` into the image, the read-only
//! remount the pod's `readOnlyRootFilesystem` asks for, then the user switch (the pod's
//! `runAsUser`/`runAsGroup`, else the image's `User`). The network namespace stays this
//! machine's: kube-sim's pod IPs are loopback addresses, and the pod reaches kube-sim and the
//! AWS emulator on 127.0.0.1 as a `hostNetwork` pod would.
//!
//! It needs root (CAP_SYS_ADMIN). Without it an image's container does not start and its status
//! says why: there is no fallback to this machine's root. A local binary configured as an image
//! (`--image NAME=/path/to/binary`) is the documented opt-out: it runs on the host.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// Where kubelet mounts a pod's service-account token volume.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Where EKS's pod-identity webhook mounts the IRSA token volume.
pub const IRSA_DIR: &str = "/var/run/secrets/eks.amazonaws.com/serviceaccount";

/// Host device nodes a container runtime creates in a container's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// A host file or directory made visible at a path inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    /// Absolute path inside the container.
    pub target: String,
    pub read_only: bool,
}

/// The user a container's process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// The security settings of one container, from the pod's and the container's
/// `securityContext` (the container's win) and the image's `User`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Security {
    pub user: User,
    /// Supplementary groups: the pod's `supplementalGroups` and `fsGroup`.
    pub groups: Vec<u32>,
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false`: the process gets `no_new_privs`.
    pub no_new_privs: bool,
    /// The pod's `fsGroup`: token volumes are group-readable by it, as kubelet makes them.
    pub fs_group: Option<u32>,
}

/// Resolves the container's user and refuses what kubelet refuses (`runAsNonRoot` with a root
/// or non-numeric user); the error is the kubelet's `CreateContainerConfigError` message.
pub fn security(
    pod: &Value,
    container: &Value,
    image_user: Option<&str>,
) -> Result<Security, String> {
    let pod_sc = &pod["spec"]["securityContext"];
    let c_sc = &container["securityContext"];
    let field = |name: &str| c_sc[name].as_u64().or_else(|| pod_sc[name].as_u64());
    let non_root = c_sc["runAsNonRoot"]
        .as_bool()
        .or_else(|| pod_sc["runAsNonRoot"].as_bool())
        .unwrap_or(false);
    let (image_uid, image_gid, image_name) = match image_user.filter(|u| !u.is_empty()) {
        None => (Some(0), None, None),
        Some(u) => {
            let (user, group) = match u.split_once(':') {
                Some((a, b)) => (a, Some(b)),
                None => (u, None),
            };
            let uid = user.parse::<u32>().ok();
            let gid = match group {
                Some(g) => Some(g.parse::<u32>().map_err(|_| {
                    format!("unable to find group {g}: no matching entries in group file")
                })?),
                None => None,
            };
            (uid, gid, uid.is_none().then(|| user.to_string()))
        }
    };
    let uid = match (field("runAsUser"), image_uid) {
        (Some(u), _) => u as u32,
        (None, Some(u)) => u,
        (None, None) => {
            let name = image_name.unwrap_or_default();
            if non_root {
                return Err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
                ));
            }
            // The image has no /etc/passwd for kube-sim to read names from.
            return Err(format!(
                "unable to find user {name}: no matching entries in passwd file"
            ));
        }
    };
    if non_root && uid == 0 {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    // As containerd: a runAsUser replaces the image's whole User, group included (the primary
    // group would come from the image's /etc/passwd, which these images do not have: 0).
    let image_gid = if field("runAsUser").is_some() {
        None
    } else {
        image_gid
    };
    let gid = field("runAsGroup")
        .map(|g| g as u32)
        .or(image_gid)
        .unwrap_or(0);
    let fs_group = pod_sc["fsGroup"].as_u64().map(|g| g as u32);
    let mut groups: Vec<u32> = pod_sc["supplementalGroups"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g.as_u64())
                .map(|g| g as u32)
                .collect()
        })
        .unwrap_or_default();
    groups.extend(fs_group);
    groups.sort_unstable();
    groups.dedup();
    Ok(Security {
        user: User { uid, gid },
        groups,
        read_only_root: c_sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
        no_new_privs: c_sc["allowPrivilegeEscalation"].as_bool() == Some(false),
        fs_group,
    })
}

/// Gives a token volume's files the owner and mode kubelet gives a projected token: readable
/// by the pod's `fsGroup` when it has one (0640, group fsGroup), otherwise by the container's
/// user (0600).
pub fn own_token_files(dir: &Path, sec: &Security) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if !path.is_file() {
            continue;
        }
        let (uid, gid, mode) = match sec.fs_group {
            Some(g) => (0, g, 0o640),
            None => (sec.user.uid, sec.user.gid, 0o600),
        };
        std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The files kubelet writes for every pod: `/etc/hosts` (kubelet's header, loopback names and
/// the pod's own address), `/etc/resolv.conf` (this machine's: kube-sim has no cluster DNS)
/// and `/etc/hostname`. Written into `dir`; returns them as mounts.
pub fn pod_etc_files(dir: &Path, hostname: &str, ip: std::net::Ipv4Addr) -> io::Result<Vec<Mount>> {
    std::fs::create_dir_all(dir)?;
    let hosts = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n{ip}\t{hostname}\n"
    );
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let files = [
        ("hosts", hosts),
        ("resolv.conf", resolv),
        ("hostname", format!("{hostname}\n")),
    ];
    let mut mounts = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        mounts.push(Mount {
            source: path,
            target: format!("/etc/{name}"),
            read_only: false,
        });
    }
    Ok(mounts)
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NUL in {}", p.display()),
        )
    })
}

/// `root` joined with an absolute container path, refusing `..` and symbolic links on the way
/// (a link in the image must not lead a mount point out of the image).
fn inside(root: &Path, target: &str) -> io::Result<PathBuf> {
    let mut p = root.to_path_buf();
    for c in Path::new(target).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => {
                p.push(n);
                if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("mount point {target}: {} is a symbolic link in the image; kube-sim does not follow them", p.display()),
                    ));
                }
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("mount point {target}: not a plain absolute path"),
                ))
            }
        }
    }
    Ok(p)
}

/// Creates a mount point in the image's root filesystem, as a container runtime does before
/// mounting (the image need not carry `/proc` or `/etc/hosts`). Idempotent.
fn mount_point(root: &Path, target: &str, file: bool) -> io::Result<PathBuf> {
    let p = inside(root, target)?;
    if file {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if !p.exists() {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)?;
        }
    } else {
        std::fs::create_dir_all(&p)?;
    }
    Ok(p)
}

struct Bind {
    source: CString,
    target: CString,
    read_only: bool,
}

/// Everything the child needs to enter the empty root, prepared before the fork so that the
/// child only makes system calls (no allocation between fork and exec).
pub struct EmptyRoot {
    root: CString,
    proc_dir: CString,
    sys: Bind,
    dev_dir: CString,
    devices: Vec<Bind>,
    binds: Vec<Bind>,
    hostname: CString,
    cwd: CString,
    sec: Security,
}

impl EmptyRoot {
    /// Prepares the mounts of one container: the kubelet's defaults plus `mounts`. Fails (with
    /// the reason) when this process cannot create namespaces.
    pub fn prepare(
        root: &Path,
        mounts: &[Mount],
        hostname: &str,
        cwd: &str,
        sec: Security,
    ) -> io::Result<EmptyRoot> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "kube-sim runs an image's containers in an empty root (mount namespace and pivot_root), which needs root (CAP_SYS_ADMIN); run kube-sim as root, or configure the image as a local binary (NAME=/path/to/binary) to run it on this machine instead",
            ));
        }
        let root = root.canonicalize()?;
        let bind = |m: &Mount| -> io::Result<Bind> {
            let file = !m.source.is_dir();
            Ok(Bind {
                source: cstring(&m.source)?,
                target: cstring(&mount_point(&root, &m.target, file)?)?,
                read_only: m.read_only,
            })
        };
        let binds = mounts.iter().map(bind).collect::<io::Result<Vec<_>>>()?;
        let dev = mount_point(&root, "/dev", false)?;
        let devices = DEVICES
            .iter()
            .filter(|d| Path::new("/dev").join(d).exists())
            .map(|d| {
                Ok(Bind {
                    source: cstring(&Path::new("/dev").join(d))?,
                    target: cstring(&dev.join(d))?,
                    read_only: false,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(EmptyRoot {
            proc_dir: cstring(&mount_point(&root, "/proc", false)?)?,
            sys: Bind {
                source: c"/sys".to_owned(),
                target: cstring(&mount_point(&root, "/sys", false)?)?,
                read_only: true,
            },
            dev_dir: cstring(&dev)?,
            devices,
            binds,
            hostname: CString::new(hostname).unwrap_or_default(),
            cwd: CString::new(cwd).unwrap_or_else(|_| c"/".to_owned()),
            root: cstring(&root)?,
            sec,
        })
    }

    /// In the forked child, before `execve`: enters the namespaces and the image's root and
    /// becomes the container's user. System calls only.
    pub fn enter(&self) -> io::Result<()> {
        use std::ptr::null;
        fn check(r: libc::c_int) -> io::Result<()> {
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        // SAFETY: every pointer is a NUL-terminated string owned by `self`, or null where the
        // call allows it; these calls change only this (single-threaded, forked) process.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS))?;
            check(libc::sethostname(
                self.hostname.as_ptr(),
                self.hostname.as_bytes().len(),
            ))?;
            // Nothing mounted here propagates back to this machine.
            check(libc::mount(
                null(),
                c"/".as_ptr(),
                null(),
                libc::MS_REC | libc::MS_PRIVATE,
                null(),
            ))?;
            // The root must be a mount of its own for pivot_root and the read-only remount.
            check(libc::mount(
                self.root.as_ptr(),
                self.root.as_ptr(),
                null(),
                libc::MS_BIND | libc::MS_REC,
                null(),
            ))?;
            check(libc::mount(
                c"proc".as_ptr(),
                self.proc_dir.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                null(),
            ))?;
            self.bind(&self.sys)?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.dev_dir.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                c"mode=755,size=65536k".as_ptr().cast(),
            ))?;
            for d in &self.devices {
                let fd = libc::open(
                    d.target.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o666,
                );
                check(fd)?;
                libc::close(fd);
                self.bind(d)?;
            }
            for b in &self.binds {
                self.bind(b)?;
            }
            if self.sec.read_only_root {
                check(libc::mount(
                    null(),
                    self.root.as_ptr(),
                    null(),
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                    null(),
                ))?;
            }
            // The image's root becomes `/`, and this machine's root is detached (runc's way:
            // pivot_root(".", ".") then unmount the old root stacked on the new one).
            check(libc::chdir(self.root.as_ptr()))?;
            check(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
            )?;
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(c"/".as_ptr()))?;
            check(libc::chdir(self.cwd.as_ptr()))?;
            let groups: &[libc::gid_t] = &self.sec.groups;
            check(libc::setgroups(groups.len(), groups.as_ptr()))?;
            check(libc::setgid(self.sec.user.gid))?;
            check(libc::setuid(self.sec.user.uid))?;
            if self.sec.no_new_privs {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            }
        }
        Ok(())
    }

    /// A recursive bind mount, remounted read-only when asked.
    fn bind(&self, b: &Bind) -> io::Result<()> {
        use std::ptr::null;
        // SAFETY: as in `enter`.
        unsafe {
            if libc::mount(
                b.source.as_ptr(),
                b.target.as_ptr(),
                null(),
                libc::MS_BIND | libc::MS_REC,
                null(),
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
            if b.read_only
                && libc::mount(
                    null(),
                    b.target.as_ptr(),
                    null(),
                    libc::MS_REMOUNT
                        | libc::MS_BIND
                        | libc::MS_RDONLY
                        | libc::MS_NOSUID
                        | libc::MS_NODEV,
                    null(),
                ) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The ELF interpreter (`PT_INTERP`, the dynamic loader) a program asks for, if any: the
/// file `execve` reports missing as "no such file or directory" when the image lacks it.
pub fn elf_interpreter(program: &Path) -> Option<String> {
    let b = std::fs::read(program).ok()?;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None; // only 64-bit little-endian ELF
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph)? == 3 {
            let off = u64_at(ph + 8)? as usize;
            let size = u64_at(ph + 32)? as usize;
            let raw = b.get(off..off + size)?;
            let end = raw.iter().position(|c| *c == 0).unwrap_or(raw.len());
            return Some(String::from_utf8_lossy(&raw[..end]).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pod_and_container_security_context_win_over_the_image_user() {
        let pod = json!({"spec": {"securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532}}});
        let c = json!({"securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false}});
        let s = security(&pod, &c, Some("1000:1000")).unwrap();
        assert_eq!(s.user, User { uid: 65532, gid: 0 });
        assert_eq!(s.groups, vec![65532]);
        assert!(s.read_only_root && s.no_new_privs);
        let s = security(&json!({}), &json!({}), Some("65532:65532")).unwrap();
        assert_eq!(
            s.user,
            User {
                uid: 65532,
                gid: 65532
            }
        );
        assert!(!s.read_only_root && !s.no_new_privs);
        let c = json!({"securityContext": {"runAsUser": 7, "runAsGroup": 8}});
        let s = security(&json!({}), &c, Some("65532:65532")).unwrap();
        assert_eq!(s.user, User { uid: 7, gid: 8 });
    }

    #[test]
    fn run_as_non_root_refuses_root_and_names() {
        let pod = json!({"spec": {"securityContext": {"runAsNonRoot": true}}});
        assert_eq!(
            security(&pod, &json!({}), None).unwrap_err(),
            "container has runAsNonRoot and image will run as root"
        );
        assert!(security(&pod, &json!({}), Some("nobody"))
            .unwrap_err()
            .contains("non-numeric user (nobody)"));
        assert!(security(&json!({}), &json!({}), Some("nobody"))
            .unwrap_err()
            .contains("unable to find user nobody"));
    }

    #[test]
    fn mount_points_stay_inside_the_image() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("etc")).unwrap();
        assert!(mount_point(d.path(), "/etc/hosts", true).is_err());
        assert!(mount_point(d.path(), "/a/../../x", false).is_err());
        let p = mount_point(d.path(), "/var/run/secrets/x", false).unwrap();
        assert!(p.is_dir() && p.starts_with(d.path()));
    }

    #[test]
    fn the_interpreter_of_a_dynamic_program() {
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let interp = elf_interpreter(&sh).expect("/bin/sh is dynamically linked here");
        assert!(interp.contains("ld-linux"), "{interp}");
        assert_eq!(elf_interpreter(Path::new("/etc/hostname")), None);
    }
}

//! One pod's life as processes: each process-backed container is started, watched,
//! restarted by the pod's restartPolicy with back-off, probed for readiness, and stopped
//! with SIGTERM then SIGKILL; the pod's status is written back after every change.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

use super::env::{apply_container_env, Env};
use super::image::{self, ImageSource};
use super::rootfs::{self, EmptyRoot, Mount};
use super::{probe, signal_group, RunnerConfig, Shared};
use crate::controllers::set_condition;
use crate::store::{name_of, namespace_of, now_rfc3339, Store, Write};

/// Longest pause between restarts. The kubelet's is 5 minutes; a test tool cannot wait that.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub(super) struct PodCtx {
    pub store: Arc<Store>,
    pub shared: Arc<Shared>,
    pub cfg: Arc<RunnerConfig>,
    /// The pod as it was when it started (the spec of a pod does not change).
    pub pod: Value,
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    /// Service variables, KUBECONFIG and IRSA: set for every container.
    pub injected: Env,
    pub pids: Arc<Mutex<HashMap<String, i32>>>,
    pub grace: Duration,
}

impl PodCtx {
    fn ns(&self) -> &str {
        namespace_of(&self.pod)
    }
    fn name(&self) -> &str {
        name_of(&self.pod)
    }
}

#[derive(Clone)]
struct Container {
    name: String,
    image: String,
    /// Runs as a process; otherwise reported running, as the simulated kubelet does.
    process: bool,
    state: Value,
    last_state: Value,
    restarts: i64,
    ready: bool,
    started: bool,
}

type Statuses = Arc<Mutex<Vec<Container>>>;

fn lock(s: &Statuses) -> std::sync::MutexGuard<'_, Vec<Container>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) async fn run(ctx: Arc<PodCtx>, stop: watch::Receiver<bool>) {
    let containers: Vec<Value> = ctx.pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let now = now_rfc3339();
    let statuses: Statuses = Arc::new(Mutex::new(
        containers
            .iter()
            .map(|c| {
                let image = c["image"].as_str().unwrap_or("").to_string();
                let process = image::lookup(&ctx.cfg.images, &image).is_some();
                Container {
                    name: c["name"].as_str().unwrap_or("").to_string(),
                    process,
                    state: if process {
                        json!({"waiting": {"reason": "ContainerCreating"}})
                    } else {
                        json!({"running": {"startedAt": now}})
                    },
                    last_state: json!({}),
                    restarts: 0,
                    ready: !process,
                    started: !process,
                    image,
                }
            })
            .collect(),
    ));
    publish(&ctx, &statuses, true);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, c) in containers.into_iter().enumerate() {
        if lock(&statuses)[i].process {
            tasks.spawn(container_loop(
                ctx.clone(),
                i,
                c,
                statuses.clone(),
                stop.clone(),
            ));
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// The pod's phase from its containers, as the kubelet derives it.
fn phase(restart_policy: &str, cs: &[Container]) -> &'static str {
    let running = cs.iter().filter(|c| c.state["running"].is_object()).count();
    let terminated: Vec<i64> = cs
        .iter()
        .filter_map(|c| c.state["terminated"]["exitCode"].as_i64())
        .collect();
    if running > 0 {
        return "Running";
    }
    if terminated.len() == cs.len() && !cs.is_empty() {
        let all_ok = terminated.iter().all(|c| *c == 0);
        return match restart_policy {
            "Never" if all_ok => "Succeeded",
            "Never" => "Failed",
            "OnFailure" if all_ok => "Succeeded",
            _ => "Running",
        };
    }
    if cs.iter().any(|c| c.restarts > 0 || c.started) {
        "Running"
    } else {
        "Pending"
    }
}

/// Writes the pod's status: IPs, phase, container statuses and conditions.
fn publish(ctx: &PodCtx, statuses: &Statuses, first: bool) {
    let Some(pods) = ctx.store.find_type("", "v1", "pods") else {
        return;
    };
    let cs = lock(statuses).clone();
    let policy = ctx.pod["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always")
        .to_string();
    let ip = ctx.ip.to_string();
    let node_name = ctx.pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let host_ip = ctx
        .store
        .find_type("", "v1", "nodes")
        .and_then(|t| ctx.store.get(&t, None, &node_name).ok())
        .and_then(|n| {
            n["status"]["addresses"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP").cloned())
        })
        .and_then(|a| a["address"].as_str().map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".into());
    let _ = ctx
        .store
        .modify(&pods, Some(ctx.ns()), ctx.name(), Write::Internal, |cur| {
            if cur["metadata"]["uid"] != ctx.pod["metadata"]["uid"] {
                return Err(crate::status::ApiError::conflict("", "pods", ctx.name()));
            }
            let mut p = cur.clone();
            if !p["status"].is_object() {
                p["status"] = json!({});
            }
            if first || p["status"]["podIP"].is_null() {
                p["status"]["podIP"] = json!(ip);
                p["status"]["podIPs"] = json!([{"ip": ip}]);
                p["status"]["hostIP"] = json!(host_ip);
                p["status"]["hostIPs"] = json!([{"ip": host_ip}]);
                p["status"]["startTime"] = json!(now_rfc3339());
            }
            let phase = phase(&policy, &cs);
            p["status"]["phase"] = json!(phase);
            p["status"]["containerStatuses"] = json!(cs
                .iter()
                .map(|c| json!({
                    "name": c.name,
                    "image": c.image,
                    "imageID": "",
                    "containerID": format!("kube-sim://{}-{}", ctx.pod["metadata"]["uid"].as_str().unwrap_or(""), c.name),
                    "ready": c.ready,
                    "started": c.started,
                    "restartCount": c.restarts,
                    "state": c.state,
                    "lastState": c.last_state,
                }))
                .collect::<Vec<_>>());
            let all_ready = cs.iter().all(|c| c.ready);
            let ready = if all_ready && phase == "Running" {
                "True"
            } else {
                "False"
            };
            let (reason, msg) = if ready == "True" || phase != "Running" && phase != "Pending" {
                ("", String::new())
            } else {
                let not_ready: Vec<&str> = cs
                    .iter()
                    .filter(|c| !c.ready)
                    .map(|c| c.name.as_str())
                    .collect();
                (
                    "ContainersNotReady",
                    format!("containers with unready status: [{}]", not_ready.join(" ")),
                )
            };
            set_condition(&mut p, "PodReadyToStartContainers", "True", "", "");
            set_condition(&mut p, "Initialized", "True", "", "");
            set_condition(&mut p, "ContainersReady", ready, reason, &msg);
            set_condition(&mut p, "Ready", ready, reason, &msg);
            set_condition(&mut p, "PodScheduled", "True", "", "");
            Ok(p)
        });
}

fn update(statuses: &Statuses, i: usize, f: impl FnOnce(&mut Container)) {
    f(&mut lock(statuses)[i]);
}

/// Sleeps, or returns true early when the pod is being stopped.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|v| *v) => true,
    };
    stopped || *stop.borrow()
}

/// The command line, environment and working directory of one container.
struct Launch {
    /// A host path, or for an image the path inside the image's root.
    program: PathBuf,
    args: Vec<String>,
    env: Env,
    /// The host directory the process starts in (a local binary's container only).
    cwd: PathBuf,
    /// An image's container: the empty root it runs in, and the image's root on this machine.
    root: Option<(Arc<EmptyRoot>, PathBuf)>,
}

impl Launch {
    /// What the kubelet would report when the process cannot start. A program that exists
    /// but whose ELF interpreter the image lacks gets `execve`'s ENOENT, which the runtime
    /// reports as the program being missing: the message names the interpreter as well.
    fn start_error(&self, e: &std::io::Error) -> String {
        let Some((_, root)) = &self.root else {
            return format!("start {}: {e}", self.program.display());
        };
        let program = self.program.display();
        if e.kind() == std::io::ErrorKind::NotFound {
            let host = root.join(self.program.strip_prefix("/").unwrap_or(&self.program));
            if let Some(interp) = rootfs::elf_interpreter(&host) {
                if !root.join(interp.trim_start_matches('/')).exists() {
                    return format!("exec {program}: no such file or directory (the program is in the image; its ELF interpreter {interp} is not: the image is not self-contained)");
                }
            }
            return format!("exec {program}: no such file or directory");
        }
        format!("start {program} in the image's empty root: {e}")
    }
}

fn data_of(store: &Store, plural: &str, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let t = store.find_type("", "v1", plural)?;
    let obj = store.get(&t, Some(ns), name).ok()?;
    let mut out = BTreeMap::new();
    if let Some(m) = obj["data"].as_object() {
        for (k, v) in m {
            let s = v.as_str().unwrap_or("");
            let s = if plural == "secrets" {
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            } else {
                s.to_string()
            };
            out.insert(k.clone(), s);
        }
    }
    if let Some(m) = obj["stringData"].as_object() {
        for (k, v) in m {
            out.insert(k.clone(), v.as_str().unwrap_or("").to_string());
        }
    }
    Some(out)
}

/// Builds the launch, or the (reason, message) the kubelet would report while waiting.
fn prepare(ctx: &PodCtx, c: &Value) -> Result<Launch, (&'static str, String)> {
    let image_ref = c["image"].as_str().unwrap_or("");
    let source = image::lookup(&ctx.cfg.images, image_ref).ok_or((
        "ErrImagePull",
        format!("image {image_ref} is not configured"),
    ))?;
    let mut env = Env::default();
    let in_image = matches!(source, ImageSource::Rootfs { .. });
    match source {
        ImageSource::Binary(_) => {
            env.set("PATH", std::env::var("PATH").unwrap_or_default());
        }
        ImageSource::Rootfs { config, .. } => {
            for e in &config.env {
                if let Some((k, v)) = e.split_once('=') {
                    env.set(k, v);
                }
            }
        }
    }
    env.set("HOSTNAME", ctx.name());
    // In the image, HOME is the runtime's default for a user without a passwd entry.
    env.set(
        "HOME",
        if in_image {
            "/".to_string()
        } else {
            ctx.dir.display().to_string()
        },
    );
    for (k, v) in ctx.injected.iter() {
        // In the image, the client finds the cluster as in a pod: the service variables and
        // the token volume (in-cluster config), not a kubeconfig from this machine.
        let kubeconfig_in_image = in_image && k == "KUBECONFIG";
        if !(k.starts_with("AWS_") || kubeconfig_in_image) {
            env.set(k, v);
        }
    }
    let store = ctx.store.clone();
    let ns = ctx.ns().to_string();
    let cms = |name: &str, _: &str| data_of(&store, "configmaps", &ns, name);
    let secrets = |name: &str, _: &str| data_of(&store, "secrets", &ns, name);
    apply_container_env(&mut env, &ctx.pod_with_ip(), c, &cms, &secrets)
        .map_err(|m| ("CreateContainerConfigError", m))?;
    // The webhook appends its variables after the container's and never overrides them.
    for (k, v) in ctx.injected.iter() {
        if k.starts_with("AWS_") {
            env.set_default(k, v);
        }
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(|s| env.expand(s)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let command = strings(&c["command"]);
    let args = strings(&c["args"]);
    let (entrypoint, cmd) = source.defaults();
    let argv: Vec<String> = match (command.is_empty(), args.is_empty()) {
        (true, true) => entrypoint.into_iter().chain(cmd).collect(),
        (true, false) => entrypoint.into_iter().chain(args).collect(),
        (false, _) => command.into_iter().chain(args).collect(),
    };
    let Some((first, rest)) = argv.split_first() else {
        return Err((
            "CreateContainerError",
            "no command specified: the image has no entrypoint and the container no command".into(),
        ));
    };
    let (program, cwd) = match source {
        ImageSource::Binary(bin) => {
            let same = first == &bin.display().to_string()
                || std::path::Path::new(first).file_name() == bin.file_name();
            let program = if same {
                bin.clone()
            } else {
                PathBuf::from(first)
            };
            let cwd = c["workingDir"]
                .as_str()
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
                .unwrap_or_else(|| ctx.dir.clone());
            (program, cwd)
        }
        ImageSource::Rootfs { root, config } => {
            let host_program = image::resolve_program(root, first, &config.env).ok_or((
                "RunContainerError",
                format!("exec: \"{first}\": executable file not found in the image"),
            ))?;
            let program =
                Path::new("/").join(host_program.strip_prefix(root).unwrap_or(&host_program));
            let wd = c["workingDir"]
                .as_str()
                .or(config.working_dir.as_deref())
                .unwrap_or("/");
            let wd = if root.join(wd.trim_start_matches('/')).is_dir() {
                wd
            } else {
                "/"
            };
            let empty_root = empty_root(ctx, c, root, config.user.as_deref(), wd, &mut env)?;
            let launch = Launch {
                program,
                args: rest.to_vec(),
                env,
                cwd: root.clone(),
                root: Some((Arc::new(empty_root), root.clone())),
            };
            return Ok(launch);
        }
    };
    Ok(Launch {
        program,
        args: rest.to_vec(),
        env,
        cwd,
        root: None,
    })
}

/// An image's container: its user, the volumes kubelet mounts (service-account token, IRSA
/// token, /etc files), and the environment's host paths turned into the paths it sees.
fn empty_root(
    ctx: &PodCtx,
    c: &Value,
    root: &Path,
    image_user: Option<&str>,
    wd: &str,
    env: &mut Env,
) -> Result<EmptyRoot, (&'static str, String)> {
    let sec = rootfs::security(&ctx.pod, c, image_user).map_err(|m| {
        (
            "CreateContainerConfigError",
            format!(
                "{m} (pod: \"{}_{}\", container: {})",
                ctx.name(),
                ctx.ns(),
                c["name"].as_str().unwrap_or("")
            ),
        )
    })?;
    let io = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| ("CreateContainerError", format!("{what}: {e}"))
    };
    let mut mounts = rootfs::pod_etc_files(&ctx.dir.join("etc"), ctx.name(), ctx.ip)
        .map_err(io("write the pod's /etc files"))?;
    let volumes = [
        (ctx.dir.join("serviceaccount"), rootfs::SERVICE_ACCOUNT_DIR),
        (
            ctx.dir.join("eks.amazonaws.com/serviceaccount"),
            rootfs::IRSA_DIR,
        ),
    ];
    for (source, target) in volumes {
        if source.is_dir() {
            rootfs::own_token_files(&source, &sec).map_err(io("own the token volume"))?;
            mounts.push(Mount {
                source,
                target: target.to_string(),
                read_only: true,
            });
        }
    }
    // IRSA's AWS_WEB_IDENTITY_TOKEN_FILE (and any other injected path) as the container sees it.
    let rewritten: Vec<(String, String)> = env
        .iter()
        .filter_map(|(k, v)| {
            mounts.iter().find_map(|m| {
                let rest = Path::new(v).strip_prefix(&m.source).ok()?;
                Some((
                    k.to_string(),
                    Path::new(&m.target).join(rest).display().to_string(),
                ))
            })
        })
        .collect();
    for (k, v) in rewritten {
        env.set(&k, v);
    }
    EmptyRoot::prepare(root, &mounts, ctx.name(), wd, sec).map_err(|e| {
        (
            "RunContainerError",
            format!("prepare the container's empty root: {e}"),
        )
    })
}

impl PodCtx {
    /// The pod as the downward API sees it: with its IP and node address.
    fn pod_with_ip(&self) -> Value {
        let mut p = self.pod.clone();
        p["status"]["podIP"] = json!(self.ip.to_string());
        if let Some(t) = self.store.find_type("", "v1", "pods") {
            if let Ok(cur) = self.store.get(&t, Some(self.ns()), self.name()) {
                if cur["status"]["hostIP"].is_string() {
                    p["status"]["hostIP"] = cur["status"]["hostIP"].clone();
                }
            }
        }
        p
    }
}

fn spawn(launch: &Launch) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(launch.env.iter())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // An image's program is a path inside the image: exec happens after entering its root.
    if launch.root.is_none() {
        cmd.current_dir(&launch.cwd);
    }
    let root = launch.root.as_ref().map(|(r, _)| r.clone());
    // SAFETY: between fork and exec the closure makes system calls only (EmptyRoot::enter
    // was prepared before the fork); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(r) = &root {
                r.enter()?;
            }
            // Take the process down with kube-sim if kube-sim dies without stopping it (after
            // the user switch, which clears this flag).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
}

/// Copies one output stream into the container's log, line by line.
fn pump(
    shared: Arc<Shared>,
    ns: String,
    pod: String,
    container: String,
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut r = tokio::io::BufReader::new(stream);
        loop {
            let mut line = Vec::new();
            match r.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => shared.logs.append(&ns, &pod, &container, line),
            }
        }
    })
}

fn exit_code(status: &std::process::ExitStatus) -> i64 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as i64,
        (None, Some(sig)) => 128 + sig as i64,
        _ => 1,
    }
}

/// SIGTERM to the container's process group, SIGKILL after the grace period.
async fn terminate(child: &mut tokio::process::Child, grace: Duration) {
    let Some(pid) = child.id() else {
        return;
    };
    signal_group(pid as i32, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        signal_group(pid as i32, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

async fn readiness_loop(ctx: Arc<PodCtx>, i: usize, spec: probe::ProbeSpec, statuses: Statuses) {
    tokio::time::sleep(spec.initial_delay).await;
    let (mut ok_run, mut fail_run) = (0u32, 0u32);
    loop {
        let ok = probe::check(&spec.probe, spec.timeout).await;
        if ok {
            ok_run += 1;
            fail_run = 0;
        } else {
            fail_run += 1;
            ok_run = 0;
        }
        let was = lock(&statuses)[i].ready;
        let now = if ok_run >= spec.success_threshold {
            true
        } else if fail_run >= spec.failure_threshold {
            false
        } else {
            was
        };
        if now != was {
            update(&statuses, i, |c| c.ready = now);
            publish(&ctx, &statuses, false);
        }
        tokio::time::sleep(spec.period).await;
    }
}

async fn container_loop(
    ctx: Arc<PodCtx>,
    i: usize,
    c: Value,
    statuses: Statuses,
    mut stop: watch::Receiver<bool>,
) {
    let name = c["name"].as_str().unwrap_or("").to_string();
    let policy = ctx.pod["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always")
        .to_string();
    let uid = ctx.pod["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut backoff = Duration::from_secs(1);
    loop {
        if *stop.borrow() {
            return;
        }
        let launch = match prepare(&ctx, &c) {
            Ok(l) => l,
            Err((reason, message)) => {
                update(&statuses, i, |s| {
                    s.state = json!({"waiting": {"reason": reason, "message": message}});
                    s.ready = false;
                });
                publish(&ctx, &statuses, false);
                if sleep_or_stop(backoff, &mut stop).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let mut child = match spawn(&launch) {
            Ok(ch) => ch,
            Err(e) => {
                let message = launch.start_error(&e);
                tracing::warn!(pod = ctx.name(), container = %name, "{message}");
                update(&statuses, i, |s| {
                    s.state =
                        json!({"waiting": {"reason": "RunContainerError", "message": message}});
                    s.ready = false;
                });
                publish(&ctx, &statuses, false);
                if sleep_or_stop(backoff, &mut stop).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        ctx.pids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), pid);
        ctx.shared.logs.start(ctx.ns(), ctx.name(), &uid, &name);
        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            pumps.push(pump(
                ctx.shared.clone(),
                ctx.ns().into(),
                ctx.name().into(),
                name.clone(),
                out,
            ));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(pump(
                ctx.shared.clone(),
                ctx.ns().into(),
                ctx.name().into(),
                name.clone(),
                err,
            ));
        }
        let started_at = now_rfc3339();
        let started = Instant::now();
        let readiness = probe::readiness(&c, std::net::IpAddr::V4(ctx.ip));
        update(&statuses, i, |s| {
            s.state = json!({"running": {"startedAt": started_at}});
            s.started = true;
            s.ready = readiness.is_none();
        });
        publish(&ctx, &statuses, false);
        let prober = readiness
            .map(|spec| tokio::spawn(readiness_loop(ctx.clone(), i, spec, statuses.clone())));
        let status = tokio::select! {
            s = child.wait() => Some(s),
            _ = stop.wait_for(|v| *v) => None,
        };
        if let Some(p) = prober {
            p.abort();
        }
        let Some(status) = status else {
            terminate(&mut child, ctx.grace).await;
            for p in pumps {
                let _ = tokio::time::timeout(Duration::from_secs(1), p).await;
            }
            ctx.shared.logs.stop(ctx.ns(), ctx.name(), &name);
            ctx.pids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            return;
        };
        for p in pumps {
            let _ = tokio::time::timeout(Duration::from_secs(1), p).await;
        }
        ctx.shared.logs.stop(ctx.ns(), ctx.name(), &name);
        ctx.pids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        let code = status.as_ref().map(exit_code).unwrap_or(1);
        let terminated = json!({"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started_at,
            "finishedAt": now_rfc3339(),
            "containerID": format!("kube-sim://{uid}-{name}"),
        }});
        let restart = match policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        if !restart {
            update(&statuses, i, |s| {
                s.state = terminated;
                s.ready = false;
            });
            publish(&ctx, &statuses, false);
            return;
        }
        if started.elapsed() > MAX_BACKOFF * 2 {
            backoff = Duration::from_secs(1);
        }
        update(&statuses, i, |s| {
            s.last_state = terminated;
            s.restarts += 1;
            s.ready = false;
            s.state = json!({"waiting": {
                "reason": "CrashLoopBackOff",
                "message": format!("back-off {}s restarting failed container={name} pod={}_{}({uid})", backoff.as_secs(), ctx.name(), ctx.ns()),
            }});
        });
        publish(&ctx, &statuses, false);
        if sleep_or_stop(backoff, &mut stop).await {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(state: Value, restarts: i64) -> Container {
        Container {
            name: "c".into(),
            image: "i".into(),
            process: true,
            started: state["running"].is_object(),
            state,
            last_state: json!({}),
            restarts,
            ready: false,
        }
    }

    #[test]
    fn phase_follows_the_containers_and_the_restart_policy() {
        let waiting = json!({"waiting": {"reason": "ContainerCreating"}});
        let running = json!({"running": {}});
        let ok = json!({"terminated": {"exitCode": 0}});
        let bad = json!({"terminated": {"exitCode": 3}});
        assert_eq!(phase("Always", &[c(waiting.clone(), 0)]), "Pending");
        assert_eq!(phase("Always", &[c(running, 0)]), "Running");
        assert_eq!(phase("Never", &[c(ok.clone(), 0)]), "Succeeded");
        assert_eq!(phase("Never", &[c(bad.clone(), 0)]), "Failed");
        assert_eq!(phase("OnFailure", &[c(ok, 0)]), "Succeeded");
        assert_eq!(phase("Always", &[c(waiting, 2)]), "Running");
        assert_eq!(
            phase("Never", &[c(bad, 0), c(json!({"running": {}}), 0)]),
            "Running"
        );
    }
}

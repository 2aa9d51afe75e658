//! The run: set-up, the five seed scenarios, and what is printed and drawn at the end.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use joiner_agent::catalog::Catalog;
use kube::Client;

use crate::cloud::Cloud;
use crate::cluster::{self, Snapshot};
use crate::procs::{self, Proc};
use crate::recorder::Recorder;
use crate::stateful::VolumePods;
use crate::summary::{Figures, IamFigures};
use crate::terraform::Terraform;
use crate::Args;

/// The agent's image, as `joiner_agent` names it by default; kube-sim runs the unpacked image
/// (or the local binary, without `--agent-image`) for any tag of it.
const AGENT_IMAGE: &str = "public.ecr.aws/joiner/joiner-agent";
/// The NodePool change reviewed in scenario 3: a newer minimum generation, which drifts
/// every node of generation 5.
const REVIEW_OVERRIDE: &str = "module \"node_pools\" {\n  min_instance_generation = 6\n}\n";
struct World {
    args: Args,
    cluster: String,
    work: PathBuf,
    moto: Option<Proc>,
    moto_port: u16,
    /// The agent's ServiceAccount (`ns`, `name`) and the role it names for IRSA.
    agent_identity: Option<(String, String, String)>,
    kube_sim: Option<Proc>,
    kubeconfig: PathBuf,
    cloud: Option<Cloud>,
    tf: Option<Terraform>,
    client: Option<Client>,
    catalog: Option<Arc<Catalog>>,
    rec: Recorder,
    figures: Figures,
    /// Workload pods that were lost: bound to a node EC2 took back, or Failed.
    lost: HashSet<String>,
    /// The StatefulSet's pods, watched from before their creation (`crate::stateful`).
    volume_pods: Option<VolumePods>,
    destroyed: bool,
    /// Prometheus scraping the agents (`crate::monitoring`), from the apply on.
    prometheus: Option<joiner_test_support::prometheus::Prometheus>,
    /// Alerts that fired and should not have: the run fails.
    unexpected_alerts: Vec<String>,
}

pub async fn play(args: Args) -> i32 {
    let cluster = args.cluster_name.clone().unwrap_or_else(|| {
        Path::new(&args.example)
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "quickstart".into())
    });
    let work = std::env::temp_dir().join(format!("joiner-sandbox-{}", std::process::id()));
    let mut w = World {
        kubeconfig: work.join("kubeconfig"),
        cluster,
        work,
        moto: None,
        moto_port: 0,
        agent_identity: None,
        kube_sim: None,
        cloud: None,
        tf: None,
        client: None,
        catalog: None,
        rec: Recorder::new(),
        figures: Figures {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            boot_delay: args.boot_delay.clone(),
            notice_secs: args.notice,
            ..Default::default()
        },
        lost: HashSet::new(),
        volume_pods: None,
        destroyed: false,
        prometheus: None,
        unexpected_alerts: Vec::new(),
        args,
    };
    let result = tokio::select! {
        r = run(&mut w) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted (Ctrl-C)")),
    };
    w.rec.finish_line();
    w.figures.total_secs = w.rec.now();
    w.figures.pods_lost = w.lost.len();
    w.figures.stateful = w.volume_pods.as_ref().map(VolumePods::figures);
    // kube_sim::aws::USER_DATA_REFUSED_LOG, logged once per instance whose user data nodeadm
    // or Bottlerocket's settings model refused (kube-sim runs as a process here).
    w.figures.nodes_refused_by_nodeadm = std::fs::read_to_string(w.work.join("kube-sim.log"))
        .ok()
        .map(|log| {
            log.lines()
                .filter(|l| l.contains("refused the user data"))
                .count()
        });
    w.figures.peak_nodes = w
        .rec
        .samples()
        .iter()
        .map(|s| s.node_count())
        .max()
        .unwrap_or(0);
    let mut code = match &result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("\nsandbox: FAILED: {e:#}");
            1
        }
    };
    // A note, not a failure: which pools have live nodes (and so which impact warnings
    // appear) varies from run to run. The guide is held to a real run's excerpt by the
    // unit test `the_guide_shows_a_real_plan`.
    if let Some(diff) = &w.figures.guide_drift {
        eprintln!(
            "\nsandbox: note: docs/guides/reviewing-a-nodepool-change.md shows another plan than \
             this run's (numbers aside): {diff}"
        );
    }
    match iam_figures(&w) {
        Ok(Some(iam)) => {
            println!("\nsandbox: {}", iam.line());
            if iam.outside_ledger.is_empty() {
                println!(
                    "sandbox: all {} distinct calls of the agent and the provider are named in docs/aws-fidelity.md",
                    iam.calls_made.len()
                );
            } else {
                eprintln!(
                    "sandbox: FAILED: calls docs/aws-fidelity.md does not name (hold each against AWS's rules and Karpenter's, then list it): {}",
                    iam.outside_ledger.join(", ")
                );
                code = 1;
            }
            if !iam.agent_ok() {
                eprintln!(
                    "sandbox: FAILED: the agent did not get everything it asked for on its own role's IRSA credentials{}",
                    if iam.refused.is_empty() {
                        String::new()
                    } else {
                        format!("; refused: {}", iam.refused.join("; "))
                    }
                );
                code = 1;
            }
            if !iam.provider_ok() {
                eprintln!(
                    "sandbox: FAILED: Terraform did not get everything it asked for with only the deployer policy ({} calls, {} refused){}",
                    iam.provider_calls,
                    iam.provider_refused,
                    if iam.refused.is_empty() {
                        String::new()
                    } else {
                        format!("; refused: {}", iam.refused.join("; "))
                    }
                );
                code = 1;
            }
            w.figures.iam = Some(iam);
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("sandbox: FAILED: reading the IAM decisions: {e:#}");
            code = 1;
        }
    }
    report(&mut w);
    if w.args.keep {
        keep(&mut w);
    } else {
        // Stop kube-sim first: it stops the agents, which would otherwise talk to a dead
        // emulator. Everything lived in these processes and the temp dir.
        w.kube_sim.take();
        w.moto.take();
        let _ = std::fs::remove_dir_all(&w.work);
    }
    if code == 0 && w.figures.nodes_refused_by_nodeadm.unwrap_or(0) > 0 {
        eprintln!(
            "sandbox: kube-sim's bridge refused the user data of {} instance(s) (its log): the run fails",
            w.figures.nodes_refused_by_nodeadm.unwrap_or(0)
        );
        return 1;
    }
    if !w.unexpected_alerts.is_empty() {
        eprintln!(
            "sandbox: FAILED: alerts: {}",
            w.unexpected_alerts.join("; ")
        );
        code = 1;
    }
    if let Some(waits) = w
        .figures
        .storm_waits
        .as_ref()
        .filter(|x| x.capacity.pods > 0)
    {
        if storm_can_replace_first(&w.args) {
            eprintln!(
                "sandbox: FAILED: {} pod(s) waited {:.1} pod-seconds for capacity in the storm, although the {} s notice exceeds boot ({}) plus the pods' 0 s grace: replacements should have been up first",
                waits.capacity.pods, waits.capacity.pod_secs, w.args.notice, w.args.boot_delay
            );
            code = 1;
        }
    }
    for wait in w.figures.stateful.iter().flat_map(|f| &f.stranded) {
        eprintln!(
            "sandbox: FAILED: pod {} is stranded by its volume's zone: unbound at the end, the scheduler refusing nodes that cannot reach its volume ({})",
            wait.pod, wait.message
        );
        code = 1;
    }
    if code == 0 && w.figures.pods_lost > 0 {
        eprintln!(
            "sandbox: {} pod(s) lost: the run fails",
            w.figures.pods_lost
        );
        return 1;
    }
    code
}

fn step(w: &World, msg: &str) {
    w.rec.say(&format!("\x1b[1msandbox: {msg}\x1b[0m"));
}

async fn run(w: &mut World) -> Result<()> {
    preflight(&w.args)?;
    std::fs::create_dir_all(&w.work)?;

    // --- The local world ----------------------------------------------------------------
    let port = joiner_test_support::free_port();
    step(
        w,
        &format!("starting the AWS emulator (moto) on 127.0.0.1:{port}"),
    );
    let moto_log = w.work.join("moto.log");
    w.moto = Some(procs::start_moto(port, &moto_log)?);
    w.moto_port = port;
    let endpoint = format!("http://127.0.0.1:{port}");
    let cloud = Cloud::new(&endpoint);
    let net = cloud.create_network(&w.cluster, 42).await?;
    step(
        w,
        &format!(
            "created {} with subnets {} (one per zone) and node security group {}, tagged joiner.dev/discovery={}",
            net.vpc_id,
            net.subnet_ids.join(", "),
            net.security_group_id,
            w.cluster
        ),
    );
    let catalog = Arc::new(cloud.catalog().await?);
    w.catalog = Some(catalog.clone());

    let agent_source = w
        .args
        .agent_image
        .clone()
        .unwrap_or_else(|| w.args.agent.clone());
    step(
        w,
        &if w.args.agent_image.is_some() {
            format!("starting kube-sim (EC2 bridge, Fargate simulation, the agent's image → {} in an empty root)", agent_source.display())
        } else {
            "starting kube-sim (EC2 bridge, Fargate simulation, the agent's image → the built joiner-agent on this machine)".to_string()
        },
    );
    let ks_log = w.work.join("kube-sim.log");
    let aws_env = aws_env(&endpoint);
    w.kube_sim = Some(procs::start_kube_sim(
        &procs::KubeSimOptions {
            bin: &w.args.kube_sim,
            kubeconfig: w.kubeconfig.clone(),
            cluster_name: &w.cluster,
            aws_endpoint: endpoint.clone(),
            boot_delay: &w.args.boot_delay,
            images: vec![(AGENT_IMAGE.to_string(), agent_source)],
            env: aws_env.clone(),
            eks_token_webhook: format!(
                "{endpoint}/joiner-local/eks/{}/{}/authenticate",
                crate::cloud::REGION,
                w.cluster
            ),
        },
        &ks_log,
    )?);
    // The provider reaches kube-sim as it reaches EKS: DescribeCluster's endpoint and CA
    // (bound here, before Terraform creates the cluster) and a presigned token that kube-sim
    // has the local world verify and map through the cluster's access entries.
    procs::bind_eks_endpoint(port, crate::cloud::REGION, &w.cluster, &w.kubeconfig)?;
    let client = cluster::client(&w.kubeconfig).await?;
    w.client = Some(client.clone());
    let sampler = w.rec.spawn(client.clone(), catalog.clone());
    w.cloud = Some(cloud);

    // --- terraform apply ----------------------------------------------------------------------
    let terraform_bin = w
        .args
        .terraform
        .clone()
        .unwrap_or_else(joiner_test_support::terraform_bin);
    // Terraform runs as an IAM user holding only the deployer policy the provider prints
    // for this cluster (docs/guides/deployer-permissions.md), as a CI role would.
    let tf_env = {
        let cloud = w.cloud.as_ref().context("no cloud")?;
        let account = cloud.account().await?;
        let cluster_arn = format!(
            "arn:aws:eks:{}:{account}:cluster/{}",
            crate::cloud::REGION,
            w.cluster
        );
        let policy = std::process::Command::new(&w.args.provider)
            .args(["policy", "deployer", &cluster_arn])
            .output()
            .context("run terraform-provider-joiner policy deployer")?;
        if !policy.status.success() {
            bail!(
                "terraform-provider-joiner policy deployer: {}",
                String::from_utf8_lossy(&policy.stderr)
            );
        }
        let (id, secret) = cloud
            .deployer(DEPLOYER, String::from_utf8_lossy(&policy.stdout).trim())
            .await?;
        step(
            w,
            &format!("terraform's credentials: IAM user {DEPLOYER}, holding only `terraform-provider-joiner policy deployer {cluster_arn}`"),
        );
        aws_env
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "AWS_ACCESS_KEY_ID" => (k, id.clone()),
                "AWS_SECRET_ACCESS_KEY" => (k, secret.clone()),
                _ => (k, v),
            })
            .collect()
    };
    let tf = Terraform::prepare(
        &terraform_bin,
        &w.args.root,
        &w.args.example,
        &w.work,
        &w.args.provider,
        tf_env,
    )?;
    show_ami_parameters(w, &client).await?;
    // Modules are installed by `terraform get` (local sources, no registry): `init` would
    // also look the provider up in the registry, which dev_overrides makes pointless.
    let got = run_tf(w, &tf, &["get", "-no-color"], "get", 120).await?;
    if !got.ok {
        bail!("terraform get failed:\n{}", last_lines(&got.text, 30));
    }
    step(w, &format!("terraform apply ({})", w.args.example));
    w.rec.mark("apply");
    let out = run_tf(
        w,
        &tf,
        &["apply", "-no-color", "-auto-approve"],
        "apply",
        300,
    )
    .await;
    let out = match out {
        Ok(o) if o.ok => o,
        Ok(o) => {
            let diag = diagnose_apply(&o.text, &client, w).await;
            bail!(
                "terraform apply failed.\n{diag}\n--- end of the apply log ---\n{}",
                last_lines(&o.text, 40)
            );
        }
        Err(e) => {
            let diag = diagnose_apply("", &client, w).await;
            bail!("{e:#}\n{diag}");
        }
    };
    w.figures.apply_secs = Some(out.elapsed.as_secs_f64());
    step(w, &format!("applied in {:.1} s", out.elapsed.as_secs_f64()));
    w.tf = Some(tf);
    check_agent_on_fargate(w, &client).await?;
    check_coredns_on_fargate(w, &client).await?;
    match crate::monitoring::start(&client, "joiner", &w.work.join("prometheus")).await {
        Ok(p) => {
            step(
                w,
                &format!(
                    "Prometheus {} scrapes the agent with monitoring/rules.yml",
                    p.url()
                ),
            );
            w.prometheus = Some(p);
        }
        Err(e) => eprintln!("sandbox: warning: no Prometheus, so no alerts report: {e:#}"),
    }

    // --- 1. the seed's scale-out --------------------------------------------------------------
    let pools = cluster::node_pools(&client).await?;
    let spread = cluster::spread_key(&pools);
    step(
        w,
        &format!(
            "1/5 workload: {} replicas of 250m/512Mi spread over zones{} (NodePools: {})",
            w.args.min_replicas,
            spread
                .as_deref()
                .map(|k| format!(" and the `{k}` capacity split"))
                .unwrap_or_default(),
            pools.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    );
    cluster::create_workload(&client, w.args.min_replicas, spread.as_deref()).await?;
    let volume_pods = VolumePods::start(client.clone()).await;
    w.volume_pods = Some(volume_pods.clone());
    step(
        w,
        &format!(
            "1/5 beside it: StatefulSet {} of {} pods, each claiming 8 GiB through StorageClass {} ({}, WaitForFirstConsumer)",
            crate::stateful::NAME,
            w.args.min_stateful,
            crate::stateful::CLASS,
            "ebs.csi.aws.com"
        ),
    );
    crate::stateful::create(&client, w.args.min_stateful).await?;
    let (n, m) = (w.args.min_replicas as usize, w.args.min_stateful as usize);
    let vp = volume_pods.clone();
    wait_for(
        w,
        120,
        &format!("{n} pods and {m} volume pods Running"),
        move |s| s.running() == n && s.pending() == 0 && vp.running() == m,
    )
    .await
    .map_err(|e| no_capacity_hint(e, w))?;
    step(
        w,
        &format!(
            "1/5 scale to {} (and the StatefulSet to {})",
            w.args.max_replicas, w.args.max_stateful
        ),
    );
    cluster::scale(&client, w.args.max_replicas).await?;
    crate::stateful::scale(&client, w.args.max_stateful).await?;
    w.rec.mark(&format!("scale to {}", w.args.max_replicas));
    let (n, m) = (w.args.max_replicas as usize, w.args.max_stateful as usize);
    let vp = volume_pods.clone();
    let secs = wait_for(
        w,
        240,
        &format!("{n} pods and {m} volume pods Running"),
        move |s| s.running() == n && s.pending() == 0 && vp.running() == m,
    )
    .await?;
    let snap = latest(w).await?;
    w.figures.scale_out_secs = Some(secs);
    w.figures.nodes_after_scale_out = Some(snap.ec2_nodes().count());
    let (pods_spot, nodes_spot) = spot_shares(&snap);
    w.figures.spot_share_pods = Some(pods_spot);
    w.figures.spot_share_nodes = Some(nodes_spot);
    w.figures.dollars_per_hour = Some(crate::pricing::cluster_price(&catalog, &snap));
    w.figures.lower_bound = crate::pricing::workload_lower_bound(&catalog, &pools, &snap);
    step(
        w,
        &format!(
            "all {n} Running after {secs:.1} s on {} nodes",
            snap.ec2_nodes().count()
        ),
    );

    check_node_network(w, &client).await?;

    // --- 2. a Spot interruption storm ------------------------------------------------------------
    storm(w, &client).await?;

    // --- 3. reviewing a NodePool change ---------------------------------------------------------------
    review(w).await?;

    // --- 4. scale-in ----------------------------------------------------------------------------------
    scale_in(w, &client).await?;

    report_alerts(w);

    // --- 5. terraform destroy ----------------------------------------------------------------------
    if w.args.keep {
        step(w, "5/5 KEEP: not destroying");
    } else {
        destroy(w).await?;
    }
    sampler.abort();
    Ok(())
}

/// Prints the alerts Prometheus saw fire (and those only pending: their `for` is longer
/// than the run) before destroy takes the agent away; one that should not fire fails the
/// run, and so does the storm's missing.
fn report_alerts(w: &mut World) {
    let Some(prom) = w.prometheus.as_ref() else {
        return;
    };
    match crate::monitoring::alerts(prom) {
        Ok((firing, pending)) => {
            let expected = crate::monitoring::EXPECTED;
            let show = |s: &std::collections::BTreeSet<String>| {
                if s.is_empty() {
                    "none".to_string()
                } else {
                    s.iter().cloned().collect::<Vec<_>>().join(", ")
                }
            };
            step(
                w,
                &format!(
                    "alerts fired: {} (expected: {}); pending, not held for their `for`: {}",
                    show(&firing),
                    expected.join(", "),
                    show(&pending)
                ),
            );
            for a in &firing {
                if !expected.contains(&a.as_str()) {
                    w.unexpected_alerts.push(format!("{a} fired"));
                }
            }
            for a in expected {
                if w.figures.storm_warned.is_some() && !firing.contains(*a) {
                    w.unexpected_alerts.push(format!("{a} did not fire"));
                }
            }
        }
        Err(e) => eprintln!("sandbox: warning: reading the alerts from Prometheus: {e:#}"),
    }
}

/// Says which images the NodeClass's AMI alias resolves to: the agent reads the public
/// parameters at their real names (`/aws/service/...`, which its policy grants), served by
/// the local world for the Kubernetes version kube-sim reports.
async fn show_ami_parameters(w: &World, client: &Client) -> Result<()> {
    let info = client
        .apiserver_version()
        .await
        .context("kube-sim's /version")?;
    let minor: String = info
        .minor
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let version = format!("{}.{minor}", info.major);
    let cloud = w.cloud.as_ref().context("no cloud")?;
    let found = cloud.ami_parameters(&version).await?;
    let images: BTreeSet<&str> = found.iter().map(|(_, i)| i.as_str()).collect();
    step(
        w,
        &format!(
            "the AMI alias parameters for Kubernetes {version} (/aws/service/eks/optimized-ami/..., /aws/service/bottlerocket/...) point at the emulator's images {}",
            images.into_iter().collect::<Vec<_>>().join(", ")
        ),
    );
    Ok(())
}

/// Fails before anything starts when a binary the run needs lacks the piece it needs.
fn preflight(a: &Args) -> Result<()> {
    for (what, p) in [
        ("the provider", &a.provider),
        ("joiner-agent", &a.agent),
        ("kube-sim", &a.kube_sim),
    ] {
        if !p.is_file() {
            bail!(
                "{what} binary {} does not exist (build it first: scripts/sandbox does)",
                p.display()
            );
        }
    }
    if !procs::help_mentions(&a.agent, &["run"], "--cluster-name") {
        bail!(
            "missing piece: `joiner-agent run` (the agent's controllers): `{} run --help` does not offer --cluster-name",
            a.agent.display()
        );
    }
    if !procs::help_mentions(&a.kube_sim, &[], "--image") {
        bail!(
            "missing piece: kube-sim's process runner (contract C, `--image NAME=PATH`): `{} --help` does not offer --image, so nothing would run the agent's Deployment",
            a.kube_sim.display()
        );
    }
    Ok(())
}

/// The IAM user Terraform runs as.
const DEPLOYER: &str = "deployer";

fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", crate::cloud::REGION),
        ("AWS_DEFAULT_REGION", crate::cloud::REGION),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn run_tf(
    w: &World,
    tf: &Terraform,
    args: &[&str],
    log: &str,
    timeout_secs: u64,
) -> Result<crate::terraform::Output> {
    // Terraform blocks; the sampler keeps running beside it.
    let bin = tf.bin.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let log = log.to_string();
    let dir = tf.dir.clone();
    let cli = tf.cli_config.clone();
    let env = tf.env().to_vec();
    let work = w.work.clone();
    tokio::task::spawn_blocking(move || {
        let tf = Terraform::reopen(bin, dir, cli, env, work.join("logs"));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        tf.run(&a, &log, Duration::from_secs(timeout_secs))
    })
    .await?
}

/// Waits until `cond` holds on a fresh snapshot; returns the seconds it took.
async fn wait_for<F: Fn(&Snapshot) -> bool>(
    w: &mut World,
    timeout_secs: u64,
    what: &str,
    cond: F,
) -> Result<f64> {
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(s) = w.rec.latest_since(start) {
            note_failed(w, &s);
            if cond(&s) {
                return Ok(start.elapsed().as_secs_f64());
            }
            if start.elapsed() > Duration::from_secs(timeout_secs) {
                bail!(
                    "timed out after {timeout_secs} s waiting for {what}: {} Running, {} Pending, {} EC2 nodes",
                    s.running(),
                    s.pending(),
                    s.ec2_nodes().count()
                );
            }
        } else if start.elapsed() > Duration::from_secs(timeout_secs) {
            bail!(
                "timed out after {timeout_secs} s waiting for {what}: kube-sim did not answer ({})",
                w.rec.last_error().unwrap_or_else(|| "no snapshot".into())
            );
        }
    }
}

fn note_failed(w: &mut World, s: &Snapshot) {
    for p in &s.pods {
        if p.phase == "Failed" {
            w.lost.insert(p.uid.clone());
        }
    }
}

async fn latest(w: &World) -> Result<Snapshot> {
    let c = w.client.as_ref().context("no Kubernetes client")?;
    cluster::snapshot(c).await
}

/// (share of running workload pods on Spot nodes, share of EC2 nodes that are Spot).
fn spot_shares(s: &Snapshot) -> (f64, f64) {
    let running: Vec<_> = s
        .pods
        .iter()
        .filter(|p| p.phase == "Running" && !p.deleting)
        .collect();
    let on_spot = running
        .iter()
        .filter(|p| {
            p.node
                .as_deref()
                .and_then(|n| s.node(n))
                .is_some_and(|n| n.capacity_type == "spot")
        })
        .count();
    let nodes = s.ec2_nodes().count();
    let spot_nodes = s.ec2_nodes().filter(|n| n.capacity_type == "spot").count();
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    (ratio(on_spot, running.len()), ratio(spot_nodes, nodes))
}

async fn check_agent_on_fargate(w: &mut World, client: &Client) -> Result<()> {
    let snap = cluster::snapshot(client).await?;
    let pods = cluster::agent_pods(client, "joiner").await?;
    let desc: Vec<String> = pods
        .iter()
        .map(|(name, phase, node)| {
            let kind = match snap.node(node) {
                Some(n) if n.fargate => "Fargate",
                Some(_) => "an EC2 node",
                None => "no node",
            };
            format!("{name} {phase} on {kind}")
        })
        .collect();
    step(w, &format!("agent: {}", desc.join("; ")));
    let on_fargate = pods
        .iter()
        .filter(|(_, phase, node)| phase == "Running" && snap.node(node).is_some_and(|n| n.fargate))
        .count();
    w.figures.agent_pods = Some(format!("{on_fargate} Running on Fargate"));
    // The agent's only AWS credentials are its pod's: IRSA for the role its ServiceAccount
    // names (kube-sim injects nothing else, and the runner's own environment does not leak).
    let roles = cluster::irsa_roles(client, "joiner").await?;
    match roles.first() {
        Some((_, sa, role)) => {
            step(
                w,
                &format!("agent credentials: IRSA, ServiceAccount joiner/{sa} → {role} (a token issued by the cluster's OIDC issuer; IAM enforced)"),
            );
            w.agent_identity = Some(("joiner".into(), sa.clone(), role.clone()));
        }
        None => bail!("the agent's ServiceAccount names no IAM role (eks.amazonaws.com/role-arn): it would have no AWS credentials"),
    }
    if on_fargate == 0 {
        bail!("missing piece: no agent pod runs on a Fargate node (kube-sim's Fargate simulation, contract C): {}", desc.join("; "));
    }
    Ok(())
}

/// CoreDNS runs on Fargate after one apply, and no EC2 instance was launched for it: the
/// kube-system profile switches the add-on once it is ACTIVE, which recreates the pods
/// where Fargate admits them (kube-sim plays EKS's self-managed CoreDNS with `--eks-addons`).
/// Every EC2 node registered through the cluster security group EKS created (kube-sim's
/// bridge registers a node only if its groups reach the API server's private endpoint), and
/// each one's pods reach CoreDNS on Fargate: the annotation the bridge sets from the groups.
async fn check_node_network(w: &mut World, client: &Client) -> Result<()> {
    let cloud = w.cloud.as_ref().context("no cloud")?;
    let cluster_group = cloud.cluster_security_group(&w.cluster).await?;
    let (version, status) = cloud.cluster_version(&w.cluster).await?;
    if status != "STANDARD_SUPPORT" {
        bail!("the cluster runs Kubernetes {version}, which EKS lists as {status}");
    }
    let nodes: Vec<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone())
        .list(&Default::default())
        .await
        .context("list Nodes")?
        .items;
    let mut ec2_nodes = 0;
    for node in &nodes {
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        // kube_sim::aws::CLUSTER_DNS_ANNOTATION (kube-sim runs as a process here).
        let Some(dns) = annotations.get("kube-sim.joiner.dev/cluster-dns") else {
            continue; // a Fargate node: not bridged from EC2
        };
        ec2_nodes += 1;
        if dns != "reachable" {
            bail!(
                "node {}: {dns}",
                node.metadata.name.as_deref().unwrap_or_default()
            );
        }
    }
    if ec2_nodes == 0 {
        bail!("no EC2 node carries kube-sim's cluster-DNS verdict");
    }
    step(
        w,
        &format!(
            "{ec2_nodes} nodes registered through the cluster security group {cluster_group} (the only group the private endpoint admits); CoreDNS on Fargate reachable from each; Kubernetes {version} ({status})"
        ),
    );
    Ok(())
}

async fn check_coredns_on_fargate(w: &mut World, client: &Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let desc = loop {
        let snap = cluster::snapshot(client).await?;
        let pods = cluster::agent_pods(client, "kube-system").await?;
        let coredns: Vec<_> = pods
            .iter()
            .filter(|(name, _, _)| name.starts_with("coredns-"))
            .collect();
        let on_fargate = coredns
            .iter()
            .filter(|(_, phase, node)| {
                phase == "Running" && snap.node(node).is_some_and(|n| n.fargate)
            })
            .count();
        let desc: Vec<String> = coredns
            .iter()
            .map(|(name, phase, node)| {
                format!(
                    "{name} {phase} on {}",
                    if node.is_empty() { "no node" } else { node }
                )
            })
            .collect();
        if on_fargate >= 2 && on_fargate == coredns.len() {
            break desc;
        }
        if Instant::now() > deadline {
            bail!(
                "CoreDNS is not on Fargate 60 s after the apply (the kube-system profile's coredns add-on): {}",
                desc.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cloud = w.cloud.as_ref().context("no cloud")?;
    let instances = cloud.live_instances().await?;
    step(
        w,
        &format!(
            "CoreDNS: {}; EC2 instances so far: {}",
            desc.join("; "),
            instances.len()
        ),
    );
    w.figures.coredns_pods = Some(format!(
        "{} Running on Fargate ({} EC2 instances)",
        desc.len(),
        instances.len()
    ));
    if !instances.is_empty() {
        bail!(
            "EC2 capacity was launched before any workload existed (for CoreDNS?): {:?}",
            instances
        );
    }
    Ok(())
}

/// Why an apply failed, in terms of the pieces the sandbox depends on.
async fn diagnose_apply(log: &str, client: &Client, w: &World) -> String {
    let mut out = Vec::new();
    for r in ["joiner_agent", "joiner_node_class", "joiner_node_pool"] {
        if log.contains(&format!("resource type \"{r}\""))
            || log.contains(&format!("Invalid resource type \"{r}\""))
        {
            out.push(format!(
                "missing piece: the provider does not serve `{r}` yet (the provider's Kubernetes half)"
            ));
        }
    }
    if let Ok(pods) = cluster::agent_pods(client, "joiner").await {
        if !pods.is_empty() {
            let snap = cluster::snapshot(client).await.unwrap_or_default();
            for (name, phase, node) in &pods {
                let where_ = match snap.node(node) {
                    Some(n) if n.fargate => "a Fargate node".to_string(),
                    Some(_) => format!("node {node}"),
                    None => "no node: kube-sim's Fargate simulation (contract C) did not place it"
                        .into(),
                };
                out.push(format!("agent pod {name}: {phase}, on {where_}"));
                if let Ok(log) = pod_log(client, "joiner", name).await {
                    out.push(format!(
                        "  its log:\n{}",
                        indent(&last_lines(&log, 15), "    ")
                    ));
                }
            }
        }
    }
    out.push(format!(
        "kube-sim log: {}",
        w.work.join("kube-sim.log").display()
    ));
    out.join("\n")
}

async fn pod_log(client: &Client, ns: &str, name: &str) -> Result<String> {
    pod_log_lines(client, ns, name, Some(20)).await
}

async fn pod_log_all(client: &Client, ns: &str, name: &str) -> Result<String> {
    pod_log_lines(client, ns, name, None).await
}

async fn pod_log_lines(
    client: &Client,
    ns: &str,
    name: &str,
    tail_lines: Option<i64>,
) -> Result<String> {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), ns);
    Ok(api
        .logs(
            name,
            &kube::api::LogParams {
                tail_lines,
                ..Default::default()
            },
        )
        .await?)
}

/// The agent's log lines, for a step that waited on the agent in vain.
fn no_capacity_hint(e: anyhow::Error, w: &World) -> anyhow::Error {
    anyhow!(
        "{e:#}\nThe agent did not bring up capacity for the pending pods. Look at its log: KUBECONFIG={} kubectl logs -n joiner deploy/joiner-agent",
        w.kubeconfig.display()
    )
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn indent(s: &str, pad: &str) -> String {
    s.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// 2/5: warnings for a share of the Spot nodes, on the default event bus; when the notice
/// runs out, EC2 takes the instances back, drained or not.
async fn storm(w: &mut World, client: &Client) -> Result<()> {
    let snap = cluster::snapshot(client).await?;
    let mut spot: Vec<(String, String)> = snap
        .ec2_nodes()
        .filter(|n| n.capacity_type == "spot")
        .filter_map(|n| Some((n.name.clone(), n.instance_id.clone()?)))
        .collect();
    spot.sort();
    let total = spot.len();
    if total == 0 {
        bail!(
            "2/5 storm: no Spot node is running (nodes: {:?}), so there is nothing to interrupt",
            snap.ec2_nodes()
                .map(|n| format!("{} {}", n.name, n.capacity_type))
                .collect::<Vec<_>>()
        );
    }
    let k = ((total as f64 * w.args.storm_share).ceil() as usize).clamp(1, total);
    // Every third-or-so node rather than the first k, so the storm hits every zone.
    let step_by = (total / k).max(1);
    let mut warned: Vec<(String, String)> = spot.iter().step_by(step_by).take(k).cloned().collect();
    // At least one warned node carries a pod of the StatefulSet, whose replacement must go
    // where its volume is.
    let volume_nodes = w
        .volume_pods
        .as_ref()
        .map(VolumePods::nodes)
        .unwrap_or_default();
    if !warned.iter().any(|(n, _)| volume_nodes.contains(n)) {
        if let Some(v) = spot.iter().find(|(n, _)| volume_nodes.contains(n)) {
            warned.pop();
            warned.push(v.clone());
        }
    }
    let ids: Vec<String> = warned.iter().map(|(_, id)| id.clone()).collect();
    // Watched from before the first warning: replacement before drain means no pod waits.
    let pending = crate::pending::PendingWatch::start(client.clone(), cluster::NAMESPACE).await;
    let sent = w
        .cloud
        .as_ref()
        .context("no cloud")?
        .spot_warnings(&ids)
        .await?;
    w.rec.mark(&format!("storm: {sent} Spot warnings"));
    w.figures.storm_warned = Some((sent, total));
    step(
        w,
        &format!(
            "2/5 Spot interruption storm: {sent} of {total} Spot nodes warned via events:PutEvents; EC2 takes them back after {} s",
            w.args.notice
        ),
    );
    let start = Instant::now();
    let names: BTreeSet<String> = warned.iter().map(|(n, _)| n.clone()).collect();
    let drained = |s: &Snapshot| -> usize {
        names
            .iter()
            .filter(|n| match s.node(n) {
                None => true,
                Some(node) => {
                    node.cordoned
                        && !s
                            .pods
                            .iter()
                            .any(|p| p.node.as_deref() == Some(n.as_str()) && !p.deleting)
                }
            })
            .count()
    };
    let notice = Duration::from_secs(w.args.notice);
    let mut snap = Snapshot::default();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        // Until the recorder samples after the warnings there is no picture to judge by:
        // an empty one would read as every warned node gone, and EC2 would take the
        // instances back before the agent had drained them.
        if let Some(s) = w.rec.latest_since(start) {
            snap = s;
            note_failed(w, &snap);
            if drained(&snap) == names.len() {
                break;
            }
        }
        if start.elapsed() >= notice {
            break;
        }
    }
    let done = drained(&snap);
    w.figures.storm_drained_in_notice = Some(done);
    // Pods still on a warned node when EC2 reclaims it are lost.
    for p in &snap.pods {
        if !p.deleting && p.node.as_deref().is_some_and(|n| names.contains(n)) {
            w.lost.insert(p.uid.clone());
        }
    }
    let cloud = w.cloud.as_ref().context("no cloud")?;
    let live = cloud.live_instances().await?;
    let reclaim: Vec<String> = ids
        .iter()
        .filter(|id| live.contains_key(*id))
        .cloned()
        .collect();
    cloud.reclaim(&reclaim).await?;
    step(
        w,
        &format!(
            "2/5 {done}/{} warned nodes drained after {:.1} s; EC2 reclaimed {} instance(s) still running",
            names.len(),
            start.elapsed().as_secs_f64(),
            reclaim.len()
        ),
    );
    let (n, m) = (w.args.max_replicas as usize, w.args.max_stateful as usize);
    let names2 = names.clone();
    let vp = w.volume_pods.clone().context("no StatefulSet watch")?;
    wait_for(
        w,
        180,
        &format!("{n} pods and {m} volume pods Running again after the storm"),
        move |s| {
            s.running() == n
                && s.pending() == 0
                && vp.running() == m
                && vp.nodes().is_disjoint(&names2)
                && !s
                    .pods
                    .iter()
                    .any(|p| p.node.as_deref().is_some_and(|x| names2.contains(x)))
        },
    )
    .await?;
    let secs = start.elapsed().as_secs_f64();
    w.figures.storm_recovered_secs = Some(secs);
    let kube_sim_log = std::fs::read_to_string(w.work.join("kube-sim.log")).unwrap_or_default();
    let waits = pending.figures(&crate::pending::turn_only(&kube_sim_log));
    step(
        w,
        &format!(
            "2/5 every pod Running again {secs:.1} s after the warnings; waited for capacity: {} pod(s), {:.1} pod-seconds; for their turn: {} pod(s), {:.1} pod-seconds; for the scheduler: {} pod(s), {:.1} pod-seconds",
            waits.capacity.pods, waits.capacity.pod_secs, waits.turn.pods, waits.turn.pod_secs, waits.scheduler.pods, waits.scheduler.pod_secs
        ),
    );
    if waits.capacity.pods + waits.turn.pods > 0 {
        for (m, n) in &waits.reasons {
            step(w, &format!("2/5 kube-scheduler ({n}×): {m}"));
        }
        save_agent_log(w, client, "storm-agent.log").await;
        let kept = out_dir(w).join("storm-kube-sim.log");
        if std::fs::write(&kept, &kube_sim_log).is_ok() {
            step(
                w,
                &format!(
                    "2/5 kube-sim's log (its binds and verdicts): {}",
                    kept.display()
                ),
            );
        }
    }
    w.figures.storm_waits = Some(waits);
    Ok(())
}

/// Whether the storm's notice leaves time to replace before draining: longer than a boot
/// plus the workload's termination grace (0 s), so no pod need wait for capacity.
fn storm_can_replace_first(args: &crate::Args) -> bool {
    let boot = joiner_agent::api::duration::parse_seconds(&args.boot_delay).unwrap_or(u64::MAX);
    args.notice > boot.saturating_add(cluster::GRACE_SECS)
}

/// Keeps the agent's whole log beside the summary, for a run whose figures need explaining
/// after its processes are gone.
async fn save_agent_log(w: &mut World, client: &Client, file: &str) {
    let out_dir = out_dir(w);
    let _ = std::fs::create_dir_all(&out_dir);
    let Ok(pods) = cluster::agent_pods(client, "joiner").await else {
        return;
    };
    let mut all = String::new();
    for (name, _, _) in &pods {
        if let Ok(log) = pod_log_all(client, "joiner", name).await {
            all.push_str(&format!("==> {name} <==\n{log}\n"));
        }
    }
    let path = out_dir.join(file);
    if std::fs::write(&path, all).is_ok() {
        step(w, &format!("2/5 the agent's log: {}", path.display()));
    }
}

/// 3/5: what a reviewer sees for a NodePool change, without applying it.
async fn review(w: &mut World) -> Result<()> {
    let tf = w.tf.as_ref().context("no terraform")?;
    step(
        w,
        "3/5 terraform plan of a NodePool change (module.node_pools: min_instance_generation 5 → 6)",
    );
    tf.write_override("review_override.tf", REVIEW_OVERRIDE)?;
    w.rec.mark("plan review");
    let out = run_tf(w, tf, &["plan", "-no-color"], "plan-review", 180).await;
    tf.remove_override("review_override.tf");
    let out = out?;
    if !out.ok {
        bail!("3/5 terraform plan failed:\n{}", last_lines(&out.text, 40));
    }
    let shown = review_excerpt(&out.text);
    w.rec.say(&indent(&shown, "  │ "));
    // The guide shows this very plan; it must keep showing what the plan prints.
    // Reported at the end.
    if let Err(diff) = same_shape(guide_plan(), &shown) {
        w.figures.guide_drift = Some(diff);
    }
    w.figures.plan_secs = Some(out.elapsed.as_secs_f64());
    w.figures.plan_warnings = Some(out.text.matches("Warning:").count());
    // The review is the impact preview: a plan without one (or with only "not previewed")
    // shows the reviewer nothing about the live cluster.
    let impacts = impact_warnings(&out.text);
    if impacts.is_empty() {
        bail!(
            "3/5 the plan of a NodePool change carries no \"{IMPACT_WARNING}\" warning:\n{}",
            last_lines(&out.text, 40)
        );
    }
    w.rec
        .say(&format!("  impact warning(s): {}", impacts.join(" | ")));
    Ok(())
}

/// The summary of the provider's plan-time impact preview of a NodePool update.
const IMPACT_WARNING: &str = "Impact of this NodePool change on the live cluster";

/// The detail of each NodePool impact warning in a `terraform plan -no-color` output: the
/// first line starting "NodePool " after the warning's summary, e.g. "NodePool spot: 7 of 21
/// live nodes become drifted, ...".
fn impact_warnings(plan: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_warning = false;
    for line in plan.lines() {
        let t = line.trim_start_matches(['│', '╷', '╵', ' ']).trim_end();
        if t.starts_with("Warning:") || t.starts_with("Error:") {
            in_warning = t == format!("Warning: {IMPACT_WARNING}");
        } else if in_warning && t.starts_with("NodePool ") {
            out.push(t.to_string());
            in_warning = false;
        }
    }
    out
}

/// What a reviewer reads: the first NodePool or NodeClass diff in full, the header line of
/// each further one (a module's pools usually change alike), then everything from the plan
/// line on (the warnings Terraform prints after it, the impact previews among them).
fn review_excerpt(plan: &str) -> String {
    let mut keep = Vec::new();
    let mut in_block = false;
    let mut blocks = 0;
    let mut tail = false;
    for line in plan.lines() {
        if tail {
            keep.push(line);
            continue;
        }
        let t = line.trim_start();
        if line.starts_with("  # ") {
            in_block = t.contains("joiner_node_pool") || t.contains("joiner_node_class");
            if in_block {
                blocks += 1;
                if blocks > 1 {
                    keep.push(line);
                    in_block = false;
                    continue;
                }
            }
        }
        if t.starts_with("Plan:") || t.starts_with("No changes.") {
            tail = true;
            keep.push("");
            keep.push(line);
            continue;
        }
        if in_block {
            keep.push(line);
            if line == "    }" {
                keep.push("");
                in_block = false;
            }
        }
    }
    keep.join("\n")
}

/// The plan excerpt in `docs/guides/reviewing-a-nodepool-change.md`: its fenced block that
/// starts with the first NodePool diff.
fn guide_plan() -> &'static str {
    const GUIDE: &str = include_str!("../../../docs/guides/reviewing-a-nodepool-change.md");
    let start = GUIDE
        .find("```\n  # module.node_pools")
        .map(|i| i + 4)
        .expect("the guide has a fenced plan excerpt");
    let len = GUIDE[start..]
        .find("```")
        .expect("the excerpt's fence closes");
    &GUIDE[start..start + len]
}

/// Whether two plan excerpts say the same thing but for numbers (node counts, rounds, type
/// counts and prices vary from run to run; which pools change, what changes in them and the
/// plan line's shape do not), up to the first warning's summary: which pool's warning
/// Terraform shows first, and so what follows, depends on which pools have live nodes. Box
/// drawing, trailing blanks and empty lines are ignored. The error names the first
/// differing line of each.
fn same_shape(guide: &str, plan: &str) -> std::result::Result<(), String> {
    fn shape(s: &str) -> Vec<String> {
        let mut seen_warning = false;
        s.lines()
            .take_while(|l| {
                let go = !seen_warning;
                seen_warning |= l
                    .trim_start_matches(['│', '╷', '╵', ' '])
                    .starts_with("Warning:");
                go
            })
            .map(|l| {
                let l = l.trim_start_matches(['│', '╷', '╵']).trim_end();
                let mut out = String::new();
                for c in l.chars() {
                    if c.is_ascii_digit() || c == '.' && out.ends_with('#') {
                        if !out.ends_with('#') {
                            out.push('#');
                        }
                    } else {
                        out.push(c);
                    }
                }
                out
            })
            .filter(|l| !l.trim().is_empty())
            .collect()
    }
    let (g, p) = (shape(guide), shape(plan));
    for (i, (a, b)) in g.iter().zip(&p).enumerate() {
        if a != b {
            return Err(format!(
                "line {}: the guide has {a:?}, the plan {b:?}",
                i + 1
            ));
        }
    }
    match g.len().cmp(&p.len()) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(format!("the plan goes on: {:?}", p[g.len()])),
        std::cmp::Ordering::Greater => Err(format!("the guide goes on: {:?}", g[p.len()])),
    }
}

/// 4/5: back to the minimum; consolidation removes what is no longer needed.
async fn scale_in(w: &mut World, client: &Client) -> Result<()> {
    let min = w.args.min_replicas;
    step(
        w,
        &format!(
            "4/5 scale back to {min} (and the StatefulSet to {}); consolidation",
            w.args.min_stateful
        ),
    );
    let before = cluster::snapshot(client).await?.ec2_nodes().count();
    cluster::scale(client, min).await?;
    crate::stateful::scale(client, w.args.min_stateful).await?;
    w.rec.mark(&format!("scale to {min}"));
    let start = Instant::now();
    let (n, m) = (min as usize, w.args.min_stateful as usize);
    let vp = w.volume_pods.clone().context("no StatefulSet watch")?;
    wait_for(
        w,
        60,
        &format!("{n} pods and {m} volume pods Running"),
        move |s| s.running() == n && s.pending() == 0 && vp.running() == m,
    )
    .await?;
    // Done when the node count has not changed for `settle`, or at the limit.
    let settle = Duration::from_secs(45);
    let limit = Duration::from_secs(180);
    let mut count = usize::MAX;
    let mut last_change = Instant::now();
    let mut last_removal: Option<f64> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(s) = w.rec.latest_since(start) else {
            continue;
        };
        note_failed(w, &s);
        let c = s.ec2_nodes().count();
        if c != count {
            if c < count && count != usize::MAX {
                last_removal = Some(start.elapsed().as_secs_f64());
            }
            count = c;
            last_change = Instant::now();
        }
        if last_change.elapsed() >= settle || start.elapsed() >= limit {
            break;
        }
    }
    w.figures.scale_in_secs = last_removal;
    w.figures.nodes_after_scale_in = Some(count);
    step(
        w,
        &format!(
            "4/5 {before} → {count} nodes{}",
            last_removal
                .map(|t| format!(", the last surplus node gone after {t:.1} s"))
                .unwrap_or_else(|| ", no node was removed".into())
        ),
    );
    if count >= before && before > n {
        bail!(
            "4/5 consolidation removed no node in {} s ({before} nodes for {n} pods)",
            limit.as_secs()
        );
    }
    let vp = w.volume_pods.clone().context("no StatefulSet watch")?;
    let vp2 = vp.clone();
    wait_for(w, 60, &format!("{m} volume pods Running"), move |_| {
        vp2.running() == m
    })
    .await?;
    let f = vp.figures();
    step(
        w,
        &format!(
            "4/5 StatefulSet {}: {} pods placed, {} of them replacements; {} verdicts named a volume's zone on the way, {} pods stranded by it",
            crate::stateful::NAME,
            f.placed,
            f.replaced,
            f.zone_waits.len(),
            f.stranded.len()
        ),
    );
    Ok(())
}

/// 5/5: destroy, then look for anything left in the account.
async fn destroy(w: &mut World) -> Result<()> {
    let tf = w.tf.as_ref().context("no terraform")?;
    step(w, "5/5 terraform destroy");
    w.rec.mark("destroy");
    let out = run_tf(
        w,
        tf,
        &["destroy", "-no-color", "-auto-approve"],
        "destroy",
        300,
    )
    .await?;
    if !out.ok {
        bail!(
            "5/5 terraform destroy failed:\n{}",
            last_lines(&out.text, 40)
        );
    }
    w.destroyed = true;
    w.figures.destroy_secs = Some(out.elapsed.as_secs_f64());
    let left = w
        .cloud
        .as_ref()
        .context("no cloud")?
        .leftovers(&w.cluster)
        .await?;
    let count: usize = left.iter().map(|(_, v)| v.len()).sum();
    w.figures.leftovers = Some(count);
    let lines: Vec<String> = left
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                format!("{k}: none")
            } else {
                format!("{k}: {}", v.join(", "))
            }
        })
        .collect();
    step(
        w,
        &format!(
            "5/5 destroyed in {:.1} s; left: {}",
            out.elapsed.as_secs_f64(),
            lines.join("; ")
        ),
    );
    if count > 0 {
        bail!(
            "5/5 destroy left {count} object(s) behind: {}",
            lines.join("; ")
        );
    }
    Ok(())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// (calls, refused, refused "action on resource") of the decisions for a principal
/// (a substring of its ARN) and, optionally, an application.
/// Calls, refusals, "action on resource" of each refusal, and the distinct actions called.
type Decisions = (usize, usize, Vec<String>, Vec<String>);

fn decisions(port: u16, principal: &str, app: Option<&str>) -> Result<Decisions> {
    let mut path = format!(
        "{}?principal={}",
        joiner_test_support::IAM_DECISIONS_PATH,
        percent_encode(principal)
    );
    if let Some(app) = app {
        path.push_str(&format!("&app={}", percent_encode(app)));
    }
    let (status, body) = procs::http_get(port, &path)?;
    if status != 200 {
        bail!("GET {path}: HTTP {status}: {}", last_lines(&body, 5));
    }
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("GET {path}: not JSON"))?;
    let rows = v["decisions"].as_array().cloned().unwrap_or_default();
    let refused: Vec<String> = rows
        .iter()
        .filter(|r| r["allowed"] == false)
        .map(|r| {
            format!(
                "{} on {}",
                r["action"].as_str().unwrap_or("?"),
                r["resource"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let mut actions: Vec<String> = rows
        .iter()
        .filter_map(|r| r["action"].as_str().map(str::to_string))
        .collect();
    actions.sort();
    actions.dedup();
    Ok((rows.len(), refused.len(), refused, actions))
}

/// The IAM decisions of the run, once the agent's identity is known (None before).
fn iam_figures(w: &World) -> Result<Option<IamFigures>> {
    let (Some((ns, sa, role)), Some(_)) = (&w.agent_identity, &w.moto) else {
        return Ok(None);
    };
    let role_name = role.rsplit('/').next().unwrap_or(role);
    let (agent_calls, agent_refused, mut refused, mut calls_made) =
        decisions(w.moto_port, &format!(":assumed-role/{role_name}/"), None)?;
    let (web_calls, web_refused, web_refusals, web_actions) = decisions(
        w.moto_port,
        &format!("web-identity:system:serviceaccount:{ns}:{sa}"),
        None,
    )?;
    let (provider_calls, provider_refused, provider_refusals, provider_actions) = decisions(
        w.moto_port,
        &format!(":user/{DEPLOYER}"),
        Some("terraform-provider-joiner"),
    )?;
    refused.extend(web_refusals);
    refused.extend(provider_refusals);
    refused.truncate(10);
    calls_made.extend(web_actions);
    calls_made.extend(provider_actions);
    calls_made.sort();
    calls_made.dedup();
    let outside_ledger =
        joiner_test_support::calls_missing_from_ledger(calls_made.iter().map(String::as_str));
    Ok(Some(IamFigures {
        agent_role: role_name.to_string(),
        agent_calls,
        agent_refused,
        web_identity_calls: web_calls,
        web_identity_refused: web_refused,
        provider_calls,
        provider_refused,
        refused,
        calls_made,
        outside_ledger,
    }))
}

fn out_dir(w: &World) -> PathBuf {
    w.args
        .out
        .clone()
        .unwrap_or_else(|| w.args.root.join("target/sandbox"))
}

fn report(w: &mut World) {
    let out_dir = out_dir(w);
    let _ = std::fs::create_dir_all(&out_dir);
    let table = w.figures.table();
    println!("\n{table}");
    let _ = std::fs::write(out_dir.join("summary.md"), &table);
    let samples = w.rec.samples();
    if samples.is_empty() {
        return;
    }
    let title = format!(
        "joiner sandbox: {} — pods and EC2 nodes over time",
        w.args.example
    );
    let note = format!(
        "kube-sim boot delay {} (an instance becomes a Ready Node that long after launch; EKS takes about a minute); Spot notice compressed to {} s; nproc={}",
        w.args.boot_delay, w.args.notice, w.figures.nproc
    );
    let svg = crate::timeline::render(&samples, &w.rec.markers(), &title, &note);
    let svg_path = out_dir.join("timeline.svg");
    if std::fs::write(&svg_path, svg).is_ok() {
        println!("timeline: {}", svg_path.display());
        // A PNG only when a converter is already installed: it is not worth a dependency.
        let png = out_dir.join("timeline.png");
        if std::process::Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .arg(&svg_path)
            .status()
            .is_ok_and(|s| s.success())
        {
            println!("timeline: {}", png.display());
        }
    }
}

fn keep(w: &mut World) {
    if let Some(p) = w.moto.as_mut() {
        p.detach();
    }
    if let Some(p) = w.kube_sim.as_mut() {
        p.detach();
    }
    let mut pids: Vec<String> = [w.moto.as_ref(), w.kube_sim.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| p.pid().to_string())
        .collect();
    if let Some(p) = w.prometheus.take() {
        let url = p.url();
        pids.push(p.detach().to_string());
        eprintln!(
            "sandbox: KEEP=1: Prometheus scrapes the agent at {url}: its alerts at {url}/alerts, queries at {url}/graph (the dashboard's queries: monitoring/dashboard.json; point a Grafana at {url} to import it)"
        );
    }
    let Some(tf) = w.tf.as_ref() else {
        eprintln!(
            "sandbox: KEEP: kept {} (moto and kube-sim pids: {})",
            w.work.display(),
            pids.join(" ")
        );
        return;
    };
    let mut env = format!(
        "# Written by joiner-sandbox (KEEP=1). Source it: . {}\nexport KUBECONFIG={}\nexport TF_CLI_CONFIG_FILE={}\n",
        w.work.join("env.sh").display(),
        w.kubeconfig.display(),
        tf.cli_config.display()
    );
    for (k, v) in tf.env() {
        env.push_str(&format!("export {k}={v}\n"));
    }
    env.push_str(&format!("cd {}\n", tf.dir.display()));
    let _ = std::fs::write(w.work.join("env.sh"), &env);
    eprintln!(
        "\nsandbox: KEEP=1: everything is still running.\n  . {}     # KUBECONFIG, Terraform's CLI config and the emulator's AWS env; cd into the example\n  kubectl get nodes,nodeclaims,nodepools\n  kubectl logs -n joiner deploy/joiner-agent\n  {} plan\n  {} destroy -auto-approve\nWhen done: kill {}   # moto and kube-sim (kube-sim stops the agents); then rm -rf {}",
        w.work.join("env.sh").display(),
        tf.bin.display(),
        tf.bin.display(),
        pids.join(" "),
        w.work.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_excerpt_keeps_pool_diffs_warnings_and_the_plan_line() {
        let plan = "\
module.cluster.joiner_cluster.this[0]: Refreshing state...
Terraform will perform the following actions:

  # module.node_pools.joiner_node_pool.this[\"spot\"] will be updated in-place
  ~ resource \"joiner_node_pool\" \"this\" {
      ~ requirement {
          ~ values = [\"4\"] -> [\"5\"]
        }
    }

Plan: 0 to add, 2 to change, 0 to destroy.

Warning: NodePool spot: 7 live nodes drift

  with module.node_pools.joiner_node_pool.this[\"spot\"],
";
        let got = review_excerpt(plan);
        assert!(
            got.contains("# module.node_pools.joiner_node_pool.this[\"spot\"]"),
            "{got}"
        );
        assert!(got.contains("~ values"), "{got}");
        assert!(got.contains("Plan: 0 to add, 2 to change"), "{got}");
        assert!(
            got.contains("Warning: NodePool spot: 7 live nodes drift"),
            "{got}"
        );
        assert!(!got.contains("Refreshing state"), "{got}");
    }

    #[test]
    fn further_pools_show_as_their_header_line() {
        let plan = "\
  # module.node_pools.joiner_node_pool.this[\"a\"] will be updated in-place
  ~ resource \"joiner_node_pool\" \"this\" {
      ~ requirement {
        }
    }

  # module.node_pools.joiner_node_pool.this[\"b\"] will be updated in-place
  ~ resource \"joiner_node_pool\" \"this\" {
      ~ requirement {
        }
    }

Plan: 0 to add, 2 to change, 0 to destroy.
";
        let got = review_excerpt(plan);
        assert!(got.contains("this[\"b\"] will be updated"), "{got}");
        assert_eq!(got.matches("~ requirement").count(), 1, "{got}");
        assert!(
            got.ends_with("Plan: 0 to add, 2 to change, 0 to destroy."),
            "{got}"
        );
    }

    #[test]
    fn plan_excerpts_compare_by_shape_not_numbers() {
        let a = "  # x will be updated\n~ count = 649 -> 512\n\n│ NodePool spot: 7 of 21 live nodes; $0.0416/h\n";
        let b = "  # x will be updated\n~ count = 12 -> 3\n│ NodePool spot: 2 of 9 live nodes; $1.5/h\n";
        assert_eq!(same_shape(a, b), Ok(()));
        // After the first warning's summary, anything goes.
        let w1 = "  # x will be updated\nWarning: Impact\n  with pool[\"a\"]\n";
        let w2 = "  # x will be updated\nWarning: Impact\n  with pool[\"b\"]\nmore\n";
        assert_eq!(same_shape(w1, w2), Ok(()));
        assert!(same_shape(w1, "  # x will be updated\nWarning: Other\n").is_err());
        let c = "  # y will be updated\n~ count = 12 -> 3\n";
        assert!(same_shape(a, c).unwrap_err().contains("line 1"));
        assert!(same_shape(a, "  # x will be updated\n")
            .unwrap_err()
            .contains("guide goes on"));
    }

    /// The guide's excerpt is a real run's (`fixtures/plan-review.txt`, what scenario 3 of
    /// `./scripts/sandbox` printed), so the guide cannot drift from the plan unnoticed.
    #[test]
    fn the_guide_shows_a_real_plan() {
        let real = include_str!("../fixtures/plan-review.txt");
        assert_eq!(same_shape(guide_plan(), real), Ok(()));
    }

    #[test]
    fn the_review_needs_a_nodepool_impact_warning() {
        let with = "Plan: 0 to add, 1 to change, 0 to destroy.
╷
│ Warning: Impact of this NodePool change on the live cluster
│ 
│   with module.node_pools.joiner_node_pool.this[\"spot\"],
│ 
│ NodePool spot: 7 of 21 live nodes become drifted.
╵
";
        assert_eq!(
            impact_warnings(with),
            vec!["NodePool spot: 7 of 21 live nodes become drifted."]
        );
        // Other warnings, or an impact that could not be previewed, are not the review.
        let without = "Plan: 0 to add, 1 to change, 0 to destroy.

Warning: NodePool change impact not previewed

NodePool spot: the cluster could not be asked at plan time (x); the plan itself is unaffected.

Warning: Deprecated attribute

NodePool spot: something else
";
        assert!(impact_warnings(without).is_empty());
    }
}

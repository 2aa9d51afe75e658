//! `kube-sim`: serves a Kubernetes API for tests and the sandbox until SIGTERM or Ctrl-C.

use std::time::Duration;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "kube-sim",
    about = "A small Kubernetes API server with simulated controllers (test and sandbox tool)"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Where to write a kubeconfig pointing at this server.
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    /// AWS emulator endpoint: EC2 instances tagged for the cluster become Nodes.
    #[arg(long)]
    aws_endpoint: Option<String>,
    /// How long an instance "boots" before its Node registers (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    boot_delay: Duration,
    /// How long a Node of a stopped/terminated instance stays NotReady before deletion.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    node_grace: Duration,
    /// Cluster name: kubeconfig names and the instance tag the bridge looks for.
    #[arg(long, default_value = "kube-sim")]
    cluster_name: String,
    /// Simulated controllers to disable (comma-separated): deployments, daemonsets,
    /// scheduler, kubelet, gc, disruption, statefulsets, volumes.
    #[arg(long, value_delimiter = ',')]
    disable: Vec<String>,
    /// Run containers of this image as local processes: NAME=PATH, where NAME is the image
    /// name without tag (or a prefix of it) and PATH a binary, or an unpacked OCI image (a
    /// runtime bundle as `umoci unpack` writes it, or a root filesystem). Repeatable.
    #[arg(long = "image", value_name = "NAME=PATH", value_parser = kube_sim::runner::image::parse_image_arg)]
    images: Vec<(String, kube_sim::ImageSource)>,
    /// Play EKS's CoreDNS (needs --aws-endpoint): the self-managed Deployment, kept in line
    /// with the cluster's `coredns` add-on.
    #[arg(long)]
    eks_addons: bool,
    /// Log with every new Unschedulable verdict whether the pod and the unbound pods its
    /// topology spreads count would have fit in another order (a search per verdict).
    #[arg(long)]
    explain_unschedulable: bool,
    /// TokenReview webhook (http://) for EKS bearer tokens (k8s-aws-v1.), e.g. the local
    /// world's <emulator>/joiner-local/eks/<region>/<cluster>/authenticate. Without it,
    /// EKS tokens get 401.
    #[arg(long, value_name = "URL")]
    eks_token_webhook: Option<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    num.parse::<f64>()
        .map(|n| Duration::from_secs_f64(n * mult))
        .map_err(|_| format!("invalid duration {s:?}: use e.g. 500ms, 2s, 1m"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kube_sim=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut controllers = kube_sim::ControllerSet {
        explain_unschedulable: args.explain_unschedulable,
        ..Default::default()
    };
    for d in &args.disable {
        match d.as_str() {
            "deployments" => controllers.deployments = false,
            "daemonsets" => controllers.daemonsets = false,
            "scheduler" => controllers.scheduler = false,
            "kubelet" => controllers.kubelet = false,
            "gc" => controllers.garbage_collector = false,
            "disruption" => controllers.disruption = false,
            "statefulsets" => controllers.statefulsets = false,
            "volumes" => controllers.volumes = false,
            other => anyhow::bail!("--disable: unknown controller {other:?}; allowed: deployments, daemonsets, scheduler, kubelet, gc, disruption, statefulsets, volumes"),
        }
    }
    let opts = kube_sim::Options {
        listen: args.listen,
        kubeconfig: Some(args.kubeconfig.clone()),
        cluster_name: args.cluster_name,
        aws_endpoint: args.aws_endpoint,
        boot_delay: args.boot_delay,
        node_grace: args.node_grace,
        controllers,
        images: args.images,
        eks_addons: args.eks_addons,
        eks_token_webhook: args.eks_token_webhook,
        ..Default::default()
    };
    let server = kube_sim::server::serve(opts).await?;
    println!("{}", server.url());
    use std::io::Write;
    std::io::stdout().flush()?;
    tracing::info!(address = %server.addr, kubeconfig = %args.kubeconfig.display(), "kube-sim serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    server.shutdown();
    Ok(())
}

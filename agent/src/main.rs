//! joiner-agent: the in-cluster controller. `run` starts the controllers (see
//! `joiner_agent::controllers`); `crds` prints the CustomResourceDefinitions it serves;
//! `prometheus-rule` its alerts (`monitoring/rules.yml`) as a PrometheusRule.

use std::sync::Arc;

use clap::{Parser, Subcommand};
use joiner_agent::cloud::Cloud;
use joiner_agent::controllers::operator::config::CloudKind;
use joiner_agent::controllers::{self, operator, Config};

#[derive(Parser)]
#[command(
    name = "joiner-agent",
    version,
    about = "Launches just-in-time EC2 capacity for pending pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers (flags have environment fallbacks; see --help).
    Run(Box<Config>),
    /// Print the joiner.dev CustomResourceDefinitions as YAML.
    Crds,
    /// Print the agent's alerts (monitoring/rules.yml) as a prometheus-operator
    /// PrometheusRule, as YAML.
    PrometheusRule {
        /// The namespace to put it in (where the agent runs).
        #[arg(long, default_value = "joiner")]
        namespace: String,
    },
}

fn print_prometheus_rule(namespace: &str) -> i32 {
    let rule = joiner_agent::monitoring::prometheus_rule(namespace)
        .and_then(|r| serde_yaml::to_string(&r).map_err(|e| e.to_string()));
    match rule {
        Ok(y) => {
            print!("{y}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn print_crds() -> i32 {
    for crd in joiner_agent::api::schema::crds() {
        match serde_yaml::to_string(&crd) {
            Ok(y) => print!("---\n{y}"),
            Err(e) => {
                eprintln!("error: serialising CRD {}: {e}", crd.spec.names.kind);
                return 1;
            }
        }
    }
    0
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C turns `tx` true.
async fn signals(tx: tokio::sync::watch::Sender<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt: shutting down"),
    }
    let _ = tx.send(true);
}

/// The cloud `--cloud` names. The KWOK cloud is chosen here, in the binary, rather than in
/// the library: the image's binary is compiled without the feature `kwok` even when the
/// library has it (scripts/rustc-wrapper), and then nothing in it reaches the KWOK cloud.
async fn cloud(config: &Config) -> anyhow::Result<Arc<dyn Cloud>> {
    match config.cloud {
        CloudKind::Ec2 => controllers::ec2_cloud(config).await,
        #[cfg(feature = "kwok")]
        CloudKind::Kwok => controllers::kwok_cloud(config).await,
        #[cfg(not(feature = "kwok"))]
        CloudKind::Kwok => anyhow::bail!(
            "--cloud kwok: this joiner-agent was built without the KWOK cloud (cargo feature \
             `kwok`), which is for benchmarks only; build one that has it with \
             `cargo build -p joiner-agent --features kwok`"
        ),
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(signals(tx));
    let cloud = cloud(&config).await?;
    controllers::run(config, cloud, rx).await
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Some(Command::Crds) => print_crds(),
        Some(Command::PrometheusRule { namespace }) => print_prometheus_rule(&namespace),
        Some(Command::Run(config)) => {
            operator::memory::one_arena();
            operator::logging::init(config.log_format, &config.log_level);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: starting the async runtime: {e}");
                    std::process::exit(1);
                }
            };
            match rt.block_on(run(*config)) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "joiner-agent failed");
                    eprintln!("error: {e:#}");
                    1
                }
            }
        }
        None => {
            eprintln!(
                "joiner-agent {}: no command given; `joiner-agent run` starts the controllers (see --help)",
                env!("CARGO_PKG_VERSION")
            );
            2
        }
    };
    std::process::exit(code);
}

//! `joiner-sandbox`: the seed scenarios on one machine, with no cloud.
//!
//! Starts the AWS emulator and kube-sim (EC2 bridge, Fargate simulation, the agent's image
//! run as the locally built `joiner-agent`), creates the network the example discovers,
//! applies the example with the real Terraform CLI and the provider from this build, then
//! plays: the seed's scale-out (4 → 100 replicas, beside a StatefulSet whose pods each claim
//! an EBS volume), a Spot interruption storm, a reviewed NodePool change, the scale-in, and
//! `terraform destroy` with a check that nothing is left.
//! It prints a live progress line and a summary table, and draws the timeline as SVG.
//!
//! Driven by `scripts/sandbox`, which builds the binaries first. Every step that depends on
//! a piece that is missing fails with a message naming that piece: the player never makes a
//! figure up.

mod cloud;
mod cluster;
mod monitoring;
mod pending;
mod pricing;
mod procs;
mod recorder;
mod scenarios;
mod stateful;
mod summary;
mod terraform;
mod timeline;

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "joiner-sandbox",
    about = "Applies an example against the AWS emulator and kube-sim, then plays the seed scenarios"
)]
pub struct Args {
    /// The repository checkout (examples/ and terraform-modules/ are read from it).
    #[arg(long, default_value_os_t = joiner_test_support::workspace_root())]
    pub root: PathBuf,
    /// The example to apply, relative to the root.
    #[arg(long, env = "EXAMPLE", default_value = "examples/quickstart")]
    pub example: String,
    /// The cluster name the example uses (the discovery tag the network is created with).
    /// Default: the example directory's name, which is each example's default name.
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Leave everything running at the end and print how to reach it (also `KEEP=1`).
    #[arg(long)]
    pub keep: bool,
    /// The provider binary (dev_overrides points Terraform at it).
    #[arg(long)]
    pub provider: PathBuf,
    /// The `joiner-agent` binary (its `run --help` is checked before anything starts; kube-sim
    /// runs it for the agent's image when there is no `--agent-image`).
    #[arg(long)]
    pub agent: PathBuf,
    /// The agent's image, unpacked (`umoci unpack` of `scripts/image`'s layout): kube-sim runs
    /// it in an empty root, as a node runs the published image.
    #[arg(long)]
    pub agent_image: Option<PathBuf>,
    /// The `kube-sim` binary.
    #[arg(long)]
    pub kube_sim: PathBuf,
    /// Terraform (default: `$TERRAFORM` or `.tools/bin/terraform`).
    #[arg(long)]
    pub terraform: Option<PathBuf>,
    /// How long an instance boots before its Node registers in kube-sim.
    #[arg(long, default_value = "2s")]
    pub boot_delay: String,
    /// The Spot notice, in seconds: EC2 gives 120; compressed here so the run stays short.
    #[arg(long, default_value_t = 30)]
    pub notice: u64,
    /// Replicas before and after the scale-out.
    #[arg(long, default_value_t = 4)]
    pub min_replicas: i32,
    #[arg(long, default_value_t = 100)]
    pub max_replicas: i32,
    /// Pods of the StatefulSet with volumes beside the seed's Deployment, before and after
    /// the scale-out.
    #[arg(long, default_value_t = 3)]
    pub min_stateful: i32,
    #[arg(long, default_value_t = 9)]
    pub max_stateful: i32,
    /// Share of the Spot nodes that get an interruption warning.
    #[arg(long, default_value_t = 0.3)]
    pub storm_share: f64,
    /// Where the timeline and summary go (default: <root>/target/sandbox).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn main() {
    let mut args = Args::parse();
    // Terraform links to the provider from another directory: paths must be absolute.
    for p in [&mut args.provider, &mut args.agent, &mut args.kube_sim]
        .into_iter()
        .chain(args.agent_image.as_mut())
    {
        if let Ok(abs) = std::fs::canonicalize(&*p) {
            *p = abs;
        }
    }
    if std::env::var("KEEP").is_ok_and(|v| !v.is_empty() && v != "0") {
        args.keep = true;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(scenarios::play(args));
    // Stop the runtime without waiting for the sampler, which never ends by itself.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    std::process::exit(code);
}

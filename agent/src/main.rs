//! joiner-agent: the in-cluster controller. The controllers are a later step; for now the
//! binary reports its version and prints the CRDs it serves.

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;

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
    /// Print the joiner.dev CustomResourceDefinitions as YAML.
    Crds,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crds) => {
            for crd in [
                joiner_agent::api::NodePool::crd(),
                joiner_agent::api::NodeClass::crd(),
                joiner_agent::api::NodeClaim::crd(),
            ] {
                match serde_yaml::to_string(&crd) {
                    Ok(y) => print!("---\n{y}"),
                    Err(e) => {
                        eprintln!("error: serialising CRD {}: {e}", crd.spec.names.kind);
                        std::process::exit(1);
                    }
                }
            }
        }
        None => {
            eprintln!(
                "joiner-agent {}: the controllers are not implemented yet; see --help",
                env!("CARGO_PKG_VERSION")
            );
            std::process::exit(2);
        }
    }
}

//! terraform-provider-joiner: started by Terraform (go-plugin), or by hand with `--debug`.

use joiner_provider::protocol::plugin::{self, ServeOptions};
use joiner_provider::provider::JoinerProvider;
use std::process::ExitCode;

const PROVIDER_ADDRESS: &str = "registry.terraform.io/joiner/joiner";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let binary = "terraform-provider-joiner";
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", plugin::not_a_command_message(binary));
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--version" || a == "-v") {
        println!("{binary} {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let debug = args.iter().any(|a| a == "--debug");
    if let Some(other) = args.iter().find(|a| *a != "--debug") {
        eprintln!(
            "{binary}: unknown argument {other:?} (only --debug, --help and --version exist)"
        );
        return ExitCode::from(2);
    }
    if !debug && !plugin::launched_by_terraform() {
        eprintln!("{}", plugin::not_a_command_message(binary));
        return ExitCode::from(1);
    }

    // Logs go to stderr, which Terraform records in its own log (TF_LOG=debug shows them).
    // stdout is reserved for the handshake line.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JOINER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{binary}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = ServeOptions {
        debug,
        provider_address: PROVIDER_ADDRESS.to_string(),
    };
    match runtime.block_on(plugin::serve(JoinerProvider, opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{binary}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

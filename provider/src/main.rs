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
    if args.first().map(String::as_str) == Some("policy") {
        return print_policy(binary, &args[1..]);
    }
    if args.first().map(String::as_str) == Some("convert") {
        return convert(binary, &args[1..]);
    }
    let debug = args.iter().any(|a| a == "--debug");
    if let Some(other) = args.iter().find(|a| *a != "--debug") {
        eprintln!(
            "{binary}: unknown argument {other:?} (only --debug, --help, --version, policy and convert exist)"
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

/// `policy agent CLUSTER_ARN QUEUE_ARN NODE_ROLE_ARN`: prints the agent role's inline policy
/// exactly as `joiner_agent_role` renders it, for review, for a role made outside Terraform,
/// and for the agent's tests, which run the agent with only this policy under enforced IAM.
///
/// `policy deployer CLUSTER_ARN`: prints what the identity that runs `terraform apply` of
/// `terraform-modules/groupless-eks` needs (`docs/guides/deployer-permissions.md`); the
/// sandbox applies and destroys the quickstart with only this policy.
fn print_policy(binary: &str, args: &[String]) -> ExitCode {
    use joiner_provider::policy::agent::{agent_policy, AgentScope};
    use joiner_provider::policy::arn::Arn;
    use joiner_provider::policy::deployer::deployer_policy;
    use joiner_provider::resources::interruption_rules::naming::rule_prefix;
    let usage = format!(
        "usage: {binary} policy agent CLUSTER_ARN QUEUE_ARN NODE_ROLE_ARN [QUEUE_KMS_KEY_ARN]\n       {binary} policy deployer CLUSTER_ARN"
    );
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("{binary}: {what}: {e}");
        ExitCode::from(2)
    };
    match args {
        [kind, cluster] if kind == "deployer" => {
            let cluster = match Arn::expect(cluster, "eks", "cluster/") {
                Ok(a) => a,
                Err(e) => return fail("CLUSTER_ARN", &e),
            };
            let prefix = rule_prefix(cluster.resource_name());
            println!("{}", deployer_policy(&cluster, &prefix).to_json());
            ExitCode::SUCCESS
        }
        [kind, cluster, queue, node_role, key @ ..] if kind == "agent" && key.len() <= 1 => {
            let cluster = match Arn::expect(cluster, "eks", "cluster/") {
                Ok(a) => a,
                Err(e) => return fail("CLUSTER_ARN", &e),
            };
            for (what, arn, service, prefix) in [
                ("QUEUE_ARN", queue, "sqs", ""),
                ("NODE_ROLE_ARN", node_role, "iam", "role/"),
            ]
            .into_iter()
            .chain(key.iter().map(|k| ("QUEUE_KMS_KEY_ARN", k, "kms", "key/")))
            {
                if let Err(e) = Arn::expect(arn, service, prefix) {
                    return fail(what, &e);
                }
            }
            let scope = AgentScope {
                cluster,
                queue_arn: queue.clone(),
                node_role_arn: node_role.clone(),
                queue_kms_key_arn: key.first().cloned(),
            };
            println!("{}", agent_policy(&scope).to_json());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{usage}");
            ExitCode::from(2)
        }
    }
}

/// `convert [--cluster-name EXPR] [--node-role EXPR] [FILE...]`: Karpenter NodePools,
/// Provisioners, EC2NodeClasses and AWSNodeTemplates (YAML, several documents per file; no
/// FILE or `-` reads stdin) printed as `joiner_node_pool` / `joiner_node_class` resources,
/// with a comment wherever a field changed meaning or has no joiner equivalent.
fn convert(binary: &str, args: &[String]) -> ExitCode {
    use joiner_provider::convert::{convert, Options};
    let usage = format!(
        "usage: {binary} convert [--cluster-name EXPR] [--node-role EXPR] [FILE...]\n\
         EXPR is written into the HCL as is (defaults: var.cluster_name, var.node_role_name)"
    );
    let mut opts = Options::default();
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let target = match a.as_str() {
            "--cluster-name" => &mut opts.cluster_name,
            "--node-role" => &mut opts.node_role,
            f if f == "-" || !f.starts_with('-') => {
                files.push(f.to_string());
                continue;
            }
            _ => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        };
        match it.next() {
            Some(v) => *target = v.clone(),
            None => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        }
    }
    if files.is_empty() {
        files.push("-".to_string());
    }
    for (i, f) in files.iter().enumerate() {
        let read = if f == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(f)
        };
        let yaml = match read {
            Ok(y) => y,
            Err(e) => {
                eprintln!("{binary}: convert: reading {f}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let source = if f == "-" { "stdin" } else { f.as_str() };
        match convert(&yaml, source, &opts) {
            Ok(hcl) => {
                if i > 0 {
                    println!();
                }
                print!("{hcl}");
            }
            Err(e) => {
                eprintln!("{binary}: convert: {source}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

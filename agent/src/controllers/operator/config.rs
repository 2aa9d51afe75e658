//! `joiner-agent run`'s flags. Every flag has an environment fallback because the agent's
//! Deployment configures it through env (contract A in the design); tests build the same
//! struct with [`clap::Parser::parse_from`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::api::served::{ApiFlavor, ClassCloud, Served};

/// Where capacity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudKind {
    /// EC2 (CreateFleet), the product.
    Ec2,
    /// Nodes created directly for KWOK to play, with Karpenter's KWOK instance types: the
    /// world `scripts/bench-perf-suite` measures joiner and Karpenter in (`cloud::kwok`).
    /// Offered by every binary, so that one built without the feature `kwok` can say so.
    Kwok,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Flags of `joiner-agent run`.
#[derive(Debug, Clone, Args)]
pub struct Config {
    #[arg(long, env = "JOINER_CLUSTER_NAME")]
    pub cluster_name: String,
    /// `kwok` launches KWOK-managed Nodes instead of EC2 instances (benchmarks only; in a
    /// binary built with the cargo feature `kwok`).
    #[arg(long, env = "JOINER_CLOUD", value_enum, default_value = "ec2")]
    pub cloud: CloudKind,
    /// `karpenter` serves Karpenter's API instead of joiner's: `karpenter.sh/v1` NodePools
    /// and NodeClaims, `karpenter.sh/v1alpha1` NodeOverlays and `karpenter.k8s.aws/v1`
    /// EC2NodeClasses (KWOKNodeClasses with `--cloud kwok`), whose CRDs are Karpenter's.
    #[arg(long, env = "JOINER_API", value_enum, default_value = "joiner")]
    pub api: ApiFlavor,
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub region: String,
    /// The interruption queue; interruption handling is off without it.
    #[arg(long, env = "JOINER_QUEUE_URL")]
    pub queue_url: Option<String>,
    /// A kubeconfig file; without it the in-cluster configuration is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<String>,
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub aws_endpoint: Option<String>,
    #[arg(long, env = "JOINER_CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// Base64 PEM of the cluster CA.
    #[arg(long, env = "JOINER_CLUSTER_CA")]
    pub cluster_ca: Option<String>,
    /// The cluster's Service CIDR, which every AL2023 NodeConfig carries; read with
    /// `eks:DescribeCluster` when not given.
    #[arg(long, env = "JOINER_SERVICE_CIDR")]
    pub service_cidr: Option<String>,
    #[arg(long, env = "JOINER_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    #[arg(long, env = "JOINER_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// A batch of pending pods closes after this long without a new one.
    #[arg(long, env = "JOINER_BATCH_IDLE", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle: Duration,
    /// ...or this long after it opened, whichever comes first.
    #[arg(long, env = "JOINER_BATCH_MAX", default_value = "10s", value_parser = parse_duration)]
    pub batch_max: Duration,
    #[arg(long, env = "JOINER_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    #[arg(long, env = "JOINER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    #[arg(long, env = "JOINER_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    #[arg(long, env = "POD_NAMESPACE", default_value = "joiner")]
    pub namespace: String,
    /// This replica's name in the leader Lease; the hostname when unset.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// A launched NodeClaim whose Node has not registered after this long is deleted.
    #[arg(long, env = "JOINER_REGISTRATION_TTL", default_value = "15m", value_parser = parse_duration)]
    pub registration_ttl: Duration,
    /// After a registration timeout, the NodePool's next launch waits this long, doubling
    /// with each consecutive timeout up to `--registration-backoff-max`, until one of its
    /// claims registers.
    #[arg(long, env = "JOINER_REGISTRATION_BACKOFF", default_value = "1m", value_parser = parse_duration)]
    pub registration_backoff: Duration,
    #[arg(long, env = "JOINER_REGISTRATION_BACKOFF_MAX", default_value = "30m", value_parser = parse_duration)]
    pub registration_backoff_max: Duration,
    /// How long the Lease stays valid without renewal (hand-over time after a crash).
    #[arg(long, env = "JOINER_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How often the leader renews the Lease and followers retry.
    #[arg(long, env = "JOINER_LEASE_RETRY", default_value = "2s", value_parser = parse_duration)]
    pub lease_retry: Duration,
    /// How often garbage collection compares EC2 with the NodeClaims.
    #[arg(long, env = "JOINER_GC_INTERVAL", default_value = "2m", value_parser = parse_duration)]
    pub gc_interval: Duration,
    /// How old an unclaimed instance (or a claim's missing instance) must be before GC acts,
    /// so launches in progress are never mistaken for orphans.
    #[arg(long, env = "JOINER_GC_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub gc_grace: Duration,
    /// How often the nodes launched into capacity reservations are checked against EC2:
    /// a capacity block nearing its end is drained, a lapsed reservation's node relabelled
    /// on-demand.
    #[arg(long, env = "JOINER_RESERVATION_CHECK_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub reservation_check_interval: Duration,
    /// Where the public SSM parameters of the AMI aliases live. AWS publishes them under
    /// `/aws/service`; an emulator that refuses to store parameters there (moto) gets a copy
    /// under another root, e.g. `/joiner-sandbox/aws/service`.
    #[arg(
        long,
        env = "JOINER_PUBLIC_PARAMETER_ROOT",
        default_value = "/aws/service"
    )]
    pub public_parameter_root: String,
    /// The agent runs where AWS endpoints without a VPC endpoint cannot be reached: the
    /// Price List API is not asked and the embedded on-demand tables stand (as Karpenter's
    /// `isolatedVPC`). Without it the list is read at start and every 12 hours.
    #[arg(long, env = "JOINER_ISOLATED_VPC", default_value_t = false, action = clap::ArgAction::Set)]
    pub isolated_vpc: bool,
    /// Adopt Karpenter's nodes (a migration): the namespace Karpenter's controller runs in,
    /// whose leader Lease tells whether it is still running. Off when unset.
    #[arg(long, env = "JOINER_ADOPT_KARPENTER_NAMESPACE")]
    pub adopt_karpenter_namespace: Option<String>,
    /// Fault injection for the crash-recovery test: after the first successful launch, stop
    /// before recording it on the NodeClaim (the test then SIGKILLs the process).
    #[arg(long, env = "JOINER_TEST_HANG_AFTER_LAUNCH", hide = true, default_value_t = false, action = clap::ArgAction::Set)]
    pub test_hang_after_launch: bool,
    /// Credentials for every AWS client, instead of the SDK's default chain (IRSA, Pod
    /// Identity, environment). Not a flag: set by a program that embeds the agent (its
    /// tests run it in-process as the agent role's session, under enforced IAM).
    #[arg(skip)]
    pub aws_credentials: Option<aws_credential_types::provider::SharedCredentialsProvider>,
}

#[derive(clap::Parser)]
#[command(name = "joiner-agent-run")]
struct Standalone {
    #[command(flatten)]
    config: Config,
}

impl Config {
    /// Parses `run`'s flags from an argument list (the first item is the program name),
    /// with the same env fallbacks as the binary. For tests and embedding.
    pub fn from_args<I, T>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        Standalone::try_parse_from(args).map(|s| s.config)
    }

    /// The served API: its groups and the names written on its objects.
    pub fn served(&self) -> Served {
        let cloud = match self.cloud {
            CloudKind::Ec2 => ClassCloud::Ec2,
            CloudKind::Kwok => ClassCloud::Kwok,
        };
        Served::new(self.api, cloud)
    }

    /// The Lease holder name: `--identity`, else the hostname, else a random name.
    pub fn identity(&self) -> String {
        if let Some(i) = self.identity.as_ref().filter(|i| !i.is_empty()) {
            return i.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .map(|h| format!("{h}-{}", std::process::id()))
            .unwrap_or_else(|| format!("joiner-agent-{}", std::process::id()))
    }
}

/// Go-style durations (`500ms`, `1s`, `1m30s`, `15m`, `2h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {s:?}: missing unit (ms, s, m, h)"))?;
        let n: f64 = rest[..n_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..u_end] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {u:?} (use ms, s, m, h)"
                ))
            }
        };
        total += n * mult;
        rest = &rest[u_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert!(parse_duration("10").unwrap_err().contains("missing unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn public_parameter_root_is_aws_unless_moved() {
        let c = Config::from_args(["run", "--cluster-name", "c"]).unwrap();
        if std::env::var_os("JOINER_PUBLIC_PARAMETER_ROOT").is_none() {
            assert_eq!(c.public_parameter_root, "/aws/service");
        }
        let c = Config::from_args([
            "run",
            "--cluster-name",
            "c",
            "--public-parameter-root",
            "/joiner-sandbox/aws/service",
        ])
        .unwrap();
        assert_eq!(c.public_parameter_root, "/joiner-sandbox/aws/service");
    }
}

//! Provider time and memory for a `terraform plan` and a `terraform apply` of a NodeClass
//! and 10 NodePools, through Terraform 1.0.3 against kube-sim (reached through the provider
//! block's `kubernetes {}`) and the AWS emulator.
//!
//! `cargo bench -p joiner-e2e --bench ten_node_pools`
//!
//! Prints wall time of each command and the provider processes' CPU seconds and peak RSS,
//! with `nproc`. The provider is built in the bench's own profile (release, as
//! `cargo bench` builds), or is `JOINER_PROVIDER_BIN` when set.

use joiner_e2e::{measure_provider, take_usage, MotoServer, Workspace};

fn main() {
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options::default()).expect("kube-sim");
    let tf = Workspace::new(&moto);
    let mut hcl = format!(
        r#"provider "joiner" {{
  region = "us-east-1"
  kubernetes {{
    host                   = "{}"
    cluster_ca_certificate = <<-PEM
{}
PEM
    token = "{}"
  }}
}}
resource "joiner_node_class" "default" {{
  cluster_name = "bench"
  name         = "default"
  role         = "bench-node"
  ami_selector_term {{
    alias = "al2023@latest"
  }}
  subnet_selector_term {{
    tags = {{ "joiner.dev/discovery" = "bench" }}
  }}
  security_group_selector_term {{
    tags = {{ "joiner.dev/discovery" = "bench" }}
  }}
}}
"#,
        sim.url(),
        sim.ca_pem().trim_end(),
        sim.token()
    );
    let categories = ["c", "m", "r", "t", "i"];
    for i in 0..10 {
        hcl.push_str(&format!(
            r#"resource "joiner_node_pool" "p{i}" {{
  cluster_name = "bench"
  name         = "pool-{i}"
  node_class   = joiner_node_class.default.name
  weight       = {}
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["{}"]
  }}
  requirement {{
    key      = "karpenter.k8s.aws/instance-category"
    operator = "In"
    values   = ["{}"]
  }}
  disruption {{
    budget {{
      nodes = "10%"
    }}
  }}
}}
"#,
            i + 1,
            if i % 2 == 0 { "spot" } else { "on-demand" },
            categories[i % categories.len()]
        ));
    }
    tf.write_config(&hcl);
    let Some(dir) = measure_provider(&tf) else {
        eprintln!("/usr/bin/time is not installed: no provider figures");
        return;
    };
    // Warm the provider binary and Terraform's caches once, off the record.
    tf.terraform(&["validate", "-no-color"]);
    take_usage(&dir);

    for step in ["plan", "apply"] {
        let run = if step == "plan" {
            tf.terraform(&["plan", "-no-color", "-input=false", "-refresh=false"])
        } else {
            tf.apply()
        };
        assert!(run.success(), "{run}");
        let u = take_usage(&dir);
        println!(
            "terraform {step}, NodeClass + 10 NodePools: {:.2} s wall; provider {} process(es), \
             {:.2} s CPU, peak RSS {:.1} MiB (nproc={nproc})",
            run.elapsed.as_secs_f64(),
            u.processes,
            u.cpu_seconds,
            u.peak_rss_kib as f64 / 1024.0
        );
    }
    tf.destroy();
}

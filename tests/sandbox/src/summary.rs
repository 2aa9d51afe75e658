//! The figures a run produced, and the table printed at the end.

use std::fmt::Write;

#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub nproc: usize,
    pub boot_delay: String,
    pub notice_secs: u64,
    pub apply_secs: Option<f64>,
    pub agent_pods: Option<String>,
    pub coredns_pods: Option<String>,
    pub scale_out_secs: Option<f64>,
    pub nodes_after_scale_out: Option<usize>,
    pub peak_nodes: usize,
    pub spot_share_pods: Option<f64>,
    pub spot_share_nodes: Option<f64>,
    pub dollars_per_hour: Option<f64>,
    pub lower_bound: Option<f64>,
    pub storm_warned: Option<(usize, usize)>,
    pub storm_drained_in_notice: Option<usize>,
    pub storm_recovered_secs: Option<f64>,
    /// What pods waited for during the storm: capacity (kube-scheduler found no node) or
    /// the scheduler itself (recreated, not yet bound).
    pub storm_waits: Option<crate::pending::Figures>,
    pub pods_lost: usize,
    /// The StatefulSet with volumes: pods placed and replaced, and waits on a volume's zone.
    pub stateful: Option<crate::stateful::Figures>,
    /// Instances whose user data kube-sim's bridge refused, as nodeadm or Bottlerocket would
    /// (never Nodes).
    pub nodes_refused_by_nodeadm: Option<usize>,
    pub plan_secs: Option<f64>,
    pub plan_warnings: Option<usize>,
    pub scale_in_secs: Option<f64>,
    pub nodes_after_scale_in: Option<usize>,
    pub destroy_secs: Option<f64>,
    pub leftovers: Option<usize>,
    pub total_secs: f64,
    pub failed_step: Option<String>,
    pub iam: Option<IamFigures>,
    /// How the reviewing guide's plan excerpt differs from this run's plan, if it does.
    pub guide_drift: Option<String>,
}

/// What enforced IAM decided, from the local world's decisions.
#[derive(Debug, Default, Clone)]
pub struct IamFigures {
    /// The role the agent's ServiceAccount names.
    pub agent_role: String,
    /// Calls signed with the agent's role session, and how many were refused.
    pub agent_calls: usize,
    pub agent_refused: usize,
    /// AssumeRoleWithWebIdentity with the agent pod's token.
    pub web_identity_calls: usize,
    pub web_identity_refused: usize,
    /// Calls of the provider (`app/terraform-provider-joiner` of the IAM user `deployer`,
    /// which holds only the deployer policy).
    pub provider_calls: usize,
    pub provider_refused: usize,
    /// "action on resource" of refused agent calls (the first few).
    pub refused: Vec<String>,
    /// The distinct calls (IAM actions) the agent and the provider made.
    pub calls_made: Vec<String>,
    /// Those `docs/aws-fidelity.md` does not name.
    pub outside_ledger: Vec<String>,
}

impl IamFigures {
    /// The one-line account the sandbox prints and docs/performance.md quotes.
    pub fn line(&self) -> String {
        format!(
            "IAM enforced: agent (IRSA, {}) {} calls, {} refused, after {} AssumeRoleWithWebIdentity ({} refused); provider (deployer policy) {} calls, {} refused",
            self.agent_role,
            self.agent_calls,
            self.agent_refused,
            self.web_identity_calls,
            self.web_identity_refused,
            self.provider_calls,
            self.provider_refused
        )
    }

    /// Whether the agent got everything it asked for, on its own role's credentials.
    pub fn agent_ok(&self) -> bool {
        self.agent_calls > 0
            && self.agent_refused == 0
            && self.web_identity_calls > 0
            && self.web_identity_refused == 0
    }

    /// Whether Terraform's apply, plans and destroy got everything they asked for with only
    /// the deployer policy.
    pub fn provider_ok(&self) -> bool {
        self.provider_calls > 0 && self.provider_refused == 0
    }
}

/// One kind of wait as a table cell; "at least" when the pod watch had to list again.
fn waited(
    f: &Option<crate::pending::Figures>,
    which: impl Fn(&crate::pending::Figures) -> crate::pending::Waited,
) -> String {
    match f {
        Some(f) => {
            let w = which(f);
            format!(
                "{:.1} ({}){}",
                w.pod_secs,
                w.pods,
                if f.relisted {
                    ", at least: the watch relisted"
                } else {
                    ""
                }
            )
        }
        None => "—".into(),
    }
}

fn secs(v: Option<f64>) -> String {
    v.map(|s| format!("{s:.1} s")).unwrap_or_else(|| "—".into())
}

fn pct(v: Option<f64>) -> String {
    v.map(|s| format!("{:.0} %", 100.0 * s))
        .unwrap_or_else(|| "—".into())
}

impl Figures {
    /// A Markdown table, so it can be pasted into docs/performance.md as is.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String)> = vec![
            (
                "terraform apply (whole cluster, agent rolled out)".into(),
                secs(self.apply_secs),
            ),
            (
                "agent pods".into(),
                self.agent_pods.clone().unwrap_or_else(|| "—".into()),
            ),
            (
                "CoreDNS pods (EC2 instances launched for them)".into(),
                self.coredns_pods.clone().unwrap_or_else(|| "—".into()),
            ),
            (
                "scale-out 4 → 100: time to all Running".into(),
                secs(self.scale_out_secs),
            ),
            (
                "nodes after scale-out / peak".into(),
                format!(
                    "{} / {}",
                    self.nodes_after_scale_out
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "—".into()),
                    self.peak_nodes
                ),
            ),
            (
                "Spot share (pods / nodes)".into(),
                format!(
                    "{} / {}",
                    pct(self.spot_share_pods),
                    pct(self.spot_share_nodes)
                ),
            ),
            (
                "$/h after scale-out vs fractional lower bound".into(),
                match (self.dollars_per_hour, self.lower_bound) {
                    (Some(c), Some(lb)) if lb > 0.0 => {
                        format!("${c:.3} vs ${lb:.3} ({:.2} ×)", c / lb)
                    }
                    (Some(c), _) => format!("${c:.3} (no bound)"),
                    _ => "—".into(),
                },
            ),
            (
                format!(
                    "Spot storm: warned / Spot nodes, drained within the {} s notice",
                    self.notice_secs
                ),
                match (self.storm_warned, self.storm_drained_in_notice) {
                    (Some((w, n)), Some(d)) => format!("{w} / {n}, {d} drained"),
                    (Some((w, n)), None) => format!("{w} / {n}"),
                    _ => "—".into(),
                },
            ),
            (
                "storm: warning → every pod Running again".into(),
                secs(self.storm_recovered_secs),
            ),
            (
                "storm: pod-seconds waiting for capacity (pods), goal 0".into(),
                waited(&self.storm_waits, |f| f.capacity),
            ),
            (
                "storm: pod-seconds refused for their turn, room there in another order (pods)"
                    .into(),
                waited(&self.storm_waits, |f| f.turn),
            ),
            (
                "storm: pod-seconds waiting for the scheduler (pods)".into(),
                waited(&self.storm_waits, |f| f.scheduler),
            ),
            (
                "terraform plan of a NodePool change".into(),
                match self.plan_warnings {
                    Some(w) => format!("{} ({w} warning(s))", secs(self.plan_secs)),
                    None => secs(self.plan_secs),
                },
            ),
            (
                "scale-in 100 → 4: last surplus node gone".into(),
                secs(self.scale_in_secs),
            ),
            (
                "nodes after scale-in".into(),
                self.nodes_after_scale_in
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            ("terraform destroy".into(), secs(self.destroy_secs)),
            (
                "left after destroy (instances, queues, rules, roles, clusters)".into(),
                self.leftovers
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            ("pods lost (must be 0)".into(), self.pods_lost.to_string()),
            (
                "StatefulSet with EBS volumes (WaitForFirstConsumer): pods placed / replaced".into(),
                match &self.stateful {
                    Some(f) => format!(
                        "{} / {}{}",
                        f.placed,
                        f.replaced,
                        if f.relisted {
                            ", at least: the watch relisted"
                        } else {
                            ""
                        }
                    ),
                    None => "—".into(),
                },
            ),
            (
                "StatefulSet: verdicts naming a volume's zone while its pod waited for a node".into(),
                self.stateful
                    .as_ref()
                    .map(|f| f.zone_waits.len().to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            (
                "StatefulSet: pods stranded by their volume's zone (must be 0)".into(),
                self.stateful
                    .as_ref()
                    .map(|f| f.stranded.len().to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            (
                "nodes refused by the bridge: user data nodeadm or Bottlerocket refuses (must be 0)".into(),
                self.nodes_refused_by_nodeadm
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            (
                "IAM enforced: calls made / refused (must be 0)".into(),
                match &self.iam {
                    Some(i) => format!(
                        "agent (IRSA, {}) {} / {}; provider (deployer policy) {} / {}",
                        i.agent_role,
                        i.agent_calls,
                        i.agent_refused,
                        i.provider_calls,
                        i.provider_refused
                    ),
                    None => "—".into(),
                },
            ),
            ("whole run".into(), format!("{:.1} s", self.total_secs)),
        ];
        if let Some(step) = &self.failed_step {
            rows.push(("FAILED at".into(), step.clone()));
        }
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| sandbox (kube-sim boot delay {}, nproc={}) | |",
            self.boot_delay, self.nproc
        );
        let _ = writeln!(s, "|---|---|");
        for (k, v) in rows {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_missing_figures_as_dashes_and_the_ratio() {
        let f = Figures {
            nproc: 2,
            boot_delay: "2s".into(),
            notice_secs: 30,
            dollars_per_hour: Some(1.2),
            lower_bound: Some(1.0),
            failed_step: Some("storm".into()),
            ..Default::default()
        };
        let t = f.table();
        assert!(t.contains("$1.200 vs $1.000 (1.20 ×)"), "{t}");
        assert!(
            t.contains("| scale-out 4 → 100: time to all Running | — |"),
            "{t}"
        );
        assert!(t.contains("| FAILED at | storm |"), "{t}");
        assert!(t.contains("nproc=2"), "{t}");
        assert!(
            t.contains("| IAM enforced: calls made / refused (must be 0) | — |"),
            "{t}"
        );
    }

    #[test]
    fn iam_line_names_the_role_and_a_refusal_fails_the_agent() {
        let mut i = IamFigures {
            agent_role: "quickstart-agent".into(),
            agent_calls: 120,
            web_identity_calls: 1,
            provider_calls: 80,
            ..Default::default()
        };
        assert!(i.agent_ok());
        assert_eq!(
            i.line(),
            "IAM enforced: agent (IRSA, quickstart-agent) 120 calls, 0 refused, after 1 AssumeRoleWithWebIdentity (0 refused); provider (deployer policy) 80 calls, 0 refused"
        );
        assert!(i.provider_ok());
        i.provider_refused = 1;
        assert!(!i.provider_ok());
        i.provider_refused = 0;
        i.agent_refused = 1;
        assert!(!i.agent_ok());
        i.agent_refused = 0;
        i.web_identity_calls = 0;
        assert!(!i.agent_ok(), "an agent that never used its IRSA token");
    }
}

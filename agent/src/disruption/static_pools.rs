//! Static pools (`replicas`, Karpenter v1.8) scaled down: which of a pool's nodes go when it
//! has more than `replicas`. As Karpenter's static deprovisioning chooses: claims not
//! launched yet first, then empty nodes, then those whose pods cost least to move (fewest
//! pods; a do-not-disrupt pod makes a node the last choice). Disruption budgets do not
//! pace it (Karpenter: scaling bypasses them); PDBs still hold the drain.
//!
//! Adding nodes is provisioning's ([`crate::scheduler::headroom::extra_claims`]).

/// One claim of a static pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Member {
    pub nodeclaim: String,
    /// No instance or Node yet.
    pub launched: bool,
    /// Pods that would have to move.
    pub pods: usize,
    pub do_not_disrupt: bool,
    /// Already disrupted or deleting: not counted toward `replicas`.
    pub disrupting: bool,
}

/// The claims to remove so that the pool keeps `replicas`.
pub fn surplus(replicas: i64, members: &[Member]) -> Vec<String> {
    let mut live: Vec<&Member> = members.iter().filter(|m| !m.disrupting).collect();
    let excess = live.len().saturating_sub(replicas.max(0) as usize);
    live.sort_by_key(|m| (m.launched, m.do_not_disrupt, m.pods, m.nodeclaim.clone()));
    live.into_iter()
        .take(excess)
        .map(|m| m.nodeclaim.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, launched: bool, pods: usize) -> Member {
        Member {
            nodeclaim: name.into(),
            launched,
            pods,
            ..Default::default()
        }
    }

    #[test]
    fn unlaunched_then_empty_then_fewest_pods() {
        let mut dnd = m("dnd", true, 0);
        dnd.do_not_disrupt = true;
        let mut going = m("going", true, 0);
        going.disrupting = true;
        let members = vec![
            m("busy", true, 9),
            m("light", true, 2),
            dnd,
            m("empty", true, 0),
            m("coming", false, 0),
            going,
        ];
        assert_eq!(
            surplus(5, &members),
            Vec::<String>::new(),
            "5 live, 5 wanted"
        );
        assert_eq!(surplus(3, &members), vec!["coming", "empty"]);
        assert_eq!(
            surplus(0, &members),
            vec!["coming", "empty", "light", "busy", "dnd"]
        );
        assert_eq!(surplus(-1, &members).len(), 5);
    }
}

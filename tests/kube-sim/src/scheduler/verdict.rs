//! The `Unschedulable` message kube-scheduler writes (`FitError.Error()`, in
//! `pkg/scheduler/framework/types.go`): how many nodes each reason refused, each entry
//! `"<count> <reason>"`, the entries sorted as strings (so the count sorts first), then
//! preemption's answer, which is always that it would not help: kube-sim does not preempt.
//! After a PreFilter's refusal, kube-scheduler v1.37.2 writes that refusal followed by
//! ` not found` and no preemption answer (what its PostFilter step answers when the
//! plugins after the refusing one never ran): the differential test's observation.

use std::collections::BTreeMap;

/// The message for a pod every node refused, `reasons` counting each node's reasons.
pub fn filters_refused(nodes: usize, reasons: &BTreeMap<String, usize>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    with_preemption(nodes, &parts.join(", "))
}

/// The message for a pod a PreFilter refused: its reason alone, no node tried.
pub fn prefilter_refused(nodes: usize, why: &str) -> String {
    format!("0/{nodes} nodes are available: {why}. not found")
}

fn with_preemption(nodes: usize, reasons: &str) -> String {
    format!(
        "0/{nodes} nodes are available: {reasons}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_sort_as_strings_count_first() {
        let reasons = BTreeMap::from([
            ("Insufficient memory".to_string(), 2),
            ("node(s) had untolerated taint(s)".to_string(), 1),
            ("node(s) were unschedulable".to_string(), 10),
        ]);
        assert_eq!(
            filters_refused(13, &reasons),
            "0/13 nodes are available: 1 node(s) had untolerated taint(s), 10 node(s) were unschedulable, 2 Insufficient memory. preemption: 0/13 nodes are available: 13 Preemption is not helpful for scheduling."
        );
    }
}

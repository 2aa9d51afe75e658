//! The do-not-disrupt annotation (`karpenter.sh/do-not-disrupt`, `joiner.dev/do-not-disrupt`)
//! on a live Node or Pod, read now. The rule is the pure
//! [`crate::disruption::do_not_disrupt`]; termination, interruption and disruption each ask
//! it here, so that they agree on which nodes and pods it protects.

use crate::labels;

/// [`has_do_not_disrupt`] for a pod, whose annotation may be a duration after its start
/// (Karpenter v1.12): protection ends then.
pub fn pod_has_do_not_disrupt(pod: &crate::controllers::state::PodRecord) -> bool {
    let now = jiff::Timestamp::now().as_second();
    pod.annotations.iter().any(|(k, v)| {
        labels::is_do_not_disrupt(k)
            && crate::disruption::do_not_disrupt::holds(v, pod.started, now)
    })
}

/// Whether a Node's (or any object's) do-not-disrupt annotation protects it: any value but
/// `"false"` does.
pub fn has_do_not_disrupt(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    meta.annotations.as_ref().is_some_and(|a| {
        a.iter()
            .any(|(k, v)| labels::is_do_not_disrupt(k) && v != "false")
    })
}

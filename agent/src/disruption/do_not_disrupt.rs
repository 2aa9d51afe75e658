//! The do-not-disrupt annotation's rule: when it still protects a pod or node.
//!
//! A disruption rule, not a label fact: its value may be a duration, which the API's
//! duration parser reads.

use crate::api::duration::parse_seconds;

/// Whether a do-not-disrupt annotation's `value` blocks disruption at `now` (Unix seconds):
/// any value but `"false"` does, except a duration (`"5m"`, Karpenter v1.12, on pods), which
/// blocks only until that long after the pod started (`started`; a pod not yet started is
/// protected).
pub fn holds(value: &str, started: Option<i64>, now: i64) -> bool {
    if value == "false" {
        return false;
    }
    match parse_seconds(value) {
        Ok(secs) => {
            started.is_none_or(|s| now < s.saturating_add(secs.min(i64::MAX as u64) as i64))
        }
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_do_not_disrupt_duration_lapses_after_the_pods_start() {
        assert!(holds("true", Some(0), 1_000_000));
        assert!(!holds("false", None, 0));
        // 5m after a start at t=100: held at 399, lapsed at 400.
        assert!(holds("5m", Some(100), 399));
        assert!(!holds("5m", Some(100), 400));
        assert!(holds("5m", None, 1_000_000), "not started yet");
        assert!(holds("soon", Some(0), 1_000_000), "not a duration: held");
    }
}

//! Status conditions as `metav1.Condition`: the transition time moves only when the status
//! does, so `kubectl get -o yaml` shows when something became true, not when it was last
//! checked.

use crate::api::Condition;

pub const LAUNCHED: &str = "Launched";
pub const REGISTERED: &str = "Registered";
pub const INITIALIZED: &str = "Initialized";
pub const READY: &str = "Ready";
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

/// Sets a condition; returns whether anything changed.
pub fn set(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) -> bool {
    let status = if status { "True" } else { "False" };
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status && c.reason == reason && c.message == message {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(now_rfc3339());
        }
        c.status = status.to_string();
        c.reason = reason.to_string();
        c.message = message.to_string();
        return true;
    }
    conds.push(Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Some(now_rfc3339()),
        observed_generation: None,
    });
    true
}

pub fn is_true(conds: &[Condition], type_: &str) -> bool {
    conds.iter().any(|c| c.type_ == type_ && c.status == "True")
}

pub fn get<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// Seconds since the condition last changed, if it has a parseable time.
pub fn age_seconds(c: &Condition) -> Option<f64> {
    let t: jiff::Timestamp = c.last_transition_time.as_deref()?.parse().ok()?;
    Some(jiff::Timestamp::now().duration_since(t).as_secs_f64())
}

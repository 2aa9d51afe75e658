//! `joiner_interruption_rules`: the EventBridge rules that feed the interruption queue.

pub mod kinds;
pub mod naming;

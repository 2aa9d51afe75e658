//! The interruption queue's message parser: any SQS body (EventBridge's five event kinds,
//! other events, garbage) and what the agent decides to do about a parsed one.

use joiner_agent::interruption::{actions, messages};

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match messages::parse(body) {
        Ok(event) => {
            let kind = event.kind();
            let _ = kind.as_str();
            let _ = kind.event_pattern();
            let _ = event.instance_ids();
            let _ = actions::action_for(&event);
        }
        Err(e) => {
            let _ = e.reason();
            let _ = e.to_string();
        }
    }
    // The rebalance rate limit an annotation may carry (`3/10m`).
    let _ = actions::parse_limit(body);
}

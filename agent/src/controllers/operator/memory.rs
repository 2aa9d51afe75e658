//! Giving freed heap back to the system.
//!
//! A scale-out or a disruption pass builds large transient state (a round's input and plan,
//! a pass's simulated world, watch pages being decoded) and frees it a moment later. glibc's
//! allocator keeps most of what was freed mapped for reuse, so the agent's resident size
//! after a burst stays at the burst's peak until the next one. The agent is sized and
//! alerted on by that figure, so the heap is trimmed on a short period: a walk over the
//! allocator's free lists (its cost was not measured apart; `agent_e2e`'s steady CPU moved
//! within the noise of its windows) in exchange for a resident size that follows the heap
//! in use.

use std::time::Duration;

/// Between trims: short enough that a burst's memory is back within a scrape or two.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Trims every [`PERIOD`] until the task is dropped.
pub async fn run() {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        trim();
    }
}

/// Returns the free memory at the top of the heap and of every arena to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() {
    // SAFETY: malloc_trim only reads and adjusts the allocator's own bookkeeping, under its
    // locks; it is safe to call from any thread at any time, and 0 keeps no padding.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators return memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}

/// Keeps the whole heap in one glibc arena. glibc gives each thread that allocates an arena
/// of its own, and what one arena frees the others cannot reuse, so the agent's few threads
/// (the runtime's two workers and the main thread) held about 3 MB more at rest than one
/// arena does (`agent_e2e`, 1,100 pods: 21.3 against 18.0 MB anonymous after the
/// scale-out). Two workers contend little for one arena's lock. Call before any thread is
/// started.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_arena() {
    // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_arena() {}

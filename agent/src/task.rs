//! Helper tasks that live exactly as long as their owner.
//!
//! Below both the controllers and the clouds, which spawn such helpers (a watch, a timer):
//! when the owner goes (leadership lost, a test's cloud dropped) its helpers must go too.

/// Aborts a spawned helper task when the loop that owns it ends (leadership lost).
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

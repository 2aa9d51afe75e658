//! `/metrics` on the metrics address and `/healthz`, `/readyz` on the health address.
//! Followers serve them too: a follower is healthy and ready (its caches are warm), so a
//! rolling update never waits on leadership.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use super::metrics::Metrics;

/// Binds both listeners (so a port clash fails start-up with a clear error) and serves
/// until `shutdown` turns true. Returns the bound addresses (useful with port 0).
pub async fn serve(
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let m_listener = tokio::net::TcpListener::bind(metrics_addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the metrics address {metrics_addr}: {e}"))?;
    let h_listener = tokio::net::TcpListener::bind(health_addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the health address {health_addr}: {e}"))?;
    let m_addr = m_listener.local_addr()?;
    let h_addr = h_listener.local_addr()?;
    let metrics_app = Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(metrics);
    let health_app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(ready);
    for (listener, app) in [(m_listener, metrics_app), (h_listener, health_app)] {
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let graceful = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(graceful)
                .await
            {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
    }
    Ok((m_addr, h_addr))
}

async fn render_metrics(
    State(m): State<Arc<Metrics>>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (
        StatusCode::OK,
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

async fn readyz(State(ready): State<watch::Receiver<bool>>) -> (StatusCode, &'static str) {
    if *ready.borrow() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

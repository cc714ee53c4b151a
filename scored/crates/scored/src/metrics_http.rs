//! The `/metrics` HTTP endpoint both roles serve.

use anyhow::Context;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};

/// Something that refreshes gauges right before a scrape.
pub type Refresh = Arc<dyn Fn() + Send + Sync>;

pub async fn serve(
    addr: &str,
    registry: Arc<Mutex<Registry>>,
    refresh: Option<Refresh>,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for /metrics on {addr}"))?;
    let local = listener.local_addr()?.to_string();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            let refresh = refresh.clone();
            async move {
                if let Some(r) = &refresh {
                    r();
                }
                let mut body = String::new();
                let reg = registry.lock().expect("metrics registry lock");
                let status = match encode(&mut body, &reg) {
                    Ok(()) => axum::http::StatusCode::OK,
                    Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                };
                (
                    status,
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    body,
                )
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("metrics server stopped: {e}");
        }
    });
    Ok(local)
}

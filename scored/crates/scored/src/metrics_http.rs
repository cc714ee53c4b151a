//! The `/metrics` HTTP endpoint both roles serve.

use anyhow::Context;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex, PoisonError};

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
                // Only read here (metrics register before serving), so a
                // panic elsewhere cannot have left it half-changed.
                let reg = registry.lock().unwrap_or_else(PoisonError::into_inner);
                let status = match encode(&mut body, &reg) {
                    Ok(()) => axum::http::StatusCode::OK,
                    Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                };
                (
                    status,
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    to_prometheus_text(&body),
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

/// The classic Prometheus text format (0.0.4) from OpenMetrics text, which
/// is what the encoder writes: counters are described under their sample
/// name (`x_total`), and there is no `# EOF`.  Prometheus 2 and promtool
/// read this format everywhere; OpenMetrics is only negotiated.
fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let described = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(described.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_prometheus_text;

    #[test]
    fn counters_are_described_by_their_sample_name_and_eof_goes() {
        let om = "# HELP a_jobs Jobs.\n# TYPE a_jobs counter\na_jobs_total 3\n\
                  # HELP b Nodes.\n# TYPE b gauge\nb 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_jobs_total Jobs.\n# TYPE a_jobs_total counter\na_jobs_total 3\n\
             # HELP b Nodes.\n# TYPE b gauge\nb 1\n"
        );
    }
}

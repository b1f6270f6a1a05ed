//! The mock model's own time for a request the engine sent, for the
//! benchmark's "overhead net of the model": the recorded body is
//! encoded before the clock starts and POSTed as it is, and the clock stops
//! when the response stream has ended. What remains of a turn after this is
//! the engine's and the runner's own work, building the request included.

use std::time::{Duration, Instant};

use crate::llm::ClientOptions;

/// POSTs recorded request bodies to a mock model's `/chat/completions`.
pub struct ModelReplay {
    http: reqwest::Client,
    url: String,
}

impl ModelReplay {
    /// A client for the mock at `base_url` (as [`super::MockLlm::base_url`]).
    pub fn new(base_url: &str) -> Result<Self, String> {
        let http =
            crate::llm::http::http_client(&ClientOptions::default()).map_err(|e| e.to_string())?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
        })
    }

    /// One request's time: `body` sent → the response read to its end.
    /// Queue the mock's reply first.
    pub async fn time(&self, body: &serde_json::Value) -> Result<Duration, String> {
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-key")
            .body(bytes)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.bytes().await.map_err(|e| e.to_string())?;
        let took = started.elapsed();
        if !status.is_success() {
            return Err(format!(
                "the mock answered {status}: {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(took)
    }
}

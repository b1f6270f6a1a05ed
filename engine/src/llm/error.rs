//! Model call failures, how an HTTP error response becomes one, which of them
//! are worth retrying, the gRPC status each maps to, and how a transport
//! error is put in words.

use std::time::{Duration, SystemTime};

use thiserror::Error;

/// Longest server error text kept in an error message.
const MAX_ERROR_TEXT: usize = 2_000;

/// Why a model call failed. Messages never contain the API key.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LlmError {
    /// HTTP 401: the API key is missing or wrong.
    #[error("model provider rejected the credentials (401): {0}")]
    Unauthorized(String),
    /// HTTP 429 after the retries ran out (or a Retry-After too long to wait).
    #[error("model provider rate limit (429){}: {message}", retry_after_text(.retry_after))]
    RateLimited {
        /// How long the provider asked to wait, if it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// HTTP 5xx after the retries ran out, or an error event inside the stream.
    #[error("model provider server error ({status}): {message}")]
    Server {
        /// The HTTP status (or 0 for an error event in the stream).
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// Any other 4xx: the request itself is wrong (unknown model, bad schema, ...).
    #[error("model provider refused the request ({status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// No answer (headers, or the next stream chunk) within the configured time.
    #[error("model request timed out")]
    Timeout,
    /// The caller cancelled the request.
    #[error("model request cancelled")]
    Cancelled,
    /// The server answered something that is not a valid completion stream.
    #[error("model provider protocol error: {0}")]
    Protocol(String),
    /// Connection-level failure (DNS, connect, TLS, reset).
    #[error("model provider unreachable: {0}")]
    Transport(String),
    /// The client configuration is unusable (bad base URL, bad key characters).
    #[error("model client configuration: {0}")]
    Config(String),
}

fn retry_after_text(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(", retry after {}s", d.as_secs_f64()),
        None => String::new(),
    }
}

impl LlmError {
    /// Whether another attempt may succeed: 408/409/429, 5xx and transport
    /// failures before any response. Timeouts are not retried (the caller's
    /// time budget is already spent).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::RateLimited { .. } | LlmError::Server { .. } | LlmError::Transport(_) => true,
            LlmError::BadRequest { status, .. } => matches!(status, 408 | 409),
            _ => false,
        }
    }

    /// The error an HTTP error response stands for. `body` is the response
    /// text; an OpenAI-style `{"error": {"message": ...}}` is unwrapped.
    pub fn from_status(status: u16, retry_after: Option<Duration>, body: &str) -> LlmError {
        let message = error_message(body, status);
        match status {
            401 => LlmError::Unauthorized(message),
            429 => LlmError::RateLimited {
                retry_after,
                message,
            },
            500..=599 => LlmError::Server { status, message },
            _ => LlmError::BadRequest { status, message },
        }
    }
}

/// The readable message of an error body: `error.message` of OpenAI-style
/// bodies, `error` when it is a string, else the (shortened) text itself.
pub(crate) fn error_message(body: &str, status: u16) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let err = v.get("error")?;
        err.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| err.as_str())
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    if text.is_empty() {
        return format!("HTTP {status} with an empty body");
    }
    shorten(text)
}

fn shorten(mut text: String) -> String {
    if text.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Parses the delay a 429/503 asks for: `retry-after-ms` (milliseconds, sent
/// by OpenAI), else `retry-after` as seconds (integer or decimal) or an HTTP date.
pub(crate) fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

impl From<LlmError> for tonic::Status {
    fn from(err: LlmError) -> Self {
        let text = err.to_string();
        match err {
            LlmError::Unauthorized(_) => tonic::Status::unauthenticated(text),
            LlmError::RateLimited { .. } => tonic::Status::resource_exhausted(text),
            LlmError::Server { .. } | LlmError::Transport(_) => tonic::Status::unavailable(text),
            LlmError::BadRequest { status, .. } => match status {
                403 => tonic::Status::permission_denied(text),
                404 => tonic::Status::not_found(text),
                408 => tonic::Status::deadline_exceeded(text),
                409 => tonic::Status::aborted(text),
                400 | 413 | 422 => tonic::Status::invalid_argument(text),
                _ => tonic::Status::failed_precondition(text),
            },
            LlmError::Timeout => tonic::Status::deadline_exceeded(text),
            LlmError::Cancelled => tonic::Status::cancelled(text),
            LlmError::Protocol(_) => tonic::Status::internal(text),
            LlmError::Config(_) => tonic::Status::failed_precondition(text),
        }
    }
}

/// An error and its sources on one line (reqwest's own message is terse).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_error_body_is_unwrapped() {
        let err = LlmError::from_status(
            401,
            None,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
        );
        assert_eq!(
            err,
            LlmError::Unauthorized("Incorrect API key provided".into())
        );
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn statuses_classify() {
        assert!(LlmError::from_status(503, None, "busy").is_retryable());
        assert!(LlmError::from_status(429, None, "slow down").is_retryable());
        assert!(!LlmError::from_status(400, None, "bad").is_retryable());
        assert!(!LlmError::from_status(401, None, "no").is_retryable());
        assert_eq!(
            tonic::Status::from(LlmError::from_status(404, None, "no model")).code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            tonic::Status::from(LlmError::from_status(422, None, "x")).code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            tonic::Status::from(LlmError::from_status(502, None, "x")).code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            tonic::Status::from(LlmError::from_status(429, None, "x")).code(),
            tonic::Code::ResourceExhausted
        );
    }

    #[test]
    fn empty_and_long_bodies() {
        assert_eq!(error_message("", 502), "HTTP 502 with an empty body");
        let long = "é".repeat(3_000);
        let msg = error_message(&long, 500);
        assert!(msg.len() <= MAX_ERROR_TEXT + '…'.len_utf8());
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            parse_retry_after(None, Some("2"), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(None, Some("0.5"), now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(Some("250"), Some("9"), now),
            Some(Duration::from_millis(250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(None, Some(&date), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_retry_after(None, Some("soon"), now), None);
        assert_eq!(parse_retry_after(None, Some("-3"), now), None);
        assert_eq!(parse_retry_after(None, None, now), None);
    }
}

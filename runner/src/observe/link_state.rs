//! What the link is doing, published by [`crate::link`] and read by the
//! health endpoints, `/status` and the metrics. A leaf of its own so that
//! those readers need nothing else of the link.

/// What the link is doing (for health checks, metrics and status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Registering (or waiting to retry).
    Connecting,
    /// `RegisterRunner` succeeded; the ControlChannel is being opened.
    Registered,
    /// Registered and the ControlChannel is open.
    Connected,
    /// Stopped for good (shutdown or refusal).
    Closed,
}

impl LinkState {
    /// The state's name in `/status` and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Registered => "registered",
            LinkState::Connected => "connected",
            LinkState::Closed => "closed",
        }
    }
}

/// What a person needs to know about the link besides its state: where it
/// dials, what went wrong last and when, and when the next attempt is due.
/// Written by the link, read by `/status` (and so `agent-runner status`).
#[derive(Debug, Default)]
pub struct LinkReport {
    inner: std::sync::Mutex<LinkProblem>,
}

/// A snapshot of [`LinkReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkProblem {
    /// The control plane's URL (origin and path prefix; never a secret).
    pub url: String,
    /// The last failure, said for a person (see `link::problem`).
    pub last_error: Option<String>,
    /// When it happened.
    pub last_error_at: Option<std::time::SystemTime>,
    /// When the next attempt is due, while waiting to retry.
    pub next_attempt_at: Option<std::time::SystemTime>,
}

impl LinkReport {
    /// A report for a link dialling `url`.
    pub fn new(url: String) -> Self {
        Self {
            inner: std::sync::Mutex::new(LinkProblem {
                url,
                ..LinkProblem::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkProblem> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An attempt failed with `error`.
    pub fn failed(&self, error: String) {
        let mut p = self.lock();
        p.last_error = Some(error);
        p.last_error_at = Some(std::time::SystemTime::now());
    }

    /// The next attempt is due in `delay`.
    pub fn retry_in(&self, delay: std::time::Duration) {
        self.lock().next_attempt_at = Some(std::time::SystemTime::now() + delay);
    }

    /// An attempt is under way (no retry is waiting).
    pub fn attempting(&self) {
        self.lock().next_attempt_at = None;
    }

    /// What it says now.
    pub fn snapshot(&self) -> LinkProblem {
        self.lock().clone()
    }
}

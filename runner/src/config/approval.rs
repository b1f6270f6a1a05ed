//! The operator's approval settings' values: what the runner answers an
//! agent's approval request itself when no control plane decides
//! (`--approval-policy`), and how long a request waits for one
//! (`--approval-timeout`'s default).

use std::time::Duration;

/// How long a request waits for a decision unless `--approval-timeout`
/// says otherwise.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// What the runner answers itself when no control plane decides
/// (`--approval-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalPolicy {
    /// Every request is denied (questions get no answer).
    #[default]
    Deny,
    /// Every request is approved (questions get no answer).
    Approve,
}

impl ApprovalPolicy {
    /// The policy named `name` (`deny` or `approve`).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "deny" => Ok(Self::Deny),
            "approve" => Ok(Self::Approve),
            other => Err(format!("`{other}` is not a policy: deny or approve")),
        }
    }
}

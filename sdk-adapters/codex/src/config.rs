//! How the runner configures the `codex` adapter.

use std::path::PathBuf;
use std::time::Duration;

/// Approval policies `thread/start` accepts (`AskForApproval`, 0.169.0).
pub const APPROVAL_POLICIES: &[&str] = &["untrusted", "on-request", "never"];
/// Sandbox modes `thread/start` accepts (`SandboxMode`, 0.169.0).
pub const SANDBOX_MODES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];

/// Settings of the `codex` adapter.
#[derive(Debug, Clone)]
pub struct CodexConfig {
    /// The `codex` executable (a name looked up on PATH, or a path).
    pub bin: PathBuf,
    /// `approvalPolicy` for every thread; `None` keeps codex's own config.
    /// With `never` codex does not ask; any approval request that still
    /// arrives is accepted. With anything else approvals are declined (the
    /// runner has nobody to ask).
    pub approval_policy: Option<String>,
    /// `sandbox` for every thread; `None` keeps codex's own config.
    pub sandbox: Option<String>,
    /// Extra environment for every app-server process (`CODEX_HOME`…).
    pub env: Vec<(String, String)>,
    /// Longest wait for the answer to one request (`thread/start` included).
    pub request_timeout: Duration,
    /// Longest wait for each request made by `describe()`.
    pub describe_timeout: Duration,
    /// How long a `describe()` result is reused.
    pub describe_ttl: Duration,
    /// After `turn/interrupt`, how long the turn may take to end before the
    /// app-server is killed (and resumed for the next turn).
    pub interrupt_grace: Duration,
    /// At most one RUNNING update per item per this interval while deltas
    /// stream in.
    pub coalesce: Duration,
    /// Where `describe()` starts its `codex app-server` probe (it belongs
    /// to no thread): a sandbox the runner made for SDK probes. The default
    /// refuses, so `describe()` reports ERROR until the runner sets one.
    pub probe_sandbox: sdk_adapter::Sandbox,
}

impl Default for CodexConfig {
    fn default() -> Self {
        Self {
            bin: PathBuf::from("codex"),
            approval_policy: None,
            sandbox: None,
            env: Vec::new(),
            request_timeout: Duration::from_secs(60),
            describe_timeout: Duration::from_secs(10),
            describe_ttl: Duration::from_secs(30),
            interrupt_grace: Duration::from_secs(15),
            coalesce: Duration::from_millis(100),
            probe_sandbox: sdk_adapter::Sandbox::refused(
                "no sandbox was given for the describe probe (CodexConfig::probe_sandbox)",
            ),
        }
    }
}

impl CodexConfig {
    /// Whether approval requests are answered "accept".
    pub(crate) fn accepts_approvals(&self) -> bool {
        self.approval_policy.as_deref() == Some("never")
    }
}

/// Check an approval policy value (for the runner's config).
pub fn check_approval_policy(value: &str) -> Result<(), String> {
    check(value, APPROVAL_POLICIES)
}

/// Check a sandbox mode value (for the runner's config).
pub fn check_sandbox(value: &str) -> Result<(), String> {
    check(value, SANDBOX_MODES)
}

fn check(value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(format!("{value:?} is not one of: {}", allowed.join(", ")))
    }
}

//! The thread's sandbox as adapters receive it: every process an adapter
//! starts for a thread goes through the thread's
//! [`agent_launcher::ThreadSandbox`] (issue 17), or is not started at all.
//!
//! The runner builds one sandbox per thread and puts it on the
//! [`crate::ThreadSpec`]. When it cannot (mode `enforce` on a host without
//! Landlock, a policy error), the spec carries the reason instead, and every
//! spawn site refuses with it: an adapter never falls back to an unconfined
//! `Command::spawn`.

use std::sync::Arc;

use agent_launcher::ThreadSandbox;

use crate::SdkError;

/// A thread's sandbox, or why the thread has none (its processes are then
/// refused).
#[derive(Clone, Debug)]
pub struct Sandbox(Result<Arc<ThreadSandbox>, Arc<str>>);

impl Sandbox {
    /// The thread's sandbox.
    pub fn ready(sandbox: Arc<ThreadSandbox>) -> Self {
        Self(Ok(sandbox))
    }

    /// No sandbox: every launch is refused with `why`.
    pub fn refused(why: impl Into<String>) -> Self {
        Self(Err(Arc::from(why.into())))
    }

    /// The sandbox to launch through, or the refusal as an
    /// [`SdkError::Unavailable`] (its text reaches the control plane).
    pub fn get(&self) -> Result<&Arc<ThreadSandbox>, SdkError> {
        self.0
            .as_ref()
            .map_err(|why| SdkError::Unavailable(format!("agent sandbox: {why}")))
    }

    /// Why launches are refused, when they are.
    pub fn refusal(&self) -> Option<&str> {
        self.0.as_ref().err().map(|why| &**why)
    }
}

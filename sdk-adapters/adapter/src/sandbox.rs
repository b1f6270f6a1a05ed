//! The thread's sandbox as adapters receive it: every process an adapter
//! starts for a thread goes through the thread's
//! [`agent_launcher::ThreadSandbox`], or is not started at all.
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
/// refused); or one made on first use ([`Sandbox::later`]).
#[derive(Clone, Debug)]
pub struct Sandbox(Inner);

#[derive(Clone)]
enum Inner {
    Made(Made),
    Later(Arc<Later>),
}

type Made = Result<Arc<ThreadSandbox>, Arc<str>>;

/// A sandbox made by `make` when first asked for, once.
struct Later {
    make: Box<dyn Fn() -> Sandbox + Send + Sync>,
    made: std::sync::OnceLock<Made>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inner::Made(made) => made.fmt(f),
            Inner::Later(later) => match later.made.get() {
                Some(made) => made.fmt(f),
                None => f.write_str("Sandbox(not made yet)"),
            },
        }
    }
}

impl Sandbox {
    /// The thread's sandbox.
    pub fn ready(sandbox: Arc<ThreadSandbox>) -> Self {
        Self(Inner::Made(Ok(sandbox)))
    }

    /// No sandbox: every launch is refused with `why`.
    pub fn refused(why: impl Into<String>) -> Self {
        Self(Inner::Made(Err(Arc::from(why.into()))))
    }

    /// A sandbox `make` builds the first time it is asked for (from any
    /// clone), so that building it — which may wait for the runner's
    /// start-up sweep — is off the path of whoever hands it out. The
    /// first [`Sandbox::get`] blocks while `make` runs.
    pub fn later(make: impl Fn() -> Sandbox + Send + Sync + 'static) -> Self {
        Self(Inner::Later(Arc::new(Later {
            make: Box::new(make),
            made: std::sync::OnceLock::new(),
        })))
    }

    fn made(&self) -> &Made {
        match &self.0 {
            Inner::Made(made) => made,
            Inner::Later(later) => later.made.get_or_init(|| match (later.make)().0 {
                Inner::Made(made) => made,
                Inner::Later(_) => Err(Arc::from("a sandbox made later made another later")),
            }),
        }
    }

    /// The sandbox to launch through, or the refusal as an
    /// [`SdkError::Unavailable`] (its text reaches the control plane).
    pub fn get(&self) -> Result<&Arc<ThreadSandbox>, SdkError> {
        self.made()
            .as_ref()
            .map_err(|why| SdkError::Unavailable(format!("agent sandbox: {why}")))
    }

    /// Why launches are refused, when they are.
    pub fn refusal(&self) -> Option<&str> {
        self.made().as_ref().err().map(|why| &**why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_later_sandbox_is_made_once_on_first_use() {
        let made = Arc::new(AtomicUsize::new(0));
        let count = made.clone();
        let sandbox = Sandbox::later(move || {
            count.fetch_add(1, Ordering::SeqCst);
            Sandbox::refused("no launcher here")
        });
        let clone = sandbox.clone();
        assert_eq!(made.load(Ordering::SeqCst), 0, "not made before use");
        assert_eq!(clone.refusal(), Some("no launcher here"));
        let err = sandbox.get().unwrap_err().to_string();
        assert!(err.contains("no launcher here"), "{err}");
        assert_eq!(made.load(Ordering::SeqCst), 1, "made once for every clone");
    }
}

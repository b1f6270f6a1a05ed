//! Bearer-token check on every RPC, as a real control plane would do it, and
//! the answer to "which runner is this?": a control plane knows a runner by
//! its credentials, so the secret a call carries names the runner it speaks
//! for. A tonic interceptor, so unary calls and the `ControlChannel` stream
//! are checked alike, before the service sees them; it leaves the runner's
//! [`RunnerIndex`] in the request's extensions for the service.

use std::collections::BTreeSet;
use std::sync::Arc;

use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::config::{DEFAULT_RUNNER, RunnerIdentity};

/// Which of the mock's runners a call speaks for (a position in
/// [`Identities`]), left in the request's extensions by [`RunnerAuth`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunnerIndex(pub(crate) usize);

/// The runners a mock tells apart: each one's name and secret. An open mock
/// (no secret configured) has one runner, [`DEFAULT_RUNNER`], without a
/// secret: every call speaks for it.
pub(crate) struct Identities {
    names: Vec<String>,
    secrets: Vec<Option<String>>,
}

impl Identities {
    /// The runners of a mock configured with `bearer` (named
    /// [`DEFAULT_RUNNER`]) and `runners`. Names and secrets must be unique
    /// and non-empty.
    pub(crate) fn new(
        bearer: Option<String>,
        runners: Vec<RunnerIdentity>,
    ) -> Result<Self, String> {
        let mut names = Vec::new();
        let mut secrets = Vec::new();
        if bearer.is_some() || runners.is_empty() {
            names.push(DEFAULT_RUNNER.to_owned());
            secrets.push(bearer);
        }
        for runner in runners {
            names.push(runner.name);
            secrets.push(Some(runner.secret));
        }
        if names.iter().any(String::is_empty) {
            return Err("a runner's name is empty".to_owned());
        }
        if secrets.iter().flatten().any(|s| s.trim().is_empty()) {
            return Err("a runner's secret is empty".to_owned());
        }
        let unique_names: BTreeSet<&String> = names.iter().collect();
        if unique_names.len() != names.len() {
            return Err(format!("runner names repeat: {names:?}"));
        }
        let given: Vec<&str> = secrets.iter().flatten().map(|s| s.trim()).collect();
        if given.iter().collect::<BTreeSet<_>>().len() != given.len() {
            return Err("two runners share a secret: each secret is one runner".to_owned());
        }
        Ok(Identities { names, secrets })
    }

    /// Every runner's name, in index order.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether every call is accepted (no secret configured).
    fn open(&self) -> bool {
        self.secrets.iter().all(Option::is_none)
    }

    /// The runner whose secret `token` is.
    fn find(&self, token: &str) -> Option<RunnerIndex> {
        self.secrets
            .iter()
            .position(|s| s.as_deref().map(str::trim) == Some(token))
            .map(RunnerIndex)
    }
}

/// Accepts every call when no secret is configured; otherwise only calls
/// carrying `authorization: Bearer <secret>` (scheme case-insensitive) with
/// one of the runners' secrets. Either way, tags the call with its runner.
#[derive(Clone)]
pub(crate) struct RunnerAuth {
    identities: Arc<Identities>,
}

impl RunnerAuth {
    pub(crate) fn new(identities: Arc<Identities>) -> Self {
        RunnerAuth { identities }
    }

    /// The runner `request` speaks for, or why it is refused.
    fn identify<T>(&self, request: &Request<T>) -> Result<RunnerIndex, Status> {
        if self.identities.open() {
            return Ok(RunnerIndex(0));
        }
        let Some(value) = request.metadata().get("authorization") else {
            return Err(Status::unauthenticated("missing authorization metadata"));
        };
        value
            .to_str()
            .ok()
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .and_then(|(_, token)| self.identities.find(token.trim()))
            .ok_or_else(|| Status::unauthenticated("invalid bearer token"))
    }
}

impl Interceptor for RunnerAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let runner = self.identify(&request)?;
        request.extensions_mut().insert(runner);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(bearer: Option<&str>, runners: &[(&str, &str)]) -> RunnerAuth {
        let runners = runners
            .iter()
            .map(|(name, secret)| RunnerIdentity {
                name: (*name).to_owned(),
                secret: (*secret).to_owned(),
            })
            .collect();
        RunnerAuth::new(Arc::new(
            Identities::new(bearer.map(str::to_owned), runners).expect("valid identities"),
        ))
    }

    fn call(auth: &RunnerAuth, header: Option<&str>) -> Result<usize, tonic::Code> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request
                .metadata_mut()
                .insert("authorization", h.parse().expect("ascii header"));
        }
        auth.clone()
            .call(request)
            .map(|r| r.extensions().get::<RunnerIndex>().expect("tagged").0)
            .map_err(|s| s.code())
    }

    #[test]
    fn no_secret_accepts_everything() {
        let open = auth(None, &[]);
        assert_eq!(call(&open, None), Ok(0));
        assert_eq!(call(&open, Some("Bearer x")), Ok(0));
    }

    #[test]
    fn secret_requires_matching_bearer() {
        let unauth = Err(tonic::Code::Unauthenticated);
        let one = auth(Some("s3"), &[]);
        assert_eq!(call(&one, Some("Bearer s3")), Ok(0));
        assert_eq!(call(&one, Some("bearer s3")), Ok(0));
        assert_eq!(call(&one, None), unauth);
        assert_eq!(call(&one, Some("Bearer nope")), unauth);
        assert_eq!(call(&one, Some("Basic s3")), unauth);
        assert_eq!(call(&one, Some("s3")), unauth);
    }

    #[test]
    fn each_secret_names_its_runner() {
        let unauth = Err(tonic::Code::Unauthenticated);
        let two = auth(None, &[("r0", "s0"), ("r1", "s1")]);
        assert_eq!(call(&two, Some("Bearer s0")), Ok(0));
        assert_eq!(call(&two, Some("Bearer s1")), Ok(1));
        assert_eq!(
            call(&two, None),
            unauth,
            "no open door beside the named ones"
        );
        assert_eq!(call(&two, Some("Bearer s2")), unauth);
        let mixed = auth(Some("d"), &[("r0", "s0")]);
        assert_eq!(call(&mixed, Some("Bearer d")), Ok(0));
        assert_eq!(call(&mixed, Some("Bearer s0")), Ok(1));
        let names = Identities::new(Some("d".into()), vec![]).expect("valid");
        assert_eq!(names.names(), [DEFAULT_RUNNER]);
    }

    #[test]
    fn identities_must_be_unique_and_non_empty() {
        let r = |name: &str, secret: &str| RunnerIdentity {
            name: name.into(),
            secret: secret.into(),
        };
        assert!(Identities::new(None, vec![r("a", "s"), r("b", "s")]).is_err());
        assert!(Identities::new(None, vec![r("a", "s"), r("a", "t")]).is_err());
        assert!(Identities::new(None, vec![r("", "s")]).is_err());
        assert!(Identities::new(None, vec![r("a", " ")]).is_err());
        assert!(Identities::new(Some("s".into()), vec![r("a", "s")]).is_err());
        assert!(Identities::new(None, vec![r(DEFAULT_RUNNER, "s")]).is_ok());
        assert!(Identities::new(Some("t".into()), vec![r(DEFAULT_RUNNER, "s")]).is_err());
    }
}

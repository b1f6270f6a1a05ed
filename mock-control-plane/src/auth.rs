//! Bearer-token check on every RPC, as a real control plane would do it: a
//! tonic interceptor, so unary calls and the `ControlChannel` stream are
//! checked alike, before the service sees them.

use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Accepts every call when no secret is configured; otherwise only calls
/// carrying `authorization: Bearer <secret>` (scheme case-insensitive).
#[derive(Clone, Debug)]
pub(crate) struct BearerAuth {
    secret: Option<String>,
}

impl BearerAuth {
    pub(crate) fn new(secret: Option<String>) -> Self {
        BearerAuth { secret }
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(secret) = &self.secret else {
            return Ok(request);
        };
        let Some(value) = request.metadata().get("authorization") else {
            return Err(Status::unauthenticated("missing authorization metadata"));
        };
        let accepted = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().split_once(' '))
            .is_some_and(|(scheme, token)| {
                scheme.eq_ignore_ascii_case("bearer") && token.trim() == secret
            });
        if accepted {
            Ok(request)
        } else {
            Err(Status::unauthenticated("invalid bearer token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(secret: Option<&str>, header: Option<&str>) -> Result<(), tonic::Code> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request
                .metadata_mut()
                .insert("authorization", h.parse().expect("ascii header"));
        }
        BearerAuth::new(secret.map(str::to_owned))
            .call(request)
            .map(|_| ())
            .map_err(|s| s.code())
    }

    #[test]
    fn no_secret_accepts_everything() {
        assert_eq!(call(None, None), Ok(()));
        assert_eq!(call(None, Some("Bearer x")), Ok(()));
    }

    #[test]
    fn secret_requires_matching_bearer() {
        let unauth = Err(tonic::Code::Unauthenticated);
        assert_eq!(call(Some("s3"), Some("Bearer s3")), Ok(()));
        assert_eq!(call(Some("s3"), Some("bearer s3")), Ok(()));
        assert_eq!(call(Some("s3"), None), unauth);
        assert_eq!(call(Some("s3"), Some("Bearer nope")), unauth);
        assert_eq!(call(Some("s3"), Some("Basic s3")), unauth);
        assert_eq!(call(Some("s3"), Some("s3")), unauth);
    }
}

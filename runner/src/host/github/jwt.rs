//! The GitHub App's own credential: a short-lived JWT signed (RS256) with the
//! App's private key, sent as `Authorization: Bearer` to the `/app/...`
//! endpoints. Clock-skew safe: issued 60 s in the past, expiring 9 minutes
//! from now (GitHub refuses anything over 10). Signed with `jsonwebtoken`
//! (RustCrypto backend: pure Rust, no C toolchain, no aws-lc).

use std::time::{Duration, SystemTime};

use jsonwebtoken::{Algorithm, Header};
use serde::Serialize;

use super::{GithubError, Secret};
pub use crate::config::secret::AppKey;

/// How far in the past `iat` is put, for clocks running ahead of GitHub's.
pub const BACKDATE: Duration = Duration::from_secs(60);
/// How long a JWT is valid from now (GitHub allows at most 10 minutes).
pub const VALIDITY: Duration = Duration::from_secs(9 * 60);

#[derive(Serialize)]
struct Claims {
    iat: u64,
    exp: u64,
    iss: u64,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A JWT for App `app_id`, valid around `now`.
pub fn app_jwt(app_id: u64, key: &AppKey, now: SystemTime) -> Result<Secret, GithubError> {
    let claims = Claims {
        iat: unix(now.checked_sub(BACKDATE).unwrap_or(now)),
        exp: unix(now + VALIDITY),
        iss: app_id,
    };
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, key.encoding_key())
        .map(Secret::new)
        .map_err(|e| GithubError::Rejected(format!("signing the GitHub App JWT: {e}")))
}

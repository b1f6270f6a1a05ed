//! The GitHub App's own credential: a short-lived JWT signed (RS256) with the
//! App's private key, sent as `Authorization: Bearer` to the `/app/...`
//! endpoints. Clock-skew safe: issued 60 s in the past, expiring 9 minutes
//! from now (GitHub refuses anything over 10). Signed with `jsonwebtoken`
//! (RustCrypto backend: pure Rust, no C toolchain, no aws-lc).

use std::fmt;
use std::time::{Duration, SystemTime};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use super::{GithubError, Secret};

/// How far in the past `iat` is put, for clocks running ahead of GitHub's.
pub const BACKDATE: Duration = Duration::from_secs(60);
/// How long a JWT is valid from now (GitHub allows at most 10 minutes).
pub const VALIDITY: Duration = Duration::from_secs(9 * 60);

/// A GitHub App's private key, checked to be usable for RS256. Prints as
/// `***`.
#[derive(Clone)]
pub struct AppKey(EncodingKey);

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AppKey(***)")
    }
}

impl AppKey {
    /// An RSA private key in PEM form (PKCS#1 `RSA PRIVATE KEY`, as GitHub
    /// hands them out, or PKCS#8 `PRIVATE KEY`). The error never quotes the
    /// key.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let key = EncodingKey::from_rsa_pem(pem)
            .map_err(|_| "not an RSA private key in PEM form".to_owned())?;
        let key = Self(key);
        // Parsing the PEM does not look inside the key: sign once to be sure.
        app_jwt(1, &key, SystemTime::now())
            .map_err(|_| "not a usable RSA private key (signing failed)".to_owned())?;
        Ok(key)
    }
}

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
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key.0)
        .map(Secret::new)
        .map_err(|e| GithubError::Rejected(format!("signing the GitHub App JWT: {e}")))
}

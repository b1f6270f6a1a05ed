//! The guard of `code-agent serve`'s port: a bearer token every call must
//! carry (`authorization: Bearer <token>`, compared in constant time), and
//! TLS, loaded from where a CLI says ([`GuardSources`]). Serving with
//! neither is an explicit choice of the caller (`--insecure-no-auth`).

use std::fmt;
use std::path::Path;

/// A bearer token clients must present. `Debug` prints `***`.
#[derive(Clone)]
pub struct BearerToken(String);

impl BearerToken {
    /// A token; empty (or whitespace-only) ones are refused.
    pub fn new(token: &str) -> Result<Self, String> {
        let token = token.trim();
        if token.is_empty() {
            return Err("the bearer token is empty".to_owned());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the bearer token must be printable ASCII without spaces".to_owned());
        }
        Ok(Self(token.to_owned()))
    }

    /// The token itself (to hand to a redactor; never log it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `header` (an `authorization` value) carries this token.
    pub(super) fn admits(&self, header: Option<&[u8]>) -> bool {
        let Some(header) = header else {
            return false;
        };
        let presented = header
            .strip_prefix(b"Bearer ")
            .or_else(|| header.strip_prefix(b"bearer "))
            .unwrap_or(b"");
        constant_time_eq(presented, self.0.as_bytes())
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

/// Equal in time independent of where `a` and `b` differ (the length is
/// not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How the server guards its port.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Calls without this token are refused (`None`: every call is
    /// served; only for `--insecure-no-auth`).
    pub token: Option<BearerToken>,
    /// Serve TLS with this certificate chain and key (PEM).
    pub tls: Option<TlsPem>,
}

/// A certificate chain and its private key, PEM. `Debug` hides the key.
#[derive(Clone)]
pub struct TlsPem {
    /// The certificate chain.
    pub cert: Vec<u8>,
    /// The private key.
    pub key: Vec<u8>,
}

impl fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem")
            .field("cert_bytes", &self.cert.len())
            .field("key", &"***")
            .finish()
    }
}

/// Where a CLI takes the guard of its port from.
#[derive(Debug, Clone, Copy)]
pub struct GuardSources<'a> {
    /// `--auth-token-file`: a file holding the bearer token.
    pub token_file: Option<&'a Path>,
    /// The environment variable that may hold the token itself (the file
    /// wins when both are set). Never a flag: argv is world-readable.
    pub token_env: &'a str,
    /// That variable's value, read by the caller (who may have taken it
    /// out of the environment).
    pub token_env_value: Option<&'a str>,
    /// `--insecure-no-auth`: serve without a token when none is given.
    pub insecure_no_auth: bool,
    /// `--tls-cert`: certificate chain (PEM).
    pub tls_cert: Option<&'a Path>,
    /// `--tls-key`: its private key (PEM).
    pub tls_key: Option<&'a Path>,
}

impl ServeOptions {
    /// The options `sources` describe: the token from the file or the
    /// environment (required unless `insecure_no_auth`), TLS when both
    /// files are given. Errors name the setting; none quotes a secret.
    pub fn load(sources: GuardSources<'_>) -> Result<Self, String> {
        let token = match (sources.token_file, sources.token_env_value) {
            (Some(file), _) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("auth_token_file: {}: {e}", file.display()))?;
                Some(
                    BearerToken::new(&text)
                        .map_err(|e| format!("auth_token_file: {}: {e}", file.display()))?,
                )
            }
            (None, Some(value)) if !value.trim().is_empty() => {
                Some(BearerToken::new(value).map_err(|e| format!("{}: {e}", sources.token_env))?)
            }
            (None, _) if sources.insecure_no_auth => None,
            (None, _) => {
                return Err(format!(
                    "a bearer token is required: --auth-token-file FILE or {} (or --insecure-no-auth to serve every client that reaches the port)",
                    sources.token_env
                ));
            }
        };
        let tls = match (sources.tls_cert, sources.tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsPem {
                cert: std::fs::read(cert)
                    .map_err(|e| format!("tls_cert: {}: {e}", cert.display()))?,
                key: std::fs::read(key).map_err(|e| format!("tls_key: {}: {e}", key.display()))?,
            }),
            (Some(_), None) => return Err("tls_cert: needs --tls-key too".to_owned()),
            (None, Some(_)) => return Err("tls_key: needs --tls-cert too".to_owned()),
        };
        Ok(Self { token, tls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_checked_exactly_and_never_printed() {
        let t = BearerToken::new(" s3cret-token \n").unwrap();
        assert!(t.admits(Some(b"Bearer s3cret-token")));
        assert!(t.admits(Some(b"bearer s3cret-token")));
        for bad in [
            &b"Bearer s3cret-toke"[..],
            b"Bearer s3cret-token2",
            b"s3cret-token",
            b"Basic s3cret-token",
            b"",
        ] {
            assert!(!t.admits(Some(bad)), "{bad:?}");
        }
        assert!(!t.admits(None));
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(BearerToken::new("  ").is_err());
        assert!(BearerToken::new("a b").is_err());
    }

    #[test]
    fn options_need_a_token_unless_insecure_and_both_tls_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-the-file\n").unwrap();
        let none = GuardSources {
            token_file: None,
            token_env: "CODE_AGENT_TEST_TOKEN_THAT_IS_NOT_SET",
            token_env_value: None,
            insecure_no_auth: false,
            tls_cert: None,
            tls_key: None,
        };
        let err = ServeOptions::load(none).unwrap_err();
        assert!(
            err.contains("bearer token is required") && err.contains("--insecure-no-auth"),
            "{err}"
        );
        let open = ServeOptions::load(GuardSources {
            insecure_no_auth: true,
            ..none
        })
        .unwrap();
        assert!(open.token.is_none());
        let guarded = ServeOptions::load(GuardSources {
            token_file: Some(&file),
            ..none
        })
        .unwrap();
        assert_eq!(guarded.token.unwrap().expose(), "from-the-file");
        let missing = dir.path().join("missing");
        let err = ServeOptions::load(GuardSources {
            token_file: Some(&missing),
            ..none
        })
        .unwrap_err();
        assert!(err.starts_with("auth_token_file:"), "{err}");
        let err = ServeOptions::load(GuardSources {
            insecure_no_auth: true,
            tls_cert: Some(&file),
            ..none
        })
        .unwrap_err();
        assert!(err.contains("--tls-key"), "{err}");
    }
}

//! A string that must never be printed: the control-plane bearer secret,
//! installation tokens and the GitHub App's private key travel in this type
//! so that `{:?}` and tracing fields show `***`, never the value.

use std::fmt;

/// A secret string; `Debug` and `Display` print `***`. Read it with
/// [`Secret::expose`] at the one place it is needed (an HTTP header, a
/// git credential answer).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("ghs_very_secret_value");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(s.expose(), "ghs_very_secret_value");
    }
}

/// A GitHub App's private key, checked to be usable for RS256. Prints as
/// `***`. Lives here, beside [`Secret`], so that the settings that read it
/// and the token broker that signs with it share it without depending on
/// each other.
#[derive(Clone)]
pub struct AppKey(jsonwebtoken::EncodingKey);

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
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem)
            .map_err(|_| "not an RSA private key in PEM form".to_owned())?;
        // Parsing the PEM does not look inside the key: sign once to be sure.
        #[derive(serde::Serialize)]
        struct Probe {
            iss: u64,
        }
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &Probe { iss: 1 },
            &key,
        )
        .map_err(|_| "not a usable RSA private key (signing failed)".to_owned())?;
        Ok(Self(key))
    }

    /// The key, for signing.
    pub fn encoding_key(&self) -> &jsonwebtoken::EncodingKey {
        &self.0
    }
}

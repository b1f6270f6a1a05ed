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

//! The test GitHub App key: an RSA key pair made once per process (with the
//! `rsa` crate, never written anywhere but where a test asks). The runner
//! under test signs its App JWT with the private half; the mock GitHub API
//! checks the signature with the public half.

// Test support: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::{RsaPrivateKey, RsaPublicKey};

/// A test-only RSA key pair in PEM form.
pub struct TestAppKey {
    /// PKCS#1 (`BEGIN RSA PRIVATE KEY`), the form GitHub hands out.
    pub private_pem: String,
    /// SPKI (`BEGIN PUBLIC KEY`).
    pub public_pem: String,
}

impl TestAppKey {
    /// Write the private key to `dir/name` (mode 0600) and return its path.
    pub fn write_private_key(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = dir.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(self.private_pem.as_bytes())?;
        Ok(path)
    }
}

static KEY: LazyLock<TestAppKey> = LazyLock::new(|| generate(2048));
static OTHER: LazyLock<TestAppKey> = LazyLock::new(|| generate(2048));

/// The process's test App key (made on first use).
pub fn test_app_key() -> &'static TestAppKey {
    &KEY
}

/// A second, different key: a runner signing with it must be refused.
pub fn other_test_app_key() -> &'static TestAppKey {
    &OTHER
}

fn generate(bits: usize) -> TestAppKey {
    let mut rng = rsa::rand_core::OsRng;
    // Test-only code: a failure here is a broken test environment.
    let private = RsaPrivateKey::new(&mut rng, bits).expect("generating the test RSA key");
    let public = RsaPublicKey::from(&private);
    TestAppKey {
        private_pem: private
            .to_pkcs1_pem(LineEnding::LF)
            .expect("encoding the test private key")
            .to_string(),
        public_pem: public
            .to_public_key_pem(LineEnding::LF)
            .expect("encoding the test public key"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_pem_and_distinct() {
        let a = test_app_key();
        let b = other_test_app_key();
        assert!(a.private_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        assert!(a.public_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_ne!(a.public_pem, b.public_pem);
        let dir = tempfile::tempdir().unwrap();
        let path = a.write_private_key(dir.path(), "app.pem").unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), a.private_pem);
    }
}

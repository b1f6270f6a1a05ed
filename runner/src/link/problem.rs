//! Why an attempt to reach the control plane failed, said for a person:
//! where it dialled, what went wrong (the whole cause, not just tonic's
//! "transport error"), and the likely fix.
//!
//! tonic reports a refused connection, a DNS failure, TLS spoken to a
//! plaintext server and a wrong path prefix as `Unavailable` or
//! `Unimplemented` with little or no text; the cause sits in the error's
//! source chain, and the fix depends on which it is.

use std::error::Error as _;

use tonic::Code;

/// `status`'s whole cause: its message and every source, each said once.
pub fn cause(status: &tonic::Status) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |text: String| {
        let text = text.trim().to_owned();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    };
    push(status.message().to_owned());
    let mut source = status.source();
    while let Some(err) = source {
        push(err.to_string());
        source = err.source();
    }
    if parts.is_empty() {
        return format!("{:?} with no message", status.code());
    }
    parts.join(": ")
}

/// The likely fix for a failure of `rpc` against `url` with `cause`, if
/// one is recognised.
pub fn hint(url: &str, rpc: &str, code: Code, cause: &str) -> Option<String> {
    let lower = cause.to_ascii_lowercase();
    let tls = url.starts_with("https://");
    let hint = if code == Code::Unimplemented {
        format!(
            "no control plane serves {rpc} at this URL: check its path, which is the prefix of every RPC (e.g. http://host:port/grpc), and the port"
        )
    } else if lower.contains("connection refused") {
        "nothing accepts connections there: is the control plane running, and are the host and port right?".to_owned()
    } else if lower.contains("dns error")
        || lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
        || lower.contains("no address associated")
    {
        "the host name does not resolve: check the URL's host".to_owned()
    } else if tls
        && (lower.contains("invalidcontenttype")
            || lower.contains("corrupt message")
            || lower.contains("wrong version number"))
    {
        "the server does not speak TLS there: use http:// instead of https://".to_owned()
    } else if tls && (lower.contains("certificate") || lower.contains("unknownissuer")) {
        "the server's certificate is not trusted: pass --ca-cert with the CA that signed it"
            .to_owned()
    } else if !tls
        && (lower.contains("connection reset")
            || lower.contains("frame with invalid size")
            || lower.contains("invalid http version"))
    {
        "the server may expect TLS: try https://".to_owned()
    } else if lower.contains("timed out") || lower.contains("deadline") {
        "no answer in time: is the address reachable from here (firewall, proxy)?".to_owned()
    } else {
        return None;
    };
    Some(hint)
}

/// The whole sentence: `cannot reach URL: cause (hint)` until the runner
/// first registered, `lost the control plane at URL (RPC): cause (hint)`
/// after.
pub fn describe(url: &str, rpc: &str, status: &tonic::Status, ever_registered: bool) -> String {
    let cause = cause(status);
    let mut text = if ever_registered {
        format!("lost the control plane at {url} ({rpc}): {cause}")
    } else {
        format!("cannot reach {url} ({rpc}): {cause}")
    };
    if let Some(hint) = hint(url, rpc, status.code(), &cause) {
        text.push_str(" — ");
        text.push_str(&hint);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Io(&'static str, Option<Box<Io>>);
    impl std::fmt::Display for Io {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Io {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn status(code: Code, message: &str, chain: Io) -> tonic::Status {
        let mut s = tonic::Status::new(code, message);
        s.set_source(std::sync::Arc::new(chain));
        s
    }

    #[test]
    fn the_cause_comes_from_the_source_chain() {
        let s = status(
            Code::Unavailable,
            "tcp connect error",
            Io(
                "transport error",
                Some(Box::new(Io("Connection refused (os error 111)", None))),
            ),
        );
        let text = describe("http://127.0.0.1:1", "RegisterRunner", &s, false);
        assert!(
            text.starts_with("cannot reach http://127.0.0.1:1 (RegisterRunner): tcp connect error: transport error: Connection refused (os error 111) — nothing accepts connections there"),
            "{text}"
        );
        let text = describe("http://h:1", "ControlChannel", &s, true);
        assert!(
            text.starts_with("lost the control plane at http://h:1 (ControlChannel): "),
            "{text}"
        );
    }

    #[test]
    fn each_kind_of_failure_gets_its_fix() {
        let hint_for =
            |url: &str, code: Code, cause: &str| hint(url, "RegisterRunner", code, cause);
        assert!(
            hint_for("http://h/x", Code::Unimplemented, "")
                .unwrap()
                .contains("check its path")
        );
        assert!(
            hint_for(
                "http://nope:1",
                Code::Unavailable,
                "dns error: failed to lookup address information"
            )
            .unwrap()
            .contains("does not resolve")
        );
        assert!(
            hint_for(
                "https://h:1",
                Code::Unavailable,
                "received corrupt message of type InvalidContentType"
            )
            .unwrap()
            .contains("use http://")
        );
        assert!(
            hint_for(
                "https://h:1",
                Code::Unavailable,
                "invalid peer certificate: UnknownIssuer"
            )
            .unwrap()
            .contains("--ca-cert")
        );
        assert_eq!(
            hint_for("http://h:1", Code::Unavailable, "something new"),
            None
        );
    }
}

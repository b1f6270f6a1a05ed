//! The outbound HTTP(S) proxy: which proxy, if any, a connection
//! to a given host goes through.
//!
//! Where it comes from, first found wins: `--proxy` (`AGENT_RUNNER_PROXY`,
//! `proxy` in the config file) for every scheme; otherwise `HTTPS_PROXY`
//! (or `https_proxy`) for `https://` destinations and `HTTP_PROXY` (or
//! `http_proxy`) for `http://` ones, as curl and git read them. `NO_PROXY`
//! (or `no_proxy`) lists destinations reached directly. Only `http://`
//! proxies are supported (the tunnel is HTTP CONNECT; TLS to the
//! destination goes inside it). Credentials in the proxy URL
//! (`http://user:pass@proxy:3128`) are sent as `Proxy-Authorization: Basic`
//! and never shown: [`ProxyUrl`]'s `Display` leaves them out, and
//! [`ProxyConfig::secrets`] are masked wherever text leaves the runner.
//! Agents never get them: see [`agents`].

pub mod agents;
pub mod connect;
pub mod forward;
pub mod peer;

use std::fmt;

use base64::Engine as _;

/// One proxy: where it listens and the credentials it wants, if any.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    /// Host name or IP literal (without brackets).
    pub host: String,
    /// TCP port (80 when the URL has none, as curl).
    pub port: u16,
    /// `Basic base64(user:pass)`, when the URL carried credentials.
    authorization: Option<String>,
}

impl ProxyUrl {
    /// Parse `http://[user[:pass]@]host[:port][/]`; a bare `host:port` is
    /// taken as `http://`. Errors say what is wrong without repeating the
    /// credentials.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "proxy scheme {scheme}:// is not supported (only http:// proxies, which tunnel TLS with CONNECT)"
                ));
            }
            None => text,
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') {
            return Err("a proxy URL has no path (expected http://host:port)".into());
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (host, port) = split_host_port(hostport)
            .ok_or_else(|| "expected http://host:port (the port a number)".to_owned())?;
        if host.is_empty() {
            return Err("the proxy URL has no host".into());
        }
        let authorization = userinfo.map(|u| {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let decoded = format!("{}:{}", percent_decode(user), percent_decode(pass));
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded)
            )
        });
        Ok(Self {
            host: host.to_owned(),
            port: port.unwrap_or(80),
            authorization,
        })
    }

    /// The `Proxy-Authorization` value, when the URL carried credentials.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// `host:port`, brackets around an IPv6 literal.
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }

    /// The user and password, decoded, when the URL carried credentials.
    fn credentials(&self) -> Option<(String, String)> {
        let b64 = self.authorization()?.strip_prefix("Basic ")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        let creds = String::from_utf8_lossy(&bytes);
        let (user, pass) = creds.split_once(':').unwrap_or((&creds, ""));
        Some((user.to_owned(), pass.to_owned()))
    }
}

/// Without the credentials, whatever the context (logs, `doctor`, errors).
impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let creds = if self.authorization.is_some() {
            "<credentials>@"
        } else {
            ""
        };
        write!(f, "http://{creds}{}", self.authority())
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `host:port` with brackets around an IPv6 literal.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((host, Some(p.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((text, None)),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where each value came from, for `doctor` and the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--proxy`, `AGENT_RUNNER_PROXY` or the config file's `proxy`.
    Setting,
    /// `HTTPS_PROXY`/`HTTP_PROXY` (either case).
    Environment,
}

/// The proxies and exceptions in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `--proxy`: every scheme.
    explicit: Option<ProxyUrl>,
    /// `HTTPS_PROXY`.
    https: Option<ProxyUrl>,
    /// `HTTP_PROXY`.
    http: Option<ProxyUrl>,
    /// `NO_PROXY`, lower-cased entries.
    no_proxy: Vec<String>,
}

/// The first set, non-empty value of `names` in the environment.
fn env_value(names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| {
        std::env::var(n)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (n.to_string(), v))
    })
}

impl ProxyConfig {
    /// From the `--proxy` setting (if any) and this process's environment.
    /// An unparsable value is an error naming the variable or setting.
    pub fn resolve(setting: Option<&str>) -> Result<Self, String> {
        Self::from_values(
            setting,
            env_value(&["HTTPS_PROXY", "https_proxy"]),
            env_value(&["HTTP_PROXY", "http_proxy"]),
            env_value(&["NO_PROXY", "no_proxy"]).map(|(_, v)| v),
        )
    }

    fn from_values(
        setting: Option<&str>,
        https: Option<(String, String)>,
        http: Option<(String, String)>,
        no_proxy: Option<String>,
    ) -> Result<Self, String> {
        let parse = |(name, value): (String, String)| {
            ProxyUrl::parse(&value).map_err(|e| format!("{name}: {e}"))
        };
        Ok(Self {
            explicit: setting
                .filter(|s| !s.trim().is_empty())
                .map(ProxyUrl::parse)
                .transpose()?,
            https: https.map(parse).transpose()?,
            http: http.map(parse).transpose()?,
            no_proxy: no_proxy
                .unwrap_or_default()
                .split(',')
                .map(|e| e.trim().to_ascii_lowercase())
                .filter(|e| !e.is_empty())
                .collect(),
        })
    }

    /// The proxy for a connection to `host:port` over `https` or not,
    /// `None` when it goes direct (no proxy set, or a `NO_PROXY` match).
    pub fn for_destination(&self, tls: bool, host: &str, port: u16) -> Option<(&ProxyUrl, Source)> {
        let chosen = match (&self.explicit, tls) {
            (Some(p), _) => (p, Source::Setting),
            (None, true) => (self.https.as_ref()?, Source::Environment),
            (None, false) => (self.http.as_ref()?, Source::Environment),
        };
        if self.bypassed(host, port) {
            return None;
        }
        Some(chosen)
    }

    /// Whether `NO_PROXY` says `host` (at `port`) is reached directly:
    /// `*`, the host itself, a domain it is in (`example.com` and
    /// `.example.com` both match `api.example.com`), with an optional
    /// `:port`.
    pub fn bypassed(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            let (name, entry_port) = match split_host_port(entry) {
                Some((n, p)) => (n, p),
                None => (entry.as_str(), None),
            };
            if entry_port.is_some_and(|p| p != port) {
                return false;
            }
            let name = name.trim_start_matches("*.").trim_start_matches('.');
            host == name || host.ends_with(&format!(".{name}"))
        })
    }

    /// Whether any proxy is configured at all.
    pub fn is_set(&self) -> bool {
        self.explicit.is_some() || self.https.is_some() || self.http.is_some()
    }

    /// Every form of every proxy credential, for the redaction layer: the
    /// user, the password, `user:pass` as given and percent-encoded, the
    /// `Basic` value, and each full URL with them (the redactor ignores the
    /// ones too short to mask).
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for proxy in [&self.explicit, &self.https, &self.http]
            .into_iter()
            .flatten()
        {
            let Some((user, pass)) = proxy.credentials() else {
                continue;
            };
            let (u, p) = (percent_encode(&user), percent_encode(&pass));
            let auth = proxy.authority();
            out.extend([
                format!("http://{u}:{p}@{auth}"),
                format!("{user}:{pass}@{auth}"),
                format!("{u}:{p}"),
                format!("{user}:{pass}"),
                proxy.authorization.clone().unwrap_or_default(),
                user,
                pass,
                u,
                p,
            ]);
            if let Some(b64) = proxy.authorization().and_then(|a| a.strip_prefix("Basic ")) {
                out.push(b64.to_owned());
            }
        }
        out.retain(|s| !s.is_empty());
        out.sort();
        out.dedup();
        out
    }

    /// The embedded engine's model-provider proxy: the `--proxy` one with
    /// `NO_PROXY`; `None` without `--proxy` (the engine's HTTP client then
    /// reads `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` itself).
    pub fn model_proxy(&self) -> Option<code_agent_engine::llm::ModelProxy> {
        Some(code_agent_engine::llm::ModelProxy {
            url: self.explicit_url()?,
            no_proxy: self.no_proxy.join(","),
        })
    }

    /// `http://[user:pass@]host:port` of `--proxy`, credentials
    /// percent-encoded: only for the child environment and the engine's
    /// client, never for display.
    fn explicit_url(&self) -> Option<String> {
        let proxy = self.explicit.as_ref()?;
        Some(match proxy.credentials() {
            Some((user, pass)) => format!(
                "http://{}:{}@{}",
                percent_encode(&user),
                percent_encode(&pass),
                proxy.authority()
            ),
            None => format!("http://{}", proxy.authority()),
        })
    }

    /// One line for logs and `doctor`, credentials left out.
    pub fn describe(&self) -> String {
        if !self.is_set() {
            return "none (direct connections)".into();
        }
        let mut parts = Vec::new();
        if let Some(p) = &self.explicit {
            parts.push(format!("{p} (--proxy, every destination)"));
        }
        if self.explicit.is_none() {
            if let Some(p) = &self.https {
                parts.push(format!("{p} for https (HTTPS_PROXY)"));
            }
            if let Some(p) = &self.http {
                parts.push(format!("{p} for http (HTTP_PROXY)"));
            }
        }
        if !self.no_proxy.is_empty() {
            parts.push(format!("direct for {}", self.no_proxy.join(",")));
        }
        parts.join("; ")
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str, value: &str) -> Option<(String, String)> {
        Some((name.to_owned(), value.to_owned()))
    }

    #[test]
    fn parses_and_never_shows_credentials() {
        let p = ProxyUrl::parse("http://us%40er:p%3Ass@proxy.local:3128/").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.local", 3128));
        // base64("us@er:p:ss")
        assert_eq!(p.authorization(), Some("Basic dXNAZXI6cDpzcw=="));
        assert_eq!(p.to_string(), "http://<credentials>@proxy.local:3128");
        assert!(!format!("{p:?}").contains("p%3Ass"));
        let bare = ProxyUrl::parse("10.0.0.1:8080").unwrap();
        assert_eq!(bare.authority(), "10.0.0.1:8080");
        assert_eq!(
            ProxyUrl::parse("http://[::1]:3128").unwrap().authority(),
            "[::1]:3128"
        );
        assert_eq!(ProxyUrl::parse("http://proxy").unwrap().port, 80);
        for bad in [
            "https://proxy:443",
            "socks5://p:1080",
            "http://p:x",
            "http://:80",
            "http://p:1/a",
        ] {
            assert!(ProxyUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chooses_by_scheme_setting_first_and_honours_no_proxy() {
        let c = ProxyConfig::from_values(
            None,
            pair("HTTPS_PROXY", "http://s:1"),
            pair("HTTP_PROXY", "http://p:2"),
            Some("Example.com, .corp,10.1.2.3,local:50051".into()),
        )
        .unwrap();
        assert_eq!(c.for_destination(true, "cp.io", 443).unwrap().0.port, 1);
        assert_eq!(c.for_destination(false, "cp.io", 80).unwrap().0.port, 2);
        for (host, port) in [
            ("example.com", 443),
            ("api.example.com", 1),
            ("x.corp", 2),
            ("10.1.2.3", 3),
            ("local", 50051),
        ] {
            assert!(
                c.for_destination(true, host, port).is_none(),
                "{host}:{port}"
            );
        }
        assert!(c.for_destination(true, "notexample.com", 443).is_some());
        assert!(c.for_destination(true, "local", 50052).is_some());
        let explicit = ProxyConfig::from_values(
            Some("http://e:3"),
            None,
            pair("HTTP_PROXY", "http://p:2"),
            None,
        )
        .unwrap();
        assert_eq!(
            explicit.for_destination(false, "h", 1).unwrap(),
            (&ProxyUrl::parse("e:3").unwrap(), Source::Setting)
        );
        let all = ProxyConfig::from_values(Some("e:3"), None, None, Some("*".into())).unwrap();
        assert!(all.for_destination(true, "anything", 1).is_none());
        assert!(
            ProxyConfig::from_values(None, None, None, None)
                .unwrap()
                .for_destination(true, "h", 1)
                .is_none()
        );
    }

    #[test]
    fn bad_values_name_their_source() {
        let err = ProxyConfig::from_values(None, pair("HTTPS_PROXY", "socks5://x:1"), None, None)
            .unwrap_err();
        assert!(err.starts_with("HTTPS_PROXY:"), "{err}");
        let err = ProxyConfig::from_values(Some("http://x:y"), None, None, None).unwrap_err();
        assert!(err.contains("host:port"), "{err}");
    }

    #[test]
    fn the_engine_gets_the_explicit_proxy_with_credentials_and_they_are_secrets() {
        let c =
            ProxyConfig::from_values(Some("http://u:p%40w@px:8"), None, None, Some("a.b".into()))
                .unwrap();
        let secrets = c.secrets();
        for s in [
            "http://u:p%40w@px:8",
            "u:p@w",
            "p@w",
            "p%40w",
            "Basic dTpwQHc=",
        ] {
            assert!(secrets.contains(&s.to_owned()), "{s} not in {secrets:?}");
        }
        assert!(!c.describe().contains("p%40w"));
        let model = c.model_proxy().unwrap();
        assert_eq!(
            (model.url.as_str(), model.no_proxy.as_str()),
            ("http://u:p%40w@px:8", "a.b")
        );
        assert!(!format!("{model:?}").contains("p%40w"));
        assert!(
            ProxyConfig::from_values(None, pair("HTTPS_PROXY", "px:1"), None, None)
                .unwrap()
                .secrets()
                .is_empty()
        );
    }
}

//! The proxy agents are given: the runner's proxies as `HTTPS_PROXY`,
//! `HTTP_PROXY` (both cases) and `NO_PROXY`, with no credentials in them.
//! A proxy without credentials is given as it is; one with credentials is
//! replaced by a [`Forwarder`] on loopback that adds them (one per distinct
//! proxy, shared by every thread). So the operator's proxy password is never
//! in an agent's environment.

use super::forward::Forwarder;
use super::{ProxyConfig, ProxyUrl};

/// The proxy variables the runner sets for agents itself; the launcher must
/// not inherit them from the runner's environment (they may carry the
/// operator's credentials).
pub const PROXY_VARS: [&str; 4] = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];

/// `ALL_PROXY` (either case): not read by the runner, passed to agents only
/// when it carries no credentials.
const ALL_PROXY_VARS: [&str; 2] = ["ALL_PROXY", "all_proxy"];

/// What agents get, and the forwarders serving it (stopped when dropped).
#[derive(Debug, Default)]
pub struct AgentProxy {
    env: Vec<(String, String)>,
    withheld: Vec<String>,
    forwarders: Vec<(ProxyUrl, Forwarder)>,
    /// Whose processes a forwarder serves.
    allowed: Vec<u32>,
}

impl AgentProxy {
    /// Starts a forwarder for each proxy in `config` that has credentials
    /// (needs a tokio runtime then), serving the runner's uid, root and
    /// `agent_uid`, and works out agents' variables.
    pub fn start(config: &ProxyConfig, agent_uid: Option<u32>) -> std::io::Result<Self> {
        // SAFETY: geteuid has no preconditions.
        let runner_uid = unsafe { libc::geteuid() };
        let mut me = Self {
            allowed: [Some(runner_uid), Some(0), agent_uid]
                .into_iter()
                .flatten()
                .collect(),
            ..Self::default()
        };
        let pairs: [(&[&str], Option<&ProxyUrl>); 2] = match &config.explicit {
            Some(p) => [(&PROXY_VARS, Some(p)), (&[], None)],
            None => [
                (&PROXY_VARS[..2], config.https.as_ref()),
                (&PROXY_VARS[2..], config.http.as_ref()),
            ],
        };
        for (names, proxy) in pairs {
            let Some(proxy) = proxy else { continue };
            let url = me.url_for(proxy)?;
            for name in names {
                me.env.push(((*name).to_owned(), url.clone()));
            }
        }
        if config.is_set() && !config.no_proxy.is_empty() {
            let list = config.no_proxy.join(",");
            me.env.push(("NO_PROXY".to_owned(), list.clone()));
            me.env.push(("no_proxy".to_owned(), list));
        }
        me.withheld = ALL_PROXY_VARS
            .into_iter()
            .filter(|n| std::env::var(n).is_ok_and(|v| has_userinfo(&v)))
            .map(str::to_owned)
            .collect();
        for name in &me.withheld {
            tracing::warn!(
                variable = %name,
                "not passed to agents: it carries credentials (the runner forwards only HTTPS_PROXY/HTTP_PROXY/--proxy for them)"
            );
        }
        Ok(me)
    }

    /// `http://host:port` for a proxy without credentials; the forwarder's
    /// URL (started on first use) for one with.
    fn url_for(&mut self, proxy: &ProxyUrl) -> std::io::Result<String> {
        if proxy.authorization().is_none() {
            return Ok(format!("http://{}", proxy.authority()));
        }
        if let Some((_, f)) = self.forwarders.iter().find(|(p, _)| p == proxy) {
            return Ok(f.url());
        }
        let forwarder = Forwarder::start(proxy.clone(), self.allowed.clone())?;
        tracing::info!(
            upstream = %proxy,
            listen = %forwarder.url(),
            "agents' proxy: forwarding to the operator's proxy, credentials kept in the runner"
        );
        let url = forwarder.url();
        self.forwarders.push((proxy.clone(), forwarder));
        Ok(url)
    }

    /// The variables every agent process gets (set explicitly: they win
    /// over the launcher's inherited ones).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Names the launcher must not inherit from the runner's environment:
    /// the proxy variables (set here instead) and an `ALL_PROXY` with
    /// credentials.
    pub fn not_inherited(&self) -> Vec<String> {
        PROXY_VARS
            .iter()
            .map(|s| (*s).to_owned())
            .chain(self.withheld.iter().cloned())
            .collect()
    }

    /// The loopback ports of the forwarders (for a sandbox that limits
    /// which ports agents may connect to).
    pub fn ports(&self) -> Vec<u16> {
        self.forwarders.iter().map(|(_, f)| f.port()).collect()
    }
}

/// Whether a proxy URL (`scheme://user:pass@host:port`) names credentials.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/')
        .next()
        .is_some_and(|auth| auth.contains('@'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(explicit: Option<&str>, https: Option<&str>, http: Option<&str>) -> ProxyConfig {
        let pair = |n: &str, v: Option<&str>| v.map(|v| (n.to_owned(), v.to_owned()));
        ProxyConfig::from_values(
            explicit,
            pair("HTTPS_PROXY", https),
            pair("HTTP_PROXY", http),
            Some("a.b".into()),
        )
        .unwrap()
    }

    fn get<'a>(p: &'a AgentProxy, name: &str) -> Option<&'a str> {
        p.env()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn without_credentials_agents_get_the_proxy_itself_and_no_forwarder() {
        let p = AgentProxy::start(&config(Some("http://px:8/"), None, None), None).unwrap();
        for name in PROXY_VARS {
            assert_eq!(get(&p, name), Some("http://px:8"), "{name}");
        }
        assert_eq!(get(&p, "no_proxy"), Some("a.b"));
        assert!(p.ports().is_empty());
        let by_scheme = AgentProxy::start(&config(None, Some("s:1"), None), None).unwrap();
        assert_eq!(get(&by_scheme, "https_proxy"), Some("http://s:1"));
        assert_eq!(get(&by_scheme, "HTTP_PROXY"), None);
        assert!(
            AgentProxy::start(&ProxyConfig::default(), None)
                .unwrap()
                .env()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn credentials_are_replaced_by_a_loopback_forwarder() {
        let p =
            AgentProxy::start(&config(Some("http://u:s3cr3t-pw@px:8"), None, None), None).unwrap();
        let [port] = p.ports()[..] else {
            panic!("{:?}", p.ports())
        };
        for name in PROXY_VARS {
            assert_eq!(
                get(&p, name),
                Some(format!("http://127.0.0.1:{port}").as_str())
            );
        }
        assert!(!format!("{:?}", p.env()).contains("s3cr3t"));
        // The same proxy for both schemes: one forwarder; another: its own.
        let same =
            AgentProxy::start(&config(None, Some("u:p@s:1"), Some("u:p@s:1")), None).unwrap();
        assert_eq!(same.ports().len(), 1);
        let two = AgentProxy::start(&config(None, Some("u:p@s:1"), Some("h:2")), None).unwrap();
        assert_eq!(two.ports().len(), 1);
        assert_eq!(get(&two, "http_proxy"), Some("http://h:2"));
        assert!(p.not_inherited().contains(&"https_proxy".to_owned()));
    }

    #[test]
    fn userinfo_is_found_in_any_scheme() {
        assert!(has_userinfo("socks5://u:p@h:1"));
        assert!(has_userinfo("u@h:1"));
        assert!(!has_userinfo("http://h:1/a@b"));
        assert!(!has_userinfo("socks5h://h:1"));
    }
}

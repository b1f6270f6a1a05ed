//! Replaces secret values (GitHub installation tokens) with `***` in text
//! that leaves the runner: item text and command output in updates, and log
//! lines that quote an agent's output.
//!
//! The token broker registers every token it mints; a token stays
//! registered after it expires (an old token in a transcript is still worth
//! hiding). Every string of every update is scanned, so the scan is one
//! pass of an Aho-Corasick automaton over all secrets (`aho-corasick`, the
//! matcher `regex` is built on), rebuilt when a secret is added; searching
//! each secret separately set up a substring searcher per secret per
//! string, a fifth of the runner's CPU in the throughput profile.
//!
//! A secret is added per thread created (its credential capability), so
//! with many threads the rebuild is not rare: it is built as a contiguous
//! NFA (fast to build; a DFA over a thousand secrets took milliseconds),
//! outside the lock that scans take, and swapped in — a scan never waits
//! for a build.
//!
//! Each swap bumps a generation ([`Redactor::generation`]): text masked at
//! one generation need not be scanned again while it holds (the outbox
//! masks an update once, as it enters, and again only if a secret came in
//! while it waited).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

/// What a redacted secret is replaced with.
pub const MASK: &str = "***";

/// Secrets shorter than this are not registered: masking every occurrence
/// of a short string would mangle ordinary text and protects nothing.
const MIN_SECRET_LEN: usize = 8;

/// Keeps at most this many secrets; the oldest go first.
const MAX_SECRETS: usize = 1024;

/// A shared, cheaply cloned set of secrets to mask.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Taken by `add` only: adds are serialised, builds included.
    secrets: Arc<Mutex<Secrets>>,
    /// All of the secrets at once, leftmost-longest (a secret that contains
    /// another is masked whole); `None` while there are none. Written only
    /// to swap in a built automaton.
    matcher: Arc<RwLock<Option<Matcher>>>,
    /// Bumped after each swap of `matcher`.
    generation: Arc<AtomicU64>,
}

/// The automaton, and the length of the shortest secret it finds: text
/// shorter than that holds none, and is not scanned (short fields, such as
/// a working directory or a one-line item, are common; setting up a
/// search costs more than the search).
struct Matcher {
    automaton: AhoCorasick,
    shortest: usize,
}

/// The secrets, longest first (so a secret that contains another is masked
/// whole, not left with a visible tail), each with the order it came in
/// (the oldest is dropped when the set is full).
#[derive(Default)]
struct Secrets {
    list: Vec<(u64, String)>,
    next: u64,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.secrets.lock().map(|s| s.list.len()).unwrap_or(0);
        f.debug_struct("Redactor").field("secrets", &n).finish()
    }
}

impl Redactor {
    /// An empty set (tests; the runner uses [`Redactor::process`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide set: what every runtime of this process and the log
    /// writer share (a token minted by any runner in the process is masked
    /// everywhere in it).
    pub fn process() -> Self {
        static PROCESS: std::sync::LazyLock<Redactor> = std::sync::LazyLock::new(Redactor::new);
        PROCESS.clone()
    }

    /// Masks `secret` from now on.
    pub fn add(&self, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        if secrets.list.iter().any(|(_, s)| s == secret) {
            return;
        }
        if secrets.list.len() >= MAX_SECRETS
            && let Some(oldest) = (0..secrets.list.len()).min_by_key(|&i| secrets.list[i].0)
        {
            secrets.list.remove(oldest);
        }
        let seq = secrets.next;
        secrets.next += 1;
        let at = secrets
            .list
            .partition_point(|(_, s)| s.len() >= secret.len());
        secrets.list.insert(at, (seq, secret.to_owned()));
        let patterns: Vec<&str> = secrets.list.iter().map(|(_, s)| s.as_str()).collect();
        let shortest = patterns.iter().map(|p| p.len()).min().unwrap_or(0);
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(patterns);
        match automaton {
            Ok(automaton) => {
                let matcher = Matcher {
                    automaton,
                    shortest,
                };
                // The old automaton is dropped after the lock is released.
                let old = self
                    .matcher
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .replace(matcher);
                drop(old);
                self.generation.fetch_add(1, Ordering::Release);
            }
            // Cannot happen for at most MAX_SECRETS short strings; should it,
            // the new secret is not taken rather than masking nothing.
            Err(e) => {
                tracing::error!(error = %e, "a secret could not be added to the redactor");
                secrets.list.remove(at);
            }
        }
    }

    /// The generation of the set of secrets. Read it before masking: text
    /// masked after reading `g` hides every secret for as long as this
    /// still returns `g`.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// `text` with every registered secret replaced by [`MASK`]; borrowed
    /// when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let matcher = self.matcher.read().unwrap_or_else(|e| e.into_inner());
        let Some(matcher) = &*matcher else {
            return Cow::Borrowed(text);
        };
        if text.len() < matcher.shortest || !matcher.automaton.is_match(text) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        matcher
            .automaton
            .replace_all_with(text, &mut out, |_, _, dst| {
                dst.push_str(MASK);
                true
            });
        Cow::Owned(out)
    }

    /// Redacts `text` in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_registered_secret_and_leaves_other_text() {
        let r = Redactor::new();
        r.add("ghs_abcdefghijklmnop");
        r.add("ghs_second_token_xyz");
        r.add("short");
        let text = "url https://x-access-token:ghs_abcdefghijklmnop@github.com and ghs_second_token_xyz, short";
        assert_eq!(
            r.redact(text),
            "url https://x-access-token:***@github.com and ***, short"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    /// The generation moves exactly when the set of secrets does: a clone
    /// shares it, a duplicate or a too-short secret leaves it.
    #[test]
    fn the_generation_moves_when_a_secret_is_added() {
        let r = Redactor::new();
        let g0 = r.generation();
        r.add("ghs_generation_one");
        let g1 = r.clone().generation();
        assert!(g1 > g0);
        r.add("ghs_generation_one");
        r.add("short");
        assert_eq!(r.generation(), g1);
        r.clone().add("ghs_generation_two");
        assert!(r.generation() > g1);
    }

    /// Text shorter than every secret is left as it is; text exactly as
    /// long as the shortest is still masked (the length check is strict).
    #[test]
    fn text_shorter_than_every_secret_is_left_as_it_is() {
        let r = Redactor::new();
        r.add("ghs_a_long_secret_value");
        r.add("sk-short");
        assert!(matches!(r.redact("sk-shor"), Cow::Borrowed(_)));
        assert_eq!(r.redact("sk-short"), "***");
        assert_eq!(r.redact("ghs_a_long_secret_value"), "***");
    }

    /// A secret that contains another is masked whole, whichever came first.
    #[test]
    fn the_longer_of_overlapping_secrets_is_masked_whole() {
        let r = Redactor::new();
        r.add("sk-shared-prefix");
        r.add("sk-shared-prefix-and-more");
        assert_eq!(r.redact("k=sk-shared-prefix-and-more;"), "k=***;");
        assert_eq!(r.redact("k=sk-shared-prefix;"), "k=***;");
    }

    #[test]
    fn the_oldest_secret_goes_when_the_set_is_full() {
        let r = Redactor::new();
        for i in 0..MAX_SECRETS {
            r.add(&format!("secret-{i:06}"));
        }
        r.add("a-much-longer-newest-secret");
        assert_eq!(r.redact("secret-000000"), "secret-000000");
        assert_eq!(
            r.redact("secret-000001 a-much-longer-newest-secret"),
            "*** ***"
        );
    }

    #[test]
    fn clones_share_the_set() {
        let r = Redactor::new();
        let c = r.clone();
        c.add("ghs_shared_secret_1");
        let mut s = String::from("a ghs_shared_secret_1 b");
        r.redact_in_place(&mut s);
        assert_eq!(s, "a *** b");
    }
}

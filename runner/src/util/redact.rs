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
//! string, a large share of the runner's CPU under load.
//!
//! A secret is added per thread created (its credential capability), so
//! with many threads adds are not rare, and building an automaton costs in
//! proportion to every secret it holds (4 ms for a thousand capabilities):
//! rebuilt whole on each add, creating threads 1,000 to 2,000 cost 4 s of
//! CPU on that alone. So the secrets are matched by two automata: a
//! settled one, rebuilt only once [`RECENT`] secrets came in since it was
//! built, and a small one of those recent secrets, rebuilt on each add (a
//! thousandth of the cost each, amortised). Both are contiguous NFAs (fast
//! to build), built outside the lock that scans take and swapped in: a
//! scan never waits for a build. A secret that contains another, or is
//! contained in one, settles everything at once, so that one automaton
//! sees both and masks the longer whole.
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

/// Keeps at most this many secrets; the oldest go first (an old one stays
/// in the settled automaton until its next build: at most [`RECENT`] adds).
const MAX_SECRETS: usize = 1024;

/// Secrets added since the settled automaton was built, at most: past
/// this, everything is settled (one build of every secret per this many
/// adds, and one of at most this many on each).
const RECENT: usize = 32;

/// A shared, cheaply cloned set of secrets to mask.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Taken by `add` only: adds are serialised, builds included.
    secrets: Arc<Mutex<Secrets>>,
    /// The automata, leftmost-longest (a secret that contains another is
    /// masked whole); `None` while there are no secrets. Written only to
    /// swap in what was built.
    matcher: Arc<RwLock<Option<Matcher>>>,
    /// Bumped after each swap of `matcher`.
    generation: Arc<AtomicU64>,
}

/// The automata, and the length of the shortest secret they find: text
/// shorter than that holds none, and is not scanned (short fields, such as
/// a working directory or a one-line item, are common; setting up a
/// search costs more than the search).
struct Matcher {
    /// The secrets as of the last settling (cheap to clone: shared).
    settled: Option<AhoCorasick>,
    /// The secrets added since.
    recent: Option<AhoCorasick>,
    shortest: usize,
}

/// The secrets, each with the order it came in (the oldest is dropped when
/// the set is full).
#[derive(Default)]
struct Secrets {
    list: Vec<(u64, String)>,
    next: u64,
    /// Secrets numbered from here on are not in the settled automaton.
    settled_from: u64,
}

/// One automaton over `patterns` (`None` for none).
fn build<'a>(
    patterns: impl IntoIterator<Item = &'a str>,
) -> Result<Option<AhoCorasick>, aho_corasick::BuildError> {
    let patterns: Vec<&str> = patterns.into_iter().collect();
    if patterns.is_empty() {
        return Ok(None);
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .kind(Some(AhoCorasickKind::ContiguousNFA))
        .build(patterns)
        .map(Some)
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
        let settled_from = secrets.settled_from;
        let nested = secrets
            .list
            .iter()
            .any(|(n, s)| *n < settled_from && (s.contains(secret) || secret.contains(s.as_str())));
        secrets.list.push((seq, secret.to_owned()));
        let recent = secrets
            .list
            .iter()
            .filter(|(n, _)| *n >= settled_from)
            .count();
        let built = if nested || recent > RECENT {
            build(secrets.list.iter().map(|(_, s)| s.as_str())).map(|all| (all, seq + 1, None))
        } else {
            build(
                secrets
                    .list
                    .iter()
                    .filter(|(n, _)| *n >= settled_from)
                    .map(|(_, s)| s.as_str()),
            )
            .map(|recent| (self.settled(), settled_from, recent))
        };
        match built {
            Ok((settled, settled_from, recent)) => {
                secrets.settled_from = settled_from;
                let matcher = Matcher {
                    settled,
                    recent,
                    shortest: secrets.list.iter().map(|(_, s)| s.len()).min().unwrap_or(0),
                };
                // The old automata are dropped after the lock is released.
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
                secrets.list.pop();
            }
        }
    }

    /// The settled automaton in use (shared, not copied).
    fn settled(&self) -> Option<AhoCorasick> {
        let matcher = self.matcher.read().unwrap_or_else(|e| e.into_inner());
        matcher.as_ref().and_then(|m| m.settled.clone())
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
        let mut out = Cow::Borrowed(text);
        if text.len() < matcher.shortest {
            return out;
        }
        // No secret holds another across the two (see the module doc), so
        // masking with one and then the other masks what one would.
        for automaton in [&matcher.settled, &matcher.recent].into_iter().flatten() {
            if automaton.is_match(out.as_ref()) {
                let mut masked = String::with_capacity(out.len());
                automaton.replace_all_with(out.as_ref(), &mut masked, |_, _, dst| {
                    dst.push_str(MASK);
                    true
                });
                out = Cow::Owned(masked);
            }
        }
        out
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

    /// Also when one of them was settled before the other came: the two
    /// are put in one automaton then.
    #[test]
    fn a_secret_nested_in_a_settled_one_is_masked_whole() {
        for (first, second) in [
            ("sk-shared-prefix", "sk-shared-prefix-and-more"),
            ("sk-shared-prefix-and-more", "sk-shared-prefix"),
        ] {
            let r = Redactor::new();
            r.add(first);
            for i in 0..=RECENT {
                r.add(&format!("filler-secret-{i:04}"));
            }
            assert!(r.secrets.lock().unwrap().settled_from > 0, "settled");
            r.add(second);
            assert_eq!(r.redact("k=sk-shared-prefix-and-more;"), "k=***;");
            assert_eq!(r.redact("k=sk-shared-prefix;"), "k=***;");
        }
    }

    /// Settled and recent secrets are masked alike, in one text, and an
    /// add builds only the recent ones until they outnumber [`RECENT`].
    #[test]
    fn settled_and_recent_secrets_are_both_masked() {
        let r = Redactor::new();
        let secret = |i: usize| format!("ARC_{i:064x}");
        for i in 0..3 * RECENT {
            r.add(&secret(i));
            let text = format!("old {} new {}.", secret(0), secret(i));
            assert_eq!(r.redact(&text), "old *** new ***.", "after {} adds", i + 1);
            let recent = {
                let s = r.secrets.lock().unwrap();
                s.list.iter().filter(|(n, _)| *n >= s.settled_from).count()
            };
            assert!(recent <= RECENT, "{recent} recent after {} adds", i + 1);
        }
        assert!(matches!(
            r.redact("nothing secret here at all"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn the_oldest_secrets_go_when_the_set_is_full() {
        let r = Redactor::new();
        for i in 0..MAX_SECRETS {
            r.add(&format!("secret-{i:06}"));
        }
        // Each add past the bound drops the oldest secret; the settled
        // automaton forgets it when it is next built (within RECENT adds).
        for i in 0..=RECENT {
            r.add(&format!("a-much-longer-newer-secret-{i:04}"));
        }
        assert_eq!(r.secrets.lock().unwrap().list.len(), MAX_SECRETS);
        assert_eq!(r.redact("secret-000000"), "secret-000000");
        assert_eq!(
            r.redact("secret-000100 a-much-longer-newer-secret-0000"),
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

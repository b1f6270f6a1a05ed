//! Unit tests of the broker with a scripted token source and a clock the
//! test turns (no sleeping, no timing asserted).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::watch;

use super::broker::Clock;
use super::source::{ListedInstallation, MintedToken, TokenSource};
use super::*;

const MIN: Duration = Duration::from_secs(60);

/// A clock that only moves when the test says.
#[derive(Clone)]
struct TestClock(Arc<Mutex<SystemTime>>);

impl TestClock {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        )))
    }
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
    fn clock(&self) -> Clock {
        let c = self.clone();
        Arc::new(move || c.now())
    }
}

/// A token source whose installations, failures and pace the test sets.
struct Fake {
    installations: Mutex<Vec<(i64, Vec<String>)>>,
    lifetime: Duration,
    clock: TestClock,
    mints: AtomicUsize,
    lists: AtomicUsize,
    /// The next mint attempts fail with these, in order.
    failures: Mutex<VecDeque<GithubError>>,
    /// Mints wait until this is true.
    gate: watch::Receiver<bool>,
    /// The next this many mints panic.
    panics: AtomicUsize,
}

impl Fake {
    fn new(
        clock: &TestClock,
        installations: &[(i64, &[&str])],
    ) -> (Arc<Self>, watch::Sender<bool>) {
        let (open, gate) = watch::channel(true);
        let fake = Arc::new(Self {
            installations: Mutex::new(
                installations
                    .iter()
                    .map(|(id, repos)| (*id, repos.iter().map(|r| (*r).to_owned()).collect()))
                    .collect(),
            ),
            lifetime: 60 * MIN,
            clock: clock.clone(),
            mints: AtomicUsize::new(0),
            lists: AtomicUsize::new(0),
            failures: Mutex::new(VecDeque::new()),
            gate,
            panics: AtomicUsize::new(0),
        });
        (fake, open)
    }

    fn fail_next(&self, errors: impl IntoIterator<Item = GithubError>) {
        self.failures.lock().unwrap().extend(errors);
    }

    fn mints(&self) -> usize {
        self.mints.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl TokenSource for Fake {
    fn describe(&self) -> String {
        "fake".to_owned()
    }

    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .installations
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| ListedInstallation {
                id: *id,
                account: Some(format!("acct{id}")),
            })
            .collect())
    }

    async fn mint(&self, installation_id: i64) -> Result<MintedToken, GithubError> {
        let mut gate = self.gate.clone();
        gate.wait_for(|open| *open).await.unwrap();
        let n = self.mints.fetch_add(1, Ordering::SeqCst) + 1;
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1))
            .is_ok()
        {
            panic!("the fake source panics on purpose");
        }
        if let Some(e) = self.failures.lock().unwrap().pop_front() {
            return Err(e);
        }
        let repositories = self
            .installations
            .lock()
            .unwrap()
            .iter()
            .find(|(id, _)| *id == installation_id)
            .map(|(_, r)| r.clone())
            .ok_or(GithubError::UnknownInstallation(installation_id))?;
        Ok(MintedToken {
            token: Secret::new(format!("ghs_test_{installation_id}_{n:04}")),
            expires_at: self.clock.now() + self.lifetime,
            repositories,
        })
    }
}

fn options() -> BrokerOptions {
    BrokerOptions {
        retry_min_delay: Duration::from_millis(1),
        retry_max_delay: Duration::from_millis(5),
        retries: 3,
        ..BrokerOptions::default()
    }
}

fn broker(fake: &Arc<Fake>, clock: &TestClock, redactor: &Redactor) -> TokenBroker {
    TokenBroker::with_clock(
        fake.clone(),
        redactor.clone(),
        "github.com",
        options(),
        clock.clock(),
    )
}

#[tokio::test]
async fn a_token_is_cached_until_its_refresh_point_then_replaced() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let b = broker(&fake, &clock, &Redactor::new());

    let first = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_eq!(first.installation_id, 7);
    assert_eq!(first.repositories, ["acme/widgets"]);
    assert_eq!(fake.mints(), 1);

    // 75 % of an hour is 45 minutes: just before it, the same token.
    clock.advance(44 * MIN);
    let again = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_eq!(again.token, first.token);
    assert_eq!(fake.mints(), 1);

    clock.advance(2 * MIN);
    let renewed = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_ne!(renewed.token, first.token);
    assert_eq!(fake.mints(), 2);
    assert_eq!(renewed.expires_at, clock.now() + 60 * MIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_callers_share_one_mint() {
    let clock = TestClock::new();
    let (fake, gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    gate.send_replace(false);
    let b = broker(&fake, &clock, &Redactor::new());
    const CALLERS: usize = 50;
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.token_for_repo("acme", "widgets").await })
        })
        .collect();
    // Every caller has listed the installations (so is about to wait for,
    // or is waiting for, the token) before the one mint may finish.
    while fake.lists.load(Ordering::SeqCst) < CALLERS {
        tokio::task::yield_now().await;
    }
    gate.send_replace(true);
    let mut tokens = Vec::new();
    for c in callers {
        tokens.push(c.await.unwrap().unwrap().token);
    }
    assert_eq!(fake.mints(), 1, "one refresh for every waiting caller");
    assert!(tokens.iter().all(|t| *t == tokens[0]));
}

#[tokio::test]
async fn invalidate_forces_a_new_token() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    let first = b.token_for_repo("acme", "widgets").await.unwrap();

    b.invalidate(7);
    let second = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_ne!(second.token, first.token);
    assert_eq!(fake.mints(), 2);
    assert_eq!(
        fake.lists.load(Ordering::SeqCst),
        1,
        "coverage survives invalidation"
    );

    // A refusal of the old token does not throw away the new one.
    b.forget_token(first.token.expose());
    let third = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_eq!(third.token, second.token);
    b.forget_token(second.token.expose());
    let fourth = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_ne!(fourth.token, second.token);
    assert_eq!(fake.mints(), 3);
}

#[tokio::test]
async fn a_transient_failure_is_retried_and_counted() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    fake.fail_next([
        GithubError::Source("GitHub answered 500".into()),
        GithubError::Source("connection reset".into()),
    ]);
    let b = broker(&fake, &clock, &Redactor::new());
    let failures_before = crate::observe::metrics::get_token_refresh_failures();
    let t = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_eq!(t.installation_id, 7);
    assert_eq!(fake.mints(), 3, "two failed attempts, then success");
    assert!(crate::observe::metrics::get_token_refresh_failures() >= failures_before + 2);
}

#[tokio::test]
async fn retries_give_up_and_refusals_are_not_retried() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    fake.fail_next((0..10).map(|_| GithubError::Source("down".into())));
    let b = broker(&fake, &clock, &Redactor::new());
    let err = b.token_for_repo("acme", "widgets").await.unwrap_err();
    assert_eq!(err, GithubError::Source("down".into()));
    assert_eq!(fake.mints(), 4, "first attempt and 3 retries");

    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    fake.fail_next([GithubError::Rejected("401 Bad credentials".into())]);
    let b = broker(&fake, &clock, &Redactor::new());
    let err = b.token_for_installation(7).await.unwrap_err();
    assert!(matches!(err, GithubError::Rejected(_)));
    assert_eq!(fake.mints(), 1);
}

/// A refresh task that dies (a panic) fails its callers once; the next
/// caller starts a new refresh instead of getting that failure forever.
#[tokio::test]
async fn a_refresh_that_panics_does_not_wedge_the_installation() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    fake.panics.store(1, Ordering::SeqCst);
    let b = broker(&fake, &clock, &Redactor::new());
    let err = b.token_for_installation(7).await.unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
    let t = b.token_for_installation(7).await.unwrap();
    assert_eq!(t.installation_id, 7);
    assert_eq!(fake.mints(), 2);
}

#[tokio::test]
async fn the_current_token_is_handed_out_while_a_refresh_fails() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    let first = b.token_for_repo("acme", "widgets").await.unwrap();

    clock.advance(50 * MIN); // due, 10 minutes left
    fake.fail_next((0..4).map(|_| GithubError::Source("down".into())));
    let still = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_eq!(still.token, first.token);

    clock.advance(10 * MIN); // expired, and the source still down
    fake.fail_next((0..4).map(|_| GithubError::Source("down".into())));
    assert!(b.token_for_repo("acme", "widgets").await.is_err());

    // The source is back: a new token.
    let back = b.token_for_repo("acme", "widgets").await.unwrap();
    assert_ne!(back.token, first.token);
}

#[tokio::test]
async fn an_uncovered_repository_is_named() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"]), (8, &["other/thing"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    let err = b.token_for_repo("acme", "gadgets").await.unwrap_err();
    assert_eq!(
        err,
        GithubError::NotCovered {
            repo: "acme/gadgets".into()
        }
    );
    assert!(err.to_string().contains("acme/gadgets"));
    assert_eq!(fake.mints(), 2, "every installation was asked");

    // Asking again soon after does not mint again.
    assert!(b.token_for_repo("acme", "gadgets").await.is_err());
    assert_eq!(fake.mints(), 2);

    assert!(matches!(
        b.token_for_repo("acme", "../x").await,
        Err(GithubError::BadRepo { .. })
    ));
}

#[tokio::test]
async fn a_repository_added_later_is_found_after_the_recheck_age() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    b.token_for_repo("acme", "widgets").await.unwrap();
    fake.installations.lock().unwrap()[0]
        .1
        .push("acme/gadgets".into());

    assert!(b.token_for_repo("acme", "gadgets").await.is_err());
    clock.advance(2 * MIN);
    let t = b.token_for_repo("acme", "gadgets").await.unwrap();
    assert_eq!(t.installation_id, 7);
    assert_eq!(fake.mints(), 2);
}

#[tokio::test]
async fn the_right_installation_serves_each_repository_case_insensitively() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"]), (8, &["Other/Thing"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    assert_eq!(
        b.token_for_repo("other", "thing.git")
            .await
            .unwrap()
            .installation_id,
        8
    );
    assert_eq!(
        b.token_for_repo("ACME", "Widgets")
            .await
            .unwrap()
            .installation_id,
        7
    );

    let all = b.installations().await.unwrap();
    let ids: Vec<i64> = all.iter().map(|i| i.id).collect();
    assert_eq!(ids, [7, 8]);
    assert_eq!(all[0].account.as_deref(), Some("acct7"));
    assert_eq!(all[1].repositories, ["Other/Thing"]);
    assert!(
        all.iter()
            .all(|i| i.error.is_none() && i.token_expires_at.is_some())
    );
    assert_eq!(fake.mints(), 2, "installations() reuses cached tokens");
}

#[tokio::test]
async fn an_installation_that_went_away_covers_nothing() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let b = broker(&fake, &clock, &Redactor::new());
    b.token_for_repo("acme", "widgets").await.unwrap();
    fake.installations.lock().unwrap().clear();
    b.invalidate(7);
    let err = b.token_for_repo("acme", "widgets").await.unwrap_err();
    assert_eq!(err, GithubError::UnknownInstallation(7));
    let err = b.token_for_repo("acme", "widgets").await.unwrap_err();
    assert!(matches!(err, GithubError::NotCovered { .. }), "{err:?}");
}

#[tokio::test]
async fn every_token_is_redacted_and_never_printed() {
    let clock = TestClock::new();
    let (fake, _gate) = Fake::new(&clock, &[(7, &["acme/widgets"])]);
    let redactor = Redactor::new();
    let b = broker(&fake, &clock, &redactor);
    let t = b.token_for_repo("acme", "widgets").await.unwrap();
    let secret = t.token.expose().to_owned();
    assert_eq!(redactor.redact(&format!("x {secret} y")), "x *** y");
    let printed = format!("{t:?} {b:?}");
    assert!(!printed.contains(&secret), "{printed}");
    assert!(printed.contains("***"));
}

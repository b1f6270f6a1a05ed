//! Git credentials for agents, end to end: a scripted agent's `git clone`
//! and `git push` against a loopback smart-HTTP git server that demands the
//! installation token the mock control plane hands out, through
//! `agent-runner git-credential` and the runner's credential socket. Token
//! rotation (by expiry, and by a 401 making git erase the token), a token
//! the server refuses, and redaction: the token never appears in the
//! runner's logs or in any update (an agent printing it gets `***`).

pub(crate) mod capability;
pub(crate) mod git_server;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_runner_proto::runner::client_message::Payload;
use mock_control_plane::{GithubInstallation, MockConfig, MockControlPlane};

use self::git_server::GitServer;
use crate::support::*;

pub(crate) const TOKEN_A: &str = "ghs_e2eCredTokenAlpha0123456789";
const TOKEN_B: &str = "ghs_e2eCredTokenBravo9876543210";
const TOKEN_NEVER: &str = "ghs_e2eCredTokenNobodyHandsOut00";
pub(crate) const REPO: &str = "owner/repo.git";
const INSTALLATION: i64 = 4242;

fn installation(token: &str, lifetime: Duration) -> GithubInstallation {
    let expires = SystemTime::now() + lifetime;
    GithubInstallation {
        installation_id: INSTALLATION,
        access_token: token.into(),
        expires_unix_ms: expires.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64,
        repositories: vec!["owner/repo".into()],
    }
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A bare `owner/repo.git` under `root` with one commit on main.
pub(crate) fn seed_repo(root: &Path) {
    let bare = root.join(REPO);
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "--bare", "-b", "main"]);
    git(&bare, &["config", "http.receivepack", "true"]);
    let work = root.join("seed");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-b", "main"]);
    std::fs::write(work.join("README"), "hello\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-m", "seed"]);
    git(&work, &["push", bare.to_str().unwrap(), "main"]);
}

pub(crate) struct World {
    pub(crate) cp: MockControlPlane,
    pub(crate) runner: RunnerProc,
    pub(crate) git: GitServer,
    pub(crate) root: tempfile::TempDir,
    pub(crate) thread: String,
}

/// A git server accepting `accepted`, a mock handing out `served` (living
/// `lifetime`), and a runner told the git server is its GitHub host, with
/// agent `a` and one thread.
pub(crate) async fn world(served: &str, accepted: &str, lifetime: Duration) -> World {
    let root = tempfile::tempdir().unwrap();
    seed_repo(root.path());
    let git = GitServer::start(root.path(), accepted).await;
    let cp = MockControlPlane::start(
        MockConfig::default().with_github_installation(installation(served, lifetime)),
    )
    .await
    .unwrap();
    start_world(root, git, cp, &[]).await
}

/// A runner against `cp` (with `extra` arguments), told `git` is its GitHub
/// host, with agent `a` and one thread; `root` holds the repositories.
pub(crate) async fn start_world(
    root: tempfile::TempDir,
    git: GitServer,
    cp: MockControlPlane,
    extra: &[&str],
) -> World {
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let opts = RunnerOpts::new(cp.url())
        .arg("--github-host")
        .arg(&git.host())
        // Keep the host's own git configuration out of the agent's git.
        .env("HOME", home.to_str().unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1");
    let runner = RunnerProc::start(extra.iter().fold(opts, |o, a| o.arg(a)));
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    let thread = create_thread(&cp, "a", "ct").await;
    World {
        cp,
        runner,
        git,
        root,
        thread,
    }
}

impl World {
    /// Run `script` as one turn; the output of each completed command.
    pub(crate) async fn turn(&self, rid: &str, script: &str) -> Vec<String> {
        send(
            &self.cp,
            rid,
            user_message("a", &self.thread, script, false),
        )
        .await;
        turn_completed(&self.cp, rid).await;
        completed_commands(&replies(&self.cp, rid))
            .into_iter()
            .map(|c| c.output.unwrap_or_default())
            .collect()
    }

    /// Clone into each of `dirs`, one command each, as turn `rid`; the
    /// outputs.
    pub(crate) async fn clones(&self, rid: &str, dirs: &[&str]) -> Vec<String> {
        let url = self.url();
        let script: Vec<String> = dirs.iter().map(|dir| clone(&url, dir)).collect();
        self.turn(rid, &script.join("\n")).await
    }

    /// From now on the control plane hands out `token` (living `lifetime`)
    /// and the git server accepts only it.
    fn rotate_to(&self, token: &str, lifetime: Duration) {
        self.cp
            .set_github_installations(vec![installation(token, lifetime)]);
        self.git.set_token(token);
    }

    /// Run, as turn `rid`: clone into `dir`, commit `subject` there and
    /// push it, and ask git for the host's credential. Checks the clone and
    /// the push worked, the server accepted and never refused a token, and
    /// the credential the agent printed reached the control plane masked.
    pub(crate) async fn clone_push_and_fill(&self, rid: &str, dir: &str, subject: &str) {
        let url = self.url();
        let host = self.git.host();
        let out = self
            .turn(
                rid,
                &format!(
                    "{}\n{}\n\
                     run printf 'protocol=http\\nhost={host}\\npath={REPO}\\n\\n' | git credential fill",
                    clone(&url, dir),
                    commit_and_push(dir, subject),
                ),
            )
            .await;
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].contains("CLONED"), "{out:?}");
        assert!(out[1].contains("PUSHED"), "{out:?}");
        assert_eq!(self.head_subject(), subject);
        // The agent printed the token itself: the update carries `***`.
        assert!(
            out[2].contains("username=x-access-token") && out[2].contains("password=***"),
            "{out:?}"
        );
        assert!(self.git.accepted() > 0);
        assert_eq!(self.git.refused(), 0);
    }

    pub(crate) fn url(&self) -> String {
        self.git.url(REPO)
    }

    /// The subject of the bare repository's main.
    pub(crate) fn head_subject(&self) -> String {
        git(
            &self.root.path().join(REPO),
            &["log", "-1", "--format=%s", "main"],
        )
        .trim()
        .to_owned()
    }

    /// No token in the runner's log, nor in anything the mock received.
    fn assert_no_token_leaked(&self) {
        self.assert_none_leaked(&[TOKEN_A, TOKEN_B, TOKEN_NEVER]);
    }

    /// None of `tokens` in the runner's log, nor in anything the mock
    /// received.
    pub(crate) fn assert_none_leaked(&self, tokens: &[&str]) {
        assert!(!tokens.is_empty(), "no token to look for");
        let logs = self.runner.logs();
        let updates = format!("{:?}", self.cp.received());
        for token in tokens {
            assert!(!logs.contains(token), "token in the runner's log:\n{logs}");
            assert!(!updates.contains(token), "token in an update: {updates}");
        }
    }
}

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// Commit (empty) and push from the clone in `dir`, saying PUSHED.
pub(crate) fn commit_and_push(dir: &str, subject: &str) -> String {
    format!(
        "run cd {dir} && git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m '{subject}' && git push origin HEAD:main && echo PUSHED"
    )
}

/// Clone the repository into `dir`, saying CLONED.
pub(crate) fn clone(url: &str, dir: &str) -> String {
    format!("run git clone {url} {dir} && echo CLONED")
}

/// The command's output says the server refused git's credentials.
pub(crate) fn assert_refused(out: &str) {
    assert!(
        !out.contains("CLONED") && out.contains("Authentication failed"),
        "{out:?}"
    );
}

#[tokio::test]
async fn an_agent_clones_and_pushes_with_the_installation_token() {
    let w = world(TOKEN_A, TOKEN_A, HOUR).await;
    w.clone_push_and_fill("t1", "work", "from the agent").await;
    // A token that reaches item text, a command line, its output, a failed
    // turn's reason and the debug log lines quoting them is masked in all.
    let out = w
        .turn(
            "t2",
            &format!("run echo {TOKEN_A}\nfail gave up on {TOKEN_A}"),
        )
        .await;
    assert_eq!(out, vec!["***\n".to_owned()]);
    let error = replies(&w.cp, "t2")
        .iter()
        .find_map(|m| error_text(m).map(str::to_owned))
        .expect("the failed turn's RequestError");
    assert_eq!(error, "gave up on ***");
    w.runner.wait_log("gave up on ***").await;
    w.assert_no_token_leaked();
}

/// Tokens living less than the broker's refresh margin are minted again on
/// every use: after the control plane rotates, the next clone uses the new
/// token at once.
#[tokio::test]
async fn a_rotated_token_is_picked_up() {
    let w = world(TOKEN_A, TOKEN_A, Duration::from_secs(120)).await;
    let out = w.clones("t1", &["one"]).await;
    assert!(out[0].contains("CLONED"), "{out:?}");
    w.rotate_to(TOKEN_B, Duration::from_secs(120));
    let out = w.clones("t2", &["two"]).await;
    assert!(out[0].contains("CLONED"), "{out:?}");
    assert_eq!(w.git.refused(), 0, "the old token was never tried again");
    w.assert_no_token_leaked();
}

/// A long-lived token the server stops accepting: git's 401 makes it call
/// `erase`, the runner forgets the token, and the next try gets the new
/// one.
#[tokio::test]
async fn a_refused_token_is_forgotten_and_the_next_try_succeeds() {
    let w = world(TOKEN_A, TOKEN_A, HOUR).await;
    let out = w.clones("t1", &["one"]).await;
    assert!(out[0].contains("CLONED"), "{out:?}");
    let minted = w.cp.github_token_requests().len();
    w.rotate_to(TOKEN_B, HOUR);
    let out = w.clones("t2", &["two", "three"]).await;
    assert_refused(&out[0]);
    assert!(out[1].contains("CLONED"), "{out:?}");
    assert!(w.git.refused() >= 1);
    assert!(w.cp.github_token_requests().len() > minted);
    w.assert_no_token_leaked();
}

/// The server wants a token nobody hands out: the clone fails cleanly, the
/// turn ends, and the runner goes on working.
#[tokio::test]
async fn a_wrong_token_fails_cleanly() {
    let w = world(TOKEN_A, TOKEN_NEVER, HOUR).await;
    let out = w.clones("t1", &["one"]).await;
    assert_refused(&out[0]);
    assert!(w.git.refused() >= 1);
    let said_after = {
        send(
            &w.cp,
            "t2",
            user_message("a", &w.thread, "say still here", false),
        )
        .await;
        turn_completed(&w.cp, "t2").await;
        said(&replies(&w.cp, "t2"))
    };
    assert_eq!(said_after, vec!["still here".to_owned()]);
    w.assert_no_token_leaked();
}

/// The socket lives under the state dir, private to the runner's user, for
/// as long as the runner runs.
#[tokio::test]
async fn the_socket_is_private_and_gone_after_shutdown() {
    use std::os::unix::fs::PermissionsExt;

    let (cp, mut runner) = connected().await;
    let sock = runner.dirs.path().join("state/cred/git.sock");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(sock.parent().unwrap()), 0o700);
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0));
    assert!(!sock.exists());
    drop(cp);
}

/// Add a skill (`SKILL.md`) to the bare repository's main, locally.
fn add_skill_to_repo(root: &Path) {
    let work = root.join("skill-seed");
    let bare = root.join(REPO);
    git(
        root,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    std::fs::write(
        work.join("SKILL.md"),
        "---\nname: private-lint\ndescription: A skill in a private repository\n---\n# lint\n",
    )
    .unwrap();
    git(&work, &["add", "SKILL.md"]);
    git(&work, &["commit", "-q", "-m", "skill"]);
    git(&work, &["push", "-q", "origin", "HEAD:main"]);
}

async fn install_skill(
    w: &World,
    rid: &str,
    package: &str,
) -> agent_runner_proto::runner::ClientMessage {
    use agent_runner_proto::runner::InstallSkillsMpRequest;
    use agent_runner_proto::runner::server_message::Request;
    send(
        &w.cp,
        rid,
        Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: "a".into(),
            package_name: package.into(),
        }),
    )
    .await;
    reply(&w.cp, rid).await
}

/// A skill package in a repository only an installation token opens: the
/// runner's fetch sends the token (scoped to that URL, through git's
/// environment), and the skill lands in the agent's home.
#[tokio::test]
async fn a_private_skill_package_is_fetched_with_the_installation_token() {
    let w = world(TOKEN_A, TOKEN_A, HOUR).await;
    add_skill_to_repo(w.root.path());
    let package = format!("{}#main", w.url());
    let m = install_skill(&w, "s1", &package).await;
    assert!(
        matches!(payload(&m), Some(Payload::SkillMpUpdate(u)) if u.package_name == package),
        "{m:?}"
    );
    assert!(w.git.accepted() > 0);
    let skill = w
        .runner
        .workspace_root()
        .join("a/.agents/skills/private-lint/SKILL.md");
    assert!(skill.is_file(), "{}", skill.display());
    w.assert_no_token_leaked();
}

/// The same package when the server wants a token nobody hands out: a clear
/// error, no token in it.
#[tokio::test]
async fn a_private_skill_package_without_a_valid_token_is_refused() {
    let w = world(TOKEN_A, TOKEN_NEVER, HOUR).await;
    add_skill_to_repo(w.root.path());
    let m = install_skill(&w, "s1", &w.url()).await;
    let error = error_text(&m).unwrap_or_else(|| panic!("a RequestError, got {m:?}"));
    assert!(error.contains("fetching"), "{error}");
    assert!(w.git.refused() >= 1);
    w.assert_no_token_leaked();
}

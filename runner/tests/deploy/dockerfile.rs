//! `deploy/Dockerfile` and `deploy/compose.yaml` without a Docker engine:
//! what the files say, and the binary run the way the image runs it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{MockConfig, MockControlPlane};

use crate::support::*;

/// The base image's PATH (debian:*-slim sets it; the Dockerfile inherits it).
const BASE_IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn runtime_instructions() -> (Vec<Instruction>, usize) {
    let all = dockerfile();
    let last = last_stage(&all);
    (all, last)
}

fn one<'a>(all: &'a [Instruction], stage: usize, keyword: &str) -> &'a Instruction {
    let found: Vec<&Instruction> = all
        .iter()
        .filter(|i| i.stage == stage && i.keyword == keyword)
        .collect();
    assert_eq!(found.len(), 1, "one {keyword} in the runtime stage");
    found[0]
}

/// The runtime stage's `USER uid:gid`.
pub fn image_user() -> (u32, u32) {
    let (all, runtime) = runtime_instructions();
    let user = &one(&all, runtime, "USER").args;
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    (
        uid.parse()
            .expect("numeric uid (non-root needs no /etc/passwd lookup)"),
        gid.parse().expect("numeric gid"),
    )
}

/// The runtime stage's volumes.
pub fn image_volumes() -> Vec<String> {
    let (all, runtime) = runtime_instructions();
    words(&one(&all, runtime, "VOLUME").args)
}

#[test]
fn every_copy_source_exists_and_every_binary_copied_is_built() {
    let all = dockerfile();
    let root = repo_root();
    let ignored = read(&root.join(".dockerignore"));
    let mut copies = 0;
    for i in all
        .iter()
        .filter(|i| i.keyword == "COPY" || i.keyword == "ADD")
    {
        assert_eq!(i.keyword, "COPY", "ADD fetches or unpacks: use COPY");
        let mut w = words(&i.args);
        let from = w
            .iter()
            .find_map(|a| a.strip_prefix("--from="))
            .map(str::to_owned);
        w.retain(|a| !a.starts_with("--"));
        let (dest, sources) = w.split_last().expect("COPY src… dest");
        assert!(!sources.is_empty(), "COPY without source: {}", i.args);
        match from {
            None => {
                for src in sources {
                    assert!(
                        root.join(src).exists(),
                        "COPY source {src} is not in the repository"
                    );
                    for pattern in ignored.lines().map(str::trim) {
                        let pattern = pattern.trim_end_matches('/');
                        assert!(
                            pattern.starts_with('#') || pattern.is_empty() || src != pattern,
                            "COPY source {src} is excluded by .dockerignore"
                        );
                    }
                    copies += 1;
                }
            }
            Some(stage) => {
                // A binary copied out of the build stage must be one that
                // stage builds: a [[bin]] of a package it builds with -p.
                let build = all
                    .iter()
                    .find(|f| f.keyword == "FROM" && f.args.ends_with(&format!(" AS {stage}")))
                    .unwrap_or_else(|| panic!("no stage {stage}"));
                let run = all
                    .iter()
                    .filter(|r| r.stage == build.stage && r.keyword == "RUN")
                    .map(|r| r.args.clone())
                    .collect::<Vec<_>>()
                    .join(" ");
                for src in sources {
                    let bin = Path::new(src)
                        .file_name()
                        .and_then(|n| n.to_str())
                        .expect("a file name");
                    assert!(
                        run.contains(&format!("target/release/{bin}")),
                        "{src}: the {stage} stage does not copy target/release/{bin} out"
                    );
                    assert!(
                        run.contains(&format!("-p {bin}")),
                        "{src}: the {stage} stage does not build package {bin}"
                    );
                    let declared = ["runner/Cargo.toml", "mock-control-plane/Cargo.toml"]
                        .iter()
                        .any(|m| read(&root.join(m)).contains(&format!("name = \"{bin}\"")));
                    assert!(declared, "{bin} is not a binary of the workspace");
                }
                assert!(dest.starts_with('/'), "absolute destination: {dest}");
            }
        }
    }
    assert!(copies >= 5, "the build stage copies the sources");
    // cargo loads every workspace member's manifest, whatever -p says: each
    // member must be inside something the build stage copies.
    let copied: Vec<String> = all
        .iter()
        .filter(|i| i.keyword == "COPY" && !i.args.contains("--from="))
        .flat_map(|i| {
            let w = words(&i.args);
            w[..w.len() - 1].to_vec()
        })
        .collect();
    let manifest = read(&root.join("Cargo.toml"));
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a members list");
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if member.is_empty() {
            continue;
        }
        assert!(
            copied
                .iter()
                .any(|c| member == c || member.starts_with(&format!("{c}/"))),
            "workspace member {member} is not copied into the build stage"
        );
    }
    // No protoc to install: the build goes through the vendored one.
    let cargo_config = read(&root.join(".cargo/config.toml"));
    assert!(
        cargo_config.contains("build-support/protoc"),
        "{cargo_config}"
    );
}

#[test]
fn runtime_stage_is_non_root_with_two_volumes_tini_and_the_tools_agents_need() {
    let (all, runtime) = runtime_instructions();
    let (uid, gid) = image_user();
    assert!(uid != 0 && gid != 0, "non-root");
    assert_eq!(uid, 10001);
    let volumes = image_volumes();
    assert_eq!(volumes, ["/var/lib/agent-runner", "/workspaces"]);
    let env = env_of(&all, runtime);
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("ENV {k} not set"))
    };
    assert_eq!(get("AGENT_RUNNER_STATE_DIR"), volumes[0]);
    assert_eq!(get("AGENT_RUNNER_WORKSPACE_ROOT"), volumes[1]);
    assert!(get("AGENT_RUNNER_HEALTH_ADDR").starts_with("0.0.0.0:"));
    let settings = run_env_names();
    for (k, _) in env.iter().filter(|(k, _)| k.starts_with("AGENT_RUNNER_")) {
        assert!(settings.contains(k), "ENV {k} is not a runner setting");
    }

    assert_eq!(one(&all, runtime, "STOPSIGNAL").args, "SIGTERM");
    let health = &one(&all, runtime, "HEALTHCHECK").args;
    let cmd = health.split_once("CMD").expect("HEALTHCHECK CMD").1;
    assert_eq!(
        words(cmd),
        ["agent-runner", "status", "--probe", "livez"],
        "{health}"
    );

    // PID 1 is tini, which reaps orphans; the runner does not (see procs.rs).
    let entrypoint = words(&one(&all, runtime, "ENTRYPOINT").args);
    assert_eq!(entrypoint[..2], ["/usr/bin/tini", "--"], "{entrypoint:?}");
    assert_eq!(entrypoint[2], "agent-runner");
    assert_eq!(words(&one(&all, runtime, "CMD").args), ["run"]);

    let run: String = all
        .iter()
        .filter(|i| i.stage == runtime && i.keyword == "RUN")
        .map(|i| i.args.clone())
        .collect::<Vec<_>>()
        .join(" ");
    for package in [
        "tini",
        "git",
        "ca-certificates",
        "bash",
        "coreutils",
        "curl",
        "procps",
        "findutils",
        "grep",
        "sed",
    ] {
        assert!(
            run.split_whitespace().any(|w| w == package),
            "runtime stage does not install {package}"
        );
    }
    assert!(run.contains("--uid 10001"), "the user has the fixed uid");
    // Optional agent CLIs.
    for (arg, package) in [
        ("INSTALL_CODEX", "@openai/codex"),
        ("INSTALL_CLAUDE", "@anthropic-ai/claude-code"),
    ] {
        assert!(
            all.iter()
                .any(|i| i.stage == runtime && i.keyword == "ARG" && i.args.starts_with(arg)),
            "ARG {arg}"
        );
        assert!(
            run.contains(&format!("npm install -g \"{package}@")),
            "{package}"
        );
    }
}

#[test]
fn compose_builds_both_stages_and_points_the_runner_at_the_mock() {
    let compose_path = deploy_dir().join("compose.yaml");
    let compose = yaml(&compose_path);
    let stages: Vec<String> = dockerfile()
        .iter()
        .filter(|i| i.keyword == "FROM")
        .filter_map(|i| i.args.split(" AS ").nth(1).map(str::to_owned))
        .collect();
    let services = &compose["services"];
    for name in ["control-plane", "runner"] {
        let build = &services[name]["build"];
        let context = deploy_dir().join(build["context"].as_str().expect("context"));
        assert_eq!(
            context.canonicalize().unwrap(),
            repo_root().canonicalize().unwrap(),
            "{name}: the build context is the repository"
        );
        let dockerfile = build["dockerfile"].as_str().expect("dockerfile");
        assert!(context.join(dockerfile).exists(), "{name}: {dockerfile}");
        if let Some(target) = build["target"].as_str() {
            assert!(
                stages.iter().any(|s| s == target),
                "{name}: no stage {target}"
            );
        }
    }
    // The mock's scenario is mounted from the repository and exists.
    let cp = &services["control-plane"];
    let mount = cp["volumes"][0].as_str().expect("a bind mount");
    let (host, inside) = mount.split_once(':').expect("host:container");
    let inside = inside.trim_end_matches(":ro");
    let command: Vec<&str> = cp["command"]
        .as_sequence()
        .expect("command list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let script = command
        .iter()
        .position(|a| *a == "--script")
        .map(|i| command[i + 1])
        .expect("--script");
    let relative = script
        .strip_prefix(inside)
        .expect("script inside the mount");
    let on_host = deploy_dir()
        .join(host)
        .join(relative.trim_start_matches('/'));
    assert!(on_host.exists(), "{} is missing", on_host.display());
    let listen = command
        .iter()
        .position(|a| *a == "--listen")
        .map(|i| command[i + 1])
        .expect("--listen");
    let port = listen.rsplit_once(':').expect("host:port").1;
    let url = services["runner"]["environment"]["AGENT_RUNNER_CONTROL_PLANE_URL"]
        .as_str()
        .expect("the runner's control plane URL");
    assert_eq!(url, format!("http://control-plane:{port}"));
    let settings = run_env_names();
    for (k, _) in services["runner"]["environment"]
        .as_mapping()
        .expect("environment map")
    {
        let k = k.as_str().expect("name");
        assert!(settings.contains(k), "{k} is not a runner setting");
    }
    let volumes = services["runner"]["volumes"]
        .as_sequence()
        .expect("volumes");
    for (v, path) in volumes.iter().zip(image_volumes()) {
        let v = v.as_str().expect("volume");
        assert!(v.ends_with(&format!(":{path}")), "{v} mounts {path}");
    }
}

/// How the runner is started for [`binary_runs_like_the_image`]: what could
/// be enforced here.
struct Isolation {
    switch_uid: bool,
    read_only_root: bool,
}

fn isolation() -> Isolation {
    if !is_root() {
        skip("not root: the runner runs as this (non-root) user; no uid switch, no read-only root");
        return Isolation {
            switch_uid: false,
            read_only_root: false,
        };
    }
    let switch_uid = have("setpriv");
    if !switch_uid {
        skip("setpriv (util-linux) not found: cannot run as uid 10001");
    }
    let read_only_root = switch_uid
        && have("unshare")
        && std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "true"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if switch_uid && !read_only_root {
        skip("cannot make a private mount namespace (unshare --mount): root stays writable");
    }
    Isolation {
        switch_uid,
        read_only_root,
    }
}

/// In a private mount namespace: bind the two volume stand-ins onto
/// themselves, remount every other mount read-only (bind remounts change
/// only this namespace's view), prove the root is read-only, then run the
/// runner as `uid:gid`. `$1`/`$2` are the volumes, `$3` the binary.
const READ_ONLY_ROOT: &str = r#"
set -eu
state="$1"; ws="$2"; bin="$3"; uid="$4"; gid="$5"
mount --bind "$state" "$state"
mount --bind "$ws" "$ws"
awk '{print $5}' /proc/self/mountinfo | while read -r mp; do
  case "$mp" in
    /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$state"|"$ws") continue ;;
  esac
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
for probe in / /tmp "$(dirname "$state")" "$HOME"; do
  if [ -d "$probe" ] && touch "$probe/.agent-runner-rw-probe" 2>/dev/null; then
    echo "read-only root check: $probe is still writable" >&2
    exit 97
  fi
done
exec setpriv --reuid "$uid" --regid "$gid" --clear-groups -- "$bin" run
"#;

/// The two volume stand-ins (`state`, `workspaces`) in `dir`, owned by the
/// image's user when the uid is switched.
fn volume_stand_ins(dir: &Path, how: &Isolation, uid: u32, gid: u32) -> Vec<PathBuf> {
    let stand_in: Vec<PathBuf> = ["state", "workspaces"]
        .iter()
        .map(|n| dir.join(n))
        .collect();
    for d in &stand_in {
        std::fs::create_dir(d).unwrap();
        if how.switch_uid {
            std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
        }
    }
    stand_in
}

/// Exactly the image's environment: its ENV lines (volume paths moved to
/// their stand-ins, the health port made free), the base image's PATH,
/// and the one setting the image cannot know: the control plane URL.
fn image_env(
    all: &[Instruction],
    runtime: usize,
    volumes: &[String],
    stand_in: &[PathBuf],
    cp_url: String,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), BASE_IMAGE_PATH.into()),
        ("AGENT_RUNNER_CONTROL_PLANE_URL".into(), cp_url),
    ];
    for (k, v) in env_of(all, runtime) {
        let v = match volumes.iter().position(|p| *p == v) {
            Some(i) => stand_in[i].display().to_string(),
            None if k == "AGENT_RUNNER_HEALTH_ADDR" => {
                let host = v.rsplit_once(':').expect("host:port").0;
                format!("{host}:0")
            }
            None => v,
        };
        env.push((k, v));
    }
    env
}

/// The command that starts `bin` as the image would, as far as `how` allows.
fn runner_command(
    how: &Isolation,
    bin: &Path,
    stand_in: &[PathBuf],
    uid: u32,
    gid: u32,
) -> tokio::process::Command {
    if how.read_only_root {
        let mut c = tokio::process::Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(READ_ONLY_ROOT)
            .arg("sh")
            .arg(&stand_in[0])
            .arg(&stand_in[1])
            .arg(bin)
            .arg(uid.to_string())
            .arg(gid.to_string());
        c
    } else if how.switch_uid {
        let mut c = tokio::process::Command::new("setpriv");
        c.args(["--reuid", &uid.to_string(), "--regid", &gid.to_string()])
            .args(["--clear-groups", "--"])
            .arg(bin)
            .arg("run");
        c
    } else {
        let mut c = tokio::process::Command::new(bin);
        c.arg("run");
        c
    }
}

/// It listens (the image's HEALTHCHECK passes) and registers.
async fn check_listens_and_registers(
    child: &mut tokio::process::Child,
    logs: &Logs,
    bin: &Path,
    env: &[(String, String)],
    cp: &MockControlPlane,
) {
    let logs_now = || logs.text();
    let deadline = tokio::time::Instant::now() + WAIT;
    let addr = loop {
        if let Some(addr) = logged_health_addr(&logs_now()) {
            break addr;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the runner exited ({status}):\n{}", logs_now());
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", logs_now());
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(
        http_get(&addr, "/livez").await.unwrap(),
        (200, "ok\n".to_owned())
    );
    let healthcheck = std::process::Command::new(bin)
        .args(["status", "--probe", "livez"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("AGENT_RUNNER_HEALTH_ADDR", &addr)
        .output()
        .unwrap();
    assert!(healthcheck.status.success(), "{healthcheck:?}");
    cp.wait_connected(WAIT).await.unwrap();
}

/// As the image's user, with no capabilities left; returns the uid checked.
fn check_user_and_capabilities(pid: u32, how: &Isolation, uid: u32) -> u32 {
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    let line = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    let expected_uid = if how.switch_uid {
        uid
    } else {
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() }
    };
    let uids: Vec<u32> = line("Uid:")
        .split_whitespace()
        .skip(1)
        .filter_map(|u| u.parse().ok())
        .collect();
    assert_eq!(uids, vec![expected_uid; 4], "{status}");
    assert_ne!(expected_uid, 0, "the runner must not run as root");
    if how.switch_uid {
        assert!(line("CapEff:").ends_with("0000000000000000"), "{status}");
    }
    expected_uid
}

/// An agent works: its command writes in its workspace, on the volume.
async fn check_an_agent_works(cp: &MockControlPlane, logs: &Logs, stand_in: &[PathBuf]) {
    let logs_now = || logs.text();
    let send = |rid: &str, r: Request| {
        let rid = rid.to_owned();
        async move { cp.send_request(rid, r).await.unwrap() }
    };
    send(
        "a",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: "a".into(),
            agent_sdk: "scripted".into(),
        }),
    )
    .await;
    send(
        "t",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "scripted-fast".into(),
            reasoning_level: None,
            ..Default::default()
        }),
    )
    .await;
    let created = cp
        .wait_for(|m| m.request_id.as_deref() == Some("t"), WAIT)
        .await
        .unwrap();
    let Some(Payload::ThreadUpdate(thread)) = created.payload else {
        panic!("no thread: {created:?}\n{}", logs_now());
    };
    send(
        "m",
        Request::CreateUserMessageRequest(CreateUserMessageRequest {
            agent_id: "a".into(),
            thread_id: thread.thread_id.clone(),
            text: "run echo written > made-here && cat made-here".into(),
            allow_steer: false,
            model: None,
            model_reasoning_level: None,
        }),
    )
    .await;
    let done = cp
        .wait_for(
            |m| {
                m.request_id.as_deref() == Some("m")
                    && matches!(&m.payload, Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32)
            },
            WAIT,
        )
        .await
        .unwrap();
    assert!(done.payload.is_some());
    let output: Vec<String> = cp
        .received()
        .into_iter()
        .filter(|m| m.request_id.as_deref() == Some("m"))
        .filter_map(|m| match m.payload {
            Some(Payload::ItemUpdate(i)) => i.command_execution_item.and_then(|c| c.output),
            Some(Payload::RequestError(e)) => Some(format!("ERROR {}", e.error_message)),
            _ => None,
        })
        .collect();
    assert!(
        output.iter().any(|o| o.contains("written")),
        "{output:?}\n{}",
        logs_now()
    );
    assert!(
        stand_in[0].join("state.db").exists(),
        "state on the state volume"
    );
    let made = stand_in[1]
        .join("a/threads")
        .join(&thread.thread_id)
        .join("made-here");
    assert!(made.exists(), "{} is missing", made.display());
}

/// SIGTERM drains and exits 0, with nothing refused by the file system.
async fn check_sigterm_drains(child: &mut tokio::process::Child, pid: u32, logs: &Logs) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let exit = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit}\n{}", logs.text());
    let logs = logs.text();
    assert!(!logs.contains("Read-only file system"), "{logs}");
    assert!(!logs.contains("Permission denied"), "{logs}");
}

#[tokio::test]
async fn binary_runs_like_the_image() {
    let how = isolation();
    let (all, runtime) = runtime_instructions();
    let (uid, gid) = image_user();
    let volumes = image_volumes();

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let stand_in = volume_stand_ins(dir.path(), &how, uid, gid);
    // A copy any uid can run, wherever the target dir is.
    let bin = dir.path().join("agent-runner");
    std::fs::copy(runner_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let env = image_env(&all, runtime, &volumes, &stand_in, cp.url());

    let mut cmd = runner_command(&how, &bin, &stand_in, uid, gid);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&stand_in[1]);
    let (mut child, logs) = spawn_logged(&mut cmd);

    check_listens_and_registers(&mut child, &logs, &bin, &env, &cp).await;
    let pid = child.id().expect("running");
    let expected_uid = check_user_and_capabilities(pid, &how, uid);
    check_an_agent_works(&cp, &logs, &stand_in).await;
    check_sigterm_drains(&mut child, pid, &logs).await;
    eprintln!(
        "checked: env = the image's ENV (+PATH, control plane URL, volume stand-ins, health port 0); \
         uid {expected_uid}{}; {}",
        if how.switch_uid {
            ", no capabilities"
        } else {
            ""
        },
        if how.read_only_root {
            "every mount read-only except the two volumes (/proc, /sys, /dev untouched)"
        } else {
            "root NOT made read-only (see SKIPPED above)"
        }
    );
}

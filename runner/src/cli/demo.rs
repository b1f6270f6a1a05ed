//! `agent-runner demo`: the whole system on one machine, in one process.
//!
//! Starts the mock control plane on loopback, a runner with the scripted
//! adapter against it (temporary state and workspaces), creates an agent and
//! a thread, sends a short script, and prints every update as it arrives.
//!
//! `--sdk` picks the demo agent's SDK. By default it is `scripted`, or
//! `code-agent` (its engine embedded) when `OPENAI_API_KEY`,
//! `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY` or `ANTHROPIC_BASE_URL` is in the
//! environment; a model-driven SDK gets
//! `--prompt` instead of the script, on the first model it advertises
//! (`CODE_AGENT_MODELS` picks the engine's). An option the chosen SDK would
//! ignore is refused, not dropped.

use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use clap::Args;
use mock_control_plane::{MockConfig, MockControlPlane};

use crate::config::{ControlPlaneUrl, LogFormat, RunConfig};
use crate::runner::Runner;

/// Longest wait for the next update (a real model may think for a while).
const WAIT: Duration = Duration::from_secs(120);

/// What the scripted demo runs unless `--script` says otherwise.
const SCRIPT: &str = "say Hello from the scripted agent!\nthink Which files are here?\nrun printf 'fn main() {}\\n' > main.rs && ls -l && wc -c main.rs\nusage 1200 340\nsay Done.";

/// What a model-driven demo asks unless `--prompt` says otherwise.
const PROMPT: &str = "Create a shell script hello.sh that prints 'Hello from the code-agent!', run it with sh, then say in one sentence what you did.";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The demo agent's SDK: `scripted`, `code-agent`, `codex` or
    /// `claude-code` (the last two need their CLI installed and logged in).
    /// Default: `code-agent` when OPENAI_API_KEY, OPENAI_BASE_URL,
    /// ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set, else `scripted`.
    #[arg(long)]
    pub sdk: Option<String>,
    /// File holding the script the scripted demo runs (docs/protocol.md
    /// §3: say/think/run/sleep/usage/fail; `-` reads stdin). Only with the
    /// scripted SDK.
    #[arg(long, value_name = "FILE", conflicts_with = "script_text")]
    pub script: Option<std::path::PathBuf>,
    /// The script itself, inline (`--script-text 'say hi'`), instead of
    /// --script FILE.
    #[arg(long, value_name = "TEXT")]
    pub script_text: Option<String>,
    /// What a model-driven demo asks. Not with the scripted SDK.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Show the runner's own log lines (e.g. `info`) on stderr.
    #[arg(long)]
    pub log_level: Option<String>,
    /// The protocol version the demo's control plane and runner speak:
    /// `0.2` (agents and threads) or `0.7` (thread-only: the thread names
    /// only its model and carries a `cli_secret`).
    #[arg(long, value_name = "VERSION", default_value = "0.2")]
    pub protocol: crate::config::Protocol,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if let Some(level) = &args.log_level {
        crate::ops::logging::init(LogFormat::Text, level).map_err(anyhow::Error::msg)?;
    }
    super::code_agent::redact_provider_keys();
    let chosen = DemoSdk::choose(&args, provider_in_env())?;
    let dir = tempfile_dir()?;
    let cp = MockControlPlane::start(MockConfig {
        protocol: match args.protocol {
            crate::config::Protocol::V02 => mock_control_plane::Protocol::V02,
            crate::config::Protocol::V07 => mock_control_plane::Protocol::V07,
        },
        ..MockConfig::default()
    })
    .await?;
    println!(
        "mock control plane (protocol {}) listening on {}",
        args.protocol.as_str(),
        cp.url()
    );
    let mut config = demo_config(&dir, &cp.url(), &chosen.name)?;
    config.protocol = args.protocol;
    let runner = Runner::start(&config).await?;
    cp.wait_connected(WAIT).await?;
    print_registrations(&cp);
    let plan = match Plan::for_chosen(&cp, &chosen) {
        Ok(plan) => plan,
        Err(why) => {
            runner.shutdown(Duration::from_secs(5)).await?;
            cp.stop().await?;
            let _ = std::fs::remove_dir_all(&dir);
            anyhow::bail!("--sdk {}: {why}", chosen.name);
        }
    };
    let failure = run_thread(&cp, plan).await?;
    runner.shutdown(Duration::from_secs(5)).await?;
    cp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(why) = failure {
        anyhow::bail!("the demo turn failed: {why}");
    }
    println!("\ndemo finished");
    Ok(())
}

/// Whether a model provider is configured in the environment.
fn provider_in_env() -> bool {
    [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ]
    .iter()
    .any(|k| std::env::var(k).is_ok_and(|v| !v.trim().is_empty()))
}

/// The demo runner's settings: against the mock at `url`, its state and
/// workspaces in `dir`, driving the scripted SDK and `sdk`.
fn demo_config(dir: &std::path::Path, url: &str, sdk: &str) -> anyhow::Result<RunConfig> {
    Ok(RunConfig {
        control_plane: ControlPlaneUrl::parse(url).map_err(anyhow::Error::msg)?,
        ca_cert_pem: None,
        secret: None,
        state_dir: dir.join("state"),
        workspace_root: dir.join("workspaces"),
        sdks: if sdk == "scripted" {
            vec!["scripted".into()]
        } else {
            vec!["scripted".into(), sdk.to_owned()]
        },
        max_concurrent_turns: 16,
        max_queued_requests: crate::tasks::mailboxes::DEFAULT_MAX_QUEUED,
        drain_timeout: Duration::from_secs(5),
        outbox_capacity: 1000,
        keepalive_interval: Duration::from_secs(20),
        keepalive_timeout: Duration::from_secs(10),
        reconnect_min_delay: Duration::from_millis(250),
        reconnect_max_delay: Duration::from_secs(30),
        skill_max_bytes: crate::host::skills::DEFAULT_MAX_BYTES,
        skills: Default::default(),
        sdk_probe_interval: crate::config::DEFAULT_SDK_PROBE_INTERVAL,
        log_format: LogFormat::Text,
        log_level: "info".into(),
        health: None,
        github: Default::default(),
        secret_file: None,
        github_app_key_file: None,
        hidden_files: Vec::new(),
        sandbox: Default::default(),
        proxy: Default::default(),
        exit_when_idle: None,
        protocol: crate::config::Protocol::V02,
        agent_api_url: None,
        approval_timeout: crate::tasks::approvals::DEFAULT_TIMEOUT,
        approval_policy: crate::tasks::approvals::Policy::Deny,
        sdk_options: crate::config::SdkOptions {
            code_agent: sdk_code_agent::CodeAgentConfig {
                state_dir: Some(dir.join("state").join("code-agent")),
                ..Default::default()
            },
            ..Default::default()
        },
    })
}

/// One line per SDK the runner registered, with its models.
fn print_registrations(cp: &MockControlPlane) {
    for reg in cp.registrations() {
        for sdk in reg.request.agent_sdks {
            let models: Vec<String> = sdk.models.iter().map(|m| m.name.clone()).collect();
            println!(
                "runner registered  sdk={} models=[{}]",
                sdk.name,
                models.join(", ")
            );
        }
    }
}

/// The demo thread's SDK, model, reasoning level and message.
struct Plan {
    sdk: String,
    model: String,
    reasoning_level: Option<String>,
    message: String,
}

impl Plan {
    /// The plan for `chosen`, on the first model the runner advertises for
    /// it. When it is not usable a default choice falls back to the scripted
    /// SDK (and script); an asked-for SDK is an error, saying why.
    fn for_chosen(cp: &MockControlPlane, chosen: &DemoSdk) -> Result<Self, String> {
        let mut plan = Self {
            sdk: "scripted".to_owned(),
            model: "scripted-fast".to_owned(),
            reasoning_level: Some("low".to_owned()),
            message: chosen.message.clone(),
        };
        if chosen.name == "scripted" {
            return Ok(plan);
        }
        let advertised = cp
            .registrations()
            .into_iter()
            .flat_map(|r| r.request.agent_sdks)
            .find(|s| s.name == chosen.name);
        let why = match advertised {
            Some(sdk) if sdk.status == AgentSdkStatus::Ready as i32 && !sdk.models.is_empty() => {
                return Ok(Self {
                    sdk: sdk.name.clone(),
                    model: sdk.models[0].name.clone(),
                    reasoning_level: None,
                    message: chosen.message.clone(),
                });
            }
            Some(sdk) => format!(
                "{} is not ready ({})",
                sdk.name,
                sdk.error_message
                    .as_deref()
                    .unwrap_or("it advertises no model")
            ),
            None => format!("{} was not advertised", chosen.name),
        };
        // Only a default choice falls back; an asked-for SDK fails.
        if !chosen.implicit {
            return Err(why);
        }
        println!("{why}; the demo uses the scripted SDK");
        plan.message = SCRIPT.to_owned();
        Ok(plan)
    }
}

/// Create the demo agent and thread, send the message and print every
/// update until the turn completes; the turn's error, if it failed.
async fn run_thread(cp: &MockControlPlane, plan: Plan) -> anyhow::Result<Option<String>> {
    let Plan {
        sdk,
        model,
        reasoning_level,
        message,
    } = plan;
    let mut cursor = 0;

    if cp.protocol() == mock_control_plane::Protocol::V07 {
        // Thread-only: no agent; the runner picks the SDK by the model.
        use agent_runner_proto::runner_v07 as v07;
        cp.send(v07::ServerMessage {
            request_id: "req-2".into(),
            request: Some(v07::server_message::Request::CreateThreadRequest(
                v07::CreateThreadRequest {
                    thread_id: "demo-thread".into(),
                    model: model.clone(),
                    reasoning_level,
                    cli_secret: "demo-cli-secret".into(),
                    ..Default::default()
                },
            )),
            acked_sequence: 0,
        })
        .await?;
    } else {
        cp.send_request(
            "req-1",
            Request::CreateAgentRequest(CreateAgentRequest {
                agent_id: "demo-agent".into(),
                agent_sdk: sdk.clone(),
            }),
        )
        .await?;
        print_until(cp, &mut cursor, |m| {
            m.request_id.as_deref() == Some("req-1")
        })
        .await?;
        cp.send_request(
            "req-2",
            Request::CreateThreadRequest(CreateThreadRequest {
                agent_id: "demo-agent".into(),
                model: model.clone(),
                reasoning_level,
                ..Default::default()
            }),
        )
        .await?;
    }
    let created = print_until(cp, &mut cursor, |m| {
        m.request_id.as_deref() == Some("req-2")
    })
    .await?;
    let Some(Payload::ThreadUpdate(thread)) = created.payload else {
        anyhow::bail!("thread creation failed: {created:?}");
    };

    println!(
        "\n> user message to {sdk} ({model}):\n{}\n",
        indent(&message)
    );
    cp.send_request(
        "req-3",
        Request::CreateUserMessageRequest(CreateUserMessageRequest {
            agent_id: "demo-agent".into(),
            thread_id: thread.thread_id.clone(),
            text: message,
            allow_steer: false,
            model: None,
            model_reasoning_level: None,
        }),
    )
    .await?;
    let turn_start = cursor;
    print_until(cp, &mut cursor, |m| {
        m.request_id.as_deref() == Some("req-3")
            && matches!(&m.payload, Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32)
    })
    .await?;
    // A turn that failed ends with COMPLETED too, after a RequestError:
    // the demo failed then, and says so with its exit code.
    Ok(cp.received()[turn_start..cursor]
        .iter()
        .find_map(|m| match &m.payload {
            Some(Payload::RequestError(e)) if m.request_id.as_deref() == Some("req-3") => {
                Some(e.error_message.clone())
            }
            _ => None,
        }))
}

/// The demo agent's SDK and what it is sent, from the options.
#[derive(Debug, PartialEq)]
struct DemoSdk {
    name: String,
    message: String,
    /// Chosen by default rather than by `--sdk`.
    implicit: bool,
}

impl DemoSdk {
    fn choose(args: &DemoArgs, provider_in_env: bool) -> anyhow::Result<Self> {
        const KNOWN: &[&str] = crate::tasks::sdks::BUILT_IN;
        let (name, implicit) = match &args.sdk {
            Some(name) if KNOWN.contains(&name.as_str()) => (name.clone(), false),
            Some(name) => anyhow::bail!(
                "--sdk {name:?}: not an SDK this runner drives ({}one of {})",
                crate::tasks::sdks::suggest(name)
                    .map(|known| format!("did you mean {known}? "))
                    .unwrap_or_default(),
                KNOWN.join(", ")
            ),
            None if provider_in_env => (sdk_code_agent::SDK_NAME.to_owned(), true),
            None => ("scripted".to_owned(), true),
        };
        let message = if name == "scripted" {
            if args.prompt.is_some() {
                anyhow::bail!(
                    "--prompt is for a model-driven SDK (--sdk code-agent, codex or claude-code); the scripted SDK runs --script"
                );
            }
            match (&args.script, &args.script_text) {
                (Some(path), _) => read_script(path)?,
                (None, Some(text)) => text.clone(),
                (None, None) => SCRIPT.to_owned(),
            }
        } else {
            if args.script.is_some() || args.script_text.is_some() {
                anyhow::bail!(
                    "--script is for the scripted SDK (--sdk scripted); {name} is asked with --prompt"
                );
            }
            args.prompt.clone().unwrap_or_else(|| PROMPT.to_owned())
        };
        Ok(Self {
            name,
            message,
            implicit,
        })
    }
}

/// The script in `path` (`-`: stdin); the error names the file.
fn read_script(path: &std::path::Path) -> anyhow::Result<String> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| anyhow::anyhow!("--script {}: {e}", path.display()))?;
    if text.trim().is_empty() {
        anyhow::bail!("--script {}: the script is empty", path.display());
    }
    Ok(text)
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-demo-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Print every update from `cursor` on until one matches `done`; return it.
async fn print_until(
    cp: &MockControlPlane,
    cursor: &mut usize,
    done: impl Fn(&ClientMessage) -> bool,
) -> anyhow::Result<ClientMessage> {
    loop {
        let (index, msg) = cp.wait_for_after(*cursor, |_| true, WAIT).await?;
        *cursor = index + 1;
        println!("{}", describe(&msg));
        if done(&msg) {
            return Ok(msg);
        }
    }
}

fn name<E: std::fmt::Debug>(value: i32, parse: impl Fn(i32) -> Option<E>) -> String {
    parse(value).map_or_else(|| value.to_string(), |e| format!("{e:?}"))
}

/// One readable line (plus indented text) per update.
fn describe(m: &ClientMessage) -> String {
    let rid = m.request_id.as_deref().unwrap_or("-");
    let body = match &m.payload {
        Some(Payload::AgentUpdate(u)) => format!(
            "AgentUpdate   agent={} status={}",
            u.agent_id,
            name(u.status, |v| AgentStatus::try_from(v).ok())
        ),
        Some(Payload::ThreadUpdate(u)) => format!(
            "ThreadUpdate  thread={} status={}",
            u.thread_id,
            name(u.status, |v| ThreadStatus::try_from(v).ok())
        ),
        Some(Payload::TurnUpdate(u)) => format!(
            "TurnUpdate    turn={} status={}",
            u.sdk_turn_id,
            name(u.status, |v| TurnStatus::try_from(v).ok())
        ),
        Some(Payload::ItemUpdate(i)) => {
            let kind = ItemType::try_from(i.item_type)
                .map(|t| t.as_str_name().to_owned())
                .unwrap_or_else(|_| i.item_type.to_string());
            let status = name(i.status, |v| ItemStatus::try_from(v).ok()).to_uppercase();
            let mut line = format!("ItemUpdate    {kind} {status}");
            let completed = i.status == ItemStatus::Completed as i32;
            // RUNNING snapshots repeat the text; show it once, when complete.
            if let Some(text) = i.text.as_ref().filter(|_| completed) {
                line.push('\n');
                line.push_str(&indent(text));
            }
            if let Some(c) = &i.command_execution_item {
                line.push_str(&format!(
                    "\n      $ {}   (cwd {}, pid {})",
                    c.command, c.cwd, c.process_id
                ));
                if let Some(out) = &c.output {
                    line.push('\n');
                    line.push_str(&indent(out.trim_end()));
                }
            }
            line
        }
        Some(Payload::ThreadTokenUsageUpdate(u)) => {
            let t = u.total_usage.unwrap_or_default();
            format!(
                "TokenUsage    input={} output={} total={}",
                t.input_tokens, t.output_tokens, t.total_tokens
            )
        }
        Some(Payload::RequestError(e)) => format!("RequestError  {}", e.error_message),
        Some(Payload::SkillMpUpdate(s)) => {
            format!("SkillMpUpdate {} {}", s.agent_id, s.package_name)
        }
        Some(Payload::HeartbeatResponse(_)) => "HeartbeatResponse".to_owned(),
        Some(Payload::ApprovalRequest(a)) => format!("Approval?     {} {}", a.approval_id, a.title),
        Some(Payload::ApprovalResolved(a)) => format!(
            "Approved?     {} {}",
            a.approval_id,
            name(a.outcome, |v| {
                agent_runner_proto::runner::ApprovalOutcome::try_from(v).ok()
            })
        ),
        Some(Payload::ThreadNameUpdate(n)) => format!(
            "ThreadName    {} {}",
            n.thread_id,
            n.thread_name.as_deref().unwrap_or("(cleared)")
        ),
        Some(Payload::AgentSdkUpdate(s)) => format!("AgentSdk      {} status={}", s.name, s.status),
        Some(Payload::CodexDeviceCode(c)) => format!("CodexDeviceCode {}", c.device_code),
        None => "(empty)".to_owned(),
    };
    format!("[{rid}] {body}")
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sdk: Option<&str>, script: Option<&str>, prompt: Option<&str>) -> DemoArgs {
        DemoArgs {
            sdk: sdk.map(str::to_owned),
            script: None,
            script_text: script.map(str::to_owned),
            prompt: prompt.map(str::to_owned),
            log_level: None,
            protocol: Default::default(),
        }
    }

    #[test]
    fn script_is_a_file_whose_text_the_demo_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("demo.script");
        std::fs::write(&file, "say from the file\n").unwrap();
        let mut from_file = args(Some("scripted"), None, None);
        from_file.script = Some(file);
        let chosen = DemoSdk::choose(&from_file, false).unwrap();
        assert_eq!(chosen.message, "say from the file\n");
        let mut missing = args(None, None, None);
        missing.script = Some(dir.path().join("no-such.script"));
        let err = DemoSdk::choose(&missing, false).unwrap_err().to_string();
        assert!(
            err.starts_with("--script ") && err.contains("no-such.script"),
            "{err}"
        );
        let mut model = args(Some("code-agent"), None, None);
        model.script = Some(dir.path().join("demo.script"));
        let err = DemoSdk::choose(&model, false).unwrap_err().to_string();
        assert!(err.starts_with("--script is for the scripted SDK"), "{err}");
    }

    #[test]
    fn the_default_sdk_follows_the_environment() {
        let chosen = DemoSdk::choose(&args(None, None, None), false).unwrap();
        assert_eq!((chosen.name.as_str(), chosen.implicit), ("scripted", true));
        assert_eq!(chosen.message, SCRIPT);
        let chosen = DemoSdk::choose(&args(None, None, Some("hi")), true).unwrap();
        assert_eq!(chosen.name, "code-agent");
        assert_eq!(chosen.message, "hi");
        // Asked for: wins over the environment, and is not implicit.
        let chosen = DemoSdk::choose(&args(Some("scripted"), Some("say x"), None), true).unwrap();
        assert_eq!(
            chosen,
            DemoSdk {
                name: "scripted".into(),
                message: "say x".into(),
                implicit: false
            }
        );
    }

    #[test]
    fn options_the_sdk_would_ignore_are_refused() {
        let err = DemoSdk::choose(&args(Some("code-agent"), Some("say x"), None), false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--script is for the scripted SDK"), "{err}");
        // With a provider configured, --script used to be dropped silently.
        let err = DemoSdk::choose(&args(None, Some("say x"), None), true)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--script is for the scripted SDK"), "{err}");
        let err = DemoSdk::choose(&args(None, None, Some("hi")), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--prompt is for a model-driven SDK"),
            "{err}"
        );
        let err = DemoSdk::choose(&args(Some("gpt"), None, None), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an SDK this runner drives"), "{err}");
        let err = DemoSdk::choose(&args(Some("claude"), None, None), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean claude-code?"), "{err}");
    }
}

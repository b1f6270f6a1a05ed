//! `mock-control-plane serve --stdio`: a harness in any language drives the
//! mock through JSON lines. Each stdin line is a `ServerMessage` in protobuf
//! JSON (or a `{"command": ...}` control line); each stdout line is one event
//! (`listening`, `registered`, `connected`, `disconnected`, `message`,
//! `sent`, `dropped`, `error`). Messages written before a runner connects
//! are queued and delivered in order once one does. A mock serving several
//! runners takes a `"runner"` key on a line to say which one it is for, and
//! says whose each event is. At stdin EOF, lines already read are
//! still handled while a runner is connected; the mock then returns.
//!
//! See `README.md` for the exact format.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, Result};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::json::{
    client_message_to_json, outgoing_from_json, register_request_to_json, server_message_to_json,
};
use crate::plane::SeveralRunners;
use crate::state::{Registration, TimelineEvent};
use crate::versions::{Outgoing, Protocol};
use crate::{MockControlPlane, RunnerView};

/// One parsed stdin line. `Option<String>`: the runner it is for (a
/// `"runner"` key), when the mock serves several.
#[derive(Debug)]
enum Work {
    Send(Box<Outgoing>, Option<String>),
    DropConnection(Option<String>),
    Restart,
    SetAckMode(crate::AckMode),
    SequenceReport,
}

/// A stdin line: a control command or a ServerMessage.
fn parse_line(protocol: Protocol, line: &str) -> Result<Work> {
    let mut value: Value = serde_json::from_str(line).context("not valid JSON")?;
    let runner = match value.as_object_mut().and_then(|o| o.remove("runner")) {
        None => None,
        Some(Value::String(name)) => Some(name),
        Some(other) => anyhow::bail!("\"runner\" must be a runner's name, got {other}"),
    };
    if let Some(command) = value.get("command") {
        return match command.as_str() {
            Some("drop_connection") => Ok(Work::DropConnection(runner)),
            Some("restart") => Ok(Work::Restart),
            Some("ack_mode") => {
                let mode = value
                    .get("mode")
                    .and_then(Value::as_str)
                    .context("ack_mode needs \"mode\": on, off, never or late:MS")?;
                Ok(Work::SetAckMode(mode.parse().map_err(anyhow::Error::msg)?))
            }
            Some("sequence_report") => Ok(Work::SequenceReport),
            _ => {
                anyhow::bail!(
                    "unknown command {command} (known: \"drop_connection\", \"restart\", \"ack_mode\", \"sequence_report\")"
                )
            }
        };
    }
    Ok(Work::Send(
        Box::new(outgoing_from_json(protocol, value)?),
        runner,
    ))
}

/// The stdout line for one timeline event.
pub fn event_json(event: &TimelineEvent) -> Value {
    match event {
        TimelineEvent::Registered(registration) => registered_json(registration),
        TimelineEvent::Connected { stream, runner } => {
            with_runner(json!({"event": "connected", "stream": stream}), runner)
        }
        TimelineEvent::Disconnected { stream, runner } => {
            with_runner(json!({"event": "disconnected", "stream": stream}), runner)
        }
        TimelineEvent::Dropped(dropped) => with_runner(
            json!({
                "event": "dropped",
                "reason": dropped.reason,
                "message": client_message_to_json(&dropped.message),
            }),
            &dropped.runner,
        ),
        TimelineEvent::Received {
            index,
            message,
            violations,
        } => {
            let mut line = json!({
                "event": "message",
                "index": index,
                "message": client_message_to_json(message),
            });
            if let Some(v) = violations {
                line["violations"] = json!(v);
            }
            line
        }
        TimelineEvent::Sent(message) => {
            json!({"event": "sent", "message": server_message_to_json(message)})
        }
    }
}

/// `line` with `"runner": runner`, unless that is the only runner of an
/// unnamed mock (whose lines stay as they always were).
fn with_runner(mut line: Value, runner: &str) -> Value {
    if runner != crate::DEFAULT_RUNNER {
        line["runner"] = json!(runner);
    }
    line
}

/// The stdout line for `event`; on a mock with `named` runners, a received
/// message's line says which runner sent it.
fn line_of(plane: &MockControlPlane, named: bool, event: &TimelineEvent) -> Value {
    let line = event_json(event);
    match event {
        TimelineEvent::Received { index, .. } if named => match plane.runner_of(*index) {
            Some(runner) => with_runner(line, &runner),
            None => line,
        },
        _ => line,
    }
}

/// The `sequence_report` line: what the acknowledged-delivery check saw.
pub fn sequence_report_json(r: &crate::SequenceReport) -> Value {
    json!({
        "event": "sequence_report",
        "processed": r.processed,
        "duplicates": r.duplicates,
        "gaps": r.gaps.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
        "unnumbered": r.unnumbered,
        "acksSent": r.acks_sent,
    })
}

fn registered_json(registration: &Registration) -> Value {
    let mut line = match register_request_to_json(&registration.request) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    line.entry("agentSdks").or_insert_with(|| json!([]));
    line.insert("event".into(), json!("registered"));
    let metadata: Map<String, Value> = registration
        .metadata
        .iter()
        .map(|(k, v)| {
            let shown = if k == "authorization" {
                match v.split_once(' ') {
                    Some((scheme, _)) => format!("{scheme} <redacted>"),
                    None => "<redacted>".to_owned(),
                }
            } else {
                v.clone()
            };
            (k.clone(), Value::String(shown))
        })
        .collect();
    line.insert("metadata".into(), Value::Object(metadata));
    if let Some(v) = &registration.violations {
        line.insert("violations".into(), json!(v));
    }
    with_runner(Value::Object(line), &registration.runner)
}

async fn write_line<W: AsyncWrite + Unpin>(out: &mut W, value: &Value) -> Result<()> {
    let mut text = serde_json::to_string(value).context("encoding an output line")?;
    text.push('\n');
    out.write_all(text.as_bytes())
        .await
        .context("writing to stdout")?;
    out.flush().await.context("flushing stdout")
}

/// Handles the parsed lines in order, until the reader is done (or stdin
/// closed while a message could not be delivered).
async fn work(
    plane: &MockControlPlane,
    mut work_rx: mpsc::UnboundedReceiver<Work>,
    extra_tx: mpsc::UnboundedSender<Value>,
    eof: &CancellationToken,
    stdin_closed: &AtomicBool,
) {
    let error = |text: String| {
        let _ = extra_tx.send(json!({"event": "error", "error": text}));
    };
    while let Some(work) = work_rx.recv().await {
        match work {
            Work::Send(message, runner) => {
                let view = match runner.as_deref().map(|name| plane.runner(name)).transpose() {
                    Ok(view) => view,
                    Err(err) => {
                        error(format!("{err:#}"));
                        continue;
                    }
                };
                match deliver(plane, view, &message, eof, stdin_closed).await {
                    Delivery::Sent => {}
                    Delivery::Refused(err) => error(format!("{err:#}")),
                    Delivery::StdinClosed => {
                        let left = 1 + std::iter::from_fn(|| work_rx.try_recv().ok()).count();
                        error(format!(
                            "stdin closed with {left} line(s) not delivered: no runner connected"
                        ));
                        return;
                    }
                }
            }
            Work::DropConnection(None) => {
                plane.drop_stream();
            }
            Work::DropConnection(Some(name)) => match plane.runner(&name) {
                Ok(view) => {
                    view.drop_stream();
                }
                Err(err) => error(format!("{err:#}")),
            },
            Work::Restart => {
                if let Err(err) = plane.restart().await {
                    error(format!("restart: {err:#}"));
                }
            }
            Work::SetAckMode(mode) => plane.set_ack_mode(mode),
            Work::SequenceReport => {
                let _ = extra_tx.send(sequence_report_json(&plane.sequence_report()));
            }
        }
    }
}

/// How [`deliver`] ended.
enum Delivery {
    Sent,
    /// Waiting would not help (several runners connected, none named).
    Refused(anyhow::Error),
    /// Nobody to deliver to, and no more input coming.
    StdinClosed,
}

/// Sends `message` to `view`'s runner (`None`: the connected one), queued
/// until it is connected, and retried after a reconnect if the stream
/// closes under it.
async fn deliver(
    plane: &MockControlPlane,
    view: Option<RunnerView<'_>>,
    message: &Outgoing,
    eof: &CancellationToken,
    stdin_closed: &AtomicBool,
) -> Delivery {
    loop {
        let connected = async {
            match &view {
                Some(view) => view.wait_connected_forever().await,
                None => plane.wait_connected_forever().await,
            }
        };
        tokio::select! {
            () = connected => {}
            () = eof.cancelled() => {}
        }
        let is_connected = view
            .as_ref()
            .map_or_else(|| plane.is_connected(), |v| v.is_connected());
        if !is_connected && stdin_closed.load(Ordering::SeqCst) {
            return Delivery::StdinClosed;
        }
        let sent = match &view {
            Some(view) => view.send(message.clone()).await,
            None => plane.send(message.clone()).await,
        };
        match sent {
            Ok(()) => return Delivery::Sent,
            Err(err) if err.is::<SeveralRunners>() => return Delivery::Refused(err),
            Err(err) => tracing::debug!("send failed, waiting for a reconnect: {err:#}"),
        }
    }
}

/// Runs the stdio protocol until `input` ends (and the lines read before
/// have been handled), printing events to `output`.
pub async fn run<R, W>(plane: &MockControlPlane, input: R, mut output: W) -> Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (extra_tx, mut extra_rx) = mpsc::unbounded_channel::<Value>();
    let (work_tx, work_rx) = mpsc::unbounded_channel::<Work>();
    let eof = CancellationToken::new();
    let stdin_closed = AtomicBool::new(false);
    let protocol = plane.protocol();

    let reader = {
        let extra_tx = extra_tx.clone();
        let eof = eof.clone();
        let stdin_closed = &stdin_closed;
        async move {
            let mut lines = input.lines();
            let mut number = 0usize;
            loop {
                let line = match lines.next_line().await {
                    Ok(Some(line)) => line,
                    Ok(None) => break,
                    Err(err) => {
                        let _ = extra_tx.send(
                            json!({"event": "error", "error": format!("reading stdin: {err}")}),
                        );
                        break;
                    }
                };
                number += 1;
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                match parse_line(protocol, line) {
                    Ok(work) => {
                        let _ = work_tx.send(work);
                    }
                    Err(err) => {
                        tracing::warn!(line = number, "bad stdin line: {err:#}");
                        let _ = extra_tx.send(
                            json!({"event": "error", "line": number, "error": format!("{err:#}")}),
                        );
                    }
                }
            }
            stdin_closed.store(true, Ordering::SeqCst);
            eof.cancel();
        }
    };

    let worker = work(plane, work_rx, extra_tx.clone(), &eof, &stdin_closed);
    drop(extra_tx);

    // A mock with named runners says whose each message is.
    let named = plane.runner_names() != [crate::DEFAULT_RUNNER];
    let printer = async {
        write_line(
            &mut output,
            &json!({"event": "listening", "url": plane.url()}),
        )
        .await?;
        let mut cursor = 0usize;
        loop {
            tokio::select! {
                biased;
                extra = extra_rx.recv() => match extra {
                    Some(line) => write_line(&mut output, &line).await?,
                    None => break,
                },
                events = plane.wait_timeline(cursor, None) => {
                    cursor += events.len();
                    for event in &events {
                        write_line(&mut output, &line_of(plane, named, event)).await?;
                    }
                }
            }
        }
        // Reader and worker are done: print what happened meanwhile.
        let events = plane
            .wait_timeline(cursor, Some(std::time::Duration::ZERO))
            .await;
        for event in &events {
            write_line(&mut output, &line_of(plane, named, event)).await?;
        }
        anyhow::Ok(())
    };

    let (printed, (), ()) = tokio::join!(printer, reader, worker);
    printed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages_and_commands() {
        assert!(matches!(
            parse_line(Protocol::V02, r#"{"requestId":"r","heartbeatRequest":{}}"#),
            Ok(Work::Send(_, None))
        ));
        assert!(matches!(
            parse_line(Protocol::V02, r#"{"runner":"r1","requestId":"r","heartbeatRequest":{}}"#),
            Ok(Work::Send(_, Some(r))) if r == "r1"
        ));
        assert!(matches!(
            parse_line(Protocol::V02, r#"{"command":"drop_connection","runner":"r0"}"#),
            Ok(Work::DropConnection(Some(r))) if r == "r0"
        ));
        assert!(parse_line(Protocol::V02, r#"{"runner":1,"heartbeatRequest":{}}"#).is_err());
        assert!(matches!(
            parse_line(Protocol::V02, r#"{"command":"drop_connection"}"#),
            Ok(Work::DropConnection(None))
        ));
        assert!(matches!(
            parse_line(Protocol::V02, r#"{"command":"restart"}"#),
            Ok(Work::Restart)
        ));
        assert!(parse_line(Protocol::V02, r#"{"command":"explode"}"#).is_err());
        assert!(parse_line(Protocol::V02, r#"{"nope":1}"#).is_err());
        assert!(parse_line(Protocol::V02, "{").is_err());
    }

    #[test]
    fn registration_line_redacts_the_secret() {
        let registration = Registration {
            request: Default::default(),
            metadata: [
                ("authorization".to_owned(), "Bearer s3cret".to_owned()),
                ("x-runner".to_owned(), "r1".to_owned()),
            ]
            .into(),
            violations: None,
            runner: crate::DEFAULT_RUNNER.to_owned(),
        };
        let line = registered_json(&registration);
        assert_eq!(
            line,
            json!({
                "event": "registered",
                "agentSdks": [],
                "metadata": {"authorization": "Bearer <redacted>", "x-runner": "r1"}
            })
        );
    }
}

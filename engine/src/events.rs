//! The engine's event bus: every `AgentEvent` (sessions, generations, tools,
//! confirmations, external tasks, permissions) goes out on one bounded
//! broadcast channel; `SubscribeEvents` streams a filtered view of it. A
//! subscriber that falls behind loses the oldest events and is told how many
//! in a `WARNING` event (always delivered, whatever its filter).

use std::collections::HashMap;

use code_agent_proto::{AgentEvent, agent_event::EventType};
use futures::{Stream, StreamExt};
use tokio::sync::broadcast;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};

use crate::session::message::now_ms;

/// Sends events to every subscriber.
#[derive(Debug, Clone)]
pub struct EventBus {
    tx: broadcast::Sender<AgentEvent>,
}

impl EventBus {
    /// `capacity` events are buffered per subscriber.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self { tx }
    }

    /// Publishes one event (dropped when nobody listens).
    pub fn emit<I, K, V>(&self, kind: EventType, session_id: Option<&str>, message: &str, data: I)
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let event = AgentEvent {
            r#type: kind as i32,
            session_id: session_id.map(str::to_string),
            timestamp: now_ms(),
            message: message.to_string(),
            data: data
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect::<HashMap<_, _>>(),
        };
        let _ = self.tx.send(event);
    }

    /// A stream of the events that pass `filter`, from now on.
    pub fn subscribe(
        &self,
        filter: EventFilter,
    ) -> impl Stream<Item = AgentEvent> + Send + 'static {
        BroadcastStream::new(self.tx.subscribe()).filter_map(move |item| {
            let out = match item {
                Ok(event) => filter.matches(&event).then_some(event),
                Err(BroadcastStreamRecvError::Lagged(dropped)) => Some(AgentEvent {
                    r#type: EventType::Warning as i32,
                    session_id: filter.session_id.clone(),
                    timestamp: now_ms(),
                    message: format!("subscriber fell behind: {dropped} events were dropped"),
                    data: HashMap::from([("dropped".to_string(), dropped.to_string())]),
                }),
            };
            futures::future::ready(out)
        })
    }
}

/// Which events a subscriber wants.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub session_id: Option<String>,
    /// Empty: every type.
    pub types: Vec<i32>,
}

impl EventFilter {
    /// Accepts `EVENT_TYPE_TOOL_CALLED`, `TOOL_CALLED` or `tool_called`.
    pub fn parse(session_id: Option<String>, types: &[String]) -> Result<Self, String> {
        let mut parsed = Vec::new();
        for (i, name) in types.iter().enumerate() {
            let upper = name.trim().to_ascii_uppercase();
            let full = if upper.starts_with("EVENT_TYPE_") {
                upper
            } else {
                format!("EVENT_TYPE_{upper}")
            };
            let kind = EventType::from_str_name(&full)
                .filter(|k| *k != EventType::Unknown)
                .ok_or_else(|| format!("event_types[{i}]: unknown event type {name:?}"))?;
            parsed.push(kind as i32);
        }
        Ok(Self {
            session_id: session_id.filter(|s| !s.is_empty()),
            types: parsed,
        })
    }

    fn matches(&self, event: &AgentEvent) -> bool {
        if let Some(want) = &self.session_id
            && event.session_id.as_deref() != Some(want.as_str())
        {
            return false;
        }
        self.types.is_empty() || self.types.contains(&event.r#type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_names_are_lenient_and_checked() {
        let f =
            EventFilter::parse(None, &["tool_called".into(), "EVENT_TYPE_ERROR".into()]).unwrap();
        assert_eq!(
            f.types,
            vec![EventType::ToolCalled as i32, EventType::Error as i32]
        );
        let err = EventFilter::parse(None, &["ok".into(), "nope".into()]).unwrap_err();
        assert!(err.starts_with("event_types[0]"), "{err}");
    }

    #[tokio::test]
    async fn lagging_subscriber_gets_a_warning() {
        let bus = EventBus::new(2);
        let mut stream =
            Box::pin(bus.subscribe(EventFilter::parse(Some("s".into()), &[]).unwrap()));
        for i in 0..5 {
            bus.emit(
                EventType::Info,
                Some("s"),
                &format!("e{i}"),
                [("i", i.to_string())],
            );
        }
        let first = stream.next().await.unwrap();
        assert_eq!(first.r#type, EventType::Warning as i32);
        assert_eq!(first.data["dropped"], "3");
        assert_eq!(stream.next().await.unwrap().message, "e3");
    }
}

//! JSON-RPC 2.0 over the app-server's stdio, as codex 0.169.0 speaks it:
//! requests carry `"jsonrpc":"2.0"`, its responses and notifications omit
//! it; ids we send are numbers; server-to-client requests carry their own
//! ids (number or string) that we echo back.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sdk_process::{ChildError, ChildHandle, ResponseKey};
use serde_json::{Value, json};

/// JSON-RPC "method not found".
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;

/// The correlation key of a response line, `None` for anything else.
pub(crate) fn response_key() -> ResponseKey {
    Arc::new(|value: &Value| {
        let object = value.as_object()?;
        if object.contains_key("method")
            || !(object.contains_key("result") || object.contains_key("error"))
        {
            return None;
        }
        object.get("id").map(id_key)
    })
}

fn id_key(id: &Value) -> String {
    match id {
        Value::String(text) => format!("s:{text}"),
        other => other.to_string(),
    }
}

/// A line from the app-server that is not a response.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A server-to-client request: it must be answered.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// Valid JSON, but not a message we understand.
    Other(Value),
}

pub(crate) fn classify(value: Value) -> Incoming {
    let Value::Object(mut object) = value else {
        return Incoming::Other(value);
    };
    let Some(Value::String(method)) = object.remove("method") else {
        return Incoming::Other(Value::Object(object));
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    match object.remove("id") {
        Some(id) if !id.is_null() => Incoming::Request { id, method, params },
        _ => Incoming::Notification { method, params },
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RpcError {
    /// The app-server answered with an error.
    #[error("{method} failed: {message}")]
    Server {
        method: String,
        code: i64,
        message: String,
    },
    /// The process failed, went away, or did not answer in time.
    #[error("{method}: {source}")]
    Child {
        method: String,
        #[source]
        source: ChildError,
    },
}

impl RpcError {
    /// The process is unusable (as opposed to a refused request).
    pub(crate) fn is_transport(&self) -> bool {
        matches!(self, Self::Child { .. })
    }

    pub(crate) fn server_message(&self) -> Option<&str> {
        match self {
            Self::Server { message, .. } => Some(message),
            Self::Child { .. } => None,
        }
    }
}

/// Calls into one app-server.
#[derive(Debug)]
pub(crate) struct Rpc {
    handle: ChildHandle,
    next_id: AtomicI64,
    timeout: Duration,
}

impl Rpc {
    pub(crate) fn new(handle: ChildHandle, timeout: Duration) -> Self {
        Self {
            handle,
            next_id: AtomicI64::new(1),
            timeout,
        }
    }

    pub(crate) fn handle(&self) -> &ChildHandle {
        &self.handle
    }

    /// Call `method` and return its `result`.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.call_within(method, params, self.timeout).await
    }

    pub(crate) async fn call_within(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut response = self
            .handle
            .request(id_key(&json!(id)), &request, timeout)
            .await
            .map_err(|source| RpcError::Child {
                method: method.to_owned(),
                source,
            })?;
        if let Some(error) = response.get("error") {
            return Err(RpcError::Server {
                method: method.to_owned(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
                    .to_owned(),
            });
        }
        Ok(response
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }

    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), ChildError> {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        self.handle.send(&message).await
    }

    /// Answer a server-to-client request.
    pub(crate) async fn respond(&self, id: Value, result: Value) -> Result<(), ChildError> {
        self.handle
            .send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    /// Refuse a server-to-client request.
    pub(crate) async fn respond_error(
        &self,
        id: Value,
        code: i64,
        message: &str,
    ) -> Result<(), ChildError> {
        self.handle
            .send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_keyed_and_the_rest_classified() {
        let key = response_key();
        assert_eq!(key(&json!({"id": 3, "result": {}})), Some("3".into()));
        assert_eq!(key(&json!({"id": "a", "error": {}})), Some("s:a".into()));
        assert_eq!(key(&json!({"id": 3, "method": "x", "params": {}})), None);
        assert_eq!(key(&json!({"method": "x"})), None);
        assert!(matches!(
            classify(
                json!({"id": 0, "method": "item/commandExecution/requestApproval", "params": {}})
            ),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            classify(json!({"method": "turn/started", "params": {}})),
            Incoming::Notification { .. }
        ));
        assert!(matches!(classify(json!([1, 2])), Incoming::Other(_)));
        assert!(matches!(classify(json!({"foo": 1})), Incoming::Other(_)));
    }
}

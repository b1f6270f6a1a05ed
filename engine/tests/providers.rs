//! The provider store: persistence in `providers.json` (0600, atomic,
//! reloaded on open), keys from config or env and always redacted on the way
//! out, the built-in `openai` provider, default-model and remove semantics,
//! and a resolved provider driving the client against the mock server.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use code_agent_engine::llm::{
    ChatMessage, ChatModel, ChatRequest, ClientOptions, OpenAiClient, StreamEvent,
};
use code_agent_engine::providers::{
    EnvLookup, OPENAI_DEFAULT_BASE_URL, PROVIDERS_FILE, ProviderError, ProviderStore, REDACTED,
};
use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::{ModelInfo, ProviderInfo};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

fn env(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Arc::new(move |name| map.get(name).cloned())
}

fn no_env() -> EnvLookup {
    env(&[])
}

fn model(id: &str) -> ModelInfo {
    ModelInfo {
        id: id.into(),
        tool_call: true,
        ..ModelInfo::default()
    }
}

fn provider(
    name: &str,
    key: Option<&str>,
    base_url: Option<&str>,
    models: &[&str],
) -> ProviderInfo {
    ProviderInfo {
        name: name.into(),
        api_key: key.map(str::to_owned),
        base_url: base_url.map(str::to_owned),
        models: models.iter().map(|m| model(m)).collect(),
    }
}

#[test]
fn providers_persist_across_reopen_with_mode_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect("open");
    let added = store
        .add(provider(
            "vllm",
            Some("sk-vllm-secret"),
            Some("http://127.0.0.1:8000/v1"),
            &["qwen", "llama"],
        ))
        .expect("add");
    assert_eq!(added.api_key.as_deref(), Some(REDACTED));
    store.set_default("vllm", "llama").expect("default");

    let path = dir.path().join(PROVIDERS_FILE);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    }
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, [PROVIDERS_FILE]);
    drop(store);

    let reopened = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect("reopen");
    let got = reopened.get("vllm").expect("persisted");
    assert_eq!(got.base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));
    assert_eq!(got.api_key.as_deref(), Some(REDACTED));
    let ids: Vec<_> = got.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["qwen", "llama"]);
    let default = reopened.get_default();
    assert_eq!(
        (default.provider.as_deref(), default.model.as_deref()),
        (Some("vllm"), Some("llama"))
    );
    let resolved = reopened.resolve(None, None).expect("resolve");
    assert_eq!(resolved.model, "llama");
    assert_eq!(resolved.api_key.as_deref(), Some("sk-vllm-secret"));
    assert!(!format!("{resolved:?}").contains("sk-vllm-secret"));
}

#[test]
fn without_a_state_dir_nothing_is_written() {
    let store = ProviderStore::open_with_env(None, no_env()).expect("open");
    store
        .add(provider(
            "ollama",
            None,
            Some("http://127.0.0.1:11434/v1"),
            &["llama3"],
        ))
        .expect("add");
    assert!(store.path().is_none());
    assert_eq!(store.list().providers.len(), 1);
}

#[cfg(unix)]
#[test]
fn a_world_readable_file_is_narrowed_on_open() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(PROVIDERS_FILE);
    std::fs::write(&path, r#"{"version":1,"providers":[{"name":"x","base_url":"http://h/v1","models":[{"id":"m"}]}]}"#)
        .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let store = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect("open");
    assert_eq!(store.get("x").expect("loaded").models[0].id, "m");
    let mode = std::fs::metadata(&path).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_corrupt_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(PROVIDERS_FILE), "{ not json").expect("write");
    let err = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect_err("corrupt");
    assert!(matches!(err, ProviderError::Storage { .. }), "{err:?}");
    assert!(err.to_string().contains(PROVIDERS_FILE), "{err}");
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::Internal);
}

#[test]
fn keys_and_base_urls_come_from_env_when_not_configured() {
    let store = ProviderStore::open_with_env(
        None,
        env(&[
            ("OPEN_ROUTER_API_KEY", "sk-or-from-env"),
            ("OPEN_ROUTER_BASE_URL", "https://openrouter.ai/api/v1"),
        ]),
    )
    .expect("open");
    store
        .add(provider(
            "open-router",
            None,
            None,
            &["anthropic/claude-sonnet-4"],
        ))
        .expect("add");
    let shown = store.get("open-router").expect("get");
    assert_eq!(
        shown.api_key.as_deref(),
        Some(REDACTED),
        "an env key shows as set"
    );
    assert_eq!(
        shown.base_url.as_deref(),
        Some("https://openrouter.ai/api/v1")
    );
    let r = store.resolve(Some("open-router"), None).expect("resolve");
    assert_eq!(r.api_key.as_deref(), Some("sk-or-from-env"));
    assert_eq!(r.base_url, "https://openrouter.ai/api/v1");
    assert_eq!(r.model, "anthropic/claude-sonnet-4");

    // A configured key and a model's own key win over the env.
    store
        .update(ProviderInfo {
            name: "open-router".into(),
            api_key: Some("sk-or-config".into()),
            ..ProviderInfo::default()
        })
        .expect("update");
    let r = store.resolve(Some("open-router"), None).expect("resolve");
    assert_eq!(r.api_key.as_deref(), Some("sk-or-config"));
    let mut special = model("special");
    special.api_key = Some("sk-model-key".into());
    special.base_url = Some("https://special.example/v1".into());
    store
        .update(ProviderInfo {
            name: "open-router".into(),
            models: vec![model("anthropic/claude-sonnet-4"), special],
            ..ProviderInfo::default()
        })
        .expect("update models");
    let r = store
        .resolve(None, Some("special"))
        .expect("resolve by model");
    assert_eq!(r.provider, "open-router");
    assert_eq!(r.api_key.as_deref(), Some("sk-model-key"));
    assert_eq!(r.base_url, "https://special.example/v1");
}

#[test]
fn a_provider_without_base_url_anywhere_cannot_resolve() {
    let store = ProviderStore::open_with_env(None, no_env()).expect("open");
    store
        .add(provider("local", None, None, &["m"]))
        .expect("add");
    let err = store.resolve(Some("local"), None).expect_err("no base url");
    assert!(err.to_string().contains("LOCAL_BASE_URL"), "{err}");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::FailedPrecondition
    );
}

#[test]
fn builtin_openai_comes_from_env() {
    let store = ProviderStore::open_with_env(None, env(&[("OPENAI_API_KEY", "sk-openai-env")]))
        .expect("open");
    let list = store.list();
    assert_eq!(list.providers.len(), 1);
    let openai = &list.providers[0];
    assert_eq!(openai.name, "openai");
    assert_eq!(openai.api_key.as_deref(), Some(REDACTED));
    assert_eq!(openai.base_url.as_deref(), Some(OPENAI_DEFAULT_BASE_URL));
    assert_eq!(openai.models[0].id, "gpt-4o-mini");
    assert_eq!(list.default_provider.as_deref(), Some("openai"));
    assert_eq!(list.default_model.as_deref(), Some("gpt-4o-mini"));
    let r = store.resolve(None, None).expect("resolve");
    assert_eq!(
        (
            r.provider.as_str(),
            r.model.as_str(),
            r.base_url.as_str(),
            r.api_key.as_deref()
        ),
        (
            "openai",
            "gpt-4o-mini",
            OPENAI_DEFAULT_BASE_URL,
            Some("sk-openai-env")
        )
    );

    let store = ProviderStore::open_with_env(
        None,
        env(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ("CODE_AGENT_MODELS", "qwen3-coder,gpt-oss"),
        ]),
    )
    .expect("open");
    let models: Vec<_> = store.models().into_iter().map(|(p, m)| (p, m.id)).collect();
    assert_eq!(
        models,
        [
            ("openai".to_string(), "qwen3-coder".to_string()),
            ("openai".to_string(), "gpt-oss".to_string())
        ]
    );
    let r = store.resolve(None, Some("gpt-oss")).expect("resolve");
    assert_eq!(r.api_key, None, "no key anywhere: none sent (e.g. Ollama)");
    assert_eq!(r.base_url, "http://127.0.0.1:9/v1");

    // The env provider cannot be removed; with nothing configured there is no default.
    let err = store.remove("openai").expect_err("builtin");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::InvalidArgument
    );
    let empty = ProviderStore::open_with_env(None, no_env()).expect("open");
    assert!(empty.list().providers.is_empty());
    let err = empty.resolve(None, None).expect_err("nothing configured");
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
}

#[test]
fn keys_are_redacted_everywhere_and_redaction_round_trips() {
    let store = ProviderStore::open_with_env(None, no_env()).expect("open");
    let mut m = model("m1");
    m.api_key = Some("sk-model-secret".into());
    let mut info = provider("p", Some("sk-provider-secret"), Some("http://h/v1"), &[]);
    info.models = vec![m];
    store.add(info).expect("add");

    let listed = format!(
        "{:?} {:?} {:?}",
        store.list(),
        store.models(),
        store.get("p")
    );
    assert!(!listed.contains("sk-provider-secret"), "{listed}");
    assert!(!listed.contains("sk-model-secret"), "{listed}");
    assert!(!format!("{store:?}").contains("secret"));

    // A client sends back what it was shown: the keys stay.
    let shown = store.get("p").expect("get");
    assert_eq!(shown.models[0].api_key.as_deref(), Some(REDACTED));
    store.update(shown).expect("update");
    let r = store.resolve(Some("p"), Some("m1")).expect("resolve");
    assert_eq!(r.api_key.as_deref(), Some("sk-model-secret"));
    store
        .update(ProviderInfo {
            name: "p".into(),
            models: vec![model("m1")],
            ..ProviderInfo::default()
        })
        .expect("drop the model key");
    let r = store.resolve(Some("p"), Some("m1")).expect("resolve");
    assert_eq!(r.api_key.as_deref(), Some("sk-provider-secret"));
    // An empty key clears it.
    store
        .update(ProviderInfo {
            name: "p".into(),
            api_key: Some(String::new()),
            ..ProviderInfo::default()
        })
        .expect("clear");
    assert_eq!(
        store.resolve(Some("p"), None).expect("resolve").api_key,
        None
    );
    assert_eq!(store.get("p").expect("get").api_key, None);
}

#[test]
fn default_and_remove_semantics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect("open");
    store
        .add(provider("a", None, Some("http://a/v1"), &["a1", "a2"]))
        .expect("add a");
    store
        .add(provider("b", None, Some("http://b/v1"), &["b1"]))
        .expect("add b");

    // Without a stored default: the first provider and its first model.
    let d = store.get_default();
    assert_eq!(
        (d.provider.as_deref(), d.model.as_deref()),
        (Some("a"), Some("a1"))
    );

    assert!(matches!(
        store.set_default("zzz", "a1"),
        Err(ProviderError::NotFound(_))
    ));
    let err = store
        .set_default("a", "b1")
        .expect_err("model of another provider");
    assert!(
        matches!(err, ProviderError::ModelNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::NotFound);
    assert!(matches!(
        store.set_default("a", " "),
        Err(ProviderError::Invalid(_))
    ));

    store.set_default("b", "b1").expect("set");
    let d = store.get_default();
    assert_eq!(
        (d.provider.as_deref(), d.model.as_deref()),
        (Some("b"), Some("b1"))
    );
    assert_eq!(
        store.resolve(None, None).expect("resolve").base_url,
        "http://b/v1"
    );
    // A model alone picks the provider listing it.
    assert_eq!(
        store.resolve(None, Some("a2")).expect("resolve").provider,
        "a"
    );
    // An unlisted model goes to the default provider as is.
    let r = store.resolve(None, Some("custom")).expect("resolve");
    assert_eq!((r.provider.as_str(), r.model.as_str()), ("b", "custom"));

    // Removing the default provider clears the default, on disk too.
    store.remove("b").expect("remove");
    assert!(matches!(store.get("b"), Err(ProviderError::NotFound(_))));
    let reopened = ProviderStore::open_with_env(Some(dir.path()), no_env()).expect("reopen");
    let d = reopened.get_default();
    assert_eq!(
        (d.provider.as_deref(), d.model.as_deref()),
        (Some("a"), Some("a1"))
    );
    assert!(matches!(
        reopened.remove("b"),
        Err(ProviderError::NotFound(_))
    ));
    assert!(matches!(
        reopened.resolve(Some("b"), None),
        Err(ProviderError::NotFound(_))
    ));
}

#[test]
fn invalid_input_is_refused_naming_the_field() {
    let store = ProviderStore::open_with_env(None, no_env()).expect("open");
    for (info, field) in [
        (provider("", None, None, &[]), "provider.name"),
        (provider("../etc", None, None, &[]), "provider.name"),
        (
            provider("p", None, Some("ftp://h"), &[]),
            "provider.base_url",
        ),
        (
            provider("p", None, Some("https://u:pw@h/v1"), &[]),
            "provider.base_url",
        ),
        (
            provider("p", None, None, &["a", "a"]),
            "provider.models[1].id",
        ),
        (provider("p", None, None, &[""]), "provider.models[0].id"),
    ] {
        let err = store.add(info).expect_err(field);
        assert!(err.to_string().contains(field), "{err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::InvalidArgument
        );
    }
    store.add(provider("p", None, None, &[])).expect("add");
    let err = store
        .add(provider("p", None, None, &[]))
        .expect_err("twice");
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::AlreadyExists);
    assert!(matches!(
        store.update(provider("nope", None, None, &[])),
        Err(ProviderError::NotFound(_))
    ));
}

#[test]
fn a_stored_openai_shadows_the_builtin_until_removed() {
    let store =
        ProviderStore::open_with_env(None, env(&[("OPENAI_API_KEY", "sk-env")])).expect("open");
    store
        .update(ProviderInfo {
            name: "openai".into(),
            base_url: Some("http://proxy.local/v1".into()),
            ..ProviderInfo::default()
        })
        .expect("update builtin");
    let r = store.resolve(Some("openai"), None).expect("resolve");
    assert_eq!(r.base_url, "http://proxy.local/v1");
    assert_eq!(
        r.api_key.as_deref(),
        Some("sk-env"),
        "env key still applies"
    );
    assert_eq!(r.model, "gpt-4o-mini", "models copied from the builtin");
    store.remove("openai").expect("remove stored copy");
    let r = store.resolve(Some("openai"), None).expect("builtin again");
    assert_eq!(r.base_url, OPENAI_DEFAULT_BASE_URL);
}

#[tokio::test]
async fn a_resolved_provider_drives_the_client() {
    let mock =
        MockLlm::start_with_api_key(vec![MockReply::text("hello from mock")], "sk-mock").await;
    let store = ProviderStore::open_with_env(
        None,
        env(&[
            ("OPENAI_BASE_URL", &mock.base_url()),
            ("OPENAI_API_KEY", "sk-mock"),
        ]),
    )
    .expect("open");
    let r = store.resolve(None, None).expect("resolve");
    let client = OpenAiClient::new(&r.base_url, r.api_key.clone(), ClientOptions::default())
        .expect("client");
    let stream = client
        .stream(
            ChatRequest {
                model: r.model.clone(),
                messages: vec![ChatMessage::user("hi")],
                ..ChatRequest::default()
            },
            CancellationToken::new(),
        )
        .await
        .expect("stream");
    let events: Vec<_> = stream.collect().await;
    match events.last() {
        Some(Ok(StreamEvent::Finished { message, .. })) => {
            assert_eq!(message.content, "hello from mock")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(mock.requests()[0]["model"], "gpt-4o-mini");
}

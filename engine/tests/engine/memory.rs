//! Memory: the RPCs on real SQLite files, ranking, restarts, and the
//! `memory_store` / `memory_search` tools called by the model in a turn.

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::*;
use serde_json::json;

use crate::common::*;

fn item(content: &str, kind: MemoryType, importance: f32, tags: &[&str]) -> MemoryItem {
    MemoryItem {
        content: content.into(),
        memory_type: kind as i32,
        importance,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
}

async fn store(h: &mut Harness, s: &str, memory: MemoryItem) -> String {
    h.client
        .store_memory(StoreMemoryRequest {
            session_id: s.into(),
            memory: Some(memory),
        })
        .await
        .unwrap()
        .into_inner()
        .memory_id
}

async fn search(h: &mut Harness, request: SearchMemoriesRequest) -> SearchMemoriesResponse {
    h.client
        .search_memories(request)
        .await
        .unwrap()
        .into_inner()
}

async fn stats(h: &mut Harness, s: &str) -> MemoryStats {
    h.client
        .get_memory_stats(GetMemoryStatsRequest {
            session_id: s.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap()
}

#[tokio::test]
async fn search_ranks_by_relevance_importance_and_recency() {
    let mut h = Harness::start(vec![]).await;
    let s = h.session().await;
    let now = chrono_now_ms();
    let weak = store(
        &mut h,
        &s,
        item(
            "the database runs on port 5432",
            MemoryType::Semantic,
            0.2,
            &["db"],
        ),
    )
    .await;
    let strong = store(
        &mut h,
        &s,
        item(
            "database migrations: run make migrate before the database tests",
            MemoryType::Procedural,
            0.9,
            &["db", "howto"],
        ),
    )
    .await;
    let other = store(
        &mut h,
        &s,
        item("the user prefers tabs", MemoryType::Semantic, 1.0, &[]),
    )
    .await;
    let mut old = item(
        "database backup failed last month",
        MemoryType::Episodic,
        0.2,
        &["db"],
    );
    old.timestamp = now - 30 * 86_400_000;
    let old = store(&mut h, &s, old).await;

    let found = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            query: Some("database".into()),
            ..Default::default()
        },
    )
    .await;
    let ids: Vec<_> = found.memories.iter().map(|m| m.id.clone()).collect();
    // "tabs" does not mention the database; the important one with the word
    // twice is first; of the two weak ones the recent one wins.
    assert_eq!(ids, vec![strong.clone(), weak.clone(), old.clone()]);
    assert_eq!(found.total_count, 3);

    let tagged = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            tags: vec!["db".into(), "howto".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(tagged.memories.len(), 1);
    assert_eq!(tagged.memories[0].id, strong);

    let important = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            min_importance: Some(0.5),
            ..Default::default()
        },
    )
    .await;
    let ids: Vec<_> = important.memories.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids, vec![other.clone(), strong.clone()]);

    let recent = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            recent_only: true,
            limit: 2,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(recent.total_count, 3, "the month-old memory is not recent");
    assert_eq!(recent.memories.len(), 2);
    retrieval_counts_accesses(&mut h, &s, &weak).await;
    clearing_short_term_memories_forgets_them(&mut h, &s).await;
}

/// Every retrieval counts an access; an unknown id finds nothing.
async fn retrieval_counts_accesses(h: &mut Harness, s: &str, id: &str) {
    for expected in 1..=2u32 {
        let got = h
            .client
            .retrieve_memory(RetrieveMemoryRequest {
                session_id: s.into(),
                memory_id: id.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .memory
            .unwrap();
        assert_eq!(got.access_count, expected);
        assert!(got.last_accessed.is_some());
        assert_eq!(got.tags, vec!["db".to_string()]);
    }
    let missing = h
        .client
        .retrieve_memory(RetrieveMemoryRequest {
            session_id: s.into(),
            memory_id: "nope".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(missing.memory.is_none());
}

/// Of the three long-term memories and the short-term one, clearing the
/// short term removes the latter, from the counts and from search.
async fn clearing_short_term_memories_forgets_them(h: &mut Harness, s: &str) {
    let st = stats(h, s).await;
    assert_eq!(
        (st.long_term_count, st.short_term_count, st.working_count),
        (3, 1, 0)
    );
    let cleared = h
        .client
        .clear_memories(ClearMemoriesRequest {
            session_id: s.into(),
            clear_short_term: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cleared.cleared_count, 1);
    let st = stats(h, s).await;
    assert_eq!((st.long_term_count, st.short_term_count), (3, 0));
    let gone = search(
        h,
        SearchMemoriesRequest {
            session_id: s.into(),
            query: Some("backup".into()),
            ..Default::default()
        },
    )
    .await;
    assert!(
        gone.memories.is_empty(),
        "the FTS index forgets cleared memories"
    );
}

#[tokio::test]
async fn bad_requests_name_the_field() {
    let mut h = Harness::start(vec![]).await;
    let s = h.session().await;
    let err = h
        .client
        .store_memory(StoreMemoryRequest {
            session_id: s.clone(),
            memory: Some(item("x", MemoryType::Working, 3.0, &[])),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with("memory.importance"),
        "{}",
        err.message()
    );
    let err = h
        .client
        .clear_memories(ClearMemoriesRequest {
            session_id: s.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("clear_long_term"),
        "{}",
        err.message()
    );
    let err = h
        .client
        .get_memory_stats(GetMemoryStatsRequest {
            session_id: "missing".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn file_sessions_keep_memories_across_a_restart_memory_sessions_do_not() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("t1", "todo", json!({"todos": []})),
        MockReply::text("done"),
    ])
    .await;
    let file = h.session_with(h.config(StorageType::File)).await;
    let mem = h.session().await;
    // A session whose model uses tools but never memory gets no database.
    let quiet = h.session_with(h.config(StorageType::File)).await;
    h.turn(&quiet, "list nothing").await;
    assert!(
        !h.state
            .path()
            .join(format!("memory/{quiet}.sqlite3"))
            .exists()
    );
    store(
        &mut h,
        &file,
        item("kept across restarts", MemoryType::Semantic, 0.7, &["k"]),
    )
    .await;
    store(
        &mut h,
        &mem,
        item("lost on restart", MemoryType::Semantic, 0.7, &[]),
    )
    .await;
    assert!(
        h.state
            .path()
            .join(format!("memory/{file}.sqlite3"))
            .exists()
    );
    assert!(
        !h.state
            .path()
            .join(format!("memory/{mem}.sqlite3"))
            .exists()
    );
    let (mock, workspace, state) = h.stop().await;

    let mut h = Harness::start_on(mock, workspace, state).await;
    let found = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: file.clone(),
            query: Some("restarts".into()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(found.memories.len(), 1);
    assert_eq!(found.memories[0].content, "kept across restarts");
    assert_eq!(found.memories[0].tags, vec!["k".to_string()]);
    // The MEMORY session itself is gone, and with it its memories.
    let err = h
        .client
        .get_memory_stats(GetMemoryStatsRequest { session_id: mem })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    // Destroying the FILE session deletes its memory file.
    h.destroy(&file).await;
    assert!(
        !h.state
            .path()
            .join(format!("memory/{file}.sqlite3"))
            .exists()
    );
}

#[tokio::test]
async fn memories_follow_a_session_that_changes_storage() {
    let mut h = Harness::start(vec![]).await;
    let s = h.session().await;
    store(
        &mut h,
        &s,
        item("moved to disk", MemoryType::Working, 0.5, &[]),
    )
    .await;
    let file = h.state.path().join(format!("memory/{s}.sqlite3"));
    assert!(!file.exists());
    let configure = |storage| ConfigureSessionRequest {
        session_id: s.clone(),
        config: Some(h.config(storage)),
    };
    let to_file = configure(StorageType::File);
    let to_memory = configure(StorageType::Memory);
    h.client.configure_session(to_file).await.unwrap();
    assert!(file.exists());
    let (mock, workspace, state) = h.stop().await;
    let mut h = Harness::start_on(mock, workspace, state).await;
    assert_eq!(
        stats(&mut h, &s).await.working_count,
        1,
        "kept across the restart"
    );
    h.client.configure_session(to_memory).await.unwrap();
    assert!(!file.exists(), "a MEMORY session keeps nothing on disk");
    let found = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            query: Some("disk".into()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(found.memories.len(), 1, "still there, in memory");
}

#[tokio::test]
async fn the_model_stores_and_searches_memories_in_a_turn() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call(
            "m1",
            "memory_store",
            json!({"content": "the tests need REDIS_URL set", "memory_type": "procedural", "importance": 0.8, "tags": ["tests"]}),
        ),
        MockReply::tool_call("m2", "memory_search", json!({"query": "redis"})),
        MockReply::text("noted"),
    ])
    .await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut h = Harness::start_on(mock, workspace, state).await;
    let s = h.session().await;
    let chunks = h.turn(&s, "remember how to run the tests").await;
    let results = results(&chunks);
    assert_eq!(results.len(), 2);
    assert!(results[0].success, "{:?}", results[0]);
    assert!(
        results[1].output.contains("the tests need REDIS_URL set"),
        "{}",
        results[1].output
    );
    assert!(results[1].output.contains("procedural"));
    // The RPCs see what the model stored.
    let st = stats(&mut h, &s).await;
    assert_eq!(st.long_term_count, 1);
    let found = search(
        &mut h,
        SearchMemoriesRequest {
            session_id: s.clone(),
            tags: vec!["tests".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(found.memories[0].importance, 0.8);
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

//! Planning: execution plans and goals. The model writes a plan
//! either through `CreatePlan` (structured output against [`plan::schema`],
//! in `service/planning.rs`) or by calling the `plan` tool ([`tool`]) with
//! the same document; both land in the session's [`SessionPlans`] under a
//! plan id `plan-N` (N counts the session's plans from 1). A FILE
//! session's plans are also written to `<state-dir>/plans/<session>.json`
//! (the documents the model gave, converted again on load), so they survive
//! restarts; a MEMORY session's live as long as the engine.

pub mod goal;
pub mod plan;
pub mod tool;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use code_agent_proto::ExecutionPlan;
use serde::{Deserialize, Serialize};

/// Plans kept per session; a newer one pushes out the oldest.
pub const MAX_PLANS: usize = 32;

#[derive(Default, Serialize, Deserialize)]
struct Saved {
    next: u64,
    plans: Vec<SavedPlan>,
}

#[derive(Serialize, Deserialize)]
struct SavedPlan {
    id: String,
    doc: serde_json::Value,
}

#[derive(Default)]
struct State {
    next: u64,
    plans: Vec<(String, ExecutionPlan, serde_json::Value)>,
    /// Where they are written (FILE sessions with a state dir).
    file: Option<PathBuf>,
}

/// One session's plans, oldest first.
#[derive(Default)]
pub struct SessionPlans {
    state: Mutex<State>,
}

impl std::fmt::Debug for SessionPlans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPlans").finish_non_exhaustive()
    }
}

fn write(path: &Path, state: &State) {
    let saved = Saved {
        next: state.next,
        plans: state
            .plans
            .iter()
            .map(|(id, _, doc)| SavedPlan {
                id: id.clone(),
                doc: doc.clone(),
            })
            .collect(),
    };
    let result = (|| -> Result<(), String> {
        let bytes = serde_json::to_vec(&saved).map_err(|e| e.to_string())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(|e| e.to_string())?;
        tmp.persist(path).map_err(|e| e.error.to_string())?;
        Ok(())
    })();
    if let Err(error) = result {
        tracing::warn!(path = %path.display(), %error, "plans not saved");
    }
}

impl SessionPlans {
    /// Stores `plan` (converted from the document `doc`); its id.
    pub fn add(&self, plan: ExecutionPlan, doc: serde_json::Value) -> String {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.next += 1;
        let id = format!("plan-{}", state.next);
        state.plans.push((id.clone(), plan, doc));
        if state.plans.len() > MAX_PLANS {
            state.plans.remove(0);
        }
        if let Some(file) = &state.file {
            write(file, &state);
        }
        id
    }

    /// The plan `id`, or the latest for an empty id or `latest`.
    pub fn get(&self, id: &str) -> Option<(String, ExecutionPlan)> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let found = match id.trim() {
            "" | "latest" => state.plans.last(),
            id => state.plans.iter().find(|(pid, _, _)| pid == id),
        };
        found.map(|(id, plan, _)| (id.clone(), plan.clone()))
    }

    /// Writes to `file` from now on (and now), or stops writing and deletes
    /// the file it wrote to.
    fn set_file(&self, file: Option<PathBuf>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match (&file, state.file.take()) {
            (Some(new), _) => write(new, &state),
            (None, Some(old)) => remove_file(&old),
            (None, None) => {}
        }
        state.file = file;
    }

    fn load(path: &Path) -> Self {
        let mut state = State::default();
        match std::fs::read(path) {
            Ok(bytes) => match serde_json::from_slice::<Saved>(&bytes) {
                Ok(saved) => {
                    state.next = saved.next;
                    for SavedPlan { id, doc } in saved.plans {
                        match plan::from_json(&doc) {
                            Ok(plan) => state.plans.push((id, plan, doc)),
                            Err(error) => tracing::warn!(%id, %error, "skipping a saved plan"),
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "unreadable plans file")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(path = %path.display(), %error, "unreadable plans file"),
        }
        state.file = Some(path.to_path_buf());
        Self {
            state: Mutex::new(state),
        }
    }
}

fn remove_file(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "plans file not deleted");
    }
}

/// Every session's plans.
#[derive(Debug, Default)]
pub struct PlanRegistry {
    dir: Option<PathBuf>,
    sessions: Mutex<HashMap<String, Arc<SessionPlans>>>,
}

impl PlanRegistry {
    /// FILE sessions' plans go under `<state_dir>/plans` (if any).
    pub fn new(state_dir: Option<&Path>) -> Self {
        Self {
            dir: state_dir.map(|d| d.join("plans")),
            sessions: Mutex::default(),
        }
    }

    fn path_of(&self, id: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{id}.json")))
    }

    /// Session `id`'s plans (`id` already validated): loaded from its file
    /// on first use when `file_backed`, else empty.
    pub fn for_session(&self, id: &str, file_backed: bool) -> Arc<SessionPlans> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .entry(id.to_string())
            .or_insert_with(|| match self.path_of(id).filter(|_| file_backed) {
                Some(path) => Arc::new(SessionPlans::load(&path)),
                None => Arc::default(),
            })
            .clone()
    }

    /// Session `id` became FILE (`file_backed`) or MEMORY.
    pub fn storage_changed(&self, id: &str, file_backed: bool) {
        let plans = self.for_session(id, file_backed);
        plans.set_file(self.path_of(id).filter(|_| file_backed));
    }

    /// Forgets a destroyed session's plans (its file too).
    pub fn remove(&self, id: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(path) = self.path_of(id) {
            remove_file(&path);
        }
    }
}

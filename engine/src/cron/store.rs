//! Where cron jobs live: `<state-dir>/cron/jobs.json` (mode 0600), the jobs
//! with their bounded history, replaced atomically after every change.
//! Without a state dir jobs live in memory only.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use code_agent_proto::CronExecution;
use serde::{Deserialize, Serialize};

/// A job as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    /// Unique id (UUID).
    pub id: String,
    /// Unique name.
    pub name: String,
    /// The five-field expression.
    pub schedule: String,
    /// The shell command.
    pub command: String,
    /// Paused jobs are not scheduled (they can still be run by hand).
    pub paused: bool,
    /// Run timeout.
    pub timeout_ms: u64,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// Start of the last run, Unix ms.
    pub last_run: Option<i64>,
    /// Successful runs.
    pub run_count: u64,
    /// Failed runs (failed, timed out, cancelled).
    pub fail_count: u64,
    /// The workspace it runs in (canonical).
    pub workspace: PathBuf,
    /// Most recent first, bounded.
    #[serde(default)]
    pub history: VecDeque<ExecutionRecord>,
    /// The session it belongs to; `None`: the operator's (a Cron RPC
    /// without session metadata, or a job saved before jobs had owners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// One run as stored (the proto's `CronExecution`, which has no serde).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ExecutionRecord {
    pub id: String,
    pub status: i32,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub error: Option<String>,
}

impl ExecutionRecord {
    /// From the proto.
    pub fn from_proto(e: &CronExecution) -> Self {
        Self {
            id: e.id.clone(),
            status: e.status,
            started_at: e.started_at,
            ended_at: e.ended_at,
            duration_ms: e.duration_ms,
            exit_code: e.exit_code,
            stdout: e.stdout.clone(),
            stderr: e.stderr.clone(),
            error: e.error.clone(),
        }
    }

    /// To the proto, for job `job_id`.
    pub fn to_proto(&self, job_id: &str) -> CronExecution {
        CronExecution {
            id: self.id.clone(),
            job_id: job_id.to_string(),
            status: self.status,
            started_at: self.started_at,
            ended_at: self.ended_at,
            duration_ms: self.duration_ms,
            exit_code: self.exit_code,
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            error: self.error.clone(),
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct FileFormat {
    jobs: Vec<JobRecord>,
}

/// The jobs file.
#[derive(Debug, Clone)]
pub struct JobFile {
    path: PathBuf,
}

impl JobFile {
    /// `<state_dir>/cron/jobs.json` (the directory is created).
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        let dir = state_dir.join("cron");
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            path: dir.join("jobs.json"),
        })
    }

    /// The stored jobs (none when the file does not exist yet).
    pub fn load(&self) -> Result<Vec<JobRecord>, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice::<FileFormat>(&bytes)
                .map(|f| f.jobs)
                .map_err(|e| format!("{}: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        }
    }

    /// Replaces the file with `jobs` (blocking).
    pub fn save(&self, jobs: Vec<JobRecord>) -> Result<(), String> {
        let err = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let bytes = serde_json::to_vec_pretty(&FileFormat { jobs }).map_err(|e| e.to_string())?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(err)?;
        tmp.as_file().sync_all().map_err(err)?;
        tmp.persist(&self.path).map_err(|e| err(e.error))?;
        Ok(())
    }
}

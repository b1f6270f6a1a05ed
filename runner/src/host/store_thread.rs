//! One thread that owns a SQLite connection and runs jobs in group commits.
//!
//! SQLite work is blocking I/O: on tokio's async workers it stalls every
//! task sharing the worker, and one commit per small write makes the commit
//! (not the write) the cost. Jobs sent here run on a dedicated OS thread, in
//! arrival order; every job waiting when the thread wakes joins one
//! transaction (each in its own savepoint, so one failing job fails alone),
//! and a job (given the connection inside its savepoint) learns its result only once that transaction has
//! committed — "durable" means durable when the caller hears back.
//!
//! The queue is bounded ([`QUEUE_BOUND`] jobs): when it is full, callers wait
//! for room (backpressure to whoever writes faster than the disk), nothing is
//! dropped. The bound is far above a legitimate burst: one job per update
//! produced, and the thread drains hundreds per commit.

use rusqlite::{Connection, Transaction};
use tokio::sync::{mpsc, oneshot};

/// Jobs waiting for the store thread before callers wait for room.
pub const QUEUE_BOUND: usize = 16_384;
/// At most this many jobs share one transaction.
const MAX_BATCH: usize = 1_024;

/// What went wrong with a job.
#[derive(Debug, thiserror::Error)]
pub enum StoreThreadError {
    /// The statement itself failed (its savepoint was rolled back).
    #[error("{0}")]
    Sql(#[from] rusqlite::Error),
    /// The batch's commit failed: nothing of it is on disk.
    #[error("commit failed: {0}")]
    Commit(String),
    /// The thread is gone (shut down, or it could not start a transaction).
    #[error("the store thread has stopped")]
    Stopped,
}

/// Runs the job's work inside the batch's transaction, and returns what to
/// do once the batch's fate is known.
type Job = Box<dyn FnOnce(&mut Transaction<'_>) -> Completion + Send>;
/// Told whether the batch committed (`Err` carries the commit error).
type Completion = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A handle to the store thread; cheap to clone. The thread ends when the
/// last handle is dropped, after finishing the jobs already queued.
#[derive(Clone)]
pub struct StoreThread {
    jobs: mpsc::Sender<Job>,
}

impl StoreThread {
    /// Starts the thread `name` owning `conn`; each job runs in its own
    /// savepoint.
    pub fn start(name: &str, conn: Connection) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel(QUEUE_BOUND);
        let label = name.to_owned();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || serve(conn, rx, &label))?;
        Ok(Self { jobs })
    }

    /// Runs `work` in the next batch and returns its result once the batch
    /// has committed.
    pub async fn run<R, F>(&self, work: F) -> Result<R, StoreThreadError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    {
        let (done, result) = oneshot::channel();
        self.enqueue(work, Some(done)).await?;
        result.await.unwrap_or(Err(StoreThreadError::Stopped))
    }

    /// Queues `work` without waiting for its commit (ordered after every
    /// job queued before it); a failure is logged.
    #[cfg(test)]
    pub async fn submit<F>(&self, work: F) -> Result<(), StoreThreadError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
    {
        self.enqueue(work, None).await
    }

    async fn enqueue<R, F>(
        &self,
        work: F,
        done: Option<oneshot::Sender<Result<R, StoreThreadError>>>,
    ) -> Result<(), StoreThreadError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    {
        self.jobs
            .send(job(work, done))
            .await
            .map_err(|_| StoreThreadError::Stopped)
    }
}

/// The job that runs `work` in its own savepoint and reports to `done`
/// (or logs a failure when nobody waits).
fn job<R, F>(work: F, done: Option<oneshot::Sender<Result<R, StoreThreadError>>>) -> Job
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
{
    Box::new(move |tx: &mut Transaction<'_>| {
        let outcome = match tx.savepoint() {
            Ok(mut sp) => match work(&sp) {
                Ok(value) => sp.commit().map(|()| value),
                Err(e) => {
                    // Dropping the savepoint rolls it back.
                    let _ = sp.rollback();
                    Err(e)
                }
            },
            Err(e) => Err(e),
        };
        Box::new(move |committed: Result<(), String>| {
            let result = match (outcome, committed) {
                (Ok(value), Ok(())) => Ok(value),
                (Err(e), _) => Err(StoreThreadError::Sql(e)),
                (Ok(_), Err(e)) => Err(StoreThreadError::Commit(e)),
            };
            match done {
                Some(done) => {
                    let _ = done.send(result);
                }
                None => {
                    if let Err(e) = result {
                        tracing::error!(error = %e, "state store write failed");
                    }
                }
            }
        })
    })
}

/// The thread's loop: wait for a job, take every job already waiting (up to
/// [`MAX_BATCH`]), run them in one transaction, commit, complete them.
fn serve(mut conn: Connection, mut rx: mpsc::Receiver<Job>, name: &str) {
    let mut batch = Vec::with_capacity(64);
    loop {
        crate::util::allocator::before_wait();
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let busy = std::time::Instant::now();
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut tx = match conn.transaction() {
            Ok(tx) => tx,
            Err(e) => {
                let e = e.to_string();
                tracing::error!(error = %e, "state store: cannot start a transaction");
                // Nothing runs; each waiting caller hears `Stopped`.
                batch.clear();
                continue;
            }
        };
        let mut completions: Vec<Completion> = Vec::with_capacity(batch.len());
        for job in batch.drain(..) {
            completions.push(job(&mut tx));
        }
        let jobs = completions.len();
        let committed = tx.commit().map_err(|e| e.to_string());
        for complete in completions {
            complete(committed.clone());
        }
        crate::observe::metrics::store_batch(name, jobs, busy.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread() -> (StoreThread, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)")
            .unwrap();
        (StoreThread::start("test-store", conn).unwrap(), dir)
    }

    #[tokio::test]
    async fn results_arrive_after_commit_and_a_failing_job_fails_alone() {
        let (store, dir) = thread();
        let mut waits = Vec::new();
        for v in [1, 2, 2, 3] {
            let store = store.clone();
            waits.push(tokio::spawn(async move {
                store
                    .run(move |tx| tx.execute("INSERT INTO t (v) VALUES (?1)", [v]))
                    .await
            }));
        }
        let mut ok = 0;
        let mut failed = 0;
        for w in waits {
            match w.await.unwrap() {
                Ok(1) => ok += 1,
                Err(StoreThreadError::Sql(_)) => failed += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            (ok, failed),
            (3, 1),
            "the duplicate key fails, the rest commit"
        );
        // Committed: a second connection sees the rows.
        let other = Connection::open(dir.path().join("t.db")).unwrap();
        let n: i64 = other
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
    }

    #[tokio::test]
    async fn submitted_jobs_keep_their_order_with_run() {
        let (store, _dir) = thread();
        for v in 0..100 {
            store
                .submit(move |tx| tx.execute("INSERT INTO t (v) VALUES (?1)", [v]).map(drop))
                .await
                .unwrap();
        }
        let n: i64 = store
            .run(|tx| tx.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(n, 100, "a run job sees every job queued before it");
    }
}

//! Cron: scheduled shell commands, each owned by one session (or by the
//! operator). [`schedule`]
//! parses expressions and English phrases (croner), [`jobs`] holds the jobs
//! and runs the scheduler, [`run`] runs one command through the launcher,
//! [`store`] persists jobs under the state dir, [`tool`] gives the model
//! the `cron` tool.

pub mod jobs;
pub mod run;
pub mod schedule;
pub mod store;
pub mod tool;

pub use jobs::{CronError, CronJobs, NewJob, Owner};

//! Where the update throughput's CPU goes, against the floor.
//!
//! In the throughput runs the runner and the mock control plane share the
//! machine's two cores and keep them busy, so the rate is set by CPU per
//! update: the runner's `runner` and the mock side's `mock` per update
//! sent, over the cores busy (`cores / (runner + mock)` matches the
//! measured rate). The bare stream is not CPU-bound the same way (its
//! client and server together use about one and a half cores), so the
//! target is a rate: 0.70 of the floor's leaves the runner
//! `cores / (0.70 × floor rate) - mock` per update. Printed each run, so
//! the distance to the target is a measured number rather than a guess
//! from a profile's percentages.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::floor::FloorRun;
use crate::scenarios::Throughput;
use crate::table::Table;

/// The throughput target, as a fraction of the bare stream.
pub const TARGET: f64 = 0.70;

/// CPU per message in the throughput runs and the floor runs beside them.
#[derive(Debug, Clone, Serialize)]
pub struct CpuBudget {
    /// The bare stream: its client and server, per message.
    pub floor_us_per_message: f64,
    /// The runner, per update it sent (all its work: the turns producing,
    /// coalescing, journaling, transcripts, the link).
    pub runner_us_per_message: f64,
    /// The same by thread name (tokio's workers as one).
    pub runner_us_per_message_by_thread: BTreeMap<String, f64>,
    /// The bench process (the mock control plane and the collector), per
    /// update received.
    pub mock_us_per_message: f64,
    /// Cores busy during the runs (runner and bench together; 2 is all).
    pub cores_busy: f64,
    /// `cores_busy / (runner + mock)`: the rate the CPU per update allows
    /// on those cores (updates/s), to check against the measured one.
    pub cpu_bound_rate: f64,
    /// `cores_busy / (TARGET × floor rate) - mock`: the runner's CPU per
    /// update that would reach the target on the same cores.
    pub runner_us_allowed_at_target: f64,
}

impl CpuBudget {
    /// From the floor runs and the throughput runs of one bench run, and
    /// the floor's rate the ratios are taken against (msg/s); `None` when
    /// either is empty or measured nothing.
    pub fn of(floors: &[FloorRun], runs: &[Throughput], floor_rate: f64) -> Option<Self> {
        let floor_msgs: usize = floors.iter().map(|f| f.messages).sum();
        let msgs: u64 = runs.iter().map(|r| r.messages).sum();
        if floor_msgs == 0 || msgs == 0 || floor_rate <= 0.0 {
            return None;
        }
        let per = |seconds: f64, n: f64| seconds * 1e6 / n;
        let floor = per(
            floors.iter().map(|f| f.cpu_seconds).sum(),
            floor_msgs as f64,
        );
        let runner = per(runs.iter().map(|r| r.runner_cpu_seconds).sum(), msgs as f64);
        let mock = per(runs.iter().map(|r| r.bench_cpu_seconds).sum(), msgs as f64);
        let mut by_thread = BTreeMap::new();
        for run in runs {
            for (name, s) in &run.runner_cpu_by_thread {
                *by_thread.entry(name.clone()).or_insert(0.0) += per(*s, msgs as f64);
            }
        }
        let seconds: f64 = runs.iter().map(|r| r.seconds).sum();
        let busy: f64 = runs
            .iter()
            .map(|r| r.runner_cpu_seconds + r.bench_cpu_seconds)
            .sum();
        let cores = if seconds > 0.0 { busy / seconds } else { 0.0 };
        Some(Self {
            floor_us_per_message: floor,
            runner_us_per_message: runner,
            runner_us_per_message_by_thread: by_thread,
            mock_us_per_message: mock,
            cores_busy: cores,
            cpu_bound_rate: cores * 1e6 / (runner + mock),
            runner_us_allowed_at_target: cores * 1e6 / (TARGET * floor_rate) - mock,
        })
    }

    /// The table's rows, under the throughput row (`floor_tp`: the rate
    /// the ratios are taken against).
    pub fn add_rows(&self, t: &mut Table, floor_tp: f64) {
        t.row(
            "  CPU per update sent: runner / mock side / bare stream (client + server)",
            format!(
                "{:.2} / {:.2} / {:.2}",
                self.runner_us_per_message, self.mock_us_per_message, self.floor_us_per_message
            ),
            "us",
            None,
        );
        t.row(
            &format!("  runner's by thread: {}", self.by_thread_line()),
            format!("{:.2}", self.runner_us_per_message),
            "us",
            None,
        );
        t.row(
            &format!(
                "  rate that CPU allows on the {:.2} cores busy: cores / (runner + mock)",
                self.cores_busy
            ),
            format!("{:.0}", self.cpu_bound_rate),
            "upd/s",
            Some(self.cpu_bound_rate / floor_tp),
        );
        t.row(
            &format!(
                "  runner CPU per update that would meet {:.2} on those cores",
                TARGET
            ),
            format!("{:.2}", self.runner_us_allowed_at_target),
            "us",
            None,
        );
    }

    /// The runner's threads by CPU per update, busiest first:
    /// `name µs, …` (the ones under 0.05 µs left out).
    fn by_thread_line(&self) -> String {
        let mut threads: Vec<(&String, &f64)> = self
            .runner_us_per_message_by_thread
            .iter()
            .filter(|(_, us)| **us >= 0.05)
            .collect();
        threads.sort_by(|a, b| b.1.total_cmp(a.1));
        threads
            .iter()
            .map(|(name, us)| format!("{name} {us:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(messages: u64, seconds: f64, runner: &[(&str, f64)], bench: f64) -> Throughput {
        let by: BTreeMap<String, f64> = runner.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect();
        Throughput {
            threads: 1,
            lines_per_turn: 1,
            item_updates: messages,
            item_updates_produced: messages,
            messages,
            seconds,
            runner_cpu_seconds: by.values().sum(),
            runner_cpu_by_thread: by,
            bench_cpu_seconds: bench,
            item_updates_per_s: messages as f64 / seconds,
            messages_per_s: messages as f64 / seconds,
        }
    }

    #[test]
    fn budget_per_message_over_all_runs() {
        let floors = [
            FloorRun {
                messages: 100_000,
                messages_per_s: 900_000.0,
                cpu_seconds: 0.2,
            },
            FloorRun {
                messages: 100_000,
                messages_per_s: 800_000.0,
                cpu_seconds: 0.22,
            },
        ];
        let runs = [
            run(
                100_000,
                0.3,
                &[("tokio-rt-worker", 0.3), ("transcripts", 0.05)],
                0.2,
            ),
            run(
                100_000,
                0.3,
                &[("tokio-rt-worker", 0.3), ("transcripts", 0.05)],
                0.2,
            ),
        ];
        let b = CpuBudget::of(&floors, &runs, 500_000.0).expect("measured");
        assert!((b.floor_us_per_message - 2.1).abs() < 1e-9);
        assert!((b.runner_us_per_message - 3.5).abs() < 1e-9);
        assert!((b.mock_us_per_message - 2.0).abs() < 1e-9);
        assert!((b.runner_us_per_message_by_thread["transcripts"] - 0.5).abs() < 1e-9);
        // 0.35 + 0.2 s of CPU in each 0.3 s run.
        let cores = 0.55 / 0.3;
        assert!((b.cores_busy - cores).abs() < 1e-9);
        assert!((b.cpu_bound_rate - cores * 1e6 / 5.5).abs() < 1e-6);
        // 0.70 of 500 k/s is 350 k/s: cores / 350 k s, less the mock's 2 us.
        let allowed = cores * 1e6 / 350_000.0 - 2.0;
        assert!((b.runner_us_allowed_at_target - allowed).abs() < 1e-9);
        assert_eq!(b.by_thread_line(), "tokio-rt-worker 3.00, transcripts 0.50");
    }

    #[test]
    fn nothing_measured_is_no_budget() {
        assert!(CpuBudget::of(&[], &[], 1.0).is_none());
    }
}

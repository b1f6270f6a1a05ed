//! The printed table (measurement, value, unit, ratio to the floor) and
//! the small conversions its rows share.

use crate::stats::Summary;

/// The middle value of `v` (the upper one of an even count; 0 if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Milliseconds as durations (for [`Summary::of`]).
pub fn ms_samples(v: &[f64]) -> Vec<std::time::Duration> {
    v.iter()
        .map(|m| std::time::Duration::from_secs_f64(m / 1e3))
        .collect()
}

/// Bytes in MiB.
pub fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The rows of the table, in order.
pub struct Table(pub Vec<[String; 4]>);

impl Table {
    /// Adds a row; `vs_floor` is the ratio to the floor, if it has one.
    pub fn row(&mut self, what: &str, value: String, unit: &str, vs_floor: Option<f64>) {
        let ratio = vs_floor.map_or_else(String::new, |r| format!("{r:.3}"));
        self.0
            .push([what.to_owned(), value, unit.to_owned(), ratio]);
    }

    /// Prints the table as Markdown, columns aligned.
    pub fn print(&self) {
        let head = ["measurement", "value", "unit", "vs floor"];
        let mut w = head.map(str::len);
        for r in &self.0 {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |c: &[String; 4]| {
            println!(
                "| {:<w0$} | {:>w1$} | {:<w2$} | {:>w3$} |",
                c[0],
                c[1],
                c[2],
                c[3],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3]
            );
        };
        line(&head.map(str::to_owned));
        println!(
            "|{}|{}|{}|{}|",
            "-".repeat(w[0] + 2),
            "-".repeat(w[1] + 2),
            "-".repeat(w[2] + 2),
            "-".repeat(w[3] + 2)
        );
        for r in &self.0 {
            line(r);
        }
    }
}

/// p50 / p99 / max, in microseconds.
pub fn pct(s: &Summary) -> String {
    format!("{:.0} / {:.0} / {:.0}", s.p50_us, s.p99_us, s.max_us)
}

//! How search results are ordered. Each match gets
//!
//! ```text
//! score = 0.5 · relevance + 0.3 · importance + 0.2 · recency
//! relevance = r / (1 + r), r = −bm25   (FTS5's BM25, 0 without a query)
//! recency   = 0.5 ^ (age_hours / 24)   (halves every day since `timestamp`)
//! ```
//!
//! all three in [0, 1]; ties go to the newer memory. The query text becomes
//! an FTS5 expression of its words joined by OR (each quoted, so no word is
//! taken for FTS5 syntax), so a memory matching more of the words ranks
//! higher through BM25.

use code_agent_proto::MemoryItem;

/// A memory that passed the filters, with its BM25 score when a query ran.
pub struct Candidate {
    /// The memory.
    pub item: MemoryItem,
    /// FTS5's `bm25()` (lower is better, usually negative).
    pub bm25: Option<f64>,
}

const W_RELEVANCE: f64 = 0.5;
const W_IMPORTANCE: f64 = 0.3;
const W_RECENCY: f64 = 0.2;
const HALF_LIFE_HOURS: f64 = 24.0;

/// The FTS5 MATCH expression for `text`; `None` when it has no word.
pub fn match_expression(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .take(32)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

/// The score of one candidate at `now_ms`.
pub fn score(candidate: &Candidate, now_ms: i64) -> f64 {
    let relevance = candidate.bm25.map_or(0.0, |b| {
        let r = (-b).max(0.0);
        r / (1.0 + r)
    });
    let importance = f64::from(candidate.item.importance).clamp(0.0, 1.0);
    let age_hours = ((now_ms - candidate.item.timestamp).max(0) as f64) / 3_600_000.0;
    let recency = 0.5f64.powf(age_hours / HALF_LIFE_HOURS);
    W_RELEVANCE * relevance + W_IMPORTANCE * importance + W_RECENCY * recency
}

/// The best `limit` candidates, best first.
pub fn rank(candidates: Vec<Candidate>, now_ms: i64, limit: usize) -> Vec<MemoryItem> {
    let mut scored: Vec<(f64, Candidate)> = candidates
        .into_iter()
        .map(|c| (score(&c, now_ms), c))
        .collect();
    scored.sort_by(|(a, ca), (b, cb)| {
        b.total_cmp(a)
            .then(cb.item.timestamp.cmp(&ca.item.timestamp))
    });
    scored
        .into_iter()
        .take(limit)
        .map(|(_, c)| c.item)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(importance: f32, timestamp: i64, bm25: Option<f64>) -> Candidate {
        Candidate {
            item: MemoryItem {
                importance,
                timestamp,
                ..Default::default()
            },
            bm25,
        }
    }

    #[test]
    fn words_are_quoted_and_joined() {
        assert_eq!(
            match_expression("deploy: the \"db\"-OR NEAR").unwrap(),
            "\"deploy\" OR \"the\" OR \"db\" OR \"OR\" OR \"NEAR\""
        );
        assert_eq!(match_expression(" -*- "), None);
    }

    #[test]
    fn relevance_importance_and_recency_all_count() {
        let now = 10 * 86_400_000;
        // More relevant beats less relevant, all else equal.
        assert!(score(&cand(0.5, now, Some(-3.0)), now) > score(&cand(0.5, now, Some(-0.5)), now));
        // More important beats less important.
        assert!(score(&cand(0.9, now, None), now) > score(&cand(0.1, now, None), now));
        // Newer beats older.
        assert!(score(&cand(0.5, now, None), now) > score(&cand(0.5, now - 86_400_000, None), now));
        // A fresh, unimportant memory with no relevance scores 0.2.
        assert!((score(&cand(0.0, now, None), now) - 0.2).abs() < 1e-9);
    }
}

//! Schedules: a five-field cron expression (minute hour day-of-month month
//! day-of-week, names and `@hourly`-style nicknames allowed; no seconds, no
//! years) or a common English phrase, turned into the expression, an English
//! description and next-run times. Parsing and next runs are `croner`'s;
//! the phrases are ours:
//!
//! `every minute`, `every N minutes`, `hourly` / `every hour`,
//! `every N hours`, `daily` / `every day` / `midnight`, `every day at 9am`,
//! `daily at 17:30`, `at 9:15pm`, `every weekday at 8`, `every weekend`,
//! `every monday [at 10:30]` (any day name, `mondays` too), `weekly`,
//! `monthly`, `yearly` / `annually`. Times: `9`, `9am`, `9:30`, `9:30 pm`,
//! `21:15`, `noon`, `midnight`.

use chrono::{DateTime, FixedOffset, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The five-field expression.
    pub expression: String,
    /// What it means, in English.
    pub description: String,
    cron: Cron,
}

impl Schedule {
    /// The first run strictly after `after`, the expression read in the
    /// time zone `zone` (a fixed UTC offset).
    pub fn next_after(&self, after: DateTime<Utc>, zone: &FixedOffset) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(zone), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Parses a cron expression or an English phrase; the error says what is
/// accepted.
pub fn parse(input: &str) -> Result<Schedule, String> {
    let text = input.trim();
    if text.is_empty() {
        return Err(
            "schedule: required (a five-field cron expression or a phrase like `every 5 minutes`)"
                .into(),
        );
    }
    let expression = match phrase(text) {
        Some(expression) => expression?,
        None => text.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    let cron = parser.parse(&expression).map_err(|e| {
        format!(
            "schedule: {text:?} is neither a five-field cron expression (minute hour day month weekday: {e}) \
             nor a phrase like `every 5 minutes`, `every day at 9am`, `every monday at 10:30`, `hourly`, `daily`"
        )
    })?;
    let description = cron.describe();
    Ok(Schedule {
        expression,
        description,
        cron,
    })
}

const DAYS: [(&str, u8); 7] = [
    ("sunday", 0),
    ("monday", 1),
    ("tuesday", 2),
    ("wednesday", 3),
    ("thursday", 4),
    ("friday", 5),
    ("saturday", 6),
];

/// The expression for an English phrase; `None` when `text` is no phrase
/// (it may be a cron expression), `Some(Err)` for a phrase with a bad part.
fn phrase(text: &str) -> Option<Result<String, String>> {
    let lower = text.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let (head, at) = match words.iter().position(|w| *w == "at") {
        Some(i) => (&words[..i], Some(words[i + 1..].join(" "))),
        None => (&words[..], None),
    };
    let time = match at.as_deref().map(time_of_day) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return Some(Err(e)),
        None => None,
    };
    let (h, m) = time.unwrap_or((0, 0));
    let daily = |dow: &str| Some(Ok(format!("{m} {h} * * {dow}")));
    let head: Vec<&str> = head.iter().copied().filter(|w| *w != "on").collect();
    match head.as_slice() {
        [] if time.is_some() => daily("*"),
        ["every", "minute"] | ["minutely"] if time.is_none() => Some(Ok("* * * * *".into())),
        ["every", n, unit] if time.is_none() && unit.starts_with("minute") => {
            Some(step(n, 59, "minutes").map(|n| format!("*/{n} * * * *")))
        }
        ["every", "hour"] | ["hourly"] if time.is_none() => Some(Ok("0 * * * *".into())),
        ["every", n, unit] if time.is_none() && unit.starts_with("hour") => {
            Some(step(n, 23, "hours").map(|n| format!("0 */{n} * * *")))
        }
        ["every", "day"] | ["daily"] | ["everyday"] | ["each", "day"] => daily("*"),
        ["midnight"] if time.is_none() => daily("*"),
        ["every", "weekday"] | ["weekdays"] | ["every", "weekdays"] => daily("1-5"),
        ["every", "weekend"] | ["weekends"] | ["every", "weekend", "day"] => daily("0,6"),
        ["weekly"] | ["every", "week"] => daily("0"),
        ["monthly"] | ["every", "month"] => Some(Ok(format!("{m} {h} 1 * *"))),
        ["yearly"] | ["annually"] | ["every", "year"] => Some(Ok(format!("{m} {h} 1 1 *"))),
        ["every", day] | [day] => {
            let day = day.trim_end_matches('s');
            DAYS.iter()
                .find(|(name, _)| *name == day || (day.len() >= 3 && name.starts_with(day)))
                .map(|(_, n)| Ok(format!("{m} {h} * * {n}")))
        }
        _ => None,
    }
}

fn step(n: &str, max: u32, unit: &str) -> Result<u32, String> {
    match n.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "schedule: every N {unit} needs N between 1 and {max}, got {n:?}"
        )),
    }
}

/// `(hour, minute)` of `9`, `9am`, `9:30`, `9:30 pm`, `21:15`, `noon`, `midnight`.
fn time_of_day(text: &str) -> Result<(u32, u32), String> {
    let bad =
        || format!("schedule: {text:?} is not a time of day (9am, 9:30, 17:45, noon, midnight)");
    let compact: String = text.split_whitespace().collect();
    match compact.as_str() {
        "noon" => return Ok((12, 0)),
        "midnight" => return Ok((0, 0)),
        _ => {}
    }
    let (clock, meridiem) = if let Some(c) = compact.strip_suffix("am") {
        (c, Some(false))
    } else if let Some(c) = compact.strip_suffix("pm") {
        (c, Some(true))
    } else {
        (compact.as_str(), None)
    };
    let (h, m) = clock.split_once(':').unwrap_or((clock, "0"));
    let (mut h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m > 59 {
        return Err(bad());
    }
    match meridiem {
        Some(pm) => {
            if !(1..=12).contains(&h) {
                return Err(bad());
            }
            h = match (h, pm) {
                (12, false) => 0,
                (12, true) => 12,
                (h, true) => h + 12,
                (h, false) => h,
            };
        }
        None if h > 23 => return Err(bad()),
        None => {}
    }
    Ok((h, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn phrases_become_expressions() {
        let expr = |s: &str| parse(s).unwrap().expression;
        assert_eq!(expr("every 5 minutes"), "*/5 * * * *");
        assert_eq!(expr("Every minute"), "* * * * *");
        assert_eq!(expr("hourly"), "0 * * * *");
        assert_eq!(expr("every 2 hours"), "0 */2 * * *");
        assert_eq!(expr("daily"), "0 0 * * *");
        assert_eq!(expr("every day at 9am"), "0 9 * * *");
        assert_eq!(expr("every day at 9:30 pm"), "30 21 * * *");
        assert_eq!(expr("daily at 17:45"), "45 17 * * *");
        assert_eq!(expr("at noon"), "0 12 * * *");
        assert_eq!(expr("every monday at 10:30"), "30 10 * * 1");
        assert_eq!(expr("on fridays at 12am"), "0 0 * * 5");
        assert_eq!(expr("every weekday at 8"), "0 8 * * 1-5");
        assert_eq!(expr("weekly"), "0 0 * * 0");
        assert_eq!(expr("monthly"), "0 0 1 * *");
        assert_eq!(expr("*/10  9-17 * * MON-FRI"), "*/10 9-17 * * MON-FRI");
    }

    #[test]
    fn bad_schedules_say_what_is_accepted() {
        for bad in [
            "",
            "every 0 minutes",
            "every day at 25:00",
            "sometimes",
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.starts_with("schedule:"), "{bad}: {err}");
        }
        assert!(parse("soon").unwrap_err().contains("every 5 minutes"));
    }

    #[test]
    fn next_runs_and_descriptions() {
        let s = parse("every monday at 10:30").unwrap();
        // 2026-11-24 is a Tuesday.
        let now = Utc.with_ymd_and_hms(2026, 11, 24, 13, 0, 0).unwrap();
        let utc = FixedOffset::east_opt(0).unwrap();
        assert_eq!(
            s.next_after(now, &utc).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 30, 10, 30, 0).unwrap()
        );
        // 10:30 at UTC+02:00 is 08:30 UTC.
        let plus2 = FixedOffset::east_opt(2 * 3600).unwrap();
        assert_eq!(
            s.next_after(now, &plus2).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 30, 8, 30, 0).unwrap()
        );
        assert!(!s.description.is_empty());
        let every = parse("* * * * *").unwrap();
        assert_eq!(
            every.next_after(now, &utc).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 24, 13, 1, 0).unwrap()
        );
    }
}

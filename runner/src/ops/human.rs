//! Quantities as a person reads them: durations rounded to the two units
//! that matter (`850ms`, `5.0s`, `3m 12s`, `2h 5m`, `3d 4h`, never
//! `5s 13ms 173us 846ns`) and memory sizes (`812K`, `12.3M`, `1.5G`).
//! For what people read (`ps`, `threads`, `status`, log lines); JSON keeps
//! plain numbers.

use std::time::Duration;

/// `d`, rounded: milliseconds under a second, tenths of a second under a
/// minute, then minutes and seconds, hours and minutes, days and hours.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let tenths = (ms + 50) / 100;
    if tenths < 600 {
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let s = (ms + 500) / 1000;
    if s < 3600 {
        return format!("{}m {}s", s / 60, s % 60);
    }
    let m = (s + 30) / 60;
    if m < 24 * 60 {
        return format!("{}h {}m", m / 60, m % 60);
    }
    let h = (m + 30) / 60;
    format!("{}d {}h", h / 24, h % 24)
}

/// [`duration`] of a number of seconds (negative or not a number: 0).
pub fn seconds(s: f64) -> String {
    let s = if s.is_finite() { s.max(0.0) } else { 0.0 };
    duration(Duration::from_secs_f64(s.min(u32::MAX as f64)))
}

/// A size given in KiB: `812K`, `12.3M`, `1.5G` (one decimal under 100).
pub fn kib(kib: u64) -> String {
    if kib < 1024 {
        return format!("{kib}K");
    }
    let mib = kib as f64 / 1024.0;
    let (value, unit) = if mib < 1024.0 {
        (mib, "M")
    } else {
        (mib / 1024.0, "G")
    };
    if value < 100.0 {
        format!("{value:.1}{unit}")
    } else {
        format!("{value:.0}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_rounded_to_two_units() {
        let ms = Duration::from_millis;
        assert_eq!(duration(ms(0)), "0ms");
        assert_eq!(duration(ms(999)), "999ms");
        assert_eq!(duration(Duration::new(5, 13_173_846)), "5.0s");
        assert_eq!(duration(ms(42_349)), "42.3s");
        // Rounding carries into the next unit.
        assert_eq!(duration(ms(59_960)), "1m 0s");
        assert_eq!(duration(ms(192_400)), "3m 12s");
        assert_eq!(duration(ms(3_599_700)), "1h 0m");
        assert_eq!(
            duration(Duration::from_secs(2 * 3600 + 5 * 60 + 10)),
            "2h 5m"
        );
        assert_eq!(duration(Duration::from_secs(3 * 86400 + 4 * 3600)), "3d 4h");
        assert_eq!(seconds(-1.0), "0ms");
        assert_eq!(seconds(f64::NAN), "0ms");
        assert_eq!(seconds(0.25), "250ms");
    }

    #[test]
    fn sizes_are_short() {
        assert_eq!(kib(812), "812K");
        assert_eq!(kib(12_595), "12.3M");
        assert_eq!(kib(200 * 1024), "200M");
        assert_eq!(kib(1536 * 1024), "1.5G");
        assert_eq!(kib(2048 * 1024 * 1024), "2048G");
    }
}

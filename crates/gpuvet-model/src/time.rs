//! Unix time: the one place that reads the wall clock as Unix milliseconds or
//! nanoseconds, and formatting such timestamps as UTC for people (without a time-zone
//! database). Pure code takes times as input; only loops at the edges call the clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the Unix epoch, on this machine's clock.
pub fn unix_now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
        // A clock set before 1970: keep it monotone-ish rather than panic.
        Err(before) => -i64::try_from(before.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// Now, in milliseconds since the Unix epoch, as reports and events carry it.
pub fn unix_now_ms() -> u64 {
    ns_to_ms(unix_now_ns())
}

/// Unix nanoseconds to Unix milliseconds (times before 1970 become 0).
pub fn ns_to_ms(ns: i64) -> u64 {
    u64::try_from(ns.max(0) / 1_000_000).unwrap_or(0)
}

/// `2026-11-30T04:05:06.789Z` for Unix milliseconds.
pub fn format_utc_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns_to_ms_truncates_and_clamps_before_1970() {
        assert_eq!(ns_to_ms(1_999_999), 1);
        assert_eq!(ns_to_ms(-5), 0);
        assert!(unix_now_ms() > 1_700_000_000_000);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_utc_ms(1_796_011_506_789), "2026-11-30T04:05:06.789Z");
    }
}

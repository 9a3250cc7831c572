//! Times on the pages: a UTC timestamp in a `<time>` element, and how long ago it was
//! relative to the `now` the server passes in (the pages never read the clock).

use gpuvet_model::time::format_utc_ms;

/// `<time datetime="…">2026-01-01T00:00:00.000Z</time>`.
pub fn utc(ms: u64) -> String {
    let text = format_utc_ms(ms);
    format!("<time datetime=\"{text}\">{text}</time>")
}

/// The UTC time and, after it, how long before `now_ms` it was.
pub fn utc_and_ago(ms: u64, now_ms: u64) -> String {
    format!("{} <span class=\"ago\">{}</span>", utc(ms), ago(ms, now_ms))
}

/// `just now`, `42 s ago`, `5 min ago`, `3 h ago`, `2 days ago`; a time after `now_ms`
/// (clocks of different machines) reads `just now` rather than a negative age.
pub fn ago(ms: u64, now_ms: u64) -> String {
    let secs = now_ms.saturating_sub(ms) / 1000;
    match secs {
        0 => "just now".to_owned(),
        1..=59 => format!("{secs} s ago"),
        60..=3_599 => format!("{} min ago", secs / 60),
        // Up to two days in hours: "30 h ago" says more than "1 day ago".
        3_600..=172_799 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_767_225_600_000;

    #[test]
    fn ages_use_the_largest_unit_that_fits() {
        assert_eq!(ago(NOW, NOW), "just now");
        assert_eq!(ago(NOW + 5_000, NOW), "just now");
        assert_eq!(ago(NOW - 999, NOW), "just now");
        assert_eq!(ago(NOW - 42_000, NOW), "42 s ago");
        assert_eq!(ago(NOW - 60_000, NOW), "1 min ago");
        assert_eq!(ago(NOW - 5 * 60_000 - 59_000, NOW), "5 min ago");
        assert_eq!(ago(NOW - 3 * 3_600_000, NOW), "3 h ago");
        assert_eq!(ago(NOW - 47 * 3_600_000, NOW), "47 h ago");
        assert_eq!(ago(NOW - 3 * 86_400_000, NOW), "3 days ago");
        assert_eq!(ago(0, 0), "just now");
    }

    #[test]
    fn times_are_utc_in_a_time_element() {
        assert_eq!(
            utc(NOW),
            "<time datetime=\"2026-01-01T00:00:00.000Z\">2026-01-01T00:00:00.000Z</time>"
        );
        assert_eq!(
            utc_and_ago(NOW - 300_000, NOW),
            "<time datetime=\"2025-12-31T23:55:00.000Z\">2025-12-31T23:55:00.000Z</time> <span class=\"ago\">5 min ago</span>"
        );
    }
}

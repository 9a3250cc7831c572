//! Wall-clock helpers for reports and timelines.

use std::time::Duration;

/// Milliseconds of a duration, saturating.
pub fn millis(duration: Duration) -> u64 {
    duration.as_millis().try_into().unwrap_or(u64::MAX)
}

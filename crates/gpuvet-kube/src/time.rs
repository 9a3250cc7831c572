//! Unix milliseconds to the API's timestamps.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

pub(crate) fn timestamp(ms: u64) -> Timestamp {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(crate) fn micro_time(ms: u64) -> MicroTime {
    MicroTime(timestamp(ms))
}

/// RFC 3339 in UTC, as the API writes times, e.g. `2026-12-02T11:00:00Z`.
pub(crate) fn rfc3339(ms: u64) -> String {
    timestamp(ms).to_string()
}

/// Unix milliseconds of an RFC 3339 time, if it is one.
pub(crate) fn parse_ms(text: &str) -> Option<u64> {
    let ts: Timestamp = text.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(rfc3339(1_764_673_200_000), "2025-12-02T11:00:00Z");
        assert_eq!(parse_ms("2025-12-02T11:00:00Z"), Some(1_764_673_200_000));
        assert_eq!(parse_ms("yesterday"), None);
        assert_eq!(parse_ms("1960-01-01T00:00:00Z"), None);
    }
}

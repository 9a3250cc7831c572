//! The cluster's nodes as `sinfo` lists them, and which of them gpuvet drained and when:
//! the circuit breaker's state, kept in Slurm itself (a drain and its reason's time), so
//! it holds across the separate gpuvet of every node.

use std::collections::BTreeSet;

use gpuvet_model::quarantine::ClusterNode;

/// Every drain reason gpuvet writes starts with this; a drain without it is someone
/// else's, which gpuvet neither counts nor lifts.
pub const REASON_PREFIX: &str = "gpuvet:";

/// `sinfo --Node --format` fields: name, state, the reason's time, the reason (last:
/// it may hold the separator).
pub const SINFO_FORMAT: &str = "%N|%T|%H|%E";

/// One node as `sinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    /// Slurm's long state, e.g. `idle`, `drained`, `draining`, `mixed*`.
    pub state: String,
    /// Why it is down or drained; `None` when Slurm says `none`.
    pub reason: Option<String>,
    /// When the reason was set, Unix milliseconds; `None` when Slurm has no time
    /// (`Unknown`) or it cannot be read.
    pub reason_at_ms: Option<u64>,
}

impl SlurmNode {
    /// Drained, or draining (a job still runs on it).
    pub fn is_drained(&self) -> bool {
        self.state.contains("drain")
    }

    /// Drained by gpuvet: drained, with gpuvet's reason.
    pub fn drained_by_gpuvet(&self) -> bool {
        self.is_drained()
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }

    /// The node as the circuit breaker counts it.
    pub fn for_breaker(&self) -> ClusterNode {
        ClusterNode {
            name: self.name.clone(),
            quarantined_at_ms: self.drained_by_gpuvet().then_some(self.reason_at_ms),
        }
    }
}

/// The nodes of `sinfo --noheader --Node --format=SINFO_FORMAT` run with `TZ=UTC` and
/// `SLURM_TIME_FORMAT=standard`: one per name (sinfo lists a node once per partition),
/// in the order first listed. Blank lines are skipped; a line without four fields is an
/// error, naming it.
pub fn parse_sinfo(text: &str) -> Result<Vec<SlurmNode>, String> {
    let mut seen = BTreeSet::new();
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.splitn(4, '|').collect();
        let [name, state, at, reason] = fields[..] else {
            return Err(format!(
                "the line `{line}` has not the four fields of `{SINFO_FORMAT}`"
            ));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("the line `{line}` names no node"));
        }
        if !seen.insert(name.to_owned()) {
            continue;
        }
        let reason = reason.trim();
        nodes.push(SlurmNode {
            name: name.to_owned(),
            state: state.trim().to_owned(),
            reason: (!reason.is_empty() && reason != "none").then(|| reason.to_owned()),
            reason_at_ms: parse_utc(at.trim()),
        });
    }
    Ok(nodes)
}

/// `2026-12-04T10:19:08` (Slurm's standard time format, read as UTC) in Unix
/// milliseconds; `None` for anything else (`Unknown`).
pub fn parse_utc(text: &str) -> Option<u64> {
    let (date, time) = text.split_once('T')?;
    let numbers = |part: &str, sep: char| -> Option<Vec<u64>> {
        part.split(sep)
            .map(|n| {
                (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse().ok())
                    .flatten()
            })
            .collect()
    };
    let (date, time) = (numbers(date, '-')?, numbers(time, ':')?);
    let (&[year, month, day], &[hour, minute, second]) = (&date[..], &time[..]) else {
        return None;
    };
    let valid = (1970..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && hour < 24
        && minute < 60
        && second < 61;
    if !valid {
        return None;
    }
    let days = days_from_civil(year as i64, month as i64, day as i64);
    let secs = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(secs * 1000)
}

/// (year, month, day) to days since 1970-01-01, after Howard Hinnant's algorithm.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::time::format_utc_ms;

    #[test]
    fn sinfo_lines_become_nodes_once_each() {
        // As sinfo 22.05 printed them for a node drained by gpuvet, and after a resume.
        let text = "\
vm|drained|2026-12-04T10:19:08|gpuvet: gemm_flops gpu 3 at 61 % | x
gpu-02|idle*|Unknown|none
gpu-03|draining|2026-12-04T09:00:00|bad fan
vm|drained|2026-12-04T10:19:08|gpuvet: gemm_flops gpu 3 at 61 % | x

";
        let nodes = parse_sinfo(text).unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(
            nodes[0],
            SlurmNode {
                name: "vm".into(),
                state: "drained".into(),
                reason: Some("gpuvet: gemm_flops gpu 3 at 61 % | x".into()),
                reason_at_ms: Some(1_796_379_548_000),
            }
        );
        assert_eq!(
            format_utc_ms(nodes[0].reason_at_ms.unwrap()),
            "2026-12-04T10:19:08.000Z"
        );
        assert!(nodes[0].drained_by_gpuvet());
        assert_eq!(
            nodes[0].for_breaker().quarantined_at_ms,
            Some(Some(1_796_379_548_000))
        );
        assert_eq!(
            (nodes[1].reason.as_deref(), nodes[1].reason_at_ms),
            (None, None)
        );
        assert!(!nodes[1].is_drained());
        assert_eq!(nodes[1].for_breaker().quarantined_at_ms, None);
        // Someone else's drain is neither counted nor gpuvet's to lift.
        assert!(nodes[2].is_drained() && !nodes[2].drained_by_gpuvet());
        assert_eq!(nodes[2].for_breaker().quarantined_at_ms, None);
    }

    #[test]
    fn lines_sinfo_never_writes_are_errors() {
        assert_eq!(
            parse_sinfo("gpu-01 idle").unwrap_err(),
            "the line `gpu-01 idle` has not the four fields of `%N|%T|%H|%E`"
        );
        assert_eq!(
            parse_sinfo("|idle|Unknown|none").unwrap_err(),
            "the line `|idle|Unknown|none` names no node"
        );
    }

    #[test]
    fn times_read_as_utc_and_nothing_else() {
        for ms in [0, 951_782_400_000, 1_796_379_548_000, 4_102_444_799_000] {
            let text = format_utc_ms(ms);
            assert_eq!(parse_utc(&text[..19]), Some(ms), "{text}");
        }
        for bad in [
            "Unknown",
            "",
            "2026-12-04",
            "2026-13-04T10:19:08",
            "2026-12-04T24:00:00",
            "2026-12-04T10:19",
            "1969-12-31T23:59:59",
            "2026-12-04T10:19:+8",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}

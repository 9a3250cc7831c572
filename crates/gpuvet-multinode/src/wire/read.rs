//! Reads the two tagged bodies the hot paths parse, a [`Directive`] (every agent, for
//! every directive) and a [`Stamped`] reply (the coordinator, one per node per check),
//! without serde's buffering.
//!
//! The derived `Deserialize` of an internally tagged enum (`#[serde(tag = ...)]`)
//! buffers the whole object into serde's private `Content` tree before it reads the
//! tag, and `Stamped`'s `#[serde(flatten)]` buffers it once more: at 4,096 simulated
//! nodes that was about 7% of all CPU, in many small allocations. Here the tag is read
//! first, by a borrowed struct that skips everything else, then the variant's fields
//! straight from the same text into a plain struct, which ignores the tag (and a
//! reply's stamps) as it ignores any field it does not know: none of these structs,
//! nor `CollectiveOrder` and `CollectiveReply`, denies unknown fields. The derived
//! impls stay the definition of the wire format and what every other reader uses; the
//! tests hold these readers to them, variant by variant, error messages included.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::Error as _;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, RunReport};

use super::{Directive, ProbeReply, ProbeTarget, Reply, Stamped};

/// `Directive`'s tags, in the order of its variants (as serde lists them).
const DIRECTIVE_OPS: &[&str] = &[
    "local",
    "collective",
    "probe",
    "probe_torch",
    "group_token",
    "finish",
];

/// `Reply`'s tags, in the order of its variants (as serde lists them).
const REPLY_KINDS: &[&str] = &[
    "local",
    "collective",
    "probe",
    "torch",
    "group_token",
    "refused",
];

/// Reads a directive as its derived `Deserialize` would, without buffering it.
pub fn parse_directive(json: &str) -> Result<Directive, serde_json::Error> {
    let head: DirectiveHead<'_> = serde_json::from_str(json)?;
    let Some(op) = head.op else {
        return Err(serde_json::Error::missing_field("op"));
    };
    Ok(match &*op {
        "local" => {
            let LocalOrder { check, budget_ms } = serde_json::from_str(json)?;
            Directive::Local { check, budget_ms }
        }
        "collective" => Directive::Collective(serde_json::from_str(json)?),
        "probe" => {
            let ProbeOrder { targets, budget_ms } = serde_json::from_str(json)?;
            Directive::Probe { targets, budget_ms }
        }
        "probe_torch" => {
            let ProbeTorchOrder { budget_ms } = serde_json::from_str(json)?;
            Directive::ProbeTorch { budget_ms }
        }
        "group_token" => {
            let GroupTokenOrder { count } = serde_json::from_str(json)?;
            Directive::GroupToken { count }
        }
        "finish" => {
            let FinishOrder { report } = serde_json::from_str(json)?;
            Directive::Finish { report }
        }
        other => return Err(serde_json::Error::unknown_variant(other, DIRECTIVE_OPS)),
    })
}

/// Reads a stamped reply as its derived `Deserialize` would, without buffering it.
pub fn parse_stamped(json: &str) -> Result<Stamped, serde_json::Error> {
    let head: StampedHead<'_> = serde_json::from_str(json)?;
    let Some(kind) = head.reply else {
        return Err(serde_json::Error::missing_field("reply"));
    };
    let reply = match &*kind {
        "local" => {
            let LocalReply { result } = serde_json::from_str(json)?;
            Reply::Local { result }
        }
        "collective" => Reply::Collective(serde_json::from_str(json)?),
        "probe" => {
            let ProbeReplies { results } = serde_json::from_str(json)?;
            Reply::Probe { results }
        }
        "torch" => {
            let TorchReply {
                python,
                version,
                error,
            } = serde_json::from_str(json)?;
            Reply::Torch {
                python,
                version,
                error,
            }
        }
        "group_token" => {
            let GroupTokenReply { tokens, error } = serde_json::from_str(json)?;
            Reply::GroupToken { tokens, error }
        }
        "refused" => {
            let RefusedReply { reason } = serde_json::from_str(json)?;
            Reply::Refused { reason }
        }
        other => return Err(serde_json::Error::unknown_variant(other, REPLY_KINDS)),
    };
    Ok(Stamped {
        began_ms: head.began_ms,
        ended_ms: head.ended_ms,
        reply,
    })
}

/// Just a directive's `"op"`.
#[derive(Deserialize)]
struct DirectiveHead<'a> {
    #[serde(borrow, default)]
    op: Option<Cow<'a, str>>,
}

/// A stamped reply's `"reply"` and its stamps: the fields `Stamped` has besides the
/// reply's own.
#[derive(Deserialize)]
struct StampedHead<'a> {
    #[serde(borrow, default)]
    reply: Option<Cow<'a, str>>,
    #[serde(default)]
    began_ms: Option<u64>,
    #[serde(default)]
    ended_ms: Option<u64>,
}

/// The fields of `Directive::Local`.
#[derive(Deserialize)]
struct LocalOrder {
    check: CheckName,
    budget_ms: u64,
}

/// The fields of `Directive::Probe`.
#[derive(Deserialize)]
struct ProbeOrder {
    targets: Vec<ProbeTarget>,
    budget_ms: u64,
}

/// The fields of `Directive::ProbeTorch`.
#[derive(Deserialize)]
struct ProbeTorchOrder {
    budget_ms: u64,
}

/// The fields of `Directive::GroupToken`.
#[derive(Deserialize)]
struct GroupTokenOrder {
    count: usize,
}

/// The fields of `Directive::Finish`.
#[derive(Deserialize)]
struct FinishOrder {
    report: Box<RunReport>,
}

/// The fields of `Reply::Local`.
#[derive(Deserialize)]
struct LocalReply {
    result: Box<CheckResult>,
}

/// The fields of `Reply::Probe`.
#[derive(Deserialize)]
struct ProbeReplies {
    results: Vec<ProbeReply>,
}

/// The fields of `Reply::Torch`.
#[derive(Deserialize)]
struct TorchReply {
    python: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The fields of `Reply::GroupToken`.
#[derive(Deserialize)]
struct GroupTokenReply {
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The fields of `Reply::Refused`.
#[derive(Deserialize)]
struct RefusedReply {
    reason: String,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gpuvet_model::results::{
        CheckStatus, DeviceInfo, Entity, EntityResult, Evidence, Lane, Measurement, Outcome,
        Verdict,
    };

    use super::super::{CollectiveOrder, CollectiveReply, HostEngine, LinkReply, NativeGroup};
    use super::*;

    /// The tag of a directive; a new variant must be named here, and then sampled in
    /// `directives()` for `every_op_is_sampled` to pass.
    fn op_of(directive: &Directive) -> &'static str {
        match directive {
            Directive::Local { .. } => "local",
            Directive::Collective(_) => "collective",
            Directive::Probe { .. } => "probe",
            Directive::ProbeTorch { .. } => "probe_torch",
            Directive::GroupToken { .. } => "group_token",
            Directive::Finish { .. } => "finish",
        }
    }

    /// The tag of a reply, as `op_of` for directives.
    fn kind_of(reply: &Reply) -> &'static str {
        match reply {
            Reply::Local { .. } => "local",
            Reply::Collective(_) => "collective",
            Reply::Probe { .. } => "probe",
            Reply::Torch { .. } => "torch",
            Reply::GroupToken { .. } => "group_token",
            Reply::Refused { .. } => "refused",
        }
    }

    fn addrs(base: u8, count: u8) -> Vec<std::net::SocketAddr> {
        (0..count)
            .map(|i| format!("10.0.{base}.{}:4000", i + 1).parse().unwrap())
            .collect()
    }

    fn check_result() -> CheckResult {
        let entity = |i: usize| Entity::Node {
            node: format!("node-{i}"),
        };
        let mut result = CheckResult::without_work(CheckName::GemmFlops, CheckStatus::Failed, "x");
        result.reason = None;
        result.duration_secs = 1.25;
        result.params = BTreeMap::from([("dtype".to_owned(), "fp32".to_owned())]);
        result.entities = (0..3)
            .map(|i| EntityResult {
                entity: entity(i),
                verdict: if i == 1 { Verdict::Slow } else { Verdict::Ok },
                lane: Lane::Host,
                reason: "a reason of a typical length for an entity result".to_owned(),
                evidence: Evidence::default(),
                measurement: Measurement::ok(entity(i), 0.5, vec![0.5, 0.25, 0.75]),
            })
            .collect();
        result
    }

    fn run_report() -> RunReport {
        let checks = vec![
            check_result(),
            CheckResult::without_work(
                CheckName::AllReduce2,
                CheckStatus::Skipped,
                "needs 2 nodes; the group has 1",
            ),
        ];
        RunReport {
            report_id: "r-1".to_owned(),
            gpuvet_version: "0.0.0-test".to_owned(),
            job_id: "job-1".to_owned(),
            attempt: 2,
            node: "node-0".to_owned(),
            instance: "inst-0".to_owned(),
            backend: "cpu".to_owned(),
            devices: vec![DeviceInfo {
                index: 0,
                name: "cpu".to_owned(),
                memory_bytes: Some(1 << 30),
                facts: Default::default(),
                details: BTreeMap::from([("threads".to_owned(), "16".to_owned())]),
            }],
            started_at_ms: 1_700_000_000_000,
            duration_secs: 1.5,
            timeout_secs: 300.0,
            outcome: Outcome::of(&checks),
            checks,
            group: None,
            context: None,
            diagnosis: None,
            repeat_offender: None,
        }
    }

    fn order() -> CollectiveOrder {
        CollectiveOrder {
            check: CheckName::AllReduce2,
            round: 7,
            session: "00112233445566778899aabbccddeeff".to_owned(),
            rank: 1,
            peers: addrs(0, 2),
            rails: Vec::new(),
            bytes: None,
            budget_ms: 5000,
            engine: HostEngine::GpuvetTcp,
            native: None,
            ring: Vec::new(),
        }
    }

    /// One or more realistic directives of every kind.
    fn directives() -> Vec<Directive> {
        vec![
            Directive::Local {
                check: CheckName::GemmFlops,
                budget_ms: 30_000,
            },
            Directive::Collective(order()),
            Directive::Collective(CollectiveOrder {
                check: CheckName::MultiAllReduce,
                rails: vec![addrs(1, 4), addrs(2, 4)],
                peers: addrs(0, 4),
                bytes: Some(64 << 20),
                ..order()
            }),
            Directive::Collective(CollectiveOrder {
                check: CheckName::PytorchGloo2,
                engine: HostEngine::TorchGloo,
                ..order()
            }),
            Directive::Collective(CollectiveOrder {
                peers: Vec::new(),
                native: Some(NativeGroup::Devices {
                    token: "00ff".to_owned(),
                    world: 16,
                    first_rank: 8,
                }),
                ring: addrs(0, 2),
                ..order()
            }),
            Directive::Collective(CollectiveOrder {
                check: CheckName::MultiAllReduce,
                peers: Vec::new(),
                native: Some(NativeGroup::Rails {
                    tokens: vec!["00".to_owned(), "01".to_owned()],
                    nodes: 4,
                    node: 3,
                }),
                ring: addrs(0, 2),
                ..order()
            }),
            Directive::Probe {
                targets: (0..3)
                    .map(|rank| ProbeTarget {
                        rank,
                        addr: addrs(0, 3)[rank as usize],
                        network: if rank == 2 { "ib0" } else { "data" }.to_owned(),
                    })
                    .collect(),
                budget_ms: 2000,
            },
            Directive::Probe {
                targets: Vec::new(),
                budget_ms: 2000,
            },
            Directive::ProbeTorch { budget_ms: 10_000 },
            Directive::GroupToken { count: 2 },
            Directive::Finish {
                report: Box::new(run_report()),
            },
        ]
    }

    /// One or more realistic replies of every kind.
    fn replies() -> Vec<Reply> {
        vec![
            Reply::Local {
                result: Box::new(check_result()),
            },
            Reply::Collective(CollectiveReply {
                value: Some(12.5),
                samples: vec![12.5, 12.25, 13.0],
                extra: BTreeMap::from([("busbw_gbps".to_owned(), 11.5)]),
                params: BTreeMap::from([("bytes".to_owned(), "67108864".to_owned())]),
                links: vec![LinkReply {
                    rank: 2,
                    bytes_sent: 1 << 26,
                    send_blocked_s: 0.5,
                    receive_blocked_s: 0.25,
                }],
                ..CollectiveReply::default()
            }),
            Reply::Collective(CollectiveReply {
                error: Some("peer 3 closed the connection".to_owned()),
                failed_at_ms: Some(1_700_000_000_123),
                wrong_result: Some("rank 2 summed 5, expected 6".to_owned()),
                ..CollectiveReply::default()
            }),
            Reply::Collective(CollectiveReply::default()),
            Reply::Probe {
                results: vec![
                    ProbeReply {
                        rank: 1,
                        network: "data".to_owned(),
                        attempts: 3,
                        successes: 3,
                        rtt_us: Some(42.5),
                        error: None,
                    },
                    ProbeReply {
                        rank: 2,
                        network: "ib0".to_owned(),
                        attempts: 3,
                        successes: 0,
                        rtt_us: None,
                        error: Some("connection refused".to_owned()),
                    },
                ],
            },
            Reply::Torch {
                python: "/usr/bin/python3".to_owned(),
                version: Some("2.4.0".to_owned()),
                error: None,
            },
            Reply::Torch {
                python: "python3".to_owned(),
                version: None,
                error: Some("No module named 'torch'".to_owned()),
            },
            Reply::GroupToken {
                tokens: vec!["00ff".to_owned(), "ff00".to_owned()],
                error: None,
            },
            Reply::GroupToken {
                tokens: Vec::new(),
                error: Some("NCCL is not loaded".to_owned()),
            },
            Reply::Refused {
                reason: "cannot read the directive: missing field `op`".to_owned(),
            },
        ]
    }

    fn sorted(names: impl IntoIterator<Item = &'static str>) -> Vec<&'static str> {
        let mut names: Vec<_> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The message of a derived `Deserialize`'s error, without its position.
    fn without_position(err: &serde_json::Error) -> String {
        let message = err.to_string();
        match message.rfind(" at line ") {
            Some(at) => message[..at].to_owned(),
            None => message,
        }
    }

    #[test]
    fn every_op_and_reply_kind_is_sampled() {
        assert_eq!(
            sorted(directives().iter().map(op_of)),
            sorted(DIRECTIVE_OPS.to_vec())
        );
        assert_eq!(
            sorted(replies().iter().map(kind_of)),
            sorted(REPLY_KINDS.to_vec())
        );
    }

    #[test]
    fn every_directive_reads_as_the_derived_deserialize_reads_it() {
        for directive in directives() {
            let json = serde_json::to_string(&directive).unwrap();
            let fast = parse_directive(&json).unwrap_or_else(|err| panic!("{json}: {err}"));
            let derived: Directive = serde_json::from_str(&json).unwrap();
            assert_eq!(fast, directive, "{json}");
            assert_eq!(fast, derived, "{json}");
        }
    }

    #[test]
    fn every_reply_reads_as_the_derived_deserialize_reads_it_with_or_without_stamps() {
        let stamps = [
            (None, None),
            (Some(1_700_000_000_000), Some(1_700_000_000_250)),
            (Some(1_700_000_000_000), None),
            (None, Some(1_700_000_000_250)),
        ];
        for reply in replies() {
            for (began_ms, ended_ms) in stamps {
                let stamped = Stamped {
                    began_ms,
                    ended_ms,
                    reply: reply.clone(),
                };
                let json = serde_json::to_string(&stamped).unwrap();
                let fast = parse_stamped(&json).unwrap_or_else(|err| panic!("{json}: {err}"));
                let derived: Stamped = serde_json::from_str(&json).unwrap();
                assert_eq!(fast, stamped, "{json}");
                assert_eq!(fast, derived, "{json}");
            }
        }
    }

    #[test]
    fn fields_in_any_order_and_unknown_fields_read_as_the_derived_deserialize_reads_them() {
        let directive = r#"{"budget_ms":5,"later":{"op":"finish"},"op":"probe_torch"}"#;
        let fast = parse_directive(directive).unwrap();
        assert_eq!(fast, Directive::ProbeTorch { budget_ms: 5 });
        assert_eq!(fast, serde_json::from_str::<Directive>(directive).unwrap());

        let stamped = r#"{"reason":"busy","ended_ms":9,"later":[1,2],"reply":"refused"}"#;
        let fast = parse_stamped(stamped).unwrap();
        assert_eq!(
            fast,
            Stamped {
                began_ms: None,
                ended_ms: Some(9),
                reply: Reply::Refused {
                    reason: "busy".to_owned()
                },
            }
        );
        assert_eq!(fast, serde_json::from_str::<Stamped>(stamped).unwrap());
    }

    #[test]
    fn an_unknown_tag_names_every_accepted_one_as_serde_does() {
        let json = r#"{"op":"format_disk","budget_ms":5}"#;
        let err = parse_directive(json).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown variant `format_disk`, expected one of `local`, `collective`, `probe`, \
             `probe_torch`, `group_token`, `finish`"
        );
        let derived = serde_json::from_str::<Directive>(json).unwrap_err();
        assert_eq!(err, without_position(&derived));

        let json = r#"{"reply":"shrug","began_ms":1}"#;
        let err = parse_stamped(json).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown variant `shrug`, expected one of `local`, `collective`, `probe`, \
             `torch`, `group_token`, `refused`"
        );
        let derived = serde_json::from_str::<Stamped>(json).unwrap_err();
        assert_eq!(err, without_position(&derived));
    }

    #[test]
    fn a_missing_tag_names_the_tag_field() {
        let json = r#"{"budget_ms":5}"#;
        let err = parse_directive(json).unwrap_err().to_string();
        assert_eq!(err, "missing field `op`");
        let derived = serde_json::from_str::<Directive>(json).unwrap_err();
        assert_eq!(err, without_position(&derived));

        let json = r#"{"reason":"busy","began_ms":1,"ended_ms":2}"#;
        let err = parse_stamped(json).unwrap_err().to_string();
        assert_eq!(err, "missing field `reply`");
        let derived = serde_json::from_str::<Stamped>(json).unwrap_err();
        assert_eq!(err, without_position(&derived));
    }

    /// Both readers fail on `json`, and the fast one's message (without a position)
    /// is the derived one's and says `what`.
    fn both_refuse<T: std::fmt::Debug + for<'de> Deserialize<'de>>(
        fast: impl Fn(&str) -> Result<T, serde_json::Error>,
        json: &str,
        what: &str,
    ) {
        let err = without_position(&fast(json).expect_err(json));
        let derived = without_position(&serde_json::from_str::<T>(json).expect_err(json));
        assert!(err.contains(what), "{json}: {err}");
        assert_eq!(err, derived, "{json}");
    }

    #[test]
    fn a_malformed_variant_body_names_what_is_wrong() {
        let directive = |json: &str, what: &str| both_refuse(parse_directive, json, what);
        directive(
            r#"{"op":"local","check":"gemm_flops"}"#,
            "missing field `budget_ms`",
        );
        directive(
            r#"{"op":"local","check":"no_such_check","budget_ms":5}"#,
            "unknown check `no_such_check`",
        );
        directive(
            r#"{"op":"collective","check":"all_reduce_2"}"#,
            "missing field `round`",
        );
        directive(
            r#"{"op":"group_token","count":"two"}"#,
            "invalid type: string \"two\", expected usize",
        );
        directive(r#"{"op":"finish"}"#, "missing field `report`");

        let stamped = |json: &str, what: &str| both_refuse(parse_stamped, json, what);
        stamped(
            r#"{"reply":"refused","began_ms":1}"#,
            "missing field `reason`",
        );
        stamped(
            r#"{"reply":"collective","value":"fast"}"#,
            "invalid type: string \"fast\", expected f64",
        );
        stamped(
            r#"{"reply":"torch","python":"python3","began_ms":"soon"}"#,
            "invalid type: string \"soon\", expected u64",
        );
        stamped(
            r#"{"reply":"probe","results":[{"rank":1}]}"#,
            "missing field `network`",
        );

        // Not JSON at all, not an object, or a tag that is not a string.
        assert!(parse_directive(r#"{"op":"local","#).is_err());
        assert!(parse_stamped("42").is_err());
        assert!(parse_directive(r#"{"op":7}"#).is_err());
    }
}

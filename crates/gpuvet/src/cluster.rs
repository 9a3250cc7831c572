//! Kubernetes from the binary (feature `k8s`): when gpuvet runs in a pod, its events
//! also go to the cluster as Events, the sanity verdict becomes the pod condition
//! `GpuvetSanity` and annotations, and `fail_action: rebuild` quarantines the culprit
//! nodes and deletes the pod instead of running the rebuild hook.
//!
//! A failure to reach the API is a warning, never a reason to hold the app back: the
//! store keeps every event, and the exit code still says what happened. Without the
//! feature, [`Cluster`] has no value, so nothing here runs, and `gpuvet untaint` says
//! how to build a gpuvet that has it.

use gpuvet_model::config::Config;
use gpuvet_model::events::Attempt;
#[cfg(not(feature = "k8s"))]
use gpuvet_model::events::EventKind;
#[cfg(not(feature = "k8s"))]
use gpuvet_model::results::{Lane, RunReport};

#[cfg(not(feature = "k8s"))]
use crate::cli::UntaintArgs;
#[cfg(not(feature = "k8s"))]
use crate::failure::Failure;

/// The page of an instance on the configured `gpuvet serve` (the first of its
/// replicas: they show the same store), for the Events' link.
// Only a gpuvet with `k8s` links to reports; the tests use it in both builds.
#[cfg_attr(not(feature = "k8s"), allow(dead_code))]
pub fn report_url(config: &Config, attempt: &Attempt) -> Option<String> {
    let base = config.settings.report_to.first()?;
    Some(format!(
        "{base}/instances/{}/{}",
        path_segment(&attempt.job_id),
        path_segment(&attempt.node)
    ))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What the rebuild did in the cluster, for the `InstanceRebuildRequested` event.
#[derive(Debug)]
pub struct Rebuilt {
    pub details: serde_json::Value,
    pub summary: String,
}

#[cfg(feature = "k8s")]
pub use imp::{Cluster, untaint};

#[cfg(feature = "k8s")]
mod imp {
    use std::sync::Arc;

    use gpuvet_kube::client::{UntaintGate, Untainted, in_cluster_client, inferred_client};
    use gpuvet_kube::event::{EventSpec, PUBLISHED, Regarding};
    use gpuvet_kube::quarantine::{TAINT_KEY, culprits};
    use gpuvet_kube::status::Verdict;
    use gpuvet_kube::{Kube, KubeError};
    use gpuvet_model::config::{Config, QuarantinePolicy};
    use gpuvet_model::events::{Attempt, EventKind};
    use gpuvet_model::exit_codes;
    use gpuvet_model::results::{Lane, Outcome, RunReport};
    use gpuvet_model::time::unix_now_ms;
    use serde_json::json;

    use super::{Rebuilt, report_url};
    use crate::cli::UntaintArgs;
    use crate::failure::{Failure, note, warn};
    use crate::identity::load_config;
    use crate::{node_runs, output};

    /// The pod this gpuvet runs in, and a client for the API.
    #[derive(Debug)]
    pub struct Cluster {
        kube: Kube,
        runtime: tokio::runtime::Runtime,
        policy: QuarantinePolicy,
        report_url: Option<String>,
    }

    impl Cluster {
        /// The cluster, when this process runs in a pod with its service account and
        /// `gpuvet.kubernetes.enabled` is not `off`. Outside a cluster: `None`, quietly;
        /// in one that is not usable: `None`, with a warning saying why.
        pub fn detect(config: &Config, attempt: &Attempt) -> Option<Arc<Cluster>> {
            if !config.settings.kubernetes.enabled {
                return None;
            }
            let connect = || -> Result<Option<Cluster>, KubeError> {
                let Some(pod) = gpuvet_kube::detect::this_pod()? else {
                    return Ok(None);
                };
                // One worker of its own: the client's background task runs while the
                // app's and the runtime check's threads each wait on their request.
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("gpuvet-kube")
                    .enable_all()
                    .build()
                    .map_err(|err| KubeError::Config(err.to_string()))?;
                let client = runtime.block_on(in_cluster_client())?;
                Ok(Some(Cluster {
                    kube: Kube::new(client, pod),
                    runtime,
                    policy: config.settings.kubernetes.quarantine,
                    report_url: report_url(config, attempt),
                }))
            };
            match connect() {
                Ok(Some(cluster)) => {
                    let pod = cluster.kube.pod();
                    note(format!(
                        "kubernetes: pod `{}/{}` on node `{}`",
                        pod.namespace, pod.name, pod.node
                    ));
                    Some(Arc::new(cluster))
                }
                Ok(None) => None,
                Err(err) => {
                    warn_kube("not acting on the cluster", &err);
                    None
                }
            }
        }

        /// Publishes one of gpuvet's events as an Event on the pod, and on the node
        /// too for the host lane; other kinds are not published.
        pub fn publish(&self, kind: EventKind, lane: Option<Lane>, note: &str, key: &str) {
            if !PUBLISHED.contains(&kind) {
                return;
            }
            let spec = EventSpec {
                kind,
                lane,
                note: note.to_owned(),
                report_url: self.report_url.clone(),
                key: key.to_owned(),
            };
            let mut regarding = vec![Regarding::Pod];
            if lane == Some(Lane::Host) {
                regarding.push(Regarding::Node);
            }
            for on in regarding {
                let sent = self
                    .runtime
                    .block_on(self.kube.publish(on, &spec, unix_now_ms()));
                if let Err(err) = sent {
                    warn_kube(&format!("the {kind} event is not in the cluster"), &err);
                }
            }
        }

        /// The sanity verdict on the pod: the condition `GpuvetSanity` and the
        /// annotations. `ready` says whether the pod may serve (passed, or failed under
        /// `retain`). The verdict's event goes through [`Cluster::publish`] with the
        /// others.
        pub fn set_verdict(&self, report: &RunReport, kind: EventKind, summary: &str, ready: bool) {
            let verdict = Verdict {
                ready,
                kind,
                outcome: report.outcome.as_str().to_owned(),
                summary: summary.to_owned(),
                lane: report
                    .first_lane()
                    .filter(|_| report.outcome == Outcome::Failed),
                job_id: report.job_id.clone(),
                attempt: report.attempt,
                report_url: self.report_url.clone(),
            };
            let set = self
                .runtime
                .block_on(self.kube.set_verdict(&verdict, unix_now_ms()));
            if let Err(err) = set {
                warn_kube("the pod condition `GpuvetSanity` is not set", &err);
            }
        }

        /// The rebuild in a cluster: taint the culprit nodes the circuit breaker
        /// allows, hand what happened to `record` (the `InstanceRebuildRequested`
        /// event, in the store and the cluster, before the pod goes), then delete this
        /// pod, unless the breaker refused a node: then the exit code alone asks for
        /// the rebuild, as `fail` would.
        pub fn rebuild(
            &self,
            report: &RunReport,
            record: impl FnOnce(&Rebuilt) -> Result<(), Failure>,
        ) -> Result<(), Failure> {
            let found = culprits(report);
            let quarantine = match &found.whole_group {
                Some(_) => Ok(Default::default()),
                None => self.runtime.block_on(self.kube.quarantine(
                    &found.nodes,
                    &self.policy,
                    unix_now_ms(),
                )),
            };
            let (quarantine, error) = match quarantine {
                Ok(q) => (q, None),
                Err(err) => {
                    warn_kube("no node was quarantined", &err);
                    (Default::default(), Some(err.with_causes()))
                }
            };
            for (node, why) in &quarantine.refused {
                warn(format!("kubernetes: node `{node}` not quarantined: {why}"));
            }
            for node in &quarantine.not_in_cluster {
                warn(format!(
                    "kubernetes: culprit `{node}` is not a node of this cluster; set \
                     `NODE_NAME` from `spec.nodeName` so gpuvet's node names are the cluster's"
                ));
            }
            for (node, why) in &quarantine.failed {
                warn(format!("kubernetes: node `{node}` not quarantined: {why}"));
            }
            if let Some(why) = &found.whole_group {
                warn(format!("kubernetes: {why}"));
            }
            let delete = quarantine.deletes_pod();
            let mut summary = quarantine.summary(&self.kube.pod().name);
            if let Some(why) = &found.whole_group {
                summary.push_str(&format!("; {why}"));
            }
            if let Some(why) = &error {
                summary.push_str(&format!("; {why}"));
            }
            let rebuilt = Rebuilt {
                details: json!({
                    "kubernetes": {
                        "pod": self.kube.pod().name,
                        "namespace": self.kube.pod().namespace,
                        "node": self.kube.pod().node,
                        "culprits": found.nodes,
                        "whole_group": found.whole_group,
                        "quarantine": quarantine,
                        "error": error,
                        "pod_deleted": delete,
                    }
                }),
                summary,
            };
            record(&rebuilt)?;
            if delete && let Err(err) = self.runtime.block_on(self.kube.delete_pod()) {
                warn_kube(
                    "the pod was not deleted; the exit code asks for the rebuild",
                    &err,
                );
            }
            Ok(())
        }
    }

    fn warn_kube(what: &str, err: &KubeError) {
        let mut text = format!("kubernetes: {what}: {}", err.with_causes());
        if let Some(hint) = err.hint() {
            text.push_str(&format!("\nhint: {hint}"));
        }
        warn(text);
    }

    /// `gpuvet untaint NODE`: lifts gpuvet's taint, with the kubeconfig's credentials
    /// (or the pod's service account), once the node's runs (from the store or
    /// `--server`) prove it healthy since its quarantine, or with `--force`; either
    /// way recorded as a `NodeUntainted` event.
    pub fn untaint(args: UntaintArgs) -> Result<i32, Failure> {
        let config = load_config(args.source.config.as_deref())?;
        let policy = config.settings.repeat_offender;
        // Read before touching the cluster: a wrong `--store` fails without a call.
        let runs = if args.force {
            Vec::new()
        } else {
            node_runs::summaries(&node_runs::latest_runs(&args.source, &config, &args.node)?)
        };
        let gate = if args.force {
            UntaintGate::Force
        } else {
            UntaintGate::Proof {
                runs: &runs,
                policy: &policy,
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| Failure::bug_from("cannot start the async runtime", err))?;
        let result = runtime.block_on(async {
            let client = inferred_client().await?;
            gpuvet_kube::client::untaint(&client, &args.node, gate).await
        });
        let node = &args.node;
        let who = node_runs::who();
        let (message, details) = match result {
            Ok(Untainted::Proven(proof)) => (
                format!("lifted `{TAINT_KEY}` from node `{node}`: {}", proof.summary),
                json!({ "forced": false, "by": who, "reason": args.reason, "proof": proof }),
            ),
            Ok(Untainted::Forced { quarantined_at_ms }) => (
                format!(
                    "lifted `{TAINT_KEY}` from node `{node}` without proof, forced by `{who}`: {}",
                    args.reason.as_deref().unwrap_or("")
                ),
                json!({
                    "forced": true, "by": who, "reason": args.reason,
                    "quarantined_at_ms": quarantined_at_ms,
                }),
            ),
            Ok(Untainted::WasNotTainted) => {
                output::stdout(&format!(
                    "node `{node}` has no `{TAINT_KEY}` taint; nothing to lift\n"
                ))?;
                return Ok(exit_codes::SUCCESS);
            }
            Err(err) => {
                let code = match err {
                    KubeError::NoSuchNode(_) | KubeError::Config(_) => exit_codes::USAGE,
                    KubeError::Unproven { .. } => exit_codes::NOT_PROVEN,
                    _ => exit_codes::KUBE_API_ERROR,
                };
                // With the error's own hint.
                return Err(Failure::new(code, err));
            }
        };
        output::stdout(&format!("{message}\n"))?;
        let (attempt, event) = node_runs::untainted_event(node, message, details);
        node_runs::record_and_send(&args.source, &config, &attempt, &event);
        Ok(exit_codes::SUCCESS)
    }
}

/// Without the feature there is never a cluster: this type has no value.
#[cfg(not(feature = "k8s"))]
#[derive(Debug)]
pub enum Cluster {}

#[cfg(not(feature = "k8s"))]
impl Cluster {
    pub fn detect(_: &Config, _: &Attempt) -> Option<std::sync::Arc<Cluster>> {
        None
    }

    pub fn publish(&self, _: EventKind, _: Option<Lane>, _: &str, _: &str) {
        match *self {}
    }

    pub fn set_verdict(&self, _: &RunReport, _: EventKind, _: &str, _: bool) {
        match *self {}
    }

    pub fn rebuild(
        &self,
        _: &RunReport,
        _: impl FnOnce(&Rebuilt) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        match *self {}
    }
}

/// `gpuvet untaint` in a gpuvet built without the feature `k8s`.
#[cfg(not(feature = "k8s"))]
pub fn untaint(args: UntaintArgs) -> Result<i32, Failure> {
    Err(Failure::usage(format!(
        "cannot lift the taint of node `{}`: this gpuvet was built without Kubernetes support",
        args.node
    ))
    .with_hint("build gpuvet with `cargo build --release --features k8s`, or use the image of `deploy/Dockerfile`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_link_names_the_instance_page() {
        let mut config = Config::default();
        let attempt = Attempt {
            job_id: "vllm/0 a".into(),
            attempt: 1,
            node: "gpu-7".into(),
            instance: "vllm-0".into(),
        };
        assert_eq!(report_url(&config, &attempt), None);
        config.settings.report_to = vec!["http://gpuvet-serve:9470".into()];
        assert_eq!(
            report_url(&config, &attempt).as_deref(),
            Some("http://gpuvet-serve:9470/instances/vllm%2F0%20a/gpu-7")
        );
    }

    #[cfg(not(feature = "k8s"))]
    #[test]
    fn without_the_feature_untaint_says_how_to_get_it() {
        let failure = untaint(UntaintArgs {
            node: "gpu-7".into(),
            force: false,
            reason: None,
            source: crate::cli::NodeSourceArgs {
                config: None,
                store: None,
                server: None,
            },
        })
        .unwrap_err();
        assert_eq!(failure.code, gpuvet_model::exit_codes::USAGE);
        assert!(
            failure
                .error
                .to_string()
                .contains("without Kubernetes support")
        );
        assert!(failure.hint.unwrap().contains("--features k8s"));
    }

    #[cfg(not(feature = "k8s"))]
    #[test]
    fn without_the_feature_there_is_no_cluster() {
        let attempt = Attempt {
            job_id: "j".into(),
            attempt: 1,
            node: "n".into(),
            instance: "i".into(),
        };
        assert!(Cluster::detect(&Config::default(), &attempt).is_none());
    }
}

//! The thin layer that sends what the pure functions build. Each method names the
//! [`api`](crate::api) entry of every request it sends.

use std::time::Duration;

use gpuvet_model::config::QuarantinePolicy;
use gpuvet_model::offenders::{Proof, RepeatOffenderPolicy, untaint_proof};
use gpuvet_model::overview::RunSummary;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;

use crate::event::{EventSpec, Regarding, event_body, event_name, series_patch};
use crate::quarantine::{
    Culprit, Decision, decide, quarantined_at_ms, repeat_offender_flag, taint_patch, untaint_patch,
};
use crate::status::{Verdict, annotations_patch, condition_patch};
use crate::{KubeError, PodRef};

/// How long to wait for the API server to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for an answer: after the verdict gpuvet acts within seconds.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for the pod gpuvet runs in.
#[derive(Clone)]
pub struct Kube {
    client: kube::Client,
    pod: PodRef,
}

impl std::fmt::Debug for Kube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kube").field("pod", &self.pod).finish()
    }
}

/// How an event was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Created,
    /// Folded into the existing Event's series, now at this count.
    Repeated(i32),
}

/// What the quarantine did, node by node; goes into the `InstanceRebuildRequested`
/// event's details.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quarantine {
    pub tainted: Vec<String>,
    pub already_tainted: Vec<String>,
    /// Culprits the cluster has no node of.
    pub not_in_cluster: Vec<String>,
    /// Node and the breaker's reason.
    pub refused: Vec<(String, String)>,
    /// Node and the API's error.
    pub failed: Vec<(String, String)>,
}

impl Quarantine {
    /// Whether the rebuild goes on to delete the pod: not when the breaker refused a
    /// node (then the exit code alone asks for the rebuild, as `fail` would).
    pub fn deletes_pod(&self) -> bool {
        self.refused.is_empty()
    }

    /// One line for the `InstanceRebuildRequested` event's note and message.
    pub fn summary(&self, pod: &str) -> String {
        let mut text = format!(
            "rebuild of pod `{pod}`: tainted {} ({})",
            list(&self.tainted),
            crate::quarantine::TAINT_KEY
        );
        if !self.already_tainted.is_empty() {
            text.push_str(&format!(
                "; already tainted {}",
                list(&self.already_tainted)
            ));
        }
        if !self.refused.is_empty() {
            text.push_str(&format!(
                "; refused {}; the pod is not deleted",
                reasons(&self.refused)
            ));
        }
        if !self.failed.is_empty() {
            text.push_str(&format!("; could not taint {}", reasons(&self.failed)));
        }
        if !self.not_in_cluster.is_empty() {
            text.push_str(&format!(
                "; not nodes of this cluster: {}",
                list(&self.not_in_cluster)
            ));
        }
        text
    }
}

fn list(nodes: &[String]) -> String {
    if nodes.is_empty() {
        return "no node".to_owned();
    }
    let names: Vec<String> = nodes.iter().map(|n| format!("`{n}`")).collect();
    names.join(", ")
}

fn reasons(pairs: &[(String, String)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .map(|(n, why)| format!("`{n}`: {why}"))
        .collect();
    parts.join("; ")
}

/// Whether `gpuvet untaint` changed the node, and on what grounds.
#[derive(Debug, Clone, PartialEq)]
pub enum Untainted {
    /// The node's runs since its quarantine proved it healthy.
    Proven(Proof),
    /// Lifted without proof, as asked; the quarantine began at this time (Unix
    /// milliseconds) when it was known.
    Forced {
        quarantined_at_ms: Option<u64>,
    },
    WasNotTainted,
}

/// What `gpuvet untaint` lifts a quarantine on.
#[derive(Debug, Clone, Copy)]
pub enum UntaintGate<'a> {
    /// The node's runs across jobs, newest first, which must prove it healthy since its
    /// quarantine ([`gpuvet_model::offenders::untaint_proof`]).
    Proof {
        runs: &'a [RunSummary],
        policy: &'a RepeatOffenderPolicy,
    },
    /// No proof: the operator takes it on (`--force`).
    Force,
}

/// A client from the pod's service account, with gpuvet's timeouts.
pub async fn in_cluster_client() -> Result<kube::Client, KubeError> {
    let mut config = kube::Config::incluster().map_err(|err| KubeError::Config(err.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    kube::Client::try_from(config).map_err(|err| KubeError::Config(err.to_string()))
}

/// A client from the kubeconfig, else the pod's service account (`gpuvet untaint`).
pub async fn inferred_client() -> Result<kube::Client, KubeError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|err| KubeError::Config(err.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    kube::Client::try_from(config).map_err(|err| KubeError::Config(err.to_string()))
}

impl Kube {
    pub fn new(client: kube::Client, pod: PodRef) -> Kube {
        Kube { client, pod }
    }

    pub fn pod(&self) -> &PodRef {
        &self.pod
    }

    fn events(&self) -> Api<Event> {
        Api::namespaced(self.client.clone(), &self.pod.namespace)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.pod.namespace)
    }

    /// Publishes one event about the pod or its node: created the first time
    /// ([`crate::api::GET_EVENT`], then [`crate::api::CREATE_EVENT`]), folded into its
    /// series after that ([`crate::api::PATCH_EVENT`]). Two pods racing to create the
    /// same Event cannot happen: its name includes the pod's.
    pub async fn publish(
        &self,
        regarding: Regarding,
        spec: &EventSpec,
        now_ms: u64,
    ) -> Result<Published, KubeError> {
        let name = event_name(&self.pod, regarding, spec);
        let events = self.events();
        let existing = events
            .get_opt(&name)
            .await
            .map_err(|err| KubeError::api(format!("read event `{name}`"), err))?;
        match existing {
            None => {
                let body = event_body(&self.pod, regarding, spec, now_ms);
                events
                    .create(&PostParams::default(), &body)
                    .await
                    .map_err(|err| KubeError::api(format!("create event `{name}`"), err))?;
                Ok(Published::Created)
            }
            Some(existing) => {
                let patch = series_patch(&existing, spec, now_ms);
                let count = patch["series"]["count"].as_i64().unwrap_or(2) as i32;
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|err| KubeError::api(format!("update event `{name}`"), err))?;
                Ok(Published::Repeated(count))
            }
        }
    }

    /// Sets the pod condition ([`crate::api::PATCH_POD_STATUS`]) and the verdict's
    /// annotations ([`crate::api::PATCH_POD`]).
    pub async fn set_verdict(&self, verdict: &Verdict, now_ms: u64) -> Result<(), KubeError> {
        let pods = self.pods();
        let name = &self.pod.name;
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(condition_patch(verdict, now_ms)),
        )
        .await
        .map_err(|err| KubeError::api(format!("set the condition of pod `{name}`"), err))?;
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(annotations_patch(verdict, now_ms)),
        )
        .await
        .map_err(|err| KubeError::api(format!("annotate pod `{name}`"), err))?;
        Ok(())
    }

    /// Quarantines the culprits the breaker allows: lists the nodes
    /// ([`crate::api::LIST_NODES`]), then taints each allowed one
    /// ([`crate::api::PATCH_NODE`]), reading it again ([`crate::api::GET_NODE`]) and
    /// retrying once when it changed in between. Only the list failing is an error; a
    /// node that cannot be tainted is recorded in the result.
    pub async fn quarantine(
        &self,
        culprits: &[Culprit],
        policy: &QuarantinePolicy,
        now_ms: u64,
    ) -> Result<Quarantine, KubeError> {
        let mut outcome = Quarantine::default();
        if culprits.is_empty() {
            return Ok(outcome);
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = nodes
            .list(&ListParams::default())
            .await
            .map_err(|err| KubeError::api("list the nodes", err))?;
        for (culprit, decision) in decide(&list.items, culprits, policy, now_ms) {
            match decision {
                Decision::AlreadyTainted => outcome.already_tainted.push(culprit.node),
                Decision::NotInCluster => outcome.not_in_cluster.push(culprit.node),
                Decision::Refused(why) => outcome.refused.push((culprit.node, why)),
                Decision::Taint => {
                    let listed = list
                        .items
                        .iter()
                        .find(|n| n.metadata.name.as_deref() == Some(&culprit.node));
                    match taint(&nodes, listed, &culprit, now_ms).await {
                        Ok(()) => outcome.tainted.push(culprit.node),
                        Err(err) => outcome.failed.push((culprit.node, err.with_causes())),
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// Deletes the pod ([`crate::api::DELETE_POD`]), so its controller makes a new one
    /// (which the taints keep off the culprit nodes).
    pub async fn delete_pod(&self) -> Result<(), KubeError> {
        let name = &self.pod.name;
        self.pods()
            .delete(name, &DeleteParams::default())
            .await
            .map_err(|err| KubeError::api(format!("delete pod `{name}`"), err))?;
        Ok(())
    }
}

async fn taint(
    nodes: &Api<Node>,
    listed: Option<&Node>,
    culprit: &Culprit,
    now_ms: u64,
) -> Result<(), KubeError> {
    let name = &culprit.node;
    let mut node = match listed {
        Some(node) => node.clone(),
        None => get_node(nodes, name).await?,
    };
    for attempt in 0..2 {
        let patch = taint_patch(&node, culprit, now_ms);
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) if attempt == 0 && KubeError::is_conflict(&err) => {
                node = get_node(nodes, name).await?;
            }
            Err(err) => return Err(KubeError::api(format!("taint node `{name}`"), err)),
        }
    }
    unreachable!("the second attempt returns")
}

async fn get_node(nodes: &Api<Node>, name: &str) -> Result<Node, KubeError> {
    nodes
        .get_opt(name)
        .await
        .map_err(|err| KubeError::api(format!("read node `{name}`"), err))?
        .ok_or_else(|| KubeError::NoSuchNode(name.to_owned()))
}

/// Lifts gpuvet's taint from `node` ([`crate::api::GET_NODE`], then
/// [`crate::api::PATCH_NODE`]), with its annotations, when `gate` lets it: the
/// node's runs since the quarantine's time prove it healthy (two in a row for a
/// repeat offender), or the lift is forced. Refused: [`KubeError::Unproven`], and the
/// node is left as it was.
pub async fn untaint(
    client: &kube::Client,
    node: &str,
    gate: UntaintGate<'_>,
) -> Result<Untainted, KubeError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = get_node(&nodes, node).await?;
    let Some(patch) = untaint_patch(&current) else {
        return Ok(Untainted::WasNotTainted);
    };
    let quarantined_at = quarantined_at_ms(&current);
    let lifted = match gate {
        UntaintGate::Force => Untainted::Forced {
            quarantined_at_ms: quarantined_at,
        },
        UntaintGate::Proof { runs, policy } => {
            let flag = repeat_offender_flag(&current);
            match untaint_proof(runs, quarantined_at, flag, policy) {
                Ok(proof) => Untainted::Proven(proof),
                Err(reason) => {
                    return Err(KubeError::Unproven {
                        node: node.to_owned(),
                        reason,
                    });
                }
            }
        }
    };
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|err| KubeError::api(format!("lift the taint of node `{node}`"), err))?;
    Ok(lifted)
}

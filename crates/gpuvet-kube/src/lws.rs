//! The LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`) as typed structs mirroring its
//! CRD, for the test that parses `deploy/lws.yaml`. Unknown fields are refused, so a
//! typo in the example fails the test; the pod templates are k8s-openapi's own.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

pub const API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
pub const KIND: &str = "LeaderWorkerSet";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderWorkerSet {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: LeaderWorkerSetSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Groups; default 1.
    pub replicas: Option<i32>,
    pub leader_worker_template: LeaderWorkerTemplate,
    pub rollout_strategy: Option<RolloutStrategy>,
    pub startup_policy: Option<StartupPolicy>,
    pub network_config: Option<NetworkConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    /// Pods per group, the leader included; default 1.
    pub size: Option<i32>,
    /// Without one, the leader runs the worker template.
    pub leader_template: Option<PodTemplateSpec>,
    pub worker_template: PodTemplateSpec,
    pub restart_policy: Option<RestartPolicy>,
    pub sub_group_policy: Option<SubGroupPolicy>,
}

/// What happens to the group when one of its pods restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RestartPolicy {
    /// The whole group is recreated: what `fail` and `rebuild` rely on.
    RecreateGroupOnPodRestart,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum StartupPolicy {
    LeaderCreated,
    LeaderReady,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutStrategy {
    #[serde(rename = "type")]
    pub type_: String,
    pub rolling_update_configuration: Option<RollingUpdateConfiguration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    pub max_unavailable: Option<serde_json::Value>,
    pub max_surge: Option<serde_json::Value>,
    pub partition: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkConfig {
    pub subdomain_policy: Option<SubdomainPolicy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SubdomainPolicy {
    Shared,
    UniquePerReplica,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SubGroupPolicy {
    pub sub_group_size: Option<i32>,
    #[serde(rename = "type")]
    pub type_: Option<String>,
}

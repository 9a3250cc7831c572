//! Kubernetes for gpuvet, built into the binary with its feature `k8s`.
//!
//! In a cluster, gpuvet's actions mean what they mean to PAI on Kubernetes:
//! - its deployment events become events.k8s.io/v1 Events on the pod (and on the node
//!   for host-lane findings), with repeats folded into the Event's `series`
//!   ([`event`]);
//! - the sanity verdict becomes the pod condition `GpuvetSanity`, usable as a readiness
//!   gate, and annotations that hold it ([`status`]);
//! - `fail_action: rebuild` taints the culprit nodes behind a circuit breaker and
//!   deletes the pod, so the new pod lands elsewhere ([`quarantine`]);
//! - `gpuvet untaint NODE` lifts the taint.
//!
//! Every request body is built by a pure function, so it is tested without a cluster;
//! [`client::Kube`] only sends them. [`api`] lists every API call the client makes,
//! which the RBAC manifests in `deploy/` are tested against. [`detect`] says whether
//! this process runs in a pod, from its environment and service-account token.

pub mod api;
pub mod client;
pub mod detect;
mod error;
pub mod event;
pub mod lws;
pub mod quarantine;
pub mod status;
mod time;

pub use client::Kube;
pub use detect::PodRef;
pub use error::KubeError;

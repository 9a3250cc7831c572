//! Whether this process runs in a Kubernetes pod, and which one.
//!
//! In a cluster when `KUBERNETES_SERVICE_HOST` is set and the service-account token is
//! mounted. The pod then names itself through the downward API (the manifests in
//! `deploy/` set these):
//!
//! | variable | from |
//! |---|---|
//! | `POD_NAME` | `fieldRef: metadata.name` |
//! | `POD_NAMESPACE` | `fieldRef: metadata.namespace` |
//! | `NODE_NAME` | `fieldRef: spec.nodeName` |
//! | `POD_UID` (optional) | `fieldRef: metadata.uid` |
//!
//! Outside a cluster nothing is read and nothing is needed.

use std::path::Path;

use crate::KubeError;

/// Where Kubernetes mounts the pod's service-account token.
pub const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// Set in every container of a cluster.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
pub const POD_NAME_ENV: &str = "POD_NAME";
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
pub const NODE_NAME_ENV: &str = "NODE_NAME";
pub const POD_UID_ENV: &str = "POD_UID";

/// The pod this gpuvet runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub namespace: String,
    /// The node the pod was scheduled on (`spec.nodeName`).
    pub node: String,
    pub uid: Option<String>,
}

/// The pod, from an environment (`env` looks a variable up) and whether the token is
/// mounted: `Ok(None)` outside a cluster, an error when in one without the pod's names.
pub fn detect(
    env: &dyn Fn(&str) -> Option<String>,
    token_present: bool,
) -> Result<Option<PodRef>, KubeError> {
    let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    if var(SERVICE_HOST_ENV).is_none() || !token_present {
        return Ok(None);
    }
    let required = |name: &'static str| var(name).ok_or(KubeError::MissingEnv { var: name });
    Ok(Some(PodRef {
        name: required(POD_NAME_ENV)?,
        namespace: required(POD_NAMESPACE_ENV)?,
        node: required(NODE_NAME_ENV)?,
        uid: var(POD_UID_ENV),
    }))
}

/// [`detect`] with this process's environment and the token's usual path.
pub fn this_pod() -> Result<Option<PodRef>, KubeError> {
    detect(
        &|name| std::env::var(name).ok(),
        Path::new(TOKEN_PATH).exists(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    const FULL: &[(&str, &str)] = &[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("POD_NAME", "vllm-0-1"),
        ("POD_NAMESPACE", "inference"),
        ("NODE_NAME", "gpu-node-7"),
    ];

    #[test]
    fn a_pod_names_itself_from_the_downward_api() {
        let pod = detect(&env(FULL), true).unwrap().unwrap();
        assert_eq!(
            pod,
            PodRef {
                name: "vllm-0-1".into(),
                namespace: "inference".into(),
                node: "gpu-node-7".into(),
                uid: None,
            }
        );
    }

    #[test]
    fn outside_a_cluster_nothing_is_needed() {
        assert_eq!(detect(&env(&[]), false).unwrap(), None);
        // The downward API's names alone do not make a cluster.
        assert_eq!(detect(&env(&FULL[1..]), true).unwrap(), None);
        // Nor does the service host without a token (e.g. automount turned off).
        assert_eq!(detect(&env(FULL), false).unwrap(), None);
        assert_eq!(
            detect(&env(&[("KUBERNETES_SERVICE_HOST", " ")]), true).unwrap(),
            None
        );
    }

    #[test]
    fn in_a_cluster_a_missing_name_is_an_error_with_a_hint() {
        let err = detect(&env(&FULL[..3]), true).unwrap_err();
        assert!(matches!(err, KubeError::MissingEnv { var: "NODE_NAME" }));
        assert_eq!(
            err.to_string(),
            "running in a Kubernetes pod, but `NODE_NAME` is not set"
        );
        assert!(err.hint().unwrap().contains("spec.nodeName"));
        let err = detect(&env(&[("KUBERNETES_SERVICE_HOST", "h")]), true).unwrap_err();
        assert!(matches!(err, KubeError::MissingEnv { var: "POD_NAME" }));
    }
}

//! The one error type of this crate: what failed, in the repository's style (lowercase,
//! values in backticks), with a `hint:` where there is a next step.

/// What went wrong talking to Kubernetes.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The pod's service account is there, but not the downward-API variable that
    /// names the pod, its namespace or its node.
    #[error("running in a Kubernetes pod, but `{var}` is not set")]
    MissingEnv { var: &'static str },
    /// The in-cluster or kubeconfig configuration could not be loaded.
    #[error("cannot load the Kubernetes client configuration: {0}")]
    Config(String),
    /// The API server refused or failed a request.
    #[error("the Kubernetes API failed to {action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A node named on the command line does not exist.
    #[error("node `{0}` does not exist")]
    NoSuchNode(String),
}

impl KubeError {
    pub(crate) fn api(action: impl Into<String>, source: kube::Error) -> Self {
        KubeError::Api {
            action: action.into(),
            source,
        }
    }

    /// What to do about it, when there is something to do.
    pub fn hint(&self) -> Option<&str> {
        match self {
            KubeError::MissingEnv { .. } => Some(
                "set `POD_NAME`, `POD_NAMESPACE` and `NODE_NAME` from the downward API \
                 (`fieldRef: metadata.name`, `metadata.namespace`, `spec.nodeName`), as the \
                 manifests in `deploy/` do; or turn Kubernetes off with \
                 `gpuvet.kubernetes.enabled: \"off\"`",
            ),
            KubeError::Config(_) => Some(
                "inside a pod gpuvet uses its service account; outside one, point \
                 `KUBECONFIG` at a kubeconfig",
            ),
            KubeError::Api {
                source: kube::Error::Api(status),
                ..
            } if status.code == 403 => Some(
                "the service account lacks a permission: apply `deploy/rbac.yaml`, which \
                 grants exactly what gpuvet uses",
            ),
            KubeError::Api { .. } => None,
            KubeError::NoSuchNode(_) => Some("`kubectl get nodes` lists the node names"),
        }
    }

    /// Whether the API answered 409 Conflict (the object changed since it was read).
    pub(crate) fn is_conflict(err: &kube::Error) -> bool {
        matches!(err, kube::Error::Api(status) if status.code == 409)
    }
}

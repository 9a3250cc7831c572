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
    /// The API server refused or failed a request; the cause is its `source`.
    #[error("the Kubernetes API failed to {action}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A node named on the command line does not exist.
    #[error("node `{0}` does not exist")]
    NoSuchNode(String),
    /// `gpuvet untaint` without a proof that the node is healthy since its quarantine.
    #[error("node `{node}` stays quarantined: {reason}")]
    Unproven {
        node: String,
        reason: gpuvet_model::offenders::Unproven,
    },
}

impl KubeError {
    pub(crate) fn api(action: impl Into<String>, source: kube::Error) -> Self {
        KubeError::Api {
            action: action.into(),
            source,
        }
    }

    /// The message and its causes on one line, `: `-separated, each cause once (kube's
    /// errors repeat their own cause in their message): for warnings and records.
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(err) = cause {
            let line = err.to_string();
            if !text.contains(&line) {
                text.push_str(": ");
                text.push_str(&line);
            }
            cause = err.source();
        }
        text
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
            KubeError::Unproven { .. } => Some(
                "run `gpuvet check` on the node (its pod must tolerate the taint \
                 `gpuvet.io/unhealthy`) and untaint it once that passes, reading its runs \
                 where they are kept (`--store`, or `--server` for a fleet server); \
                 `--force --reason TEXT` lifts it anyway, recorded as an event",
            ),
        }
    }

    /// Whether the API answered 409 Conflict (the object changed since it was read).
    pub(crate) fn is_conflict(err: &kube::Error) -> bool {
        matches!(err, kube::Error::Api(status) if status.code == 409)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_on_one_line_once() {
        let status =
            kube::core::Status::failure("nodes \"n1\" is forbidden", "Forbidden").with_code(403);
        let err = KubeError::api("taint node `n1`", kube::Error::Api(Box::new(status)));
        assert_eq!(
            err.to_string(),
            "the Kubernetes API failed to taint node `n1`"
        );
        let line = err.with_causes();
        assert!(
            line.starts_with("the Kubernetes API failed to taint node `n1`: "),
            "{line}"
        );
        assert!(line.contains("is forbidden"), "{line}");
        assert!(err.hint().unwrap().contains("deploy/rbac.yaml"));
        let err = KubeError::NoSuchNode("n9".into());
        assert_eq!(err.with_causes(), "node `n9` does not exist");
    }
}

//! Every Kubernetes API call gpuvet makes, as data: the client names the entry it is
//! about to use, and a test holds `deploy/rbac.yaml`'s rules to exactly this table, so
//! the service accounts get the least privilege each command needs.

use std::collections::BTreeSet;

/// Which gpuvet command makes a call, which is which service account needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum User {
    /// `gpuvet run` in a pod: events, the pod's condition and annotations, the rebuild.
    Run,
    /// `gpuvet watch` in a DaemonSet pod: events.
    Watch,
    /// `gpuvet untaint NODE`, run by an operator.
    Untaint,
}

/// One kind of request: an API group, a resource (with its subresource), a verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    /// `""` for the core group.
    pub group: &'static str,
    /// e.g. `pods` or `pods/status`.
    pub resource: &'static str,
    pub verb: &'static str,
    /// Whether the resource lives in a namespace (a Role grants it) or not (a
    /// ClusterRole).
    pub namespaced: bool,
    pub users: &'static [User],
}

const EVENTS: &str = "events.k8s.io";

/// Reads an Event by name, to fold a repeat into its series.
pub const GET_EVENT: ApiCall = ApiCall {
    group: EVENTS,
    resource: "events",
    verb: "get",
    namespaced: true,
    users: &[User::Run, User::Watch],
};
/// Creates an Event the first time it happens.
pub const CREATE_EVENT: ApiCall = ApiCall {
    group: EVENTS,
    resource: "events",
    verb: "create",
    namespaced: true,
    users: &[User::Run, User::Watch],
};
/// Updates an Event's series on a repeat.
pub const PATCH_EVENT: ApiCall = ApiCall {
    group: EVENTS,
    resource: "events",
    verb: "patch",
    namespaced: true,
    users: &[User::Run, User::Watch],
};
/// Writes the verdict's annotations on the pod.
pub const PATCH_POD: ApiCall = ApiCall {
    group: "",
    resource: "pods",
    verb: "patch",
    namespaced: true,
    users: &[User::Run],
};
/// Sets the pod condition `GpuvetSanity`.
pub const PATCH_POD_STATUS: ApiCall = ApiCall {
    group: "",
    resource: "pods/status",
    verb: "patch",
    namespaced: true,
    users: &[User::Run],
};
/// Deletes the pod, so its controller makes a new one elsewhere (the rebuild).
pub const DELETE_POD: ApiCall = ApiCall {
    group: "",
    resource: "pods",
    verb: "delete",
    namespaced: true,
    users: &[User::Run],
};
/// Lists the nodes, for the circuit breaker's count of quarantined nodes.
pub const LIST_NODES: ApiCall = ApiCall {
    group: "",
    resource: "nodes",
    verb: "list",
    namespaced: false,
    users: &[User::Run],
};
/// Reads a node before lifting its taint, or again after a conflicting write.
pub const GET_NODE: ApiCall = ApiCall {
    group: "",
    resource: "nodes",
    verb: "get",
    namespaced: false,
    users: &[User::Run, User::Untaint],
};
/// Taints a culprit node, or lifts the taint.
pub const PATCH_NODE: ApiCall = ApiCall {
    group: "",
    resource: "nodes",
    verb: "patch",
    namespaced: false,
    users: &[User::Run, User::Untaint],
};

/// The whole table.
pub const ALL: [ApiCall; 9] = [
    GET_EVENT,
    CREATE_EVENT,
    PATCH_EVENT,
    PATCH_POD,
    PATCH_POD_STATUS,
    DELETE_POD,
    LIST_NODES,
    GET_NODE,
    PATCH_NODE,
];

/// A (group, resource, verb) triple, as RBAC rules grant them.
pub type Grant = (String, String, String);

/// What `user` needs, namespaced (a Role) or cluster-wide (a ClusterRole).
pub fn grants(user: User, namespaced: bool) -> BTreeSet<Grant> {
    ALL.iter()
        .filter(|call| call.namespaced == namespaced && call.users.contains(&user))
        .map(|call| {
            (
                call.group.to_owned(),
                call.resource.to_owned(),
                call.verb.to_owned(),
            )
        })
        .collect()
}

/// The table's entry for an HTTP request, from its method and path: how the tests
/// check that every request the client sends is one the table (and so RBAC) allows.
pub fn call_of(method: &str, path: &str) -> Option<ApiCall> {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (resource, named) = match rest {
        ["namespaces", _, resource] => (resource.to_string(), false),
        ["namespaces", _, resource, _name] => (resource.to_string(), true),
        ["namespaces", _, resource, _name, sub] => (format!("{resource}/{sub}"), true),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let verb = match (method, named) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PATCH", true) => "patch",
        ("PUT", true) => "update",
        ("DELETE", true) => "delete",
        _ => return None,
    };
    ALL.into_iter()
        .find(|call| call.group == group && call.resource == resource && call.verb == verb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_their_entries() {
        let cases = [
            (
                "GET",
                "/apis/events.k8s.io/v1/namespaces/ns/events/e1",
                GET_EVENT,
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/ns/events?",
                CREATE_EVENT,
            ),
            (
                "PATCH",
                "/apis/events.k8s.io/v1/namespaces/ns/events/e1?",
                PATCH_EVENT,
            ),
            ("PATCH", "/api/v1/namespaces/ns/pods/p?", PATCH_POD),
            (
                "PATCH",
                "/api/v1/namespaces/ns/pods/p/status?",
                PATCH_POD_STATUS,
            ),
            ("DELETE", "/api/v1/namespaces/ns/pods/p", DELETE_POD),
            ("GET", "/api/v1/nodes?", LIST_NODES),
            ("GET", "/api/v1/nodes/n1", GET_NODE),
            ("PATCH", "/api/v1/nodes/n1?", PATCH_NODE),
        ];
        for (method, path, call) in cases {
            assert_eq!(call_of(method, path), Some(call), "{method} {path}");
        }
        assert_eq!(call_of("DELETE", "/api/v1/nodes/n1"), None);
        assert_eq!(call_of("GET", "/api/v1/namespaces/ns/secrets/s"), None);
        assert_eq!(call_of("GET", "/version"), None);
    }

    #[test]
    fn grants_split_by_user_and_scope() {
        let verbs = |set: BTreeSet<Grant>| -> Vec<String> {
            set.into_iter()
                .map(|(_, r, v)| format!("{r}:{v}"))
                .collect()
        };
        assert_eq!(
            verbs(grants(User::Run, false)),
            ["nodes:get", "nodes:list", "nodes:patch"]
        );
        assert_eq!(
            verbs(grants(User::Watch, true)),
            ["events:create", "events:get", "events:patch"]
        );
        assert!(grants(User::Watch, false).is_empty());
        assert_eq!(
            verbs(grants(User::Untaint, false)),
            ["nodes:get", "nodes:patch"]
        );
    }
}

//! Every manifest in `deploy/` parses into its typed object (k8s-openapi's, or the LWS
//! CRD's mirror), and writes back to the same document, so a misspelled field fails
//! here instead of being dropped by the API server. The RBAC rules grant exactly the
//! API calls gpuvet makes (`gpuvet_kube::api`), to the service account that makes them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gpuvet_kube::api::{Grant, User, grants};
use gpuvet_kube::lws::{self, LeaderWorkerSet, RestartPolicy};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of every YAML file in `deploy/`, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|err| panic!("{name} is not YAML: {err}"));
        for doc in parsed.into_iter().filter(|d| !d.is_null()) {
            docs.push((name.clone(), doc));
        }
    }
    docs
}

/// Parses `doc` as `T` and checks that writing it back gives the same document: a
/// field `T` does not know would be missing.
fn typed<T: DeserializeOwned + Serialize>(file: &str, doc: &Value) -> T {
    let object: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|err| panic!("{file}: {} does not parse: {err}", doc["kind"]));
    let written = serde_json::to_value(&object).unwrap();
    assert_eq!(
        &written, doc,
        "{file}: {} {} changes when read and written; a field is misspelled or misplaced",
        doc["kind"], doc["metadata"]["name"]
    );
    object
}

#[derive(Default)]
struct Rbac {
    roles: BTreeMap<String, Role>,
    cluster_roles: BTreeMap<String, ClusterRole>,
    role_bindings: Vec<RoleBinding>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    service_accounts: BTreeMap<String, ServiceAccount>,
}

struct Parsed {
    rbac: Rbac,
    lws: Vec<LeaderWorkerSet>,
    daemon_sets: Vec<DaemonSet>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
}

fn parse_all() -> Parsed {
    let mut parsed = Parsed {
        rbac: Rbac::default(),
        lws: Vec::new(),
        daemon_sets: Vec::new(),
        deployments: Vec::new(),
        services: Vec::new(),
    };
    for (file, doc) in documents() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match (
            doc["apiVersion"].as_str().unwrap_or_default(),
            kind.as_str(),
        ) {
            ("v1", "ServiceAccount") => {
                parsed
                    .rbac
                    .service_accounts
                    .insert(name, typed(&file, &doc));
            }
            ("v1", "ConfigMap") => {
                let map: ConfigMap = typed(&file, &doc);
                // A config the pods read must be one gpuvet accepts.
                for (key, text) in map.data.unwrap_or_default() {
                    if key.ends_with(".json") {
                        gpuvet_model::config::Config::from_json(&text)
                            .unwrap_or_else(|err| panic!("{file}: {key}: {err}"));
                    }
                }
            }
            ("v1", "Service") => parsed.services.push(typed(&file, &doc)),
            ("apps/v1", "DaemonSet") => parsed.daemon_sets.push(typed(&file, &doc)),
            ("apps/v1", "Deployment") => parsed.deployments.push(typed(&file, &doc)),
            ("rbac.authorization.k8s.io/v1", "Role") => {
                parsed.rbac.roles.insert(name, typed(&file, &doc));
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                parsed.rbac.cluster_roles.insert(name, typed(&file, &doc));
            }
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                parsed.rbac.role_bindings.push(typed(&file, &doc))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                parsed.rbac.cluster_role_bindings.push(typed(&file, &doc))
            }
            (lws::API_VERSION, lws::KIND) => {
                let set: LeaderWorkerSet =
                    serde_json::from_value(doc.clone()).unwrap_or_else(|err| {
                        panic!("{file}: the LeaderWorkerSet does not parse: {err}")
                    });
                // The pod templates are typed too, and must not lose a field either.
                let template = &doc["spec"]["leaderWorkerTemplate"];
                let _: k8s_openapi::api::core::v1::PodTemplateSpec =
                    typed(&file, &template["workerTemplate"]);
                let _: k8s_openapi::api::core::v1::PodTemplateSpec =
                    typed(&file, &template["leaderTemplate"]);
                parsed.lws.push(set);
            }
            (version, kind) => panic!("{file}: no test parses {version} {kind} `{name}`"),
        }
    }
    parsed
}

#[test]
fn every_manifest_parses_into_its_type() {
    let parsed = parse_all();
    assert_eq!(parsed.lws.len(), 1);
    assert_eq!(parsed.daemon_sets.len(), 1);
    assert_eq!(parsed.deployments.len(), 1);
    assert_eq!(parsed.services.len(), 1);
}

#[test]
fn a_typo_fails_the_parse() {
    let mut doc = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "LeaderWorkerSet")
        .unwrap()
        .1;
    doc["spec"]["leaderWorkerTemplate"]["sise"] =
        doc["spec"]["leaderWorkerTemplate"]["size"].take();
    let err = serde_json::from_value::<LeaderWorkerSet>(doc.clone()).unwrap_err();
    assert!(err.to_string().contains("unknown field `sise`"), "{err}");
    // In a typed pod template, the round trip catches it.
    let mut template = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"].clone();
    template["spec"]["serviceAcountName"] = Value::from("gpuvet-run");
    let parsed: k8s_openapi::api::core::v1::PodTemplateSpec =
        serde_json::from_value(template.clone()).unwrap();
    assert_ne!(serde_json::to_value(parsed).unwrap(), template);
}

/// The container that runs gpuvet in a pod spec.
fn gpuvet_container(spec: &PodSpec) -> &Container {
    spec.containers
        .iter()
        .find(|c| {
            c.command
                .as_ref()
                .is_some_and(|cmd| cmd.first().is_some_and(|p| p == "gpuvet"))
                || c.image.as_deref().is_some_and(|i| i.contains("gpuvet"))
        })
        .expect("a container runs gpuvet")
}

fn env_names(container: &Container) -> BTreeSet<String> {
    container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect()
}

fn downward_api(container: &Container) -> BTreeMap<String, String> {
    container
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let path = e
                .value_from
                .as_ref()?
                .field_ref
                .as_ref()?
                .field_path
                .clone();
            Some((e.name.clone(), path))
        })
        .collect()
}

#[test]
fn the_lws_wraps_every_pod_in_gpuvet_run_and_gates_readiness() {
    let parsed = parse_all();
    let set = &parsed.lws[0];
    let template = &set.spec.leader_worker_template;
    assert!(template.size.unwrap_or(1) >= 2, "a multi-node example");
    assert_eq!(
        template.restart_policy,
        Some(RestartPolicy::RecreateGroupOnPodRestart)
    );
    let leader = template
        .leader_template
        .as_ref()
        .expect("a vLLM leader template");
    for pod in [leader, &template.worker_template] {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("gpuvet-run"));
        let gates: Vec<&str> = spec
            .readiness_gates
            .iter()
            .flatten()
            .map(|g| g.condition_type.as_str())
            .collect();
        assert_eq!(gates, [gpuvet_kube::status::CONDITION_TYPE]);
        let container = gpuvet_container(spec);
        let command = container.command.as_ref().unwrap();
        assert_eq!(&command[..2], ["gpuvet", "run"]);
        assert!(
            command.iter().any(|a| a == "--"),
            "the app follows `--`: {command:?}"
        );
        let downward = downward_api(container);
        assert_eq!(downward["POD_NAME"], "metadata.name");
        assert_eq!(downward["POD_NAMESPACE"], "metadata.namespace");
        assert_eq!(downward["NODE_NAME"], "spec.nodeName");
        assert!(env_names(container).contains("GPUVET_TOKEN"));
    }
}

#[test]
fn the_watch_daemonset_and_the_server_run_their_commands() {
    let parsed = parse_all();
    let spec = parsed.daemon_sets[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .clone()
        .unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("gpuvet-watch"));
    let watch = gpuvet_container(&spec);
    assert_eq!(watch.args.as_ref().unwrap()[0], "watch");
    let downward = downward_api(watch);
    assert_eq!(downward["NODE_NAME"], "spec.nodeName");
    assert_eq!(downward["POD_NAME"], "metadata.name");
    // It keeps watching nodes gpuvet quarantined.
    assert!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some("gpuvet.io/unhealthy"))
    );

    let deployment = &parsed.deployments[0];
    let spec = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .clone()
        .unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("gpuvet-serve"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let serve = gpuvet_container(&spec);
    assert_eq!(serve.args.as_ref().unwrap()[0], "serve");
    // Two replicas, so on a store they share: PostgreSQL's URL from its Secret, never
    // an SQLite file, which one server alone may write.
    assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(2));
    let store = serve
        .env
        .iter()
        .flatten()
        .find(|var| var.name == "GPUVET_STORE")
        .and_then(|var| var.value_from.as_ref()?.secret_key_ref.as_ref())
        .expect("the store's URL from a Secret");
    assert_eq!(
        (store.name.as_str(), store.key.as_str()),
        ("gpuvet-store", "url")
    );
    assert!(
        !serve.args.iter().flatten().any(|arg| arg == "--store"),
        "{:?}",
        serve.args
    );
    let service = &parsed.services[0];
    let selector = service.spec.as_ref().unwrap().selector.clone().unwrap();
    let labels = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone()
        .unwrap()
        .labels
        .unwrap();
    assert!(
        selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "the Service selects the server"
    );
}

/// The (group, resource, verb) grants of a set of rules.
fn granted(rules: &[k8s_openapi::api::rbac::v1::PolicyRule]) -> BTreeSet<Grant> {
    let mut set = BTreeSet::new();
    for rule in rules {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert_ne!(verb, "*", "no wildcard verbs");
                    assert!(
                        set.insert((group.clone(), resource.clone(), verb.clone())),
                        "granted twice: {group} {resource} {verb}"
                    );
                }
            }
        }
    }
    set
}

/// What a service account is granted: namespaced through RoleBindings, cluster-wide
/// through ClusterRoleBindings.
fn grants_of(rbac: &Rbac, account: &str) -> (BTreeSet<Grant>, BTreeSet<Grant>) {
    let bound = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects
            .iter()
            .flatten()
            .any(|s| s.kind == "ServiceAccount" && s.name == account)
    };
    let mut namespaced = BTreeSet::new();
    for binding in rbac.role_bindings.iter().filter(|b| bound(&b.subjects)) {
        assert_eq!(binding.role_ref.kind, "Role");
        let role = &rbac.roles[&binding.role_ref.name];
        assert_eq!(role.metadata.namespace, binding.metadata.namespace);
        namespaced.extend(granted(role.rules.as_deref().unwrap_or_default()));
    }
    let mut cluster = BTreeSet::new();
    for binding in rbac
        .cluster_role_bindings
        .iter()
        .filter(|b| bound(&b.subjects))
    {
        let role = &rbac.cluster_roles[&binding.role_ref.name];
        cluster.extend(granted(role.rules.as_deref().unwrap_or_default()));
    }
    (namespaced, cluster)
}

#[test]
fn rbac_grants_exactly_the_calls_gpuvet_makes() {
    let rbac = parse_all().rbac;
    for (account, user) in [
        ("gpuvet-run", Some(User::Run)),
        ("gpuvet-watch", Some(User::Watch)),
        ("gpuvet-serve", None),
    ] {
        assert!(rbac.service_accounts.contains_key(account), "{account}");
        let (namespaced, cluster) = grants_of(&rbac, account);
        let expected = |ns| user.map(|u| grants(u, ns)).unwrap_or_default();
        assert_eq!(namespaced, expected(true), "{account}: namespaced");
        assert_eq!(cluster, expected(false), "{account}: cluster-wide");
    }
    // The operators' role for `gpuvet untaint`.
    let untaint = granted(
        rbac.cluster_roles["gpuvet-untaint"]
            .rules
            .as_deref()
            .unwrap(),
    );
    assert_eq!(untaint, grants(User::Untaint, false));
    assert!(grants(User::Untaint, true).is_empty());
    // The server mounts no token: it calls nothing.
    assert_eq!(
        rbac.service_accounts["gpuvet-serve"].automount_service_account_token,
        Some(false)
    );
}

#[test]
fn the_dockerfile_builds_gpuvet_with_the_k8s_feature_and_the_server_beside_it() {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    assert!(
        text.contains("cargo build --release --locked --features k8s -p gpuvet "),
        "{text}"
    );
    // `gpuvet serve` (deploy/serve.yaml) runs the server beside gpuvet.
    assert!(
        text.contains("cargo build --release --locked -p gpuvet-server"),
        "{text}"
    );
    assert!(
        text.contains("COPY --from=build /gpuvet /gpuvet-server /usr/local/bin/"),
        "{text}"
    );
    assert!(text.contains("ENTRYPOINT [\"gpuvet\"]"));
}

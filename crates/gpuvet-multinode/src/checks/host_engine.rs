//! Which engine `pytorch_gloo_2` runs. PyTorch's Gloo when every node's Python imports
//! torch with Gloo, since that is the path the user's job takes. Otherwise gpuvet's own
//! TCP all-reduce on every node, with the report naming the nodes that lack torch and
//! why. One engine for the whole check: pairs measured by different engines could not
//! be compared with each other.

use std::collections::BTreeMap;
use std::time::Duration;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::repeats::group_repeats;
use gpuvet_model::results::CheckResult;

use crate::coordinator::CheckContext;
use crate::time::millis;
use crate::wire::{Directive, HostEngine, Reply};

/// `import torch` takes seconds (4 s on a 2-core VM with a warm page cache); a cold
/// cache on a network file system can take much longer.
const PROBE_BUDGET: Duration = Duration::from_secs(60);

/// The engine and what the report says about the choice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EngineChoice {
    pub engine: HostEngine,
    pub params: BTreeMap<String, String>,
}

/// Asks every member what its Python can do, then chooses. `Err` carries the result
/// when a node was lost or time ran out.
pub(crate) fn choose(context: &mut CheckContext<'_, '_>) -> Result<EngineChoice, Box<CheckResult>> {
    let (budget_ms, due) = context.budget();
    let budget_ms = budget_ms.min(millis(PROBE_BUDGET));
    let orders = context
        .conversation
        .members
        .iter()
        .map(|m| (m.rank, Directive::ProbeTorch { budget_ms }))
        .collect();
    let answers = context.ask_all(CheckName::PytorchGloo2, orders, due)?;
    let nodes: Vec<(String, Option<&Reply>)> = context
        .conversation
        .members
        .iter()
        .map(|m| (m.node.clone(), answers.replies.get(&m.rank)))
        .collect();
    Ok(decide(&nodes))
}

/// The choice from each node's answer to the torch probe.
pub(crate) fn decide(nodes: &[(String, Option<&Reply>)]) -> EngineChoice {
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    // (node, why), so that many nodes failing the same way are said once.
    let mut lacking: Vec<(&str, String)> = Vec::new();
    for (node, reply) in nodes {
        let why = match reply {
            Some(Reply::Torch {
                version: Some(version),
                ..
            }) => {
                versions.entry(version).or_default().push(node);
                continue;
            }
            Some(Reply::Torch { python, error, .. }) => format!(
                "`{python}`: {}",
                error.as_deref().unwrap_or("no torch version reported")
            ),
            Some(other) => format!("answered `{other:?}`"),
            None => "did not answer".to_owned(),
        };
        lacking.push((node, why));
    }
    let mut params = BTreeMap::new();
    if !lacking.is_empty() {
        params.insert(
            "engine_note".to_owned(),
            format!(
                "the built-in TCP all-reduce ran, since {} of {} nodes cannot run torch with \
                 Gloo: {}",
                lacking.len(),
                nodes.len(),
                group_repeats(&lacking, nodes.len()).join("; ")
            ),
        );
        return EngineChoice {
            engine: HostEngine::GpuvetTcp,
            params,
        };
    }
    if versions.len() > 1 {
        let listed: Vec<String> = versions
            .iter()
            .map(|(version, nodes)| format!("{version} on {}", nodes.join(", ")))
            .collect();
        params.insert(
            "engine_note".to_owned(),
            format!("torch versions differ across nodes: {}", listed.join("; ")),
        );
    }
    EngineChoice {
        engine: HostEngine::TorchGloo,
        params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn torch(version: &str) -> Reply {
        Reply::Torch {
            python: "python3".to_owned(),
            version: Some(version.to_owned()),
            error: None,
        }
    }

    fn missing(why: &str) -> Reply {
        Reply::Torch {
            python: "python3".to_owned(),
            version: None,
            error: Some(why.to_owned()),
        }
    }

    #[test]
    fn torch_everywhere_runs_gloo_without_a_note() {
        let (a, b) = (torch("2.15.0"), torch("2.15.0"));
        let choice = decide(&[("n0".to_owned(), Some(&a)), ("n1".to_owned(), Some(&b))]);
        assert_eq!(choice.engine, HostEngine::TorchGloo);
        assert!(choice.params.is_empty());
    }

    #[test]
    fn differing_versions_still_run_gloo_and_say_so() {
        let (a, b, c) = (torch("2.15.0"), torch("2.14.1"), torch("2.15.0"));
        let choice = decide(&[
            ("n0".to_owned(), Some(&a)),
            ("n1".to_owned(), Some(&b)),
            ("n2".to_owned(), Some(&c)),
        ]);
        assert_eq!(choice.engine, HostEngine::TorchGloo);
        assert_eq!(
            choice.params["engine_note"],
            "torch versions differ across nodes: 2.14.1 on n1; 2.15.0 on n0, n2"
        );
    }

    #[test]
    fn one_node_without_torch_falls_back_everywhere_and_is_named() {
        let (a, b) = (torch("2.15.0"), missing("No module named 'torch'"));
        let choice = decide(&[("n0".to_owned(), Some(&a)), ("n1".to_owned(), Some(&b))]);
        assert_eq!(choice.engine, HostEngine::GpuvetTcp);
        assert_eq!(
            choice.params["engine_note"],
            "the built-in TCP all-reduce ran, since 1 of 2 nodes cannot run torch with Gloo: \
             n1: `python3`: No module named 'torch'"
        );
    }

    #[test]
    fn many_nodes_without_torch_are_said_once_and_counted_not_all_listed() {
        let mut replies: Vec<Reply> = (0..5).map(|_| missing("no torch")).collect();
        replies.push(torch("2.15.0"));
        let nodes: Vec<(String, Option<&Reply>)> = replies
            .iter()
            .enumerate()
            .map(|(i, reply)| (format!("n{i}"), Some(reply)))
            .collect();
        let choice = decide(&nodes);
        assert_eq!(choice.engine, HostEngine::GpuvetTcp);
        assert_eq!(
            choice.params["engine_note"],
            "the built-in TCP all-reduce ran, since 5 of 6 nodes cannot run torch with Gloo: \
             n0, n1, n2 and 2 more (5 of 6 nodes): `python3`: no torch"
        );
    }
}

//! Which GPUs each `--local-nodes` agent drives. On a machine with at least as many
//! GPUs as agents, each agent gets its own contiguous share through
//! `CUDA_VISIBLE_DEVICES`, so the agents are nodes with GPUs of their own (and NCCL can
//! run between them) instead of each driving every GPU of the machine.

use gpuvet_model::results::DeviceInfo;

/// Why the agents share every GPU instead of each driving its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Shared {
    #[error("the `{backend}` backend has no GPUs to split")]
    NoGpus { backend: String },
    #[error("fewer GPUs ({gpus}) than agents ({agents}): every agent drives all of them")]
    FewerGpus { gpus: usize, agents: usize },
    #[error("a GPU has no UUID: every agent drives all of them")]
    NoUuid,
}

/// The GPUs of each of `agents` agents, as `CUDA_VISIBLE_DEVICES` values (UUIDs, which
/// stay right whatever the parent's own `CUDA_VISIBLE_DEVICES` was), or why they share
/// every GPU instead.
pub fn split(backend: &str, devices: &[DeviceInfo], agents: usize) -> Result<Vec<String>, Shared> {
    if backend != "cuda" {
        return Err(Shared::NoGpus {
            backend: backend.to_owned(),
        });
    }
    if devices.len() < agents {
        return Err(Shared::FewerGpus {
            gpus: devices.len(),
            agents,
        });
    }
    let uuids = devices
        .iter()
        .map(|device| device.facts.uuid.clone())
        .collect::<Option<Vec<String>>>()
        .ok_or(Shared::NoUuid)?;
    // The first `extra` agents take one more GPU each.
    let (share, extra) = (uuids.len() / agents, uuids.len() % agents);
    let mut next = 0;
    Ok((0..agents)
        .map(|agent| {
            let take = share + usize::from(agent < extra);
            let visible = uuids[next..next + take].join(",");
            next += take;
            visible
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::inventory::DeviceFacts;

    fn gpus(count: u32) -> Vec<DeviceInfo> {
        (0..count)
            .map(|index| DeviceInfo {
                index,
                name: "NVIDIA H200".to_owned(),
                memory_bytes: None,
                facts: DeviceFacts {
                    uuid: Some(format!("GPU-{index}")),
                    ..DeviceFacts::default()
                },
                details: Default::default(),
            })
            .collect()
    }

    #[test]
    fn each_agent_gets_a_contiguous_share() {
        assert_eq!(
            split("cuda", &gpus(8), 2).unwrap(),
            ["GPU-0,GPU-1,GPU-2,GPU-3", "GPU-4,GPU-5,GPU-6,GPU-7"]
        );
        assert_eq!(
            split("cuda", &gpus(5), 3).unwrap(),
            ["GPU-0,GPU-1", "GPU-2,GPU-3", "GPU-4"]
        );
    }

    #[test]
    fn agents_share_when_they_cannot_split() {
        let fewer = split("cuda", &gpus(1), 2).unwrap_err();
        assert_eq!(fewer, Shared::FewerGpus { gpus: 1, agents: 2 });
        assert_eq!(
            fewer.to_string(),
            "fewer GPUs (1) than agents (2): every agent drives all of them"
        );
        assert_eq!(
            split("cpu", &gpus(8), 2).unwrap_err().to_string(),
            "the `cpu` backend has no GPUs to split"
        );
        let mut anonymous = gpus(2);
        anonymous[1].facts.uuid = None;
        assert_eq!(split("cuda", &anonymous, 2).unwrap_err(), Shared::NoUuid);
    }
}

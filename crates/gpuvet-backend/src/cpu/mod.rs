//! The cpu backend: the checks' work measured for real on host cores.
//!
//! Hosts without GPUs (CI, laptops, CPU inference nodes) run the same checks. Each
//! logical device is one host thread: GEMM runs single-threaded with the `gemm` crate,
//! launch latency is the hand-off latency of an empty task to a worker thread, and the
//! local all-reduce and all-gather run in shared memory among one thread per device.

mod contention;
mod gemm;
mod launch;
mod local_collective;

use local_collective::Collective;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::inventory::DeviceFacts;
use gpuvet_model::results::DeviceInfo;

use crate::{Backend, BackendError, CancelToken, Sample, Support, WorkSpec};

/// More logical devices than a GPU node has would only add threads, not insight.
const MAX_DEFAULT_DEVICES: usize = 8;

/// The cpu backend's default tolerance against the peer median (see
/// `Backend::default_tolerance`).
pub const CPU_TOLERANCE: f64 = 0.25;

/// `kernel_launch` on the cpu backend measures the scheduler's wake-up latency, which
/// moves more than compute does: with launcher and worker pinned to the device's core,
/// repeated runs on the 2-core VM gave 9.7 to 13.8 µs, and two devices of one run up to
/// 38 % apart.
pub const CPU_LAUNCH_TOLERANCE: f64 = 0.5;

/// One logical device per available core, at most 8 and at least 1.
pub fn default_device_count() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    // The clamp keeps the count within 1..=8, so the cast cannot truncate.
    cores.clamp(1, MAX_DEFAULT_DEVICES) as u32
}

/// Real work on host cores, one thread per logical device.
#[derive(Debug)]
pub struct CpuBackend {
    devices: Vec<DeviceInfo>,
}

impl CpuBackend {
    pub fn new(devices: u32) -> Self {
        let name = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|cpuinfo| cpu_model_name(&cpuinfo))
            .unwrap_or_else(|| "cpu".to_owned());
        let devices = (0..devices)
            .map(|index| DeviceInfo {
                index,
                name: name.clone(),
                memory_bytes: None,
                facts: DeviceFacts::default(),
                details: BTreeMap::from([("threads".to_owned(), "1".to_owned())]),
            })
            .collect();
        CpuBackend { devices }
    }

    fn check_device(&self, device: u32) -> Result<(), BackendError> {
        crate::check_device("cpu", device, self.devices.len() as u32)
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// Logical devices share host cores, caches and memory bandwidth with everything
    /// else on the machine, and the OS schedules them: a 5 % rule flags noise. A core
    /// that is 25 % worse than its peers after a second measurement is worth naming.
    fn default_tolerance(&self, check: CheckName) -> f64 {
        match check {
            CheckName::KernelLaunch => CPU_LAUNCH_TOLERANCE,
            _ => CPU_TOLERANCE,
        }
    }

    fn supports(&self, check: CheckName) -> Support {
        let missing = match check {
            CheckName::GemmFlops
            | CheckName::KernelLaunch
            | CheckName::AllReduce1
            | CheckName::CompCommOverlap
            | CheckName::InventoryConsistency => {
                return Support::Supported;
            }
            CheckName::AllReduce2
            | CheckName::AllReduce
            | CheckName::AllToAll2
            | CheckName::AllGather2
            | CheckName::AllGather
            | CheckName::MultiAllReduce2
            | CheckName::MultiAllReduce => {
                "collectives across nodes need the TCP data plane between agents"
            }
            CheckName::PytorchGloo2 => {
                "the host-network collective needs the TCP data plane between agents"
            }
            CheckName::NetworkConnectivity => "the reachability probe runs between agents",
        };
        Support::NotImplemented(format!("not implemented on the cpu backend yet: {missing}"))
    }

    fn gemm(
        &self,
        device: u32,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.check_device(device)?;
        gemm::run(work, cancel)
    }

    fn kernel_launch(
        &self,
        device: u32,
        _work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.check_device(device)?;
        launch::run(device, cancel)
    }

    fn all_reduce_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        crate::check_local_group("cpu", devices, self.devices.len() as u32)?;
        local_collective::run(Collective::AllReduce, devices, work, cancel)
    }

    fn all_gather_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        crate::check_local_group("cpu", devices, self.devices.len() as u32)?;
        local_collective::run(Collective::AllGather, devices, work, cancel)
    }
}

/// The first `model name` of /proc/cpuinfo (x86); `None` where the kernel does not
/// report one (many arm64 hosts).
fn cpu_model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_owned())
        .filter(|name| !name.is_empty())
}

/// Allocates `len` elements made by `element(index)`, reporting a failed allocation as
/// an error instead of aborting the process.
fn try_filled<T>(
    len: usize,
    what: &str,
    element: impl FnMut(usize) -> T,
) -> Result<Vec<T>, BackendError> {
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| {
        let mib = (len as f64 * size_of::<T>() as f64) / f64::from(1u32 << 20);
        BackendError::Failed(format!("could not allocate {mib:.0} MiB for {what}"))
    })?;
    values.extend((0..len).map(element));
    Ok(values)
}

/// The time-based loops of the checks stop once both limits are reached, or at the cap.
#[derive(Debug, Clone, Copy)]
struct IterationBudget {
    min_iterations: usize,
    max_iterations: usize,
    min_seconds: f64,
}

impl IterationBudget {
    fn wants_more(&self, done: usize, elapsed_seconds: f64) -> bool {
        done < self.max_iterations
            && (done < self.min_iterations || elapsed_seconds < self.min_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_device_count_is_between_one_and_eight() {
        assert!((1..=8).contains(&default_device_count()));
    }

    #[test]
    fn model_name_comes_from_cpuinfo() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n";
        assert_eq!(
            cpu_model_name(cpuinfo).as_deref(),
            Some("AMD EPYC 9654 96-Core Processor")
        );
        assert_eq!(cpu_model_name("processor\t: 0\nBogoMIPS\t: 50.00\n"), None);
        assert_eq!(cpu_model_name("model name\t:   \n"), None);
        assert_eq!(cpu_model_name(""), None);
    }

    #[test]
    fn devices_are_one_thread_each() {
        let backend = CpuBackend::new(3);
        assert_eq!(backend.name(), "cpu");
        assert_eq!(backend.devices().len(), 3);
        assert_eq!(backend.devices()[2].index, 2);
        assert!(!backend.devices()[0].name.is_empty());
        assert_eq!(backend.devices()[0].details["threads"], "1");
    }

    #[test]
    fn supports_the_local_checks_and_names_what_is_missing() {
        let backend = CpuBackend::new(2);
        for check in [
            CheckName::GemmFlops,
            CheckName::KernelLaunch,
            CheckName::AllReduce1,
            CheckName::CompCommOverlap,
        ] {
            assert_eq!(backend.supports(check), Support::Supported);
        }
        for check in [
            CheckName::AllReduce2,
            CheckName::PytorchGloo2,
            CheckName::NetworkConnectivity,
        ] {
            let Support::NotImplemented(reason) = backend.supports(check) else {
                panic!("{check} should not be supported");
            };
            assert!(
                reason.starts_with("not implemented on the cpu backend yet: "),
                "{reason}"
            );
        }
    }

    #[test]
    fn unknown_or_repeated_devices_are_refused() {
        let backend = CpuBackend::new(2);
        let cancel = CancelToken::new();
        let work = WorkSpec::default();
        assert!(matches!(
            backend.gemm(2, &work, &cancel),
            Err(BackendError::Failed(_))
        ));
        assert!(matches!(
            backend.kernel_launch(5, &work, &cancel),
            Err(BackendError::Failed(_))
        ));
        assert!(matches!(
            backend.all_reduce_local(&[0, 2], &work, &cancel),
            Err(BackendError::Failed(_))
        ));
        assert_eq!(
            backend.all_reduce_local(&[1, 1], &work, &cancel),
            Err(BackendError::Failed(
                "device 1 is listed twice for the collective".to_owned()
            ))
        );
    }

    #[test]
    fn all_reduce_needs_two_devices() {
        let backend = CpuBackend::new(2);
        assert_eq!(
            backend.all_reduce_local(&[0], &WorkSpec::default(), &CancelToken::new()),
            Err(BackendError::Unsupported(
                "a collective among a node's devices needs at least 2 of them".to_owned()
            ))
        );
    }

    #[test]
    fn iteration_budget_needs_both_limits_and_respects_the_cap() {
        let budget = IterationBudget {
            min_iterations: 5,
            max_iterations: 50,
            min_seconds: 0.25,
        };
        assert!(budget.wants_more(0, 10.0));
        assert!(budget.wants_more(4, 10.0));
        assert!(budget.wants_more(5, 0.1));
        assert!(!budget.wants_more(5, 0.3));
        assert!(!budget.wants_more(50, 0.0));
    }

    #[test]
    fn failed_allocations_are_errors() {
        let huge = usize::MAX / 8;
        let error = try_filled(huge, "a test buffer", |_| 0u64).unwrap_err();
        assert!(
            matches!(error, BackendError::Failed(message) if message.contains("a test buffer"))
        );
    }
}

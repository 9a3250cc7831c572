//! Which backend call each unit of a check makes. The one place that maps a check name
//! to device work, shared by the in-process path and the worker process.

use gpuvet_backend::{Backend, BackendError, CancelToken, Sample, WorkSpec};
use gpuvet_model::catalog::CheckName;

/// Runs one unit of `check` on `devices`: one device for per-device checks, the node's
/// devices for node-local collectives.
pub fn unit_work(
    backend: &dyn Backend,
    check: CheckName,
    devices: &[u32],
    work: &WorkSpec,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let first = || {
        devices.first().copied().ok_or_else(|| {
            BackendError::Failed(format!("`{check}` was given no device (a bug in gpuvet)"))
        })
    };
    match check {
        CheckName::GemmFlops => backend.gemm(first()?, work, cancel),
        CheckName::KernelLaunch => backend.kernel_launch(first()?, work, cancel),
        // `all_reduce` and `all_gather` come here only when this node is the group.
        CheckName::AllReduce1 | CheckName::AllReduce => {
            backend.all_reduce_local(devices, work, cancel)
        }
        CheckName::AllGather => backend.all_gather_local(devices, work, cancel),
        CheckName::CompCommOverlap => {
            crate::overlap::comp_comm_overlap(backend, devices, work, cancel)
        }
        other => Err(BackendError::Failed(format!(
            "the runner has no work for `{other}` (a bug in gpuvet)"
        ))),
    }
}

/// [`unit_work`], with a panicking backend turned into a faulty measurement rather
/// than a lost one.
pub(crate) fn run_unit(
    backend: &dyn Backend,
    check: CheckName,
    devices: &[u32],
    work: &WorkSpec,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let work = || unit_work(backend, check, devices, work, cancel);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        Err(BackendError::Failed(format!(
            "the backend panicked: {message}"
        )))
    })
}

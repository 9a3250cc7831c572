//! `comp_comm_overlap` on one node: GEMM on the first device and the all-reduce across
//! the node's devices, each alone, then both at once; the slowdown of each when they
//! share the node.

use std::thread;

use gpuvet_backend::{Backend, BackendError, CancelToken, Sample, WorkSpec};

/// Measures the four rates and reports the worse slowdown, in percent, as the value.
///
/// `extra` carries each rate and each slowdown, so a reader can tell whether compute or
/// communication suffered. A slowdown below zero (the overlapped run happened to be
/// faster) counts as zero.
pub(crate) fn comp_comm_overlap(
    backend: &dyn Backend,
    devices: &[u32],
    work: &WorkSpec,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let Some(&compute_device) = devices.first() else {
        return Err(BackendError::Unsupported(
            "comp_comm_overlap needs at least one device".to_owned(),
        ));
    };
    let gemm_alone = backend.gemm(compute_device, work, cancel)?;
    let comm_alone = backend.all_reduce_local(devices, work, cancel)?;
    let (gemm_overlapped, comm_overlapped) = thread::scope(|scope| {
        let gemm = scope.spawn(|| backend.gemm(compute_device, work, cancel));
        let comm = backend.all_reduce_local(devices, work, cancel);
        let gemm = gemm.join().unwrap_or_else(|_| {
            Err(BackendError::Failed(
                "the overlapped GEMM panicked".to_owned(),
            ))
        });
        (gemm, comm)
    });
    let (gemm_overlapped, comm_overlapped) = (gemm_overlapped?, comm_overlapped?);
    // The headline is a ratio, so zero work must be caught here: a slowdown of 0 % is
    // the best result, not a sign that nothing ran.
    for (what, sample, unit) in [
        ("the GEMM alone", &gemm_alone, "TFLOPS"),
        ("the all-reduce alone", &comm_alone, "GB/s"),
        ("the overlapped GEMM", &gemm_overlapped, "TFLOPS"),
        ("the overlapped all-reduce", &comm_overlapped, "GB/s"),
    ] {
        if !(sample.value.is_finite() && sample.value > 0.0) {
            return Err(BackendError::Failed(format!(
                "no work done: {what} measured {} {unit}",
                sample.value
            )));
        }
    }

    let gemm_slowdown = slowdown_pct(gemm_alone.value, gemm_overlapped.value);
    let comm_slowdown = slowdown_pct(comm_alone.value, comm_overlapped.value);
    let mut sample = Sample {
        value: gemm_slowdown.max(comm_slowdown),
        samples: Vec::new(),
        wrong_result: [&gemm_alone, &comm_alone, &gemm_overlapped, &comm_overlapped]
            .iter()
            .find_map(|s| s.wrong_result.clone()),
        ..Sample::default()
    };
    for (key, value) in [
        ("gemm_alone_tflops", gemm_alone.value),
        ("gemm_overlapped_tflops", gemm_overlapped.value),
        ("comm_alone_busbw", comm_alone.value),
        ("comm_overlapped_busbw", comm_overlapped.value),
        ("gemm_slowdown_pct", gemm_slowdown),
        ("comm_slowdown_pct", comm_slowdown),
    ] {
        sample.extra.insert(key.to_owned(), value);
    }
    sample
        .params
        .insert("compute_device".to_owned(), compute_device.to_string());
    Ok(sample)
}

/// How much slower `overlapped` is than `alone`, in percent of `alone`'s rate; 0 when it
/// is not slower, 100 when it did no work.
fn slowdown_pct(alone: f64, overlapped: f64) -> f64 {
    if alone <= 0.0 {
        return 0.0;
    }
    ((alone - overlapped) / alone * 100.0).clamp(0.0, 100.0)
}

#[cfg(test)]
mod tests {
    use super::slowdown_pct;

    #[test]
    fn slowdown_is_the_lost_share_of_the_alone_rate() {
        assert_eq!(slowdown_pct(100.0, 75.0), 25.0);
        assert_eq!(slowdown_pct(100.0, 120.0), 0.0);
        assert_eq!(slowdown_pct(100.0, 0.0), 100.0);
        assert_eq!(slowdown_pct(0.0, 5.0), 0.0);
    }
}

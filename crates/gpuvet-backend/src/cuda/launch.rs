//! Empty-kernel launch latency, timed as SuperBench's `kernel-launch` does.
//!
//! Event mode records a start and a stop event around one `<<<1,1>>>` launch and waits
//! for the stop event; wall mode times one launch plus a stream synchronisation on the
//! host clock. Both are per-launch round trips, so they include the GPU's idle-to-busy
//! latency, not just the host's enqueue cost. The headline value is the mean wall time,
//! the metric SuperBench's A100 baseline (9.6 µs) reports.
//!
//! The kernel is compiled by NVRTC. NVRTC may be missing, or newer than the driver (its
//! PTX then fails to load with "unsupported PTX version"); the backend then loads a
//! built-in PTX of the same empty kernel, written for the oldest target the GPU accepts,
//! and the result says which one ran.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::Ptx;

use super::{driver_error, poll_event};
use crate::{BackendError, CancelToken, Sample, with_causes};

pub const KERNEL_NAME: &str = "gpuvet_empty";
/// The device source NVRTC compiles (the backend's only one).
pub const SOURCE: &str = "extern \"C\" __global__ void gpuvet_empty() {}";
const WARMUP_LAUNCHES: usize = 100;
/// Per mode: at most this many launches, or this much time, whichever comes first.
const MAX_LAUNCHES: usize = 2000;
const MAX_TIME: Duration = Duration::from_millis(750);
/// Launches per sample of the headline metric (samples feed the noise estimate).
const BATCH: usize = 100;

/// The built-in PTX for a GPU of compute capability `cc`: PTX ISA 6.4 for `sm_75`
/// (the oldest target CUDA 13 still compiles for), 6.0 for Volta.
pub fn builtin_ptx(cc: (i32, i32)) -> String {
    let (version, target) = if cc >= (7, 5) {
        ("6.4", "sm_75")
    } else {
        ("6.0", "sm_70")
    };
    format!(
        ".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry {KERNEL_NAME}()\n{{\n\tret;\n}}\n"
    )
}

/// NVRTC's PTX for the empty kernel, compiled once per process (NVRTC must be loadable:
/// see [`super::load_nvrtc`]).
pub fn nvrtc_ptx() -> Result<String, BackendError> {
    static PTX: OnceLock<Result<String, BackendError>> = OnceLock::new();
    PTX.get_or_init(|| {
        let started = Instant::now();
        let ptx = cudarc::nvrtc::compile_ptx(SOURCE)
            .map(|ptx| ptx.to_src())
            .map_err(|e| BackendError::Nvrtc(Box::new(e)));
        let _ = NVRTC_MS.set(started.elapsed().as_secs_f64() * 1e3);
        ptx
    })
    .clone()
}

/// How long [`nvrtc_ptx`]'s compile took in this process, once it ran.
static NVRTC_MS: OnceLock<f64> = OnceLock::new();

/// Milliseconds this process spent in NVRTC for the empty kernel, if it compiled it.
pub fn nvrtc_compile_ms() -> Option<f64> {
    NVRTC_MS.get().copied()
}

/// The empty kernel on this context, and which compiler produced it.
#[derive(Debug)]
pub struct EmptyKernel {
    pub function: CudaFunction,
    /// `nvrtc` or `builtin_ptx`.
    pub compiler: &'static str,
    /// Why NVRTC's kernel was not used, when it was not.
    pub nvrtc_problem: Option<BackendError>,
}

pub fn load(
    ctx: &Arc<CudaContext>,
    nvrtc_available: Result<(), BackendError>,
    cc: (i32, i32),
) -> Result<EmptyKernel, BackendError> {
    let load_src = |src: String| -> Result<CudaFunction, BackendError> {
        let module = ctx
            .load_module(Ptx::from_src(src))
            .map_err(|e| driver_error("loading the kernel", e))?;
        module
            .load_function(KERNEL_NAME)
            .map_err(|e| driver_error("finding the kernel", e))
    };
    let nvrtc_problem = match nvrtc_available
        .and_then(|()| nvrtc_ptx())
        .and_then(&load_src)
    {
        Ok(function) => {
            return Ok(EmptyKernel {
                function,
                compiler: "nvrtc",
                nvrtc_problem: None,
            });
        }
        Err(problem) => problem,
    };
    let function = load_src(builtin_ptx(cc)).map_err(|e| BackendError::KernelUnloadable {
        builtin: Box::new(e),
        nvrtc: Box::new(nvrtc_problem.clone()),
    })?;
    Ok(EmptyKernel {
        function,
        compiler: "builtin_ptx",
        nvrtc_problem: Some(nvrtc_problem),
    })
}

/// Mean and median of a list of µs values.
pub fn mean_and_median(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let median = gpuvet_model::stats::median(values).unwrap_or(mean);
    (mean, median)
}

/// Means of consecutive batches, the samples the analysis estimates noise from.
pub fn batch_means(values: &[f64], batch: usize) -> Vec<f64> {
    values
        .chunks(batch.max(1))
        .filter(|c| c.len() == batch.max(1))
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// Measures launch latency on one GPU.
pub fn run(
    ctx: &Arc<CudaContext>,
    kernel: &EmptyKernel,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let err = |what: &'static str| move |e| driver_error(what, e);
    let stream = ctx.new_stream().map_err(err("creating a stream"))?;
    let cu_function = kernel.function.cu_function();
    let launch = || {
        ctx.bind_to_thread()?;
        // SAFETY: a kernel without parameters, launched with one thread on a live stream.
        unsafe {
            cudarc::driver::result::launch_kernel(
                cu_function,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream.cu_stream(),
                &mut [],
            )
        }
    };

    for _ in 0..WARMUP_LAUNCHES {
        launch().map_err(err("launching the kernel"))?;
    }
    // A GPU that never finishes the warm-up is seen here, cancellably; the wall mode
    // below blocks in `synchronize`, because that wait is what it measures.
    let warmed = stream
        .record_event(None)
        .map_err(err("recording an event"))?;
    poll_event(&warmed, cancel, || {})?;

    // Event mode.
    let start = ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(err("creating events"))?;
    let stop = ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(err("creating events"))?;
    let mut event_us = Vec::with_capacity(MAX_LAUNCHES);
    let began = Instant::now();
    while event_us.len() < MAX_LAUNCHES && began.elapsed() < MAX_TIME {
        start.record(&stream).map_err(err("recording an event"))?;
        launch().map_err(err("launching the kernel"))?;
        stop.record(&stream).map_err(err("recording an event"))?;
        poll_event(&stop, cancel, || {})?;
        event_us.push(
            f64::from(
                start
                    .elapsed_ms(&stop)
                    .map_err(err("reading event times"))?,
            ) * 1000.0,
        );
        if event_us.len() % BATCH == 0 {
            cancel.check()?;
        }
    }

    // Wall mode.
    let mut wall_us = Vec::with_capacity(MAX_LAUNCHES);
    let began = Instant::now();
    while wall_us.len() < MAX_LAUNCHES && began.elapsed() < MAX_TIME {
        let t0 = Instant::now();
        launch().map_err(err("launching the kernel"))?;
        stream
            .synchronize()
            .map_err(err("waiting for the kernel"))?;
        wall_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if wall_us.len() % BATCH == 0 {
            cancel.check()?;
        }
    }

    let (event_mean, event_median) = mean_and_median(&event_us);
    let (wall_mean, wall_median) = mean_and_median(&wall_us);
    let mut extra = BTreeMap::new();
    extra.insert("event_us".to_owned(), event_mean);
    extra.insert("event_us_median".to_owned(), event_median);
    extra.insert("wall_us_median".to_owned(), wall_median);
    extra.insert("launches".to_owned(), wall_us.len() as f64);
    let mut params = BTreeMap::new();
    params.insert("compiler".to_owned(), kernel.compiler.to_owned());
    params.insert("grid".to_owned(), "1x1".to_owned());
    params.insert("warmup_launches".to_owned(), WARMUP_LAUNCHES.to_string());
    if let Some(problem) = &kernel.nvrtc_problem {
        params.insert("nvrtc_problem".to_owned(), with_causes(problem));
    }
    let samples = batch_means(&wall_us, BATCH);
    Ok(Sample {
        value: wall_mean,
        samples,
        wrong_result: None,
        extra,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_ptx_targets_what_the_gpu_accepts() {
        let hopper = builtin_ptx((9, 0));
        assert!(
            hopper.starts_with(".version 6.4\n.target sm_75\n"),
            "{hopper}"
        );
        assert!(hopper.contains(".visible .entry gpuvet_empty()"));
        assert!(builtin_ptx((7, 0)).contains(".target sm_70"));
    }

    #[test]
    fn when_no_kernel_loads_both_reasons_are_given() {
        // Loading PTX needs a GPU; the error it makes does not.
        let missing = BackendError::LibraryNotFound {
            what: "NVRTC",
            names: crate::cuda::libs::NVRTC_NAMES,
            dirs: Vec::new(),
            alternative: None,
        };
        let error = BackendError::KernelUnloadable {
            builtin: Box::new(BackendError::Failed("no GPU".to_owned())),
            nvrtc: Box::new(missing.clone()),
        };
        assert_eq!(
            error.to_string(),
            format!(
                "the empty kernel could not be loaded (no GPU); NVRTC's was not usable \
                 either: {missing}"
            )
        );
        assert!(std::error::Error::source(&error).is_none());
    }

    #[test]
    fn statistics_of_launch_times() {
        assert_eq!(mean_and_median(&[]), (0.0, 0.0));
        assert_eq!(mean_and_median(&[5.0, 6.0, 10.0]), (7.0, 6.0));
        assert_eq!(batch_means(&[1.0, 3.0, 5.0, 7.0, 100.0], 2), [2.0, 6.0]);
        assert!(batch_means(&[1.0], 2).is_empty());
    }
}

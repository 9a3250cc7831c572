//! The cuda backend: real GPUs through cudarc (driver, cuBLAS, cuBLASLt, NVRTC), NCCL
//! and NVML, all loaded at run time.
//!
//! The crate always builds this backend; whether it can run is decided by [`probe`]:
//! libcuda must load, `cuInit` must succeed, the driver must support the CUDA API this
//! build uses, and at least one device must answer. cudarc panics on the first driver
//! call when libcuda is missing, so `probe` checks for the library before anything
//! else, and every entry point runs under a panic guard that turns a panic from cudarc
//! (a missing symbol, a failed `unwrap` in a destructor) into an error.
//!
//! Libraries outside the loader's path (pip's CUDA wheels) are found as described in
//! [`libs`]; NCCL is loaded by gpuvet itself ([`nccl`]). A missing cuBLAS or NCCL does
//! not make the backend unavailable: the checks that need them report
//! `not_implemented` with the reason, while the others still run.
//!
//! Inter-node checks need NCCL's unique id passed between nodes by the coordinator,
//! which does not exist yet; they are `not_implemented` here until it does.

pub mod collective;
pub mod gemm;
pub mod launch;
pub mod libs;
pub mod nccl;
pub mod nvml;
mod setup;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaEvent, DriverError};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::inventory::{DeviceFacts, GpuHealth};
use gpuvet_model::results::DeviceInfo;

use crate::{
    Across, AcrossRanks, Backend, BackendError, CancelToken, Sample, Support, WorkSpec, with_causes,
};

/// The oldest driver this build can drive, as `cuDriverGetVersion` reports it: the
/// workspace builds cudarc with `cuda-13000`, whose bindings call CUDA 13 entry points
/// (e.g. `cuEventElapsedTime_v2`) that older drivers lack.
pub const MIN_DRIVER_CUDA_VERSION: i32 = 13000;

const NAME: &str = "cuda";

/// One GPU as the probe found it.
#[derive(Debug, Clone)]
struct Gpu {
    ordinal: usize,
    compute_capability: (i32, i32),
    /// NVML's index for the same GPU (matched by UUID).
    nvml_index: Option<u32>,
}

/// Whether each run-time library could be loaded.
#[derive(Debug)]
struct Libraries {
    cublas: Result<libs::Located, BackendError>,
    cublaslt: Result<libs::Located, BackendError>,
    nvrtc: Result<libs::Located, BackendError>,
    nccl: Result<&'static nccl::Nccl, BackendError>,
}

/// GPUs driven through CUDA. Create it with [`probe`].
pub struct CudaBackend {
    devices: Vec<DeviceInfo>,
    gpus: Vec<Gpu>,
    contexts: Vec<OnceLock<Result<Arc<CudaContext>, BackendError>>>,
    /// What this process spent before measuring, each reported once.
    setup: setup::SetupCost,
    nvml: Option<nvml_wrapper::Nvml>,
    libraries: Libraries,
    /// GEMM inputs, reused across devices (generating 2×8192² values takes a while).
    gemm_inputs: Mutex<Option<Arc<gemm::HostInputs>>>,
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackend")
            .field("devices", &self.devices.len())
            .field("gpus", &self.gpus)
            .field("nvml", &self.nvml.is_some())
            .field("libraries", &self.libraries)
            .finish()
    }
}

fn unavailable(reason: impl Into<String>) -> BackendError {
    BackendError::Unavailable {
        backend: NAME,
        reason: reason.into(),
    }
}

/// Unavailable because of `error`, whose text (with its causes) is the reason.
fn unavailable_because(error: BackendError) -> BackendError {
    unavailable(with_causes(&error))
}

/// A driver error while doing `what`; it reads `` what failed: `CUDA_ERROR_NAME` (what
/// it means) ``.
pub fn driver_error(what: impl Into<String>, error: DriverError) -> BackendError {
    BackendError::Driver {
        what: what.into(),
        source: DriverFailure(error),
    }
}

/// A CUDA driver error as `` `CUDA_ERROR_NAME` (what it means) ``: cudarc's own text
/// is its `Debug`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverFailure(pub DriverError);

impl fmt::Display for DriverFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = format!("{:?}", self.0.0);
        // Without libcuda (a driver error made up, in a test) there is no text to ask
        // for, and asking would panic.
        // SAFETY: only tries to open the library by its usual names.
        let text = unsafe { cudarc::driver::sys::is_culib_present() }
            .then(|| self.0.error_string().ok())
            .flatten();
        match text {
            Some(text) => write!(f, "`{code}` ({})", text.to_string_lossy()),
            None => write!(f, "`{code}`"),
        }
    }
}

impl std::error::Error for DriverFailure {}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e3
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Runs `work`, turning a panic inside it (cudarc's, typically) into an error.
fn guarded<T>(
    what: &str,
    work: impl FnOnce() -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(BackendError::Failed(format!(
            "the cuda backend failed inside `{what}`: {}",
            panic_message(payload.as_ref())
        ))),
    }
}

/// Waits for `event`, calling `tick` between polls and stopping when `cancel` fires.
pub(crate) fn poll_event(
    event: &CudaEvent,
    cancel: &CancelToken,
    mut tick: impl FnMut(),
) -> Result<(), BackendError> {
    // NCCL and cuBLAS may leave another device's context current on this thread.
    event
        .context()
        .bind_to_thread()
        .map_err(|e| driver_error("binding the context", e))?;
    loop {
        match event.try_is_complete() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(driver_error("waiting for the GPU", e)),
        }
        cancel.check()?;
        tick();
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Finds the GPUs and loads what the checks need. `Unavailable`, with a reason, when
/// libcuda is missing, the driver does not initialise or is too old, or no device
/// answers. Never panics.
pub fn probe() -> Result<CudaBackend, BackendError> {
    // SAFETY: only tries to open the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        let dirs = libs::search_dirs(&libs::SearchEnv::from_process());
        return Err(unavailable(format!(
            "libcuda was not found (`libcuda.so.1` comes with the NVIDIA driver); this machine has no usable NVIDIA driver{}",
            found_without_driver(&dirs)
        )));
    }
    let started = Instant::now();
    match std::panic::catch_unwind(probe_devices) {
        Ok(result) => result.map(|mut backend| {
            backend.setup.probe_ms = millis(started.elapsed());
            backend
        }),
        Err(payload) => Err(unavailable(format!(
            "probing the GPUs failed: {}",
            panic_message(payload.as_ref())
        ))),
    }
}

/// Where the run-time libraries are, said when the driver is missing: the libraries are
/// often installed (torch's wheels) where the driver is not, and the user should see
/// that only the driver is missing. Empty when none is found (a machine without CUDA).
fn found_without_driver(dirs: &[PathBuf]) -> String {
    let found: Vec<(&str, Option<PathBuf>)> = [
        ("cuBLAS", libs::CUBLAS_NAMES),
        ("cuBLASLt", libs::CUBLASLT_NAMES),
        ("NVRTC", libs::NVRTC_NAMES),
        ("NCCL", libs::NCCL_NAMES),
    ]
    .into_iter()
    .map(|(what, names)| (what, libs::find_library(names, dirs)))
    .collect();
    if found.iter().all(|(_, path)| path.is_none()) {
        return String::new();
    }
    let lines: Vec<String> = found
        .iter()
        .map(|(what, path)| match path {
            Some(path) => format!("\n  {what:<9} {}", path.display()),
            None => format!("\n  {what:<9} not found"),
        })
        .collect();
    format!(
        "; the CUDA libraries it would use are here:{}",
        lines.concat()
    )
}

fn probe_devices() -> Result<CudaBackend, BackendError> {
    use cudarc::driver::result::device;

    cudarc::driver::result::init().map_err(|e| {
        unavailable_because(driver_error("initialising the CUDA driver (`cuInit`)", e))
    })?;
    let mut driver_cuda: i32 = 0;
    // SAFETY: writes one int.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_cuda) }
        .result()
        .map_err(|e| unavailable_because(driver_error("reading the driver version", e)))?;
    if driver_cuda < MIN_DRIVER_CUDA_VERSION {
        return Err(unavailable(format!(
            "the NVIDIA driver supports CUDA `{}` but this build of gpuvet uses the CUDA `{}` API; \
             update the driver (R580 or newer) or rebuild gpuvet with a matching cudarc `cuda-*` feature",
            nvml::cuda_version_string(driver_cuda),
            nvml::cuda_version_string(MIN_DRIVER_CUDA_VERSION)
        )));
    }
    let count = device::get_count()
        .map_err(|e| unavailable_because(driver_error("counting devices", e)))?;
    if count <= 0 {
        return Err(unavailable(
            "the driver loaded but no CUDA device answered; check `CUDA_VISIBLE_DEVICES`",
        ));
    }

    let nvml_lib = nvml::init();
    let dirs = libs::search_dirs(&libs::SearchEnv::from_process());
    let libraries = load_libraries(&dirs);
    let cuda_version = nvml::cuda_version_string(driver_cuda);
    let driver_version = nvml_lib.as_ref().ok().and_then(nvml::driver_version);

    let mut devices = Vec::new();
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let dev = device::get(ordinal).map_err(|e| {
            unavailable_because(driver_error(format!("opening device `{ordinal}`"), e))
        })?;
        let attribute = |a: CUdevice_attribute| {
            // SAFETY: a valid device and attribute.
            unsafe { device::get_attribute(dev, a) }.unwrap_or(-1)
        };
        let cc = (
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        );
        let name = device::get_name(dev).unwrap_or_else(|_| "unknown NVIDIA GPU".to_owned());
        // SAFETY: a valid device.
        let memory = unsafe { device::total_mem(dev) }.ok().map(|m| m as u64);
        let uuid = device::get_uuid(dev)
            .ok()
            .map(|u| nvml::uuid_string(&u.bytes));
        let pci = nvml::pci_bus_id(
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        );

        let nvml_index = match (&nvml_lib, &uuid) {
            (Ok(lib), Some(uuid)) => nvml::index_of(lib, uuid),
            _ => None,
        };
        let mut details = BTreeMap::new();
        let health = match (&nvml_lib, nvml_index) {
            (Ok(lib), Some(index)) => nvml::health(lib, index),
            (Ok(_), None) => {
                details.insert(
                    "nvml".to_owned(),
                    "NVML does not list this GPU's UUID".to_owned(),
                );
                GpuHealth::default()
            }
            (Err(err), _) => {
                details.insert("nvml".to_owned(), nvml::unavailable_detail(err));
                GpuHealth::default()
            }
        };
        let facts = DeviceFacts {
            uuid,
            pci_bus_id: Some(pci),
            driver_version: driver_version.clone(),
            cuda_version: Some(cuda_version.clone()),
            nccl_version: libraries.nccl.as_ref().ok().map(|n| n.version_string()),
            compute_capability: Some(format!("{}.{}", cc.0, cc.1)),
            health,
        };
        for (key, located) in [
            (
                "cublas_library",
                libraries.cublas.as_ref().map(libs::Located::describe),
            ),
            (
                "nvrtc_library",
                libraries.nvrtc.as_ref().map(libs::Located::describe),
            ),
            (
                "nccl_library",
                libraries
                    .nccl
                    .as_ref()
                    .map(|n| n.path.display().to_string()),
            ),
        ] {
            details.insert(
                key.to_owned(),
                located.unwrap_or_else(|e| format!("unavailable: {}", with_causes(e))),
            );
        }
        devices.push(DeviceInfo {
            index: ordinal as u32,
            name,
            memory_bytes: memory,
            facts,
            details,
        });
        gpus.push(Gpu {
            ordinal: ordinal as usize,
            compute_capability: cc,
            nvml_index,
        });
    }

    Ok(CudaBackend {
        contexts: gpus.iter().map(|_| OnceLock::new()).collect(),
        setup: setup::SetupCost::new(gpus.len()),
        devices,
        gpus,
        nvml: nvml_lib.ok(),
        libraries,
        gemm_inputs: Mutex::new(None),
    })
}

fn load_libraries(dirs: &[PathBuf]) -> Libraries {
    // cudarc's checks only try to open the library by name.
    let cublaslt = libs::ensure_loadable(
        "cuBLASLt",
        libs::CUBLASLT_NAMES,
        libs::CUBLASLT_SYMBOLS,
        dirs,
        || {
            // SAFETY: only opens the library by name (dlopen), which has no preconditions.
            unsafe { cudarc::cublaslt::sys::is_culib_present() }
        },
    );
    let cublas = libs::ensure_loadable(
        "cuBLAS",
        libs::CUBLAS_NAMES,
        libs::CUBLAS_SYMBOLS,
        dirs,
        || {
            // SAFETY: as above.
            unsafe { cudarc::cublas::sys::is_culib_present() }
        },
    );
    let nvrtc = load_nvrtc(dirs);
    Libraries {
        cublas,
        cublaslt,
        nvrtc,
        nccl: nccl::load(dirs),
    }
}

/// Makes NVRTC loadable for cudarc (see [`libs::ensure_loadable`]), with its builtins.
pub fn load_nvrtc(dirs: &[PathBuf]) -> Result<libs::Located, BackendError> {
    let nvrtc = libs::ensure_loadable(
        "NVRTC",
        libs::NVRTC_NAMES,
        libs::NVRTC_SYMBOLS,
        dirs,
        || {
            // SAFETY: only opens the library by name (dlopen), which has no preconditions.
            unsafe { cudarc::nvrtc::sys::is_culib_present() }
        },
    );
    // NVRTC opens its builtins library by name when it compiles; load the one next to a
    // preloaded NVRTC so that lookup succeeds too. Failing that, the launch check falls
    // back to its built-in PTX.
    if let Ok(libs::Located::Preloaded(path)) = &nvrtc
        && let Some(dir) = path.parent()
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("libnvrtc-builtins.so.")
            {
                let _ = libs::dlopen_global(&entry.path());
            }
        }
    }
    nvrtc
}

/// Why a check does not run on this backend yet.
fn not_yet(check: CheckName) -> Support {
    use CheckName::*;
    let reason = match check {
        AllReduce2 | AllReduce | AllToAll2 | AllGather2 | AllGather => format!(
            "`{check}` spans nodes: it runs when this node is one of a group, over NCCL with the \
             unique id the coordinator hands to every node"
        ),
        MultiAllReduce2 | MultiAllReduce => format!(
            "`{check}` spans nodes: it runs when this node is one of a group, over NCCL with one \
             communicator per rail (GPU i of every node), each from a unique id the \
             coordinator hands out"
        ),
        PytorchGloo2 | NetworkConnectivity => {
            format!("`{check}` tests the host network between the agents of a group, not a GPU")
        }
        // Runnable here; `supports` answers for them before asking this.
        GemmFlops | KernelLaunch | AllReduce1 | CompCommOverlap | InventoryConsistency => {
            return Support::Supported;
        }
    };
    Support::NotImplemented(reason)
}

impl CudaBackend {
    /// An NCCL collective among `devices` of this node, all in this process.
    fn local_collective(
        &self,
        devices: &[u32],
        kind: collective::Kind,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        if devices.len() < 2 {
            return Err(BackendError::Unsupported(
                "a collective among a node's GPUs needs at least two of them".to_owned(),
            ));
        }
        let mut sorted = devices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != devices.len() {
            return Err(BackendError::Failed(format!(
                "device list `{devices:?}` names a device twice"
            )));
        }
        self.collective(
            devices,
            &collective::RankLayout::ThisNode,
            kind,
            work,
            cancel,
        )
    }

    /// An NCCL collective over `devices` of this node, as `layout` places them.
    fn collective(
        &self,
        devices: &[u32],
        layout: &collective::RankLayout,
        kind: collective::Kind,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        let contexts = devices
            .iter()
            .map(|d| self.context(*d))
            .collect::<Result<Vec<_>, _>>()?;
        collective::run(
            self.nccl()?,
            &contexts,
            layout,
            kind,
            work.collective_bytes,
            cancel,
        )
        .map(|sample| self.with_setup_cost(devices, sample))
    }

    /// `sample` with what running on `devices` waited for that no earlier measurement
    /// of this process reported ([`setup::SetupCost`]).
    fn with_setup_cost(&self, devices: &[u32], mut sample: Sample) -> Sample {
        self.setup.add_to(devices, &mut sample);
        sample
    }

    fn nccl(&self) -> Result<&'static nccl::Nccl, BackendError> {
        self.libraries
            .nccl
            .as_ref()
            .copied()
            .map_err(|e| BackendError::Unsupported(format!("NCCL: {}", with_causes(e))))
    }

    fn gpu(&self, device: u32) -> Result<&Gpu, BackendError> {
        self.gpus.get(device as usize).ok_or_else(|| {
            BackendError::Failed(format!(
                "there is no device `{device}` (this node has {})",
                self.gpus.len()
            ))
        })
    }

    /// The device's primary context, retained once and kept for the backend's life
    /// (releasing the last reference would tear the context down between checks).
    fn context(&self, device: u32) -> Result<Arc<CudaContext>, BackendError> {
        let gpu = self.gpu(device)?;
        self.contexts[device as usize]
            .get_or_init(|| {
                let started = Instant::now();
                let context = CudaContext::new(gpu.ordinal).map_err(|e| {
                    driver_error(format!("creating a context on device `{device}`"), e)
                });
                self.setup
                    .context_created(device, millis(started.elapsed()));
                context
            })
            .clone()
    }

    fn gemm_inputs(&self, ty: gemm::GemmType, size: usize) -> Arc<gemm::HostInputs> {
        let mut cached = self
            .gemm_inputs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match cached.as_ref() {
            Some(inputs) if inputs.ty == ty && inputs.size == size => inputs.clone(),
            _ => {
                let inputs = Arc::new(gemm::HostInputs::generate(ty, size));
                *cached = Some(inputs.clone());
                inputs
            }
        }
    }

    fn readings(&self, device: u32) -> Option<gemm::Readings<'_>> {
        let index = self.gpus.get(device as usize)?.nvml_index?;
        Some(gemm::Readings {
            nvml: self.nvml.as_ref()?,
            index,
        })
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn supports(&self, check: CheckName) -> Support {
        match check {
            CheckName::GemmFlops => match &self.libraries.cublas {
                Ok(_) => Support::Supported,
                Err(e) => Support::NotImplemented(format!(
                    "`gemm_flops` needs cuBLAS: {}",
                    with_causes(e)
                )),
            },
            CheckName::KernelLaunch | CheckName::InventoryConsistency => Support::Supported,
            CheckName::AllReduce1 => match &self.libraries.nccl {
                Ok(_) => Support::Supported,
                Err(e) => Support::NotImplemented(format!(
                    "`all_reduce_1` needs NCCL: {}",
                    with_causes(e)
                )),
            },
            CheckName::CompCommOverlap => match (&self.libraries.cublas, &self.libraries.nccl) {
                (Ok(_), Ok(_)) => Support::Supported,
                (Err(e), _) | (_, Err(e)) => Support::NotImplemented(format!(
                    "`comp_comm_overlap` needs cuBLAS and NCCL: {}",
                    with_causes(e)
                )),
            },
            other => not_yet(other),
        }
    }

    fn gemm(
        &self,
        device: u32,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        guarded("gemm", || {
            let gpu = self.gpu(device)?;
            let ty = gemm::resolve(work.gemm_dtype, gpu.compute_capability)?;
            let needs = if ty == gemm::GemmType::Fp8 {
                &self.libraries.cublaslt
            } else {
                &self.libraries.cublas
            };
            if let Err(e) = needs {
                return Err(BackendError::Unsupported(format!(
                    "{} GEMM cannot run: {}",
                    ty.as_str(),
                    with_causes(e)
                )));
            }
            let size = work
                .gemm_size
                .map(|s| s as usize)
                .unwrap_or(gemm::DEFAULT_SIZE);
            if ty == gemm::GemmType::Fp8 && !size.is_multiple_of(16) {
                return Err(BackendError::Unsupported(format!(
                    "fp8 GEMM needs a size that is a multiple of 16; `{size}` is not"
                )));
            }
            let ctx = self.context(device)?;
            let inputs = self.gemm_inputs(ty, size);
            cancel.check()?;
            gemm::run(&ctx, &inputs, self.readings(device), cancel)
                .map(|sample| self.with_setup_cost(&[device], sample))
        })
    }

    fn kernel_launch(
        &self,
        device: u32,
        _work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        guarded("kernel_launch", || {
            let gpu = self.gpu(device)?;
            let ctx = self.context(device)?;
            let nvrtc = self
                .libraries
                .nvrtc
                .as_ref()
                .map(|_| ())
                .map_err(Clone::clone);
            let kernel = launch::load(&ctx, nvrtc, gpu.compute_capability)?;
            let mut sample = launch::run(&ctx, &kernel, cancel)?;
            self.setup
                .add_nvrtc(launch::nvrtc_compile_ms(), &mut sample);
            Ok(self.with_setup_cost(&[device], sample))
        })
    }

    fn all_reduce_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        guarded("all_reduce_local", || {
            self.local_collective(devices, collective::Kind::AllReduce, work, cancel)
        })
    }

    fn all_gather_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        guarded("all_gather_local", || {
            self.local_collective(devices, collective::Kind::AllGather, work, cancel)
        })
    }

    fn spans_nodes(&self) -> bool {
        self.libraries.nccl.is_ok()
    }

    fn group_token(&self) -> Result<Vec<u8>, BackendError> {
        let id = self.nccl()?.unique_id()?;
        Ok(id.internal.iter().map(|&byte| byte as u8).collect())
    }

    fn collective_across(
        &self,
        across: &Across,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        guarded("collective_across", || {
            let kind = match across.check {
                CheckName::AllReduce2
                | CheckName::AllReduce
                | CheckName::MultiAllReduce2
                | CheckName::MultiAllReduce => collective::Kind::AllReduce,
                CheckName::AllGather2 | CheckName::AllGather => collective::Kind::AllGather,
                CheckName::AllToAll2 => collective::Kind::AllToAll,
                other => {
                    return Err(BackendError::Unsupported(format!(
                        "`{other}` is not a collective the cuda backend runs across nodes"
                    )));
                }
            };
            let (devices, layout) = match &across.ranks {
                AcrossRanks::Devices {
                    token,
                    world,
                    first_rank,
                } => (
                    self.gpus.len(),
                    collective::RankLayout::Across {
                        id: unique_id(token)?,
                        world: *world,
                        first_rank: *first_rank,
                    },
                ),
                AcrossRanks::Rails {
                    tokens,
                    nodes,
                    node,
                } => {
                    if tokens.is_empty() || tokens.len() > self.gpus.len() {
                        return Err(BackendError::Failed(format!(
                            "asked for {} rails, and this node has {} GPUs",
                            tokens.len(),
                            self.gpus.len()
                        )));
                    }
                    let ids = tokens
                        .iter()
                        .map(|token| unique_id(token))
                        .collect::<Result<_, _>>()?;
                    let layout = collective::RankLayout::Rails {
                        ids,
                        nodes: *nodes,
                        node: *node,
                    };
                    (tokens.len(), layout)
                }
            };
            let devices: Vec<u32> = (0..devices as u32).collect();
            self.collective(&devices, &layout, kind, work, cancel)
        })
    }
}

/// NCCL's unique id from a group token.
fn unique_id(token: &[u8]) -> Result<nccl::UniqueId, BackendError> {
    let mut id = nccl::UniqueId { internal: [0; 128] };
    if token.len() != id.internal.len() {
        return Err(BackendError::Failed(format!(
            "the group token has {} bytes; NCCL's unique id has {}",
            token.len(),
            id.internal.len()
        )));
    }
    for (slot, &byte) in id.internal.iter_mut().zip(token) {
        *slot = byte as std::ffi::c_char;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_without_a_gpu_is_unavailable_and_does_not_panic() {
        match probe() {
            Err(BackendError::Unavailable { backend, reason }) => {
                assert_eq!(backend, "cuda");
                // SAFETY: only tries to open the library.
                if !unsafe { cudarc::driver::sys::is_culib_present() } {
                    assert!(reason.starts_with("libcuda was not found"), "{reason}");
                }
                assert!(reason.chars().next().unwrap().is_lowercase(), "{reason}");
                // The error as the binary prints it.
                let message = BackendError::Unavailable { backend, reason }.to_string();
                assert!(
                    message.starts_with("the `cuda` backend is not available: "),
                    "{message}"
                );
            }
            Err(other) => panic!("expected Unavailable, got {other:?}"),
            // A machine with a GPU: the probe must have found at least one device.
            Ok(backend) => assert!(!backend.devices().is_empty()),
        }
    }

    #[test]
    fn probing_twice_gives_the_same_answer() {
        let first = probe().map(|b| b.devices().len());
        let second = probe().map(|b| b.devices().len());
        assert_eq!(first, second);
    }

    #[test]
    fn a_driver_failure_names_what_failed_and_keeps_the_code_as_its_cause() {
        use cudarc::driver::sys::CUresult;
        // Made up: the driver only fails this way on a GPU.
        let error = driver_error(
            "allocating the send buffer",
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        assert_eq!(error.to_string(), "allocating the send buffer failed");
        let text = with_causes(&error);
        // With libcuda present the driver's own words follow in parentheses.
        assert!(
            text == "allocating the send buffer failed: `CUDA_ERROR_OUT_OF_MEMORY`"
                || text
                    .starts_with("allocating the send buffer failed: `CUDA_ERROR_OUT_OF_MEMORY` ("),
            "{text}"
        );
        assert_eq!(error.clone(), error);
        // The reason `auto` falls back gives the cause too.
        let BackendError::Unavailable { reason, .. } = unavailable_because(error) else {
            unreachable!()
        };
        assert_eq!(reason, text);
    }

    #[test]
    fn panics_become_errors() {
        let result: Result<(), BackendError> = guarded("test", || panic!("Missing symbol cuFoo"));
        assert_eq!(
            result,
            Err(BackendError::Failed(
                "the cuda backend failed inside `test`: Missing symbol cuFoo".to_owned()
            ))
        );
        let owned: Result<(), BackendError> = guarded("test", || panic!("{}", String::from("x")));
        assert!(matches!(owned, Err(BackendError::Failed(m)) if m.ends_with(": x")));
        assert_eq!(guarded("test", || Ok(5)), Ok(5));
    }

    #[test]
    fn inter_node_checks_say_why_they_do_not_run() {
        for check in CheckName::ALL {
            if matches!(
                check,
                CheckName::GemmFlops
                    | CheckName::KernelLaunch
                    | CheckName::AllReduce1
                    | CheckName::CompCommOverlap
                    | CheckName::InventoryConsistency
            ) {
                continue;
            }
            match not_yet(check) {
                Support::NotImplemented(reason) => {
                    assert!(reason.contains(&format!("`{check}`")), "{reason}")
                }
                Support::Supported => panic!("{check} should not be supported yet"),
            }
        }
    }
}

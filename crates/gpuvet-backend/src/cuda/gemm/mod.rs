//! Dense GEMM on one GPU: throughput timed by CUDA events, plus a correctness sample.
//!
//! bf16, fp16, tf32 and fp32 run through `cublasGemmEx` (what `torch.matmul` calls),
//! with a 32 MiB workspace as PyTorch sets on Hopper; fp8 (e4m3 inputs, bf16 output)
//! runs through cuBLASLt, the only cuBLAS API that has it. Every product is `TN` in
//! cuBLAS's column-major terms (A stored k×m and transposed, B stored k×n): the layout
//! fp8 requires, and one where each output is a dot product of two contiguous host
//! vectors, so the reference is cheap.
//!
//! Inputs are random, with full mantissa entropy (power draw, and so clocks, depend on
//! the bits that toggle), and exactly representable in the input type, so the host
//! reference in f64 sees the same numbers as the GPU. Outputs are pre-filled with NaN,
//! so a GEMM that never ran reads as wrong rather than as zero.
//!
//! The run: warm up for about half a second, size the timed run to about a second,
//! record one event between consecutive GEMMs (so the timing includes the gaps a
//! back-to-back loop has, as `torch.matmul` loops do), and read clocks, temperature,
//! power and throttle reasons through NVML while the GEMMs run.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr};
use gpuvet_model::config::Dtype;
use gpuvet_model::inventory::{GpuHealth, throttle};
use nvml_wrapper::Nvml;

use super::{driver_error, poll_event};

mod reference;

pub use self::reference::{
    Checked, HostInputs, e4m3_to_f64, output_value, sample_positions, verify,
};
use crate::{BackendError, CancelToken, Sample};

/// Matrix side used when the config does not set one: large enough for peak on every
/// GPU gpuvet knows, and the size the baselines were measured at.
pub const DEFAULT_SIZE: usize = 8192;
/// cuBLAS/cuBLASLt workspace, as PyTorch allocates on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;
/// Warm-up time: clocks and power settle, cuBLAS picks and loads its kernel.
const WARMUP: Duration = Duration::from_millis(500);
/// GEMMs per warm-up chunk; the pace of the timed run comes from the last chunk.
const WARMUP_CHUNK: usize = 4;
/// A GEMM this slow takes long enough that loading cuBLAS's kernels, which the first
/// chunk pays for, does not distort its pace.
const SLOW_GEMM_SECS: f64 = 0.25;
/// Target length of the timed run.
const TIMED: Duration = Duration::from_secs(1);
const MIN_ITERATIONS: usize = 10;
const MAX_ITERATIONS: usize = 5000;
/// How often NVML is read while the GEMMs run.
const NVML_EVERY: Duration = Duration::from_millis(50);
/// Output entries compared with the host reference.
const CHECKED_ENTRIES: usize = 64;

/// A GEMM precision as the cuda backend runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmType {
    Bf16,
    Fp16,
    Tf32,
    Fp32,
    /// e4m3 inputs, bf16 output, fp32 accumulation.
    Fp8,
}

impl GemmType {
    pub fn as_str(self) -> &'static str {
        match self {
            GemmType::Bf16 => "bf16",
            GemmType::Fp16 => "fp16",
            GemmType::Tf32 => "tf32",
            GemmType::Fp32 => "fp32",
            GemmType::Fp8 => "fp8",
        }
    }

    pub fn input_bytes(self) -> usize {
        match self {
            GemmType::Fp8 => 1,
            GemmType::Bf16 | GemmType::Fp16 => 2,
            GemmType::Tf32 | GemmType::Fp32 => 4,
        }
    }

    pub fn output_bytes(self) -> usize {
        match self {
            GemmType::Bf16 | GemmType::Fp16 | GemmType::Fp8 => 2,
            GemmType::Tf32 | GemmType::Fp32 => 4,
        }
    }

    /// Relative rounding of one output value (one unit in the last place, twice the
    /// worst rounding error, for margin).
    fn output_eps(self) -> f64 {
        match self {
            GemmType::Bf16 | GemmType::Fp8 => 2f64.powi(-8),
            GemmType::Fp16 => 2f64.powi(-10),
            GemmType::Tf32 | GemmType::Fp32 => 2f64.powi(-22),
        }
    }

    /// Allowed accumulation error, relative to the root sum of squares of the terms.
    /// cuBLAS may split k and add the partial sums in the output type (PyTorch's
    /// "reduced precision reduction", on by default for fp16/bf16): with up to 16
    /// splits that is below 2^-7 of it for bf16, so 2^-5 leaves margin, while an
    /// output of zero (an error as large as the value itself) still fails on all but a
    /// few percent of entries, and so on any sample of them.
    fn accumulation_tolerance(self) -> f64 {
        match self {
            GemmType::Bf16 | GemmType::Fp8 => 2f64.powi(-5),
            GemmType::Fp16 => 2f64.powi(-7),
            GemmType::Tf32 | GemmType::Fp32 => 2f64.powi(-12),
        }
    }
}

/// The precision to run for a requested dtype on a GPU of compute capability `cc`.
/// `Unsupported` when this GPU lacks the dtype.
pub fn resolve(dtype: Dtype, cc: (i32, i32)) -> Result<GemmType, BackendError> {
    let ampere = cc.0 >= 8;
    let cc_text = format!("{}.{}", cc.0, cc.1);
    match dtype {
        Dtype::Auto => Ok(if ampere {
            GemmType::Bf16
        } else {
            GemmType::Fp32
        }),
        Dtype::Bf16 if ampere => Ok(GemmType::Bf16),
        Dtype::Tf32 if ampere => Ok(GemmType::Tf32),
        Dtype::Bf16 | Dtype::Tf32 => Err(BackendError::Unsupported(format!(
            "{} GEMM needs compute capability 8.0 or newer; this GPU has `{cc_text}`",
            dtype.as_str()
        ))),
        Dtype::Fp16 => Ok(GemmType::Fp16),
        Dtype::Fp32 => Ok(GemmType::Fp32),
        Dtype::Fp8 if cc >= (8, 9) => Ok(GemmType::Fp8),
        Dtype::Fp8 => Err(BackendError::Unsupported(format!(
            "fp8 GEMM needs compute capability 8.9 or newer; this GPU has `{cc_text}`"
        ))),
    }
}

/// TFLOPS of one m×n×k GEMM that took `seconds`.
pub fn tflops(m: usize, n: usize, k: usize, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    2.0 * m as f64 * n as f64 * k as f64 / seconds / 1e12
}

/// Whether the warm-up has run long enough. The first chunk pays for cuBLAS's
/// heuristics and lazy kernel loading, so the pace the timed run is sized from must
/// come from a later one, unless GEMMs are so slow that the loading is noise.
pub fn warmup_is_over(elapsed: Duration, iterations: usize, seconds_per_gemm: f64) -> bool {
    elapsed >= WARMUP && (iterations > WARMUP_CHUNK || seconds_per_gemm >= SLOW_GEMM_SECS)
}

/// How many timed iterations fill `TIMED`, given the warm-up's time per GEMM.
pub fn timed_iterations(seconds_per_gemm: f64) -> usize {
    if !(seconds_per_gemm.is_finite() && seconds_per_gemm > 0.0) {
        return MIN_ITERATIONS;
    }
    let wanted = (TIMED.as_secs_f64() / seconds_per_gemm).ceil();
    (wanted as usize).clamp(MIN_ITERATIONS, MAX_ITERATIONS)
}

// ---- NVML readings during the run ------------------------------------------------------

/// Clock, temperature, power and throttle readings before, during and after the timed
/// GEMMs, as `extra` entries.
pub fn summarize_readings(
    before: &GpuHealth,
    during: &[GpuHealth],
    after: &GpuHealth,
) -> BTreeMap<String, f64> {
    let mut extra = BTreeMap::new();
    let mut put = |key: &str, value: Option<f64>| {
        if let Some(v) = value {
            extra.insert(key.to_owned(), v);
        }
    };
    let clocks: Vec<f64> = during
        .iter()
        .filter_map(|h| h.sm_clock_mhz)
        .map(f64::from)
        .collect();
    put("sm_clock_mhz_before", before.sm_clock_mhz.map(f64::from));
    put("sm_clock_mhz_after", after.sm_clock_mhz.map(f64::from));
    put("sm_clock_mhz_min", clocks.iter().copied().reduce(f64::min));
    put(
        "sm_clock_mhz_mean",
        (!clocks.is_empty()).then(|| clocks.iter().sum::<f64>() / clocks.len() as f64),
    );
    put(
        "sm_clock_max_mhz",
        during
            .iter()
            .chain([before, after])
            .find_map(|h| h.sm_clock_max_mhz)
            .map(f64::from),
    );
    put(
        "temperature_c_max",
        during
            .iter()
            .chain([after])
            .filter_map(|h| h.temperature_c)
            .max()
            .map(f64::from),
    );
    put(
        "power_w_max",
        during.iter().filter_map(|h| h.power_w).reduce(f64::max),
    );
    put(
        "power_limit_w",
        during.iter().chain([before]).find_map(|h| h.power_limit_w),
    );
    let bits = during
        .iter()
        .filter_map(|h| h.throttle_reasons)
        .reduce(|a, b| a | b);
    put("throttle_reasons", bits.map(|b| b as f64));
    put(
        "throttle_abnormal",
        bits.map(|b| {
            if b & throttle::ABNORMAL != 0 {
                1.0
            } else {
                0.0
            }
        }),
    );
    put(
        "nvml_samples",
        (!during.is_empty()).then_some(during.len() as f64),
    );
    extra
}

// ---- the GPU side --------------------------------------------------------------------

/// A cuBLAS or cuBLASLt status other than success, as `` `CublasError(CUBLAS_STATUS_…)` ``.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlasStatus {
    Cublas(cudarc::cublas::result::CublasError),
    Lt(cudarc::cublaslt::result::CublasError),
}

impl BlasStatus {
    /// `CUBLAS_STATUS_NOT_SUPPORTED`: the library has no kernel for this GPU.
    pub fn is_not_supported(self) -> bool {
        match self {
            BlasStatus::Cublas(e) => {
                e.0 == cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
            }
            BlasStatus::Lt(e) => {
                e.0 == cudarc::cublaslt::sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
            }
        }
    }
}

impl std::fmt::Display for BlasStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlasStatus::Cublas(e) => write!(f, "`{e:?}`"),
            BlasStatus::Lt(e) => write!(f, "`{e:?}`"),
        }
    }
}

impl std::error::Error for BlasStatus {}

/// A failed cuBLAS call.
fn cublas(call: &'static str) -> impl Fn(cudarc::cublas::result::CublasError) -> BackendError {
    move |e| BackendError::Blas {
        call,
        source: BlasStatus::Cublas(e),
    }
}

/// A failed cuBLASLt call.
fn lt(call: &'static str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> BackendError {
    move |e| BackendError::Blas {
        call,
        source: BlasStatus::Lt(e),
    }
}

/// A cuBLAS handle set up for one GEMM; destroyed without panicking.
struct BlasGemm {
    handle: cudarc::cublas::sys::cublasHandle_t,
    _workspace: CudaSlice<u8>,
    ty: GemmType,
    size: i32,
    a: u64,
    b: u64,
    c: u64,
}

impl BlasGemm {
    fn new(
        stream: &Arc<CudaStream>,
        ty: GemmType,
        size: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<Self, BackendError> {
        use cudarc::cublas::{result, sys};
        let size = i32::try_from(size).map_err(|_| {
            BackendError::Failed(format!("matrix size `{size}` is too large for cuBLAS"))
        })?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| driver_error("binding the context", e))?;
        // SAFETY: allocation on this stream; filled by cuBLAS before it is read.
        let workspace = unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }
            .map_err(|e| driver_error("allocating the workspace", e))?;
        let ws = workspace.device_ptr(stream).0;
        let handle = result::create_handle().map_err(cublas("cublasCreate"))?;
        let gemm = BlasGemm {
            handle,
            _workspace: workspace,
            ty,
            size,
            a,
            b,
            c,
        };
        // SAFETY: a live handle, this context's stream, and a workspace that outlives the
        // handle (fields drop after `Drop::drop` destroys it).
        unsafe {
            result::set_stream(handle, stream.cu_stream() as sys::cudaStream_t)
                .map_err(cublas("cublasSetStream"))?;
            sys::cublasSetWorkspace_v2(handle, ws as *mut c_void, WORKSPACE_BYTES)
                .result()
                .map_err(cublas("cublasSetWorkspace"))?;
        }
        Ok(gemm)
    }

    fn enqueue(&self) -> Result<(), BackendError> {
        use cudarc::cublas::sys::{
            cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasOperation_t as Op,
            cudaDataType_t as Ty,
        };
        let (data, compute) = match self.ty {
            GemmType::Bf16 => (Ty::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
            GemmType::Fp16 => (Ty::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
            GemmType::Tf32 => (Ty::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32),
            GemmType::Fp32 => (Ty::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
            GemmType::Fp8 => {
                return Err(BackendError::Failed("fp8 runs through cuBLASLt".to_owned()));
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let n = self.size;
        // SAFETY: A, B and C are live device buffers of n×n elements of `data` on the
        // handle's context; alpha and beta are host f32s, as compute type 32F expects.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                self.handle,
                Op::CUBLAS_OP_T,
                Op::CUBLAS_OP_N,
                n,
                n,
                n,
                (&alpha as *const f32).cast(),
                self.a as *const c_void,
                data,
                n,
                self.b as *const c_void,
                data,
                n,
                (&beta as *const f32).cast(),
                self.c as *mut c_void,
                data,
                n,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        }
        .map_err(cublas("cublasGemmEx"))
    }
}

impl Drop for BlasGemm {
    fn drop(&mut self) {
        // SAFETY: created by `cublasCreate`, destroyed once; errors are moot here.
        let _ = unsafe { cudarc::cublas::result::destroy_handle(self.handle) };
    }
}

/// A cuBLASLt fp8 matmul plan (descriptors and the heuristic's algorithm).
struct LtGemm {
    handle: cudarc::cublaslt::sys::cublasLtHandle_t,
    desc: cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    layouts: [cudarc::cublaslt::sys::cublasLtMatrixLayout_t; 3],
    algo: Option<cudarc::cublaslt::sys::cublasLtMatmulAlgo_t>,
    _workspace: CudaSlice<u8>,
    workspace_ptr: u64,
    stream: cudarc::driver::sys::CUstream,
    a: u64,
    b: u64,
    c: u64,
}

impl LtGemm {
    fn new(
        stream: &Arc<CudaStream>,
        size: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<Self, BackendError> {
        use cudarc::cublaslt::{result, sys};
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| driver_error("binding the context", e))?;
        // SAFETY: allocation on this stream; cuBLASLt writes it before reading.
        let workspace = unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }
            .map_err(|e| driver_error("allocating the workspace", e))?;
        let workspace_ptr = workspace.device_ptr(stream).0;
        let handle = result::create_handle().map_err(lt("cublasLtCreate"))?;
        let mut plan = LtGemm {
            handle,
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: None,
            _workspace: workspace,
            workspace_ptr,
            stream: stream.cu_stream(),
            a,
            b,
            c,
        };
        let n = size as u64;
        let ld = size as i64;
        plan.desc = result::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(lt("cublasLtMatmulDescCreate"))?;
        let (transpose, keep): (i32, i32) = (1, 0);
        // SAFETY: live descriptors; each attribute gets a value of the type cublasLt.h gives it.
        unsafe {
            result::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                size_of::<i32>(),
            )
            .map_err(lt("cublasLtMatmulDescSetAttribute"))?;
            result::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                (&keep as *const i32).cast(),
                size_of::<i32>(),
            )
            .map_err(lt("cublasLtMatmulDescSetAttribute"))?;
        }
        plan.layouts[0] =
            result::create_matrix_layout(sys::cudaDataType_t::CUDA_R_8F_E4M3, n, n, ld)
                .map_err(lt("cublasLtMatrixLayoutCreate"))?;
        plan.layouts[1] =
            result::create_matrix_layout(sys::cudaDataType_t::CUDA_R_8F_E4M3, n, n, ld)
                .map_err(lt("cublasLtMatrixLayoutCreate"))?;
        plan.layouts[2] = result::create_matrix_layout(sys::cudaDataType_t::CUDA_R_16BF, n, n, ld)
            .map_err(lt("cublasLtMatrixLayoutCreate"))?;
        let pref = result::create_matmul_pref().map_err(lt("cublasLtMatmulPreferenceCreate"))?;
        let max_workspace = WORKSPACE_BYTES as u64;
        // SAFETY: live descriptors and preference; the heuristic only reads them.
        let heuristic = unsafe {
            let set = result::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&max_workspace as *const u64).cast(),
                size_of::<u64>(),
            );
            let heuristic = set.and_then(|()| {
                result::get_matmul_algo_heuristic(
                    plan.handle,
                    plan.desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                )
            });
            let _ = result::destroy_matmul_pref(pref);
            heuristic
        };
        plan.algo = Some(
            heuristic
                .map_err(lt("cublasLtMatmulAlgoGetHeuristic"))?
                .algo,
        );
        Ok(plan)
    }

    fn enqueue(&self) -> Result<(), BackendError> {
        use cudarc::cublaslt::{result, sys};
        let algo = self
            .algo
            .as_ref()
            .ok_or_else(|| BackendError::Failed("no cuBLASLt algorithm".to_owned()))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the workspace, A, B and C are live buffers of this stream's context
        // (the workspace lives as long as `self`), and the layouts describe A, B and C.
        unsafe {
            result::matmul(
                self.handle,
                self.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                self.a as *const c_void,
                self.layouts[0],
                self.b as *const c_void,
                self.layouts[1],
                self.c as *const c_void,
                self.layouts[2],
                self.c as *mut c_void,
                self.layouts[2],
                algo,
                self.workspace_ptr as *mut c_void,
                WORKSPACE_BYTES,
                self.stream as sys::cudaStream_t,
            )
        }
        .map_err(lt("cublasLtMatmul"))
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        use cudarc::cublaslt::result;
        // SAFETY: each object was created once and is destroyed once; errors are moot.
        unsafe {
            for layout in self.layouts.iter().filter(|l| !l.is_null()) {
                let _ = result::destroy_matrix_layout(*layout);
            }
            if !self.desc.is_null() {
                let _ = result::destroy_matmul_desc(self.desc);
            }
            let _ = result::destroy_handle(self.handle);
        }
    }
}

enum Engine {
    Blas(BlasGemm),
    Lt(LtGemm),
}

impl Engine {
    fn enqueue(&self) -> Result<(), BackendError> {
        match self {
            Engine::Blas(gemm) => gemm.enqueue(),
            Engine::Lt(gemm) => gemm.enqueue(),
        }
    }

    fn library(&self) -> &'static str {
        match self {
            Engine::Blas(_) => "cublas",
            Engine::Lt(_) => "cublaslt",
        }
    }
}

/// Where NVML readings for this GPU come from.
pub struct Readings<'a> {
    pub nvml: &'a Nvml,
    pub index: u32,
}

impl std::fmt::Debug for Readings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readings")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Readings<'_> {
    fn sample(&self) -> GpuHealth {
        super::nvml::sample(self.nvml, self.index)
    }
}

/// Runs the GEMM check on one GPU.
pub fn run(
    ctx: &Arc<CudaContext>,
    inputs: &HostInputs,
    readings: Option<Readings<'_>>,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let ty = inputs.ty;
    let n = inputs.size;
    let err = |what: &'static str| move |e| driver_error(what, e);

    let out_bytes = n * n * ty.output_bytes();
    let needed = inputs.a.len() + inputs.b.len() + out_bytes + WORKSPACE_BYTES;
    let (free, _total) = ctx.mem_get_info().map_err(err("reading free memory"))?;
    if free < needed {
        return Err(BackendError::Failed(format!(
            "the GEMM needs `{:.2}` GiB but only `{:.2}` GiB of GPU memory is free; another process may hold it",
            needed as f64 / f64::from(1u32 << 30),
            free as f64 / f64::from(1u32 << 30)
        )));
    }

    let stream = ctx.new_stream().map_err(err("creating a stream"))?;
    let a = stream
        .clone_htod(&inputs.a)
        .map_err(err("copying A to the GPU"))?;
    let b = stream
        .clone_htod(&inputs.b)
        .map_err(err("copying B to the GPU"))?;
    // SAFETY: filled with NaN right below, then written by every GEMM.
    let c = unsafe { stream.alloc::<u8>(out_bytes) }.map_err(err("allocating C"))?;
    let (a_ptr, b_ptr, c_ptr) = (
        a.device_ptr(&stream).0,
        b.device_ptr(&stream).0,
        c.device_ptr(&stream).0,
    );
    // SAFETY: C is `out_bytes` long and belongs to this stream's context.
    unsafe { cudarc::driver::result::memset_d8_async(c_ptr, 0xFF, out_bytes, stream.cu_stream()) }
        .map_err(err("filling C"))?;

    let engine = match ty {
        GemmType::Fp8 => {
            Engine::Lt(LtGemm::new(&stream, n, a_ptr, b_ptr, c_ptr).map_err(fp8_not_supported)?)
        }
        _ => Engine::Blas(BlasGemm::new(&stream, ty, n, a_ptr, b_ptr, c_ptr)?),
    };

    let before = readings.as_ref().map(Readings::sample).unwrap_or_default();

    let (warmup_iterations, seconds_per_gemm) = warm_up(&engine, &stream, cancel)?;

    let iterations = timed_iterations(seconds_per_gemm);
    let events: Vec<CudaEvent> = (0..=iterations)
        .map(|_| ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<Result<_, _>>()
        .map_err(err("creating events"))?;
    let mut during = Vec::new();
    let mut last_reading = Instant::now();
    let mut read_if_due = |during: &mut Vec<GpuHealth>| {
        if let Some(r) = readings.as_ref()
            && last_reading.elapsed() >= NVML_EVERY
        {
            during.push(r.sample());
            last_reading = Instant::now();
        }
    };
    events[0]
        .record(&stream)
        .map_err(err("recording an event"))?;
    for i in 0..iterations {
        engine.enqueue()?;
        events[i + 1]
            .record(&stream)
            .map_err(err("recording an event"))?;
        if i % 16 == 15 {
            cancel.check()?;
            read_if_due(&mut during);
        }
    }
    poll_event(&events[iterations], cancel, || read_if_due(&mut during))?;
    let after = readings.as_ref().map(Readings::sample).unwrap_or_default();

    let mut samples = Vec::with_capacity(iterations);
    let mut total_ms = 0.0;
    for pair in events.windows(2) {
        let ms = f64::from(
            pair[0]
                .elapsed_ms(&pair[1])
                .map_err(err("reading event times"))?,
        );
        total_ms += ms;
        samples.push(tflops(n, n, n, ms / 1000.0));
    }
    let value = tflops(n, n, n, total_ms / 1000.0 / iterations as f64);

    let checked = read_checked_entries(&stream, &c, inputs)?;
    let wrong_result = verify(ty, &checked);

    let mut extra = summarize_readings(&before, &during, &after);
    extra.insert("time_ms_mean".to_owned(), total_ms / iterations as f64);
    extra.insert("checked_entries".to_owned(), checked.len() as f64);
    let mut params = BTreeMap::new();
    params.insert("dtype".to_owned(), ty.as_str().to_owned());
    for key in ["m", "n", "k"] {
        params.insert(key.to_owned(), n.to_string());
    }
    params.insert("layout".to_owned(), "tn".to_owned());
    params.insert("library".to_owned(), engine.library().to_owned());
    params.insert("iterations".to_owned(), iterations.to_string());
    params.insert(
        "warmup_iterations".to_owned(),
        warmup_iterations.to_string(),
    );
    if let Some(bits) = extra.get("throttle_reasons").map(|b| *b as u64) {
        let names = throttle::names(bits);
        params.insert(
            "throttle_during".to_owned(),
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(",")
            },
        );
        if let Some(note) = throttle::explain(bits) {
            params.insert("throttle_note".to_owned(), note);
        }
    }
    Ok(Sample {
        value,
        samples,
        wrong_result,
        extra,
        params,
    })
}

/// A cuBLASLt (or driver) "not supported" while planning fp8 means this GPU has no fp8
/// GEMM: the check is skipped with why, not failed.
fn fp8_not_supported(error: BackendError) -> BackendError {
    let not_supported = match &error {
        BackendError::Blas { source, .. } => source.is_not_supported(),
        BackendError::Driver { source, .. } => {
            source.0.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED
        }
        _ => false,
    };
    if not_supported {
        BackendError::Unsupported(format!(
            "cuBLASLt has no fp8 GEMM for this GPU: {}",
            crate::with_causes(&error)
        ))
    } else {
        error
    }
}

/// Warms the GPU up, in chunks so cancellation and the time limit are seen: the
/// iterations run and the seconds per GEMM of the last chunk.
fn warm_up(
    engine: &Engine,
    stream: &Arc<CudaStream>,
    cancel: &CancelToken,
) -> Result<(usize, f64), BackendError> {
    let warm_start = Instant::now();
    let mut warmup_iterations = 0;
    loop {
        let chunk_start = Instant::now();
        for _ in 0..WARMUP_CHUNK {
            engine.enqueue()?;
        }
        let done = stream
            .record_event(None)
            .map_err(|e| driver_error("recording an event", e))?;
        poll_event(&done, cancel, || {})?;
        warmup_iterations += WARMUP_CHUNK;
        let seconds_per_gemm = chunk_start.elapsed().as_secs_f64() / WARMUP_CHUNK as f64;
        if warmup_is_over(warm_start.elapsed(), warmup_iterations, seconds_per_gemm) {
            return Ok((warmup_iterations, seconds_per_gemm));
        }
    }
}

/// The correctness sample: a few entries of C read back beside the host reference.
fn read_checked_entries(
    stream: &Arc<CudaStream>,
    c: &CudaSlice<u8>,
    inputs: &HostInputs,
) -> Result<Vec<Checked>, BackendError> {
    let (ty, n) = (inputs.ty, inputs.size);
    let mut checked = Vec::with_capacity(CHECKED_ENTRIES);
    for (i, j) in sample_positions(n, n, CHECKED_ENTRIES) {
        let at = (i + j * n) * ty.output_bytes();
        let bytes = stream
            .clone_dtoh(&c.slice(at..at + ty.output_bytes()))
            .map_err(|e| driver_error("reading C back", e))?;
        let (reference, scale) = inputs.reference(i, j);
        checked.push(Checked {
            i,
            j,
            got: output_value(ty, &bytes),
            reference,
            scale,
        });
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_resolve_by_compute_capability() {
        let hopper = (9, 0);
        let volta = (7, 0);
        assert_eq!(resolve(Dtype::Auto, hopper), Ok(GemmType::Bf16));
        assert_eq!(resolve(Dtype::Auto, volta), Ok(GemmType::Fp32));
        assert_eq!(resolve(Dtype::Tf32, (8, 0)), Ok(GemmType::Tf32));
        assert_eq!(resolve(Dtype::Fp16, volta), Ok(GemmType::Fp16));
        assert_eq!(resolve(Dtype::Fp8, hopper), Ok(GemmType::Fp8));
        assert_eq!(resolve(Dtype::Fp8, (8, 9)), Ok(GemmType::Fp8));
        let err = resolve(Dtype::Fp8, (8, 0)).unwrap_err();
        assert_eq!(
            err,
            BackendError::Unsupported(
                "fp8 GEMM needs compute capability 8.9 or newer; this GPU has `8.0`".to_owned()
            )
        );
        assert!(
            resolve(Dtype::Bf16, volta)
                .unwrap_err()
                .to_string()
                .starts_with("bf16 GEMM needs")
        );
    }

    #[test]
    fn a_blas_failure_names_the_call_and_keeps_the_status_as_its_cause() {
        use cudarc::cublaslt::sys::cublasStatus_t;
        // Made up: cuBLAS only fails this way on a GPU.
        let unsupported = lt("cublasLtMatmulAlgoGetHeuristic")(
            cudarc::cublaslt::result::CublasError(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
        );
        assert_eq!(
            unsupported.to_string(),
            "`cublasLtMatmulAlgoGetHeuristic` failed"
        );
        assert_eq!(
            crate::with_causes(&unsupported),
            "`cublasLtMatmulAlgoGetHeuristic` failed: \
             `CublasError(CUBLAS_STATUS_NOT_SUPPORTED)`"
        );
        // An fp8 plan cuBLASLt cannot make is a skip, with the same words.
        assert_eq!(
            fp8_not_supported(unsupported),
            BackendError::Unsupported(
                "cuBLASLt has no fp8 GEMM for this GPU: `cublasLtMatmulAlgoGetHeuristic` \
                 failed: `CublasError(CUBLAS_STATUS_NOT_SUPPORTED)`"
                    .to_owned()
            )
        );
        let other = cublas("cublasCreate")(cudarc::cublas::result::CublasError(
            cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED,
        ));
        assert_eq!(fp8_not_supported(other.clone()), other);
    }

    #[test]
    fn the_warmup_sizes_the_timed_run_from_a_chunk_after_the_first() {
        let long = WARMUP + Duration::from_millis(1);
        // A first chunk that took the whole warm-up (kernel loading) is not enough.
        assert!(!warmup_is_over(long, WARMUP_CHUNK, 0.15));
        assert!(warmup_is_over(long, 2 * WARMUP_CHUNK, 0.001));
        assert!(!warmup_is_over(
            Duration::from_millis(100),
            8 * WARMUP_CHUNK,
            0.001
        ));
        // GEMMs slow enough that loading is noise need no second chunk.
        assert!(warmup_is_over(long, WARMUP_CHUNK, SLOW_GEMM_SECS));
    }

    #[test]
    fn flops_math() {
        // 8192³ in 1.4 ms is about 785 TFLOPS, what an H200 reaches.
        let t = tflops(8192, 8192, 8192, 0.0014);
        assert!((t - 785.4).abs() < 0.1, "{t}");
        assert_eq!(tflops(1, 1, 1, 0.0), 0.0);
        assert_eq!(timed_iterations(0.0014), 715);
        assert_eq!(timed_iterations(1.0), MIN_ITERATIONS);
        assert_eq!(timed_iterations(1e-9), MAX_ITERATIONS);
        assert_eq!(timed_iterations(f64::NAN), MIN_ITERATIONS);
    }

    #[test]
    fn readings_are_summarized_for_the_finding() {
        let reading = |clock, temp, power, bits| GpuHealth {
            sm_clock_mhz: Some(clock),
            sm_clock_max_mhz: Some(1980),
            temperature_c: Some(temp),
            power_w: Some(power),
            power_limit_w: Some(700.0),
            throttle_reasons: Some(bits),
            ..GpuHealth::default()
        };
        let before = reading(1980, 40, 100.0, throttle::GPU_IDLE);
        let during = [
            reading(1755, 60, 690.0, throttle::SW_POWER_CAP),
            reading(1500, 70, 700.0, throttle::HW_SLOWDOWN),
        ];
        let after = reading(1980, 65, 150.0, throttle::GPU_IDLE);
        let extra = summarize_readings(&before, &during, &after);
        assert_eq!(extra["sm_clock_mhz_min"], 1500.0);
        assert_eq!(extra["sm_clock_mhz_mean"], 1627.5);
        assert_eq!(extra["sm_clock_mhz_before"], 1980.0);
        assert_eq!(extra["temperature_c_max"], 70.0);
        assert_eq!(extra["power_w_max"], 700.0);
        assert_eq!(
            extra["throttle_reasons"],
            (throttle::SW_POWER_CAP | throttle::HW_SLOWDOWN) as f64
        );
        assert_eq!(extra["throttle_abnormal"], 1.0);
        // Without NVML there is nothing to summarize.
        let none = summarize_readings(&GpuHealth::default(), &[], &GpuHealth::default());
        assert!(none.is_empty(), "{none:?}");
    }
}

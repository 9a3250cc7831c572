//! The backend's device source compiles with CUDA 12's real NVRTC from PyPI, loaded by
//! the backend's own code, and its PTX assembles with CUDA 12's `ptxas` for sm_80, sm_90
//! and sm_100 (see [`wheels::compile_and_assemble`]). A binary of its own: cudarc opens
//! NVRTC once per process.

mod wheels;

#[test]
#[ignore = "needs NVIDIA's CUDA 12 NVRTC and ptxas from PyPI: set GPUVET_TEST_CUDA_WHEELS_PYTHON (.ci/run)"]
fn cuda_12_nvrtc_compiles_and_ptxas_assembles_the_backend_kernels() {
    wheels::compile_and_assemble(&wheels::cuda12());
}

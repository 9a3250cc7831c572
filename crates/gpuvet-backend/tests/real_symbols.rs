//! Every function the cuda backend resolves exists in NVIDIA's real `libcublas`,
//! `libcublasLt`, `libnvrtc` and `libnccl` of CUDA 12 and 13, as PyPI's wheels ship
//! them: the lists the loader checks ([`libs::CUBLAS_SYMBOLS`] and the others, and
//! NCCL's own table), looked up with `dlsym` in the files the backend's search finds.
//! No driver or GPU is needed to load them.

mod wheels;

use gpuvet_backend::cuda::{libs, nccl};
use wheels::Wheels;

/// Each missing symbol as `library: symbol`, for every library of `wheels`.
fn missing(wheels: &Wheels) -> Vec<String> {
    let major = wheels.major;
    let so = format!(".so.{major}");
    let mut missing = Vec::new();
    for (what, names, symbols) in [
        ("cuBLASLt", libs::CUBLASLT_NAMES, libs::CUBLASLT_SYMBOLS),
        ("cuBLAS", libs::CUBLAS_NAMES, libs::CUBLAS_SYMBOLS),
        ("NVRTC", libs::NVRTC_NAMES, libs::NVRTC_SYMBOLS),
    ] {
        let path = wheels::find(wheels, what, names, &so);
        let handle = libs::dlopen_global(&path)
            .unwrap_or_else(|e| panic!("CUDA {major}: {}", gpuvet_backend::with_causes(&e)));
        for symbol in libs::missing_symbols(&handle, symbols) {
            missing.push(format!("{}: `{symbol}`", path.display()));
        }
    }
    // NCCL through its own loader, which resolves the required list and asks the version.
    let path = wheels::find(wheels, "NCCL", libs::NCCL_NAMES, ".so.2");
    match nccl::Nccl::open(&path) {
        Ok(loaded) => assert!(
            loaded.nonblocking(),
            "CUDA {major}: NCCL {} at `{}` has no `ncclCommInitRankConfig`",
            loaded.version_string(),
            path.display()
        ),
        Err(e) => missing.push(format!(
            "{}: {}",
            path.display(),
            gpuvet_backend::with_causes(&e)
        )),
    }
    let handle = libs::dlopen_global(&path).unwrap();
    for symbol in libs::missing_symbols(&handle, nccl::OPTIONAL_SYMBOLS) {
        missing.push(format!("{} (optional): `{symbol}`", path.display()));
    }
    missing
}

fn assert_complete(wheels: &Wheels) {
    let missing = missing(wheels);
    assert!(
        missing.is_empty(),
        "CUDA {}'s libraries lack what the backend calls:\n{}",
        wheels.major,
        missing.join("\n")
    );
}

#[test]
#[ignore = "needs NVIDIA's CUDA 13 libraries from PyPI: set GPUVET_TEST_TORCH_PYTHON (.ci/run)"]
fn cuda_13_libraries_have_every_symbol_the_backend_calls() {
    assert_complete(&wheels::cuda13());
}

#[test]
#[ignore = "needs NVIDIA's CUDA 12 libraries from PyPI: set GPUVET_TEST_CUDA_WHEELS_PYTHON (.ci/run)"]
fn cuda_12_libraries_have_every_symbol_the_backend_calls() {
    assert_complete(&wheels::cuda12());
}

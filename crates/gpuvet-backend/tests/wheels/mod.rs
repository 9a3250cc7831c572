//! NVIDIA's CUDA libraries as PyPI's wheels install them, for the tests that hold the
//! cuda backend against the real files without a GPU. `.ci/run` makes two venvs and
//! names their Pythons: torch's (`GPUVET_TEST_TORCH_PYTHON`, CUDA 13 wheels under
//! `nvidia/cu13` and `nvidia/nccl`) and one of NVIDIA's CUDA 12 wheels with both majors'
//! `ptxas` (`GPUVET_TEST_CUDA_WHEELS_PYTHON`). Without them these tests fail, saying
//! what to install: they are `#[ignore]`d, so only `--include-ignored` runs them.

#![allow(dead_code)] // Each test binary uses part of it.

use std::path::{Path, PathBuf};

use gpuvet_backend::cuda::libs;

pub const TORCH_PYTHON_ENV: &str = "GPUVET_TEST_TORCH_PYTHON";
pub const CUDA_WHEELS_PYTHON_ENV: &str = "GPUVET_TEST_CUDA_WHEELS_PYTHON";

/// One CUDA major's libraries.
#[derive(Debug)]
pub struct Wheels {
    pub major: u32,
    /// The venv the wheels are in.
    pub venv: PathBuf,
    /// Where the backend's own search looks in it (`nvidia/*/lib`).
    pub dirs: Vec<PathBuf>,
}

/// The venv of the Python that `var` names (`<venv>/bin/python`), or a panic that says
/// what to install.
fn venv_of(var: &str, install: &str) -> PathBuf {
    let python = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "this test needs {var} set to the Python of a venv with {install} (.ci/run makes it)"
        )
    });
    let venv = Path::new(&python)
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{var}=`{python}` is not `<venv>/bin/python`"));
    venv.to_owned()
}

fn wheels(major: u32, var: &str, install: &str) -> Wheels {
    let venv = venv_of(var, install);
    let dirs = libs::python_nvidia_lib_dirs(&venv);
    assert!(
        !dirs.is_empty(),
        "{var} names a venv without `lib/python3*/site-packages/nvidia/*/lib` (`{}`); \
         it needs {install}",
        venv.display()
    );
    Wheels { major, venv, dirs }
}

/// CUDA 13: torch 2.15.0's dependencies (nvidia-cuda-nvrtc, nvidia-cublas,
/// nvidia-nccl-cu13).
pub fn cuda13() -> Wheels {
    wheels(13, TORCH_PYTHON_ENV, "torch==2.15.0")
}

/// CUDA 12: nvidia-cuda-nvrtc-cu12, nvidia-cublas-cu12 and nvidia-nccl-cu12.
pub fn cuda12() -> Wheels {
    wheels(12, CUDA_WHEELS_PYTHON_ENV, CUDA_WHEELS)
}

const CUDA_WHEELS: &str = "nvidia-cuda-nvrtc-cu12, nvidia-cublas-cu12, nvidia-nccl-cu12, \
                           nvidia-cuda-nvcc-cu12 and nvidia-cuda-nvcc (13)";

/// The `ptxas` of CUDA `major`, from the CUDA wheels venv: nvidia-cuda-nvcc-cu12 puts it
/// in `nvidia/cuda_nvcc/bin`, nvidia-cuda-nvcc (13) in `nvidia/cu13/bin`.
pub fn ptxas(major: u32) -> PathBuf {
    let venv = venv_of(CUDA_WHEELS_PYTHON_ENV, CUDA_WHEELS);
    let package = if major >= 13 { "cu13" } else { "cuda_nvcc" };
    let found = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| {
            python
                .path()
                .join("site-packages/nvidia")
                .join(package)
                .join("bin/ptxas")
        })
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "no CUDA {major} `ptxas` under `{}` (`nvidia/{package}/bin/ptxas`); it needs {CUDA_WHEELS}",
            venv.display()
        )
    })
}

/// The first file named `names` in the wheels, as the backend's search finds it, which
/// must belong to this major (`.so.<major>`, except NCCL's `libnccl.so.2`).
pub fn find(wheels: &Wheels, what: &str, names: &[&str], suffix: &str) -> PathBuf {
    let path = libs::find_library(names, &wheels.dirs).unwrap_or_else(|| {
        panic!(
            "CUDA {}: {what} ({names:?}) is not in {:?}",
            wheels.major, wheels.dirs
        )
    });
    assert!(
        path.to_string_lossy().ends_with(suffix),
        "CUDA {}: the search found {what} at `{}`, not a `*{suffix}`",
        wheels.major,
        path.display()
    );
    path
}

/// The GPUs `ptxas` assembles the backend's PTX for: A100, H100 and B200.
pub const TARGETS: &[&str] = &["sm_80", "sm_90", "sm_100"];

/// Compiles every device source of the backend with the real NVRTC of `wheels`, loaded
/// by the backend's own code, and assembles the PTX with that major's `ptxas` for each
/// of [`TARGETS`]. cudarc opens NVRTC once per process, so each major needs a test
/// binary of its own.
pub fn compile_and_assemble(wheels: &Wheels) {
    use gpuvet_backend::cuda::{launch, load_nvrtc};
    use gpuvet_backend::with_causes;

    let major = wheels.major;
    let located = load_nvrtc(&wheels.dirs)
        .unwrap_or_else(|e| panic!("CUDA {major}: NVRTC did not load: {}", with_causes(&e)));
    let libs::Located::Preloaded(path) = &located else {
        panic!("CUDA {major}: NVRTC was found by the loader's own path, not in the wheels");
    };
    assert!(
        path.to_string_lossy().ends_with(&format!(".so.{major}")),
        "CUDA {major}: NVRTC came from `{}`",
        path.display()
    );
    let ptx = launch::nvrtc_ptx().unwrap_or_else(|e| {
        panic!(
            "CUDA {major}: NVRTC at `{}` rejected the kernel source:\n{}\n{}",
            path.display(),
            launch::SOURCE,
            with_causes(&e)
        )
    });
    assert!(
        ptx.contains(&format!(".entry {}", launch::KERNEL_NAME)),
        "CUDA {major}: no `{}` in NVRTC's PTX:\n{ptx}",
        launch::KERNEL_NAME
    );
    // The worker's setup cost reported on a GPU (`setup_nvrtc_ms`) is this compile's.
    let compile_ms = launch::nvrtc_compile_ms()
        .unwrap_or_else(|| panic!("CUDA {major}: NVRTC compiled but no compile time was kept"));
    assert!(
        compile_ms > 0.0 && compile_ms.is_finite(),
        "CUDA {major}: NVRTC's compile took `{compile_ms}` ms"
    );

    let ptxas = ptxas(major);
    let dir = std::env::temp_dir().join(format!("gpuvet-ptx-{major}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("kernel.ptx");
    std::fs::write(&source, &ptx).unwrap();
    let mut failures = Vec::new();
    for target in TARGETS {
        let output = std::process::Command::new(&ptxas)
            .arg(format!("-arch={target}"))
            .arg(&source)
            .arg("-o")
            .arg(dir.join(format!("kernel-{target}.cubin")))
            .output()
            .unwrap_or_else(|e| panic!("running `{}`: {e}", ptxas.display()));
        let said = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !said.trim().is_empty() {
            failures.push(format!("{target} ({}): {said}", output.status));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "CUDA {major}: `{}` did not assemble NVRTC's PTX cleanly:\n{}\nPTX:\n{ptx}",
        ptxas.display(),
        failures.join("\n")
    );
}

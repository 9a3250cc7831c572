//! The cuda backend on a machine with NVIDIA's libraries from PyPI but no driver, as a
//! torch or vLLM user's laptop or CI runner has them: `gpuvet check --backend cuda`
//! finds each library in the venv (through `VIRTUAL_ENV`, `GPUVET_CUDA_LIBRARY_PATH` or the
//! venv's Python on `PATH`),
//! says which file it found, and stops with one error naming `libcuda.so.1`, a hint and
//! exit code 69; `--backend auto` runs on the cpu backend after one note. Ignored by
//! default: `.ci/run` names the venvs (`GPUVET_TEST_TORCH_PYTHON` for CUDA 13,
//! `GPUVET_TEST_CUDA_WHEELS_PYTHON` for CUDA 12) and runs it with `--include-ignored`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuvet_model::exit_codes::BACKEND_UNAVAILABLE;

use crate::common::{Scratch, json, stderr};

/// The venv of the Python that `var` names, or a panic that says what to install.
fn venv(var: &str, install: &str) -> PathBuf {
    let python = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "this test needs {var} set to the Python of a venv with {install} (.ci/run makes it)"
        )
    });
    Path::new(&python)
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{var}=`{python}` is not `<venv>/bin/python`"))
        .to_owned()
}

/// `gpuvet` with none of the variables that would point it elsewhere.
fn gpuvet(scratch: &Scratch) -> Command {
    let mut command = scratch.gpuvet();
    for var in [
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_PATH",
        "GPUVET_CUDA_LIBRARY_PATH",
        "GPUVET_NCCL_LIBRARY",
    ] {
        command.env_remove(var);
    }
    command
}

/// The `site-packages/nvidia` directory of `venv`.
fn nvidia_dir(venv: &Path) -> PathBuf {
    std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages/nvidia"))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no site-packages/nvidia under `{}`", venv.display()))
}

/// Asserts the refusal: exit code 69, one `error:` naming `libcuda.so.1`, a `hint:`,
/// no panic, and each library's line naming the file `expected` lists.
fn assert_refused_with(output: &Output, expected: &[(&str, PathBuf)]) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(BACKEND_UNAVAILABLE), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains("`libcuda.so.1`"), "{err}");
    assert!(errors[0].contains("no usable NVIDIA driver"), "{err}");
    assert!(
        err.lines()
            .last()
            .is_some_and(|l| l.starts_with("hint: ") && l.contains("--backend auto")),
        "{err}"
    );
    for (what, path) in expected {
        assert!(path.is_file(), "the wheel lacks `{}`", path.display());
        let line = format!("  {what:<9} {}", path.display());
        assert!(
            err.lines().any(|l| l == line),
            "no line `{line}` in:\n{err}"
        );
    }
}

#[test]
#[ignore = "needs NVIDIA's CUDA 13 libraries from PyPI: set GPUVET_TEST_TORCH_PYTHON (.ci/run)"]
fn cuda_13_wheels_in_a_venv_are_found_and_the_missing_driver_is_named() {
    let venv = venv("GPUVET_TEST_TORCH_PYTHON", "torch==2.15.0");
    let nvidia = nvidia_dir(&venv);
    let scratch = Scratch::temp();
    let output = gpuvet(&scratch)
        .args(["check", "--backend", "cuda", "--no-store"])
        .env("VIRTUAL_ENV", &venv)
        .output()
        .expect("running gpuvet");
    assert_refused_with(
        &output,
        &[
            ("cuBLAS", nvidia.join("cu13/lib/libcublas.so.13")),
            ("cuBLASLt", nvidia.join("cu13/lib/libcublasLt.so.13")),
            ("NVRTC", nvidia.join("cu13/lib/libnvrtc.so.13")),
            ("NCCL", nvidia.join("nccl/lib/libnccl.so.2")),
        ],
    );

    // `auto` runs on the cpu backend and says why, once.
    let output = gpuvet(&scratch)
        .args(["check", "--backend", "auto", "--checks", "kernel_launch"])
        .args(["--cpu-devices", "1", "--json", "--no-store"])
        .env("VIRTUAL_ENV", &venv)
        .output()
        .expect("running gpuvet");
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(json(&output)["backend"], "cpu", "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].starts_with("note: no usable GPU, so the checks run on the cpu backend: libcuda"),
        "{err}"
    );
    assert!(
        !err.contains("error:") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
#[ignore = "needs NVIDIA's CUDA 12 libraries from PyPI: set GPUVET_TEST_CUDA_WHEELS_PYTHON (.ci/run)"]
fn cuda_12_wheels_named_by_gpuvet_cuda_library_path_are_found() {
    let venv = venv(
        "GPUVET_TEST_CUDA_WHEELS_PYTHON",
        "nvidia-cublas-cu12, nvidia-cuda-nvrtc-cu12 and nvidia-nccl-cu12",
    );
    let nvidia = nvidia_dir(&venv);
    let dirs = ["cublas/lib", "cuda_nvrtc/lib", "nccl/lib"]
        .map(|d| nvidia.join(d).display().to_string())
        .join(":");
    let scratch = Scratch::temp();
    let output = gpuvet(&scratch)
        .args(["check", "--backend", "cuda", "--no-store"])
        .env("GPUVET_CUDA_LIBRARY_PATH", dirs)
        .output()
        .expect("running gpuvet");
    assert_refused_with(
        &output,
        &[
            ("cuBLAS", nvidia.join("cublas/lib/libcublas.so.12")),
            ("cuBLASLt", nvidia.join("cublas/lib/libcublasLt.so.12")),
            ("NVRTC", nvidia.join("cuda_nvrtc/lib/libnvrtc.so.12")),
            ("NCCL", nvidia.join("nccl/lib/libnccl.so.2")),
        ],
    );
}

#[test]
#[ignore = "needs NVIDIA's CUDA 12 libraries from PyPI: set GPUVET_TEST_CUDA_WHEELS_PYTHON (.ci/run)"]
fn cuda_12_wheels_of_the_python_first_on_path_are_found_without_virtual_env() {
    // A container image that runs its venv's Python from `PATH` (as the GPU image of
    // docs/benchmarks.md, "GPU", does) sets no `VIRTUAL_ENV`.
    let venv = venv(
        "GPUVET_TEST_CUDA_WHEELS_PYTHON",
        "nvidia-cublas-cu12, nvidia-cuda-nvrtc-cu12 and nvidia-nccl-cu12",
    );
    let nvidia = nvidia_dir(&venv);
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let scratch = Scratch::temp();
    let output = gpuvet(&scratch)
        .args(["check", "--backend", "cuda", "--no-store"])
        .env("PATH", path)
        .output()
        .expect("running gpuvet");
    assert_refused_with(
        &output,
        &[
            ("cuBLAS", nvidia.join("cublas/lib/libcublas.so.12")),
            ("NVRTC", nvidia.join("cuda_nvrtc/lib/libnvrtc.so.12")),
            ("NCCL", nvidia.join("nccl/lib/libnccl.so.2")),
        ],
    );
}

//! gpuvet's NCCL declarations against the real `nccl.h` of the CUDA 12 and 13 wheels:
//! a C program built with `cc` against each header prints `ncclConfig_t`'s offsets, what
//! `NCCL_CONFIG_INITIALIZER` writes, and the constants gpuvet copies (`NCCL_CONFIG_UNDEF_INT`,
//! `NCCL_VERSION(2,14,0)`, result codes, data types, `ncclSum`), and each must equal the
//! Rust side; the header's version must be the library's.

mod wheels;

use std::collections::BTreeMap;
use std::process::Command;

use gpuvet_backend::cuda::{libs, nccl};
use wheels::Wheels;

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <nccl.h>
#define FIELD(f) printf("offset.%s %zu\n", #f, offsetof(ncclConfig_t, f))
#define VALUE(v) printf("%s %lld\n", #v, (long long)(v))
int main(void) {
  FIELD(size); FIELD(magic); FIELD(version); FIELD(blocking); FIELD(cgaClusterSize);
  printf("sizeof.ncclConfig_t %zu\n", sizeof(ncclConfig_t));
  printf("sizeof.ncclUniqueId %zu\n", sizeof(ncclUniqueId));
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  printf("initializer.magic %u\n", init.magic);
  printf("initializer.cgaClusterSize %d\n", init.cgaClusterSize);
  VALUE(NCCL_CONFIG_UNDEF_INT); VALUE(NCCL_VERSION(2, 14, 0));
  VALUE(NCCL_VERSION_CODE); VALUE(ncclSuccess); VALUE(ncclRemoteError);
  VALUE(ncclInProgress); VALUE(ncclFloat16); VALUE(ncclFloat32); VALUE(ncclBfloat16);
  VALUE(ncclSum);
  return 0;
}
"#;

/// What the header says, by name.
fn header_values(wheels: &Wheels) -> BTreeMap<String, i64> {
    let major = wheels.major;
    let dir = std::env::temp_dir().join(format!("gpuvet-nccl-abi-{major}-{}", std::process::id()));
    // nccl.h includes the CUDA runtime's headers, which the wheels ship only in part
    // (no `crt/`); NCCL's ABI needs nothing from them but `cudaStream_t`.
    let stubs = dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    for header in ["cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"] {
        std::fs::write(stubs.join(header), "").unwrap();
    }
    std::fs::write(
        stubs.join("cuda_runtime.h"),
        "typedef struct CUstream_st *cudaStream_t;\n",
    )
    .unwrap();
    let include = wheels
        .dirs
        .iter()
        .filter_map(|lib| lib.parent())
        .map(|package| package.join("include"))
        .find(|dir| dir.join("nccl.h").is_file())
        .unwrap_or_else(|| panic!("CUDA {major}: no nccl.h in {:?}", wheels.dirs));
    let source = dir.join("abi.c");
    let binary = dir.join("abi");
    std::fs::write(&source, PROGRAM).unwrap();
    let built = Command::new("cc")
        .arg("-I")
        .arg(&stubs)
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .expect("running cc");
    assert!(
        built.status.success(),
        "CUDA {major}: cc could not build against nccl.h:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(&binary).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&ran.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect()
}

fn assert_abi(wheels: &Wheels) {
    let major = wheels.major;
    let header = header_values(wheels);
    let mut expected: Vec<(String, i64)> = nccl::CONFIG_LAYOUT
        .iter()
        .map(|(field, offset)| (format!("offset.{field}"), *offset as i64))
        .collect();
    expected.extend(
        [
            ("sizeof.ncclUniqueId", size_of::<nccl::UniqueId>() as i64),
            ("initializer.magic", nccl::CONFIG_MAGIC.into()),
            ("initializer.cgaClusterSize", nccl::CONFIG_UNDEF_INT.into()),
            ("NCCL_CONFIG_UNDEF_INT", nccl::CONFIG_UNDEF_INT.into()),
            ("NCCL_VERSION(2, 14, 0)", nccl::NONBLOCKING_SINCE.into()),
            ("ncclSuccess", nccl::code::SUCCESS.into()),
            ("ncclRemoteError", nccl::code::REMOTE_ERROR.into()),
            ("ncclInProgress", nccl::code::IN_PROGRESS.into()),
            ("ncclFloat16", nccl::datatype::FLOAT16.into()),
            ("ncclFloat32", nccl::datatype::FLOAT32.into()),
            ("ncclBfloat16", nccl::datatype::BFLOAT16.into()),
            ("ncclSum", nccl::SUM.into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(name, value)| header.get(name) != Some(value))
        .map(|(name, value)| format!("{name}: gpuvet {value}, nccl.h {:?}", header.get(name)))
        .collect();
    assert!(
        wrong.is_empty(),
        "CUDA {major}: gpuvet's NCCL ABI differs from nccl.h:\n{}",
        wrong.join("\n")
    );
    // gpuvet's config is a prefix of the header's.
    assert!(
        nccl::CONFIG_SIZE as i64 <= header["sizeof.ncclConfig_t"],
        "{header:?}"
    );
    // The header belongs to the library the search finds.
    let path = wheels::find(wheels, "NCCL", libs::NCCL_NAMES, ".so.2");
    let loaded = nccl::Nccl::open(&path).unwrap();
    assert_eq!(
        loaded.version,
        nccl::decode_version(header["NCCL_VERSION_CODE"] as i32),
        "CUDA {major}: `{}` is not the NCCL of its nccl.h",
        path.display()
    );
}

#[test]
#[ignore = "needs NVIDIA's CUDA 13 NCCL from PyPI and cc: set GPUVET_TEST_TORCH_PYTHON (.ci/run)"]
fn cuda_13_nccl_header_matches_gpuvets_declarations() {
    assert_abi(&wheels::cuda13());
}

#[test]
#[ignore = "needs NVIDIA's CUDA 12 NCCL from PyPI and cc: set GPUVET_TEST_CUDA_WHEELS_PYTHON (.ci/run)"]
fn cuda_12_nccl_header_matches_gpuvets_declarations() {
    assert_abi(&wheels::cuda12());
}

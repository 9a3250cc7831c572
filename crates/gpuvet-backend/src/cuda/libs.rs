//! Finding and loading the CUDA libraries that cudarc cannot find by itself.
//!
//! cudarc opens each library by bare file name (`libcublas.so.13`, `libnccl.so`, ...),
//! so the dynamic loader only looks in `LD_LIBRARY_PATH`, the loader cache and the
//! system directories. Two common setups fall outside that:
//!
//! - CUDA libraries installed by pip wheels (`site-packages/nvidia/*/lib`), which torch
//!   finds through its own `RPATH` but nothing else does;
//! - NCCL from pip (`libnccl.so.2`), a name cudarc never tries.
//!
//! For the first case it is enough to load the file once by its full path: glibc matches
//! a later `dlopen("libcublas.so.13")` against the `DT_SONAME` of objects already loaded,
//! so cudarc then finds it. For NCCL that trick cannot work (its soname, `libnccl.so.2`,
//! is not among cudarc's names), which is why [`super::nccl`] loads it itself.
//!
//! Where to look, in order: `GPUVET_CUDA_LIBRARY_PATH` (directories, `:`-separated),
//! `LD_LIBRARY_PATH`, `CUDA_HOME`/`CUDA_PATH`, `/usr/local/cuda`, the `nvidia/*/lib`
//! directories of Python environments (`VIRTUAL_ENV`, `CONDA_PREFIX`, the prefix of each
//! `python3` on `PATH`, `/usr/local`, `/usr`, `/opt/conda`, `~/.local`), then the system
//! library directories.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use crate::BackendError;

/// Directories to search, `:`-separated; searched before anything else.
pub const LIBRARY_PATH_ENV: &str = "GPUVET_CUDA_LIBRARY_PATH";

/// File names tried for each library, most specific first. The `.13` names come first
/// because the workspace builds cudarc for the CUDA 13 API.
pub const CUBLASLT_NAMES: &[&str] = &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"];
pub const CUBLAS_NAMES: &[&str] = &["libcublas.so.13", "libcublas.so.12", "libcublas.so"];
pub const NVRTC_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
pub const NCCL_NAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];

/// The functions cudarc resolves in each library for the backend, one list per library:
/// the `sys` functions behind the `result` calls in [`super::gemm`] and NVRTC's
/// `compile_ptx` in [`super::launch`]. cudarc looks each one up only on its first call
/// and panics if it is missing, so [`ensure_loadable`] checks them all when it loads the
/// library, and the tests hold them against NVIDIA's real libraries (`real_libraries`).
/// NCCL's list is [`super::nccl::REQUIRED_SYMBOLS`], which its own loader resolves.
pub const CUBLAS_SYMBOLS: &[&str] = &[
    "cublasCreate_v2",
    "cublasSetStream_v2",
    "cublasSetWorkspace_v2",
    "cublasGemmEx",
    "cublasDestroy_v2",
];
pub const CUBLASLT_SYMBOLS: &[&str] = &[
    "cublasLtCreate",
    "cublasLtMatmulDescCreate",
    "cublasLtMatmulDescSetAttribute",
    "cublasLtMatrixLayoutCreate",
    "cublasLtMatmulPreferenceCreate",
    "cublasLtMatmulPreferenceSetAttribute",
    "cublasLtMatmulAlgoGetHeuristic",
    "cublasLtMatmulPreferenceDestroy",
    "cublasLtMatmul",
    "cublasLtMatrixLayoutDestroy",
    "cublasLtMatmulDescDestroy",
    "cublasLtDestroy",
];
pub const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcDestroyProgram",
];

/// The environment a search reads, captured once so tests can supply their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchEnv {
    pub gpuvet_path: Option<String>,
    pub ld_library_path: Option<String>,
    pub cuda_home: Option<String>,
    pub cuda_path: Option<String>,
    pub virtual_env: Option<String>,
    pub conda_prefix: Option<String>,
    pub home: Option<String>,
    /// `PATH`: a Python environment whose `bin` is on it counts as active even when
    /// nothing set `VIRTUAL_ENV` (container images that put a venv first on `PATH`).
    pub path: Option<String>,
}

impl SearchEnv {
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        SearchEnv {
            gpuvet_path: var(LIBRARY_PATH_ENV),
            ld_library_path: var("LD_LIBRARY_PATH"),
            cuda_home: var("CUDA_HOME"),
            cuda_path: var("CUDA_PATH"),
            virtual_env: var("VIRTUAL_ENV"),
            conda_prefix: var("CONDA_PREFIX"),
            home: var("HOME"),
            path: var("PATH"),
        }
    }
}

/// The directories to search, in order, without duplicates. Directories that do not
/// exist are kept out so error messages stay short.
pub fn search_dirs(env: &SearchEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let split = |list: &Option<String>| -> Vec<PathBuf> {
        list.as_deref()
            .map(|l| {
                l.split(':')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    dirs.extend(split(&env.gpuvet_path));
    dirs.extend(split(&env.ld_library_path));
    for root in [&env.cuda_home, &env.cuda_path].into_iter().flatten() {
        dirs.push(Path::new(root).join("lib64"));
        dirs.push(Path::new(root).join("lib"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/sbsa-linux/lib"));

    let mut prefixes: Vec<PathBuf> = Vec::new();
    prefixes.extend(env.virtual_env.iter().map(PathBuf::from));
    prefixes.extend(env.conda_prefix.iter().map(PathBuf::from));
    prefixes.extend(python_prefixes_on_path(env.path.as_deref()));
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    prefixes.push(PathBuf::from("/opt/conda"));
    if let Some(home) = &env.home {
        prefixes.push(Path::new(home).join(".local"));
    }
    for prefix in &prefixes {
        dirs.extend(python_nvidia_lib_dirs(prefix));
    }

    for system in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(system));
    }

    let mut seen = std::collections::BTreeSet::new();
    dirs.retain(|d| d.is_dir() && seen.insert(d.clone()));
    dirs
}

/// The prefix of each Python on `path`: `<prefix>` for every `<prefix>/bin` entry that
/// holds a `python3`, in `PATH` order.
fn python_prefixes_on_path(path: Option<&str>) -> Vec<PathBuf> {
    path.unwrap_or_default()
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.ends_with("bin") && dir.join("python3").exists())
        .filter_map(|dir| dir.parent().map(Path::to_path_buf))
        .collect()
}

/// `<prefix>/lib/python3*/{site,dist}-packages/nvidia/<package>/lib`, where pip's NVIDIA
/// wheels put their libraries (`nvidia/nccl/lib`, `nvidia/cublas/lib`, `nvidia/cu13/lib`).
pub fn python_nvidia_lib_dirs(prefix: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                let nvidia = python.join(packages).join("nvidia");
                let Ok(packages) = std::fs::read_dir(&nvidia) else {
                    continue;
                };
                let mut libs: Vec<PathBuf> = packages
                    .flatten()
                    .map(|e| e.path().join("lib"))
                    .filter(|p| p.is_dir())
                    .collect();
                libs.sort();
                found.extend(libs);
            }
        }
    }
    found
}

/// The first `dir/name` that exists, trying every name in each directory before the next
/// directory, so an earlier directory wins.
pub fn find_library(names: &[&str], dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|path| path.is_file())
}

/// How a library was made available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// The loader finds it by name; nothing was done.
    ByName,
    /// It was loaded from this path so that later loads by name find it.
    Preloaded(PathBuf),
}

impl Located {
    pub fn describe(&self) -> String {
        match self {
            Located::ByName => "found by the dynamic loader".to_owned(),
            Located::Preloaded(path) => path.display().to_string(),
        }
    }
}

/// Makes a library that cudarc opens by name loadable: if `present` (cudarc's own check)
/// already succeeds nothing is done; otherwise the first file named `names` in `dirs` is
/// loaded by path, and `present` must then succeed. Either way the library must have
/// every function in `symbols`, so a library too old for the backend is reported here
/// rather than by cudarc's panic in the middle of a check.
pub fn ensure_loadable(
    what: &'static str,
    names: &'static [&'static str],
    symbols: &[&'static str],
    dirs: &[PathBuf],
    present: impl Fn() -> bool,
) -> Result<Located, BackendError> {
    if present() {
        // The loader's own pick: the first of our names it opens (cudarc tries these
        // names too, most specific first).
        let loaded = names
            .iter()
            .find_map(|name| dlopen_global(Path::new(name)).ok().map(|h| (h, name)));
        if let Some((handle, name)) = loaded {
            require_symbols(what, Path::new(name), &handle, symbols)?;
        }
        return Ok(Located::ByName);
    }
    let Some(path) = find_library(names, dirs) else {
        return Err(not_found(what, names, dirs));
    };
    let handle = dlopen_global(&path)?;
    require_symbols(what, &path, &handle, symbols)?;
    if present() {
        Ok(Located::Preloaded(path))
    } else {
        Err(BackendError::Failed(format!(
            "{what} was loaded from `{}` but cudarc still cannot open it by name",
            path.display()
        )))
    }
}

/// The names in `symbols` that `handle` lacks, in order.
pub fn missing_symbols(handle: &Handle, symbols: &[&'static str]) -> Vec<&'static str> {
    symbols
        .iter()
        .copied()
        .filter(|symbol| handle.symbol(symbol).is_err())
        .collect()
}

/// An error naming every function in `symbols` that the library at `path` lacks.
pub fn require_symbols(
    what: &'static str,
    path: &Path,
    handle: &Handle,
    symbols: &[&'static str],
) -> Result<(), BackendError> {
    let missing = missing_symbols(handle, symbols);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(BackendError::SymbolsMissing {
            what,
            path: path.display().to_string(),
            symbols: missing,
        })
    }
}

/// The error for a library that is nowhere to be found.
pub fn not_found(
    what: &'static str,
    names: &'static [&'static str],
    dirs: &[PathBuf],
) -> BackendError {
    BackendError::LibraryNotFound {
        what,
        names,
        dirs: dirs.to_vec(),
        alternative: None,
    }
}

/// The message of [`BackendError::LibraryNotFound`]: what was tried where, and how to
/// point gpuvet at it (`alternative` adds a second way).
pub(crate) fn not_found_message(
    what: &str,
    names: &[&str],
    dirs: &[PathBuf],
    alternative: Option<&str>,
) -> String {
    let names = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let shown: Vec<String> = dirs
        .iter()
        .take(8)
        .map(|d| d.display().to_string())
        .collect();
    let more = if dirs.len() > 8 {
        format!(" and {} more", dirs.len() - 8)
    } else {
        String::new()
    };
    let alternative = alternative
        .map(|other| format!("; {other}"))
        .unwrap_or_default();
    format!(
        "{what} was not found (tried {names} in the loader's path and in `{}`{more}); \
         add its directory to `{LIBRARY_PATH_ENV}`{alternative}",
        shown.join(":")
    )
}

/// What the dynamic loader said (`dlerror`) when a load or a lookup failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlError(pub String);

impl std::fmt::Display for DlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DlError {}

// The loader's own entry points: std already links them on Linux (glibc has them in
// libc since 2.34, libdl before), and libloading, which cudarc uses, calls the same ones.
unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;

/// A library loaded for the life of the process (never closed: cudarc and NCCL keep
/// pointers into it).
#[derive(Debug, Clone, Copy)]
pub struct Handle(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token; dlsym may be called from any thread.
unsafe impl Send for Handle {}
// SAFETY: as for `Send`; the handle is never closed or mutated.
unsafe impl Sync for Handle {}

impl Handle {
    /// The address of `symbol`, or an error naming it.
    pub fn symbol(&self, symbol: &str) -> Result<*mut c_void, BackendError> {
        let name = CString::new(symbol)
            .map_err(|_| BackendError::Failed(format!("bad symbol name `{symbol}`")))?;
        // SAFETY: the handle came from a successful dlopen and is never closed.
        let address = unsafe {
            dlerror();
            dlsym(self.0, name.as_ptr())
        };
        if address.is_null() {
            Err(BackendError::SymbolMissing {
                symbol: symbol.to_owned(),
                source: last_error(),
            })
        } else {
            Ok(address)
        }
    }
}

/// Loads `path` with `RTLD_NOW | RTLD_GLOBAL`.
pub fn dlopen_global(path: &Path) -> Result<Handle, BackendError> {
    let text = path.to_str().ok_or_else(|| {
        BackendError::Failed(format!("`{}` is not a valid UTF-8 path", path.display()))
    })?;
    let c_path = CString::new(text)
        .map_err(|_| BackendError::Failed(format!("`{text}` contains a NUL byte")))?;
    // SAFETY: a plain dlopen of a path; the library's initialisers run as they would for
    // any other load.
    let handle = unsafe {
        dlerror();
        dlopen(c_path.as_ptr(), RTLD_NOW | RTLD_GLOBAL)
    };
    if handle.is_null() {
        Err(BackendError::LoadFailed {
            path: text.to_owned(),
            source: last_error(),
        })
    } else {
        Ok(Handle(handle))
    }
}

fn last_error() -> DlError {
    // SAFETY: dlerror returns a thread-local, NUL-terminated string or null.
    let message = unsafe { dlerror() };
    DlError(if message.is_null() {
        "unknown error".to_owned()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next dl* call on this thread.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, Ordering::SeqCst);
            let dir =
                std::env::temp_dir().join(format!("gpuvet-libs-{tag}-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn touch(&self, relative: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"").unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn finds_pip_nccl_under_a_virtual_env() {
        let venv = TempDir::new("venv");
        let nccl = venv.touch("lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2");
        venv.touch("lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13");
        let env = SearchEnv {
            virtual_env: Some(venv.0.display().to_string()),
            ..SearchEnv::default()
        };
        let dirs = search_dirs(&env);
        assert_eq!(find_library(NCCL_NAMES, &dirs), Some(nccl));
        let cublas = find_library(CUBLAS_NAMES, &dirs).unwrap();
        assert!(
            cublas.ends_with("nvidia/cu13/lib/libcublas.so.13"),
            "{}",
            cublas.display()
        );
    }

    #[test]
    fn finds_pip_nccl_of_the_python_first_on_path_without_virtual_env() {
        let venv = TempDir::new("path-venv");
        let nccl = venv.touch("lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2");
        venv.touch("bin/python3");
        let elsewhere = TempDir::new("path-other");
        let env = SearchEnv {
            path: Some(format!(
                "{}:{}",
                elsewhere.0.display(),
                venv.0.join("bin").display()
            )),
            ..SearchEnv::default()
        };
        assert_eq!(find_library(NCCL_NAMES, &search_dirs(&env)), Some(nccl));
        // A `bin` without a Python is not taken for an environment.
        let no_python = SearchEnv {
            path: Some(elsewhere.0.join("bin").display().to_string()),
            ..SearchEnv::default()
        };
        assert_eq!(
            python_prefixes_on_path(no_python.path.as_deref()),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn gpuvet_path_comes_before_ld_library_path_and_names_keep_their_order() {
        let first = TempDir::new("first");
        let second = TempDir::new("second");
        let wanted = first.touch("libnccl.so");
        second.touch("libnccl.so.2");
        let env = SearchEnv {
            gpuvet_path: Some(format!("{}::/does/not/exist", first.0.display())),
            ld_library_path: Some(second.0.display().to_string()),
            ..SearchEnv::default()
        };
        let dirs = search_dirs(&env);
        assert_eq!(dirs.first(), Some(&first.0));
        assert!(!dirs.iter().any(|d| d.ends_with("does/not/exist")));
        // The earlier directory wins even with a less specific name.
        assert_eq!(find_library(NCCL_NAMES, &dirs), Some(wanted));
        // Within one directory the more specific name wins.
        let both = first.touch("libnccl.so.2");
        assert_eq!(find_library(NCCL_NAMES, &dirs), Some(both));
    }

    #[test]
    fn a_missing_library_is_reported_with_where_it_was_looked_for() {
        let empty = TempDir::new("empty");
        let dirs = vec![empty.0.clone()];
        let err = ensure_loadable("NCCL", NCCL_NAMES, &[], &dirs, || false).unwrap_err();
        assert!(
            matches!(&err, BackendError::LibraryNotFound { what: "NCCL", .. }),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(
            err.starts_with("NCCL was not found (tried `libnccl.so.2`, `libnccl.so`"),
            "{err}"
        );
        assert!(err.contains(&empty.0.display().to_string()), "{err}");
        assert!(err.ends_with(&format!("add its directory to `{LIBRARY_PATH_ENV}`")));
        assert_eq!(
            ensure_loadable("NCCL", NCCL_NAMES, &[], &dirs, || true),
            Ok(Located::ByName)
        );
        // Another way to find it comes after the usual one; long searches are cut short.
        let many: Vec<PathBuf> = (0..10).map(|i| PathBuf::from(format!("/d{i}"))).collect();
        let message = not_found_message("NCCL", NCCL_NAMES, &many, Some("or set `X`"));
        assert!(message.contains("`/d0:/d1:/d2:/d3:/d4:/d5:/d6:/d7` and 2 more"));
        assert!(message.ends_with("`; or set `X`"), "{message}");
    }

    #[test]
    fn loading_a_file_that_is_not_a_library_fails_cleanly() {
        let dir = TempDir::new("bogus");
        let bogus = dir.touch("libcublas.so.13");
        let err = dlopen_global(&bogus).unwrap_err();
        // The loader's words are the cause, not part of the message.
        let BackendError::LoadFailed { path, source } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(path, &bogus.display().to_string());
        assert_eq!(err.to_string(), format!("cannot load `{path}`"));
        assert!(!source.0.is_empty());
        assert_eq!(
            crate::with_causes(&err),
            format!("cannot load `{path}`: {source}")
        );
        let err = ensure_loadable(
            "cuBLAS",
            CUBLAS_NAMES,
            CUBLAS_SYMBOLS,
            std::slice::from_ref(&dir.0),
            || false,
        )
        .unwrap_err();
        assert!(matches!(err, BackendError::LoadFailed { .. }), "{err:?}");
        // A path the loader cannot take at all.
        let err = dlopen_global(Path::new("bad\0name")).unwrap_err();
        assert_eq!(
            err,
            BackendError::Failed("`bad\0name` contains a NUL byte".to_owned())
        );
    }

    #[test]
    fn every_cublas_function_the_gemm_calls_directly_is_listed() {
        // `result::` calls are listed by hand (their `sys` names are cudarc's); the
        // direct `sys::` calls are found here, so a new one cannot be left off.
        let source = include_str!("gemm/mod.rs");
        for call in source.split("sys::").skip(1) {
            let name: String = call
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with("cublas") && call[name.len()..].starts_with('(') {
                let list = if name.starts_with("cublasLt") {
                    CUBLASLT_SYMBOLS
                } else {
                    CUBLAS_SYMBOLS
                };
                assert!(list.contains(&name.as_str()), "`{name}` is not listed");
            }
        }
    }

    #[test]
    fn a_library_without_a_listed_function_is_refused_by_name() {
        let Some(libc) = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
        else {
            return;
        };
        let handle = dlopen_global(libc).unwrap();
        assert_eq!(require_symbols("libc", libc, &handle, &["strlen"]), Ok(()));
        let err = require_symbols("libc", libc, &handle, &["strlen", "gpuvet_a", "gpuvet_b"])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "libc at `{}` lacks `gpuvet_a`, `gpuvet_b`; it is older than gpuvet needs",
                libc.display()
            )
        );
    }

    #[test]
    fn symbols_resolve_in_a_real_library() {
        // libc is always there; this exercises dlopen/dlsym without any GPU library.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists());
        let Some(libc) = libc else { return };
        let handle = dlopen_global(libc).unwrap();
        assert!(handle.symbol("strlen").is_ok());
        let err = handle.symbol("gpuvet_no_such_symbol").unwrap_err();
        assert!(
            matches!(&err, BackendError::SymbolMissing { symbol, .. } if symbol == "gpuvet_no_such_symbol"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "symbol `gpuvet_no_such_symbol` is missing");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(cause.contains("gpuvet_no_such_symbol"), "{cause}");
    }
}

//! NCCL, loaded by gpuvet itself rather than through cudarc.
//!
//! Why not cudarc's `nccl` module: it opens the library by bare name from a fixed list
//! (`libnccl.so`, `libnccl.so.13`, ...) that lacks `libnccl.so.2`, the only name pip's
//! `nvidia-nccl-*` wheels ship, and no environment variable changes that list; preloading
//! by path does not help either, because glibc matches later loads by soname and the
//! soname is `libnccl.so.2`. Its `Comm` also aborts with `expect` on drop and declares
//! NCCL's result codes as a Rust enum, so a code from a newer NCCL would be undefined
//! behaviour. gpuvet therefore opens the file it finds (`GPUVET_NCCL_LIBRARY`, else the
//! search in [`super::libs`], else the loader's own path) and calls the dozen functions
//! it needs through plain C types. Communicators are released by [`Comms`]'s `Drop`,
//! which never panics.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::libs::{self, Handle};

/// A file to load NCCL from, overriding the search.
pub const NCCL_LIBRARY_ENV: &str = "GPUVET_NCCL_LIBRARY";

/// `ncclResult_t`; 0 is success. Kept as an integer so unknown codes are harmless.
type NcclResult = c_int;
/// `ncclComm_t`, an opaque pointer.
pub type RawComm = *mut c_void;
/// `cudaStream_t`, the same pointer as the driver's `CUstream`.
pub type RawStream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// `ncclDataType_t` values (stable since NCCL 2.0; bf16 since 2.10).
pub mod datatype {
    use std::ffi::c_int;
    pub const FLOAT16: c_int = 6;
    pub const FLOAT32: c_int = 7;
    pub const BFLOAT16: c_int = 9;
}

/// `ncclRedOp_t::ncclSum`.
pub const SUM: c_int = 0;

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetErrorStringFn = unsafe extern "C" fn(NcclResult) -> *const c_char;
type GetUniqueIdFn = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type CommInitAllFn = unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> NcclResult;
type CommInitRankFn = unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult;
type CommFn = unsafe extern "C" fn(RawComm) -> NcclResult;
type CommGetAsyncErrorFn = unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult;
type GroupFn = unsafe extern "C" fn() -> NcclResult;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type AllGatherFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type SendFn =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
type RecvFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;

/// The loaded library and the functions gpuvet calls.
#[derive(Debug)]
pub struct Nccl {
    pub path: PathBuf,
    /// `(major, minor, patch)`.
    pub version: (u32, u32, u32),
    get_error_string: GetErrorStringFn,
    get_unique_id: GetUniqueIdFn,
    comm_init_all: CommInitAllFn,
    comm_init_rank: CommInitRankFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    comm_get_async_error: CommGetAsyncErrorFn,
    group_start: GroupFn,
    group_end: GroupFn,
    all_reduce: AllReduceFn,
    all_gather: AllGatherFn,
    send: SendFn,
    recv: RecvFn,
}

/// NCCL's version code: `major*10000 + minor*100 + patch` since 2.9, `major*1000 +
/// minor*100 + patch` before.
pub fn decode_version(code: i32) -> (u32, u32, u32) {
    let code = code.max(0) as u32;
    if code >= 10000 {
        (code / 10000, (code % 10000) / 100, code % 100)
    } else {
        (code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// Where to look for NCCL: the override, else the search, else the loader's own path.
pub fn candidates(override_path: Option<&str>, dirs: &[PathBuf]) -> Vec<PathBuf> {
    if let Some(path) = override_path.filter(|p| !p.trim().is_empty()) {
        return vec![PathBuf::from(path.trim())];
    }
    let mut out: Vec<PathBuf> = libs::find_library(libs::NCCL_NAMES, dirs)
        .into_iter()
        .collect();
    // Bare names: the loader's path and cache (e.g. a system NCCL package).
    out.extend(libs::NCCL_NAMES.iter().map(PathBuf::from));
    out
}

static LOADED: OnceLock<Result<Nccl, String>> = OnceLock::new();

/// Loads NCCL once per process; later calls return the first outcome.
pub fn load(dirs: &[PathBuf]) -> Result<&'static Nccl, String> {
    LOADED
        .get_or_init(|| {
            let override_path = std::env::var(NCCL_LIBRARY_ENV).ok();
            let tried = candidates(override_path.as_deref(), dirs);
            let mut errors = Vec::new();
            for candidate in &tried {
                match open(candidate) {
                    Ok(nccl) => return Ok(nccl),
                    Err(err) => errors.push(err),
                }
            }
            if override_path.is_some() {
                return Err(format!(
                    "NCCL could not be loaded from `{NCCL_LIBRARY_ENV}`: {}",
                    errors.join("; ")
                ));
            }
            Err(format!(
                "{}; or point `{NCCL_LIBRARY_ENV}` at `libnccl.so.2`",
                libs::not_found("NCCL", libs::NCCL_NAMES, dirs)
            ))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn open(path: &Path) -> Result<Nccl, String> {
    let handle = libs::dlopen_global(path)?;
    // SAFETY: each symbol is cast to the signature `nccl.h` declares for it.
    unsafe {
        let get_version: GetVersionFn = symbol(&handle, "ncclGetVersion")?;
        let mut code: c_int = 0;
        let result = get_version(&mut code);
        if result != 0 {
            return Err(format!("`ncclGetVersion` failed with code `{result}`"));
        }
        Ok(Nccl {
            path: path.to_owned(),
            version: decode_version(code),
            get_error_string: symbol(&handle, "ncclGetErrorString")?,
            get_unique_id: symbol(&handle, "ncclGetUniqueId")?,
            comm_init_all: symbol(&handle, "ncclCommInitAll")?,
            comm_init_rank: symbol(&handle, "ncclCommInitRank")?,
            comm_destroy: symbol(&handle, "ncclCommDestroy")?,
            comm_abort: symbol(&handle, "ncclCommAbort")?,
            comm_get_async_error: symbol(&handle, "ncclCommGetAsyncError")?,
            group_start: symbol(&handle, "ncclGroupStart")?,
            group_end: symbol(&handle, "ncclGroupEnd")?,
            all_reduce: symbol(&handle, "ncclAllReduce")?,
            all_gather: symbol(&handle, "ncclAllGather")?,
            send: symbol(&handle, "ncclSend")?,
            recv: symbol(&handle, "ncclRecv")?,
        })
    }
}

/// # Safety
/// `F` must be the function pointer type of the C function named `name`.
unsafe fn symbol<F: Copy>(handle: &Handle, name: &str) -> Result<F, String> {
    let address = handle.symbol(name)?;
    debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: the caller names the right type; a function pointer has a data pointer's size.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

impl Nccl {
    pub fn version_string(&self) -> String {
        let (major, minor, patch) = self.version;
        format!("{major}.{minor}.{patch}")
    }

    /// `Ok` for success, else an error naming the call and NCCL's own message.
    fn check(&self, call: &str, result: NcclResult) -> Result<(), String> {
        if result == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string (or null for unknown codes).
        let text = unsafe { (self.get_error_string)(result) };
        let text = if text.is_null() {
            "unknown error".to_owned()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(format!("`{call}` failed: {text} (code `{result}`)"))
    }

    /// A new unique id, for communicators that span processes (the coordinator sends it).
    pub fn unique_id(&self) -> Result<UniqueId, String> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into `id`.
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    pub fn group_start(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check("ncclGroupStart", unsafe { (self.group_start)() })
    }

    pub fn group_end(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check("ncclGroupEnd", unsafe { (self.group_end)() })
    }
}

/// Communicators owned together; `Drop` destroys them (or aborts them after a failure
/// or during a panic) and never panics.
#[derive(Debug)]
pub struct Comms {
    nccl: &'static Nccl,
    comms: Vec<RawComm>,
    aborted: bool,
}

impl Comms {
    /// One communicator per local device, all in this process (`ncclCommInitAll`).
    pub fn init_all(nccl: &'static Nccl, ordinals: &[i32]) -> Result<Comms, String> {
        let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
        let n = c_int::try_from(ordinals.len()).map_err(|_| "too many devices".to_owned())?;
        // SAFETY: `comms` has room for one handle per ordinal.
        let result = unsafe { (nccl.comm_init_all)(comms.as_mut_ptr(), n, ordinals.as_ptr()) };
        let mut owned = Comms {
            nccl,
            comms,
            aborted: false,
        };
        if let Err(err) = nccl.check("ncclCommInitAll", result) {
            owned.abort();
            return Err(err);
        }
        Ok(owned)
    }

    /// One rank per local device of communicators of `world` ranks spanning
    /// processes: device i joins the communicator of `places[i].0` as rank
    /// `places[i].1`. One id for every device makes one communicator (its ranks
    /// consecutive); one id per device makes one per rail. They are initialised in one
    /// NCCL group, as a process driving several GPUs must. `bind(i)` makes device `i`
    /// current before its rank is initialised.
    pub fn init_ranks(
        nccl: &'static Nccl,
        world: usize,
        places: &[(UniqueId, usize)],
        mut bind: impl FnMut(usize) -> Result<(), String>,
    ) -> Result<Comms, String> {
        let world = c_int::try_from(world).map_err(|_| "too many ranks".to_owned())?;
        let mut owned = Comms {
            nccl,
            comms: vec![std::ptr::null_mut(); places.len()],
            aborted: false,
        };
        nccl.group_start()?;
        let mut result = Ok(());
        for (device, &(id, rank)) in places.iter().enumerate() {
            let rank = c_int::try_from(rank).map_err(|_| "rank out of range".to_owned());
            result = rank.and_then(|rank| {
                bind(device)?;
                // SAFETY: the slot receives the handle; `id` is passed by value.
                let code =
                    unsafe { (nccl.comm_init_rank)(&mut owned.comms[device], world, id, rank) };
                nccl.check("ncclCommInitRank", code)
            });
            if result.is_err() {
                break;
            }
        }
        // The group must be closed even after an error, or NCCL stays inside it.
        if let Err(err) = result.and(nccl.group_end()) {
            owned.abort();
            return Err(err);
        }
        Ok(owned)
    }

    pub fn len(&self) -> usize {
        self.comms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.comms.is_empty()
    }

    /// Enqueues an all-reduce on communicator `i`.
    ///
    /// # Safety
    /// `send` and `recv` must be device buffers of at least `count` elements of
    /// `datatype` on the communicator's device, and `stream` a stream of that device;
    /// they must stay alive until the stream has run the operation.
    pub unsafe fn all_reduce(
        &self,
        i: usize,
        send: u64,
        recv: u64,
        count: usize,
        datatype: c_int,
        stream: RawStream,
    ) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                datatype,
                SUM,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check("ncclAllReduce", result)
    }

    /// Enqueues an all-gather on communicator `i` (`send_count` elements from each rank).
    ///
    /// # Safety
    /// As for [`Comms::all_reduce`], with `recv` holding `send_count × ranks` elements.
    pub unsafe fn all_gather(
        &self,
        i: usize,
        send: u64,
        recv: u64,
        send_count: usize,
        datatype: c_int,
        stream: RawStream,
    ) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                send_count,
                datatype,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check("ncclAllGather", result)
    }

    /// Enqueues a send to `peer` on communicator `i`; inside a group with the matching
    /// receives this builds all-to-all, which NCCL has no single call for.
    ///
    /// # Safety
    /// As for [`Comms::all_reduce`].
    pub unsafe fn send(
        &self,
        i: usize,
        buf: u64,
        count: usize,
        datatype: c_int,
        peer: i32,
        stream: RawStream,
    ) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.send)(
                buf as *const c_void,
                count,
                datatype,
                peer,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check("ncclSend", result)
    }

    /// Enqueues a receive from `peer` on communicator `i`.
    ///
    /// # Safety
    /// As for [`Comms::all_reduce`].
    pub unsafe fn recv(
        &self,
        i: usize,
        buf: u64,
        count: usize,
        datatype: c_int,
        peer: i32,
        stream: RawStream,
    ) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.recv)(
                buf as *mut c_void,
                count,
                datatype,
                peer,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check("ncclRecv", result)
    }

    /// The first asynchronous error any communicator reports (a peer or link failure
    /// while an operation runs).
    pub fn async_error(&self) -> Option<String> {
        for &comm in self.comms.iter().filter(|c| !c.is_null()) {
            let mut state: NcclResult = 0;
            // SAFETY: a live communicator handle.
            let result = unsafe { (self.nccl.comm_get_async_error)(comm, &mut state) };
            if let Err(err) = self.nccl.check("ncclCommGetAsyncError", result) {
                return Some(err);
            }
            // 7 is `ncclInProgress`: a non-blocking operation still running, not a fault.
            if state != 0 && state != 7 {
                return Some(
                    self.nccl
                        .check("a collective", state)
                        .err()
                        .unwrap_or_else(|| format!("code `{state}`")),
                );
            }
        }
        None
    }

    /// Aborts every communicator: pending operations stop, and `Drop` destroys nothing.
    pub fn abort(&mut self) {
        for comm in self.comms.iter_mut().filter(|c| !c.is_null()) {
            // SAFETY: a live communicator, aborted once; errors are moot on this path.
            let _ = unsafe { (self.nccl.comm_abort)(*comm) };
            *comm = std::ptr::null_mut();
        }
        self.aborted = true;
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        // Unwinding from a panic mid-collective: kernels may still be running, and
        // destroying would wait on them (or on peers) for good.
        if std::thread::panicking() && !self.aborted {
            self.abort();
        }
        if self.aborted {
            return;
        }
        for comm in self.comms.iter_mut().filter(|c| !c.is_null()) {
            // SAFETY: a live communicator whose operations have completed.
            let _ = unsafe { (self.nccl.comm_destroy)(*comm) };
            *comm = std::ptr::null_mut();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_decode_both_schemes() {
        assert_eq!(decode_version(22707), (2, 27, 7));
        assert_eq!(decode_version(23007), (2, 30, 7));
        assert_eq!(decode_version(2804), (2, 8, 4));
        assert_eq!(decode_version(-1), (0, 0, 0));
    }

    #[test]
    fn the_override_is_the_only_candidate() {
        let dirs = vec![PathBuf::from("/nonexistent")];
        assert_eq!(
            candidates(Some(" /opt/nccl/libnccl.so.2 "), &dirs),
            [PathBuf::from("/opt/nccl/libnccl.so.2")]
        );
        // Without it, the bare names follow whatever the search found.
        let bare = candidates(None, &dirs);
        assert_eq!(
            bare,
            [PathBuf::from("libnccl.so.2"), PathBuf::from("libnccl.so")]
        );
        assert_eq!(candidates(Some(""), &dirs), bare);
    }

    #[test]
    fn loading_without_nccl_fails_with_a_clear_message() {
        // This machine has no NCCL; the message must say what to do. When NCCL is
        // installed the load succeeds and reports a sane version instead.
        match load(&[]) {
            Ok(nccl) => assert!(nccl.version.0 >= 2, "{:?}", nccl.version),
            Err(err) => {
                assert!(err.contains("NCCL"), "{err}");
                assert!(
                    err.contains(NCCL_LIBRARY_ENV) || err.contains("libnccl"),
                    "{err}"
                );
            }
        }
    }
}

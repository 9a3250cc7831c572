//! NCCL, loaded by gpuvet itself rather than through cudarc, with communicators that
//! can be aborted.
//!
//! Why not cudarc's `nccl` module: it opens the library by bare name from a fixed list
//! (`libnccl.so`, `libnccl.so.13`, ...) that lacks `libnccl.so.2`, the only name pip's
//! `nvidia-nccl-*` wheels ship, and no environment variable changes that list; preloading
//! by path does not help either, because glibc matches later loads by soname and the
//! soname is `libnccl.so.2`. Its `Comm` also aborts with `expect` on drop and declares
//! NCCL's result codes as a Rust enum, so a code from a newer NCCL would be undefined
//! behaviour. gpuvet therefore opens the file it finds (`GPUVET_NCCL_LIBRARY`, else the
//! search in [`super::libs`], else the loader's own path) and calls the dozen functions
//! it needs through plain C types, declared once in `nccl_symbols!`.
//!
//! A peer that never joins or a link that stops hangs NCCL for good, so communicators
//! are created non-blocking (`ncclCommInitRankConfig` with `blocking = 0`, NCCL 2.14+):
//! every call returns at once, possibly with `ncclInProgress`, and gpuvet polls
//! `ncclCommGetAsyncError` until each communicator leaves that state. [`wait_until`] is
//! that loop: it ends when the look succeeds or fails, when the [`CancelToken`] is set
//! (the coordinator aborted the run) or at a deadline, and [`Comms`] then calls
//! `ncclCommAbort`, as NCCL's documentation prescribes for a hung or failed
//! communicator. An NCCL without `ncclCommInitRankConfig` is driven blocking, as
//! before; [`Nccl::mode`] says so in the check's parameters. Communicators are
//! released by [`Comms`]'s `Drop`, which never panics.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::libs::{self, Handle};
use crate::{BackendError, CancelToken};

/// A file to load NCCL from, overriding the search.
pub const NCCL_LIBRARY_ENV: &str = "GPUVET_NCCL_LIBRARY";

/// `ncclResult_t`; 0 is success. Kept as an integer so unknown codes are harmless.
type NcclResult = c_int;
/// `ncclComm_t`, an opaque pointer.
pub type RawComm = *mut c_void;
/// `cudaStream_t`, the same pointer as the driver's `CUstream`.
pub type RawStream = *mut c_void;

/// The `ncclResult_t` values gpuvet acts on.
pub mod code {
    use std::ffi::c_int;
    pub const SUCCESS: c_int = 0;
    /// A peer or the network failed.
    pub const REMOTE_ERROR: c_int = 6;
    /// A non-blocking call still running: not a fault.
    pub const IN_PROGRESS: c_int = 7;
}

/// `NCCL_VERSION(2, 14, 0)`: `ncclCommInitRankConfig` and non-blocking communicators.
pub const NONBLOCKING_SINCE: u32 = 21400;

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

/// The head of `ncclConfig_t` as NCCL 2.14 defined it, which every later NCCL accepts:
/// `parseCommConfig` starts from `NCCL_CONFIG_INITIALIZER`'s defaults, copies only
/// `size` bytes over them, checks `magic`, and resets every field newer than `version`
/// to its default. So this prefix asks for exactly one thing, `blocking = 0`, whatever
/// NCCL loads. The fourth int is where C puts padding; it is `cgaClusterSize` since
/// 2.17, ignored for a 2.14 config, and set to "undefined" so no byte is left unset.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Config {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
}

/// `NCCL_API_MAGIC`, which `NCCL_CONFIG_INITIALIZER` writes.
pub const CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;

/// [`Config`]'s fields by their `ncclConfig_t` names, with their offsets, and its size:
/// what the ABI test (`tests/real_nccl_abi.rs`) holds against `nccl.h`.
pub const CONFIG_LAYOUT: &[(&str, usize)] = &[
    ("size", std::mem::offset_of!(Config, size)),
    ("magic", std::mem::offset_of!(Config, magic)),
    ("version", std::mem::offset_of!(Config, version)),
    ("blocking", std::mem::offset_of!(Config, blocking)),
    (
        "cgaClusterSize",
        std::mem::offset_of!(Config, cga_cluster_size),
    ),
];
pub const CONFIG_SIZE: usize = size_of::<Config>();

impl Config {
    pub fn nonblocking() -> Config {
        Config {
            size: size_of::<Config>(),
            magic: CONFIG_MAGIC,
            version: NONBLOCKING_SINCE,
            blocking: 0,
            cga_cluster_size: CONFIG_UNDEF_INT,
        }
    }
}

/// Declares the functions gpuvet calls, each once with its C signature and NCCL's
/// name: the table's fields and its loader come from this one list. Optional ones are
/// `None` in an NCCL too old to have them.
macro_rules! nccl_symbols {
    (
        required { $( $field:ident = $name:literal: fn($($arg:ty),* $(,)?) -> $ret:ty; )* }
        optional { $( $ofield:ident = $oname:literal: fn($($oarg:ty),* $(,)?) -> $oret:ty; )* }
    ) => {
        /// Every function gpuvet needs from NCCL, by name.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$($name),*];
        /// Functions gpuvet uses when NCCL has them (newer releases).
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$($oname),*];

        /// NCCL's functions as gpuvet calls them.
        #[derive(Debug, Clone, Copy)]
        struct Symbols {
            $( $field: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( $ofield: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
        }

        impl Symbols {
            /// # Safety
            /// `handle` must be an NCCL, whose functions have the signatures above.
            unsafe fn resolve(handle: &Handle) -> Result<Symbols, BackendError> {
                // SAFETY: each type is the one `nccl.h` declares for the name.
                unsafe {
                    Ok(Symbols {
                        $( $field: cast(handle.symbol($name)?), )*
                        $( $ofield: handle.symbol($oname).ok().map(|a| cast(a)), )*
                    })
                }
            }
        }
    };
}

nccl_symbols! {
    required {
        get_version = "ncclGetVersion": fn(*mut c_int) -> NcclResult;
        get_error_string = "ncclGetErrorString": fn(NcclResult) -> *const c_char;
        get_unique_id = "ncclGetUniqueId": fn(*mut UniqueId) -> NcclResult;
        comm_init_rank = "ncclCommInitRank": fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult;
        comm_destroy = "ncclCommDestroy": fn(RawComm) -> NcclResult;
        comm_abort = "ncclCommAbort": fn(RawComm) -> NcclResult;
        comm_get_async_error = "ncclCommGetAsyncError": fn(RawComm, *mut NcclResult) -> NcclResult;
        group_start = "ncclGroupStart": fn() -> NcclResult;
        group_end = "ncclGroupEnd": fn() -> NcclResult;
        all_reduce = "ncclAllReduce":
            fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
        all_gather = "ncclAllGather":
            fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> NcclResult;
        send = "ncclSend": fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
        recv = "ncclRecv": fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
    }
    optional {
        // NCCL 2.14+.
        comm_init_rank_config = "ncclCommInitRankConfig":
            fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult;
        // NCCL 2.13+: the detail behind a code (which peer, which link).
        get_last_error = "ncclGetLastError": fn(RawComm) -> *const c_char;
    }
}

/// # Safety
/// `F` must be the function pointer type of the C function at `address`.
unsafe fn cast<F: Copy>(address: *mut c_void) -> F {
    debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: the caller names the right type; a function pointer has a data pointer's size.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) }
}

/// The loaded library and the functions gpuvet calls.
#[derive(Debug)]
pub struct Nccl {
    pub path: PathBuf,
    /// `(major, minor, patch)`.
    pub version: (u32, u32, u32),
    api: Symbols,
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

static LOADED: OnceLock<Result<Nccl, BackendError>> = OnceLock::new();

/// Loads NCCL once per process; later calls return the first outcome.
pub fn load(dirs: &[PathBuf]) -> Result<&'static Nccl, BackendError> {
    LOADED
        .get_or_init(|| {
            let override_path = std::env::var(NCCL_LIBRARY_ENV).ok();
            load_from(override_path.as_deref(), dirs)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads NCCL from the override, else from the first candidate that loads.
pub fn load_from(override_path: Option<&str>, dirs: &[PathBuf]) -> Result<Nccl, BackendError> {
    let tried = candidates(override_path, dirs);
    let mut first_error = None;
    for candidate in &tried {
        match Nccl::open(candidate) {
            Ok(nccl) => return Ok(nccl),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    // With an override it is the only candidate, so its error is the whole story.
    match first_error {
        Some(error) if override_path.is_some_and(|p| !p.trim().is_empty()) => {
            Err(BackendError::NcclOverride {
                source: Box::new(error),
            })
        }
        _ => Err(BackendError::LibraryNotFound {
            what: "NCCL",
            names: libs::NCCL_NAMES,
            dirs: dirs.to_vec(),
            alternative: Some(NCCL_ALTERNATIVE),
        }),
    }
}

/// How else to point gpuvet at NCCL, said after the search path.
const NCCL_ALTERNATIVE: &str = "or point `GPUVET_NCCL_LIBRARY` at `libnccl.so.2`";

impl Nccl {
    /// Loads NCCL from `path`, without [`load`]'s once-per-process cache.
    pub fn open(path: &Path) -> Result<Nccl, BackendError> {
        let handle = libs::dlopen_global(path)?;
        // SAFETY: a library found as NCCL; `resolve` casts each symbol to its `nccl.h` type.
        let api = unsafe { Symbols::resolve(&handle) }?;
        let mut code: c_int = 0;
        // SAFETY: writes one int.
        let result = unsafe { (api.get_version)(&mut code) };
        if result != code::SUCCESS {
            return Err(BackendError::Failed(format!(
                "`ncclGetVersion` failed with code `{result}`"
            )));
        }
        Ok(Nccl {
            path: path.to_owned(),
            version: decode_version(code),
            api,
        })
    }

    pub fn version_string(&self) -> String {
        let (major, minor, patch) = self.version;
        format!("{major}.{minor}.{patch}")
    }

    /// Whether communicators are created non-blocking, and so can be aborted while they
    /// initialise.
    pub fn nonblocking(&self) -> bool {
        self.api.comm_init_rank_config.is_some()
    }

    /// How communicators are driven, for a check's parameters.
    pub fn mode(&self) -> String {
        if self.nonblocking() {
            "non-blocking".to_owned()
        } else {
            format!(
                "blocking (NCCL {} has no `ncclCommInitRankConfig`, which 2.14 added; a hung \
                 initialisation cannot be aborted)",
                self.version_string()
            )
        }
    }

    /// NCCL's text for `result`, with its last error's detail where it keeps one.
    fn describe(&self, result: NcclResult, comm: RawComm) -> NcclStatus {
        // SAFETY: ncclGetErrorString returns a static string for every code ("unknown
        // result code" for one it does not know); null is still handled.
        let text = unsafe { c_text((self.api.get_error_string)(result)) };
        let text = text.unwrap_or_else(|| "unknown error".to_owned());
        // SAFETY: NCCL accepts any handle here (2.13+ ignores it) and returns a string it
        // owns, valid until its next error.
        let last_error = self
            .api
            .get_last_error
            .and_then(|last| unsafe { c_text(last(comm)) })
            .map(|last| last.trim().to_owned())
            .filter(|last| !last.is_empty());
        NcclStatus {
            code: result,
            text,
            last_error,
        }
    }

    /// `Ok` for success, else an error naming the call and NCCL's own message.
    fn check(&self, call: &'static str, result: NcclResult) -> Result<(), BackendError> {
        if result == code::SUCCESS {
            return Ok(());
        }
        Err(BackendError::Nccl {
            call,
            source: self.describe(result, std::ptr::null_mut()),
        })
    }

    /// As [`Nccl::check`], but `ncclInProgress` is success too: a non-blocking call that
    /// returned before its work was done, which polling then follows.
    fn check_started(&self, call: &'static str, result: NcclResult) -> Result<(), BackendError> {
        if result == code::IN_PROGRESS {
            return Ok(());
        }
        self.check(call, result)
    }

    /// A new unique id, for communicators that span processes (the coordinator sends it).
    pub fn unique_id(&self) -> Result<UniqueId, BackendError> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into `id`.
        self.check("ncclGetUniqueId", unsafe {
            (self.api.get_unique_id)(&mut id)
        })?;
        Ok(id)
    }

    pub fn group_start(&self) -> Result<(), BackendError> {
        // SAFETY: no arguments.
        self.check("ncclGroupStart", unsafe { (self.api.group_start)() })
    }

    /// Closes a group; with non-blocking communicators its work may still be starting.
    pub fn group_end(&self) -> Result<(), BackendError> {
        // SAFETY: no arguments.
        self.check_started("ncclGroupEnd", unsafe { (self.api.group_end)() })
    }
}

/// What NCCL said about a result code: its text, the code, and its last error's detail
/// (which peer, which link) where it keeps one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclStatus {
    pub code: c_int,
    pub text: String,
    pub last_error: Option<String>,
}

impl std::fmt::Display for NcclStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let NcclStatus {
            code,
            text,
            last_error,
        } = self;
        match last_error {
            Some(last) => write!(f, "{text} (code `{code}`; NCCL's last error: `{last}`)"),
            None => write!(f, "{text} (code `{code}`)"),
        }
    }
}

impl std::error::Error for NcclStatus {}

/// # Safety
/// `text` is null or a NUL-terminated string that stays valid while it is copied.
unsafe fn c_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated, by the caller's promise.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// How long each wait may last before the communicators are aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Creating the communicators: every rank of every node must join.
    pub init: Duration,
    /// Launching one grouped operation, or running what was launched.
    pub step: Duration,
}

impl Default for Limits {
    /// Generous: NCCL's own bootstrap takes seconds at a few hundred ranks, and the
    /// largest default message runs in well under a second per iteration. The overall
    /// timeout still cancels sooner when it is shorter.
    fn default() -> Self {
        Limits {
            init: Duration::from_secs(120),
            step: Duration::from_secs(120),
        }
    }
}

/// What one look at the communicators (and at whatever else is awaited) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Pending,
    Done,
    Failed(BackendError),
}

/// Why a wait ended without success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    Failed(BackendError),
    TimedOut,
    Cancelled,
}

/// The decision after one look: `None` to look again. A result the look found wins
/// over a cancel or a deadline that came at the same time.
pub fn decide(
    progress: Progress,
    cancelled: bool,
    past_deadline: bool,
) -> Option<Result<(), Stop>> {
    match progress {
        Progress::Done => Some(Ok(())),
        Progress::Failed(why) => Some(Err(Stop::Failed(why))),
        Progress::Pending if cancelled => Some(Err(Stop::Cancelled)),
        Progress::Pending if past_deadline => Some(Err(Stop::TimedOut)),
        Progress::Pending => None,
    }
}

/// Shortest and longest pause between looks: the first looks come quickly, since a
/// launch usually completes at once, and a long wait costs little CPU.
const FIRST_PAUSE: Duration = Duration::from_micros(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(1);

/// Looks until [`decide`] ends the wait, at most `limit` from now.
pub fn wait_until(
    limit: Duration,
    cancel: &CancelToken,
    mut look: impl FnMut() -> Progress,
) -> Result<(), Stop> {
    // A limit too large for the clock means no deadline.
    let deadline = Instant::now().checked_add(limit);
    let mut pause = Duration::ZERO;
    loop {
        let past = deadline.is_some_and(|deadline| Instant::now() >= deadline);
        if let Some(end) = decide(look(), cancel.is_cancelled(), past) {
            return end;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).clamp(FIRST_PAUSE, LONGEST_PAUSE);
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
    /// One rank per local device of communicators of `world` ranks: device i joins
    /// the communicator of `places[i].0` as rank `places[i].1`. One id for every
    /// device makes one communicator (its ranks consecutive; all of them, for a
    /// collective within this node); one id per device makes one per rail. They are
    /// created in one NCCL group, as a process driving several GPUs must (the
    /// single-process `ncclCommInitAll` has no non-blocking form, and NCCL documents it
    /// as this loop). `bind(i)` makes device `i` current before its rank is created.
    ///
    /// Non-blocking, this returns once every communicator is ready, and aborts them all
    /// when one fails, at `limits.init`, or when `cancel` is set.
    pub fn init(
        nccl: &'static Nccl,
        world: usize,
        places: &[(UniqueId, usize)],
        mut bind: impl FnMut(usize) -> Result<(), BackendError>,
        limits: &Limits,
        cancel: &CancelToken,
    ) -> Result<Comms, BackendError> {
        let world = c_int::try_from(world)
            .map_err(|_| BackendError::Failed(format!("`{world}` ranks are too many")))?;
        let mut owned = Comms {
            nccl,
            comms: vec![std::ptr::null_mut(); places.len()],
            aborted: false,
        };
        // NCCL copies the config during the call; it lives until the group closes anyway.
        let mut config = Config::nonblocking();
        let started = nccl.group_start().and_then(|()| {
            let mut result = Ok(());
            for (device, &(id, rank)) in places.iter().enumerate() {
                result = c_int::try_from(rank)
                    .map_err(|_| BackendError::Failed(format!("rank `{rank}` is out of range")))
                    .and_then(|rank| {
                        bind(device)?;
                        let slot = &mut owned.comms[device];
                        match nccl.api.comm_init_rank_config {
                            // SAFETY: the slot receives the handle; `id` is passed by
                            // value; `config` outlives the call.
                            Some(init) => nccl.check_started("ncclCommInitRankConfig", unsafe {
                                init(slot, world, id, rank, &mut config)
                            }),
                            // SAFETY: as above.
                            None => nccl.check("ncclCommInitRank", unsafe {
                                (nccl.api.comm_init_rank)(slot, world, id, rank)
                            }),
                        }
                    });
                if result.is_err() {
                    break;
                }
            }
            // The group must be closed even after an error, or NCCL stays inside it.
            result.and(nccl.group_end())
        });
        if let Err(err) = started {
            owned.abort();
            return Err(BackendError::NcclStart {
                what: "creating NCCL's communicators".to_owned(),
                source: Box::new(err),
            });
        }
        owned.wait("creating NCCL's communicators", limits.init, cancel, || {
            Ok(true)
        })?;
        Ok(owned)
    }

    /// Runs `enqueue` inside one NCCL group and waits until NCCL has launched it onto
    /// the streams (at once when blocking). Everything is aborted on an error, at
    /// `limits.step`, or when `cancel` is set.
    pub fn launch(
        &mut self,
        what: &str,
        limits: &Limits,
        cancel: &CancelToken,
        enqueue: impl FnOnce(&Comms) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let started = self.nccl.group_start().and_then(|()| {
            let result = enqueue(self);
            // The group must be closed even after an error, or NCCL stays inside it.
            let end = self.nccl.group_end();
            result.and(end)
        });
        if let Err(err) = started {
            self.abort();
            return Err(BackendError::NcclStart {
                what: format!("launching {what}"),
                source: Box::new(err),
            });
        }
        self.wait(&format!("launching {what}"), limits.step, cancel, || {
            Ok(true)
        })
    }

    /// Waits until `done()` says what was launched has run and no communicator is still
    /// in progress. An asynchronous error, an error from `done`, `limit` or `cancel`
    /// aborts every communicator and ends the wait with an error naming `what`.
    pub fn wait(
        &mut self,
        what: &str,
        limit: Duration,
        cancel: &CancelToken,
        mut done: impl FnMut() -> Result<bool, BackendError>,
    ) -> Result<(), BackendError> {
        let outcome = wait_until(limit, cancel, || match self.progress() {
            Progress::Done => match done() {
                Ok(true) => Progress::Done,
                Ok(false) => Progress::Pending,
                Err(err) => Progress::Failed(err),
            },
            other => other,
        });
        let Err(stop) = outcome else {
            return Ok(());
        };
        // A hung or failed communicator never recovers; aborting ends its kernels and
        // threads, so the caller can free its buffers and report.
        self.abort();
        Err(match stop {
            Stop::Cancelled => BackendError::Cancelled,
            Stop::TimedOut => BackendError::NcclTimedOut {
                what: what.to_owned(),
                limit,
            },
            Stop::Failed(why) => BackendError::NcclAborted {
                what: what.to_owned(),
                cause: Box::new(why),
            },
        })
    }

    /// Every communicator's asynchronous state: `Done` when all are idle or running
    /// what they were given, `Pending` while one is still in progress, `Failed` with
    /// NCCL's message for the first error.
    pub fn progress(&self) -> Progress {
        let mut pending = false;
        for &comm in self.comms.iter().filter(|c| !c.is_null()) {
            let mut state: NcclResult = code::SUCCESS;
            // SAFETY: a live communicator handle; writes one int.
            let result = unsafe { (self.nccl.api.comm_get_async_error)(comm, &mut state) };
            if let Err(err) = self.nccl.check("ncclCommGetAsyncError", result) {
                return Progress::Failed(err);
            }
            match state {
                code::SUCCESS => {}
                code::IN_PROGRESS => pending = true,
                error => {
                    return Progress::Failed(BackendError::NcclReports(
                        self.nccl.describe(error, comm),
                    ));
                }
            }
        }
        if pending {
            Progress::Pending
        } else {
            Progress::Done
        }
    }

    pub fn len(&self) -> usize {
        self.comms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.comms.is_empty()
    }

    /// Whether [`Comms::abort`] has run.
    pub fn is_aborted(&self) -> bool {
        self.aborted
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
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.api.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                datatype,
                SUM,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check_started("ncclAllReduce", result)
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
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.api.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                send_count,
                datatype,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check_started("ncclAllGather", result)
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
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.api.send)(
                buf as *const c_void,
                count,
                datatype,
                peer,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check_started("ncclSend", result)
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
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded from the caller.
        let result = unsafe {
            (self.nccl.api.recv)(
                buf as *mut c_void,
                count,
                datatype,
                peer,
                self.comms[i],
                stream,
            )
        };
        self.nccl.check_started("ncclRecv", result)
    }

    /// Aborts every communicator: pending operations stop, and `Drop` destroys nothing.
    pub fn abort(&mut self) {
        for comm in self.comms.iter_mut().filter(|c| !c.is_null()) {
            // SAFETY: a live communicator, aborted once; errors are moot on this path.
            let _ = unsafe { (self.nccl.api.comm_abort)(*comm) };
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
            let _ = unsafe { (self.nccl.api.comm_destroy)(*comm) };
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
                let err = crate::with_causes(&err);
                assert!(err.contains("NCCL"), "{err}");
                assert!(
                    err.contains(NCCL_LIBRARY_ENV) || err.contains("libnccl"),
                    "{err}"
                );
            }
        }
        // Not found anywhere: both ways to point gpuvet at it, in the old words.
        let dir = PathBuf::from("/nonexistent-gpuvet-nccl");
        if let Err(err) = load_from(None, std::slice::from_ref(&dir)) {
            assert!(
                matches!(err, BackendError::LibraryNotFound { what: "NCCL", .. }),
                "{err:?}"
            );
            assert!(
                err.to_string().ends_with(
                    "add its directory to `GPUVET_CUDA_LIBRARY_PATH`; or point \
                     `GPUVET_NCCL_LIBRARY` at `libnccl.so.2`"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn an_override_that_does_not_load_says_so_with_the_loader_s_reason() {
        let err = load_from(Some("/nonexistent/libnccl.so.2"), &[]).unwrap_err();
        let BackendError::NcclOverride { source } = &err else {
            panic!("{err:?}");
        };
        assert!(
            matches!(**source, BackendError::LoadFailed { ref path, .. } if path == "/nonexistent/libnccl.so.2"),
            "{source:?}"
        );
        assert_eq!(
            err.to_string(),
            "NCCL could not be loaded from `GPUVET_NCCL_LIBRARY`"
        );
        let text = crate::with_causes(&err);
        assert!(
            text.starts_with(
                "NCCL could not be loaded from `GPUVET_NCCL_LIBRARY`: cannot load \
                 `/nonexistent/libnccl.so.2`: "
            ),
            "{text}"
        );
    }

    #[test]
    fn nccl_s_words_read_as_before() {
        let status = NcclStatus {
            code: 6,
            text: "remote process exited or there was a network error".to_owned(),
            last_error: Some("peer 10.0.0.2 closed".to_owned()),
        };
        let failed = BackendError::Nccl {
            call: "ncclGroupEnd",
            source: status.clone(),
        };
        assert_eq!(failed.to_string(), "`ncclGroupEnd` failed");
        assert_eq!(
            crate::with_causes(&failed),
            "`ncclGroupEnd` failed: remote process exited or there was a network error \
             (code `6`; NCCL's last error: `peer 10.0.0.2 closed`)"
        );
        let plain = NcclStatus {
            last_error: None,
            ..status
        };
        assert_eq!(
            BackendError::NcclReports(plain).to_string(),
            "NCCL reports remote process exited or there was a network error (code `6`)"
        );
    }

    #[test]
    fn the_config_is_nccl_2_14_s_head_asking_for_non_blocking() {
        // size_t size; unsigned magic, version; int blocking; then cgaClusterSize (2.17).
        assert_eq!(size_of::<Config>(), 24);
        assert_eq!(std::mem::offset_of!(Config, magic), 8);
        assert_eq!(std::mem::offset_of!(Config, version), 12);
        assert_eq!(std::mem::offset_of!(Config, blocking), 16);
        let config = Config::nonblocking();
        assert_eq!(config.size, 24);
        assert_eq!(config.magic, 0xcafe_beef);
        assert_eq!(decode_version(config.version as i32), (2, 14, 0));
        assert_eq!(config.blocking, 0);
        assert_eq!(config.cga_cluster_size, i32::MIN);
    }

    #[test]
    fn a_look_s_result_wins_then_cancel_then_the_deadline() {
        let boom = || BackendError::Failed("boom".to_owned());
        let failed = || Progress::Failed(boom());
        assert_eq!(decide(Progress::Done, true, true), Some(Ok(())));
        assert_eq!(
            decide(failed(), true, true),
            Some(Err(Stop::Failed(boom())))
        );
        assert_eq!(
            decide(Progress::Pending, true, true),
            Some(Err(Stop::Cancelled))
        );
        assert_eq!(
            decide(Progress::Pending, false, true),
            Some(Err(Stop::TimedOut))
        );
        assert_eq!(decide(Progress::Pending, false, false), None);
    }

    #[test]
    fn waiting_looks_until_the_look_or_the_cancel_ends_it() {
        let cancel = CancelToken::new();
        let hour = Duration::from_secs(3600);
        let mut looks = 0;
        let done = wait_until(hour, &cancel, || {
            looks += 1;
            if looks == 5 {
                Progress::Done
            } else {
                Progress::Pending
            }
        });
        assert_eq!((done, looks), (Ok(()), 5));

        let mut looks = 0;
        let cancelled = wait_until(hour, &cancel, || {
            looks += 1;
            if looks == 3 {
                cancel.cancel();
            }
            Progress::Pending
        });
        assert_eq!((cancelled, looks), (Err(Stop::Cancelled), 3));

        // A zero limit still looks once: work already done is not a timeout.
        let fresh = CancelToken::new();
        assert_eq!(
            wait_until(Duration::ZERO, &fresh, || Progress::Done),
            Ok(())
        );
        assert_eq!(
            wait_until(Duration::ZERO, &fresh, || Progress::Pending),
            Err(Stop::TimedOut)
        );
        // No deadline at all, for a limit past the clock's range.
        let mut looks = 0;
        let unbounded = wait_until(Duration::MAX, &fresh, || {
            looks += 1;
            if looks < 3 {
                Progress::Pending
            } else {
                Progress::Failed(BackendError::Failed("late".to_owned()))
            }
        });
        assert_eq!(
            unbounded,
            Err(Stop::Failed(BackendError::Failed("late".to_owned())))
        );
    }
}

//! NCCL's non-blocking communicators against a fake NCCL (`fixtures/fake_nccl.c`,
//! built here with `cc`), loaded through the crate's own loader: a hung init is aborted
//! at its deadline, a cancel aborts, an asynchronous error is reported in NCCL's words
//! and aborts, a healthy init and collective end without an abort, and an NCCL without
//! `ncclCommInitRankConfig` is driven blocking. Nothing is timed: outcomes and the
//! fake's counts are asserted, and each test runs under a generous anti-hang bound.

use std::ffi::{CString, c_char, c_int, c_longlong};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use gpuvet_backend::cuda::libs;
use gpuvet_backend::cuda::nccl::{Comms, Limits, Nccl, UniqueId, code, datatype};
use gpuvet_backend::{BackendError, CancelToken, with_causes};

/// Long enough for any of these tests on a loaded machine; only a hang reaches it.
const HANG: Duration = Duration::from_secs(120);
const HOUR: Duration = Duration::from_secs(3600);

/// The fake built with `ncclCommInitRankConfig` (NCCL 2.27) and without it (2.12).
struct Builds {
    dir: PathBuf,
    current: PathBuf,
    old: PathBuf,
}

static BUILDS: OnceLock<Builds> = OnceLock::new();

/// Compiles the fake once per test binary. A missing C compiler fails the tests: Rust
/// links with one, so wherever these tests build there is one to find.
fn builds() -> &'static Builds {
    BUILDS.get_or_init(|| {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        if let Err(err) = Command::new(&cc).arg("--version").output() {
            panic!(
                "these tests need a C compiler (`{cc}`, or `$CC`) to build the fake NCCL: {err}"
            );
        }
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_nccl.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-nccl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let build = |name: &str, defines: &[&str]| {
            let out = dir.join(name);
            let status = Command::new(&cc)
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&out)
                .args(defines)
                .arg(&source)
                .arg("-lpthread")
                .status()
                .unwrap();
            assert!(status.success(), "`{cc}` failed to build the fake NCCL");
            out
        };
        Builds {
            current: build("libfake_nccl.so", &[]),
            old: build("libfake_nccl_2_12.so", &["-DFAKE_NCCL_NO_CONFIG"]),
            dir,
        }
    })
}

/// One test's own copy of the fake (a copy is a separate library with separate state,
/// so tests running at once do not see each other's counts), and its controls.
struct Fake {
    nccl: &'static Nccl,
    set: SetFn,
    count: CountFn,
}

type SetFn = unsafe extern "C" fn(*const c_char, c_int);
type CountFn = unsafe extern "C" fn(*const c_char) -> c_longlong;

impl Fake {
    fn load(build: &Path, dir: &Path) -> Fake {
        static COPIES: AtomicUsize = AtomicUsize::new(0);
        let copy = dir.join(format!("copy-{}.so", COPIES.fetch_add(1, Ordering::SeqCst)));
        std::fs::copy(build, &copy).unwrap();
        let nccl: &'static Nccl = Box::leak(Box::new(Nccl::open(&copy).unwrap()));
        // The same path again yields the same library, whose controls are looked up here.
        let handle = libs::dlopen_global(&copy).unwrap();
        // SAFETY: the fixture defines both with these signatures.
        unsafe {
            Fake {
                nccl,
                set: std::mem::transmute::<*mut std::ffi::c_void, SetFn>(
                    handle.symbol("fake_nccl_set").unwrap(),
                ),
                count: std::mem::transmute::<*mut std::ffi::c_void, CountFn>(
                    handle.symbol("fake_nccl_count").unwrap(),
                ),
            }
        }
    }

    fn set(&self, key: &str, value: i32) {
        let key = CString::new(key).unwrap();
        // SAFETY: a NUL-terminated key; the fake aborts on an unknown one.
        unsafe { (self.set)(key.as_ptr(), value) }
    }

    fn count(&self, key: &str) -> i64 {
        let key = CString::new(key).unwrap();
        // SAFETY: as above.
        unsafe { (self.count)(key.as_ptr()) }
    }
}

/// A copy of the current fake.
fn current() -> Fake {
    let builds = builds();
    Fake::load(&builds.current, &builds.dir)
}

/// Runs `body` on its own thread and fails the test if it has not ended within [`HANG`].
fn bounded<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(HANG)
        .expect("the wait never ended: nothing aborted it")
}

fn init(
    fake: &Fake,
    ranks: usize,
    limits: Limits,
    cancel: &CancelToken,
) -> Result<Comms, BackendError> {
    let places: Vec<(UniqueId, usize)> = (0..ranks)
        .map(|rank| (UniqueId { internal: [0; 128] }, rank))
        .collect();
    Comms::init(fake.nccl, ranks, &places, |_| Ok(()), &limits, cancel)
}

/// Launches one all-reduce on every communicator, in one group.
fn all_reduce(comms: &mut Comms, limits: Limits, cancel: &CancelToken) -> Result<(), BackendError> {
    comms.launch("the all-reduce", &limits, cancel, |comms| {
        for i in 0..comms.len() {
            // SAFETY: the fake NCCL touches neither buffers nor streams.
            unsafe {
                comms.all_reduce(i, 0, 0, 1, datatype::FLOAT32, std::ptr::null_mut())?;
            }
        }
        Ok(())
    })
}

/// The failure, and its text as a report shows it: the error and its causes.
fn failure(result: Result<impl std::fmt::Debug, BackendError>) -> (BackendError, String) {
    match result {
        Err(BackendError::Cancelled) | Ok(_) => panic!("expected a failure, got {result:?}"),
        Err(error) => {
            let text = with_causes(&error);
            (error, text)
        }
    }
}

fn limits(init: Duration, step: Duration) -> Limits {
    Limits { init, step }
}

#[test]
fn a_healthy_init_and_collective_end_without_an_abort() {
    let fake = current();
    fake.set("init_polls", 3);
    fake.set("launch_polls", 2);
    let fake = bounded(move || {
        let cancel = CancelToken::new();
        let limits = limits(HOUR, HOUR);
        assert!(fake.nccl.nonblocking());
        assert_eq!(fake.nccl.mode(), "non-blocking");
        let mut comms = init(&fake, 4, limits, &cancel).unwrap();
        assert_eq!(comms.len(), 4);
        all_reduce(&mut comms, limits, &cancel).unwrap();
        all_reduce(&mut comms, limits, &cancel).unwrap();
        let mut looks = 0;
        comms
            .wait("the all-reduce", HOUR, &cancel, || {
                looks += 1;
                Ok(looks >= 3)
            })
            .unwrap();
        assert!(!comms.is_aborted());
        drop(comms);
        fake
    });
    // NCCL 2.14's config, asking for non-blocking, as `parseCommConfig` reads it.
    assert_eq!(fake.count("init_config_calls"), 4);
    assert_eq!(fake.count("init_rank_calls"), 0);
    assert_eq!(fake.count("config_magic"), 0xcafe_beef);
    assert_eq!(fake.count("config_version"), 21400);
    assert_eq!(fake.count("config_blocking"), 0);
    assert_eq!(fake.count("config_size"), 24);
    assert_eq!(fake.count("collectives"), 8);
    assert_eq!(fake.count("group_starts"), 3);
    assert_eq!(fake.count("group_ends"), 3);
    assert_eq!(fake.count("aborts"), 0);
    assert_eq!(fake.count("destroys"), 4);
}

#[test]
fn a_hung_init_is_aborted_at_its_deadline() {
    let fake = current();
    fake.set("init_polls", -1);
    let (fake, (error, message)) = bounded(move || {
        let result = init(
            &fake,
            3,
            limits(Duration::from_millis(50), HOUR),
            &CancelToken::new(),
        );
        (fake, failure(result))
    });
    assert!(
        matches!(error, BackendError::NcclTimedOut { .. }),
        "{error:?}"
    );
    assert_eq!(
        message,
        "creating NCCL's communicators did not finish within `50ms`; NCCL's communicators \
         were aborted"
    );
    assert!(fake.count("async_polls") >= 3, "it polled before giving up");
    assert_eq!(fake.count("aborts"), 3);
    assert_eq!(fake.count("destroys"), 0);
}

#[test]
fn a_cancel_aborts_a_hung_init() {
    let fake = current();
    fake.set("init_polls", -1);
    let fake: &'static Fake = Box::leak(Box::new(fake));
    let cancel = CancelToken::new();
    // The coordinator aborts the run while the init is being polled.
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            while fake.count("async_polls") < 10 && !cancel.is_cancelled() {
                std::thread::sleep(Duration::from_millis(1));
            }
            cancel.cancel();
        })
    };
    let result = bounded({
        let cancel = cancel.clone();
        move || init(fake, 2, limits(HOUR, HOUR), &cancel).map(|_| ())
    });
    // An init that returned without waiting leaves the canceller looking: stop it.
    cancel.cancel();
    canceller.join().unwrap();
    assert!(matches!(result, Err(BackendError::Cancelled)), "{result:?}");
    assert_eq!(fake.count("aborts"), 2);
    assert_eq!(fake.count("destroys"), 0);
}

#[test]
fn a_hung_launch_is_aborted_on_cancel_and_at_its_deadline() {
    let fake = current();
    fake.set("launch_polls", -1);
    let fake = bounded(move || {
        let cancel = CancelToken::new();
        let mut comms = init(&fake, 2, limits(HOUR, HOUR), &cancel).unwrap();
        let result = comms.launch("the all-gather", &limits(HOUR, HOUR), &cancel, |comms| {
            // SAFETY: the fake NCCL touches neither buffers nor streams.
            unsafe { comms.all_gather(0, 0, 0, 1, datatype::FLOAT32, std::ptr::null_mut())? };
            // Cancelled after NCCL took the work and before it launched.
            cancel.cancel();
            Ok(())
        });
        assert!(matches!(result, Err(BackendError::Cancelled)), "{result:?}");
        assert!(comms.is_aborted());
        drop(comms);
        fake
    });
    assert_eq!(fake.count("aborts"), 2);
    assert_eq!(fake.count("destroys"), 0);

    let fake = current();
    fake.set("launch_polls", -1);
    let (fake, (_, message)) = bounded(move || {
        let cancel = CancelToken::new();
        let step = Duration::from_millis(50);
        let mut comms = init(&fake, 2, limits(HOUR, step), &cancel).unwrap();
        let result = all_reduce(&mut comms, limits(HOUR, step), &cancel);
        (fake, failure(result))
    });
    assert_eq!(
        message,
        "launching the all-reduce did not finish within `50ms`; NCCL's communicators were \
         aborted"
    );
    assert_eq!(fake.count("aborts"), 2);
}

#[test]
fn an_asynchronous_error_mid_collective_is_reported_in_nccl_s_words_and_aborts() {
    let fake = current();
    fake.set("init_polls", 1);
    fake.set("launch_polls", 1);
    fake.set("run_error", code::REMOTE_ERROR);
    fake.set("run_error_after", 3);
    let (fake, (error, message)) = bounded(move || {
        let cancel = CancelToken::new();
        let mut comms = init(&fake, 2, limits(HOUR, HOUR), &cancel).unwrap();
        all_reduce(&mut comms, limits(HOUR, HOUR), &cancel).unwrap();
        // The streams never finish: only NCCL's error can end this wait.
        let result = comms.wait("the all-reduce", HOUR, &cancel, || Ok(false));
        assert!(comms.is_aborted());
        drop(comms);
        (fake, failure(result))
    });
    assert_eq!(
        message,
        "the all-reduce failed: NCCL reports remote process exited or there was a network \
         error (code `6`; NCCL's last error: `fake: peer 10.0.0.2<43211> closed the \
         connection`); NCCL's communicators were aborted"
    );
    // NCCL's words are the reason the wait ended, kept whole inside the message.
    let BackendError::NcclAborted { what, cause } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(what, "the all-reduce");
    let BackendError::NcclReports(status) = cause.as_ref() else {
        panic!("{cause:?}");
    };
    assert_eq!(status.code, code::REMOTE_ERROR);
    assert_eq!(fake.count("aborts"), 2);
    assert_eq!(
        fake.count("destroys"),
        0,
        "an aborted communicator is not destroyed"
    );
}

#[test]
fn a_failed_init_is_reported_and_aborted() {
    let fake = current();
    fake.set("init_polls", 2);
    fake.set("init_error", 2);
    let (fake, (_, message)) = bounded(move || {
        let result = init(&fake, 3, limits(HOUR, HOUR), &CancelToken::new());
        (fake, failure(result))
    });
    assert!(
        message.starts_with(
            "creating NCCL's communicators failed: NCCL reports unhandled system error"
        ),
        "{message}"
    );
    assert!(message.contains("(code `2`"), "{message}");
    assert_eq!(fake.count("aborts"), 3);
}

#[test]
fn an_nccl_without_the_config_call_is_driven_blocking() {
    let builds = builds();
    let fake = Fake::load(&builds.old, &builds.dir);
    assert_eq!(fake.nccl.version_string(), "2.12.12");
    assert!(!fake.nccl.nonblocking());
    let mode = fake.nccl.mode();
    assert!(
        mode.starts_with("blocking (NCCL 2.12.12 has no `ncclCommInitRankConfig`"),
        "{mode}"
    );
    let fake = bounded(move || {
        let cancel = CancelToken::new();
        let mut comms = init(&fake, 2, limits(HOUR, HOUR), &cancel).unwrap();
        all_reduce(&mut comms, limits(HOUR, HOUR), &cancel).unwrap();
        comms
            .wait("the all-reduce", HOUR, &cancel, || Ok(true))
            .unwrap();
        drop(comms);
        fake
    });
    assert_eq!(fake.count("init_rank_calls"), 2);
    assert_eq!(fake.count("aborts"), 0);
    assert_eq!(fake.count("destroys"), 2);

    // A blocking init that fails says so at once, and aborts what it made.
    let fake = Fake::load(&builds.old, &builds.dir);
    fake.set("init_error", 2);
    let (error, message) = failure(init(&fake, 2, limits(HOUR, HOUR), &CancelToken::new()));
    // The failed call is the cause, with NCCL's words under it.
    let BackendError::NcclStart { what, source } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(what, "creating NCCL's communicators");
    assert!(
        matches!(
            **source,
            BackendError::Nccl {
                call: "ncclCommInitRank",
                ..
            }
        ),
        "{source:?}"
    );
    assert!(
        message.starts_with(
            "creating NCCL's communicators failed: `ncclCommInitRank` failed: unhandled system \
             error"
        ),
        "{message}"
    );
    assert_eq!(
        fake.count("init_rank_calls"),
        1,
        "it stopped at the first failure"
    );
}

//! Exit codes of the `gpuvet` binary. They are API: scripts and orchestrators act on
//! them, so a code's meaning never changes once released.
//!
//! Codes 0–2 follow the usual CLI convention. The rest come from `sysexits.h` where a
//! fitting one exists, so they stay clear of the small numbers apps use. Once
//! `gpuvet run` has started the app, gpuvet exits with the app's own code (or 128 plus
//! the signal number when the app was killed by a signal), as a shell would.

/// Every check that ran passed (skipped checks do not count against it).
pub const SUCCESS: i32 = 0;
/// A check failed or timed out. From `gpuvet run` with `fail_action: fail`: the app was
/// not started.
pub const CHECK_FAILED: i32 = 1;
/// Usage or configuration error; nothing was started.
pub const USAGE: i32 = 2;
/// No check failed, but at least one requested check could not run here yet
/// (`not_implemented`). Only `gpuvet check` returns it; `gpuvet run` starts the app.
pub const INCOMPLETE: i32 = 3;
/// The requested backend is not available on this machine (e.g. `--backend cuda`
/// without a GPU). `EX_UNAVAILABLE`.
pub const BACKEND_UNAVAILABLE: i32 = 69;
/// A bug in gpuvet (or a machine out of threads or processes for it). `EX_SOFTWARE`.
pub const INTERNAL: i32 = 70;
/// A file or directory gpuvet was asked to write or read, or needs for itself (a
/// bundle, an HTML or JUnit report, stdout, a drill's files, flight-recorder dumps,
/// its own executable), could not be created, written or read: a missing or read-only
/// directory, a full disk, no permission. The environment's problem, not a bug. A
/// file to read that is not there at all is the user's mistake ([`USAGE`]), and so is
/// any trouble with the config file; the store has [`STORE_ERROR`]. `EX_CANTCREAT`.
pub const IO_ERROR: i32 = 73;
/// The result store could not be opened or written. `EX_IOERR`.
pub const STORE_ERROR: i32 = 74;
/// `gpuvet run` with `fail_action: rebuild`: checks failed, the rebuild hook ran (in a
/// Kubernetes pod: the culprit nodes were quarantined and the pod deleted), and the
/// instance should be rebuilt elsewhere. `EX_TEMPFAIL`: retrying elsewhere helps.
pub const REBUILD_REQUESTED: i32 = 75;
/// `gpuvet push`: entries are still waiting in the outbox (the server could not be
/// reached, or refused them). `EX_PROTOCOL`.
pub const PUSH_PENDING: i32 = 76;
/// `gpuvet run` with runtime `fail_action: kill`: a fatal runtime finding (a GPU that
/// needs a reset, a reboot or support) made gpuvet stop the app. Just past
/// `sysexits.h`'s range (64–78), so it means nothing else.
pub const RUNTIME_FAULT: i32 = 79;
/// `gpuvet untaint`: the Kubernetes API could not be reached, or refused the change.
/// Past `sysexits.h`'s range, like 79.
pub const KUBE_API_ERROR: i32 = 80;
/// `gpuvet untaint`, `gpuvet undrain`: the node stays quarantined, because no passing
/// run on it was recorded since its quarantine (two in a row for a repeat offender);
/// `--force --reason` lifts it anyway.
pub const NOT_PROVEN: i32 = 81;
/// `gpuvet undrain`: Slurm's `sinfo` or `scontrol` could not be run, did not finish, or
/// refused the change. Past `sysexits.h`'s range, like 80.
pub const SLURM_ERROR: i32 = 82;
/// `gpuvet run`: the app's command exists but could not be executed (as in a shell).
pub const APP_NOT_EXECUTABLE: i32 = 126;
/// `gpuvet run`: the app's command was not found (as in a shell).
pub const APP_NOT_FOUND: i32 = 127;

/// Every code with its name and meaning: `gpuvet --help` prints this table, and a test
/// holds the README's table to the same codes.
pub const ALL: [(i32, &str, &str); 16] = [
    (SUCCESS, "SUCCESS", "every check that ran passed"),
    (
        CHECK_FAILED,
        "CHECK_FAILED",
        "a check failed or timed out; `run` with `fail` did not start the app",
    ),
    (USAGE, "USAGE", "usage or config error; nothing was started"),
    (
        INCOMPLETE,
        "INCOMPLETE",
        "no check failed, but a requested check is not implemented yet",
    ),
    (
        BACKEND_UNAVAILABLE,
        "BACKEND_UNAVAILABLE",
        "the requested backend is not available here",
    ),
    (INTERNAL, "INTERNAL", "a bug in gpuvet"),
    (
        IO_ERROR,
        "IO_ERROR",
        "a file or directory could not be created, written or read",
    ),
    (
        STORE_ERROR,
        "STORE_ERROR",
        "the result store could not be opened or written",
    ),
    (
        REBUILD_REQUESTED,
        "REBUILD_REQUESTED",
        "`run` with `rebuild`: checks failed and the rebuild hook ran",
    ),
    (
        PUSH_PENDING,
        "PUSH_PENDING",
        "`push`: entries still wait in the outbox",
    ),
    (
        RUNTIME_FAULT,
        "RUNTIME_FAULT",
        "`run` with runtime `kill`: a fatal runtime finding stopped the app",
    ),
    (
        KUBE_API_ERROR,
        "KUBE_API_ERROR",
        "`untaint`: the Kubernetes API could not be reached or refused",
    ),
    (
        NOT_PROVEN,
        "NOT_PROVEN",
        "`untaint`, `undrain`: no passing run on the node since its quarantine",
    ),
    (
        SLURM_ERROR,
        "SLURM_ERROR",
        "`undrain`: Slurm's commands could not be run or refused",
    ),
    (
        APP_NOT_EXECUTABLE,
        "APP_NOT_EXECUTABLE",
        "`run`: the app's command could not be executed",
    ),
    (
        APP_NOT_FOUND,
        "APP_NOT_FOUND",
        "`run`: the app's command was not found",
    ),
];

#[cfg(test)]
mod tests {
    #[test]
    fn codes_are_distinct() {
        let mut codes: Vec<i32> = super::ALL.iter().map(|(code, _, _)| *code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), super::ALL.len());
    }
}

//! `gpuvet serve ARGS`: runs the fleet server, `gpuvet-server`, the way `git` runs its
//! subcommands. The server is its own program so that the binary every GPU node runs
//! links neither tokio, axum nor a PostgreSQL client; this keeps `gpuvet serve`
//! working wherever both are installed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::ServeArgs;
use crate::failure::Failure;

/// The fleet server's program name.
pub const SERVER_PROGRAM: &str = "gpuvet-server";

/// Replaces this process with the server (so signals and the exit code are its own);
/// returns only when it could not be started.
pub fn serve(args: ServeArgs) -> Result<i32, Failure> {
    let this = std::env::current_exe().ok();
    let path = std::env::var_os("PATH");
    let Some(server) = find_server(this.as_deref(), path.as_deref()) else {
        return Err(not_installed(this.as_deref()));
    };
    let error = Command::new(&server)
        .arg0("gpuvet serve")
        .args(&args.args)
        .exec();
    Err(Failure::usage_from(
        format!("cannot run the fleet server `{}`", server.display()),
        error,
    )
    .with_hint(format!(
        "check that `{}` is an executable `{SERVER_PROGRAM}` of this gpuvet's version",
        server.display()
    )))
}

/// `gpuvet-server` beside this program (as a release archive, `cargo install` and the
/// container image put them), else the first on `PATH`.
fn find_server(this: Option<&Path>, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let beside = this
        .and_then(Path::parent)
        .map(|dir| dir.join(SERVER_PROGRAM));
    let on_path = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(SERVER_PROGRAM));
    beside
        .into_iter()
        .chain(on_path)
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

fn not_installed(this: Option<&Path>) -> Failure {
    let beside = this
        .and_then(Path::parent)
        .map_or_else(String::new, |dir| format!(" beside `{}` or", dir.display()));
    Failure::usage(format!(
        "`gpuvet serve` runs the fleet server `{SERVER_PROGRAM}`, which is not installed:{beside} on `PATH`"
    ))
    .with_hint(format!(
        "install it beside gpuvet (`cargo install --path crates/{SERVER_PROGRAM}`, or `cargo build --release -p {SERVER_PROGRAM}` puts it in `target/release/`), or run the container image, which has both"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn the_server_beside_gpuvet_comes_before_the_one_on_path() {
        let beside = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let this = beside.path().join("gpuvet");
        let path = std::env::join_paths([on_path.path()]).unwrap();
        assert_eq!(find_server(Some(&this), Some(&path)), None);
        let found_on_path = executable(on_path.path(), SERVER_PROGRAM);
        assert_eq!(find_server(Some(&this), Some(&path)), Some(found_on_path));
        let found_beside = executable(beside.path(), SERVER_PROGRAM);
        assert_eq!(find_server(Some(&this), Some(&path)), Some(found_beside));
    }

    #[test]
    fn a_file_that_is_not_executable_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SERVER_PROGRAM), "not a program").unwrap();
        let path = std::env::join_paths([dir.path()]).unwrap();
        assert_eq!(find_server(None, Some(&path)), None);
    }
}

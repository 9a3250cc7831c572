//! Child processes that never outlive the gpuvet that started them.
//!
//! gpuvet runs as root next to the GPUs; a worker, a Python rank or a `--local-nodes`
//! agent left behind by a killed parent holds devices and ports until something else
//! notices. The kernel's parent-death signal ends such a child at once, and a pipe
//! whose other end only the parent holds ([`when_closed`]) covers what the signal
//! cannot: it follows the *thread* that spawned the child, not the process.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the kernel SIGKILL the child started by `command` when the spawning thread
/// ends. Spawn from a thread that lives as long as the child (the main thread, or the
/// one that waits on it).
pub fn die_with_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the signal was armed.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Reads `pipe` on a thread of its own until its writer closes it (the parent ended,
/// however it ended), then calls `on_close`. Whatever arrives on the pipe is ignored.
pub fn when_closed<R, F>(mut pipe: R, on_close: F) -> std::io::Result<()>
where
    R: Read + Send + 'static,
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name("parent-watch".to_owned())
        .spawn(move || {
            let mut buffer = [0u8; 64];
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            on_close();
        })
        .map(drop)
}

/// The pid of a child of `parent` whose command line holds `flag` followed by `value`
/// (a `--local-nodes` agent by its `--node-rank`), from `/proc`; `None` when there is
/// none (yet).
pub fn find_child(parent: u32, flag: &str, value: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent pid is the 2nd field after the command's closing parenthesis.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&str> = cmdline.split('\0').collect();
        let has_arg = args.windows(2).any(|w| w[0] == flag && w[1] == value);
        (ppid == parent && has_arg).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn closing_the_pipe_calls_back_and_data_does_not() {
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (sender, closed) = mpsc::channel();
        when_closed(reader, move || sender.send(()).unwrap()).unwrap();
        std::io::Write::write_all(&mut writer, b"still here").unwrap();
        assert!(closed.recv_timeout(Duration::from_millis(200)).is_err());
        drop(writer);
        closed
            .recv_timeout(Duration::from_secs(30))
            .expect("the callback runs once the writer is gone");
    }

    #[test]
    fn a_child_dies_with_the_thread_that_spawned_it() {
        let (sender, spawned) = mpsc::channel();
        std::thread::spawn(move || {
            let mut command = Command::new("sleep");
            command.arg("600");
            die_with_parent(&mut command);
            sender.send(command.spawn().unwrap()).unwrap();
            // The thread ends here without waiting on its child.
        })
        .join()
        .unwrap();
        let mut child = spawned.recv().unwrap();
        let gone = (0..3000).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            matches!(child.try_wait(), Ok(Some(_)))
        });
        if !gone {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            gone,
            "the child `sleep` outlived the thread that spawned it"
        );
    }
}

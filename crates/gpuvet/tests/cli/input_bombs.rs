//! Inputs built to exhaust memory, fed to the real binary under a memory limit: each is
//! refused (or, for the runtime watch's sources, skipped and reported) while the whole
//! process stays under 256 MB resident.
//!
//! The child runs with `RLIMIT_AS` at 1 GiB as a safety net (an unbounded decoder
//! aborts instead of taking the machine), and its peak RSS comes from `wait4`.
//! `gpuvet fr` and the config are refused with exit 2; `gpuvet watch` keeps watching
//! (a kernel log with a gigantic line, or a RAS server that talks too much, must not
//! end the watch of the other sources), reports the source error, and exits 0.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;

use crate::common::Scratch;

/// The resident-memory bound the issue sets for the whole process.
const MAX_RSS_BYTES: u64 = 256 << 20;

/// The address-space limit the child runs under: far above the bound, far below what
/// an unbounded decoder would take.
const ADDRESS_SPACE_LIMIT: u64 = 1 << 30;

#[derive(Debug)]
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    peak_rss_bytes: u64,
}

/// Runs `command` to the end under [`ADDRESS_SPACE_LIMIT`]; its exit code, output and
/// peak RSS.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std does not see
fn run_limited(mut command: Command) -> Measured {
    // glibc reserves 64 MiB of address space per thread arena; two arenas keep the
    // limit about the heap rather than about how many threads ran.
    command
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe setrlimit runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_LIMIT,
                rlim_max: ADDRESS_SPACE_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawning gpuvet");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let err = thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `pid` is our child, not yet reaped; the pointers outlive the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Measured {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        // Linux reports kilobytes.
        peak_rss_bytes: usage.ru_maxrss as u64 * 1024,
    }
}

/// Asserts the bound and says the measurement (visible with `--nocapture`).
#[track_caller]
#[allow(clippy::print_stderr)] // the measured peak is the point of the test
fn assert_small(what: &str, measured: &Measured) {
    eprintln!(
        "{what}: peak RSS {:.1} MB, exit {:?}",
        measured.peak_rss_bytes as f64 / 1e6,
        measured.code
    );
    assert!(
        measured.peak_rss_bytes < MAX_RSS_BYTES,
        "{what}: peak RSS {} bytes\n{measured:?}",
        measured.peak_rss_bytes
    );
}

#[track_caller]
fn assert_refused(what: &str, measured: &Measured, needle: &str) {
    assert_small(what, measured);
    assert_eq!(measured.code, Some(2), "{what}: {measured:?}");
    assert!(
        measured.stderr.contains(needle),
        "{what}: {}",
        measured.stderr
    );
    assert!(
        measured.stderr.contains("hint:"),
        "{what}: {}",
        measured.stderr
    );
}

/// A pickle of `levels` lists, each holding the previous one twice through the memo:
/// 8 bytes a level, 2^(levels+1) - 1 values once expanded.
fn memo_bomb(levels: u8) -> Vec<u8> {
    let mut bytes = b"\x80\x04K\x00\x94".to_vec(); // PROTO 4, int 0, MEMOIZE
    for level in 1..=levels {
        let prev = level - 1;
        // EMPTY_LIST, MARK, BINGET prev, BINGET prev, APPENDS, MEMOIZE
        bytes.extend_from_slice(&[b']', b'(', b'h', prev, b'h', prev, b'e', 0x94]);
    }
    bytes.push(b'.');
    bytes
}

/// Like [`memo_bomb`] with dictionaries: `{'a': prev, 'b': prev}` at each level.
fn dict_memo_bomb(levels: u8) -> Vec<u8> {
    let mut bytes = b"\x80\x04K\x00\x94".to_vec();
    for level in 1..=levels {
        let prev = level - 1;
        // EMPTY_DICT, MARK, 'a', BINGET prev, 'b', BINGET prev, SETITEMS, MEMOIZE
        bytes.extend_from_slice(&[b'}', b'(', 0x8c, 1, b'a', b'h', prev]);
        bytes.extend_from_slice(&[0x8c, 1, b'b', b'h', prev, b'u', 0x94]);
    }
    bytes.push(b'.');
    bytes
}

fn fr(scratch: &Scratch, dir: &Path) -> Measured {
    let mut command = scratch.gpuvet();
    command.arg("fr").arg(dir);
    run_limited(command)
}

#[test]
fn a_memo_bomb_pickle_is_refused() {
    let scratch = Scratch::temp();
    let dir = scratch.path("dumps");
    std::fs::create_dir(&dir).unwrap();
    let bomb = memo_bomb(40);
    assert!(bomb.len() < 400, "{} bytes", bomb.len());
    std::fs::write(dir.join("nccl_trace_rank_0"), &bomb).unwrap();
    let measured = fr(&scratch, &dir);
    assert_refused(
        "memo-bomb pickle",
        &measured,
        "nccl_trace_rank_0` is too large: it decodes to more than `2000000` values",
    );
}

#[test]
fn a_dictionary_memo_bomb_pickle_is_refused() {
    let scratch = Scratch::temp();
    let dir = scratch.path("dumps");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("nccl_trace_rank_0"), dict_memo_bomb(40)).unwrap();
    let measured = fr(&scratch, &dir);
    assert_refused(
        "dictionary memo-bomb pickle",
        &measured,
        "is too large: it decodes to more than `2000000` values",
    );
}

#[test]
fn a_flight_recorder_json_just_under_the_bounds_fits_in_memory() {
    // The costliest shape per value: one-key objects (a B-tree node each), up to the
    // value bound. Not a dump, so refused after decoding; what counts is the peak.
    let scratch = Scratch::temp();
    let dir = scratch.path("objects");
    std::fs::create_dir(&dir).unwrap();
    // The array, then 10 values an object: itself (8), its key and its value.
    let objects = format!("[{}]", vec![r#"{"a":0}"#; 199_999].join(","));
    std::fs::write(dir.join("nccl_trace_rank_0.json"), objects).unwrap();
    let measured = fr(&scratch, &dir);
    assert_refused(
        "flight-recorder json, just under",
        &measured,
        "is not a flight-recorder dump",
    );
}

#[test]
fn a_flight_recorder_json_over_the_bounds_is_refused() {
    let scratch = Scratch::temp();
    // Values: 4 MB of `[0,0,...]`, which serde_json would build into 64 MB and more.
    let dir = scratch.path("values");
    std::fs::create_dir(&dir).unwrap();
    let zeros = format!("[{}]", vec!["0"; 2_000_000].join(","));
    std::fs::write(dir.join("nccl_trace_rank_0.json"), zeros).unwrap();
    let measured = fr(&scratch, &dir);
    assert_refused(
        "flight-recorder json, values",
        &measured,
        "is too large: it decodes to more than `2000000` values",
    );

    // Bytes: a 4 GiB file (sparse: nothing on disk) that starts like JSON.
    let dir = scratch.path("bytes");
    std::fs::create_dir(&dir).unwrap();
    let mut file = File::create(dir.join("nccl_trace_rank_0.json")).unwrap();
    file.write_all(b"{\"entries\": [").unwrap();
    file.set_len(4 << 30).unwrap();
    let measured = fr(&scratch, &dir);
    assert_refused(
        "flight-recorder json, bytes",
        &measured,
        "is too large: the file has more than `33554432` bytes",
    );
}

#[test]
fn a_huge_config_is_refused_unread() {
    let scratch = Scratch::temp();
    let path = scratch.path("huge.json");
    let mut file = File::create(&path).unwrap();
    file.write_all(br#"{"aimaster": {}, "padding": ""#).unwrap();
    file.set_len(4 << 30).unwrap(); // sparse
    let mut command = scratch.gpuvet();
    command.arg("check").arg("--config").arg(&path);
    let measured = run_limited(command);
    assert_refused(
        "config",
        &measured,
        "huge.json`: the config has more than `1048576` bytes",
    );
    assert!(!scratch.store().exists(), "nothing was started");
}

const XID_79: &str =
    "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n";

fn watch(scratch: &Scratch, watch_section: &str) -> Measured {
    let config = scratch.config(
        "c4d.json",
        &format!(
            r#"{{"aimaster": {{"runtime_check": {{"fail_action": "retain", "micro_benchmarks": "c4d"}}}},
                 "gpuvet": {{"backend": "sim", "watch": {watch_section}}}}}"#
        ),
    );
    let mut command = scratch.gpuvet();
    command
        .args(["watch", "--json", "--duration", "3", "--config"])
        .arg(config);
    run_limited(command)
}

#[test]
fn a_kernel_log_of_gigantic_lines_is_skipped_within_the_bound() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kern.log");
    // Sparse, so about 20 MB on disk: a 300 MiB line without a newline, an XID line,
    // then 300 MiB of lines just under the 64 KiB line bound. Unbounded, the first
    // poll would hold 300 MiB of lines.
    let mut file = File::create(&kmsg).unwrap();
    let giant: u64 = 300 << 20;
    file.seek(SeekFrom::Start(giant)).unwrap();
    file.write_all(b"\n").unwrap();
    file.write_all(XID_79.as_bytes()).unwrap();
    let mut at = giant + 1 + XID_79.len() as u64;
    let end = at + (300 << 20);
    while at < end {
        at += 60_000;
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(b"\n").unwrap();
        at += 1;
    }
    drop(file);
    let measured = watch(
        &scratch,
        &format!(
            r#"{{"kmsg": "{}", "nvml": false, "nccl_ras": "off", "interval_ms": 200}}"#,
            kmsg.display()
        ),
    );
    assert_small("kernel log", &measured);
    assert_eq!(measured.code, Some(0), "{measured:?}");
    assert!(
        measured.stdout.contains("0000:3b:00"),
        "the XID after the gigantic line is read: {measured:?}"
    );
}

/// A fake NCCL RAS server: handshakes, then answers every `STATUS` with `answer`.
fn ras_server(answer: fn(&mut TcpStream)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut lines = BufReader::new(stream).lines();
                while let Some(Ok(line)) = lines.next() {
                    let reply: &[u8] = match line.to_ascii_uppercase().as_str() {
                        l if l.starts_with("CLIENT PROTOCOL") => b"SERVER PROTOCOL 2\n",
                        "STATUS" | "VERBOSE STATUS" => {
                            answer(&mut writer);
                            return;
                        }
                        _ => b"OK\n",
                    };
                    if writer.write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn watch_ras(scratch: &Scratch, addr: &str) -> Measured {
    watch(
        scratch,
        &format!(r#"{{"nvml": false, "nccl_ras": "{addr}", "interval_ms": 100}}"#),
    )
}

#[test]
fn a_ras_server_that_never_stops_talking_is_cut_off() {
    let addr = ras_server(|stream| {
        let chunk = "[0,".repeat(1 << 14);
        while stream.write_all(chunk.as_bytes()).is_ok() {}
    });
    let scratch = Scratch::temp();
    let measured = watch_ras(&scratch, &addr);
    assert_small("ras, endless bytes", &measured);
    assert_eq!(measured.code, Some(0), "{measured:?}");
    assert!(
        measured.stdout.contains("sent more than 16777216 bytes"),
        "{measured:?}"
    );
}

#[test]
fn a_ras_status_of_too_many_values_is_refused_unparsed() {
    let addr = ras_server(|stream| {
        // 3 MB: well under the byte bound, 1,000,000 empty communicators (8 values
        // each, as objects count).
        let document = format!(
            r#"{{"communicators":[{}]}}"#,
            vec!["{}"; 1_000_000].join(",")
        );
        let _ = stream.write_all(document.as_bytes());
    });
    let scratch = Scratch::temp();
    let measured = watch_ras(&scratch, &addr);
    assert_small("ras, values", &measured);
    assert_eq!(measured.code, Some(0), "{measured:?}");
    assert!(
        measured
            .stdout
            .contains("holds more than `1000000` json values"),
        "{measured:?}"
    );
}

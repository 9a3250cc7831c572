//! The kernel log as a health source: `NVRM: Xid` lines from `/dev/kmsg` or a file.
//!
//! The kernel log sees XIDs even when NVML hangs, which is exactly when they matter.
//! Three line shapes are accepted, anything else is skipped silently:
//! - `/dev/kmsg` records: `6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...`
//! - `dmesg` / `dmesg -T`: `[ 1234.567890] NVRM: Xid ...`, `[Fri Aug 30 11:43:09 2024] NVRM: Xid ...`
//! - syslog / journal: `Nov 30 12:00:00 host kernel: [ 123.4] NVRM: Xid ...`
//!
//! The driver writes `pid=1234, name=python3, ` (or `pid='<unknown>', name=<unknown>, `)
//! before its text on current drivers and nothing on older ones; both parse.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread;

use crate::finding::{GpuId, XidObservation, normalize_pci_bus_id};
use crate::health::{HealthError, HealthReading, HealthSource};

/// Where the kernel puts the boot id, the third part of the (GPU, XID, boot) key.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// The kernel's log device.
pub const DEV_KMSG: &str = "/dev/kmsg";

/// Lines longer than this are not driver XID lines (the kernel's own records are at
/// most 8 KiB): the parser skips them, and a file's reader throws them away unbuffered.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The most bytes of lines one poll returns: a flood of ~200-byte XID lines is 20,000
/// lines a poll, and a log of overlong lines cannot pile up gigabytes in one poll.
pub const MAX_BYTES_PER_POLL: usize = 4 << 20;

/// Records `/dev/kmsg`'s reader thread may queue between polls (each at most its 16 KiB
/// read buffer); when full the thread waits and the kernel's ring buffer holds the rest.
const MAX_QUEUED_RECORDS: usize = 4096;

/// One parsed `NVRM: Xid` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgXid {
    /// Normalized `dddd:bb:dd`.
    pub pci_bus_id: String,
    pub xid: u32,
    pub pid: Option<u32>,
    /// The process name the driver printed, when it knew it.
    pub process: Option<String>,
    /// The driver's text after the XID number, pid and name.
    pub text: String,
    /// The kernel timestamp (µs since boot) from a `/dev/kmsg` record or a `[ s.us]`
    /// prefix.
    pub kernel_time_us: Option<u64>,
}

/// Parses one kernel-log line; `None` for anything that is not an XID line, and for
/// any line over [`MAX_LINE_BYTES`].
pub fn parse_xid_line(line: &str) -> Option<KmsgXid> {
    if line.len() > MAX_LINE_BYTES {
        return None;
    }
    let line = line.trim_end_matches(['\n', '\r']);
    let (kernel_time_us, body) = split_prefix(line);
    let at = body.find("NVRM: Xid")?;
    let rest = body[at + "NVRM: Xid".len()..].trim_start();
    // "(PCI:0000:3b:00): 79, ..."
    let rest = rest.strip_prefix('(')?;
    let close = rest.find(')')?;
    let pci_bus_id = normalize_pci_bus_id(&rest[..close])?;
    let rest = rest[close + 1..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let xid: u32 = rest[..digits].parse().ok()?;
    let mut rest = rest[digits..].trim_start();
    match rest.chars().next() {
        None => {}
        Some(',') => rest = rest[1..].trim_start(),
        Some(_) => return None,
    }
    let mut pid = None;
    let mut process = None;
    if let Some(after) = rest.strip_prefix("pid=") {
        let (value, tail) = split_field(after);
        pid = value.trim_matches('\'').parse().ok();
        rest = tail;
        if let Some(after) = rest.strip_prefix("name=") {
            let (value, tail) = split_field(after);
            let value = value.trim_matches('\'');
            if !value.is_empty() && value != "<unknown>" {
                process = Some(value.to_owned());
            }
            rest = tail;
        }
    }
    Some(KmsgXid {
        pci_bus_id,
        xid,
        pid,
        process,
        text: rest.trim().to_owned(),
        kernel_time_us,
    })
}

/// `value, tail` from `value, tail`.
fn split_field(s: &str) -> (&str, &str) {
    match s.split_once(',') {
        Some((v, t)) => (v.trim(), t.trim_start()),
        None => (s.trim(), ""),
    }
}

/// Strips a `/dev/kmsg` header (`prio,seq,usec,flags;`) or a `[ s.us]` prefix and
/// returns the kernel time it carried.
fn split_prefix(line: &str) -> (Option<u64>, &str) {
    if let Some((head, body)) = line.split_once(';') {
        let fields: Vec<&str> = head.split(',').collect();
        if fields.len() >= 4
            && fields[..3]
                .iter()
                .all(|f| f.bytes().all(|b| b.is_ascii_digit()))
        {
            return (fields[2].parse().ok(), body);
        }
    }
    if let Some(open) = line.find('[')
        && let Some(len) = line[open..].find(']')
    {
        let inside = line[open + 1..open + len].trim();
        if let Some((s, frac)) = inside.split_once('.')
            && let (Ok(s), true) = (s.parse::<u64>(), frac.bytes().all(|b| b.is_ascii_digit()))
        {
            let frac6: String = frac.chars().chain("000000".chars()).take(6).collect();
            let us = frac6.parse::<u64>().unwrap_or(0);
            // Seconds past what µs fit in a u64 are no kernel's: no time.
            let time = s.checked_mul(1_000_000).and_then(|t| t.checked_add(us));
            return (time, &line[open + len + 1..]);
        }
    }
    (None, line)
}

/// Reads the boot id, or `None` where the kernel does not expose it.
pub fn read_boot_id() -> Option<String> {
    read_boot_id_from(Path::new(BOOT_ID_PATH))
}

/// Reads a boot id from `path` (for tests and other roots).
pub fn read_boot_id_from(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// How a [`KmsgSource`] starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgOptions {
    /// Read what the log already holds (default): XIDs of this boot from before the
    /// watcher started are still this boot's, and dedup keeps them to one finding.
    pub from_start: bool,
    /// The boot id to key observations with; `None`: read it from the kernel.
    pub boot_id: Option<String>,
    /// Unix ms of boot, to place kernel timestamps on the wall clock; `None`: lines
    /// get the time of the poll that read them, except on `/dev/kmsg` where the boot
    /// time is derived from `/proc/uptime`.
    pub boot_time_ms: Option<u64>,
    /// At most this many lines per poll (a flood is read over several polls).
    pub max_lines_per_poll: usize,
}

impl Default for KmsgOptions {
    fn default() -> Self {
        KmsgOptions {
            from_start: true,
            boot_id: None,
            boot_time_ms: None,
            max_lines_per_poll: 100_000,
        }
    }
}

enum Input {
    /// A regular file: read directly, it never blocks. Keeps a partial last line;
    /// `skipping` while the rest of an overlong line is thrown away.
    File {
        reader: BufReader<File>,
        partial: Vec<u8>,
        skipping: bool,
    },
    /// A character device (`/dev/kmsg`): a thread does the blocking reads.
    Device { lines: Receiver<io::Result<String>> },
}

/// XID sightings from the kernel log. Lines that do not parse are ignored.
pub struct KmsgSource {
    name: String,
    path: PathBuf,
    input: Input,
    boot_id: String,
    boot_time_ms: Option<u64>,
    max_lines: usize,
    /// Lines skipped because they were not XID lines (or not text).
    ignored: u64,
}

impl std::fmt::Debug for KmsgSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsgSource")
            .field("path", &self.path)
            .field("boot_id", &self.boot_id)
            .field("ignored", &self.ignored)
            .finish_non_exhaustive()
    }
}

impl KmsgSource {
    /// Opens `/dev/kmsg` (needs root or `CAP_SYSLOG` where `dmesg_restrict` is set).
    pub fn open_dev_kmsg(options: KmsgOptions) -> Result<Self, HealthError> {
        Self::open(Path::new(DEV_KMSG), options)
    }

    /// Opens a kernel-log file (a saved `dmesg`, a syslog) or a character device such
    /// as `/dev/kmsg`.
    pub fn open(path: &Path, options: KmsgOptions) -> Result<Self, HealthError> {
        let err = |source| HealthError::Kmsg {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(err)?;
        let is_device = is_char_device(&file);
        let mut boot_time_ms = options.boot_time_ms;
        let input = if is_device {
            if !options.from_start {
                // On /dev/kmsg, SEEK_END skips to the next new record.
                file.seek(SeekFrom::End(0)).map_err(err)?;
            }
            if boot_time_ms.is_none() {
                boot_time_ms = boot_time_from_uptime();
            }
            Input::Device {
                lines: spawn_device_reader(file, path).map_err(err)?,
            }
        } else {
            if !options.from_start {
                file.seek(SeekFrom::End(0)).map_err(err)?;
            }
            Input::File {
                reader: BufReader::new(file),
                partial: Vec::new(),
                skipping: false,
            }
        };
        Ok(KmsgSource {
            name: format!("kmsg:{}", path.display()),
            path: path.to_owned(),
            input,
            boot_id: options.boot_id.or_else(read_boot_id).unwrap_or_default(),
            boot_time_ms,
            max_lines: options.max_lines_per_poll.max(1),
            ignored: 0,
        })
    }

    /// The boot id observations are keyed with (empty when unknown).
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// Lines read that were not XID lines.
    pub fn ignored_lines(&self) -> u64 {
        self.ignored
    }

    fn observation(&self, line: &str, now_ms: u64) -> Option<XidObservation> {
        let x = parse_xid_line(line)?;
        let time_ms = match (self.boot_time_ms, x.kernel_time_us) {
            (Some(boot), Some(us)) => boot.saturating_add(us / 1000),
            _ => now_ms,
        };
        Some(XidObservation {
            gpu: GpuId {
                index: None,
                pci_bus_id: Some(x.pci_bus_id),
            },
            xid: x.xid,
            time_ms,
            boot_id: self.boot_id.clone(),
            pid: x.pid,
            text: x.text,
            source: "kmsg".to_owned(),
        })
    }

    /// At most `max_lines` lines and about [`MAX_BYTES_PER_POLL`] bytes.
    fn read_lines(&mut self) -> Result<Vec<String>, HealthError> {
        let mut lines = Vec::new();
        let mut bytes = 0;
        let path = self.path.clone();
        match &mut self.input {
            Input::File {
                reader,
                partial,
                skipping,
            } => {
                while lines.len() < self.max_lines && bytes < MAX_BYTES_PER_POLL {
                    let mut buf = Vec::new();
                    let n = reader
                        .by_ref()
                        .take(MAX_LINE_BYTES as u64)
                        .read_until(b'\n', &mut buf)
                        .map_err(|source| HealthError::Kmsg {
                            path: path.clone(),
                            source,
                        })?;
                    if n == 0 {
                        break;
                    }
                    let complete = buf.last() == Some(&b'\n');
                    if *skipping {
                        // The tail of an overlong line.
                        *skipping = !complete;
                        continue;
                    }
                    if !complete {
                        // A line still being written, or an overlong one: keep its
                        // start, give it up once it passes the limit.
                        partial.extend_from_slice(&buf);
                        if partial.len() >= MAX_LINE_BYTES {
                            partial.clear();
                            *skipping = true;
                            self.ignored += 1;
                        }
                        continue;
                    }
                    let whole = if partial.is_empty() {
                        buf
                    } else {
                        let mut p = std::mem::take(partial);
                        p.extend_from_slice(&buf);
                        p
                    };
                    bytes += whole.len();
                    lines.push(String::from_utf8_lossy(&whole).into_owned());
                }
            }
            Input::Device { lines: rx } => {
                while lines.len() < self.max_lines && bytes < MAX_BYTES_PER_POLL {
                    match rx.try_recv() {
                        Ok(Ok(line)) => {
                            bytes += line.len();
                            lines.push(line);
                        }
                        Ok(Err(source)) => return Err(HealthError::Kmsg { path, source }),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            return Err(HealthError::SourceStopped(self.name.clone()));
                        }
                    }
                }
            }
        }
        Ok(lines)
    }
}

impl HealthSource for KmsgSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError> {
        let lines = self.read_lines()?;
        let mut out = Vec::new();
        for line in &lines {
            match self.observation(line, now_ms) {
                Some(obs) => out.push(HealthReading::Xid(obs)),
                None => self.ignored += 1,
            }
        }
        Ok(out)
    }
}

/// Parses a whole log (a saved `dmesg`, a test fixture) into observations, all keyed
/// with `boot_id` and stamped `time_ms`. Garbage lines are skipped.
pub fn parse_log(text: &str, boot_id: &str, time_ms: u64) -> Vec<XidObservation> {
    text.lines()
        .filter_map(parse_xid_line)
        .map(|x| XidObservation {
            gpu: GpuId {
                index: None,
                pci_bus_id: Some(x.pci_bus_id),
            },
            xid: x.xid,
            time_ms,
            boot_id: boot_id.to_owned(),
            pid: x.pid,
            text: x.text,
            source: "kmsg".to_owned(),
        })
        .collect()
}

fn is_char_device(file: &File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        file.metadata()
            .map(|m| m.file_type().is_char_device())
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        false
    }
}

/// Unix ms of boot from `/proc/uptime` (CLOCK_BOOTTIME; the kernel log stamps with
/// CLOCK_MONOTONIC, which differs only by time spent suspended, and servers don't
/// suspend).
fn boot_time_from_uptime() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/uptime").ok()?;
    let up_s: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(gpuvet_model::time::unix_now_ms().saturating_sub((up_s * 1000.0) as u64))
}

/// `/dev/kmsg` returns one record per `read` and blocks for the next one, so a thread
/// reads and the source drains the channel. The thread ends at its next record after
/// the source is dropped.
fn spawn_device_reader(mut file: File, path: &Path) -> io::Result<Receiver<io::Result<String>>> {
    let (tx, rx) = mpsc::sync_channel(MAX_QUEUED_RECORDS);
    thread::Builder::new()
        .name(format!("gpuvet-kmsg:{}", path.display()))
        .spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
                        if tx.send(Ok(line)).is_err() {
                            return;
                        }
                    }
                    // EPIPE: records were overwritten before we read them; carry on.
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_shapes() {
        let k = parse_xid_line(
            "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
        )
        .unwrap();
        assert_eq!(k.pci_bus_id, "0000:3b:00");
        assert_eq!(k.xid, 79);
        assert_eq!(k.pid, Some(4242));
        assert_eq!(k.process.as_deref(), Some("python3"));
        assert_eq!(k.text, "GPU has fallen off the bus.");
        assert_eq!(k.kernel_time_us, Some(5_678_901));

        let d = parse_xid_line(
            "[ 1234.567890] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address",
        )
        .unwrap();
        assert_eq!((d.xid, d.pid, d.process.as_deref()), (13, None, None));
        assert_eq!(d.kernel_time_us, Some(1_234_567_890));
        assert!(d.text.starts_with("Graphics SM Warp Exception"));

        let s = parse_xid_line(
            "Nov 30 12:00:00 node7 kernel: [  99.5] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        )
        .unwrap();
        assert_eq!((s.xid, s.pid), (48, None));
        assert_eq!(s.kernel_time_us, Some(99_500_000));

        let t = parse_xid_line("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 94, pid=7, name=x, Contained: CE User Channel (0x1). RST: No, D-RST: No").unwrap();
        assert_eq!((t.xid, t.pid, t.kernel_time_us), (94, Some(7), None));

        // Injected test lines repeat the prefix.
        let n =
            parse_xid_line("<3>NVRM: NVRM: Xid (PCI:0001:00:00): 119, GSP RPC Timeout").unwrap();
        assert_eq!((n.pci_bus_id.as_str(), n.xid), ("0001:00:00", 119));

        let bare = parse_xid_line("NVRM: Xid (PCI:0000:3b:00): 63").unwrap();
        assert_eq!((bare.xid, bare.text.as_str()), (63, ""));
    }

    #[test]
    fn garbage_is_ignored() {
        for line in [
            "",
            "random text",
            "NVRM: Xid",
            "NVRM: Xid (PCI:0000:3b:00)",
            "NVRM: Xid (PCI:0000:3b:00): , x",
            "NVRM: Xid (PCI:0000:3b:00): 79x, x",
            "NVRM: Xid (PCI:zzzz): 79, x",
            "NVRM: Xid PCI:0000:3b:00: 79, x",
            "NVRM: Xid (PCI:0000:3b:00): 99999999999, x",
            "6,1,2,-;NVRM: GPU at PCI:0000:3b:00: GPU-1234",
            " SUBSYSTEM=pci",
            "[ 12.5 NVRM: Xid (PCI",
        ] {
            assert_eq!(parse_xid_line(line), None, "{line:?}");
        }
    }

    const XID: &str = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.";

    #[test]
    fn the_line_bound_is_exact() {
        let pad = |len: usize| format!("{XID}{}", " tail".repeat(len).get(..len).unwrap());
        let at_limit = pad(MAX_LINE_BYTES - XID.len());
        assert_eq!(at_limit.len(), MAX_LINE_BYTES);
        assert_eq!(parse_xid_line(&at_limit).unwrap().xid, 79);
        let over = pad(MAX_LINE_BYTES + 1 - XID.len());
        assert_eq!(parse_xid_line(&over), None);
        let log = format!("{over}\n{XID}\n");
        assert_eq!(parse_log(&log, "b", 0).len(), 1);
    }

    #[test]
    fn a_poll_reads_at_most_its_byte_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kern.log");
        // Lines just under the line bound, three polls' worth, then one XID line.
        let long = format!("{}\n", "x".repeat(MAX_LINE_BYTES - 1));
        let count = 3 * MAX_BYTES_PER_POLL / long.len();
        let mut text = long.repeat(count);
        text.push_str(XID);
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        let options = KmsgOptions {
            boot_id: Some("b".into()),
            ..KmsgOptions::default()
        };
        let mut source = KmsgSource::open(&path, options).unwrap();
        let first = source.read_lines().unwrap();
        let read: usize = first.iter().map(String::len).sum();
        assert!(read >= MAX_BYTES_PER_POLL, "{read}");
        assert!(read < MAX_BYTES_PER_POLL + MAX_LINE_BYTES, "{read}");
        let mut polls = 1;
        let mut found = Vec::new();
        while found.is_empty() {
            found = source.poll(0).unwrap();
            polls += 1;
            assert!(polls <= 5, "the XID line was not reached");
        }
        assert!(polls >= 3, "{polls}");
    }

    /// Found by the `kmsg_line` fuzz target (fuzz/regressions/kmsg_line/): a `[s.us]`
    /// prefix whose seconds overflow microseconds panicked with overflow checks on.
    #[test]
    fn an_absurd_timestamp_is_no_time_not_a_panic() {
        let crash = include_bytes!("../../../fuzz/regressions/kmsg_line/timestamp-overflow");
        for line in String::from_utf8_lossy(crash).lines() {
            let _ = parse_xid_line(line);
        }
        let line =
            "[ 99999999999999999.5] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.";
        let xid = parse_xid_line(line).unwrap();
        assert_eq!((xid.xid, xid.kernel_time_us), (79, None));
        let line = "[ 18446744073709.551615] NVRM: Xid (PCI:0000:3b:00): 79, x";
        assert_eq!(parse_xid_line(line).unwrap().kernel_time_us, Some(u64::MAX));
    }
}

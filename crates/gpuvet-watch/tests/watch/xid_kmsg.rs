//! The kernel-log source on files: garbage is ignored, lines written later are read by
//! later polls, a half-written line waits for its end, and the boot id is read.

use std::io::Write;

use gpuvet_watch::health::{HealthReading, HealthSource};
use gpuvet_watch::kmsg::{self, KmsgOptions, KmsgSource};
use gpuvet_watch::policy::XidObservation;

fn xids(readings: &[HealthReading]) -> Vec<&XidObservation> {
    readings
        .iter()
        .map(|r| match r {
            HealthReading::Xid(o) => o,
            other => panic!("unexpected reading {other:?}"),
        })
        .collect()
}

#[test]
fn garbage_lines_are_ignored_and_new_lines_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dmesg.txt");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"[    0.000000] Linux version 6.8.0\n")
        .unwrap();
    f.write_all(b"\xff\xfe binary \x00 junk\n").unwrap();
    f.write_all(b"NVRM: Xid (PCI:0000:3b:00): , missing number\n")
        .unwrap();
    f.write_all(b"[  812.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=9, name=python, GPU has fallen off the bus.\n").unwrap();
    f.write_all(b"[  813.5] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
        .unwrap();
    f.write_all(&vec![b'x'; 200_000]).unwrap();
    f.write_all(b"\n").unwrap();
    f.flush().unwrap();

    let options = KmsgOptions {
        boot_id: Some("b1".into()),
        ..KmsgOptions::default()
    };
    let mut src = KmsgSource::open(&path, options).unwrap();
    assert_eq!(src.boot_id(), "b1");
    let r = src.poll(1_000).unwrap();
    let x = xids(&r);
    assert_eq!(x.len(), 1);
    assert_eq!((x[0].xid, x[0].pid, x[0].time_ms), (79, Some(9), 1_000));
    assert_eq!(x[0].gpu.pci_bus_id.as_deref(), Some("0000:3b:00"));
    assert_eq!(
        (x[0].boot_id.as_str(), x[0].source.as_str()),
        ("b1", "kmsg")
    );
    assert_eq!(x[0].text, "GPU has fallen off the bus.");
    assert!(src.ignored_lines() >= 5, "{}", src.ignored_lines());

    // Nothing new: nothing read.
    assert!(src.poll(2_000).unwrap().is_empty());

    // A line written in two halves is read once whole.
    f.write_all(b"6,99,123,-;NVRM: Xid (PCI:0000:5d:00): 13, pid=7, name=t")
        .unwrap();
    f.flush().unwrap();
    assert!(src.poll(3_000).unwrap().is_empty());
    f.write_all(b"rainer, Graphics Exception\nnot an xid\n")
        .unwrap();
    f.flush().unwrap();
    let r = src.poll(4_000).unwrap();
    let x = xids(&r);
    assert_eq!(x.len(), 1);
    assert_eq!((x[0].xid, x[0].text.as_str()), (13, "Graphics Exception"));
}

#[test]
fn starting_at_the_end_skips_old_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("syslog");
    std::fs::write(
        &path,
        "Nov 30 node kernel: NVRM: Xid (PCI:0000:3b:00): 48, DBE\n",
    )
    .unwrap();
    let options = KmsgOptions {
        from_start: false,
        boot_id: Some("b".into()),
        ..KmsgOptions::default()
    };
    let mut src = KmsgSource::open(&path, options).unwrap();
    assert!(src.poll(1).unwrap().is_empty());
}

#[test]
fn missing_log_is_an_error_and_boot_id_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let err = KmsgSource::open(&dir.path().join("nope"), KmsgOptions::default()).unwrap_err();
    assert!(err.to_string().contains("cannot read kernel log"), "{err}");

    let p = dir.path().join("boot_id");
    std::fs::write(&p, "3f1c2a9e-0000-4000-8000-123456789abc\n").unwrap();
    assert_eq!(
        kmsg::read_boot_id_from(&p).as_deref(),
        Some("3f1c2a9e-0000-4000-8000-123456789abc")
    );
    std::fs::write(&p, "\n").unwrap();
    assert_eq!(kmsg::read_boot_id_from(&p), None);
    assert_eq!(kmsg::read_boot_id_from(&dir.path().join("absent")), None);
}

#[test]
fn parse_log_reads_a_saved_dmesg() {
    let log = "\
[  10.1] nvidia: loading out-of-tree module taints kernel.
[ 812.2] NVRM: Xid (PCI:0000:3b:00): 79, pid=9, name=python, GPU has fallen off the bus.
garbage
[ 900.0] NVRM: Xid (PCI:0000:cb:00): 119, pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC response from GPU1 GSP!
";
    let obs = kmsg::parse_log(log, "b", 5);
    assert_eq!(obs.iter().map(|o| o.xid).collect::<Vec<_>>(), vec![79, 119]);
    assert_eq!(obs[1].pid, None);
    assert!(obs[1].text.starts_with("Timeout after 6s"));
}

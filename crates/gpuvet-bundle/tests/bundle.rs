//! The bundle format end to end: what `write` makes, that `read` takes it back and
//! `sha256sum -c` accepts it, and that `read` refuses each kind of bad archive, built
//! by hand with the `tar` crate.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use flate2::Compression;
use flate2::write::GzEncoder;
use gpuvet_bundle::{Bundle, BundleError, BundleFile, Limits, MANIFEST, read, write};
use gpuvet_model::diagnostics::with_causes;
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

const ROOT: &str = "gpuvet-bundle-job7-attempt2";

fn sample() -> Vec<BundleFile> {
    vec![
        BundleFile::new("summary.json", r#"{"verdict":"fail","nodes":2}"#),
        BundleFile::new("reports/n1.json", r#"{"node":"n1","ok":false}"#),
        BundleFile::new("reports/n2.json", r#"{"node":"n2","ok":true}"#),
        BundleFile::new("logs/n1/stderr.txt", "NCCL WARN timeout\n"),
        BundleFile::new("empty", ""),
        BundleFile::new("nœud/日本.txt", "unicode path"),
        BundleFile::new(
            format!("deep/{}/file.bin", "d".repeat(120)),
            vec![0u8, 1, 2, 255],
        ),
        BundleFile::new("a.json", "[]"),
    ]
}

fn pack(files: &[BundleFile]) -> Vec<u8> {
    let mut out = Vec::new();
    let written = write(files, ROOT, &mut out).expect("write the bundle");
    assert_eq!(written, out.len() as u64);
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn manifest_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    files
        .iter()
        .map(|(path, bytes)| format!("{}  {path}\n", sha256_hex(bytes)))
        .collect::<String>()
        .into_bytes()
}

/// One tar entry, written as given: the path's bytes go into the header unchecked.
struct Raw {
    path: String,
    kind: EntryType,
    data: Vec<u8>,
    link: &'static str,
}

fn file(path: &str, data: &[u8]) -> Raw {
    Raw {
        path: path.to_owned(),
        kind: EntryType::Regular,
        data: data.to_vec(),
        link: "",
    }
}

fn special(path: &str, kind: EntryType, link: &'static str) -> Raw {
    Raw {
        path: path.to_owned(),
        kind,
        data: Vec::new(),
        link,
    }
}

fn tar_bytes(entries: &[Raw]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = Header::new_gnu();
        header.set_entry_type(entry.kind);
        header.set_size(entry.data.len() as u64);
        header.set_mode(0o644);
        let old = header.as_old_mut();
        old.name[..entry.path.len()].copy_from_slice(entry.path.as_bytes());
        old.linkname[..entry.link.len()].copy_from_slice(entry.link.as_bytes());
        header.set_cksum();
        builder.append(&header, &entry.data[..]).unwrap();
    }
    builder.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn tar_gz(entries: &[Raw]) -> Vec<u8> {
    gzip(&tar_bytes(entries))
}

/// A well-formed bundle of `files`, built by hand, with `extra` entries after them.
fn hand_built(files: &[(&str, &[u8])], extra: Vec<Raw>) -> Vec<u8> {
    let mut entries = vec![
        special(&format!("{ROOT}/"), EntryType::Directory, ""),
        file(&format!("{ROOT}/{MANIFEST}"), &manifest_of(files)),
    ];
    entries.extend(
        files
            .iter()
            .map(|(path, bytes)| file(&format!("{ROOT}/{path}"), bytes)),
    );
    entries.extend(extra);
    tar_gz(&entries)
}

fn refused(bytes: &[u8]) -> BundleError {
    refused_within(bytes, &Limits::default())
}

fn refused_within(bytes: &[u8], limits: &Limits) -> BundleError {
    match read(bytes, limits) {
        Ok(bundle) => panic!("accepted a bad bundle: {:?}", bundle.root),
        Err(err) => err,
    }
}

const N1: &[u8] = br#"{"node":"n1"}"#;
const N2: &[u8] = br#"{"node":"n2"}"#;

#[test]
fn a_bundle_reads_back_as_written_in_manifest_order() {
    let files = sample();
    let bundle = read(&pack(&files)[..], &Limits::default()).unwrap();
    assert_eq!(bundle.root, ROOT);
    let mut want = files.clone();
    want.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(bundle.files, want);
    assert_eq!(bundle.get("empty").unwrap().bytes, b"");
    let summary: serde_json::Value = bundle.json("summary.json").unwrap();
    assert_eq!(summary["nodes"], 2);
    assert!(bundle.get(MANIFEST).is_none());

    // No files at all is still a bundle: a manifest with no lines.
    let empty = read(&pack(&[])[..], &Limits::default()).unwrap();
    assert_eq!(
        empty,
        Bundle {
            root: ROOT.to_owned(),
            files: Vec::new()
        }
    );
}

#[test]
fn the_same_files_give_the_same_bytes_whatever_their_order() {
    let files = sample();
    let mut reversed = files.clone();
    reversed.reverse();
    assert_eq!(pack(&files), pack(&reversed));
    let mut changed = files.clone();
    changed[0].bytes.push(b' ');
    assert_ne!(pack(&files), pack(&changed));
}

#[test]
fn entries_are_sorted_owned_by_root_and_dated_at_the_epoch() {
    let bytes = pack(&sample());
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let mut seen = Vec::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let header = entry.header();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let want_mode = match header.entry_type() {
            EntryType::Directory => 0o755,
            EntryType::Regular => 0o644,
            other => panic!("{path} is {other:?}"),
        };
        assert_eq!(header.mode().unwrap(), want_mode, "{path}");
        assert_eq!(header.mtime().unwrap(), 0, "{path}");
        assert_eq!(
            (header.uid().unwrap(), header.gid().unwrap()),
            (0, 0),
            "{path}"
        );
        assert_eq!(header.username().unwrap(), Some(""), "{path}");
        assert_eq!(header.groupname().unwrap(), Some(""), "{path}");
        seen.push(path);
    }
    let long = format!("{ROOT}/deep/{}", "d".repeat(120));
    assert_eq!(
        seen,
        [
            ROOT.to_owned(),
            format!("{ROOT}/MANIFEST"),
            format!("{ROOT}/a.json"),
            format!("{ROOT}/deep"),
            long.clone(),
            format!("{long}/file.bin"),
            format!("{ROOT}/empty"),
            format!("{ROOT}/logs"),
            format!("{ROOT}/logs/n1"),
            format!("{ROOT}/logs/n1/stderr.txt"),
            format!("{ROOT}/nœud"),
            format!("{ROOT}/nœud/日本.txt"),
            format!("{ROOT}/reports"),
            format!("{ROOT}/reports/n1.json"),
            format!("{ROOT}/reports/n2.json"),
            format!("{ROOT}/summary.json"),
        ]
    );
}

#[test]
fn the_manifest_is_sha256sums_format_sorted_by_path() {
    let files = [BundleFile::new("b", "abc"), BundleFile::new("a", "")];
    let bytes = pack(&files);
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let mut manifest = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().ends_with(MANIFEST) {
            std::io::Read::read_to_string(&mut entry, &mut manifest).unwrap();
        }
    }
    assert_eq!(
        manifest,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a\n\
         ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  b\n"
    );
}

/// Unpacks with the system's `tar` and checks with `sha256sum -c`, as a person would.
#[test]
fn sha256sum_checks_an_unpacked_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("bundle.tar.gz");
    std::fs::write(&archive, pack(&sample())).unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .current_dir(dir.path())
        .output()
        .expect("this test needs `tar` (Debian's tar package)");
    assert!(untar.status.success(), "{untar:?}");
    let root = dir.path().join(ROOT);
    let check = |root: &Path| {
        Command::new("sha256sum")
            .args(["-c", MANIFEST])
            .current_dir(root)
            .output()
            .expect("this test needs `sha256sum` (Debian's coreutils)")
    };
    let ok = check(&root);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(": OK")).count(),
        sample().len(),
        "{stdout}"
    );

    // And it notices a changed file, so the check above means something.
    std::fs::write(root.join("reports/n1.json"), "{}").unwrap();
    let bad = check(&root);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stdout).contains("reports/n1.json: FAILED"));
}

#[test]
fn a_hand_built_bundle_is_accepted_so_the_refusals_below_are_about_one_change() {
    let bundle = read(
        &hand_built(
            &[("reports/n1.json", N1), ("reports/n2.json", N2)],
            Vec::new(),
        )[..],
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(bundle.files.len(), 2);
}

#[test]
fn a_changed_byte_is_named_with_both_sums() {
    let mut entries = vec![file(
        &format!("{ROOT}/{MANIFEST}"),
        &manifest_of(&[("reports/n1.json", N1), ("reports/n2.json", N2)]),
    )];
    let mut tampered = N1.to_vec();
    tampered[3] ^= 1;
    entries.push(file(&format!("{ROOT}/reports/n1.json"), &tampered));
    entries.push(file(&format!("{ROOT}/reports/n2.json"), N2));
    let err = refused(&tar_gz(&entries));
    assert_eq!(
        err.to_string(),
        format!(
            "`reports/n1.json` does not match the manifest: its sha256 is `{}`, the manifest \
             says `{}`",
            sha256_hex(&tampered),
            sha256_hex(N1)
        )
    );
    assert_eq!(
        err.hint(),
        Some("the bundle was changed or damaged after it was made; ask the sender for a new one")
    );
}

#[test]
fn a_file_outside_the_manifest_is_refused() {
    let extra = vec![file(&format!("{ROOT}/reports/n3.json"), b"{}")];
    let err = refused(&hand_built(&[("reports/n1.json", N1)], extra));
    assert!(
        matches!(&err, BundleError::Unlisted { path } if path == "reports/n3.json"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "`reports/n3.json` is in the bundle but not in the manifest"
    );
}

#[test]
fn a_listed_file_that_is_missing_is_refused() {
    let entries = vec![
        file(
            &format!("{ROOT}/{MANIFEST}"),
            &manifest_of(&[("reports/n1.json", N1), ("reports/n2.json", N2)]),
        ),
        file(&format!("{ROOT}/reports/n1.json"), N1),
    ];
    let err = refused(&tar_gz(&entries));
    assert_eq!(
        err.to_string(),
        "`reports/n2.json` is listed in the manifest but missing from the bundle"
    );
}

#[test]
fn links_and_devices_are_refused() {
    let cases = [
        (EntryType::Symlink, "/etc/passwd", "a symbolic link"),
        (
            EntryType::Link,
            "gpuvet-bundle-job7-attempt2/MANIFEST",
            "a hard link",
        ),
        (EntryType::Char, "", "a character device"),
        (EntryType::Block, "", "a block device"),
        (EntryType::Fifo, "", "a named pipe"),
    ];
    for (kind, link, what) in cases {
        let path = format!("{ROOT}/reports/n2.json");
        let err = refused(&hand_built(
            &[("reports/n1.json", N1)],
            vec![special(&path, kind, link)],
        ));
        assert_eq!(
            err.to_string(),
            format!("`{path}` is {what}; a bundle holds only regular files and directories")
        );
    }
}

#[test]
fn paths_that_leave_the_directory_are_refused() {
    let cases = [
        ("../x", "leaves the bundle's directory (`..`)"),
        (
            &format!("{ROOT}/../x") as &str,
            "leaves the bundle's directory (`..`)",
        ),
        (
            &format!("{ROOT}/reports/../../x"),
            "leaves the bundle's directory (`..`)",
        ),
        ("/etc/cron.d/x", "is an absolute path"),
        ("loose.json", "is not inside the bundle's directory"),
    ];
    for (path, reason) in cases {
        let err = refused(&hand_built(
            &[("reports/n1.json", N1)],
            vec![file(path, b"x")],
        ));
        assert!(
            matches!(err, BundleError::UnsafePath { .. }),
            "{path}: {err}"
        );
        assert_eq!(err.to_string(), format!("`{path}` {reason}"));
    }
}

#[test]
fn a_second_top_level_directory_is_refused() {
    let err = refused(&hand_built(
        &[("reports/n1.json", N1)],
        vec![file("other/x.json", b"{}")],
    ));
    assert_eq!(
        err.to_string(),
        format!("the bundle has more than one top-level directory: `{ROOT}` and `other`")
    );
}

#[test]
fn a_file_twice_is_refused() {
    let twice = vec![file(&format!("{ROOT}/reports/n1.json"), N1)];
    let err = refused(&hand_built(&[("reports/n1.json", N1)], twice));
    assert_eq!(err.to_string(), "`reports/n1.json` is in the bundle twice");
    let manifest_twice = vec![file(&format!("{ROOT}/{MANIFEST}"), b"")];
    let err = refused(&hand_built(&[], manifest_twice));
    assert_eq!(err.to_string(), "`MANIFEST` is in the bundle twice");
}

#[test]
fn a_file_that_is_also_a_directory_is_refused() {
    let extra = vec![special(
        &format!("{ROOT}/reports/n1.json/"),
        EntryType::Directory,
        "",
    )];
    let err = refused(&hand_built(&[("reports/n1.json", N1)], extra));
    assert_eq!(
        err.to_string(),
        "`reports/n1.json` is both a file and a directory"
    );
    let extra = vec![file(&format!("{ROOT}/reports/n1.json/x"), b"")];
    let err = refused(&hand_built(&[("reports/n1.json", N1)], extra));
    assert_eq!(
        err.to_string(),
        "`reports/n1.json/x` is inside `reports/n1.json`, which is a file"
    );
}

#[test]
fn a_missing_or_malformed_manifest_is_refused() {
    let no_manifest = tar_gz(&[file(&format!("{ROOT}/reports/n1.json"), N1)]);
    assert_eq!(
        refused(&no_manifest).to_string(),
        "the bundle has no `MANIFEST`"
    );
    assert_eq!(
        refused(&gzip(b"")).to_string(),
        "the bundle has no `MANIFEST`"
    );

    let mut manifest = manifest_of(&[("reports/n1.json", N1)]);
    manifest.extend_from_slice(format!("{}  reports/n2.json\n", "z".repeat(64)).as_bytes());
    let entries = vec![
        file(&format!("{ROOT}/{MANIFEST}"), &manifest),
        file(&format!("{ROOT}/reports/n1.json"), N1),
    ];
    let err = refused(&tar_gz(&entries));
    assert_eq!(
        err.to_string(),
        "`MANIFEST` line 2 is not `<sha256>  <path>`: it does not start with 64 hex digits"
    );
    assert!(err.hint().is_some());
}

#[test]
fn input_that_is_not_a_gzipd_tar_is_refused() {
    // The reason is the source, printed once, after the message.
    let err = refused(b"PK\x03\x04 this is a zip");
    assert_eq!(err.to_string(), "not a gzip'd tar");
    assert!(with_causes(&err).starts_with("not a gzip'd tar: "), "{err}");
    let err = refused(&gzip(b"plain text, not a tar, but longer than nothing"));
    assert!(with_causes(&err).starts_with("not a gzip'd tar: "), "{err}");
    assert!(matches!(refused(b""), BundleError::NotGzipTar { .. }));
}

#[test]
fn a_cut_short_bundle_is_refused_wherever_it_is_cut() {
    let whole = pack(&sample());
    // Every cut, down to the last byte of the gzip trailer, which the tar never needs.
    for keep in [1, 10, 30, whole.len() / 2, whole.len() - 8, whole.len() - 1] {
        let err = refused(&whole[..keep]);
        assert!(
            matches!(
                err,
                BundleError::NotGzipTar { .. } | BundleError::Damaged { .. }
            ),
            "cut to {keep} of {} bytes: {err}",
            whole.len()
        );
    }
    let err = refused(&whole[..whole.len() / 2]);
    assert!(
        err.to_string().starts_with("the bundle is damaged near `"),
        "{err}"
    );
    assert!(err.hint().unwrap().contains("cut short"));
}

#[test]
fn data_after_the_archive_is_refused() {
    let mut bytes = pack(&sample());
    bytes.extend_from_slice(&gzip(b"more"));
    let err = refused(&bytes);
    assert_eq!(
        err.to_string(),
        "the bundle has data after the end of its archive"
    );

    // An entry after the tar's end-of-archive blocks, which `tar -i` would unpack.
    let manifest = [file(&format!("{ROOT}/{MANIFEST}"), b"")];
    let mut stream = tar_bytes(&manifest);
    stream.extend(tar_bytes(&[file(&format!("{ROOT}/hidden"), b"x")]));
    assert!(matches!(refused(&gzip(&stream)), BundleError::TrailingData));
    // Zeros there are only padding, as GNU tar writes to fill a record.
    let mut padded = tar_bytes(&manifest);
    padded.resize(10240, 0);
    assert!(read(&gzip(&padded)[..], &Limits::default()).is_ok());
}

#[test]
fn a_gzip_bomb_stops_at_the_limit() {
    let limits = Limits {
        max_files: 100,
        max_file_bytes: 1 << 20,
        max_total_bytes: 2 << 20,
    };
    let zeros = vec![0u8; 1 << 20];
    // Three files of a MiB of zeros each: each within the file limit, over the total.
    let files: Vec<(String, &[u8])> = (0..3).map(|i| (format!("zeros{i}"), &zeros[..])).collect();
    let listed: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
    let bomb = hand_built(&listed, Vec::new());
    assert!(bomb.len() < 20 << 10, "{} bytes compressed", bomb.len());
    let err = refused_within(&bomb, &limits);
    assert_eq!(
        err.to_string(),
        format!(
            "the bundle unpacks to more than its limit of `{}` bytes",
            2 << 20
        )
    );
    assert!(err.hint().unwrap().contains("gzip bomb"));

    // One file over the file limit is refused by its header, before it is read.
    let big = vec![0u8; (1 << 20) + 1];
    let err = refused_within(&hand_built(&[("big", &big)], Vec::new()), &limits);
    assert_eq!(
        err.to_string(),
        format!(
            "`big` is `{}` bytes, over the limit of `{}` bytes for one file",
            big.len(),
            1 << 20
        )
    );
}

#[test]
fn zeros_after_the_tar_or_in_a_header_stop_at_the_limit() {
    // A valid bundle whose gzip stream goes on with 32 MiB of zeros after the tar.
    let mut stream = tar_bytes(&[file(&format!("{ROOT}/{MANIFEST}"), b"")]);
    stream.resize(stream.len() + (32 << 20), 0);
    assert!(matches!(
        refused(&gzip(&stream)),
        BundleError::TooLarge { .. }
    ));

    // A PAX header claiming 32 MiB, which a tar reader reads whole before the entry.
    let pax = Raw {
        path: "pax".to_owned(),
        kind: EntryType::XHeader,
        data: vec![0u8; 32 << 20],
        link: "",
    };
    let err = refused(&tar_gz(&[pax, file(&format!("{ROOT}/{MANIFEST}"), b"")]));
    assert!(matches!(err, BundleError::TooLarge { .. }), "{err}");
}

#[test]
fn too_many_files_are_refused() {
    let limits = Limits {
        max_files: 2,
        ..Limits::default()
    };
    let three = [("a", N1), ("b", N1), ("c", N1)];
    let err = refused_within(&hand_built(&three, Vec::new()), &limits);
    assert_eq!(err.to_string(), "the bundle holds more than `2` files");
    // Two files and the manifest are within a limit of two files.
    assert!(read(&hand_built(&three[..2], Vec::new())[..], &limits).is_ok());

    // A flood of directories stops too.
    let dirs: Vec<Raw> = (0..10)
        .map(|i| special(&format!("{ROOT}/d{i}/"), EntryType::Directory, ""))
        .collect();
    let err = refused_within(&hand_built(&[], dirs), &limits);
    assert!(
        matches!(err, BundleError::TooManyFiles { limit: 2 }),
        "{err}"
    );
}

#[test]
fn write_refuses_paths_a_bundle_cannot_hold() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["a", "a"],
            "`a` is given twice; each file of a bundle needs its own path",
        ),
        (&[""], "cannot put `` in a bundle: the path is empty"),
        (
            &["/etc/x"],
            "cannot put `/etc/x` in a bundle: the path is absolute; give it relative to the \
             bundle's directory",
        ),
        (
            &["a/../../x"],
            "cannot put `a/../../x` in a bundle: the path leaves the bundle's directory (`..`)",
        ),
        (
            &["./a"],
            "cannot put `./a` in a bundle: the path has a `.` component",
        ),
        (
            &["a//b"],
            "cannot put `a//b` in a bundle: the path has an empty component (`//` or a \
             trailing `/`)",
        ),
        (
            &["MANIFEST"],
            "cannot put `MANIFEST` in a bundle: `MANIFEST` is the bundle's own manifest",
        ),
        (
            &["x/y", "x"],
            "cannot put `x/y` in a bundle: `x` is a file, so `x/y` cannot be inside it",
        ),
        (
            &["a\nb"],
            "cannot put `a\nb` in a bundle: a path may not hold `\\`, a line break or NUL",
        ),
    ];
    for (paths, message) in cases {
        let files: Vec<BundleFile> = paths.iter().map(|p| BundleFile::new(*p, "x")).collect();
        let mut out = Vec::new();
        let err = write(&files, ROOT, &mut out).unwrap_err();
        assert_eq!(err.to_string(), message);
        assert!(out.is_empty(), "nothing is written for a refused bundle");
    }
    // `MANIFEST` below the top is an ordinary file.
    assert!(write(&[BundleFile::new("sub/MANIFEST", "x")], ROOT, Vec::new()).is_ok());
    for root in ["", "a/b", "..", "."] {
        let err = write(&[], root, Vec::new()).unwrap_err();
        assert!(
            matches!(err, BundleError::InvalidRoot { .. }),
            "{root:?}: {err}"
        );
    }
}

#[test]
fn a_failing_writer_is_a_write_error() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = write(&sample(), ROOT, Full).unwrap_err();
    assert_eq!(err.to_string(), "could not write the bundle");
    assert_eq!(with_causes(&err), "could not write the bundle: disk full");
}

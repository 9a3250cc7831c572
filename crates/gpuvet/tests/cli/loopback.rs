//! Loopback means loopback: with the coordinator on a loopback address only, every
//! listener of every gpuvet process of the group (the coordinator, each data plane, its
//! rails and its reachability responder) is on loopback too, never on a wildcard
//! address. Read from the kernel while the group runs: each process's TCP sockets in
//! `LISTEN` (`/proc/PID/net/tcp{,6}`), matched to the process by the socket inodes of
//! its open files (`/proc/PID/fd`), as `ss -ltnp` would show them.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::group::{Group, GroupSpec};
use crate::common::{self, Scratch};

/// Only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(60);

/// The TCP sockets process `pid` listens on.
fn listeners_of(pid: u32) -> Vec<SocketAddr> {
    let inodes: BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                .filter_map(|target| {
                    let target = target.to_str()?.to_owned();
                    target
                        .strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let ours = fields
                .get(9)
                .and_then(|inode| inode.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode));
            if listening && ours {
                found.push(parse_proc_addr(fields[1]).expect("an address in /proc/net/tcp"));
            }
        }
    }
    found.sort();
    found
}

/// `0100007F:1F90` or its IPv6 form: the kernel prints each 32-bit word of the address
/// as a native-order number of network-order bytes, then the port in hex.
fn parse_proc_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::new();
    for word in ip.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        bytes.extend(word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[test]
fn proc_addresses_read_as_the_kernel_wrote_them() {
    let v4 = u32::from_ne_bytes([127, 0, 0, 1]);
    assert_eq!(
        parse_proc_addr(&format!("{v4:08X}:1F90")),
        Some("127.0.0.1:8080".parse().unwrap())
    );
    let one = u32::from_ne_bytes([0, 0, 0, 1]);
    assert_eq!(
        parse_proc_addr(&format!("000000000000000000000000{one:08X}:0050")),
        Some("[::1]:80".parse().unwrap())
    );
    assert_eq!(
        parse_proc_addr("00000000:0016"),
        Some("0.0.0.0:22".parse().unwrap())
    );
    assert_eq!(parse_proc_addr("nonsense"), None);
}

/// Waits until each of `pids` listens on at least its count of sockets (all bound),
/// then returns what each listens on; panics after [`LIMIT`].
fn wait_for_listeners(pids: &[(u32, usize)]) -> Vec<Vec<SocketAddr>> {
    let until = Instant::now() + LIMIT;
    loop {
        let found: Vec<Vec<SocketAddr>> = pids.iter().map(|&(pid, _)| listeners_of(pid)).collect();
        if found
            .iter()
            .zip(pids)
            .all(|(addrs, &(_, count))| addrs.len() >= count)
        {
            return found;
        }
        assert!(
            Instant::now() < until,
            "the group never bound its listeners: {found:?}, expected {pids:?} (pid, count)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether this machine has IPv6 loopback (a container may have none).
fn has_ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

/// A group of separate processes (as a launcher starts them: `NNODES`, `NODE_RANK`,
/// `MASTER_ADDR` in the environment) on this host. With `--listen-addr` on loopback,
/// every listener is there; without it the coordinator listens everywhere, other hosts
/// may join, and the data planes of this host listen everywhere too, as before (which
/// also shows that this test sees a wildcard listener when there is one).
#[test]
fn a_group_whose_coordinator_listens_on_loopback_listens_nowhere_else() {
    let _turn = common::one_at_a_time();
    let mut cases = vec![(Some("127.0.0.1"), "127.0.0.1"), (None, "127.0.0.1")];
    if has_ipv6_loopback() {
        cases.push((Some("::1"), "::1"));
    }
    for (listen_addr, master_addr) in cases {
        let scratch = Scratch::temp();
        let mut spec = GroupSpec::loopback(3, "all_reduce_2");
        spec.master_addr = master_addr.to_owned();
        // Rank 2 stays away: ranks 0 and 1 hold their listeners while the coordinator
        // waits for it.
        spec.absent = vec![2];
        spec.rendezvous_secs = 30.0;
        if let Some(ip) = listen_addr {
            spec.extra_args = vec!["--listen-addr".to_owned(), ip.to_owned()];
        }
        let group = Group::start(&scratch, &spec);
        // Rank 0: the coordinator, the data plane, one rail, the probe responder.
        // Rank 1: the data plane, one rail, the probe responder.
        let found =
            wait_for_listeners(&[(group.rank(0).child.id(), 4), (group.rank(1).child.id(), 3)]);
        let logs = format!(
            "rank 0: {}\nrank 1: {}",
            group.rank(0).stderr(),
            group.rank(1).stderr()
        );
        drop(group);

        let case = format!("--listen-addr {listen_addr:?}, MASTER_ADDR {master_addr}");
        assert_eq!(found[0].len(), 4, "{case}: {found:?}\n{logs}");
        assert_eq!(found[1].len(), 3, "{case}: {found:?}\n{logs}");
        assert!(
            found[0].iter().any(|addr| addr.port() == spec.port),
            "{case}: the coordinator is rank 0's: {found:?}"
        );
        let every: Vec<&SocketAddr> = found.iter().flatten().collect();
        match listen_addr {
            Some(ip) => {
                let ip: IpAddr = ip.parse().unwrap();
                assert!(
                    every.iter().all(|addr| addr.ip() == ip),
                    "{case}: every listener on `{ip}`: {found:?}\n{logs}"
                );
                assert!(every.iter().all(|addr| !addr.ip().is_unspecified()));
            }
            None => assert!(
                every.iter().all(|addr| addr.ip().is_unspecified()),
                "{case}: every listener on every interface: {found:?}\n{logs}"
            ),
        }
    }
}

/// `gpuvet run --local-nodes N`: the coordinator on loopback and every agent's data
/// plane too, seen while the agents wait in a stand-in for Python that the test holds
/// until it has read their listeners.
#[test]
fn local_nodes_listen_on_loopback_only() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let dir = scratch.dir.path().display().to_string();
    // The torch probe of `pytorch_gloo_2`: say which agent runs it (the parent of the
    // script), then wait for the test; no torch, so the built-in engine runs after.
    let python = scratch.path("python");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\necho $PPID > '{dir}'/probe.$$\n\
             while [ ! -e '{dir}/release' ]; do sleep 0.05; done\nexit 1\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut gpuvet = scratch
        .gpuvet()
        .args(["run", "--backend", "cpu", "--cpu-devices", "1"])
        .args(["--local-nodes", "2", "--checks", "pytorch_gloo_2"])
        .env("GPUVET_PYTHON", &python)
        .env_remove("GPUVET_LISTEN_ADDR")
        .env_remove("GPUVET_DATA_ADDR")
        .args(["--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(scratch.path("stderr")).unwrap())
        .spawn()
        .unwrap();
    let agents = wait_for_probes(&scratch, 2);
    let mut pids = vec![(gpuvet.id(), 1)];
    pids.extend(agents.iter().map(|&pid| (pid, 3)));
    let found = wait_for_listeners(&pids);
    std::fs::write(scratch.path("release"), "").unwrap();
    let until = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = gpuvet.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= until {
            let _ = gpuvet.kill();
            panic!("`gpuvet run --local-nodes 2` did not finish");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(scratch.path("stderr")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(found[0].len(), 1, "the coordinator: {found:?}");
    for agent in &found[1..] {
        assert_eq!(agent.len(), 3, "an agent: {found:?}");
    }
    let every: Vec<&SocketAddr> = found.iter().flatten().collect();
    assert!(
        every.iter().all(|addr| addr.ip() == Ipv4Addr::LOCALHOST),
        "every listener on loopback: {found:?}\n{log}"
    );
}

/// The pids of the agents that ran the stand-in's probe, once `count` have.
fn wait_for_probes(scratch: &Scratch, count: usize) -> Vec<u32> {
    let until = Instant::now() + LIMIT;
    loop {
        let pids: Vec<u32> = std::fs::read_dir(scratch.dir.path())
            .unwrap()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                entry
                    .file_name()
                    .to_str()?
                    .starts_with("probe.")
                    .then_some(())?;
                std::fs::read_to_string(entry.path())
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect();
        if pids.len() >= count {
            return pids;
        }
        assert!(
            Instant::now() < until,
            "only {pids:?} of {count} agents probed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

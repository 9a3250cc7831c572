//! Tests that need the module's insides: a peer that enters a collective and then
//! stops reading, holding its connection open.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use super::collectives::{HEADER_MAGIC, Kind};
use super::*;

#[test]
fn a_peer_that_stops_reading_mid_collective_is_named_after_the_stall_timeout() {
    let listeners: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let peers: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let cancel = CancelToken::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let stall = Duration::from_secs(1);
    let spec = CollectiveSpec {
        bytes: Some(64 << 20),
        stall_timeout: stall,
        ..CollectiveSpec::default()
    };
    let group_spec = |rank| GroupSpec {
        rank,
        peers: peers.clone(),
        round: 3,
        topology: Topology::Ring,
        key: DataKey::from_bytes([1; 32]),
    };
    thread::scope(|scope| {
        let stopper = scope.spawn(|| {
            let group =
                TcpGroup::establish(&group_spec(1), &listeners[1], deadline, &cancel).unwrap();
            let (to_rank0, from_rank0) = (
                group.links.outgoing[0].as_ref().unwrap(),
                group.links.incoming[0].as_ref().unwrap(),
            );
            // Enter the all-reduce as rank 0 expects (the first collective, 64 MiB)...
            let mut header = Vec::new();
            for word in [HEADER_MAGIC, Kind::AllReduce.code(), 64 << 20, 1] {
                header.extend_from_slice(&word.to_le_bytes());
            }
            (&to_rank0.stream).write_all(&header).unwrap();
            let mut theirs = [0u8; 32];
            let mut filled = 0;
            while filled < theirs.len() {
                match (&from_rank0.stream).read(&mut theirs[filled..]) {
                    Ok(count) => filled += count,
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(error) => panic!("{error}"),
                }
            }
            assert_eq!(&theirs[..], &header[..]);
            // ...(a 2-rank group's barrier ends with the header)... then stop: no reads,
            // no writes, the connections held open.
            thread::sleep(stall * 4);
            drop(group);
        });
        let mut group =
            TcpGroup::establish(&group_spec(0), &listeners[0], deadline, &cancel).unwrap();
        let started = Instant::now();
        let error = group
            .all_reduce(&spec, deadline, &cancel)
            .unwrap_err()
            .to_string();
        let took = started.elapsed();
        let peer = format!("rank 1 (`{}`)", peers[1]);
        assert!(
            error.contains(&format!("{peer} stopped receiving during the all-reduce"))
                || error.contains(&format!("{peer} sent nothing during the all-reduce")),
            "{error}"
        );
        assert!(took >= stall && took < stall * 5, "took {took:?}");
        stopper.join().unwrap();
    });
}

#[test]
fn ring_and_mesh_need_the_right_peers() {
    assert_eq!(directions(0, 2, Topology::Ring), (vec![1], vec![1]));
    assert_eq!(directions(0, 5, Topology::Ring), (vec![1], vec![4]));
    assert_eq!(directions(4, 5, Topology::Ring), (vec![0], vec![3]));
    assert_eq!(
        directions(1, 4, Topology::FullMesh),
        (vec![0, 2, 3], vec![0, 2, 3])
    );
}

#[test]
fn a_peer_that_resets_mid_collective_is_an_io_failure_with_its_cause() {
    use std::os::fd::AsRawFd;

    let listeners: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let peers: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let cancel = CancelToken::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let spec = CollectiveSpec {
        bytes: Some(64 << 20),
        ..CollectiveSpec::default()
    };
    let group_spec = |rank| GroupSpec {
        rank,
        peers: peers.clone(),
        round: 4,
        topology: Topology::Ring,
        key: DataKey::from_bytes([2; 32]),
    };
    thread::scope(|scope| {
        let resetter = scope.spawn(|| {
            let group =
                TcpGroup::establish(&group_spec(1), &listeners[1], deadline, &cancel).unwrap();
            let (to_rank0, from_rank0) = (
                group.links.outgoing[0].as_ref().unwrap(),
                group.links.incoming[0].as_ref().unwrap(),
            );
            // Enter the all-reduce as rank 0 expects, and wait for rank 0's header...
            let mut header = Vec::new();
            for word in [HEADER_MAGIC, Kind::AllReduce.code(), 64 << 20, 1] {
                header.extend_from_slice(&word.to_le_bytes());
            }
            (&to_rank0.stream).write_all(&header).unwrap();
            let mut theirs = [0u8; 32];
            let mut filled = 0;
            while filled < theirs.len() {
                match (&from_rank0.stream).read(&mut theirs[filled..]) {
                    Ok(count) => filled += count,
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(error) => panic!("{error}"),
                }
            }
            // ...then reset both connections: a linger of zero makes close send RST.
            let reset = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            for link in [to_rank0, from_rank0] {
                // SAFETY: a valid socket; `reset` is a `linger` of the size passed.
                let set = unsafe {
                    libc::setsockopt(
                        link.stream.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&reset as *const libc::linger).cast(),
                        size_of::<libc::linger>() as libc::socklen_t,
                    )
                };
                assert_eq!(set, 0);
            }
            drop(group);
        });
        let mut group =
            TcpGroup::establish(&group_spec(0), &listeners[0], deadline, &cancel).unwrap();
        let error = group.all_reduce(&spec, deadline, &cancel).unwrap_err();
        resetter.join().unwrap();
        let text = gpuvet_backend::with_causes(&error);
        let BackendError::Io { what, source } = &error else {
            panic!("{error:?}: {text}");
        };
        let peer = format!("rank 1 (`{}`)", peers[1]);
        assert!(
            what == &format!("sending to {peer} failed during the all-reduce")
                || what == &format!("receiving from {peer} failed during the all-reduce"),
            "{what}"
        );
        // The socket's own words are the cause, as reports have shown them.
        assert_eq!(text, format!("{what}: {source}"));
    });
}

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::time::Duration;

use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn any_port(host: &MemoryHost) -> SocketAddr {
    SocketAddr::new(host.ip(), 0)
}

const WAIT: Duration = Duration::from_secs(5);

/// An agent at 10.0.0.2 connected to a server at 10.0.0.1: the agent's host, its end
/// and the server's.
fn agent_and_server(network: &MemoryNetwork) -> (MemoryHost, Stream, Stream) {
    let (server_host, agent_host) = (network.host(ip(1)), network.host(ip(2)));
    let listener = server_host.bind(any_port(&server_host)).unwrap();
    let agent = agent_host
        .connect(listener.local_addr().unwrap(), WAIT)
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    (agent_host, agent, server)
}

#[test]
fn bytes_cross_both_ways_with_the_addresses_of_each_host() {
    let network = MemoryNetwork::new();
    let (server_host, client_host) = (network.host(ip(1)), network.host(ip(2)));
    let listener = server_host.bind(any_port(&server_host)).unwrap();
    let addr = listener.local_addr().unwrap();
    assert_eq!(addr.ip(), ip(1));
    assert_ne!(addr.port(), 0);

    let mut client = client_host.connect(addr, WAIT).unwrap();
    let (mut server, peer) = listener.accept().unwrap();
    assert_eq!(peer.ip(), ip(2));
    assert_eq!(client.peer_addr().unwrap(), addr);
    assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());

    client.write_all(b"hello").unwrap();
    let mut got = [0u8; 5];
    server.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello");
    server.write_all(b"back").unwrap();
    let mut got = [0u8; 4];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"back");
}

#[test]
fn nobody_listening_is_refused_and_a_bound_address_is_taken() {
    let network = MemoryNetwork::new();
    let host = network.host(ip(1));
    let addr = SocketAddr::new(ip(1), 4000);
    let err = host.connect(addr, WAIT).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    let listener = host.bind(addr).unwrap();
    assert_eq!(host.bind(addr).unwrap_err().kind(), ErrorKind::AddrInUse);
    let foreign = host.bind(SocketAddr::new(ip(9), 0)).unwrap_err();
    assert_eq!(foreign.kind(), ErrorKind::AddrNotAvailable);
    // Dropping the listener frees its address.
    drop(listener);
    assert!(host.bind(addr).is_ok());
}

#[test]
fn a_read_times_out_with_would_block_and_a_closed_peer_reads_as_end_of_file() {
    let network = MemoryNetwork::new();
    let host = network.host(ip(1));
    let listener = host.bind(any_port(&host)).unwrap();
    let mut client = host.connect(listener.local_addr().unwrap(), WAIT).unwrap();
    let (server, _) = listener.accept().unwrap();

    client
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(
        client.read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(
        client
            .set_read_timeout(Some(Duration::ZERO))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );

    // Bytes sent before the close are still read, then end of file.
    let mut writer = server.try_clone().unwrap();
    writer.write_all(b"last").unwrap();
    drop(writer);
    drop(server);
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"last");
    assert_eq!(client.read(&mut buf).unwrap(), 0);
    assert_eq!(
        client.write(b"x").unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[test]
fn shutting_down_a_clone_wakes_a_reader_blocked_on_another() {
    let network = MemoryNetwork::new();
    let host = network.host(ip(1));
    let listener = host.bind(any_port(&host)).unwrap();
    let client = host.connect(listener.local_addr().unwrap(), WAIT).unwrap();
    let _server = listener.accept().unwrap();
    let control = client.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut client = client;
        let mut buf = [0u8; 1];
        client.read(&mut buf)
    });
    std::thread::sleep(Duration::from_millis(20));
    control.shutdown(Shutdown::Both).unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), 0);
}

#[test]
fn a_frozen_host_goes_silent_until_thawed() {
    let network = MemoryNetwork::new();
    let (_, mut agent, mut server) = agent_and_server(&network);

    network.freeze(ip(2));
    let writer = std::thread::spawn(move || agent.write_all(b"late").map(|()| agent));
    // What the server sends to a frozen host is buffered, as a kernel would.
    server.write_all(b"queued").unwrap();
    server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(
        server.read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    network.thaw(ip(2));
    let mut agent = writer.join().unwrap().unwrap();
    server.set_read_timeout(None).unwrap();
    server.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"late");
    let mut queued = [0u8; 6];
    agent.read_exact(&mut queued).unwrap();
    assert_eq!(&queued, b"queued");
}

#[test]
fn a_cut_host_loses_every_connection_and_cannot_open_new_ones() {
    let network = MemoryNetwork::new();
    let (server_host, agent_host) = (network.host(ip(1)), network.host(ip(2)));
    let listener = server_host.bind(any_port(&server_host)).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut agent = agent_host.connect(addr, WAIT).unwrap();
    let (mut server, _) = listener.accept().unwrap();

    // Even a frozen host's blocked writer is released by the cut.
    network.freeze(ip(2));
    let blocked = std::thread::spawn(move || agent.write_all(b"never"));
    std::thread::sleep(Duration::from_millis(20));
    network.cut(ip(2));
    assert_eq!(
        blocked.join().unwrap().unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    let mut buf = [0u8; 1];
    assert_eq!(
        server.read(&mut buf).unwrap(),
        0,
        "the peer reads end of file"
    );
    assert_eq!(
        agent_host.connect(addr, WAIT).unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    network.thaw(ip(2));
    assert!(
        agent_host.connect(addr, WAIT).is_err(),
        "a cut host stays cut"
    );
    assert!(agent_host.is_gone());
    assert!(!server_host.is_gone());
}

/// Tokens the poller reports within a short wait, sorted and without repeats.
fn ready(poller: &dyn Poller) -> Vec<u64> {
    let mut tokens = Vec::new();
    poller.wait(&mut tokens, Duration::from_millis(50)).unwrap();
    tokens.sort_unstable();
    tokens.dedup();
    tokens
}

#[test]
fn a_poller_reports_the_connections_with_bytes_or_an_end_to_read() {
    let network = MemoryNetwork::new();
    let (server_host, a_host, b_host) = (
        network.host(ip(1)),
        network.host(ip(2)),
        network.host(ip(3)),
    );
    let listener = server_host.bind(any_port(&server_host)).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut a = a_host.connect(addr, WAIT).unwrap();
    let (mut from_a, _) = listener.accept().unwrap();
    let b = b_host.connect(addr, WAIT).unwrap();
    let (from_b, _) = listener.accept().unwrap();
    let poller = server_host.poller().unwrap();

    // Bytes sent before the watch are reported by it.
    a.write_all(b"early").unwrap();
    from_a.watch(&*poller, 7).unwrap();
    from_b.watch(&*poller, 8).unwrap();
    assert_eq!(ready(&*poller), [7]);
    let mut buf = [0u8; 16];
    assert_eq!(from_a.read_ready(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"early");
    assert_eq!(
        from_a.read_ready(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert!(ready(&*poller).is_empty(), "nothing new to read");

    a.write_all(b"x").unwrap();
    drop(b);
    assert_eq!(ready(&*poller), [7, 8]);
    let mut from_b = from_b;
    assert_eq!(from_b.read_ready(&mut buf).unwrap(), 0, "b's end");

    // Unwatched, a connection is no longer reported; a wake ends a wait at once.
    from_a.unwatch(&*poller).unwrap();
    a.write_all(b"y").unwrap();
    poller.wake().unwrap();
    let mut tokens = Vec::new();
    poller.wait(&mut tokens, Duration::from_secs(30)).unwrap();
    assert!(tokens.is_empty());
}

#[test]
fn a_frozen_host_reads_nothing_without_waiting_and_its_backlog_is_reported_on_thaw() {
    let network = MemoryNetwork::new();
    let (agent_host, mut agent, mut server) = agent_and_server(&network);
    let poller = agent_host.poller().unwrap();
    agent.watch(&*poller, 1).unwrap();

    network.freeze(ip(2));
    server.write_all(b"queued").unwrap();
    let _ = ready(&*poller);
    let mut buf = [0u8; 16];
    assert_eq!(
        agent.read_ready(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(
        agent.write_unless_stopped(b"beat").unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "a thread serving many hosts is not held by a frozen one"
    );
    network.thaw(ip(2));
    assert_eq!(ready(&*poller), [1]);
    assert_eq!(agent.read_ready(&mut buf).unwrap(), 6);
    agent.write_unless_stopped(b"beat").unwrap();
    let mut got = [0u8; 4];
    server.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"beat");
}

#[test]
fn a_dropped_listener_closes_what_was_never_accepted_and_wakes_accept() {
    let network = MemoryNetwork::new();
    let host = network.host(ip(1));
    let listener = host.bind(any_port(&host)).unwrap();
    let mut pending = host.connect(listener.local_addr().unwrap(), WAIT).unwrap();
    drop(listener);
    let mut buf = [0u8; 1];
    assert_eq!(pending.read(&mut buf).unwrap(), 0);

    let listener = Arc::new(host.bind(any_port(&host)).unwrap());
    let addr = listener.local_addr().unwrap();
    let accepting = {
        let listener = Arc::clone(&listener);
        std::thread::spawn(move || listener.accept().map(|(_, peer)| peer))
    };
    network.cut(ip(1));
    assert!(accepting.join().unwrap().is_err());
    assert!(host.connect(addr, WAIT).is_err());
}

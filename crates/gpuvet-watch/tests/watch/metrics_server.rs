//! The `/metrics` HTTP server on 127.0.0.1:0: `200` with the text format on
//! `GET /metrics`, `404` elsewhere, `400` on garbage, `405` on other methods, `431` on
//! a head too large to be a scrape's, and a client that connects and sends nothing, or
//! half a request, neither hangs the server nor holds up a scrape. Timeouts here only
//! bound the test; nothing asserts on how long anything took.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use gpuvet_watch::health::GpuSample;
use gpuvet_watch::metrics::{Metrics, MetricsServer, ServerOptions};
use gpuvet_watch::policy::GpuId;

/// Anti-hang bound for every client read.
const BOUND: Duration = Duration::from_secs(30);

fn metrics() -> Arc<Metrics> {
    let m = Metrics::new();
    m.observe_sample(&GpuSample {
        gpu: GpuId::new(Some(0), Some("00000000:3B:00.0")),
        temperature_c: Some(65),
        power_mw: Some(250_000),
        ..GpuSample::default()
    });
    Arc::new(m)
}

fn server() -> MetricsServer {
    MetricsServer::bind("127.0.0.1:0".parse().unwrap(), metrics()).unwrap()
}

/// Sends `raw` and reads the whole answer (the server closes after each).
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s.write_all(raw).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("an answer, then close");
    out
}

/// (status code, headers, body).
fn split(answer: &str) -> (u16, String, String) {
    let (head, body) = answer.split_once("\r\n\r\n").expect("a complete answer");
    let status = head.lines().next().unwrap();
    let mut parts = status.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status}");
    let code = parts.next().unwrap().parse().unwrap();
    (code, head.to_owned(), body.to_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn get_metrics_answers_with_the_text_format() {
    let srv = server();
    let addr = srv.local_addr();
    assert_ne!(addr.port(), 0);
    let answer = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
    );
    let (code, head, body) = split(&answer);
    assert_eq!(code, 200, "{answer}");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
    let ct = header(&head, "Content-Type").unwrap();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    assert_eq!(
        header(&head, "Content-Length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        body.len()
    );
    assert!(
        body.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"),
        "{body}"
    );
    let line = body
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
        .unwrap();
    assert_eq!(
        line,
        r#"DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="0000:3b:00",device="nvidia0"} 65"#
    );
    assert!(body.contains("\nDCGM_FI_DEV_POWER_USAGE{"), "{body}");

    // A query string is fine; HTTP/1.0 and bare newlines too.
    let (code, _, _) = split(&exchange(addr, b"GET /metrics?x=1 HTTP/1.0\n\n"));
    assert_eq!(code, 200);
    // HEAD: the headers only.
    let (code, head, body) = split(&exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n"));
    assert_eq!(code, 200);
    assert!(body.is_empty());
    assert!(
        header(&head, "Content-Length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
    srv.stop();
}

#[test]
fn other_paths_methods_and_garbage_are_refused() {
    let srv = server();
    let addr = srv.local_addr();
    for (raw, want) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], 404),
        (b"GET /metricsx HTTP/1.1\r\n\r\n", 404),
        (b"GET /api/metrics HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"garbage\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    ] {
        let answer = exchange(addr, raw);
        let (code, head, _) = split(&answer);
        assert_eq!(code, want, "{raw:?} → {answer}");
        if want == 405 {
            assert_eq!(header(&head, "Allow"), Some("GET, HEAD"));
        }
    }

    // A request cut short (the client closes its side) is bad too.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s.write_all(b"GET /metr").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert_eq!(split(&out).0, 400, "{out}");

    // Still serving after all that.
    assert_eq!(
        split(&exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n")).0,
        200
    );
}

#[test]
fn a_huge_header_is_refused_not_buffered() {
    let srv = server();
    let addr = srv.local_addr();

    // One header line far past any scrape's, never ended: refused once the head passes
    // the cap, and the connection closed.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    big.extend(vec![b'a'; 1024 * 1024]);
    // The server closes before reading everything, so the write may fail, and the
    // close may reset the connection before its answer is read.
    let _ = s.write_all(&big);
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "not closed: {e}"),
    }
    let out = String::from_utf8_lossy(&out);
    if !out.is_empty() {
        assert_eq!(split(&out).0, 431, "{out}");
    }

    // Too many header fields (40 of at most 32), in a head small enough to be read in
    // one go: the answer arrives.
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        many.extend(format!("X-{i}: y\r\n").bytes());
    }
    many.extend(b"\r\n");
    let answer = exchange(addr, &many);
    assert_eq!(split(&answer).0, 431, "{answer}");

    assert_eq!(
        split(&exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n")).0,
        200
    );
}

#[test]
fn a_silent_client_neither_hangs_the_server_nor_holds_up_a_scrape() {
    let srv = MetricsServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        metrics(),
        ServerOptions {
            request_timeout: Duration::from_millis(200),
            ..ServerOptions::default()
        },
    )
    .unwrap();
    let addr = srv.local_addr();

    // Connects and sends nothing.
    let mut silent = TcpStream::connect(addr).unwrap();
    silent.set_read_timeout(Some(BOUND)).unwrap();
    // Sends half a request and stops.
    let mut half = TcpStream::connect(addr).unwrap();
    half.set_read_timeout(Some(BOUND)).unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();

    // A scrape meanwhile is answered.
    let (code, _, body) = split(&exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n"));
    assert_eq!(code, 200);
    assert!(body.contains("DCGM_FI_DEV_GPU_TEMP"));

    // The silent one is closed unanswered once its time is up (not left open: a
    // read that hit BOUND would be an error here).
    let mut buf = Vec::new();
    silent
        .read_to_end(&mut buf)
        .expect("closed by the server, not timed out");
    assert!(buf.is_empty(), "{:?}", String::from_utf8_lossy(&buf));
    // The half request gets a 408.
    let mut out = String::new();
    half.read_to_string(&mut out).unwrap();
    assert_eq!(split(&out).0, 408, "{out}");

    // And stopping does not wait for anyone.
    let _idle = TcpStream::connect(addr).unwrap();
    srv.stop();
}

#[test]
fn stop_and_drop_release_the_port() {
    let srv = server();
    let addr = srv.local_addr();
    srv.stop();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );

    let srv = server();
    let addr = srv.local_addr();
    drop(srv);
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after drop"
    );
}

#[test]
fn binding_a_busy_port_is_an_error() {
    let srv = server();
    let err = MetricsServer::bind(srv.local_addr(), metrics()).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot listen for /metrics on 127.0.0.1:"),
        "{err}"
    );
}

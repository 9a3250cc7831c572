//! A node's fetch of the fleet's baselines (`gpuvet.baseline_from: server`) from a fake
//! server on loopback: the list read back, the path it asks for, a refusal and a server
//! that is down each an error the node can fall back on.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use gpuvet_model::catalog::CheckName;
use gpuvet_push::PushError;
use gpuvet_push::fetch::ServerReader;

/// Answers one request with `status` and `body`; sends back the request line.
fn serve_once(status: u16, body: &'static str) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream);
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
        }
        let _ = tx.send(request_line.trim_end().to_owned());
        let _ = write!(
            reader.get_mut(),
            "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    (url, rx)
}

#[test]
fn the_fleets_baselines_are_read_from_the_api() {
    let (url, requests) = serve_once(
        200,
        r#"[{"model":"NVIDIA H200","check":"gemm_flops","results":40,"median":700.0,"spread_pct":1.5,"limit":630.0}]"#,
    );
    let baselines = ServerReader::new(&url, None).fleet_baselines().unwrap();
    assert_eq!(requests.recv().unwrap(), "GET /api/v1/baselines HTTP/1.1");
    assert_eq!(baselines.len(), 1);
    assert_eq!(baselines[0].model, "NVIDIA H200");
    assert_eq!(baselines[0].check, CheckName::GemmFlops);
    assert_eq!(baselines[0].limit, 630.0);
}

#[test]
fn a_refusal_or_a_server_that_is_down_is_an_error() {
    let (url, _requests) = serve_once(500, r#"{"error":{"message":"the store is down"}}"#);
    let error = ServerReader::new(&url, None).fleet_baselines().unwrap_err();
    assert!(
        matches!(error, PushError::Refused { status: 500, .. }),
        "{error:?}"
    );
    let down = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let error = ServerReader::new(&down, None)
        .with_timeout(Duration::from_secs(2))
        .fleet_baselines()
        .unwrap_err();
    assert!(matches!(error, PushError::Unreachable { .. }), "{error:?}");
}

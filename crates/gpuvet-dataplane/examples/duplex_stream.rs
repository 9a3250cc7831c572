//! The ceiling a collective over one TCP link can reach, for the veth benchmark: two
//! processes stream to each other at once, with no reduction or protocol at all.
//!
//! ```text
//! duplex_stream --listen 10.0.0.2:29700 [--buffer 64M] [--threads 2] [--connections 2] [--seconds 5]
//! duplex_stream --connect 10.0.0.2:29700 [--buffer 64M] [--threads 2] [--connections 2] [--seconds 5]
//! ```
//!
//! `--buffer` is the memory each direction cycles through, up to 512 KiB per system
//! call. A small one (`128K`, what iperf3 reuses) stays in cache on both ends; a large
//! one (`64M`, the default) makes the kernel copy real data to and from memory, as a
//! collective does. `--threads 2` writes and reads on two blocking threads, as gpuvet's
//! TCP engine does; `--threads 1` on one thread with non-blocking calls and `poll`, as
//! iperf3 3.12 does. `--connections 2` sends each direction on its own one-way
//! connection, as gpuvet's data plane and iperf3 `--bidir` do; `--connections 1` both
//! on one, where a reader and a writer contend for the socket's lock. Output:
//! `recv_gbps=` (Gbit/s received while both directions ran).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The most one system call moves.
const CHUNK: usize = 512 << 10;

struct Options {
    listen: Option<SocketAddr>,
    connect: Option<SocketAddr>,
    buffer: usize,
    one_thread: bool,
    one_connection: bool,
    seconds: f64,
}

fn parse_size(value: &str) -> Option<usize> {
    let (digits, unit) = match value.as_bytes().last()? {
        b'K' | b'k' => (&value[..value.len() - 1], 1 << 10),
        b'M' | b'm' => (&value[..value.len() - 1], 1 << 20),
        _ => (value, 1),
    };
    digits.parse::<usize>().ok().map(|n| n * unit)
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        listen: None,
        connect: None,
        buffer: 64 << 20,
        one_thread: false,
        one_connection: false,
        seconds: 5.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("`{flag}` needs a value"))?;
        let bad = |what: &str| format!("`{flag}`: `{value}` is not {what}");
        match flag.as_str() {
            "--listen" => options.listen = Some(value.parse().map_err(|_| bad("an IP:port"))?),
            "--connect" => options.connect = Some(value.parse().map_err(|_| bad("an IP:port"))?),
            "--buffer" => {
                options.buffer = parse_size(&value)
                    .filter(|&n| n >= 4096)
                    .ok_or_else(|| bad("a size of at least 4K"))?
            }
            "--threads" => {
                options.one_thread = match value.as_str() {
                    "1" => true,
                    "2" => false,
                    _ => return Err(bad("1 or 2")),
                }
            }
            "--connections" => {
                options.one_connection = match value.as_str() {
                    "1" => true,
                    "2" => false,
                    _ => return Err(bad("1 or 2")),
                }
            }
            "--seconds" => {
                options.seconds = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0)
                    .ok_or_else(|| bad("a positive number"))?
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if options.listen.is_some() == options.connect.is_some() {
        return Err("give exactly one of `--listen` and `--connect`".to_owned());
    }
    Ok(options)
}

/// The connection this end writes on and the one it reads from: one each way, or the
/// same one. Each of the connector's connections opens with a byte that says which
/// way it goes (0: the connector writes), so the listener need not trust the order.
fn connections(options: &Options) -> std::io::Result<(TcpStream, TcpStream)> {
    let count = if options.one_connection { 1 } else { 2 };
    let mut streams = Vec::with_capacity(count);
    if let Some(addr) = options.listen {
        let listener = TcpListener::bind(addr)?;
        for _ in 0..count {
            let (mut stream, _) = listener.accept()?;
            let mut way = [0u8];
            stream.read_exact(&mut way)?;
            streams.push((way[0], stream));
        }
        // The listener reads what the connector writes (way 0).
        streams.sort_by_key(|(way, _)| std::cmp::Reverse(*way));
    } else {
        let addr = options.connect.expect("parse checks one is set");
        for way in 0..count as u8 {
            let mut stream = connect(addr)?;
            stream.write_all(&[way])?;
            streams.push((way, stream));
        }
    }
    for (_, stream) in &streams {
        // As gpuvet's data plane sets it.
        stream.set_nodelay(true)?;
    }
    let writer = streams[0].1.try_clone()?;
    let reader = streams.pop().expect("at least one connection").1;
    Ok((writer, reader))
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(stream) => return Ok(stream),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
            Err(err) => return Err(err),
        }
    }
}

// A command-line tool: its output is the point.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(gbps) => {
            println!("recv_gbps={gbps:.3} buffer={}", options.buffer);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options) -> std::io::Result<f64> {
    let (mut writer, mut reader) = connections(options)?;
    let seconds = Duration::from_secs_f64(options.seconds);
    let buffer = options.buffer;
    let chunk = CHUNK.min(buffer);
    // Whole chunks only, so every call moves a full one.
    let cycle = buffer - buffer % chunk;
    if options.one_thread {
        return one_thread((writer, reader), seconds, chunk, cycle);
    }
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let data: Vec<u8> = (0..cycle).map(|i| i as u8).collect();
        let started = Instant::now();
        let mut offset = 0;
        // Writes a little longer than the reader measures, so both directions run for
        // the whole measured time.
        while started.elapsed() < seconds + Duration::from_millis(500) {
            writer.write_all(&data[offset..offset + chunk])?;
            offset = (offset + chunk) % cycle;
        }
        writer.shutdown(std::net::Shutdown::Write)
    });
    let mut data = vec![0u8; cycle];
    let mut offset = 0;
    let mut received = 0u64;
    let mut measured = None;
    let started = Instant::now();
    loop {
        let end = (offset + chunk).min(cycle);
        let n = reader.read(&mut data[offset..end])?;
        if n == 0 {
            break;
        }
        received += n as u64;
        offset = if offset + n >= cycle { 0 } else { offset + n };
        if measured.is_none() && started.elapsed() >= seconds {
            measured = Some(received as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e9);
        }
    }
    sender.join().expect("the writer thread does not panic")?;
    Ok(measured.unwrap_or(received as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e9))
}

/// Both directions on this thread: write and read whatever the socket takes, and wait
/// in `poll` only when neither moved a byte.
fn one_thread(
    (mut writer, mut reader): (TcpStream, TcpStream),
    seconds: Duration,
    chunk: usize,
    cycle: usize,
) -> std::io::Result<f64> {
    use std::os::fd::AsRawFd;
    writer.set_nonblocking(true)?;
    reader.set_nonblocking(true)?;
    let out: Vec<u8> = (0..cycle).map(|i| i as u8).collect();
    let mut data = vec![0u8; cycle];
    let (mut send_at, mut send_end, mut recv_at) = (0usize, chunk, 0usize);
    let mut received = 0u64;
    let mut measured = None;
    let mut writing = true;
    let started = Instant::now();
    loop {
        let mut progressed = false;
        if writing {
            if started.elapsed() >= seconds + Duration::from_millis(500) {
                writer.shutdown(std::net::Shutdown::Write)?;
                writing = false;
            } else {
                match writer.write(&out[send_at..send_end]) {
                    Ok(n) => {
                        progressed = true;
                        send_at += n;
                        if send_at == send_end {
                            send_at %= cycle;
                            send_end = send_at + chunk;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let end = (recv_at + chunk).min(cycle);
        match reader.read(&mut data[recv_at..end]) {
            Ok(0) => break,
            Ok(n) => {
                progressed = true;
                received += n as u64;
                recv_at = if recv_at + n >= cycle { 0 } else { recv_at + n };
                if measured.is_none() && started.elapsed() >= seconds {
                    measured = Some(received as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e9);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if !progressed {
            let mut fds = [
                libc::pollfd {
                    fd: reader.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: writer.as_raw_fd(),
                    events: if writing { libc::POLLOUT } else { 0 },
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
        }
    }
    Ok(measured.unwrap_or(received as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e9))
}

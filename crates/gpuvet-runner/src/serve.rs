//! The worker process's side of the pipe protocol: build nothing, trust nothing, run
//! the units the runner asks for and answer each as it finishes.

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::os::fd::FromRawFd;
use std::sync::{Arc, mpsc};

use gpuvet_backend::{Backend, CancelToken, with_causes};

use crate::RunnerError;
use crate::protocol::{self, FromWorker, PROTOCOL};

/// Serves the runner that started this worker: says hello (or, when `backend` could
/// not be built, why not), then runs each request's units concurrently and writes one
/// line per finished unit, until `input` ends.
///
/// The worker's work is never cancelled from here: the runner kills the process
/// instead, which is the point of having one.
pub fn serve_worker(
    backend: Result<Arc<dyn Backend>, Box<dyn Error + Send + Sync>>,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), RunnerError> {
    let backend = match backend {
        Ok(backend) => backend,
        Err(error) => {
            // Only text crosses the pipe: the error with its causes on one line.
            let message = with_causes(&*error);
            write_line(&mut output, &FromWorker::Fatal { message })?;
            return Ok(());
        }
    };
    write_line(
        &mut output,
        &FromWorker::Hello {
            protocol: PROTOCOL,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            backend: backend.name().to_owned(),
            devices: backend.devices().iter().map(|d| d.index).collect(),
        },
    )?;
    let cancel = CancelToken::new();
    let mut input = input;
    let mut line = String::new();
    loop {
        line.clear();
        // Bounded: a line longer than the protocol's is refused, not buffered.
        let read = (&mut input)
            .take(protocol::MAX_LINE_BYTES as u64 + 1)
            .read_line(&mut line)
            .map_err(|source| RunnerError::Io {
                what: "cannot read the runner's request".to_owned(),
                source,
            })?;
        if read == 0 {
            break;
        }
        if line.len() > protocol::MAX_LINE_BYTES && !line.ends_with('\n') {
            return fatal(
                &mut output,
                RunnerError::LineTooLong {
                    max: protocol::MAX_LINE_BYTES,
                },
            );
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        let request = protocol::decode_request(line).and_then(|request| {
            let work = request.work.to_spec()?;
            Ok((request, work))
        });
        let (request, work) = match request {
            Ok(request) => request,
            Err(why) => return fatal(&mut output, why),
        };
        let (tx, rx) = mpsc::channel();
        for (slot, devices) in request.units.into_iter().enumerate() {
            let backend = Arc::clone(&backend);
            let cancel = cancel.clone();
            let tx = tx.clone();
            let check = request.check;
            gpuvet_threads::spawn_detached(format!("{check}-{slot}"), move || {
                let result = crate::work::run_unit(&*backend, check, &devices, &work, &cancel);
                let _ = tx.send((slot, result));
            })
            .map_err(|source| RunnerError::Io {
                what: "cannot start a unit's thread".to_owned(),
                source,
            })?;
        }
        drop(tx);
        // Every unit answers, or hangs and the runner kills this process.
        for (slot, result) in rx {
            write_line(
                &mut output,
                &FromWorker::Unit {
                    round: request.round,
                    slot,
                    result: result.into(),
                },
            )?;
        }
    }
    Ok(())
}

/// Tells the runner why this worker cannot read its request, and gives up.
fn fatal(output: &mut impl Write, why: RunnerError) -> Result<(), RunnerError> {
    let error = RunnerError::BadRequest {
        source: Box::new(why),
    };
    write_line(
        output,
        &FromWorker::Fatal {
            message: with_causes(&error),
        },
    )?;
    Err(error)
}

fn write_line(output: &mut impl Write, message: &FromWorker) -> Result<(), RunnerError> {
    let mut line = protocol::encode(message);
    line.push('\n');
    output
        .write_all(line.as_bytes())
        .and_then(|()| output.flush())
        .map_err(|source| RunnerError::Io {
            what: "cannot answer the runner".to_owned(),
            source,
        })
}

/// Takes this process's stdout for the protocol and points fd 1 at stderr, so that a
/// library printing to stdout (NCCL with `NCCL_DEBUG`, a driver's banner) cannot
/// corrupt the protocol. The returned file is not inherited by children.
pub fn protocol_output() -> Result<File, RunnerError> {
    let io = |what: &str| RunnerError::Io {
        what: what.to_owned(),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: plain fd syscalls on fds this process owns; the new fd is owned by the
    // returned `File` alone.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(io("cannot take stdout for the protocol"));
        }
        if libc::dup2(2, 1) < 0 {
            let err = io("cannot point stdout at stderr");
            libc::close(fd);
            return Err(err);
        }
        Ok(File::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_backend::WorkSpec;
    use gpuvet_backend::sim::SimBackend;
    use gpuvet_model::catalog::CheckName;
    use gpuvet_model::config::{SimFault, SimScript};

    use crate::protocol::{Request, WireResult, WireWork, decode_from_worker};

    fn sim(faults: Vec<(CheckName, u32, SimFault)>) -> Arc<dyn Backend> {
        Arc::new(SimBackend::new(SimScript {
            devices: 2,
            faults,
            ..SimScript::default()
        }))
    }

    fn request(round: u64, check: CheckName, units: Vec<Vec<u32>>) -> String {
        protocol::encode(&Request {
            round,
            check,
            work: WireWork::from(&WorkSpec::default()),
            units,
        }) + "\n"
    }

    fn lines(output: &[u8]) -> Vec<FromWorker> {
        std::str::from_utf8(output)
            .unwrap()
            .lines()
            .map(|line| decode_from_worker(line).unwrap())
            .collect()
    }

    #[test]
    fn a_line_over_the_bound_is_refused_unbuffered() {
        // Endless input without a newline: read up to the bound, then refused.
        let endless = std::io::BufReader::new(std::io::repeat(b' '));
        let mut output = Vec::new();
        let err = serve_worker(Ok(sim(Vec::new())), endless, &mut output).unwrap_err();
        let expected =
            "the worker cannot read the runner's request: a line longer than `16777216` bytes";
        assert_eq!(
            err.to_string(),
            "the worker cannot read the runner's request"
        );
        assert!(
            matches!(&err, RunnerError::BadRequest { source } if matches!(**source, RunnerError::LineTooLong { max: 16777216 })),
            "{err:?}"
        );
        assert_eq!(with_causes(&err), expected);
        assert!(matches!(
            &lines(&output)[1],
            FromWorker::Fatal { message } if message == expected
        ));
        // A line of exactly the bound (with its newline) is read: blank, so skipped.
        let at_limit = format!("{}\n", " ".repeat(protocol::MAX_LINE_BYTES - 1));
        let mut output = Vec::new();
        serve_worker(Ok(sim(Vec::new())), at_limit.as_bytes(), &mut output).unwrap();
        assert_eq!(lines(&output).len(), 1);
    }

    #[test]
    fn says_hello_then_answers_every_unit_of_every_round() {
        let input = request(1, CheckName::GemmFlops, vec![vec![0], vec![1]])
            + "\n"
            + &request(2, CheckName::AllReduce1, vec![vec![0, 1]]);
        let faults = vec![(CheckName::GemmFlops, 1, SimFault::Error)];
        let mut output = Vec::new();
        serve_worker(Ok(sim(faults)), input.as_bytes(), &mut output).unwrap();
        let lines = lines(&output);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(
            lines[0],
            FromWorker::Hello {
                protocol: PROTOCOL,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                backend: "sim".to_owned(),
                devices: vec![0, 1],
            }
        );
        let mut first_round: Vec<(u64, usize, bool)> = lines[1..3]
            .iter()
            .map(|line| match line {
                FromWorker::Unit {
                    round,
                    slot,
                    result,
                } => (*round, *slot, matches!(result, WireResult::Ok(_))),
                other => panic!("not a unit: {other:?}"),
            })
            .collect();
        first_round.sort();
        assert_eq!(first_round, [(1, 0, true), (1, 1, false)]);
        assert!(matches!(
            &lines[3],
            FromWorker::Unit {
                round: 2,
                slot: 0,
                result: WireResult::Ok(_)
            }
        ));
    }

    #[test]
    fn a_runner_that_stopped_reading_is_an_io_error_with_its_cause() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let err = serve_worker(Ok(sim(Vec::new())), "".as_bytes(), Closed).unwrap_err();
        let RunnerError::Io { what, source } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(what, "cannot answer the runner");
        assert_eq!(source.kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(err.to_string(), "cannot answer the runner");
    }

    #[test]
    fn a_backend_that_cannot_be_built_is_reported_not_served() {
        let mut output = Vec::new();
        let unavailable = gpuvet_backend::BackendError::Unavailable {
            backend: "cuda",
            reason: "no libcuda".to_owned(),
        };
        serve_worker(
            Err(Box::new(unavailable)),
            request(1, CheckName::GemmFlops, vec![vec![0]]).as_bytes(),
            &mut output,
        )
        .unwrap();
        assert_eq!(
            lines(&output),
            [FromWorker::Fatal {
                message: "the `cuda` backend is not available: no libcuda".to_owned()
            }]
        );
    }

    #[test]
    fn an_unreadable_request_is_answered_with_why_and_ends_the_worker() {
        let mut output = Vec::new();
        let err =
            serve_worker(Ok(sim(Vec::new())), "hello?\n".as_bytes(), &mut output).unwrap_err();
        assert!(matches!(err, RunnerError::BadRequest { .. }), "{err}");
        let lines = lines(&output);
        assert_eq!(lines.len(), 2);
        let FromWorker::Fatal { message } = &lines[1] else {
            panic!("{lines:?}");
        };
        assert!(
            message.starts_with(
                "the worker cannot read the runner's request: an unreadable line `hello?`"
            ),
            "{message}"
        );
    }
}

//! `gpuvet-server`: the fleet server, a gpuvet store over HTTP. Its own program, so that
//! the binary every GPU node runs links neither tokio, axum nor a PostgreSQL client;
//! `gpuvet serve ARGS` runs it when it is installed beside `gpuvet`.
//!
//! A thin entry point: parse the command line, resolve the settings once, serve until
//! SIGTERM or SIGINT (reloading the TLS files on SIGHUP), and exit with a code from
//! `gpuvet_model::exit_codes`.

mod settings;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use gpuvet_model::diagnostics::render_error;
use gpuvet_model::exit_codes;
use gpuvet_server::pool::StorePool;
use gpuvet_server::{Server, ServerEvent, ServerTls};

use crate::settings::{Args, Failure, Settings};

fn main() -> ExitCode {
    let args = Args::parse();
    let code = match serve(args) {
        Ok(()) => exit_codes::SUCCESS,
        Err(failure) => {
            stderr(&render_error(
                failure.error.as_ref(),
                failure.hint.as_deref(),
            ));
            failure.code
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn serve(args: Args) -> Result<(), Failure> {
    let settings = Settings::resolve(args)?;
    for warning in settings.warnings() {
        stderr(&format!("warning: {warning}\n"));
    }
    let pool = StorePool::new(settings.store.clone()).map_err(Failure::store)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(exit_codes::INTERNAL, e))?;
    runtime.block_on(async {
        let mut server = Server::bind(settings.listen, pool, settings.token.clone())
            .await
            .map_err(|e| {
                Failure::new(exit_codes::USAGE, e).with_hint(
                    "pick another address with `--listen IP:PORT` (port 0 picks a free one)",
                )
            })?
            .with_read_token(settings.read_token.as_deref())
            .with_limits(settings.limits)
            .on_event(Arc::new(report_event))
            .with_event_limits(settings.event_limits);
        if let Some(retention) = settings.retention {
            server = server.with_retention(retention);
        }
        if let Some(tls) = &settings.tls {
            server = server.with_tls(tls.clone());
            tokio::spawn(reload_on_sighup(tls.clone()));
        }
        let addr = server
            .local_addr()
            .map_err(|e| Failure::new(exit_codes::INTERNAL, e))?;
        stderr(&format!(
            "gpuvet serve: listening on {}://{addr} (store `{}`)\n",
            settings.scheme(),
            settings.store
        ));
        server
            .run(shutdown_signal())
            .await
            .map_err(|e| Failure::new(exit_codes::INTERNAL, e))
    })
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM can be watched");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT can be watched");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Reads the TLS files again on every SIGHUP; a failed reload keeps the certificate in
/// use and says why.
async fn reload_on_sighup(tls: Arc<ServerTls>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        stderr("warning: SIGHUP cannot be watched: the TLS files will not be reloaded\n");
        return;
    };
    while hangup.recv().await.is_some() {
        match tls.reload() {
            Ok(()) => stderr(&format!(
                "gpuvet serve: reloaded the TLS certificate `{}`\n",
                tls.files().cert.display()
            )),
            Err(error) => stderr(&render_error(
                &error,
                Some(
                    "fix the file and send SIGHUP again; the previous certificate is still served",
                ),
            )),
        }
    }
}

fn report_event(event: ServerEvent) {
    match event {
        ServerEvent::Refused {
            count,
            max_connections,
        } => stderr(&format!(
            "warning: refused {count} connection(s) with 503: `{max_connections}` were open, the limit (`--max-connections`)\n"
        )),
        ServerEvent::AcceptFailed { error } => {
            stderr(&format!("warning: cannot accept a connection: {error}\n"));
        }
        ServerEvent::Pruned {
            attempts,
            events,
            keep_days,
        } => stderr(&format!(
            "gpuvet serve: deleted {attempts} attempt(s) with their reports and {events} event(s) older than {keep_days} days (`--keep-days`)\n"
        )),
        ServerEvent::PruneFailed { error } => stderr(&format!(
            "warning: deleting what is older than `--keep-days` failed, and will be tried again: {error}\n"
        )),
        _ => {}
    }
}

/// Writes `text` to stderr in one call; nowhere is left to report a failure to.
fn stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

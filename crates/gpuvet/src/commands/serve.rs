//! `gpuvet serve`: the store over HTTP (API, pages, metrics) until SIGTERM or SIGINT.

use gpuvet_core::exit_codes;
use gpuvet_server::pool::StorePool;
use gpuvet_server::{Server, TOKEN_ENV};
use gpuvet_store::StoreLocation;

use crate::cli::ServeArgs;
use crate::failure::{Failure, warn};
use crate::identity::{load_config, store_path};
use crate::output;

pub fn serve(args: ServeArgs) -> Result<i32, Failure> {
    let config = load_config(args.config.as_deref())?;
    let location = match &args.store {
        Some(value) => StoreLocation::parse(value),
        // The config's `gpuvet.store` may be a URL too.
        None => StoreLocation::parse(&store_path(None, &config).to_string_lossy()),
    };
    let pool = StorePool::new(location.clone())?;
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    if token.is_none() {
        warn(format!(
            "`{TOKEN_ENV}` is not set: the server takes no pushed reports or events"
        ));
    }
    if !args.listen.ip().is_loopback() && token.is_none() {
        warn(format!(
            "listening on `{}`, reachable from other machines: its data can be read there",
            args.listen
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::bug(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let server = Server::bind(args.listen, pool, token).await.map_err(|e| {
            Failure::usage(e)
                .with_hint("pick another address with `--listen IP:PORT` (port 0 picks a free one)")
        })?;
        let addr = server.local_addr().map_err(Failure::bug)?;
        output::stderr(&format!(
            "gpuvet serve: listening on http://{addr} (store `{location}`)\n"
        ));
        server
            .run(shutdown_signal())
            .await
            .map_err(|e| Failure::new(exit_codes::INTERNAL, e))
    })?;
    Ok(exit_codes::SUCCESS)
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

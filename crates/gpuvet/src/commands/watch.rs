//! `gpuvet watch`: the runtime check `c4d` in the foreground, as a per-node daemon
//! (DaemonSet-style). Findings go to stdout and to the store as `RuntimeCheckFailed`.

use std::time::Duration;

use gpuvet_model::exit_codes;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::cli::WatchArgs;
use crate::cluster::Cluster;
use crate::failure::Failure;
use crate::output;
use crate::runtime::{Echo, RuntimeWatch};
use crate::settings::Recording;

pub fn watch(args: WatchArgs) -> Result<i32, Failure> {
    let mut recording = Recording::resolve(args.config.as_deref(), &args.identity, &args.store)?;
    if args.metrics_addr.is_some() {
        recording.config.settings.watch.metrics_addr = args.metrics_addr;
    }
    let duration = match args.duration {
        Some(secs) if !(secs.is_finite() && secs > 0.0) => {
            return Err(Failure::usage(format!(
                "`--duration {secs}` is not usable; expected seconds greater than 0"
            )));
        }
        other => other.map(Duration::from_secs_f64),
    };
    let (store, attempt) = recording.begin()?;
    // The watch opens its own handles from the path.
    drop(store);
    let mut signals = Signals::new([SIGTERM, SIGINT])
        .map_err(|err| Failure::bug_from("cannot install signal handlers", err))?;
    let echo = if args.json {
        Echo::JsonLines
    } else {
        Echo::Stdout
    };
    let sending = recording.start_sending();
    // In a DaemonSet pod (feature `k8s`), findings are also Events on the pod and node.
    let cluster = Cluster::detect(&recording.config, &attempt);
    let Some(watch) = RuntimeWatch::start(
        &recording.config.settings.watch,
        recording
            .store
            .as_deref()
            .map(|path| (path, recording.queue_pushes)),
        &attempt,
        echo,
        None,
        cluster,
    ) else {
        return Err(Failure::usage("the runtime check has no source to watch on this machine")
            .with_hint("point `gpuvet.watch.kmsg` at a readable kernel log, or run where NVML is available"));
    };
    match duration {
        Some(duration) => {
            // Either the time runs out or a signal ends the watch early.
            let (tx, rx) = std::sync::mpsc::channel();
            let handle = signals.handle();
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    let _ = tx.send(());
                }
            });
            let _ = rx.recv_timeout(duration);
            handle.close();
        }
        None => {
            signals.forever().next();
        }
    }
    let recorded = watch.stop();
    drop(sending);
    output::stderr(&format!("c4d: stopped; {recorded} findings recorded\n"));
    Ok(exit_codes::SUCCESS)
}

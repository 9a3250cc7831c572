//! `gpuvet push`: send what waits in the store's outbox to the server now, whatever
//! each entry's next try, and say what is left.

use gpuvet_model::exit_codes;
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::Store;

use crate::cli::PushArgs;
use crate::failure::Failure;
use crate::identity::{load_config, store_path, this_node};
use crate::output;
use crate::push::pusher;

pub fn push(args: PushArgs) -> Result<i32, Failure> {
    let config = load_config(args.config.as_deref())?;
    let Some(pusher) = pusher(&config, &args.to, &this_node())? else {
        return Err(Failure::usage("there is no server to push to")
            .with_hint("set `gpuvet.report_to` in the config, or pass `--to http://HOST:PORT`"));
    };
    let path = store_path(args.store.store.as_deref(), &config);
    if !path.exists() {
        return Err(
            Failure::usage(format!("there is no store at `{}`", path.display())).with_hint(
                "pass the store that `gpuvet check` or `gpuvet run` wrote with `--store`",
            ),
        );
    }
    let mut store = Store::open(&path)?;
    let drained = gpuvet_push::drain(&mut store, &pusher, unix_now_ms, true)
        .map_err(|e| Failure::new(exit_codes::STORE_ERROR, e))?;
    let mut text = format!(
        "sent {} to {}; {} waiting in the outbox\n",
        drained.sent,
        pusher.describe(),
        drained.waiting
    );
    if let Some(error) = &drained.last_error {
        text.push_str(&format!("last error: {error}\n"));
    }
    output::stdout(&text)?;
    Ok(if drained.waiting == 0 {
        exit_codes::SUCCESS
    } else {
        exit_codes::PUSH_PENDING
    })
}

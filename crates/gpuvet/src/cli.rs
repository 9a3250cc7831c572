//! The command line: subcommands, flags and the environment variables behind them.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use gpuvet_model::config::BackendChoice;

/// The exit codes for `--help`, from the one table of them in `gpuvet_model::exit_codes`.
fn exit_codes_help() -> String {
    let mut help = String::from("Exit codes:\n");
    for (code, _, meaning) in gpuvet_model::exit_codes::ALL {
        help.push_str(&format!("  {code:<4} {meaning}\n"));
    }
    help.push_str(
        "Once `run` has started the app, gpuvet exits with the app's code (128+N if signal N killed it).",
    );
    help
}

/// Vets the GPUs and links of a GPU service before it starts.
#[derive(Debug, Parser)]
#[command(name = "gpuvet", version, about, after_help = exit_codes_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sanity checks on this node and report what is faulty or slow.
    Check(CheckArgs),
    /// Run the sanity checks, then start CMD or not, as `fail_action` says.
    Run(RunArgs),
    /// List deployment events from the store.
    Events(EventsArgs),
    /// List sanity-check results from the store.
    Results(ResultsArgs),
    /// List the check catalog: names, scopes, metrics and PAI's time estimates.
    Checks(CatalogArgs),
    /// Run the runtime check `c4d` in the foreground (e.g. as a per-node daemon) until
    /// SIGTERM or SIGINT.
    Watch(WatchArgs),
    /// Analyze PyTorch flight-recorder dumps: which rank did not join or finish a
    /// collective (the first error), and which ranks only waited on it.
    Fr(FrArgs),
    /// Print one attempt's timeline: every node's checks, incidents, findings and
    /// events on the coordinator's clock, with the first error marked.
    Timeline(TimelineArgs),
    /// Pack one attempt into a `.tar.gz` for the team that owns its fault: timeline,
    /// reports, inventories, events, findings and the config without its secrets.
    Bundle(BundleArgs),
    /// Name an attempt's first error, its lane and team, the next step, and a
    /// conclusion for each hypothesis, from the store or from a bundle.
    Explain(ExplainArgs),
    /// Rehearse faults: run named scenarios on a sim group, and show for each
    /// expectation (entity, lane, first error, action) whether it was confirmed.
    Drill(DrillArgs),
    /// Serve the store over HTTP: a JSON API under /api/v1, web pages and /metrics.
    /// Writes (pushed reports and events) need `GPUVET_REPORT_TOKEN`.
    ///
    /// Runs the fleet server, `gpuvet-server`, installed beside gpuvet; `gpuvet serve
    /// --help` is its help.
    #[command(disable_help_flag = true)]
    Serve(ServeArgs),
    /// Send the reports and events waiting in the store's outbox to the server now.
    Push(PushArgs),
    /// Show one node across jobs: every run, each check's figures over time, its
    /// findings and quarantines, and whether it is a repeat offender.
    History(HistoryArgs),
    /// Lift the quarantine taint (`gpuvet.io/unhealthy`) that `fail_action: rebuild` put
    /// on a Kubernetes node, with the kubeconfig's credentials (needs the feature `k8s`).
    Untaint(UntaintArgs),
    /// Lift the drain that `fail_action: rebuild` put on a Slurm node, once a passing
    /// run on the node is recorded after the drain (`--force --reason`: without one).
    Undrain(UndrainArgs),
    /// Record the end of a Slurm job on this node, as Slurm's `Epilog`: a `JobEnded`
    /// event on the node's latest attempt of the job, when gpuvet ran in it.
    Epilog(EpilogArgs),
    /// Run one check's device work for the gpuvet that started this process, over a
    /// pipe protocol on stdin and stdout (internal).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// Flags shared by `check` and `run`.
#[derive(Debug, Args)]
pub struct SanityArgs {
    /// Config file: PAI's `aimaster` JSON, optionally with a `gpuvet` section.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Backend that runs the checks [default: the config's, else auto].
    #[arg(long)]
    pub backend: Option<BackendArg>,
    /// Number of logical devices for the cpu backend [default: the core count, at most 8].
    #[arg(long, value_name = "N")]
    pub cpu_devices: Option<u32>,
    /// Checks to run, comma-separated; replaces `micro_benchmarks` from the config.
    #[arg(long, value_name = "LIST")]
    pub checks: Option<String>,
    /// Overall timeout for all checks, in minutes; replaces `timeout` from the config.
    #[arg(long, value_name = "MINUTES")]
    pub timeout: Option<f64>,
    /// Also write the report as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page to FILE (charts and
    /// findings; opens in a browser without a server).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Show every parameter and whole reasons in the table (JSON always has them).
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub group: GroupArgs,
}

/// The values of `--backend`: the backends the config's `gpuvet.backend` names, in the
/// same words. (No doc comments on the variants: clap would print them in `--help`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Cuda,
    Cpu,
    Sim,
}

impl From<BackendArg> for BackendChoice {
    fn from(arg: BackendArg) -> Self {
        match arg {
            BackendArg::Auto => BackendChoice::Auto,
            BackendArg::Cuda => BackendChoice::Cuda,
            BackendArg::Cpu => BackendChoice::Cpu,
            BackendArg::Sim => BackendChoice::Sim,
        }
    }
}

/// Where this node's group meets. Each flag overrides the environment launchers set;
/// without a group size above 1 the checks run on this node alone.
#[derive(Debug, Args)]
#[command(next_help_heading = "Group")]
pub struct GroupArgs {
    /// Host of the coordinator (rank 0) [env: MASTER_ADDR, else LWS_LEADER_ADDRESS].
    #[arg(long, value_name = "HOST")]
    pub master_addr: Option<String>,
    /// gpuvet's control port on the coordinator [env: GPUVET_PORT; default: 29517].
    #[arg(long, value_name = "PORT")]
    pub gpuvet_port: Option<u16>,
    /// This node's rank, from 0 [env: NODE_RANK, GROUP_RANK, else LWS_WORKER_INDEX].
    #[arg(long, value_name = "N")]
    pub node_rank: Option<u32>,
    /// Number of nodes in the group [env: NNODES, else LWS_GROUP_SIZE; default: 1].
    #[arg(long, value_name = "N")]
    pub nnodes: Option<u32>,
    /// The group's shared secret, at least 16 bytes (e.g. `openssl rand -hex 32`);
    /// prefer the environment, which `ps` does not show [env: GPUVET_TOKEN].
    #[arg(long, value_name = "SECRET")]
    pub token: Option<String>,
    /// IP this node's data plane listens on [default: the address its control
    /// connection to the coordinator comes from; when that is loopback (a node on the
    /// coordinator's host), loopback if the coordinator listens on loopback only, else
    /// every interface].
    #[arg(long, env = "GPUVET_DATA_ADDR", value_name = "IP")]
    pub data_addr: Option<std::net::IpAddr>,
    /// IP rank 0's coordinator listens on for the control connections [default: every
    /// interface, since rank 0 cannot know by which address the others call].
    #[arg(long, env = "GPUVET_LISTEN_ADDR", value_name = "IP")]
    pub listen_addr: Option<std::net::IpAddr>,
    /// The Python whose torch runs `pytorch_gloo_2` (PyTorch's Gloo); when it cannot
    /// import torch on some node, the built-in TCP all-reduce runs and the report says
    /// why.
    #[arg(
        long,
        env = "GPUVET_PYTHON",
        value_name = "PATH",
        default_value = "python3"
    )]
    pub python: PathBuf,
    /// Seconds to wait for every node to join before naming the missing ones.
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub rendezvous_timeout: f64,
    /// Spawn N agent processes on loopback and check them as one group, over the real
    /// protocol and sockets: for demos, drills and tests.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["master_addr", "node_rank", "nnodes", "gpuvet_port"]
    )]
    pub local_nodes: Option<u32>,
    /// Run a group of N nodes on the sim backend inside this process: the coordinator
    /// and every agent as threads, over an in-memory network with a simulated data
    /// plane. Plays the whole `gpuvet.sim` script, links, rails and node faults
    /// included: for drills and scale tests.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["master_addr", "node_rank", "nnodes", "gpuvet_port", "local_nodes"]
    )]
    pub sim_nodes: Option<u32>,
    /// Join as an agent only, even as rank 0: the coordinator runs elsewhere (used by
    /// `--local-nodes` for the agents it spawns).
    #[arg(long, hide = true)]
    pub join_only: bool,
}

/// Who is running: the job, the node and the instance.
#[derive(Debug, Args)]
pub struct IdentityArgs {
    /// Job id that groups attempts [default: $TORCHELASTIC_RUN_ID, else $SLURM_JOB_ID, else `default`].
    #[arg(long, env = "GPUVET_JOB_ID", value_name = "ID")]
    pub job_id: Option<String>,
    /// Node name [default: $NODE_NAME, else $SLURMD_NODENAME, else the hostname].
    #[arg(long, env = "GPUVET_NODE", value_name = "NAME")]
    pub node: Option<String>,
    /// Instance name [default: $POD_NAME, else $HOSTNAME, else the hostname].
    #[arg(long, env = "GPUVET_INSTANCE", value_name = "NAME")]
    pub instance: Option<String>,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// SQLite store [default: the config's `gpuvet.store`, else $XDG_STATE_HOME/gpuvet/gpuvet.db].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Record nothing in a store, and so push nothing (the outbox is the store's).
    #[arg(long)]
    pub no_store: bool,
}

/// Where the commands that only read a store find it.
#[derive(Debug, Args)]
pub struct ReadStoreArgs {
    /// SQLite store [default: the config's `gpuvet.store`, else $XDG_STATE_HOME/gpuvet/gpuvet.db].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub sanity: SanityArgs,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub sanity: SanityArgs,
    /// The app to start, after `--`: e.g. `gpuvet run -- vllm serve ...`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Only this job's events.
    #[arg(long, env = "GPUVET_JOB_ID", value_name = "ID")]
    pub job_id: Option<String>,
    /// Only this attempt's events.
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// Only events of this type, e.g. `SanityCheckFailed`.
    #[arg(long = "type", value_name = "TYPE")]
    pub kind: Option<String>,
    /// Only this node's events.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: ReadStoreArgs,
}

#[derive(Debug, Args)]
pub struct ResultsArgs {
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The job whose results to list [default: `default`].
    #[arg(long, env = "GPUVET_JOB_ID", value_name = "ID")]
    pub job_id: Option<String>,
    /// The attempt to list [default: the latest].
    #[arg(long, value_name = "N", conflicts_with = "all_attempts")]
    pub attempt: Option<u32>,
    /// List every attempt, not only the latest.
    #[arg(long)]
    pub all_attempts: bool,
    /// Only this check's results.
    #[arg(long, value_name = "NAME")]
    pub check: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: ReadStoreArgs,
}

#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Config file; its `gpuvet.watch` section says which sources to read.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Stop after this many seconds instead of waiting for a signal.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Print each finding as one JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus `/metrics` at this address (e.g. `127.0.0.1:9401`); replaces
    /// `gpuvet.watch.metrics_addr`.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The fleet server's arguments, passed to `gpuvet-server` as they are.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct UntaintArgs {
    /// The node's name, as `kubectl get nodes` lists it.
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Lift the quarantine without a passing run since it began; recorded as a
    /// `NodeUntainted` event with who and `--reason`.
    #[arg(long, requires = "reason")]
    pub force: bool,
    /// Why, for the record (needed with `--force`).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub source: NodeSourceArgs,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The node's name, as its runs recorded it.
    #[arg(value_name = "NODE")]
    pub node: String,
    /// How many of its latest runs to show.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub runs: u32,
    /// Print the history as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub source: NodeSourceArgs,
}

/// Where a node's runs are read: the store on this machine, or a fleet server.
#[derive(Debug, Args)]
pub struct NodeSourceArgs {
    /// Config file: its `gpuvet.store`, `gpuvet.repeat_offender` and `gpuvet.report_to`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store: an SQLite file [default: the config's `gpuvet.store`, else
    /// $XDG_STATE_HOME/gpuvet/gpuvet.db].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<String>,
    /// Read the node's runs from a fleet server (`gpuvet serve`) at this address
    /// instead of a store, with the server's read token from `GPUVET_READ_TOKEN` when
    /// set.
    #[arg(long, env = "GPUVET_SERVER", value_name = "URL")]
    pub server: Option<String>,
}

#[derive(Debug, Args)]
pub struct UndrainArgs {
    /// The node's name, as `sinfo --Node` lists it.
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Lift the drain without a passing run on the node recorded after it; recorded
    /// as a `NodeUntainted` event with who and `--reason`.
    #[arg(long, requires = "reason")]
    pub force: bool,
    /// Why, for the record (needed with `--force`).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store that holds the node's runs (on the node itself, the default one).
    #[command(flatten)]
    pub store: ReadStoreArgs,
}

#[derive(Debug, Args)]
pub struct EpilogArgs {
    /// The job whose end to record, as `gpuvet run` named it [default: `SLURM_JOB_ID`].
    #[arg(long, env = "GPUVET_JOB_ID", value_name = "ID")]
    pub job_id: Option<String>,
    /// Config file, for its `gpuvet.store` and `gpuvet.report_to`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The node's store [default: the config's, else the default one].
    #[command(flatten)]
    pub store: ReadStoreArgs,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// Config file; its `gpuvet.report_to` names the server.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server's address (`https://HOST:PORT`); replaces `gpuvet.report_to`. Repeat
    /// it for replicas of one server: each entry goes to the one that answered last,
    /// and to the next only when that one cannot be reached or fails (5xx).
    #[arg(long, value_name = "URL")]
    pub to: Vec<String>,
    #[command(flatten)]
    pub store: ReadStoreArgs,
}

/// Which attempt of which job, and where it is kept.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The job [default: `default`].
    #[arg(
        long = "job",
        alias = "job-id",
        env = "GPUVET_JOB_ID",
        value_name = "ID"
    )]
    pub job_id: Option<String>,
    /// The attempt [default: the latest].
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// The store: an SQLite file [default: the config's `gpuvet.store`, else
    /// $XDG_STATE_HOME/gpuvet/gpuvet.db].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<String>,
    /// Read the attempt from a fleet server (`gpuvet serve`) at this address instead
    /// of a store, e.g. `http://gpuvet-server:9470`; with the server's read token
    /// from `GPUVET_READ_TOKEN` when set.
    #[arg(long, env = "GPUVET_SERVER", value_name = "URL")]
    pub server: Option<String>,
}

#[derive(Debug, Args)]
pub struct TimelineArgs {
    #[command(flatten)]
    pub record: RecordArgs,
    /// Print the timeline as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BundleArgs {
    #[command(flatten)]
    pub record: RecordArgs,
    /// Where to write the bundle (`.tar.gz`); an existing file is replaced whole.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A bundle made by `gpuvet bundle`; without it, the attempt comes from the store.
    #[arg(value_name = "BUNDLE")]
    pub bundle: Option<PathBuf>,
    #[command(flatten)]
    pub record: RecordArgs,
    /// Print the explanation as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// The scenarios to run (`--list` names them).
    #[arg(value_name = "SCENARIO")]
    pub scenarios: Vec<String>,
    /// Run every scenario.
    #[arg(long, conflicts_with = "scenarios")]
    pub all: bool,
    /// List the scenarios and the fault each scripts, and run nothing.
    #[arg(long)]
    pub list: bool,
    /// The group's size, in one process: every node a thread, over an in-memory
    /// network, as `check --sim-nodes` runs it.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        conflicts_with = "local_nodes"
    )]
    pub nodes: u32,
    /// Run the group as N agent processes on this machine instead, as `check
    /// --local-nodes` starts them: a hung node is a stopped process, a crashed one a
    /// killed process.
    #[arg(long, value_name = "N")]
    pub local_nodes: Option<u32>,
    /// Run each scenario at each of these group sizes, e.g. `2,4,8`: a step-by-step
    /// scale-up. Replaces `--nodes` (or the size of `--local-nodes`).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    pub scale: Vec<u32>,
    /// Print the proof table as JSON.
    #[arg(long)]
    pub json: bool,
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store the drills' jobs go to [default: the config's `gpuvet.store`, else
    /// $XDG_STATE_HOME/gpuvet/gpuvet.db].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct FrArgs {
    /// Directory with one dump per rank (pickle or JSON).
    #[arg(value_name = "DUMP_DIR")]
    pub dump_dir: PathBuf,
    /// Print the analysis as JSON.
    #[arg(long)]
    pub json: bool,
    /// Record a problem the dumps show as a `RuntimeCheckFailed` event of this job, so
    /// that its timeline, bundle and `explain` include it.
    #[arg(long = "job", value_name = "ID")]
    pub job_id: Option<String>,
    /// The attempt to record it in [default: the job's latest].
    #[arg(long, value_name = "N", requires = "job_id")]
    pub attempt: Option<u32>,
    /// How many torch ranks ran on each node [default: the dumps' ranks over the
    /// group's nodes].
    #[arg(long, value_name = "N", requires = "job_id")]
    pub ranks_per_node: Option<u32>,
    /// Config file, for its `gpuvet.store`.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store to record in (an SQLite file).
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE")]
    pub store: Option<String>,
}

/// What a check's worker process needs to build the same backend as its parent. No
/// environment fallbacks: the parent passes everything explicitly.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The backend the parent resolved (never `auto`).
    #[arg(long, value_parser = ["cuda", "cpu", "sim"])]
    pub backend: String,
    /// The parent's config file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The parent's number of cpu devices.
    #[arg(long, value_name = "N")]
    pub cpu_devices: Option<u32>,
    /// The parent's node name, for the sim backend's per-node script.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub node: String,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, ValueEnum};
    use gpuvet_model::config::BackendChoice;

    use super::{BackendArg, Cli};
    use gpuvet_model::exit_codes::ALL;

    #[test]
    fn backend_values_are_the_configs_names_for_the_same_backends() {
        let names: Vec<String> = BackendArg::value_variants()
            .iter()
            .map(|arg| {
                let name = arg.to_possible_value().unwrap().get_name().to_owned();
                assert_eq!(BackendChoice::parse(&name), Some(BackendChoice::from(*arg)));
                name
            })
            .collect();
        assert_eq!(names, BackendChoice::NAMES);
    }

    #[test]
    fn help_lists_every_exit_code_with_its_meaning() {
        let help = Cli::command().render_long_help().to_string();
        for (code, _, meaning) in ALL {
            assert!(
                help.contains(&format!("  {code:<4} {meaning}")),
                "`--help` lacks exit code {code}:\n{help}"
            );
        }
    }

    #[test]
    fn the_readme_lists_the_same_exit_codes() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("\n## Exit codes\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("the README has an `## Exit codes` section");
        // Table rows start with the code(s): `| 0 |`, `| 126, 127 |`.
        let mut listed: Vec<i32> = section
            .lines()
            .filter_map(|line| line.strip_prefix("| ")?.split(" |").next())
            .flat_map(|cell| cell.split(", ").map(str::parse::<i32>))
            .filter_map(Result::ok)
            .collect();
        listed.sort_unstable();
        let mut defined: Vec<i32> = ALL.iter().map(|(code, _, _)| *code).collect();
        defined.sort_unstable();
        assert_eq!(
            listed, defined,
            "the README's exit codes differ from exit_codes::ALL"
        );
    }
}

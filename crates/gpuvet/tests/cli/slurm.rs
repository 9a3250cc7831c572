//! gpuvet under a real Slurm 22.05: the cluster of `scripts/slurm-cluster.sh up`
//! (slurmctld on this host, slurmd `gv-node[1-4]` each in a network and UTS namespace of
//! its own). `sbatch -N4` runs a step on 4 hosts; `srun gpuvet run` with the group
//! taken from `SLURM_*` passes and starts the app on every node; a node's link slowed
//! by `tc` is named; `deploy/slurm/prolog.sh` drains a failing node with gpuvet's
//! verdict as the reason and the job is requeued.
//! Needs root and the cluster up, so the tests are ignored by default; `.ci/run`
//! starts the cluster and runs them with `--include-ignored`, where a missing cluster
//! fails them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::group::findings;
use crate::common::{self, Scratch, stderr, stdout};
use crate::slurm_prolog::{FAILING_SIM, HEALTHY_SIM, deploy_script};

/// The cluster's nodes, in the order of their `SLURM_NODEID` in a 4-node job.
const NODES: [&str; 4] = ["gv-node1", "gv-node2", "gv-node3", "gv-node4"];
/// How long a node may take to become idle again (a job's epilog, a resume).
const SETTLE: Duration = Duration::from_secs(60);
/// The group's token in the jobs.
const TOKEN: &str = "slurm-test-token-0123456789abcdef";

/// The running cluster, as `scripts/slurm-cluster.sh` leaves it.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    /// The cluster, once its 4 nodes are idle; panics with what is missing.
    fn up() -> Cluster {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "this test needs root (CI runs as root)");
        let dir = PathBuf::from(
            std::env::var_os("GPUVET_SLURM_DIR").unwrap_or_else(|| "/run/gpuvet-slurm".into()),
        );
        assert!(
            dir.join("slurm.conf").is_file(),
            "this test needs the Slurm cluster, and `{}` is missing; hint: run \
             `scripts/slurm-cluster.sh up` as root (after `apt-get install -y slurmctld \
             slurmd munge slurm-client`; `.ci/run` does both)",
            dir.join("slurm.conf").display()
        );
        let cluster = Cluster { dir };
        cluster.wait_until_idle();
        cluster
    }

    fn slurm(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", self.dir.join("slurm.conf"));
        command
    }

    fn wait_until_idle(&self) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let output = self
                .slurm("sinfo")
                .args(["-h", "-N", "-t", "idle", "-o", "%N"])
                .output()
                .expect("running sinfo (apt-get install -y slurm-client)");
            let idle = stdout(&output).lines().filter(|l| !l.is_empty()).count();
            if idle == NODES.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{idle} of 4 nodes idle after {SETTLE:?}: {}{}",
                stdout(&self.slurm("sinfo").arg("-N").output().unwrap()),
                stderr(&output)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `sbatch -N4 --wait SCRIPT` with this test's gpuvet and scratch dir in the job's
    /// environment (`GPUVET`, `OUT`); the job's output is `OUT/job.out`.
    fn sbatch_wait(&self, scratch: &Scratch, script: &str) -> Output {
        let path = scratch.path("job.sh");
        std::fs::write(&path, script).unwrap();
        self.slurm("sbatch")
            .args(["-N4", "--wait", "--time=5", "--parsable"])
            .arg(format!("--output={}", scratch.path("job.out").display()))
            .arg(format!("--chdir={}", scratch.dir.path().display()))
            .arg(&path)
            .env("GPUVET", env!("CARGO_BIN_EXE_gpuvet"))
            .env("GPUVET_TOKEN", TOKEN)
            .env("OUT", scratch.dir.path())
            .output()
            .expect("running sbatch")
    }

    fn show_node(&self, node: &str) -> String {
        let output = self
            .slurm("scontrol")
            .args(["show", "node", node])
            .output()
            .unwrap();
        stdout(&output)
    }

    fn scontrol(&self, args: &[&str]) {
        let output = self.slurm("scontrol").args(args).output().unwrap();
        assert!(
            output.status.success(),
            "scontrol {args:?}: {}",
            stderr(&output)
        );
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The batch script's lines that put every node in one gpuvet group: the flags from
/// `SLURM_*` (until gpuvet reads them itself), the coordinator on the first node.
const GROUP_FLAGS: &str = r#"master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_HOST="$master"
"#;
const NODE_FLAGS: &str =
    r#"--nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --master-addr "$MASTER_HOST""#;

#[test]
#[ignore = "needs root and slurm"]
fn sbatch_runs_one_step_on_four_hosts() {
    let _turn = common::one_at_a_time();
    let cluster = Cluster::up();
    let scratch = Scratch::temp();
    // Each task says its host name, address and network namespace.
    let output = cluster.sbatch_wait(
        &scratch,
        r#"#!/bin/sh
srun --ntasks-per-node=1 sh -c 'echo "$(hostname) $(ip -4 -o addr show eth0 | awk "{print \$4}") $(readlink /proc/self/ns/net) $(readlink /proc/self/ns/uts)" > "$OUT/task-$SLURM_NODEID"'
"#,
    );
    assert!(
        output.status.success(),
        "{}{}",
        stderr(&output),
        read(&scratch.path("job.out"))
    );
    let mut hosts = Vec::new();
    let (mut net, mut uts) = (Vec::new(), Vec::new());
    for (rank, node) in NODES.iter().enumerate() {
        let line = read(&scratch.path(&format!("task-{rank}")));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "{line}");
        assert_eq!(fields[0], *node, "SLURM_NODEID {rank}");
        assert_eq!(fields[1], format!("10.79.0.{}/24", rank + 1));
        hosts.push(fields[0].to_owned());
        net.push(fields[2].to_owned());
        uts.push(fields[3].to_owned());
    }
    for namespaces in [&mut net, &mut uts] {
        namespaces.sort();
        namespaces.dedup();
        assert_eq!(namespaces.len(), 4, "4 namespaces, not {namespaces:?}");
    }
}

#[test]
#[ignore = "needs root and slurm"]
fn srun_gpuvet_run_passes_on_a_healthy_cluster_and_starts_the_app_everywhere() {
    let _turn = common::one_at_a_time();
    let cluster = Cluster::up();
    let scratch = Scratch::temp();
    let script = format!(
        r#"#!/bin/sh
{GROUP_FLAGS}srun --ntasks-per-node=1 sh -c 'exec "$GPUVET" run --no-store {NODE_FLAGS} \
  --backend cpu --cpu-devices 1 --checks network_connectivity,all_reduce_2 \
  -- sh -c "hostname > \"\$OUT/app-\$SLURM_NODEID\"" \
  > "$OUT/rank-$SLURM_NODEID.out" 2> "$OUT/rank-$SLURM_NODEID.err"'
"#
    );
    let output = cluster.sbatch_wait(&scratch, &script);
    let ranks: Vec<String> = (0..4)
        .map(|rank| {
            read(&scratch.path(&format!("rank-{rank}.out")))
                + &read(&scratch.path(&format!("rank-{rank}.err")))
        })
        .collect();
    assert!(output.status.success(), "{}{ranks:#?}", stderr(&output));
    for (rank, node) in NODES.iter().enumerate() {
        assert!(ranks[rank].contains("outcome: passed"), "{}", ranks[rank]);
        assert!(
            ranks[rank].contains("group of 4: gv-node[1-4]"),
            "{}",
            ranks[rank]
        );
        assert_eq!(read(&scratch.path(&format!("app-{rank}"))).trim(), *node);
    }
}

/// A `tbf` on one node's only link, removed again on drop.
struct RateLimit {
    namespace: String,
}

impl RateLimit {
    fn on(node: usize, rate: &str) -> RateLimit {
        // The namespace of `gv-nodeN` is `gvslurmN` (scripts/slurm-cluster.sh).
        let namespace = format!("gvslurm{}", node + 1);
        let output = Command::new("ip")
            .args([
                "netns", "exec", &namespace, "tc", "qdisc", "replace", "dev", "eth0",
            ])
            .args([
                "root", "tbf", "rate", rate, "burst", "64kb", "latency", "20ms",
            ])
            .output()
            .expect("running ip netns exec tc");
        assert!(output.status.success(), "tc: {}", stderr(&output));
        RateLimit { namespace }
    }
}

impl Drop for RateLimit {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespace,
                "tc",
                "qdisc",
                "del",
                "dev",
                "eth0",
            ])
            .args(["root"])
            .output();
    }
}

#[test]
#[ignore = "needs root and slurm"]
fn a_node_whose_link_is_rate_limited_is_named_slow() {
    let _turn = common::one_at_a_time();
    let cluster = Cluster::up();
    let _limit = RateLimit::on(2, "200mbit");
    let scratch = Scratch::temp();
    let script = format!(
        r#"#!/bin/sh
{GROUP_FLAGS}srun --ntasks-per-node=1 sh -c 'exec "$GPUVET" check --json --no-store {NODE_FLAGS} \
  --backend cpu --cpu-devices 1 --checks all_reduce_2,all_reduce \
  > "$OUT/rank-$SLURM_NODEID.json" 2> "$OUT/rank-$SLURM_NODEID.err"'
"#
    );
    let output = cluster.sbatch_wait(&scratch, &script);
    // Every node fails the group's start, so the job fails.
    assert!(
        !output.status.success(),
        "{}",
        read(&scratch.path("job.out"))
    );
    let text = read(&scratch.path("rank-0.json"));
    let report: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{err}: {text}\n{}", read(&scratch.path("rank-0.err"))));
    assert_eq!(report["outcome"], "failed", "{report:#}");
    for check in ["all_reduce_2", "all_reduce"] {
        assert_eq!(
            findings(&report, check),
            ["gv-node3"],
            "{check}: {report:#}"
        );
    }
}

/// The cluster's prolog hook running `deploy/slurm/prolog.sh`, with `failing` checked
/// against a config that fails and the other nodes against a healthy one. On drop the
/// hook does nothing again, the job is cancelled and the node resumed.
struct Prolog<'a> {
    cluster: &'a Cluster,
    failing: &'static str,
    job: Option<String>,
}

impl<'a> Prolog<'a> {
    fn install(cluster: &'a Cluster, scratch: &Scratch, failing: &'static str) -> Self {
        let failing_config = scratch.config("failing.json", FAILING_SIM);
        let healthy_config = scratch.config("healthy.json", HEALTHY_SIM);
        let hook = format!(
            r#"#!/bin/sh
export GPUVET='{gpuvet}' GPUVET_SLURM_LOG='{log}' GPUVET_STORE='{store}-'"$SLURMD_NODENAME"
export GPUVET_PROLOG_CHECKS=gemm_flops,kernel_launch GPUVET_PROLOG_SECONDS=60
case "$SLURMD_NODENAME" in
  {failing}) export GPUVET_CONFIG='{failing_config}' ;;
  *) export GPUVET_CONFIG='{healthy_config}' ;;
esac
exec '{prolog}'
"#,
            gpuvet = env!("CARGO_BIN_EXE_gpuvet"),
            log = scratch.path("slurm.log").display(),
            store = scratch.store().display(),
            failing_config = failing_config.display(),
            healthy_config = healthy_config.display(),
            prolog = deploy_script("prolog.sh").display(),
        );
        let path = cluster.dir.join("prolog");
        let staged = cluster.dir.join("prolog.new");
        std::fs::write(&staged, hook).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        Prolog {
            cluster,
            failing,
            job: None,
        }
    }
}

impl Drop for Prolog<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cluster.dir.join("prolog"), "#!/bin/sh\nexit 0\n");
        if let Some(job) = &self.job {
            let _ = self.cluster.slurm("scancel").arg(job).output();
        }
        let _ = self
            .cluster
            .slurm("scontrol")
            .args([
                "update",
                &format!("NodeName={}", self.failing),
                "State=RESUME",
            ])
            .output();
    }
}

/// `KEY=value` from `scontrol show` output (values may hold spaces: up to the line's
/// end for `Reason`).
fn field<'t>(shown: &'t str, key: &str) -> Option<&'t str> {
    let at = shown.find(&format!("{key}="))? + key.len() + 1;
    let rest = &shown[at..];
    let end = if key == "Reason" {
        rest.find('\n').unwrap_or(rest.len())
    } else {
        rest.find(char::is_whitespace).unwrap_or(rest.len())
    };
    Some(&rest[..end])
}

#[test]
#[ignore = "needs root and slurm"]
#[allow(clippy::print_stderr)] // the prolog's time on the healthy nodes is worth seeing
fn the_prolog_drains_a_failing_node_with_gpuvet_s_reason_and_the_job_is_requeued() {
    let _turn = common::one_at_a_time();
    let cluster = Cluster::up();
    let scratch = Scratch::temp();
    let mut prolog = Prolog::install(&cluster, &scratch, "gv-node3");
    let job_script = scratch.path("job.sh");
    std::fs::write(&job_script, "#!/bin/sh\nsrun hostname\n").unwrap();
    let submitted = cluster
        .slurm("sbatch")
        .args(["-N4", "--time=5", "--parsable"])
        .arg(format!("--output={}", scratch.path("job.out").display()))
        .arg(&job_script)
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    let job = stdout(&submitted).trim().to_owned();
    prolog.job = Some(job.clone());

    let deadline = Instant::now() + SETTLE;
    let shown = loop {
        let shown = cluster.show_node("gv-node3");
        if field(&shown, "Reason").is_some_and(|r| r.starts_with("gpuvet: ")) {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "gv-node3 not drained by gpuvet after {SETTLE:?}: {shown}\n{}",
            std::fs::read_to_string(scratch.path("slurm.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        field(&shown, "State").is_some_and(|s| s.contains("DRAIN")),
        "{shown}"
    );
    let reason = field(&shown, "Reason").unwrap();
    assert!(
        reason.starts_with(
            "gpuvet: gv-node3/dev1 is slow in gemm_flops; hand it to the host team [lane: host]"
        ),
        "{reason}"
    );
    for node in ["gv-node1", "gv-node2", "gv-node4"] {
        let shown = cluster.show_node(node);
        assert!(
            !field(&shown, "State").unwrap_or_default().contains("DRAIN"),
            "{shown}"
        );
    }

    // The prolog failed, so Slurm requeued the job (held, its default).
    let deadline = Instant::now() + SETTLE;
    loop {
        let shown = stdout(
            &cluster
                .slurm("scontrol")
                .args(["show", "job", &job])
                .output()
                .unwrap(),
        );
        let restarts: u32 = field(&shown, "Restarts").unwrap_or("0").parse().unwrap();
        if restarts >= 1 {
            assert_eq!(field(&shown, "JobState"), Some("PENDING"), "{shown}");
            break;
        }
        assert!(Instant::now() < deadline, "job {job} not requeued: {shown}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let log = read(&scratch.path("slurm.log"));
    for node in ["gv-node1", "gv-node2", "gv-node4"] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("prolog node={node} job={job} ")))
            .unwrap_or_else(|| panic!("no prolog line for {node}: {log}"));
        assert!(line.contains(" passed checks="), "{line}");
        let elapsed = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("elapsed_ms="))
            .unwrap();
        eprintln!("prolog on healthy {node}: {elapsed} ms of its 60 s budget");
    }
    cluster.scontrol(&["update", "NodeName=gv-node3", "State=RESUME"]);
}

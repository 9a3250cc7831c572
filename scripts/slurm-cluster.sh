#!/usr/bin/env bash
# A real Slurm 22.05 cluster on one machine, for the Slurm tests
# (crates/gpuvet/tests/cli/slurm_cluster.rs) and for trying deploy/slurm/ by hand: Debian's
# slurmctld on this host and 4 slurmd "nodes", gv-node[1-4], each in a network and UTS
# namespace of its own (its own address and host name), joined by veth pairs on one
# bridge. Needs root on Debian bookworm with
#   apt-get install -y slurmctld slurmd munge slurm-client iproute2
#
# Usage: scripts/slurm-cluster.sh up|down|status
#   up      start everything (after a `down`, so a half-started cluster is replaced)
#           and wait until `sinfo` shows the 4 nodes idle
#   down    stop and remove everything; does nothing when nothing is there
#   status  exit 0 when the cluster is up, else say what is missing and exit 1
# Then, on this host: export SLURM_CONF=/run/gpuvet-slurm/slurm.conf; sinfo; sbatch ...
#
# A script, not a harness in gpuvet-testkit: one cluster serves the tests, `.ci/run`
# and a person trying deploy/slurm/ by hand, and the tests share it (they take turns)
# rather than each starting daemons on the same names, addresses and ports.
#
# What it needs of the machine, and why (so that a CI container without systemd or a
# writable cgroup tree runs it):
# - Nothing of systemd: the daemons are started directly, and each of its own files
#   (munge key and socket, slurm.conf, state, spool, logs, pid files) is under
#   $GPUVET_SLURM_DIR (default /run/gpuvet-slurm); the packages' own services and
#   /etc/slurm, /etc/munge are left alone.
# - No cgroups: ProctrackType=proctrack/linuxproc (jobs' processes found by parent
#   pid), TaskPlugin=task/none, JobAcctGatherType=jobacct_gather/none, no
#   PrologFlags=Contain, no cgroup.conf.
# - A munged of its own (a fresh key, its own socket, run as root with --force), which
#   slurm finds through AuthInfo=socket=...; its socket is a path, which every network
#   namespace shares.
# - Node names that resolve inside the nodes: `ip netns exec` bind-mounts
#   /etc/netns/NS/hosts over /etc/hosts for what it starts, so each slurmd (and every
#   job step under it) reads a hosts file that names gv-node[1-4] and the controller;
#   this host's /etc/hosts is untouched.
# - SlurmdParameters=config_overrides with CPUs=1 and RealMemory=1000: 4 slurmd on one
#   machine each see all of it, and the nodes are declared smaller than it.
# - The ports 16817 (slurmctld) and 16818 (slurmd) rather than Slurm's default ones,
#   so a machine that runs Slurm already keeps it.
# - AuthInfo's cred_expire=30: a job requeued after a failed prolog may start again
#   30 s later rather than Slurm's default 120.
# Each slurmd logs "mpi/pmix_v4: ... can not load PMIx library" at start: Debian's
# slurmd loads every MPI plugin it has, and with MpiDefault=none none is used.
set -euo pipefail

dir="${GPUVET_SLURM_DIR:-/run/gpuvet-slurm}"
nodes=4
bridge=gvslurm0
subnet=10.79.0
controller_ip="$subnet.254"
ctld_port=16817
slurmd_port=16818

node_name() { echo "gv-node$1"; }
node_ns() { echo "gvslurm$1"; }
node_ip() { echo "$subnet.$1"; }

die() {
  echo "slurm-cluster: $*" >&2
  exit 1
}

need() {
  local missing=()
  for program in slurmctld slurmd munged sinfo scontrol ip; do
    command -v "$program" >/dev/null 2>&1 || missing+=("$program")
  done
  [ ${#missing[@]} -eq 0 ] \
    || die "missing ${missing[*]}; hint: apt-get install -y slurmctld slurmd munge slurm-client iproute2"
  [ "$(id -u)" -eq 0 ] || die "needs root (namespaces, veth links, the daemons)"
}

# Kills the process whose pid is in FILE, if it still runs, and waits for it.
stop_pidfile() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

down() {
  local i ns pids
  for i in $(seq "$nodes"); do
    ns=$(node_ns "$i")
    if ip netns list | grep -qw "$ns"; then
      # slurmd and whatever it started (slurmstepd, job steps): every process of it.
      pids=$(ip netns pids "$ns" || true)
      if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill $pids 2>/dev/null || true
        for _ in $(seq 50); do [ -z "$(ip netns pids "$ns")" ] && break; sleep 0.1; done
        pids=$(ip netns pids "$ns" || true)
        # shellcheck disable=SC2086
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
      fi
      ip netns del "$ns"
    fi
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munged.pid"
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$dir"
}

write_conf() {
  local host=$1 i
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-cluster.sh: 4 nodes on one machine, no cgroups, no systemd.
ClusterName=gpuvet
SlurmctldHost=$host($controller_ip)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again
# (default 120 s).
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=30
StateSaveLocation=$dir/ctld
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/linear
ReturnToService=2
# The tests' prolog and epilog: hooks that do nothing until a test writes them.
Prolog=$dir/prolog
Epilog=$dir/epilog
# PrologFlags and SchedulerParameters as in deploy/slurm/slurm.conf.fragment.
PrologFlags=Alloc,DeferBatch
PrologEpilogTimeout=120
SchedulerParameters=nohold_on_prolog_fail
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
  # Slurm 22.05's slurmd loads a cgroup plugin whatever the other plugins are, and
  # `autodetect` fails where /sys/fs/cgroup holds no cgroup filesystem (inside `ip
  # netns exec`, which mounts a sysfs of its own, or a container without cgroups).
  # The v1 plugin loads without one; with the plugins above nothing then uses it.
  echo "CgroupPlugin=cgroup/v1" >"$dir/cgroup.conf"
  for i in $(seq "$nodes"); do
    echo "NodeName=$(node_name "$i") NodeAddr=$(node_ip "$i") CPUs=1 RealMemory=1000 State=UNKNOWN" \
      >>"$dir/slurm.conf"
  done
  echo "PartitionName=gv Nodes=gv-node[1-$nodes] Default=YES MaxTime=INFINITE State=UP" \
    >>"$dir/slurm.conf"
}

up() {
  need
  down
  local host i ns
  host=$(hostname -s)
  mkdir -p "$dir"/{ctld,log,spool,munge}
  chmod 755 "$dir"

  # munge: a fresh key, a daemon of its own.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  chmod 700 "$dir/munge"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  # Every job's processes (run as root here) reach the socket.
  chmod 755 "$dir/munge"

  write_conf "$host"
  for hook in prolog epilog; do
    printf '#!/bin/sh\nexit 0\n' >"$dir/$hook"
    chmod 755 "$dir/$hook"
  done

  ip link add "$bridge" type bridge
  ip addr add "$controller_ip/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq "$nodes"); do
    ns=$(node_ns "$i")
    ip netns add "$ns"
    ip link add "${ns}h" type veth peer name eth0 netns "$ns"
    ip link set "${ns}h" master "$bridge" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      echo "$controller_ip $host"
      for j in $(seq "$nodes"); do echo "$(node_ip "$j") $(node_name "$j")"; done
    } >"/etc/netns/$ns/hosts"
  done

  slurmctld -f "$dir/slurm.conf" -i
  for i in $(seq "$nodes"); do
    ns=$(node_ns "$i")
    mkdir -p "$dir/spool/$(node_name "$i")"
    ip netns exec "$ns" unshare --uts sh -c \
      "hostname $(node_name "$i") && exec slurmd -f '$dir/slurm.conf'"
  done

  export SLURM_CONF="$dir/slurm.conf"
  local idle=""
  for _ in $(seq 120); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$nodes" ] && break
    sleep 0.5
  done
  if [ "$idle" -ne "$nodes" ]; then
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2 || true
    die "only $idle of $nodes nodes idle after 60 s; the logs are in $dir/log"
  fi
  echo "slurm-cluster: $nodes nodes idle; export SLURM_CONF=$dir/slurm.conf" >&2
}

status() {
  [ -f "$dir/slurm.conf" ] || die "no cluster: $dir/slurm.conf is missing; hint: run \`scripts/slurm-cluster.sh up\` as root"
  local idle
  idle=$(SLURM_CONF="$dir/slurm.conf" sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$idle" -eq "$nodes" ] || die "sinfo lists $idle of $nodes nodes"
  SLURM_CONF="$dir/slurm.conf" sinfo -N
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac

#!/usr/bin/env python3
"""A soak of `gpuvet check --local-nodes 4` runs, each with one random fault.

Faults: `stop` (SIGSTOP one agent), `kill` (SIGKILL one agent), `slow` (one agent
stopped and resumed every 20 ms at a 60 % duty cycle, so it runs at 40 % speed), or
`none`. A stop or kill comes at a random moment after the group formed; a slow agent is
slow from then on (one slowed only in the run's last second, after its collectives,
was rightly found healthy). A run is right when:
  stop: exit 1, and the first error is that rank, `unresponsive`;
  kill: exit 1, and the first error is that rank, `crashed`;
  slow: exit 1, and a finding names that node `slow`;
  none: exit 0.
Every run must also leave no process (its agents and workers are found by a marker in
their environment), no temp file (each run gets an empty TMPDIR), and end within its
timeout plus 2 s. For stop and kill it prints how long after the signal the stopped
rank was first named on stderr and how long until the command exited.

Usage: scripts/soak-local-faults.py GPUVET CONFIG [--runs N] [--faults stop,kill,slow,none]
       [--max-delay SECONDS] [--seed N] [--timeout-s SECONDS]
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time


def pids_with_marker(marker):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = open(f"/proc/{entry}/environ", "rb").read()
            state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(entry))
    return found


def agent_pid(parent, rank):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = open(f"/proc/{entry}/cmdline").read().split("\0")
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == parent and "--node-rank" in cmd:
            if cmd[cmd.index("--node-rank") + 1] == str(rank):
                return int(entry)
    return None


def slow_down(pid, stop_event):
    """Stops and resumes `pid` until told to end: 12 ms stopped, 8 ms running."""
    while not stop_event.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.012)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.008)
        except ProcessLookupError:
            return


def run_once(exe, config, fault, delay, rank, timeout_s, index):
    marker = f"GPUVET_SOAK_MARKER={os.getpid()}-{index}"
    tmp = tempfile.mkdtemp(prefix="gpuvet-soak-")
    env = dict(os.environ, TMPDIR=tmp, GPUVET_SOAK_MARKER=marker.split("=", 1)[1])
    started = time.monotonic()
    proc = subprocess.Popen(
        [exe, "check", "--config", config, "--no-store", "--local-nodes", "4", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, joined = [], threading.Event()

    def read_stderr():
        for line in proc.stderr:
            lines.append((time.monotonic(), line.rstrip()))
            if "4 of 4 nodes joined" in line:
                joined.set()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    out_box = []
    writer = threading.Thread(target=lambda: out_box.append(proc.stdout.read()))
    writer.start()
    if not joined.wait(60):
        proc.kill()
        raise SystemExit("the group never formed")
    time.sleep(delay)
    pid = agent_pid(proc.pid, rank)
    signalled, slowing = None, threading.Event()
    if fault == "stop":
        os.kill(pid, signal.SIGSTOP)
    elif fault == "kill":
        os.kill(pid, signal.SIGKILL)
    elif fault == "slow":
        threading.Thread(target=slow_down, args=(pid, slowing), daemon=True).start()
    signalled = time.monotonic()
    proc.wait()
    ended = time.monotonic()
    slowing.set()
    writer.join()
    reader.join()
    if fault == "slow" and pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    left = pids_with_marker(marker.split("=", 1)[1])
    for leftover in left:
        os.kill(leftover, signal.SIGKILL)
    temp_left = os.listdir(tmp)
    os.rmdir(tmp) if not temp_left else None
    report = json.loads(out_box[0]) if out_box and out_box[0].strip() else {}
    first = (report.get("group") or {}).get("first_error") or {}
    node = f"local-{rank}"
    slow_named = any(
        e.get("verdict") == "slow" and node in json.dumps(e.get("entity"))
        for c in report.get("checks", []) for e in c.get("entities", []))
    if fault == "stop":
        right = proc.returncode == 1 and first.get("rank") == rank and first.get("kind") == "unresponsive"
    elif fault == "kill":
        right = proc.returncode == 1 and first.get("rank") == rank and first.get("kind") == "crashed"
    elif fault == "slow":
        right = proc.returncode == 1 and slow_named
    else:
        right = proc.returncode == 0
    named = next((t - signalled for t, line in lines
                  if t >= signalled and f"rank {rank} " in line), None)
    took = ended - started
    return {
        "fault": fault, "rank": rank, "delay": round(delay, 2), "code": proc.returncode,
        "right": right, "named_s": named and round(named, 2),
        "exited_s": round(ended - signalled, 2), "took_s": round(took, 1),
        "within_timeout": took <= timeout_s + 2, "processes_left": left,
        "temp_files_left": temp_left, "outcome": report.get("outcome"),
        "first_error": f"rank {first.get('rank')} {first.get('kind')}" if first else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gpuvet")
    parser.add_argument("config")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--faults", default="stop,kill,slow,none")
    parser.add_argument("--max-delay", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="the config's sanity timeout, in seconds")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    faults = args.faults.split(",")
    results = []
    for index in range(args.runs):
        fault = rng.choice(faults)
        delay = 0.0 if fault == "slow" else rng.uniform(0, args.max_delay)
        result = run_once(args.gpuvet, args.config, fault, delay,
                          rng.randrange(1, 4), args.timeout_s, index)
        results.append(result)
        print(json.dumps(result), flush=True)
    good = [r for r in results if r["right"] and r["within_timeout"]
            and not r["processes_left"] and not r["temp_files_left"]]
    print(f"{len(good)} of {len(results)} runs right, in time, and clean")
    for kind in ("stop", "kill"):
        named = [r["named_s"] for r in results if r["fault"] == kind and r["named_s"] is not None]
        exited = [r["exited_s"] for r in results if r["fault"] == kind]
        if exited:
            print(f"{kind}: named after median {statistics.median(named):.2f}s "
                  f"(max {max(named):.2f}s); exited after median "
                  f"{statistics.median(exited):.2f}s (max {max(exited):.2f}s)")


if __name__ == "__main__":
    main()

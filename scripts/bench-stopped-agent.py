#!/usr/bin/env python3
"""How fast `gpuvet check --local-nodes 4` names and acts on an agent that stops.

Each trial runs the given config at `--local-nodes 4`, sends SIGSTOP (or the signal
named by --signal) to one agent at a random moment after the group formed, and records:
  named:  seconds from the signal to the first stderr line naming that rank;
  exited: seconds from the signal to the command's exit;
  and whether the report's first error is that rank, with exit code 1.
It also checks that no agent process is left afterwards.

Usage: scripts/bench-stopped-agent.py GPUVET CONFIG [--trials N] [--signal SIGSTOP]
       [--max-delay SECONDS] [--seed N]
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import threading
import time


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


def alive(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def trial(exe, config, sig, delay, rank):
    proc = subprocess.Popen(
        [exe, "check", "--config", config, "--no-store", "--local-nodes", "4", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, joined = [], threading.Event()

    def read_stderr():
        for line in proc.stderr:
            lines.append((time.monotonic(), line.rstrip()))
            if "4 of 4 nodes joined" in line:
                joined.set()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    if not joined.wait(60):
        proc.kill()
        raise SystemExit("the group never formed")
    time.sleep(delay)
    pid = agent_pid(proc.pid, rank)
    os.kill(pid, sig)
    signalled = time.monotonic()
    out = proc.stdout.read()
    proc.wait()
    exited = time.monotonic() - signalled
    reader.join()
    named = next((t - signalled for t, line in lines
                  if t >= signalled and f"rank {rank} " in line), None)
    report = json.loads(out) if out.strip() else {}
    first = (report.get("group") or {}).get("first_error") or {}
    left = alive(pid)
    if left:
        os.kill(pid, signal.SIGKILL)
    return {
        "delay": delay, "rank": rank, "code": proc.returncode, "named": named,
        "exited": exited, "first_error_rank": first.get("rank"),
        "first_error_kind": first.get("kind"), "left_behind": left,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gpuvet")
    parser.add_argument("config")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--signal", default="SIGSTOP")
    parser.add_argument("--max-delay", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sig = getattr(signal, args.signal)
    results = []
    for _ in range(args.trials):
        result = trial(args.gpuvet, args.config, sig,
                       rng.uniform(0, args.max_delay), rng.randrange(1, 4))
        results.append(result)
        print(json.dumps(result), flush=True)
    right = [r for r in results
             if r["code"] == 1 and r["first_error_rank"] == r["rank"] and not r["left_behind"]]
    named = [r["named"] for r in results if r["named"] is not None]
    exited = [r["exited"] for r in results]
    print(f"{args.signal}: {len(right)} of {len(results)} right verdicts; "
          f"named after median {statistics.median(named):.2f}s (max {max(named):.2f}s); "
          f"exited after median {statistics.median(exited):.2f}s (max {max(exited):.2f}s)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Benchmark, not a test: the runtime watcher's cost next to an idle process.

Runs `gpuvet watch` for DURATION seconds (default 60) at 1 Hz on a recorded kernel log
(a file with XID lines, read by the real kmsg source; NVML off, since it needs a GPU),
and `sleep DURATION` the same way, and prints each one's CPU time, CPU share of one core
and peak RSS from getrusage. Goal: < 0.5 % of one core and < 30 MB.

With `--nvml` (on a GPU machine) the watcher also polls NVML every second.

Usage: scripts/bench-watch.py [--nvml] [DURATION] [path/to/gpuvet]
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

args = [a for a in sys.argv[1:] if a != "--nvml"]
nvml = "--nvml" in sys.argv[1:]
duration = float(args[0]) if len(args) > 0 else 60.0
binary = args[1] if len(args) > 1 else "target/release/gpuvet"


def peak_rss_mb(pid):
    """VmHWM of a running process: its peak resident set since exec, in MB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def measure(argv, env=None):
    # getrusage's ru_maxrss of children would count the forked Python before exec, so
    # the peak RSS is read from /proc while the process runs.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rss = 0.0
    while process.poll() is None:
        rss = max(rss, peak_rss_mb(process.pid))
        time.sleep(0.5)
    if process.returncode != 0:
        sys.exit(f"{argv[0]} exited with {process.returncode}")
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, rss


with tempfile.TemporaryDirectory() as scratch:
    kmsg = os.path.join(scratch, "kmsg.log")
    with open(kmsg, "w") as log:
        for i in range(1000):
            log.write(f"[ {i}.000000] NVRM: Xid (PCI:0000:3b:00): 95, pid=1, Uncontained ECC error\n")
    config = os.path.join(scratch, "watch.json")
    with open(config, "w") as f:
        json.dump({"gpuvet": {"watch": {"kmsg": kmsg, "nvml": nvml, "interval_ms": 1000}}}, f)
    env = dict(os.environ, GPUVET_STORE=os.path.join(scratch, "gpuvet.db"))

    # The idle reference first, so the watcher's larger RSS cannot mask it.
    idle_cpu, idle_wall, idle_rss = measure(["sleep", str(duration)])
    cpu, wall, rss = measure([binary, "watch", "--duration", str(duration), "--config", config], env)

print(f"{'process':<28}{'cpu s':>8}{'% of a core':>14}{'peak RSS MB':>14}")
print(f"{'sleep ' + str(duration):<28}{idle_cpu:>8.3f}{100 * idle_cpu / idle_wall:>14.3f}{idle_rss:>14.1f}")
label = "gpuvet watch (1 Hz, NVML)" if nvml else "gpuvet watch (1 Hz)"
print(f"{label:<28}{cpu:>8.3f}{100 * cpu / wall:>14.3f}{rss:>14.1f}")
print(f"watcher minus idle: {100 * (cpu - idle_cpu) / wall:.3f} % of one core")

#!/usr/bin/env bash
# gpu-smoke.sh — run gpuvet's cuda backend on this GPU machine and compare its GEMM
# with torch.matmul on the same GPU, in the same run.
#
# Usage: scripts/gpu-smoke.sh            (from the repository root)
#   OUT=<dir>          where the results go (default ./gpu-smoke-out): summary.json,
#                      report.json, smoke.log and gpu-smoke.tar.gz (every file below)
#   GPUVET_SMOKE_WORK=<dir>  where every report and log is written (default $OUT/files);
#                      outside $OUT, $OUT holds just the four files above
#   GPUVET_BIN=<path>  the gpuvet binary to run (default target/release/gpuvet)
#   GPUVET_SMOKE_BUDGET_SECS=<n>    the whole run's time limit (default 420); each step
#                      gets what is left of it, so the script never runs longer
#   GPUVET_SMOKE_WATCH_SECS=<n>     how long `gpuvet watch` runs (default 10)
#   GPUVET_SMOKE_METRICS_PORT=<n>   its /metrics port on 127.0.0.1 (default 9401)
#   GPUVET_SMOKE_WATCH_COST_SECS=<n>  how long the watcher's cost is measured (default 15)
#
# It builds nothing: GPU machines are lent for minutes, have no Rust and cannot download
# crates. Build where Rust is and bring the binary along:
#   CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p gpuvet
#                                        # 18 MB, not 73 with line tables; glibc here
#                                        # must not be newer than there
#
# Steps, each under what is left of the budget:
#   1. gpuvet check --backend cuda --json with every check the cuda backend runs
#      (gemm_flops, kernel_launch, all_reduce_1 and comp_comm_overlap, which need two
#      GPUs, and inventory_consistency), timed from start to verdict while nvidia-smi
#      samples clocks, power and throttle reasons, then `gpuvet explain` on its store;
#      then, informational: gemm_flops in fp8, fp16, tf32 and fp32; 10 s of `gpuvet
#      watch` on NVML with its /metrics page; the watcher's CPU and memory with NVML
#      (scripts/bench-watch.py --nvml); with 2 or more GPUs, `--local-nodes 2` (each
#      agent its own half of the GPUs) for the collectives across nodes over NCCL, per
#      rail included (report-nccl.json);
#   2. torch.matmul bf16 8192^3 on GPU 0, if torch imports: held for about a second as
#      gemm_flops does, and as a burst of ten products;
#   3. summary.json: every check's verdict and figures, the worker's setup cost per
#      check (its probe, context creation and NVRTC compile, from the `setup_*_ms`
#      figures the cuda backend reports), gpuvet's GEMM TFLOPS on GPU 0 against
#      torch's and their ratio (goal >= 0.97), the launch latency, all_reduce_1's busbw,
#      the clocks and power while the checks ran, the explanation, the watcher's cost.
# Exit status: 0 when gpuvet ran on the cuda backend and the ratio (if measured) is
# >= 0.97, 1 otherwise.

set -euo pipefail

OUT="${OUT:-./gpu-smoke-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="${GPUVET_SMOKE_WORK:-$OUT/files}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Every step's timeout is what is left of the budget, less what the summary needs.
budget="${GPUVET_SMOKE_BUDGET_SECS:-420}"
deadline=$(( $(date +%s) + budget ))
SUMMARY_SECS=30
# within N: N seconds, or fewer when the budget has fewer left (at least 1).
within() {
    local left=$(( deadline - SUMMARY_SECS - $(date +%s) ))
    (( left < 1 )) && left=1
    (( left < $1 )) && echo "$left" || echo "$1"
}

log() { printf '[gpu-smoke] %s\n' "$*" | tee -a "$WORK/smoke.log" >&2; }

# Whatever happens, $OUT ends with the summary, the main report, the log and every
# file packed in one archive.
finish() {
    local rc=$?
    for f in summary.json report.json smoke.log; do
        if [[ -f "$WORK/$f" && "$WORK" != "$OUT" ]]; then cp "$WORK/$f" "$OUT/$f"; fi
    done
    tar -czf "$OUT/gpu-smoke.tar.gz" -C "$(dirname "$WORK")" "$(basename "$WORK")" 2>/dev/null \
        || printf '[gpu-smoke] could not pack %s\n' "$WORK" >&2
    exit "$rc"
}
trap finish EXIT

log "output: $OUT (every file: $WORK)"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi >"$WORK/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed (rc $?)"
    timeout 30 nvidia-smi topo -m >"$WORK/nvidia-smi-topo.txt" 2>&1 || true
else
    log "nvidia-smi not found"
fi

# Where the driver's library is, for the log: gpuvet opens `libcuda.so.1` by name.
log "libcuda: $( (ldconfig -p 2>/dev/null | grep -m1 'libcuda\.so\.1') || echo 'not in the loader cache')"
log "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

PYTHON="$(command -v python3 || command -v python || true)"

# pip's NVIDIA wheels (cuBLAS, NVRTC, NCCL) live outside the loader's path; gpuvet
# searches the usual Python prefixes itself, and this adds the active interpreter's.
if [[ -n "$PYTHON" ]]; then
    dirs="$(timeout 60 "$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
print(":".join(sorted({d for r in roots for d in glob.glob(os.path.join(r, "*", "lib")) if os.path.isdir(d)})))
EOF
)"
    if [[ -n "$dirs" ]]; then
        export GPUVET_CUDA_LIBRARY_PATH="${dirs}${GPUVET_CUDA_LIBRARY_PATH:+:$GPUVET_CUDA_LIBRARY_PATH}"
        log "GPUVET_CUDA_LIBRARY_PATH=$GPUVET_CUDA_LIBRARY_PATH"
    fi
fi

# The binary, built elsewhere.
BIN="${GPUVET_BIN:-$ROOT/target/release/gpuvet}"
if [[ ! -x "$BIN" ]]; then
    log "no gpuvet binary at $BIN"
    log "hint: build it where Rust is (CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p gpuvet) and bring target/release/gpuvet, or set GPUVET_BIN"
    exit 1
fi
log "using prebuilt $BIN"
[[ -x "$BIN" ]] || { log "no gpuvet binary at $BIN"; exit 1; }

# 2. gpuvet on the cuda backend. `inventory_consistency` compares what gpuvet read
# through NVML with what nvidia-smi says (GPU count and driver version).
smi_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
smi_driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null \
    | head -n 1 | tr -d ' ' || true)
expected="{"
[[ "${smi_count:-0}" -gt 0 ]] && expected+="\"gpu_count\": $smi_count"
if [[ -n "$smi_driver" ]]; then
    [[ "$expected" != "{" ]] && expected+=", "
    expected+="\"driver_version\": \"$smi_driver\""
fi
expected+="}"
cat >"$WORK/config.json" <<EOF
{
  "aimaster": {
    "sanity_check": {
      "fail_action": "retain",
      "micro_benchmarks": "gemm_flops,kernel_launch,all_reduce_1,comp_comm_overlap,inventory_consistency",
      "timeout": 5
    }
  },
  "gpuvet": { "backend": "cuda", "expected_inventory": $expected }
}
EOF
log "running gpuvet check --backend cuda"
# The GPU's clocks, power and throttle reasons while the checks run, 5 times a second.
smi_pid=""
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 200 >"$WORK/nvidia-smi-during-check.csv" 2>&1 &
    smi_pid=$!
fi
gpuvet_rc=0
started=$(date +%s.%N)
GPUVET_STORE="$WORK/gpuvet.db" RUST_BACKTRACE=1 timeout "$(within 180)" "$BIN" check \
    --config "$WORK/config.json" --backend cuda --json \
    >"$WORK/report.json" 2>"$WORK/gpuvet.log" || gpuvet_rc=$?
ended=$(date +%s.%N)
gate_secs=$(awk -v a="$started" -v b="$ended" 'BEGIN{printf "%.2f", b-a}')
log "gpuvet exited with $gpuvet_rc after $gate_secs s"
if [[ -n "$smi_pid" ]]; then kill "$smi_pid" 2>/dev/null || true; wait "$smi_pid" 2>/dev/null || true; fi
if [[ $gpuvet_rc -eq 124 ]]; then log "gpuvet timed out"; fi
# What a user reads after that run: the conclusion, from the store it wrote.
GPUVET_STORE="$WORK/gpuvet.db" timeout "$(within 30)" "$BIN" explain >"$WORK/explain.txt" 2>&1 \
    || log "gpuvet explain exited with $?"

# 2b. gemm_flops in the other precisions (bf16 ran above): fp8 through cuBLASLt, fp16,
# tf32 and fp32 through cuBLAS. Informational; a GPU without fp8 reports it unsupported.
for dtype in fp8 fp16 tf32 fp32; do
    cat >"$WORK/config-$dtype.json" <<EOF
{ "gpuvet": { "backend": "cuda", "gemm": { "dtype": "$dtype" } } }
EOF
    dtype_rc=0
    timeout "$(within 60)" "$BIN" check --config "$WORK/config-$dtype.json" --backend cuda --no-store \
        --json --checks gemm_flops >"$WORK/report-gemm-$dtype.json" \
        2>"$WORK/gpuvet-gemm-$dtype.log" || dtype_rc=$?
    log "gemm_flops in $dtype: gpuvet exited with $dtype_rc"
done

# 2c. The runtime check's NVML source on a real driver: ten seconds of `gpuvet watch`
# (findings as JSON lines, the /metrics page once). Informational: its exit code does
# not decide the smoke test.
watch_secs="${GPUVET_SMOKE_WATCH_SECS:-10}"
metrics_port="${GPUVET_SMOKE_METRICS_PORT:-9401}"
cat >"$WORK/watch.json" <<JSON
{ "gpuvet": { "watch": { "kmsg": "off", "nvml": true, "nccl_ras": "off",
                          "metrics_addr": "127.0.0.1:$metrics_port" } } }
JSON
log "running gpuvet watch for $watch_secs s (NVML)"
GPUVET_STORE="$WORK/watch.db" timeout "$(within $((watch_secs + 30)))" "$BIN" watch --config "$WORK/watch.json" \
    --json --duration "$watch_secs" >"$WORK/watch-findings.jsonl" 2>"$WORK/watch.log" &
watch_pid=$!
sleep "$(awk -v s="$watch_secs" 'BEGIN{print s/2}')"
timeout 10 curl -s "http://127.0.0.1:$metrics_port/metrics" >"$WORK/metrics.txt" 2>&1 \
    || log "could not fetch /metrics (curl missing or the server did not start)"
wait "$watch_pid" || log "gpuvet watch exited with $?"

# 2c'. What the watcher costs with NVML polled every second, next to an idle `sleep`
# (goal < 0.5 % of one core and < 30 MB). Informational.
if [[ -n "$PYTHON" ]]; then
    cost_secs="${GPUVET_SMOKE_WATCH_COST_SECS:-15}"
    log "measuring gpuvet watch's cost with NVML for $cost_secs s (and sleep as the reference)"
    timeout "$(within $((2 * cost_secs + 30)))" "$PYTHON" "$ROOT/scripts/bench-watch.py" --nvml \
        "$cost_secs" "$BIN" >"$WORK/watch-cost.txt" 2>&1 || log "the watcher's cost was not measured (rc $?)"
fi

# 2d. The collectives across nodes over NCCL, with two local agents that each drive
# half of the GPUs. One GPU cannot be two NCCL ranks, so this needs two or more.
nccl_checks=all_reduce_2,all_gather_2,all_to_all_2,multi_all_reduce_2,all_reduce,multi_all_reduce
if [[ "${smi_count:-0}" -ge 2 ]]; then
    log "running gpuvet check --local-nodes 2 over NCCL ($nccl_checks)"
    nccl_rc=0
    timeout "$(within 150)" "$BIN" check --local-nodes 2 --backend cuda --no-store --json \
        --checks "$nccl_checks" >"$WORK/report-nccl.json" 2>"$WORK/gpuvet-nccl.log" || nccl_rc=$?
    log "gpuvet --local-nodes 2 exited with $nccl_rc"
else
    log "one GPU: the collectives across nodes over NCCL need two or more, skipped"
fi

# 3. torch.matmul on the same GPU (device 0, which gpuvet also measured).
cat >"$WORK/torch_matmul.py" <<'EOF'
import json, sys, time
result = {"available": False}
try:
    import torch
except Exception as e:  # not installed, or broken
    result["reason"] = f"torch is not importable: {e}"
    print(json.dumps(result)); sys.exit(0)
if not torch.cuda.is_available():
    result["reason"] = "torch imports but sees no CUDA device"
    print(json.dumps(result)); sys.exit(0)
n = 8192
dev = torch.device("cuda:0")
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

def measure(fn):
    # Same shape as gpuvet: ~0.5 s warm-up, ~1 s timed, back-to-back, event-timed.
    t0 = time.time()
    while time.time() - t0 < 0.5:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
    t = time.time(); fn(); torch.cuda.synchronize(); per = max(time.time() - t, 1e-4)
    iters = max(10, min(5000, int(1.0 / per)))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record(); torch.cuda.synchronize()
    secs = start.elapsed_time(stop) / 1000.0 / iters
    return 2.0 * n ** 3 / secs / 1e12, iters

def burst(fn, warmups=3, timed=10):
    # A short burst: a few products, over before the GPU reaches its power limit.
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(timed):
        fn()
    stop.record(); torch.cuda.synchronize()
    return 2.0 * n ** 3 / (start.elapsed_time(stop) / 1000.0 / timed) / 1e12

time.sleep(2.0)  # let the GPU cool off the previous step before the burst
burst_nn = burst(lambda: torch.matmul(a, b))
nn, iters_nn = measure(lambda: torch.matmul(a, b))
bt = b.t()
tn, iters_tn = measure(lambda: torch.matmul(a, bt))
result.update({
    "available": True,
    "device": torch.cuda.get_device_name(0),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "tflops_matmul": nn, "iterations_matmul": iters_nn,
    "tflops_matmul_bt": tn, "iterations_matmul_bt": iters_tn,
    "tflops_matmul_burst_of_10": burst_nn,
})
print(json.dumps(result))
EOF
if [[ -n "$PYTHON" ]]; then
    log "measuring torch.matmul bf16 8192^3 on cuda:0"
    timeout "$(within 120)" "$PYTHON" "$WORK/torch_matmul.py" >"$WORK/torch.json" 2>"$WORK/torch.log" \
        || echo "{\"available\": false, \"reason\": \"the torch measurement failed (rc $?), see torch.log\"}" >"$WORK/torch.json"
else
    echo '{"available": false, "reason": "no python interpreter on this machine"}' >"$WORK/torch.json"
fi

# 4. Summary.
if [[ -z "$PYTHON" ]]; then
    log "no python to summarise with; raw report in $WORK/report.json"
    cat "$WORK/report.json"
    exit 1
fi
timeout "$SUMMARY_SECS" "$PYTHON" - "$WORK" "$gpuvet_rc" "$gate_secs" <<'EOF'
import json, os, statistics, sys
out, rc, gate_secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception as e:
        return {"error": f"{name}: {e}"}
report, torch = load("report.json"), load("torch.json")
summary = {"gpuvet_exit_code": rc, "backend": report.get("backend"), "torch": torch,
           "check_seconds": gate_secs}
print(f"gpuvet exit code: {rc} after {gate_secs:.1f} s")
print(f"backend: {report.get('backend')}")
for d in report.get("devices", []):
    det = d.get("details", {})
    print(f"  device {d.get('index')}: {d.get('name')} cuda={det.get('cuda_version')} "
          f"driver={det.get('driver_version')} nccl={det.get('nccl_version', 'unavailable')}")
checks = {c.get("name"): c for c in report.get("checks", [])}
def values(name):
    c = checks.get(name, {})
    return [(e.get("entity", {}).get("index"), e.get("measurement", {})) for e in c.get("entities", [])]
for name, c in checks.items():
    vals = [m.get("value") for _, m in values(name) if m.get("value") is not None]
    shown = ", ".join(f"{v:.4g}" for v in vals)
    print(f"  {name}: {c.get('status')} in {c.get('duration_secs', 0):.2f} s "
          f"[{c.get('metric', {}).get('unit', '')}] {shown} {c.get('reason') or ''}")
    summary[name] = {"status": c.get("status"), "values": vals, "reason": c.get("reason"),
                     "duration_secs": c.get("duration_secs"),
                     "params": c.get("params"),
                     "extra": [m.get("extra") for _, m in values(name)]}
gemm0 = next((m.get("value") for i, m in values("gemm_flops") if i == 0), None)
ok = report.get("backend") == "cuda"
if gemm0 is not None and torch.get("available"):
    ref = torch["tflops_matmul"]
    ratio = gemm0 / ref
    summary["gemm_ratio_to_torch_matmul"] = ratio
    print(f"GEMM bf16 8192^3 on GPU 0: gpuvet {gemm0:.1f} TFLOPS, torch.matmul {ref:.1f} TFLOPS "
          f"(a @ b.T {torch['tflops_matmul_bt']:.1f}); ratio {ratio:.3f} (goal >= 0.97)")
    if torch.get("tflops_matmul_burst_of_10") is not None:
        print(f"torch.matmul in a burst of 10 after 3 warm-ups: "
              f"{torch['tflops_matmul_burst_of_10']:.1f} TFLOPS")
    ok = ok and ratio >= 0.97
else:
    print(f"GEMM ratio not measured: gpuvet={gemm0}, torch={torch.get('reason', torch.get('error'))}")
launch = values("kernel_launch")
if launch:
    walls = [m.get("value") for _, m in launch if m.get("value") is not None]
    events = [m.get("extra", {}).get("event_us") for _, m in launch if m.get("extra", {}).get("event_us")]
    if walls:
        print(f"kernel launch: wall {statistics.median(walls):.2f} us/launch"
              + (f", event {statistics.median(events):.2f} us" if events else "") + " (median over GPUs)")
# What each check waited for before its first measurement: the cuda backend's probe
# (driver, NVML, libraries), the slowest device's context and, for the launch kernel,
# NVRTC. The checks share one worker, so the first pays them and later ones report 0.
def setup_cost(measurements):
    cost = {}
    for key, name in [("setup_probe_ms", "probe"), ("setup_context_ms", "context"),
                      ("setup_nvrtc_ms", "nvrtc_compile")]:
        seen = [m.get("extra", {}).get(key) for m in measurements]
        seen = [v for v in seen if v is not None]
        if seen:
            cost[name] = max(seen)
    if cost:
        cost["total"] = sum(cost.values())
    return cost
summary["worker_setup_ms"] = {}
for name in checks:
    cost = setup_cost([m for _, m in values(name)])
    if cost:
        summary["worker_setup_ms"][name] = cost
        print(f"worker setup for {name}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in cost.items()))
summary["gemm_by_dtype"] = {}
for dtype in ["fp8", "fp16", "tf32", "fp32"]:
    rep = load(f"report-gemm-{dtype}.json")
    c = next((c for c in rep.get("checks", []) if c.get("name") == "gemm_flops"), None)
    if c is None:
        print(f"gemm_flops {dtype}: no report ({rep.get('error', 'no gemm_flops in it')})")
        continue
    vals = [e.get("measurement", {}).get("value") for e in c.get("entities", [])]
    vals = [v for v in vals if v is not None]
    shown = ", ".join(f"{v:.1f}" for v in vals)
    print(f"gemm_flops {dtype}: {c.get('status')} {shown} TFLOPS {c.get('reason') or ''}")
    summary["gemm_by_dtype"][dtype] = {"status": c.get("status"), "values": vals,
                                       "reason": c.get("reason"), "params": c.get("params"),
                                       "worker_setup_ms": setup_cost(
                                           [e.get("measurement", {}) for e in c.get("entities", [])])}
ar = values("all_reduce_1")
if ar and ar[0][1].get("value") is not None:
    print(f"all_reduce_1: busbw {ar[0][1]['value']:.1f} GB/s")
elif "all_reduce_1" in checks:
    print(f"all_reduce_1: {checks['all_reduce_1'].get('status')} ({checks['all_reduce_1'].get('reason')})")
nccl = load("report-nccl.json") if os.path.exists(os.path.join(out, "report-nccl.json")) else None
if nccl is not None:
    summary["across_nodes"] = {}
    for c in nccl.get("checks", []):
        vals = [e.get("measurement", {}).get("value") for e in c.get("entities", [])]
        vals = [v for v in vals if v is not None]
        shown = ", ".join(f"{v:.4g}" for v in vals)
        print(f"  across 2 local agents, {c.get('name')}: {c.get('status')} {shown} "
              f"{c.get('params', {}).get('transport', '')} {c.get('reason') or ''}")
        summary["across_nodes"][c.get("name")] = {"status": c.get("status"), "values": vals,
                                                  "params": c.get("params"), "reason": c.get("reason")}
def lines(name):
    try:
        with open(os.path.join(out, name)) as f:
            return [line for line in f.read().splitlines() if line.strip()]
    except OSError:
        return []
findings = lines("watch-findings.jsonl")
metrics = [line for line in lines("metrics.txt") if not line.startswith("#")]
summary["watch"] = {"findings": len(findings), "first_findings": findings[:5],
                    "metrics_samples": len(metrics),
                    "gpu_metrics": [line for line in metrics if "gpu" in line][:20]}
print(f"gpuvet watch: {len(findings)} findings, {len(metrics)} samples on /metrics")
def smi_during(name):
    # nvidia-smi's CSV: timestamp, index, clocks.sm [MHz], power.draw [W], temperature, reasons.
    rows = []
    for line in lines(name)[1:]:
        cells = [c.strip() for c in line.split(",")]
        try:
            rows.append((float(cells[2].split()[0]), float(cells[3].split()[0]), cells[5]))
        except (IndexError, ValueError):
            continue
    busy = [r for r in rows if r[1] > 200.0]
    if not busy:
        return None
    return {"samples": len(rows), "busy_samples": len(busy),
            "sm_clock_mhz_min": min(r[0] for r in busy), "sm_clock_mhz_max": max(r[0] for r in busy),
            "power_w_max": max(r[1] for r in busy),
            "throttle_reasons": sorted({r[2] for r in busy})}
during = smi_during("nvidia-smi-during-check.csv")
if during:
    summary["gpu_during_check"] = during
    print(f"while the checks ran (power > 200 W): SM clock {during['sm_clock_mhz_min']:.0f}-"
          f"{during['sm_clock_mhz_max']:.0f} MHz, up to {during['power_w_max']:.0f} W, "
          f"throttle reasons {', '.join(during['throttle_reasons'])}")
summary["explain"] = lines("explain.txt")
print("gpuvet explain:")
for line in summary["explain"][:40]:
    print(f"  {line}")
summary["watch"]["cost"] = lines("watch-cost.txt")
for line in summary["watch"]["cost"]:
    print(f"  {line}")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
sys.exit(0 if ok else 1)
EOF

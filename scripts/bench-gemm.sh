#!/usr/bin/env bash
# Benchmark, not a test: gpuvet's cpu `gemm_flops` next to a reference GEMM measured in
# the same run, as a ratio. The reference is numpy (OpenBLAS, one thread) when numpy is
# importable, and the `gemm` crate called directly otherwise (or both when both exist).
# Usage: scripts/bench-gemm.sh [SIZE]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-1024}"

cargo build --release --quiet -p gpuvet --bin gpuvet
cargo build --release --quiet -p gpuvet-backend --example gemm_reference

config="$(mktemp)"
trap 'rm -f "$config"' EXIT
cat >"$config" <<JSON
{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops", "timeout": 5}},
 "gpuvet": {"backend": "cpu", "cpu_devices": 1, "gemm": {"dtype": "fp32", "size": $size}}}
JSON

gpuvet_tflops() {
  target/release/gpuvet check --config "$config" --json --no-store \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["checks"][0]["entities"][0]["measurement"]["value"])'
}

numpy_tflops() {
  # OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, set on some machines here for old OpenBLAS
  # builds, slow a current numpy down: unset them for the reference alone.
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 python3 - "$size" <<'PY'
import sys, time
import numpy as np
n = int(sys.argv[1])
a = np.random.rand(n, n).astype(np.float32)
b = np.random.rand(n, n).astype(np.float32)
a @ b
times = []
for _ in range(20):
    t = time.perf_counter(); a @ b; times.append(time.perf_counter() - t)
times.sort()
print(2 * n**3 / times[len(times) // 2] / 1e12)
PY
}

have_numpy=0
python3 -c 'import numpy' 2>/dev/null && have_numpy=1

# Three interleaved rounds, so a noisy neighbour hits every contender alike; the
# median of each is reported.
ours=() crate=() numpy=()
for _ in 1 2 3; do
  crate+=("$(target/release/examples/gemm_reference "$size")")
  ours+=("$(gpuvet_tflops)")
  [ "$have_numpy" = 1 ] && numpy+=("$(numpy_tflops)")
done
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
ours_m="$(median "${ours[@]}")"
crate_m="$(median "${crate[@]}")"
printf 'gemm_flops (gpuvet, cpu backend, fp32 %s^3, 1 thread): %.4f TFLOPS  (runs: %s)\n' "$size" "$ours_m" "${ours[*]}"
printf 'reference: gemm crate called directly:             %.4f TFLOPS  ratio %.3f\n' \
  "$crate_m" "$(python3 -c "print($ours_m / $crate_m)")"
if [ "$have_numpy" = 1 ]; then
  numpy_m="$(median "${numpy[@]}")"
  printf 'reference: numpy matmul (OpenBLAS, 1 thread):      %.4f TFLOPS  ratio %.3f\n' \
    "$numpy_m" "$(python3 -c "print($ours_m / $numpy_m)")"
else
  echo "numpy is not importable here; only the gemm crate reference ran"
fi

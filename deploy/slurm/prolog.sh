#!/bin/sh
# gpuvet's Slurm Prolog (slurm.conf: Prolog=/etc/slurm/gpuvet-prolog.sh): the node's own
# checks before a job lands on it. A node whose checks fail is drained with gpuvet's
# verdict as the reason (`scontrol show node` says it) and the prolog fails, so Slurm
# requeues the job elsewhere. Whatever else happens (gpuvet missing, its config wrong,
# the time up), the job starts: the prolog never holds a healthy node longer than
# GPUVET_PROLOG_SECONDS.
#
# Settings, from the environment or from the file GPUVET_SLURM_SETTINGS (default
# /etc/default/gpuvet-slurm, read if present; slurmd gives a prolog almost no
# environment of its own):
#   GPUVET                 the binary (default /usr/local/bin/gpuvet)
#   GPUVET_CONFIG          gpuvet's config file, read by gpuvet (optional)
#   GPUVET_PROLOG_CHECKS   the node-local checks (default gemm_flops,kernel_launch,all_reduce_1)
#   GPUVET_PROLOG_SECONDS  the most the prolog takes, in seconds, at least 10 (default 120;
#                          keep it below slurm.conf's PrologEpilogTimeout)
#   GPUVET_PROLOG_DRAIN_CODES  gpuvet's exit codes that drain the node (default "1 69":
#                          a check failed; the backend is not available, e.g. no GPU seen)
#   GPUVET_SLURM_LOG       one line per prolog and epilog (default /var/log/gpuvet/slurm.log)
# Exit: 0 to let the job start; 1 after draining the node.
set -u

settings="${GPUVET_SLURM_SETTINGS:-/etc/default/gpuvet-slurm}"
# Exported, so that gpuvet sees GPUVET_CONFIG, GPUVET_STORE and the like.
set -a
# shellcheck disable=SC1090
[ -r "$settings" ] && . "$settings"
set +a

# slurmd runs a prolog without PATH.
export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
gpuvet="${GPUVET:-/usr/local/bin/gpuvet}"
checks="${GPUVET_PROLOG_CHECKS:-gemm_flops,kernel_launch,all_reduce_1}"
seconds="${GPUVET_PROLOG_SECONDS:-120}"
drain_codes="${GPUVET_PROLOG_DRAIN_CODES:-1 69}"
log="${GPUVET_SLURM_LOG:-/var/log/gpuvet/slurm.log}"
node="${SLURMD_NODENAME:-$(hostname -s)}"
job="${SLURM_JOB_ID:-unknown}"

started=$(date +%s%N)
say() {
  elapsed_ms=$((($(date +%s%N) - started) / 1000000))
  mkdir -p "$(dirname "$log")" 2>/dev/null
  printf '%s prolog node=%s job=%s restart=%s elapsed_ms=%s %s\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$node" "$job" "${SLURM_JOB_RESTART_COUNT:-0}" \
    "$elapsed_ms" "$*" >>"$log" 2>/dev/null
}

case "$seconds" in
  '' | *[!0-9]*) say "GPUVET_PROLOG_SECONDS=\`$seconds\` is not a whole number of seconds; not checked" && exit 0 ;;
esac
[ "$seconds" -ge 10 ] || seconds=10

# gpuvet is killed 2 s before the budget's end (TERM, then KILL a second later), which
# leaves time for the drain; its own deadline (minutes) comes 3 s before that, so a
# slow check is reported as timed out rather than killed.
hard=$((seconds - 3))
soft_minutes=$(awk -v s="$hard" 'BEGIN { printf "%.3f", (s - 3) / 60 }')
out=$(mktemp "${TMPDIR:-/tmp}/gpuvet-prolog.XXXXXX") || { say "no temp file; not checked"; exit 0; }
trap 'rm -f "$out" "$out.err"' EXIT

GPUVET_JOB_ID="${GPUVET_JOB_ID:-slurm-$job}" GPUVET_NODE="${GPUVET_NODE:-$node}" \
  timeout -k 1 "$hard" "$gpuvet" check --checks "$checks" --timeout "$soft_minutes" \
  >"$out" 2>"$out.err" </dev/null
code=$?

if [ "$code" -eq 0 ]; then
  say "passed checks=$checks"
  exit 0
fi
if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
  say "timed out after $hard s; the job starts unchecked"
  exit 0
fi
for drain in $drain_codes; do
  [ "$code" -eq "$drain" ] || continue
  # The verdict line of gpuvet's report is the reason, else its error line.
  reason=$(sed -n 's/^verdict: //p' "$out" | head -n 1)
  [ -n "$reason" ] || reason=$(sed -n 's/^error: //p' "$out.err" | head -n 1)
  [ -n "$reason" ] || reason="checks failed (exit $code)"
  reason=$(printf 'gpuvet: %s' "$reason" | tr -d '"' | cut -c 1-200)
  if scontrol update NodeName="$node" State=DRAIN Reason="$reason" 2>>"$out.err"; then
    say "drained exit=$code reason=\"$reason\""
  else
    say "drain failed exit=$code reason=\"$reason\": $(tail -n 1 "$out.err")"
  fi
  exit 1
done
say "gpuvet could not check (exit $code: $(sed -n 's/^error: //p' "$out.err" | head -n 1)); the job starts"
exit 0

#!/bin/sh
# gpuvet's Slurm Epilog (slurm.conf: Epilog=/etc/slurm/gpuvet-epilog.sh): records the
# job's end on each of its nodes: one line in GPUVET_SLURM_LOG for every job, and, for
# a job gpuvet ran in on this node, a `JobEnded` event in its store (`gpuvet epilog`,
# at most 10 s), which the timeline, the fleet server and a bundle show; then sends
# what waits in gpuvet's outbox to the fleet server when the config has `report_to`
# (`gpuvet push`, at most 10 s). `gpuvet run` itself records the app's exit
# (`InstanceExited`); the job's end is recorded also for a job that was cancelled or
# whose app never started. It always exits 0: a failing Epilog would drain the node.
#
# Settings as the prolog's (deploy/slurm/prolog.sh): GPUVET, GPUVET_CONFIG,
# GPUVET_STORE, GPUVET_SLURM_LOG, from the environment or GPUVET_SLURM_SETTINGS.
set -u

settings="${GPUVET_SLURM_SETTINGS:-/etc/default/gpuvet-slurm}"
# Exported, so that gpuvet sees GPUVET_CONFIG, GPUVET_STORE and the like.
set -a
# shellcheck disable=SC1090
[ -r "$settings" ] && . "$settings"
set +a

export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
gpuvet="${GPUVET:-/usr/local/bin/gpuvet}"
log="${GPUVET_SLURM_LOG:-/var/log/gpuvet/slurm.log}"
node="${SLURMD_NODENAME:-$(hostname -s)}"

mkdir -p "$(dirname "$log")" 2>/dev/null
printf '%s epilog node=%s job=%s exit=%s user=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$node" "${SLURM_JOB_ID:-unknown}" "${SLURM_JOB_DERIVED_EC:-unknown}" \
  "${SLURM_JOB_USER:-unknown}" >>"$log" 2>/dev/null

# Slurm runs the Epilog with SLURMD_NODENAME, the node's name in Slurm, which gpuvet
# takes as the node's.
timeout -k 1 10 "$gpuvet" epilog </dev/null >/dev/null 2>&1

if [ -n "${GPUVET_CONFIG:-}" ] && grep -q '"report_to"' "$GPUVET_CONFIG" 2>/dev/null; then
  timeout -k 1 10 "$gpuvet" push </dev/null >/dev/null 2>&1
fi
exit 0

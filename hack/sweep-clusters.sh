#!/usr/bin/env bash
# Deletes member clusters whose owning process is gone (a killed test run or
# `atoll-dev`). Cluster names are <prefix>-<pid>-...; live owners are kept.
#
# It touches only what it can prove is a dead owner's:
#   - a cluster directory (and kubeconfig) owned by the user running this;
#   - whose owner pid has no process, or a process that started after the
#     cluster was made (the pid was reused), judged from /proc/<pid>/stat's
#     start time, not `kill -0` (which fails with EPERM on a live process of
#     another user, and succeeds on a reused pid);
#   - processes left behind are those whose working directory is exactly the
#     cluster's directory (kwokctl's binary runtime starts every component
#     there and records it in <dir>/pids/*.pid), owned by the same user;
#     no pattern is matched against command lines.
#
# Environment: KWOK_WORKDIR (default ${TMPDIR:-/tmp}/atoll-kwok),
# ATOLL_SWEEP_PREFIX (default atoll), ATOLL_SWEEP_DRY_RUN=1 to only print.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${KWOK_WORKDIR:-${TMPDIR:-/tmp}/atoll-kwok}
PREFIX=${ATOLL_SWEEP_PREFIX:-atoll}
DRY=${ATOLL_SWEEP_DRY_RUN:-}
ME=$(id -u)
[[ -d "$WORK" ]] || exit 0

# log writes to the script's standard error as it was (fd 3), also from
# commands whose own error output is silenced.
exec 3>&2
log() { printf '[sweep] %s\n' "$*" >&3; }

# run runs a command, or only prints it with ATOLL_SWEEP_DRY_RUN=1.
run() {
  if [[ -n "$DRY" ]]; then log "would run: $*"; else "$@"; fi
}

# shellcheck source=hack/proc.sh
. "$ROOT/hack/proc.sh"

# owner_alive says whether pid $1 is the live process that made path $2.
owner_alive() {
  [[ $1 == "$$" ]] || proc_made_path "$1" "$2"
}

# owner_pid prints the pid in a name <prefix>-<pid>-...
owner_pid() {
  local rest=${1#"$PREFIX"-}
  [[ $rest != "$1" ]] || return 1
  rest=${rest%%-*}
  [[ $rest =~ ^[0-9]+$ ]] || return 1
  echo "$rest"
}

# mine says whether path $1 belongs to the user running this script.
mine() { [[ $(stat -c %u -- "$1" 2>/dev/null) == "$ME" ]]; }

# leftovers prints the pids of live processes of this user whose working
# directory is exactly $1: those kwokctl started for that cluster. The
# pidfiles kwokctl wrote are read first; /proc is scanned for any it lost.
leftovers() {
  local dir=$1 p pid
  local -A seen=()
  local candidates=()
  for p in "$dir"/pids/*.pid; do
    [[ -f $p ]] && candidates+=("$(tr -dc 0-9 <"$p")")
  done
  for p in /proc/[0-9]*; do candidates+=("${p#/proc/}"); done
  for pid in "${candidates[@]}"; do
    [[ -n $pid && -z ${seen[$pid]:-} && $pid != "$$" ]] || continue
    seen[$pid]=1
    # -ef: the same directory (device and inode) as the cluster's, and -O:
    # owned by this user; both bash builtins, so the scan forks nothing.
    [[ /proc/$pid/cwd -ef $dir && -O /proc/$pid ]] || continue
    proc_live "$pid" || continue
    echo "$pid"
  done
}

# kill_leftovers SIGKILLs what kwokctl left running for dir $1 and waits
# (up to 10 s) until the kernel has removed it.
kill_leftovers() {
  local dir=$1 pids
  for _ in $(seq 1 100); do
    mapfile -t pids < <(leftovers "$dir")
    ((${#pids[@]} > 0)) || return 0
    log "killing ${#pids[@]} process(es) left in $dir: ${pids[*]}"
    run kill -9 "${pids[@]}" 2>/dev/null || true
    [[ -z "$DRY" ]] || return 0
    sleep 0.1 # polling the process table until the killed are gone
  done
  log "processes still running in $dir"
}

if [[ -d "$WORK/clusters" ]]; then
  for dir in "$WORK"/clusters/"$PREFIX"-*; do
    if [[ ! -d "$dir" ]] || ! mine "$dir"; then continue; fi
    name=$(basename "$dir")
    pid=$(owner_pid "$name") || continue
    owner_alive "$pid" "$dir" && continue
    log "removing stale member cluster $name (owner $pid is gone)"
    if [[ -x "$ROOT/bin/kwokctl" ]]; then
      KWOK_WORKDIR="$WORK" run "$ROOT/bin/kwokctl" delete cluster --name "$name" >/dev/null 2>&1 || true
    fi
    kill_leftovers "$dir"
    run rm -rf -- "$dir" "$WORK/$name.kubeconfig"
  done
fi
# Kubeconfigs and config files of owners that are gone.
for f in "$WORK"/"$PREFIX"-*; do
  if [[ ! -f "$f" ]] || ! mine "$f"; then continue; fi
  pid=$(owner_pid "$(basename "$f")") || continue
  owner_alive "$pid" "$f" || run rm -f -- "$f"
done

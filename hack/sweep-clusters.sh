#!/usr/bin/env bash
# Deletes member clusters whose owning process is gone (a killed test run or
# `atoll dev`). Cluster names are <prefix>-<pid>-...; live owners are kept.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${KWOK_WORKDIR:-${TMPDIR:-/tmp}/atoll-kwok}
[[ -d "$WORK/clusters" && -x "$ROOT/bin/kwokctl" ]] || exit 0
for dir in "$WORK"/clusters/atoll-*; do
  [[ -d "$dir" ]] || continue
  name=$(basename "$dir")
  pid=$(cut -d- -f2 <<<"$name")
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then continue; fi
  echo "removing stale member cluster $name"
  KWOK_WORKDIR="$WORK" "$ROOT/bin/kwokctl" delete cluster --name "$name" >/dev/null 2>&1 || true
  pkill -9 -f "$dir" 2>/dev/null || true
  rm -rf "$dir" "$WORK/$name.kubeconfig"
done
# Kubeconfigs and config files of owners that are gone.
for f in "$WORK"/atoll-*; do
  [[ -f "$f" ]] || continue
  pid=$(cut -d- -f2 <<<"$(basename "$f")")
  if [[ "$pid" =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null; then rm -f "$f"; fi
done

#!/usr/bin/env bash
# Builds Prometheus and promtool into bin/ from the Go module proxy
# (github.com/prometheus/prometheus at $PROMETHEUS_VERSION, tools/versions.mk;
# its Go module is v0.3xx.y for Prometheus 3.xx.y), static, the way
# hack/build-tools.sh builds the member-cluster binaries: a module of its own
# under bin/.build requiring the pinned version, stamped, skipped when the
# stamp matches.
#
# Service discovery: only what Atoll's configurations use (static and file,
# always built in; dns for compose's replicas; kubernetes for deploy/k8s).
# No web UI assets are embedded (the builtinassets tag is off): the HTTP API,
# which the rules' tests and hack/compose.sh query, is all there is.
set -euo pipefail

: "${PROMETHEUS_VERSION:?set PROMETHEUS_VERSION (the Makefile does, from tools/versions.mk)}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin"
WORK="$BIN/.build/prometheus"
mkdir -p "$BIN" "$WORK"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod PATH="$PATH:/usr/local/go/bin"

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ -f "$BIN/.stamp-prometheus" && "$(cat "$BIN/.stamp-prometheus")" == "$PROMETHEUS_VERSION" && -x "$BIN/prometheus" && -x "$BIN/promtool" ]]; then
  log "prometheus $PROMETHEUS_VERSION up to date"
  exit 0
fi
# The release these binaries report (v0.316.0 is Prometheus 3.16.0).
release=$(sed -E 's/^v0\.([0-9]+)([0-9][0-9])\.([0-9]+).*/\1.\2.\3/; s/\.0([0-9])\./.\1./' <<<"$PROMETHEUS_VERSION")
cat >"$WORK/go.mod" <<MOD
module atoll.dev/tools/prometheus

go 1.26

require github.com/prometheus/prometheus $PROMETHEUS_VERSION
MOD
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/prometheus/prometheus/cmd/prometheus"\n\t_ "github.com/prometheus/prometheus/cmd/promtool"\n)\n' >"$WORK/tools.go"
tags=remove_all_sd,enable_dns_sd,enable_kubernetes_sd
log "prometheus $PROMETHEUS_VERSION (Prometheus $release): go mod tidy"
(cd "$WORK" && go mod tidy >/dev/null)
for c in prometheus promtool; do
  log "prometheus: building $c (cold: several minutes on 2 cores)"
  (cd "$WORK" && go build -trimpath -tags "$tags" \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=$PROMETHEUS_VERSION" \
    -o "$BIN/$c" "github.com/prometheus/prometheus/cmd/$c")
done
echo "$PROMETHEUS_VERSION" >"$BIN/.stamp-prometheus"
log "prometheus done"

#!/usr/bin/env bash
# Builds the member-cluster toolchain into bin/ from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
# (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server/v3), kwok and kwokctl
# (sigs.k8s.io/kwok), metrics-server, nats (github.com/nats-io/natscli). kwokctl gets kubectl from here (libs/testenv sets
# KWOK_KUBECTL_BINARY) instead of downloading it.
#
# Versions come from tools/versions.mk via the environment (see Makefile).
# Each group is stamped with its version; a group whose stamp matches is skipped.
# Within the kube group, a binary that is missing while the stamp matches (one
# added to the group later, as kubectl was) is built alone.
set -euo pipefail

: "${KUBE_VERSION:?}" "${KUBE_STAGING_VERSION:?}" "${ETCD_VERSION:?}" "${KWOK_VERSION:?}" "${METRICS_SERVER_VERSION:?}" "${NATSCLI_VERSION:?}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin"
WORK="$BIN/.build"
mkdir -p "$BIN" "$WORK"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

stamp_ok() { [[ -f "$BIN/.stamp-$1" && "$(cat "$BIN/.stamp-$1")" == "$2" ]] && shift 2 && for b in "$@"; do [[ -x "$BIN/$b" ]] || return 1; done; }

# The Kubernetes binaries, all from one k8s.io/kubernetes module build.
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

build_kube() {
  local want="$KUBE_VERSION/$KUBE_STAGING_VERSION"
  if stamp_ok kube "$want" "${KUBE_BINS[@]}"; then
    log "kubernetes $KUBE_VERSION up to date"; return
  fi
  local todo=() b
  for b in "${KUBE_BINS[@]}"; do
    if stamp_ok kube "$want" "$b"; then log "kubernetes: $b $KUBE_VERSION up to date"; else todo+=("$b"); fi
  done
  local dir="$WORK/kube"
  rm -rf "$dir"; mkdir -p "$dir"
  log "kubernetes $KUBE_VERSION: fetching module and its staging list"
  local src
  src=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  {
    echo "module atoll.dev/tools/kube"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    # Every staging module Kubernetes replaces with ./staging/... is pinned to
    # the published module at the matching v0 version.
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$src/go.mod" |
      awk -v v="$KUBE_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$dir/go.mod"
  log "kubernetes: $(grep -c '=> k8s.io' "$dir/go.mod") staging modules replaced"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for b in "${KUBE_BINS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
    printf ')\n'
  } >"$dir/tools.go"
  log "kubernetes: go mod tidy"
  (cd "$dir" && go mod tidy -e >/dev/null)
  for c in "${todo[@]}"; do
    log "kubernetes: building $c (cold: several minutes each on 2 cores)"
    (cd "$dir" && go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
  done
  echo "$want" >"$BIN/.stamp-kube"
  log "kubernetes $KUBE_VERSION done"
}

build_etcd() {
  if stamp_ok etcd "$ETCD_VERSION" etcd; then log "etcd $ETCD_VERSION up to date"; return; fi
  local dir="$WORK/etcd"
  rm -rf "$dir"; mkdir -p "$dir"
  cat >"$dir/go.mod" <<MOD
module atoll.dev/tools/etcd

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  cat >"$dir/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "etcd $ETCD_VERSION: go mod tidy + build"
  (cd "$dir" && go mod tidy >/dev/null && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)
  echo "$ETCD_VERSION" >"$BIN/.stamp-etcd"
  log "etcd done"
}

build_kwok() {
  if stamp_ok kwok "$KWOK_VERSION" kwok kwokctl; then log "kwok $KWOK_VERSION up to date"; return; fi
  log "kwok $KWOK_VERSION: go install kwok kwokctl"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  echo "$KWOK_VERSION" >"$BIN/.stamp-kwok"
  log "kwok done"
}

# metrics-server (sigs.k8s.io/metrics-server): kwokctl starts it in member
# clusters given --enable metrics-server --metrics-server-binary (libs/testenv).
build_metrics_server() {
  if stamp_ok metrics-server "$METRICS_SERVER_VERSION" metrics-server; then log "metrics-server $METRICS_SERVER_VERSION up to date"; return; fi
  log "metrics-server $METRICS_SERVER_VERSION: go install (cold: ~8 minutes on 2 cores)"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION"
  echo "$METRICS_SERVER_VERSION" >"$BIN/.stamp-metrics-server"
  log "metrics-server done"
}

# The NATS CLI (github.com/nats-io/natscli/nats): the reference outside
# client of events credentials (tests, docs/tutorials).
build_natscli() {
  if stamp_ok natscli "$NATSCLI_VERSION" nats; then log "natscli $NATSCLI_VERSION up to date"; return; fi
  log "natscli $NATSCLI_VERSION: go install nats"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
  echo "$NATSCLI_VERSION" >"$BIN/.stamp-natscli"
  log "natscli done"
}

want=${1:-all}
case "$want" in
  all) build_kwok; build_etcd; build_kube; build_metrics_server; build_natscli ;;
  kube) build_kube ;; etcd) build_etcd ;; kwok) build_kwok ;; metrics-server) build_metrics_server ;; natscli) build_natscli ;;
  *) echo "usage: $0 [all|kube|etcd|kwok|metrics-server|natscli]" >&2; exit 2 ;;
esac

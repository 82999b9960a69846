#!/usr/bin/env bash
# Builds the one-node cluster's node (hack/k8s-up.sh) into bin/ from the Go
# module proxy, like hack/build-tools.sh builds the control plane:
#   kubelet, kube-proxy              k8s.io/kubernetes at KUBE_VERSION (the
#                                    control plane's module and staging pins)
#   containerd, containerd-shim-runc-v2, ctr
#                                    github.com/containerd/containerd/v2
#   cni/bridge, cni/host-local, cni/loopback, cni/portmap
#                                    github.com/containernetworking/plugins
#   coredns                          github.com/coredns/coredns with only the
#                                    plugins the node's DNS uses
# Everything static (CGO_ENABLED=0). Each group is stamped with its version
# and skipped when its stamp matches. Versions: tools/versions.mk and
# tools/k8s-node.mk, through the environment (the Makefile exports them).
set -euo pipefail

: "${KUBE_VERSION:?}" "${KUBE_STAGING_VERSION:?}" "${CONTAINERD_VERSION:?}" "${CNI_PLUGINS_VERSION:?}" "${COREDNS_VERSION:?}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin"
WORK="$BIN/.build"
mkdir -p "$BIN/cni" "$WORK"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[k8s-node %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

stamp_ok() { [[ -f "$BIN/.stamp-$1" && "$(cat "$BIN/.stamp-$1")" == "$2" ]] && shift 2 && for b in "$@"; do [[ -x "$BIN/$b" ]] || return 1; done; }

build_kubelet() {
  local want="$KUBE_VERSION/$KUBE_STAGING_VERSION"
  if stamp_ok kubelet "$want" kubelet kube-proxy; then log "kubelet, kube-proxy $KUBE_VERSION up to date"; return; fi
  local dir="$WORK/kube-node" src
  rm -rf "$dir"; mkdir -p "$dir"
  src=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  {
    printf 'module atoll.dev/tools/kube-node\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$src/go.mod" | awk -v v="$KUBE_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n' >"$dir/tools.go"
  (cd "$dir" && go mod tidy -e >/dev/null)
  local c
  for c in kubelet kube-proxy; do
    log "kubernetes $KUBE_VERSION: building $c (cold: several minutes on 2 cores)"
    (cd "$dir" && go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
  done
  echo "$want" >"$BIN/.stamp-kubelet"
}

build_containerd() {
  if stamp_ok containerd "$CONTAINERD_VERSION" containerd containerd-shim-runc-v2 ctr; then log "containerd $CONTAINERD_VERSION up to date"; return; fi
  log "containerd $CONTAINERD_VERSION: go install containerd, containerd-shim-runc-v2, ctr (no btrfs, devmapper, zfs: they need cgo)"
  local m=github.com/containerd/containerd/v2
  GOBIN="$BIN" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" \
    "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION"
  echo "$CONTAINERD_VERSION" >"$BIN/.stamp-containerd"
}

build_cni() {
  if stamp_ok cni "$CNI_PLUGINS_VERSION" cni/bridge cni/host-local cni/loopback cni/portmap; then log "CNI plugins $CNI_PLUGINS_VERSION up to date"; return; fi
  log "CNI plugins $CNI_PLUGINS_VERSION: go install bridge, host-local, loopback, portmap"
  local m=github.com/containernetworking/plugins/plugins
  GOBIN="$BIN/cni" go install -trimpath -ldflags "-s -w" \
    "$m/main/bridge@$CNI_PLUGINS_VERSION" "$m/ipam/host-local@$CNI_PLUGINS_VERSION" "$m/main/loopback@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION"
  echo "$CNI_PLUGINS_VERSION" >"$BIN/.stamp-cni"
}

build_coredns() {
  if stamp_ok coredns "$COREDNS_VERSION" coredns; then log "coredns $COREDNS_VERSION up to date"; return; fi
  local dir="$WORK/coredns"
  rm -rf "$dir"; mkdir -p "$dir"
  printf 'module atoll.dev/tools/coredns\n\ngo 1.26\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$dir/go.mod"
  cat >"$dir/main.go" <<'GO'
// Command coredns is CoreDNS with only the plugins the one-node cluster's DNS uses.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "errors", "health", "ready", "hosts", "kubernetes", "cache", "loadbalance", "forward"}
}

func main() { coremain.Run() }
GO
  log "coredns $COREDNS_VERSION: go mod tidy + build"
  (cd "$dir" && go mod tidy >/dev/null && go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" .)
  echo "$COREDNS_VERSION" >"$BIN/.stamp-coredns"
}

build_containerd
build_cni
build_coredns
build_kubelet
log "done"

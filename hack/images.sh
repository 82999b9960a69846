#!/usr/bin/env bash
# Builds the region's container images offline: every binary static
# (CGO_ENABLED=0) from this repository or the Go module proxy, packed FROM
# scratch with `docker import` (no base image, no registry, no builder),
# with CA certificates, /etc/passwd naming the non-root user 65532, a
# writable /tmp and a home. Tagged atoll/<name>:$VERSION and :latest.
#
#   atoll/<service>     each of $SERVICES (services/<s>/cmd/<s>), user 65532
#   atoll/atoll         the CLI (atoll, the compose tests' client) and
#                       atoll-admin (`atoll-admin bootstrap`, the bootstrap Job)
#   atoll/nats-server   nats-server at the version libs/bus's go.mod requires
#   atoll/member        a member cluster: kwokctl's binary runtime with bin/'s
#                       etcd, kube-apiserver, kube-controller-manager,
#                       kube-scheduler, kwok, kubectl, run by atoll-member
#                       (services/atoll/cmd/atoll-member)
#   atoll/prometheus    bin/prometheus (make tools: the pinned module,
#                       hack/build-prometheus.sh), its TSDB in /data
#
# An image whose content has not changed is not imported again (its
# content hash is a label), and Go's build cache makes unchanged binaries
# free, so a second run costs seconds.
#
# Environment: VERSION (default: git describe), SERVICES (the Makefile's),
# IMAGES (default: all of the above; e.g. IMAGES="gateway nats-server").
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
: "${SERVICES:?set SERVICES (the Makefile does)}"
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
IMAGES=${IMAGES:-"$SERVICES atoll nats-server member prometheus"}
OUT="$ROOT/bin/.images"
export CGO_ENABLED=0 PATH="$PATH:/usr/local/go/bin"

log() { printf '[images %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

"$ROOT/hack/docker.sh"

ldflags="-s -w -X atoll.dev/libs/daemon.Version=$VERSION"

# rootfs DIR: the files every image has besides its binaries.
rootfs() {
  local d=$1
  rm -rf "$d"; mkdir -p "$d/etc/ssl/certs" "$d/tmp" "$d/home/nonroot"
  cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$d/etc/group"
  chmod 1777 "$d/tmp"
  chown 65532:65532 "$d/home/nonroot" 2>/dev/null || true
}

# pack NAME ENTRYPOINT: imports bin/.images/NAME/rootfs as atoll/NAME.
pack() {
  local name=$1 entry=$2 d="$OUT/$1/rootfs" tarball="$OUT/$1/rootfs.tar"
  tar --sort=name --mtime=@0 --numeric-owner -C "$d" -cf "$tarball" .
  local sum
  sum=$(sha256sum "$tarball" | cut -c1-16)
  local have
  have=$(docker image inspect -f '{{index .Config.Labels "atoll.dev/content"}}' "atoll/$name:$VERSION" 2>/dev/null || true)
  if [[ "$have" == "$sum" ]]; then
    log "atoll/$name:$VERSION up to date"
  else
    docker import \
      --change "ENTRYPOINT [\"$entry\"]" \
      --change "USER 65532:65532" \
      --change "WORKDIR /home/nonroot" \
      --change "ENV HOME=/home/nonroot SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
      --change "LABEL atoll.dev/content=$sum org.opencontainers.image.version=$VERSION org.opencontainers.image.title=$name" \
      "$tarball" "atoll/$name:$VERSION" >/dev/null
    log "atoll/$name:$VERSION built ($(du -h "$tarball" | cut -f1))"
  fi
  docker tag "atoll/$name:$VERSION" "atoll/$name:latest"
  rm -f "$tarball"
}

build_go() { # DIR PKG OUT
  (cd "$1" && go build -trimpath -ldflags "$ldflags" -o "$3" "$2")
}

for img in $IMAGES; do
  d="$OUT/$img/rootfs"
  case "$img" in
    atoll)
      rootfs "$d"
      build_go services/atoll ./cmd/atoll "$d/atoll"
      build_go services/atoll ./cmd/atoll-admin "$d/atoll-admin"
      pack atoll /atoll
      ;;
    nats-server)
      v=$(sed -n 's|^[[:space:]]*github.com/nats-io/nats-server/v2 \(v[^ ]*\).*|\1|p' libs/bus/go.mod)
      src="$OUT/nats-server/src"
      mkdir -p "$src"
      if [[ ! -f "$src/go.mod" ]] || ! grep -q "nats-server/v2 $v" "$src/go.mod"; then
        rm -f "$src/go.mod" "$src/go.sum"
        (cd "$src" && GOWORK=off go mod init atoll.dev/images/nats-server >/dev/null 2>&1 &&
          GOWORK=off go get "github.com/nats-io/nats-server/v2@$v" >/dev/null 2>&1)
      fi
      rootfs "$d"
      mkdir -p "$d/data"; chown 65532:65532 "$d/data" 2>/dev/null || true
      (cd "$src" && GOWORK=off go build -trimpath -ldflags "-s -w" -o "$d/nats-server" github.com/nats-io/nats-server/v2)
      log "nats-server $v"
      pack nats-server /nats-server
      ;;
    member)
      rootfs "$d"
      for b in kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
        [[ -x bin/$b ]] || { log "bin/$b missing: run make tools"; exit 1; }
        cp "bin/$b" "$d/$b"
      done
      build_go services/atoll ./cmd/atoll-member "$d/atoll-member"
      # One directory per cluster-facing service, each its own volume in
      # compose.yaml: a volume starts with the image's directory, owner
      # included, so the member (uid 65532) can write each service's
      # kubeconfig there.
      for s in propagator aggregator remediation upgrade; do
        mkdir -p "$d/kubeconfigs/$s"; chown 65532:65532 "$d/kubeconfigs" "$d/kubeconfigs/$s" 2>/dev/null || true
      done
      pack member /atoll-member
      ;;
    prometheus)
      [[ -x bin/prometheus ]] || { log "bin/prometheus missing: run make tools"; exit 1; }
      rootfs "$d"
      cp bin/prometheus "$d/prometheus"
      mkdir -p "$d/data"; chown 65532:65532 "$d/data" 2>/dev/null || true
      pack prometheus /prometheus
      ;;
    *)
      [[ -f services/$img/cmd/$img/main.go ]] || { log "no services/$img/cmd/$img/main.go"; exit 1; }
      rootfs "$d"
      build_go "services/$img" "./cmd/$img" "$d/$img"
      pack "$img" "/$img"
      ;;
  esac
done
log "done: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep "^atoll/.*:$VERSION" | tr '\n' ' ')"

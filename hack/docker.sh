#!/usr/bin/env bash
# Makes sure a Docker engine is installed and running, the offline way:
# Debian's docker.io package (apt-get) when dockerd is missing, then dockerd
# started in the background when no daemon answers. Nothing here pulls an
# image; the images are built FROM scratch (hack/images.sh).
#
#   hack/docker.sh            install and start when needed
#   hack/docker.sh compose    the same, plus a Compose command (prints it)
#   hack/docker.sh restart    restart the engine (systemd's, or the dockerd
#                             this script starts), then as above
set -euo pipefail

log() { printf '[docker %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

apt_install() {
  log "installing Debian's $* (apt-get update first)"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

if ! command -v dockerd >/dev/null; then
  apt_install docker.io
fi

if [[ "${1:-}" == restart ]]; then
  if command -v systemctl >/dev/null && systemctl is-active --quiet docker 2>/dev/null; then
    log "restarting docker (systemd)"
    $SUDO systemctl restart docker
  elif pgrep -x dockerd >/dev/null; then
    log "stopping dockerd"
    $SUDO pkill -TERM -x dockerd || true
    for _ in $(seq 1 30); do
      pgrep -x dockerd >/dev/null || break
      sleep 1 # polling until the daemon has exited
    done
  fi
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/atoll-dockerd.log)"
  # setsid: the daemon outlives this script and make, in its own session.
  $SUDO setsid dockerd >/var/log/atoll-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1 # polling the daemon's socket until it answers
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not start:"; tail -20 /var/log/atoll-dockerd.log >&2; exit 1; }
fi
log "engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) running"

if [[ "${1:-}" == compose ]]; then
  if docker compose version >/dev/null 2>&1; then
    echo "docker compose"
  else
    command -v docker-compose >/dev/null || apt_install docker-compose
    echo "docker-compose"
  fi
fi

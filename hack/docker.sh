#!/usr/bin/env bash
# Makes sure a Docker engine is installed and running, the offline way:
# Debian's docker.io package (apt-get) when dockerd is missing, then dockerd
# started in the background when no daemon answers. Nothing here pulls an
# image; the images are built FROM scratch (hack/images.sh).
#
#   hack/docker.sh            install and start when needed
#   hack/docker.sh compose    the same, plus a Compose command (prints it)
#   hack/docker.sh restart    restart the dockerd this script started, then
#                             as above; an engine someone else runs (systemd's,
#                             or any other dockerd) is never stopped: the
#                             command fails instead
#   hack/docker.sh stop       stop the dockerd this script started, if any
#
# The dockerd this script starts writes its pid to $ATOLL_DOCKERD_PIDFILE
# (default /run/atoll-dockerd.pid); that file is how it is told apart from
# an engine someone else runs.
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

# shellcheck source=hack/proc.sh
. "$(dirname "$0")/proc.sh"
PIDFILE=${ATOLL_DOCKERD_PIDFILE:-/run/atoll-dockerd.pid}
LOGFILE=${ATOLL_DOCKERD_LOG:-/var/log/atoll-dockerd.log}

# ours prints the pid of the dockerd this script started, and fails when
# there is none: the pidfile names a live process whose executable is
# dockerd and that started no later than the pidfile was written (a pid
# reused since by another process started after it).
ours() {
  local pid
  [[ -r $PIDFILE ]] || return 1
  pid=$(tr -dc 0-9 <"$PIDFILE")
  [[ -n $pid ]] || return 1
  [[ $($SUDO readlink "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$(command -v dockerd)")" ]] || return 1
  proc_made_path "$pid" "$PIDFILE" || return 1
  echo "$pid"
}

# running_dockerd says whether any dockerd runs (a zombie, such as one of
# ours that was stopped and that no parent reaps, does not count).
running_dockerd() {
  local pid
  for pid in $(pgrep -x dockerd); do
    proc_live "$pid" && return 0
  done
  return 1
}

# stop_ours stops the dockerd this script started (SIGTERM, then up to 30 s
# for it to exit); nothing when there is none.
stop_ours() {
  local pid
  pid=$(ours) || { log "no dockerd started by this script is running"; return 0; }
  log "stopping the dockerd this script started (pid $pid)"
  $SUDO kill -TERM "$pid" || true
  for _ in $(seq 1 30); do
    proc_live "$pid" || return 0
    sleep 1 # polling until the daemon has exited
  done
  log "dockerd (pid $pid) did not exit in 30 s"
  return 1
}

case "${1:-}" in
  stop)
    stop_ours
    exit
    ;;
  restart)
    if ! ours >/dev/null; then
      if docker info >/dev/null 2>&1; then
        log "the running engine was not started by this script (no live dockerd in $PIDFILE): not restarting it"
        exit 1
      fi
    else
      stop_ours
    fi
    ;;
esac

if ! docker info >/dev/null 2>&1; then
  if pid=$(ours); then
    log "waiting for the dockerd this script started (pid $pid) to answer"
  elif running_dockerd; then
    log "a dockerd not started by this script is running but does not answer: not touching it"
    exit 1
  else
    # A pidfile left by a dockerd of ours that was killed: dockerd would
    # refuse to start while its pid is taken by another process.
    [[ ! -e $PIDFILE ]] || $SUDO rm -f "$PIDFILE"
    log "starting dockerd (log: $LOGFILE, pid: $PIDFILE)"
    # setsid: the daemon outlives this script and make, in its own session.
    # dockerd writes its own pid to --pidfile (and removes it when it exits).
    $SUDO setsid dockerd --pidfile "$PIDFILE" >"$LOGFILE" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1 # polling the daemon's socket until it answers
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not start:"; tail -20 "$LOGFILE" >&2; exit 1; }
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

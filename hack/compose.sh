#!/usr/bin/env bash
# The Compose region (compose.yaml), project "atoll":
#
#   hack/compose.sh up     images must exist (make images); makes the NATS users,
#                          the region's CA and certificates (atoll-admin bootstrap
#                          tls) and an admin API token (deploy/compose/secrets), starts
#                          everything, every service at 2 replicas, waits until the
#                          gateway lists 3 healthy member clusters, prints the token
#   hack/compose.sh down   removes the project's containers, networks and
#                          volumes (nothing else: the engine is not restarted)
#   hack/compose.sh test   up, then the smoke and fault test (atoll-chaos:
#                          $CHAOS_N submissions, default 1000, while every
#                          service replica and a NATS server are killed and
#                          another NATS server is disconnected for 30 s), then down
#
# Environment: SERVICES (the Makefile's), VERSION (the images' tag).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
: "${SERVICES:?set SERVICES (the Makefile does)}"
export ATOLL_VERSION=${VERSION:-latest}
SECRETS="$ROOT/deploy/compose/secrets"
SERVER=https://127.0.0.1:8080
CA="$SECRETS/tls/ca.crt"

log() { printf '[compose %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

COMPOSE=$("$ROOT/hack/docker.sh" compose)
compose() { $COMPOSE -p atoll -f "$ROOT/compose.yaml" "$@"; }

secrets() {
  mkdir -p "$SECRETS"
  # One nkey per service and the admin (kept across runs), auth.conf regenerated.
  "$ROOT/bin/atoll-admin" bootstrap auth --dir "$SECRETS/nats" >/dev/null
  # The region's CA and certificates (kept across runs), made offline; each
  # server gets only its own key: tls/nats for the NATS servers, tls/gateway
  # for the gateway.
  "$ROOT/bin/atoll-admin" bootstrap tls --dir "$SECRETS/tls" \
    --nats-hosts nats-1,nats-2,nats-3,localhost,127.0.0.1 --gateway-hosts gateway,localhost,127.0.0.1 >/dev/null
  local part
  for part in nats gateway; do
    mkdir -p "$SECRETS/tls/$part"
    install -m 0600 "$SECRETS/tls/$part.key" "$SECRETS/tls/$part/$part.key"
    install -m 0644 "$SECRETS/tls/$part.crt" "$SECRETS/tls/ca.crt" "$SECRETS/tls/$part/"
  done
  chmod 0644 "$SECRETS/tls/ca.crt"
  # The key-encryption key of Secrets (kept across runs), made offline: its
  # private key only in kek/propagator (the propagator's --kek-dir), its
  # public key only in kek/admission (admission's --kek-public). Both are
  # mounted as directories, so a key added or replaced there (rotation) is
  # seen without a restart.
  if [[ ! -s "$SECRETS/kek/admission/kek.pub" ]]; then
    rm -rf "$SECRETS/kek/new"
    "$ROOT/bin/atoll-admin" bootstrap kek --dir "$SECRETS/kek/new" --id k1 >/dev/null
    mkdir -p "$SECRETS/kek/propagator" "$SECRETS/kek/admission"
    mv "$SECRETS/kek/new/kek-k1.key" "$SECRETS/kek/propagator/"
    mv "$SECRETS/kek/new/kek-k1.pub" "$SECRETS/kek/admission/kek.pub"
    rmdir "$SECRETS/kek/new"
  fi
  if [[ ! -s "$SECRETS/admin-token" ]]; then
    (umask 077; printf 'atl_%s' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$SECRETS/admin-token")
  fi
  local digest expires
  digest=$(printf '%s' "$(cat "$SECRETS/admin-token")" | sha256sum | cut -d' ' -f1)
  # The token works for 30 days from this run (the gateway refuses a token without an expiry).
  expires=$(date -u -d '+30 days' +%Y-%m-%dT%H:%M:%SZ)
  printf 'tokens:\n  - subject: platform-admin\n    sha256: %s\n    platformAdmin: true\n    expires: %s\n' "$digest" "$expires" >"$SECRETS/tokens.yaml"
  canary_secrets "$expires"
  chmod 0644 "$SECRETS/nats/auth.conf" "$SECRETS/tokens.yaml"
  if [[ $(id -u) == 0 ]]; then
    # The containers run as 65532 and read their credentials (mode 0600).
    chown -R 65532:65532 "$SECRETS/nats" "$SECRETS/tls/nats" "$SECRETS/tls/gateway" "$SECRETS/kek/propagator" "$SECRETS/canary"
  else
    # nats-server runs as 65532 whatever the caller: its key must be
    # readable to it (a single-user machine's local region).
    chmod 0644 "$SECRETS/tls/nats/nats.key"
    ATOLL_UID=$(id -u) ATOLL_GID=$(id -g)
    export ATOLL_UID ATOLL_GID
  fi
}

# canary_secrets EXPIRES: the canary's own token (user atoll-canary, a
# developer of project canary once canary_project has run), added to
# tokens.yaml, and its CLI config (secrets/canary/config.yaml: the gateway
# as the bus network names it, the token, the project, the CA), which the
# canary container reads as $ATOLL_CONFIG.
canary_secrets() {
  if [[ ! -s "$SECRETS/canary-token" ]]; then
    (umask 077; printf 'atl_%s' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$SECRETS/canary-token")
  fi
  local token digest
  token=$(cat "$SECRETS/canary-token")
  digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
  printf '  - subject: atoll-canary\n    sha256: %s\n    expires: %s\n' "$digest" "$1" >>"$SECRETS/tokens.yaml"
  mkdir -p "$SECRETS/canary"
  (umask 077; {
    printf 'server: https://gateway:8080\ntoken: %s\nproject: canary\nca: |\n' "$token"
    sed 's/^/  /' "$SECRETS/tls/ca.crt"
  } >"$SECRETS/canary/config.yaml")
}

# canary_project makes the canary's project and its membership, as the
# admin (once: both survive in the region's NATS volumes). Until then the
# canary's rounds fail (403), and its metrics say so.
canary_project() {
  local a=("$ROOT/bin/atoll" --server "$SERVER" --ca "$CA" --token "$(cat "$SECRETS/admin-token")")
  if ! "${a[@]}" project get canary >/dev/null 2>&1; then
    "${a[@]}" project create canary --description "the canary's (compose.yaml: canary)" >/dev/null
  fi
  "${a[@]}" member add atoll-canary --role developer -p canary >/dev/null
  log "canary: project canary, user atoll-canary (developer)"
}

scale_flags() {
  local s
  for s in $SERVICES; do printf -- '--scale %s=2 ' "$s"; done
}

up() {
  secrets
  local t0=$SECONDS
  log "starting: 3 NATS servers, the bootstrap, 3 member clusters, $(wc -w <<<"$SERVICES") services x2"
  # shellcheck disable=SC2046
  compose up -d --no-build --remove-orphans $(scale_flags) >&2
  local token
  token=$(cat "$SECRETS/admin-token")
  log "waiting for the gateway to list 3 healthy member clusters"
  local out=""
  for _ in $(seq 1 180); do
    out=$("$ROOT/bin/atoll" --server "$SERVER" --ca "$CA" --token "$token" clusters -o json 2>/dev/null || true)
    if [[ $(grep -o '"healthy": *true' <<<"$out" | wc -l) -ge 3 && $(grep -Eo '"readyNodes": *[1-9]' <<<"$out" | wc -l) -ge 3 ]]; then break; fi
    sleep 2 # polling the gateway until the region is up
  done
  if [[ $(grep -o '"healthy": *true' <<<"$out" | wc -l) -lt 3 ]]; then
    log "the region did not come up in 6 minutes"; compose ps >&2; exit 1
  fi
  log "region up in $((SECONDS - t0))s"
  canary_project
  "$ROOT/bin/atoll" --server "$SERVER" --ca "$CA" --token "$token" clusters >&2 || true
  cat >&2 <<MSG

The Compute API: $SERVER (and https://127.0.0.1:8081, the second gateway)
Admin token:     $token   (also in deploy/compose/secrets/admin-token)
CA:              $CA
Prometheus:      http://127.0.0.1:9091 (every replica and the canary; rules: deploy/prometheus)

  bin/atoll login --server $SERVER --ca $CA --token $token --project demo
  bin/atoll apply -f deploy/examples/app.yaml
  bin/atoll get app web
MSG
}

# left counts what of the project Docker still holds.
left() {
  printf '%s containers, %s volumes, %s networks' \
    "$(docker ps -aq --filter label=com.docker.compose.project=atoll | wc -l)" \
    "$(docker volume ls -q --filter label=com.docker.compose.project=atoll | wc -l)" \
    "$(docker network ls -q --filter label=com.docker.compose.project=atoll | wc -l)"
}

# drop_stale_endpoints disconnects, by force, every endpoint still listed in
# the project's networks. Docker 20.10 can keep a stale endpoint in a network
# after a container was disconnected from it and connected again (the fault
# test's partition): "network atoll_bus has active endpoints", with no
# container attached. Only the networks labelled with project atoll are
# touched; the engine and other projects' containers are left alone.
drop_stale_endpoints() {
  local net ep
  for net in $(docker network ls -q --filter label=com.docker.compose.project=atoll); do
    for ep in $(docker network inspect "$net" --format '{{range .Containers}}{{.Name}} {{end}}' 2>/dev/null); do
      log "disconnecting stale endpoint $ep from network $net"
      docker network disconnect --force "$net" "$ep" >&2 || true
    done
  done
}

# down removes the project's containers, networks and volumes, and nothing
# else: no engine restart, which would stop every container on the host.
down() {
  local try
  for try in 1 2 3; do
    if compose down --volumes --remove-orphans --timeout 20 >&2; then break; fi
    log "compose down failed (try $try); dropping the project's stale network endpoints"
    drop_stale_endpoints
  done
  # Docker 20.10 can also keep a stale endpoint that no inspect lists
  # (the network's Containers empty, "has active endpoints" still); only
  # an engine restart clears it. Done only when the project's containers
  # are all gone, no other container runs and hack/docker.sh started the
  # engine (it refuses to restart any other).
  if [[ -n $(docker network ls -q --filter label=com.docker.compose.project=atoll) &&
        -z $(docker ps -aq --filter label=com.docker.compose.project=atoll) &&
        -z $(docker ps -q) ]]; then
    log "the project's networks hold endpoints no container owns: restarting the engine hack/docker.sh started"
    if "$ROOT/hack/docker.sh" restart >&2; then
      compose down --volumes --remove-orphans --timeout 20 >&2 || true
    fi
  fi
  local rest
  rest=$(left)
  log "removed: $rest left"
  [[ $rest == "0 containers, 0 volumes, 0 networks" ]] || { log "compose down left some of the region behind"; return 1; }
}

keep_logs() {
  local dir="$ROOT/bin/compose-logs"
  rm -rf "$dir"; mkdir -p "$dir"
  for c in $(docker ps -a --filter label=com.docker.compose.project=atoll --format '{{.Names}}'); do
    docker logs "$c" >"$dir/$c.log" 2>&1 || true
  done
  log "the containers' logs are in $dir"
}

# why prints again what made the test fail: the last lines of its output,
# after the services' last warnings and errors (from the logs keep_logs
# kept, in time order, each line after its container's name), which are
# all CI shows of a clone it then removes.
why() {
  local dir="$ROOT/bin/compose-logs"
  if compgen -G "$dir/*.log" >/dev/null; then
    log "the services' last 40 warnings and errors (all in $dir):"
    for f in "$dir"/*.log; do
      grep -E 'level=(WARN|ERROR)' "$f" | sed "s|^|$(basename "$f" .log) |" || true
    done | sort -k2,2 | tail -n 40 | cut -c1-400 >&2
  fi
  log "compose test FAILED; the last lines of its output ($CHAOS_LOG):"
  if [[ -s $CHAOS_LOG ]]; then tail -n 25 "$CHAOS_LOG" >&2; else log "(none: it failed before the test started; see the start above)"; fi
}

chaos_test() {
  local t0=$SECONDS
  (cd "$ROOT/services/atoll" && PATH="$PATH:/usr/local/go/bin" go build -o "$ROOT/bin/atoll-chaos" ./cmd/atoll-chaos)
  # CHAOS_KEEP=1 leaves the region up afterwards, to look into a failure.
  # Otherwise a failed run keeps every container's log in bin/compose-logs
  # before the region goes.
  # The test's own output is kept in bin/compose-chaos.log, and on a
  # failure its last lines are printed again after the teardown, so the
  # reason is at the end of the output (where CI shows it).
  CHAOS_LOG="$ROOT/bin/compose-chaos.log"
  : >"$CHAOS_LOG"
  [[ -n "${CHAOS_KEEP:-}" ]] || trap 'rc=$?; [[ $rc == 0 ]] || keep_logs; down; [[ $rc == 0 ]] || why' EXIT
  # A fresh region: nothing of an earlier, interrupted run (its NATS and
  # member-cluster volumes would hold its state).
  if [[ $(left) != "0 containers, 0 volumes, 0 networks" ]]; then
    log "removing what an earlier run left: $(left)"
    down
  fi
  up
  log "smoke and fault test: ${CHAOS_N:-1000} Apps"
  ATOLL_TOKEN=$(cat "$SECRETS/admin-token") "$ROOT/bin/atoll-chaos" -ca "$CA" -n "${CHAOS_N:-1000}" -rate "${CHAOS_RATE:-10}" -services "$SERVICES" 2>&1 | tee "$CHAOS_LOG"
  log "compose test passed in $((SECONDS - t0))s (images built before)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  test) chaos_test ;;
  *) echo "usage: $0 up|down|test" >&2; exit 2 ;;
esac

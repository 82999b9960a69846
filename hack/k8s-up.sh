#!/usr/bin/env bash
# A real one-node Kubernetes on this machine, offline, for deploy/k8s:
#
#   hack/k8s-up.sh up       start it (idempotent: what runs is left running)
#   hack/k8s-up.sh members  start the 3 member clusters (zone-a..c) and write
#                           deploy/k8s/secrets/ (NATS users, TLS, KEK, tokens,
#                           each cluster-facing service's kubeconfigs, the
#                           canary's token and config)
#   hack/k8s-up.sh region   kubectl apply -k deploy/k8s-one-node, wait until
#                           every pod is Ready, make the canary's project,
#                           then deploy/k8s/prometheus
#   hack/k8s-up.sh test     the game day (make k8s-test): the canary passes
#                           3 rounds in a row, then atoll-chaos's 300 Apps
#                           while pods are force-deleted and Deployments
#                           restarted, one at a time
#   hack/k8s-up.sh down     stop everything it started and remove its state,
#                           then check that nothing is left (exit 1 if so)
#   hack/k8s-up.sh status   the processes and the node
#
# The control plane is bin/'s etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler (make tools); the node is bin/kubelet and bin/kube-proxy
# (same k8s.io/kubernetes version), containerd 2.x (bin/containerd, its runc
# shim and ctr) with Debian's runc, bin/cni's bridge, host-local, loopback and
# portmap, and cluster DNS from bin/coredns (kubernetes and hosts plugins,
# run on the node, answering on the node's address). All of it built from
# the Go module proxy by hack/build-tools.sh k8s-node. Certificates are made
# with Debian's openssl. No image is pulled: the sandbox ("pause") image is
# hack/k8s-pause packed FROM scratch, and the region's images are packed
# from the root filesystems `make images` leaves in bin/.images/<name>/rootfs
# (the same files and settings as hack/images.sh gives Docker) as OCI
# archives and imported with `ctr -n k8s.io images import`.
#
# Storage: a StorageClass "local" (the default, no provisioner) and one local
# PersistentVolume per NATS server, pre-created under .k8s/volumes.
# NetworkPolicies are accepted but not enforced: no enforcer is built here.
#
# The member clusters are the KWOK clusters atoll-dev starts (libs/testenv),
# each run by bin/atoll-member on the node at a fixed port; the pods reach
# them as https://zone-a:<port> (cluster DNS answers zone-a..c with the
# node's address; the API servers' certificates name them).
#
# Everything lives under .k8s/ (git-ignored); every process has its pidfile
# there, and `down` stops only those.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN="$ROOT/bin"
STATE=${ATOLL_K8S_STATE:-$ROOT/.k8s}
PKI="$STATE/pki"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
RUN="$STATE/run"
SOCK="$RUN/containerd/containerd.sock"
NODE=atoll-node
BRIDGE=atollk8s0
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_PORT=${ATOLL_K8S_API_PORT:-16443}
ETCD_PORT=${ATOLL_K8S_ETCD_PORT:-12379}
KUBELET_PORT=17250
MEMBER_PORTS=(17441 17442 17443)
# The gateway Service's address (deploy/k8s-one-node pins it): the host, the
# node itself, reaches it through kube-proxy, and its certificate names it.
GATEWAY_IP=10.96.0.80
ZONES=(a b c)
KUBECONFIG_ADMIN="$STATE/admin.kubeconfig"
SECRETS="$ROOT/deploy/k8s/secrets"
PAUSE_IMAGE=atoll.local/k8s-pause:1
export PATH="$BIN:$PATH:/usr/local/go/bin"

log() { printf '[k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

node_ip() { ip -4 route get 1.1.1.1 | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}'; }

# ---- certificates ---------------------------------------------------------

# cert NAME CN O SANS: a key and a certificate signed by the cluster CA
# (SANS in openssl's subjectAltName syntax, empty for a client certificate).
cert() {
  local name=$1 cn=$2 o=$3 sans=$4
  [[ -s "$PKI/$name.crt" ]] && return
  local subj="/CN=$cn" ext="$PKI/$name.ext"
  [[ -n "$o" ]] && subj="/O=$o$subj"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$sans" ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"; else echo "extendedKeyUsage=clientAuth"; fi
  } >"$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 365 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

# kubeconfig NAME CERT: a kubeconfig for the client certificate CERT.
kubeconfig() {
  cat >"$STATE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: atoll-k8s
  cluster: {server: "https://$(node_ip):$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: atoll-k8s
  context: {cluster: atoll-k8s, user: $2}
current-context: atoll-k8s
EOF
}

pki() {
  mkdir -p "$PKI"
  local ip
  ip=$(node_ip)
  if [[ ! -s "$PKI/ca.crt" ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=atoll-k8s-ca" -days 365 -out "$PKI/ca.crt" 2>/dev/null
  fi
  [[ -s "$PKI/sa.key" ]] || { openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null; openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
  cert apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,IP:$ip"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
  cert admin kubernetes-admin system:masters ""
  cert controller-manager system:kube-controller-manager "" ""
  cert scheduler system:kube-scheduler "" ""
  cert kube-proxy system:kube-proxy "" ""
  cert kubelet "system:node:$NODE" system:nodes ""
  cert kubelet-serving "$NODE" "" "DNS:$NODE,IP:$ip,IP:127.0.0.1"
  cert coredns coredns "" ""
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kube-proxy kube-proxy
  kubeconfig kubelet kubelet
  kubeconfig coredns coredns
}

# ---- processes ------------------------------------------------------------

running() { [[ -s "$PIDS/$1.pid" ]] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

# start NAME CMD...: runs CMD in the background (its own session), its
# output in .k8s/logs/NAME.log, its pid in .k8s/pids/NAME.pid.
start() {
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$PIDS/$name.pid"))"; return; fi
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  log "$name started (pid $!)"
}

# wait_for WHAT SECONDS CMD...: polls CMD every second until it succeeds.
wait_for() {
  local what=$1 t=$2; shift 2
  local deadline=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready after ${t}s (logs: $LOGS)"
    sleep 1
  done
  log "$what ready"
}

k() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

preflight() {
  local b missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns \
    cni/bridge cni/host-local cni/loopback cni/portmap; do
    [[ -x "$BIN/$b" ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing in bin/: ${missing[*]} (make tools k8s-node-tools)"
  for b in runc iptables openssl conntrack; do command -v "$b" >/dev/null || die "$b missing (make k8s-deps)"; done
  [[ $(id -u) == 0 ]] || die "a kubelet and containerd need root"
  [[ -d /proc/sys/net/bridge ]] || die "no br_netfilter: pod-to-Service traffic on one bridge needs it"
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  # cgroup v1 hosts (this one): the kubelet refuses them unless told
  # failCgroupV1: false; containerd and runc use cgroupfs either way.
  if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then CGROUP_V1=false; else CGROUP_V1=true; log "cgroup v1 host: kubelet started with failCgroupV1: false"; fi
}

etcd_up() {
  start etcd "$BIN/etcd" --name atoll-k8s --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "atoll-k8s=http://127.0.0.1:$((ETCD_PORT + 1))" --quota-backend-bytes 2147483648 --log-level warn
  wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

apiserver_up() {
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$(node_ip)" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction
  wait_for kube-apiserver 120 k get --raw /readyz
}

controllers_up() {
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 17257 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 17259 --leader-elect=false
}

# forward_rules: with br_netfilter, traffic between pods on the bridge
# passes the FORWARD chain, whose policy Docker sets to DROP: the chain
# ATOLL-K8S, first in FORWARD, accepts the pod network's.
forward_rules() {
  iptables -N ATOLL-K8S 2>/dev/null || iptables -F ATOLL-K8S
  iptables -A ATOLL-K8S -s "$POD_CIDR" -j ACCEPT
  iptables -A ATOLL-K8S -d "$POD_CIDR" -j ACCEPT
  iptables -C FORWARD -j ATOLL-K8S 2>/dev/null || iptables -I FORWARD 1 -j ATOLL-K8S
}

containerd_up() {
  mkdir -p "$STATE/containerd" "$RUN/containerd" "$STATE/cni/net.d"
  cat >"$STATE/cni/net.d/10-atoll.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "atoll-k8s",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$STATE/containerd/config.toml" <<EOF
version = 3
root = "$STATE/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "${ATOLL_K8S_SNAPSHOTTER:-overlayfs}"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # A sandbox like this one may not lower oom_score_adj (runc fails with
  # "can't get final child's PID from pipe"): clamp it at containerd's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "${ATOLL_K8S_RUNC:-$(command -v runc)}"
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$BIN/cni"]
    conf_dir = "$STATE/cni/net.d"
EOF
  forward_rules
  start containerd "$BIN/containerd" --config "$STATE/containerd/config.toml"
  wait_for containerd 60 "$BIN/ctr" --address "$SOCK" version
}

# oci_import NAME:TAG ROOTFS ENTRYPOINT: packs ROOTFS as a one-layer OCI
# image (user 65532, as hack/images.sh's) and imports it into k8s.io.
oci_import() {
  local ref=$1 rootfs=$2 entry=$3 d
  d=$(mktemp -d "$STATE/oci.XXXXXX")
  mkdir -p "$d/blobs/sha256"
  tar --sort=name --mtime=@0 --numeric-owner -C "$rootfs" -cf "$d/layer.tar" .
  local diff size cfg cfgsum cfgsize man mansum mansize
  diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1); size=$(stat -c %s "$d/layer.tar")
  mv "$d/layer.tar" "$d/blobs/sha256/$diff"
  cfg=$(printf '{"architecture":"amd64","os":"linux","config":{"User":"65532:65532","Entrypoint":["%s"],"WorkingDir":"/home/nonroot","Env":["HOME=/home/nonroot","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$entry" "$diff")
  cfgsum=$(printf '%s' "$cfg" | sha256sum | cut -d' ' -f1); cfgsize=${#cfg}
  printf '%s' "$cfg" >"$d/blobs/sha256/$cfgsum"
  man=$(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' "$cfgsum" "$cfgsize" "$diff" "$size")
  mansum=$(printf '%s' "$man" | sha256sum | cut -d' ' -f1); mansize=${#man}
  printf '%s' "$man" >"$d/blobs/sha256/$mansum"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$mansum" "$mansize" "$ref" "${ref##*:}" >"$d/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
  tar -C "$d" -cf "$d.tar" oci-layout index.json blobs
  local out
  out=$("$BIN/ctr" --address "$SOCK" -n k8s.io images import --local "$d.tar" 2>&1) || die "import $ref: $out"
  rm -rf "$d" "$d.tar"
  log "image $ref imported"
}

images_up() {
  local d="$STATE/pause/rootfs"
  rm -rf "$d"; mkdir -p "$d"
  (cd "$ROOT" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$d/pause" ./hack/k8s-pause/main.go)
  oci_import "$PAUSE_IMAGE" "$d" /pause
  local img n=0
  for img in "$BIN"/.images/*/rootfs; do
    [[ -d $img ]] || continue
    local name
    name=$(basename "$(dirname "$img")")
    [[ $name == member ]] && continue # member clusters run on the node (atoll-member)
    local entry="/$name"
    [[ $name == atoll ]] && entry=/atoll
    oci_import "docker.io/atoll/$name:latest" "$img" "$entry"
    n=$((n + 1))
  done
  ((n > 0)) || log "no image in bin/.images: run make images first"
}

kubelet_up() {
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(node_ip)
port: $KUBELET_PORT
readOnlyPort: 0
healthzPort: 17248
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  x509: {clientCAFile: "$PKI/ca.crt"}
  webhook: {enabled: true}
authorization: {mode: Webhook}
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: ["$(node_ip)"]
containerRuntimeEndpoint: "unix://$SOCK"
# This machine's disk is shared and mostly full: evict only when nearly out.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 110
serializeImagePulls: false
EOF
  start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet/root" --hostname-override "$NODE" --node-ip "$(node_ip)" --v 1
  wait_for "node $NODE" 180 k wait --for=condition=Ready "node/$NODE" --timeout=2s
}

proxy_dns_up() {
  start kube-proxy "$BIN/kube-proxy" --kubeconfig "$STATE/kube-proxy.kubeconfig" --hostname-override "$NODE" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --metrics-bind-address 127.0.0.1:17249 --healthz-bind-address 127.0.0.1:17256
  # The cluster-facing services' member clusters, by name, at the node.
  local ip
  ip=$(node_ip)
  cat >"$STATE/Corefile" <<EOF
.:53 {
    bind $ip
    errors
    health 127.0.0.1:17280
    ready 127.0.0.1:17281
    hosts {
        $ip zone-a zone-b zone-c
        fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $STATE/coredns.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 10
    loadbalance
}
EOF
  start coredns "$BIN/coredns" -conf "$STATE/Corefile"
  wait_for coredns 60 curl -fsS http://127.0.0.1:17281/ready
}

rbac_storage() {
  # coredns reads Services, EndpointSlices, Pods and Namespaces.
  k apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: atoll-k8s-coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kube-dns-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: coredns}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:kube-dns-reader}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
  local i
  for i in 0 1 2; do
    mkdir -p "$STATE/volumes/pv-$i"; chown 65532:65532 "$STATE/volumes/pv-$i"
    k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: atoll-local-$i}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: "$STATE/volumes/pv-$i"}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE]}]}]
EOF
  done
  log "StorageClass local (default) and 3 PersistentVolumes"
}

up() {
  preflight
  mkdir -p "$STATE" "$PIDS" "$LOGS" "$RUN"
  [[ -s "$STATE/netns-before" ]] || ip netns list >"$STATE/netns-before" 2>/dev/null || true
  pki
  etcd_up
  apiserver_up
  controllers_up
  containerd_up
  images_up
  kubelet_up
  rbac_storage
  proxy_dns_up
  k get nodes -o wide
  log "up: export KUBECONFIG=$KUBECONFIG_ADMIN"
}

# ---- member clusters and deploy/k8s/secrets ---------------------------------

members() {
  mkdir -p "$STATE/members" "$PIDS" "$LOGS"
  [[ -x "$BIN/atoll-member" ]] || (cd services/atoll && go build -o "$BIN/atoll-member" ./cmd/atoll-member)
  [[ -x "$BIN/atoll-admin" ]] || (cd services/atoll && go build -o "$BIN/atoll-admin" ./cmd/atoll-admin)
  # One at a time: kwokctl picks its components' ports free by probing, and
  # two creates at once can pick the same one.
  local i z
  for i in 0 1 2; do
    z=${ZONES[$i]}
    mkdir -p "$STATE/members/tmp"
    start "member-zone-$z" env TMPDIR="$STATE/members/tmp" "$BIN/atoll-member" --name "zone-$z" --zone "$z" --port "${MEMBER_PORTS[$i]}" --nodes 3 \
      --kubeconfig-dir "$STATE/members" --bin "$BIN"
    wait_for "member cluster zone-$z" 600 test -s "$STATE/members/upgrade/zone-$z.kubeconfig"
  done
  rm -rf "$SECRETS"; mkdir -p "$SECRETS"
  "$BIN/atoll-admin" bootstrap auth --dir "$SECRETS/nats" >/dev/null
  "$BIN/atoll-admin" bootstrap tls --dir "$SECRETS/tls" \
    --nats-hosts 'nats-0.nats.atoll-system.svc,nats-1.nats.atoll-system.svc,nats-2.nats.atoll-system.svc,*.nats.atoll-system.svc' \
    --gateway-hosts "atoll-gateway.atoll-system.svc,localhost,127.0.0.1,$GATEWAY_IP" >/dev/null
  "$BIN/atoll-admin" bootstrap kek --dir "$SECRETS/kek" --id k1 >/dev/null
  local token digest
  token="atl_$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
  (umask 077; printf '%s' "$token" >"$STATE/admin-token")
  digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
  mkdir -p "$SECRETS/gateway"
  local expires
  expires=$(date -u -d '+30 days' +%Y-%m-%dT%H:%M:%SZ)
  printf 'tokens:\n  - subject: platform-admin\n    sha256: %s\n    platformAdmin: true\n    expires: %s\n' \
    "$digest" "$expires" >"$SECRETS/gateway/tokens.yaml"
  # The canary's own user (atoll-canary, a developer of project canary once
  # `region` has made it) and its CLI config (deploy/k8s/canary.yaml).
  token="atl_$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
  digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
  printf '  - subject: atoll-canary\n    sha256: %s\n    expires: %s\n' "$digest" "$expires" >>"$SECRETS/gateway/tokens.yaml"
  mkdir -p "$SECRETS/canary"
  (umask 077; {
    printf 'server: https://atoll-gateway.atoll-system.svc\ntoken: %s\nproject: canary\nca: |\n' "$token"
    sed 's/^/  /' "$SECRETS/tls/ca.crt"
  } >"$SECRETS/canary/config.yaml")
  local s
  for s in propagator aggregator remediation upgrade; do
    mkdir -p "$SECRETS/clusters/$s"
    : >"$SECRETS/clusters/$s/clusters.yaml"
    for z in "${ZONES[@]}"; do
      cp "$STATE/members/$s/zone-$z.kubeconfig" "$SECRETS/clusters/$s/"
      printf -- '- name: zone-%s\n  zone: %s\n  region: local\n  kubeconfig: /etc/atoll/clusters/zone-%s.kubeconfig\n' "$z" "$z" "$z" >>"$SECRETS/clusters/$s/clusters.yaml"
    done
  done
  log "deploy/k8s/secrets written; admin API token in $STATE/admin-token"
}

# ---- the region on it -------------------------------------------------------

# atoll ARGS...: the CLI as the platform admin, through the gateway Service.
atoll() { "$BIN/atoll" --server "https://$GATEWAY_IP" --ca "$SECRETS/tls/ca.crt" --token "$(cat "$STATE/admin-token")" "$@"; }

# region: kubectl apply -k deploy/k8s-one-node, wait for every pod to be
# Ready through its probes, make the canary's project, then Prometheus
# (deploy/k8s/prometheus) and wait for it to scrape.
region() {
  [[ -s "$SECRETS/canary/config.yaml" ]] || die "no deploy/k8s/secrets: run $0 members first"
  local t0=$SECONDS
  log "kubectl apply -k deploy/k8s-one-node"
  k apply -k deploy/k8s-one-node >/dev/null
  k -n atoll-system wait --for=condition=complete job/atoll-bootstrap --timeout=600s >/dev/null
  k -n atoll-system rollout status statefulset/nats --timeout=600s >/dev/null
  local d
  for d in $(k -n atoll-system get deployments -o name); do k -n atoll-system rollout status "$d" --timeout=600s >/dev/null; done
  log "region: every Deployment and NATS server ready after $((SECONDS - t0))s"
  wait_for "the gateway at https://$GATEWAY_IP" 120 atoll clusters
  atoll project get canary >/dev/null 2>&1 || atoll project create canary --description "the canary's (deploy/k8s/canary.yaml)" >/dev/null
  atoll member add atoll-canary --role developer -p canary >/dev/null
  log "canary: project canary, user atoll-canary (developer)"
  k apply -k deploy/k8s/prometheus >/dev/null
  k -n atoll-monitoring rollout status deployment/prometheus --timeout=300s >/dev/null
  log "prometheus: http://$(k -n atoll-monitoring get service prometheus -o jsonpath='{.spec.clusterIP}'):9090"
  k get pods -A -o wide
}

# ---- the game day ------------------------------------------------------------

# prom QUERY: an instant query to the region's Prometheus, its result as
# "labels value" lines.
prom() {
  curl -sf --get "http://$(k -n atoll-monitoring get service prometheus -o jsonpath='{.spec.clusterIP}'):9090/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    print(" ".join(f"{k}={v}" for k, v in sorted(r["metric"].items())), r["value"][1])'
}

# canary_streak N SECONDS: waits until the canary's last N rounds passed.
canary_streak() {
  local n=$1 deadline=$((SECONDS + $2))
  until k -n atoll-system logs deploy/atoll-canary 2>/dev/null | grep -E '^round [0-9]+ ' | tail -n "$n" | grep -c ' ok ' | grep -qx "$n"; do
    ((SECONDS < deadline)) || { k -n atoll-system logs deploy/atoll-canary | tail -n 5 >&2; die "the canary did not pass $n rounds in a row within $2s"; }
    sleep 5
  done
  log "canary: its last $n rounds passed:"
  k -n atoll-system logs deploy/atoll-canary | grep -E '^round [0-9]+ ' | tail -n "$n" | cut -c1-160 >&2
}

# game_day: the canary passes 3 rounds in a row and Prometheus has them;
# then atoll-chaos submits $K8S_TEST_N Apps (300) at $K8S_TEST_RATE per
# second (1) while a pod of every service and a NATS server's pod are
# force-deleted and every Deployment is restarted, one at a time, and
# counts: lost, duplicated, quota, events; the canary's rounds and the
# alerts during the test, from Prometheus.
game_day() {
  local t0=$SECONDS
  canary_streak 3 600
  log "prometheus: sum by (outcome) (atoll_canary_rounds_total)"
  prom 'sum by (outcome) (atoll_canary_rounds_total)' >&2
  (cd services/atoll && go build -o "$BIN/atoll-chaos" ./cmd/atoll-chaos)
  local services="gateway admission quota scheduler propagator aggregator autoscaler remediation upgrade"
  log "game day: ${K8S_TEST_N:-300} Apps at ${K8S_TEST_RATE:-1}/s; a pod of each service and of NATS force-deleted, then every Deployment restarted, one at a time"
  "$BIN/atoll-chaos" --servers "https://$GATEWAY_IP,https://$GATEWAY_IP" --ca "$SECRETS/tls/ca.crt" --token "$(cat "$STATE/admin-token")" \
    --project "gameday-$(date +%s | tail -c 6)" --n "${K8S_TEST_N:-300}" --rate "${K8S_TEST_RATE:-1}" --services "$services" \
    --k8s-kubeconfig "$KUBECONFIG_ADMIN" --k8s-members "$STATE/members/aggregator" \
    --k8s-prometheus "http://$(k -n atoll-monitoring get service prometheus -o jsonpath='{.spec.clusterIP}'):9090"
  log "game day passed in $((SECONDS - t0))s"
}

# ---- down -----------------------------------------------------------------

# stop_pid NAME [SECONDS]: SIGTERM to NAME's process group, SIGKILL after
# SECONDS (30).
stop_pid() {
  local name=$1 grace=${2:-30} pid
  [[ -s "$PIDS/$name.pid" ]] || return 0
  pid=$(cat "$PIDS/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 "$grace"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    log "$name stopped (pid $pid)"
  fi
  rm -f "$PIDS/$name.pid"
}

down() {
  mkdir -p "$PIDS"
  # The pods first, through the kubelet, so each sandbox's network is torn
  # down by the CNI plugins and its mounts by the kubelet.
  if running kubelet && running kube-apiserver; then
    log "deleting every pod through the kubelet"
    k delete namespace atoll-system --wait=false >/dev/null 2>&1 || true
    k delete deployments,statefulsets,jobs,daemonsets,replicasets --all -A --wait=false >/dev/null 2>&1 || true
    k delete pods --all -A --grace-period=5 --timeout=90s >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 90))
    while ((SECONDS < deadline)) && [[ -n $("$BIN/ctr" --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null) ]]; do sleep 2; done
  fi
  local z
  # A member deletes its cluster (kwokctl's detached processes) on SIGTERM.
  for z in "${ZONES[@]}"; do stop_pid "member-zone-$z" 90; done
  for n in coredns kube-proxy kubelet; do stop_pid "$n"; done
  # What the kubelet left: every task and container, then containerd.
  if running containerd; then
    local c
    for c in $("$BIN/ctr" --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do "$BIN/ctr" --address "$SOCK" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true; done
    sleep 1
    for c in $("$BIN/ctr" --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do "$BIN/ctr" --address "$SOCK" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true; done
    for c in $("$BIN/ctr" --address "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do "$BIN/ctr" --address "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true; done
  fi
  for n in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$n"; done
  # kube-proxy's and the CNI plugins' iptables rules.
  [[ -x "$BIN/kube-proxy" ]] && "$BIN/kube-proxy" --cleanup --proxy-mode iptables >/dev/null 2>&1 || true
  # What is left of them and the kubelet's canaries (KUBE-KUBELET-CANARY):
  # the jumps from the built-in chains first, then the chains.
  local t ch
  for t in filter nat mangle; do
    { iptables -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-)' || true; } | sed 's/^-A/-D/' | while read -r rule; do eval iptables -t "$t" "$rule" 2>/dev/null || true; done
    for ch in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do iptables -t "$t" -F "$ch" 2>/dev/null || true; done
    for ch in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do iptables -t "$t" -X "$ch" 2>/dev/null || true; done
  done
  if iptables -S ATOLL-K8S >/dev/null 2>&1; then
    iptables -D FORWARD -j ATOLL-K8S 2>/dev/null || true
    iptables -F ATOLL-K8S; iptables -X ATOLL-K8S
  fi
  # Mounts under the state directory (pod volumes, rootfs, netns), deepest first.
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$STATE/" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  # Network: the bridge and what hangs on it.
  for m in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$m" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
  # Network namespaces made since up that are not under the state dir (none, normally).
  if [[ -s "$STATE/netns-before" ]]; then
    for m in $(ip netns list | awk '{print $1}' | grep '^cni-' || true); do grep -qx "$m" <(awk '{print $1}' "$STATE/netns-before") || ip netns del "$m"; done
  fi
  # The kubelet's cgroups.
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [[ -d $h ]] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$STATE" "$SECRETS"
  check_clean
}

check_clean() {
  local left=0
  log "check: processes, mounts, network namespaces, links, containers, iptables, cgroups"
  local p
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy containerd containerd-shim-runc-v2 coredns atoll-member; do
    if pgrep -f "^$BIN/$p" >/dev/null; then log "left: process $p ($(pgrep -f "^$BIN/$p" | tr '\n' ' '))"; left=1; fi
  done
  # The member clusters' components run from their copies under .k8s/.
  if pgrep -f "$STATE/" >/dev/null; then log "left: processes under $STATE: $(pgrep -f "$STATE/" | tr '\n' ' ')"; left=1; fi
  if findmnt -rn -o TARGET | grep -qF "$STATE"; then log "left: mounts"; findmnt -rn -o TARGET | grep -F "$STATE"; left=1; fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then log "left: bridge $BRIDGE"; left=1; fi
  if [[ -n $(ip netns list | grep '^cni-' || true) ]]; then log "left: netns $(ip netns list | grep '^cni-' | tr '\n' ' ')"; left=1; fi
  if iptables -S ATOLL-K8S >/dev/null 2>&1; then log "left: iptables chain ATOLL-K8S"; left=1; fi
  local t
  for t in filter nat mangle; do
    if iptables -t "$t" -S 2>/dev/null | grep -qE '^-N (KUBE-|CNI-)'; then log "left: iptables $t chains $(iptables -t "$t" -S | grep -E '^-N (KUBE-|CNI-)' | tr '\n' ' ')"; left=1; fi
  done
  if ls -d /sys/fs/cgroup/*/kubepods >/dev/null 2>&1; then log "left: cgroups $(ls -d /sys/fs/cgroup/*/kubepods | tr '\n' ' ')"; left=1; fi
  if [[ -e $STATE ]]; then log "left: $STATE"; left=1; fi
  ((left == 0)) && log "clean: no process, mount, network namespace, bridge, container, iptables chain or cgroup left"
  return $left
}

status() {
  local f
  for f in "$PIDS"/*.pid; do
    [[ -e $f ]] || continue
    local n
    n=$(basename "$f" .pid)
    if running "$n"; then echo "$n running (pid $(cat "$f"))"; else echo "$n stopped"; fi
  done
  k get nodes -o wide 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  members) members ;;
  region) region ;;
  test) game_day ;;
  down) down ;;
  check) check_clean ;;
  status) status ;;
  *) echo "usage: $0 up|members|region|test|down|check|status" >&2; exit 2 ;;
esac

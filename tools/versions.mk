# Pinned versions of the member-cluster toolchain. This is the only place they
# are set; `make tools` rebuilds a binary only when its pin changes.
# KUBE_VERSION pins kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.
KUBE_VERSION := v1.36.3
KUBE_STAGING_VERSION := v0.36.3
ETCD_VERSION := v3.6.16
KWOK_VERSION := v0.8.0
# METRICS_SERVER_VERSION pins metrics-server (member clusters run it for the autoscaler).
METRICS_SERVER_VERSION := v0.9.0
# NATSCLI_VERSION pins the NATS CLI (github.com/nats-io/natscli/nats): the reference
# outside client of events credentials in tests and docs.
NATSCLI_VERSION := v0.5.1
# PROMETHEUS_VERSION pins prometheus and promtool (github.com/prometheus/prometheus, whose
# Go module v0.3xx.y is Prometheus 3.xx.y): deploy/prometheus rules are tested with it.
PROMETHEUS_VERSION := v0.316.0

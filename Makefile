# Atoll: one Makefile, every rule fans out over the modules in go.work.
#
#   make test    install what is missing, build the member-cluster toolchain, run every test
#   make tools   build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, kwokctl, nats (natscli) into bin/
#   make lint    gofmt, go vet and golangci-lint (pinned, run from the module proxy) over every module
#   make bench   benchmarks, with their baselines measured in the same run

include tools/versions.mk
export KUBE_VERSION KUBE_STAGING_VERSION ETCD_VERSION KWOK_VERSION METRICS_SERVER_VERSION NATSCLI_VERSION

SHELL := /bin/bash
# Go lives in /usr/local/go on a fresh machine, not always on PATH.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
GO ?= go
# Every module listed in go.work, as go itself reads it (`go work edit -json`:
# each "DiskPath": "./<dir>"; no jq needed).
MODULES := $(shell $(GO) work edit -json | sed -n 's|^[[:space:]]*"DiskPath": *"\./\([^"]*\)".*|\1|p')
# golangci-lint, pinned and built by `go run` from the module proxy (cached
# by go after the first build); its configuration is .golangci.yml.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT = $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
# Where `make test` keeps the output of go test, for the per-package timing
# (hack/test-times.sh) and for reading after a failure.
TEST_LOG ?= $(or $(TMPDIR),/tmp)/atoll-test.log

# each runs the shell command $(1) in every module's directory (announced
# as "==> $(2) <module>"), goes on past a failing module, and fails at the
# end naming every module that failed.
define each
	failed=""; for m in $(MODULES); do echo "==> $(2) $$m"; (cd $$m && { $(1); }) || failed="$$failed $$m"; done; \
	if [ -n "$$failed" ]; then echo "$(2) failed in:$$failed" >&2; exit 1; fi
endef
TEST_TIMEOUT ?= 45m
# One package at a time: several packages start member clusters, and two at once on 2 cores
# would measure each other rather than the code.
TEST_FLAGS ?= -p 1
FUZZTIME ?= 30s
BENCH ?= .
BENCH_FLAGS ?=
ATOLL_BIN_DIR := $(CURDIR)/bin
export ATOLL_BIN_DIR

.PHONY: all build test test-short lint fmt vet bench tools deps clean clean-clusters help

all: build

help: ## list the rules
	@grep -hE '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/' | column -t -s $$'\t'

deps: ## download every module's dependencies
	@for m in $(MODULES); do echo "==> deps $$m"; (cd $$m && $(GO) mod download) || exit 1; done

tools: ## build the member-cluster binaries into bin/ (skips what is up to date)
	@./hack/build-tools.sh all

build: deps ## build every module
	@$(call each,$(GO) build ./...,build)

test: tools deps browser console-assets ## run every test of every module, member clusters included
	@./hack/sweep-clusters.sh
	@: >$(TEST_LOG); echo "==> go test output also in $(TEST_LOG)"
	@$(call each,set -o pipefail; $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./... 2>&1 | tee -a $(TEST_LOG),test)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME)

.PHONY: test-times
test-times: ## each test package's time in the last `make test` (slowest first, with the total)
	@./hack/test-times.sh $(TEST_LOG)

.PHONY: fuzz
fuzz: ## bounded fuzz run of the gateway's request decoding (FUZZTIME, default 30s; its seeds also run in every go test)
	@echo "==> fuzz services/gateway FuzzRequestDecoding for $(FUZZTIME)"
	@cd services/gateway && $(GO) test -run '^$$' -fuzz '^FuzzRequestDecoding$$' -fuzztime $(FUZZTIME) .

test-short: deps ## unit tests only: no member clusters, no NATS cluster
	@$(call each,$(GO) test -short -count=1 ./...,test -short)

lint: fmt vet golangci-lint ## gofmt, go vet and golangci-lint (.golangci.yml) over every module

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: deps
	@$(call each,$(GO) vet ./...,vet)

# One run over every module's packages: golangci-lint loads them through
# go.work, so the packages the modules share are analysed once, not once a
# module. Each finding is named by its path, which starts with its module.
.PHONY: golangci-lint
golangci-lint: deps ## golangci-lint over every module (GOLANGCI_LINT_VERSION)
	@echo "==> golangci-lint $(GOLANGCI_LINT_VERSION) over $(words $(MODULES)) modules"
	@$(GOLANGCI_LINT) run $(patsubst %,./%/...,$(MODULES))

bench: tools deps ## benchmarks (figures and ratios against same-run baselines)
	@$(call each,$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m $(BENCH_FLAGS) ./...,bench)

clean-clusters: ## delete member clusters left behind by killed runs
	@./hack/sweep-clusters.sh

clean: clean-clusters ## remove build outputs (keeps the cached toolchain in bin/)
	@rm -f coverage.out

.PHONY: browser
browser: ## install Debian's Chromium for the console's browser test (apt-get; skipped when present)
	@if [ -x /usr/bin/chromium ]; then echo "==> chromium: $$(/usr/bin/chromium --version 2>/dev/null)"; else \
	  echo "==> installing Debian's chromium (apt-get update first)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium fonts-liberation >/dev/null && /usr/bin/chromium --version; fi

# The deployable services: one image, one Deployment and one compose entry
# each (hack/images.sh, deploy/k8s, compose.yaml). A new service: one word here.
SERVICES ?= admission aggregator autoscaler gateway propagator quota remediation scheduler upgrade
# Computed once: a tree edited while make runs must not tag the images built
# and the images started differently.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
endif
export SERVICES VERSION

.PHONY: images
images: tools console-assets ## build every image offline, FROM scratch, tagged atoll/<name>:$(VERSION) (installs and starts Docker when missing)
	@./hack/images.sh

.PHONY: compose-up compose-down compose-test
compose-up: images atoll atoll-admin ## the region in Docker Compose: 3 NATS servers, every service x2, 3 member clusters; prints an admin token
	@./hack/compose.sh up

compose-down: ## remove the Compose region: every container, network and volume
	@./hack/compose.sh down

compose-test: images atoll atoll-admin ## up, smoke and fault test (1,000 Apps while replicas and NATS servers are killed and partitioned), down
	@./hack/compose.sh test

.PHONY: run atoll atoll-admin atoll-dev
atoll: deps ## build the atoll command (the Compute API's client) into bin/atoll
	@cd services/atoll && $(GO) build -o $(CURDIR)/bin/atoll ./cmd/atoll

atoll-admin: deps ## build atoll-admin (bootstrap, remediation, upgrade over NATS) into bin/atoll-admin
	@cd services/atoll && $(GO) build -o $(CURDIR)/bin/atoll-admin ./cmd/atoll-admin

atoll-dev: deps console-assets ## build atoll-dev (a whole region in one process) into bin/atoll-dev
	@cd services/atoll && $(GO) build -o $(CURDIR)/bin/atoll-dev ./cmd/atoll-dev

run: tools atoll atoll-dev ## run a whole region here: embedded NATS, 3 local member clusters, every service (Ctrl-C stops it)
	@./hack/sweep-clusters.sh
	@bin/atoll-dev $(RUN_FLAGS)

# The console's third-party browser code, from npm at the versions its
# package-lock.json pins, into static/vendor (git-ignored) under the
# console's go:embed tree: xterm.js copied, the workload editor (editor.js:
# CodeMirror 6 and yaml) bundled by esbuild, and deploy/examples to start
# from. Without it the gateway still builds and the console works; its shell
# and editor say their assets are missing.
CONSOLE_WEB := services/gateway/console/web
CONSOLE_VENDOR := services/gateway/console/static/vendor
CONSOLE_ASSETS := $(CONSOLE_WEB)/node_modules/@xterm/xterm/lib/xterm.mjs \
	$(CONSOLE_WEB)/node_modules/@xterm/xterm/css/xterm.css \
	$(CONSOLE_WEB)/node_modules/@xterm/addon-fit/lib/addon-fit.mjs

.PHONY: console-assets
console-assets: $(CONSOLE_VENDOR)/.stamp ## the console's browser assets (xterm.js) from npm into its static/vendor

$(CONSOLE_VENDOR)/.stamp: $(CONSOLE_WEB)/package.json $(CONSOLE_WEB)/package-lock.json $(CONSOLE_WEB)/editor.js $(wildcard deploy/examples/*.yaml)
	@echo "==> console assets: npm ci in $(CONSOLE_WEB)"
	@cd $(CONSOLE_WEB) && npm ci --no-audit --no-fund --loglevel=error
	@rm -rf $(CONSOLE_VENDOR) && mkdir -p $(CONSOLE_VENDOR)/examples
	@cp $(CONSOLE_ASSETS) $(CONSOLE_VENDOR)/
	@cd $(CONSOLE_WEB) && ./node_modules/.bin/esbuild editor.js --bundle --format=esm --minify --legal-comments=none --log-level=warning --outfile=$(CURDIR)/$(CONSOLE_VENDOR)/editor.mjs
	@cp deploy/examples/*.yaml $(CONSOLE_VENDOR)/examples/
	@touch $@

# ---- Prometheus: the binaries, the SLO rules and their tests -------------
# prometheus and promtool, pinned by PROMETHEUS_VERSION (tools/versions.mk),
# are built into bin/ by `make tools`; `make test` checks deploy/prometheus
# (rules, their promtool unit tests, both Prometheus configurations, and
# that deploy/k8s/operator's PrometheusRule holds the same rules).
export PROMETHEUS_VERSION
.PHONY: prometheus-tools prometheus-rules-test prometheus-rule
tools: prometheus-tools
test: prometheus-rules-test

prometheus-tools: ## build prometheus and promtool into bin/ (PROMETHEUS_VERSION; skips what is up to date)
	@./hack/build-prometheus.sh

prometheus-rules-test: prometheus-tools ## promtool check rules and test rules over deploy/prometheus, check its configs
	@echo "==> promtool check rules, test rules, check config (deploy/prometheus)"
	@bin/promtool check rules deploy/prometheus/rules/*.yaml
	@bin/promtool test rules deploy/prometheus/tests/*.test.yaml
	@bin/promtool check config --syntax-only deploy/prometheus/compose.yml deploy/prometheus/k8s.yml
	@./hack/prometheus-rule.sh | diff -u deploy/k8s/operator/prometheusrule.yaml - >/dev/null || \
	  { echo "deploy/k8s/operator/prometheusrule.yaml is stale: make prometheus-rule" >&2; exit 1; }

prometheus-rule: ## regenerate deploy/k8s/operator/prometheusrule.yaml from deploy/prometheus/rules
	@./hack/prometheus-rule.sh >deploy/k8s/operator/prometheusrule.yaml

# ---- A real one-node Kubernetes for deploy/k8s (hack/k8s-up.sh) -------------
# The control plane is `make tools`'s; the node (kubelet, kube-proxy,
# containerd 2.x with ctr and the runc shim, the CNI plugins, CoreDNS) is
# built from the Go module proxy at the pins in tools/k8s-node.mk; runc,
# iptables, conntrack and openssl come from Debian. State under .k8s/.
include tools/k8s-node.mk
export CONTAINERD_VERSION CNI_PLUGINS_VERSION COREDNS_VERSION

.PHONY: k8s-deps k8s-node-tools k8s-up k8s-region k8s-test k8s-down k8s-check
k8s-deps: ## Debian's runc, iptables, conntrack and openssl for the one-node cluster (apt-get; skipped when present)
	@if command -v runc >/dev/null && command -v iptables >/dev/null && command -v conntrack >/dev/null && command -v openssl >/dev/null; then \
	  echo "==> k8s-deps: $$(runc --version | head -1), $$(iptables --version)"; else \
	  echo "==> installing Debian's runc, iptables, conntrack, openssl (apt-get update first)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends runc iptables conntrack openssl >/dev/null; fi

k8s-node-tools: ## build kubelet, kube-proxy, containerd 2.x (+shim, ctr), the CNI plugins and CoreDNS into bin/
	@./hack/build-k8s-node.sh

k8s-up: tools k8s-node-tools k8s-deps images atoll-admin ## a real one-node Kubernetes here, the 3 member clusters and deploy/k8s/secrets; then kubectl apply -k deploy/k8s-one-node
	@./hack/k8s-up.sh up
	@./hack/k8s-up.sh members
	@echo "==> export KUBECONFIG=$(CURDIR)/.k8s/admin.kubeconfig; then make k8s-region (kubectl apply -k deploy/k8s-one-node, the canary, Prometheus)"

k8s-region: atoll ## kubectl apply -k deploy/k8s-one-node on the one-node Kubernetes, every pod Ready, the canary's project, then deploy/k8s/prometheus
	@./hack/k8s-up.sh region

k8s-test: k8s-up atoll ## the game day on the real node: 300 Apps while pods are force-deleted, drained through their PDBs and restarted; counts, the canary, the alerts; then k8s-down (K8S_KEEP=1 keeps it)
	@./hack/k8s-up.sh region && ./hack/k8s-up.sh test; rc=$$?; \
	  if [ -z "$$K8S_KEEP" ]; then ./hack/k8s-up.sh down || rc=1; fi; exit $$rc

k8s-down: ## stop the one-node Kubernetes and remove its state, mounts, network and containers (checked)
	@./hack/k8s-up.sh down

k8s-check: ## check that k8s-down left nothing behind
	@./hack/k8s-up.sh check

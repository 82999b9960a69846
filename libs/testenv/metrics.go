package testenv

// Member clusters with metrics-server (Options.MetricsServer).
//
// kwokctl starts metrics-server (bin/metrics-server, built by `make tools`)
// beside the control plane with --enable metrics-server; KWOK's controller
// serves kubelet-style resource metrics for every node at
// /metrics/nodes/<node>/metrics/resource, computed from a
// ClusterResourceUsage that reads each pod's usage from its annotations
// (AnnoUsageCPU, AnnoUsageMemory; 1m and 1Mi without them), so a test sets
// a pod's CPU by annotating it (SetPodUsage). Nodes carry the
// metrics.k8s.io/resource-metrics-path annotation and no addresses (kwok
// #1681: an unreachable InternalIP keeps metrics-server from scraping
// them). kwokctl would download metrics-server's manifest; it gets a local
// kustomize directory instead, holding only what the API server needs
// (the APIService and its Service, which kwokctl points at the process).
// The first metrics appear about 45 s after a cluster starts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations KWOK's usage reads (see metricsUsage).
const (
	AnnoUsageCPU    = "kwok.x-k8s.io/usage-cpu"
	AnnoUsageMemory = "kwok.x-k8s.io/usage-memory"
)

// annoMetricsPath tells metrics-server where a node's resource metrics are.
const annoMetricsPath = "metrics.k8s.io/resource-metrics-path"

// metricsUsage is the ClusterResourceUsage of clusters with metrics-server.
const metricsUsage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata:
  name: usage-from-annotation
spec:
  usages:
  - usage:
      cpu:
        expression: '"` + AnnoUsageCPU + `" in pod.metadata.annotations ? Quantity(pod.metadata.annotations["` + AnnoUsageCPU + `"]) : Quantity("1m")'
      memory:
        expression: '"` + AnnoUsageMemory + `" in pod.metadata.annotations ? Quantity(pod.metadata.annotations["` + AnnoUsageMemory + `"]) : Quantity("1Mi")'
`

// metricsManifests is the local kustomize directory kwokctl builds
// metrics-server's manifest from.
var metricsManifests = map[string]string{
	"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- apiservice.yaml
- service.yaml
`,
	"apiservice.yaml": `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  labels: {k8s-app: metrics-server}
spec:
  service:
    name: metrics-server
    namespace: kube-system
  group: metrics.k8s.io
  version: v1beta1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
`,
	"service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
  labels: {k8s-app: metrics-server}
spec:
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: https
  selector: {k8s-app: metrics-server}
`,
}

// metricsServerArgs returns kwokctl's arguments for a cluster with
// metrics-server: its binary, and a configuration (the tuning, the
// manifests directory and the usage) that replaces the tuning file, since
// kwokctl reads only the first KwokctlConfiguration it is given.
func (o *Options) metricsServerArgs() ([]string, error) {
	bin := filepath.Join(o.BinDir, "metrics-server")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (in %s: metrics-server)", ErrMissingBinaries, o.BinDir)
	}
	dir := filepath.Join(o.WorkDir, "metrics-server-manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for name, body := range metricsManifests {
		if err := writeShared(filepath.Join(dir, name), body); err != nil {
			return nil, err
		}
	}
	conf := tuning + "options:\n  metricsServerManifests:\n  - " + dir + "\n---\n" + metricsUsage
	p := filepath.Join(o.WorkDir, "tuning-metrics.yaml")
	if err := writeShared(p, conf); err != nil {
		return nil, err
	}
	return []string{"--enable", "metrics-server", "--metrics-server-binary", bin, "--config", p}, nil
}

// writeShared writes a file clusters starting in parallel share: each
// writes a temporary file and renames it into place, so none sees a
// half-written one.
func writeShared(p, body string) error {
	if b, err := os.ReadFile(p); err == nil && string(b) == body {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(body)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return os.Rename(f.Name(), p)
}

// SetPodUsage sets the simulated usage of a pod (KWOK reports it to
// metrics-server): cpu and memory are quantities ("150m", "64Mi"); an
// empty one is left as it is.
func (c *Cluster) SetPodUsage(ctx context.Context, namespace, pod, cpu, memory string) error {
	anno := map[string]string{}
	if cpu != "" {
		anno[AnnoUsageCPU] = cpu
	}
	if memory != "" {
		anno[AnnoUsageMemory] = memory
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": anno}})
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cluster %s: set usage of %s/%s: %w", c.Name, namespace, pod, err)
	}
	return nil
}

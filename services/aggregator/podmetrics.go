package aggregator

// Pod metrics for the autoscaler.
//
// The holder of a member cluster's lease reads, every PodMetricsEvery, the
// metrics API of the cluster (metrics.k8s.io, served by metrics-server)
// for the platform's App pods, sums usage and requests per App, and
// publishes one cpu and one memory sample per App on
// atoll.metrics.<project>.<app>.<metric> (api.MetricSample with Cluster
// set: a part of the App). The autoscaler combines the latest part of each
// cluster. Only the aggregator holds member-cluster credentials, so the
// autoscaler never reads a cluster. A cluster without the metrics API
// publishes nothing (its Apps' metrics go stale, and each Scaler's
// failure policy applies); it is asked again every PodMetricsRetry.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Tunables of the pod metrics.
const (
	// PodMetricsEvery is how often a cluster's pod metrics are read
	// (metrics-server's resolution is 15 s; reading more often lets a new
	// window show at most this much later).
	PodMetricsEvery = 5 * time.Second
	// PodMetricsRetry is how often a cluster without the metrics API is
	// asked again.
	PodMetricsRetry = 30 * time.Second
)

// podMetricsList is the part of metrics.k8s.io/v1beta1 PodMetricsList read.
type podMetricsList struct {
	Items []struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Timestamp  time.Time `json:"timestamp"`
		Containers []struct {
			Name  string            `json:"name"`
			Usage map[string]string `json:"usage"`
		} `json:"containers"`
	} `json:"items"`
}

// appUsage is one App's pods in one cluster.
type appUsage struct {
	project, app                   string
	pods                           int32
	cpuUse, cpuReq, memUse, memReq float64 // millicores, bytes
	at                             time.Time
}

// podMetricsLoop publishes the term's cluster's App samples until ctx ends.
func (t *clusterTerm) podMetricsLoop(ctx context.Context) {
	for {
		wait := PodMetricsEvery
		if err := t.publishPodMetrics(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Debug("pod metrics", "err", err)
			wait = PodMetricsRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// publishPodMetrics reads the cluster's pod metrics once and publishes a
// sample per App and metric.
func (t *clusterTerm) publishPodMetrics(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sel := api.LabelManaged + "=true," + api.LabelKind + "=" + api.KindLabel(api.KindApp)
	raw, err := t.c.cs.Discovery().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/pods").
		Param("labelSelector", sel).DoRaw(rctx)
	if err != nil {
		return fmt.Errorf("read pod metrics of %s: %w", t.c.member.Name, err)
	}
	var list podMetricsList
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("decode pod metrics of %s: %w", t.c.member.Name, err)
	}
	apps := map[string]*appUsage{}
	for _, it := range list.Items {
		o, exists, err := t.pods.GetByKey(it.Metadata.Namespace + "/" + it.Metadata.Name)
		pod, ok := o.(*podView)
		if err != nil || !exists || !ok || !podReady(pod) {
			continue // gone, going or not ready: the HPA counts only ready pods
		}
		if pod.Key == (istr{}) {
			continue
		}
		key := pod.Key.String()
		u := apps[key]
		if u == nil {
			project, _ := pod.label(api.LabelProject)
			app, _ := pod.label(api.LabelWorkload)
			u = &appUsage{project: project, app: app}
			apps[key] = u
		}
		u.pods++
		if it.Timestamp.After(u.at) {
			u.at = it.Timestamp
		}
		// The HPA's utilization: usage over requests of the pod's
		// containers (the platform's sidecars, native sidecars among the
		// init containers, are in neither).
		own := map[string]bool{}
		for _, c := range pod.mains() {
			own[c.Name.String()] = true
			u.cpuReq += float64(c.MilliCPU)
			u.memReq += float64(c.MemoryBytes)
		}
		for _, c := range it.Containers {
			if own[c.Name] {
				u.cpuUse += milli(c.Usage["cpu"])
				u.memUse += bytesOf(c.Usage["memory"])
			}
		}
	}
	for _, u := range apps {
		if u.at.IsZero() {
			u.at = time.Now()
		}
		for _, m := range []struct {
			name     string
			use, req float64
		}{{api.MetricCPU, u.cpuUse, u.cpuReq}, {api.MetricMemory, u.memUse, u.memReq}} {
			if m.req <= 0 {
				continue // no requests: no utilization (the HPA refuses those too)
			}
			smp := api.MetricSample{Value: 100 * m.use / m.req, Pods: u.pods, At: u.at.UTC(),
				Cluster: t.c.member.Name, Usage: m.use, Requests: m.req}
			b, err := json.Marshal(smp)
			if err != nil {
				return err
			}
			if err := t.c.s.bus.NC.Publish(bus.MetricsSubject(u.project, u.app, m.name), b); err != nil {
				return fmt.Errorf("publish %s of %s/%s: %w", m.name, u.project, u.app, err)
			}
		}
	}
	return nil
}

func milli(q string) float64 {
	if q == "" {
		return 0
	}
	v, err := resource.ParseQuantity(strings.TrimSpace(q))
	if err != nil {
		return 0
	}
	return v.AsApproximateFloat64() * 1000 // usage comes in nanocores
}

func bytesOf(q string) float64 {
	if q == "" {
		return 0
	}
	v, err := resource.ParseQuantity(strings.TrimSpace(q))
	if err != nil {
		return 0
	}
	return float64(v.Value())
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/atoll/region"
)

// What the member clusters contribute to a round: how long their API
// servers took to accept the propagator's applies (the floor of submit ->
// propagated, the same at every project size), and whether they are done
// with the previous round's objects.

// applyMetric is the propagator's histogram of one shard's apply to a
// member cluster (services/propagator metrics.go).
const applyMetric = "atoll_propagator_apply_duration_seconds"

// applyHist is that histogram summed over clusters and propagator
// replicas: cumulative counts by upper bound, as Prometheus keeps them.
type applyHist struct {
	bounds []float64
	counts []uint64
	total  uint64
	// byCluster counts the applies to each member cluster.
	byCluster map[string]uint64
}

// scrapeApply reads the apply histogram of every propagator replica.
func scrapeApply(ctx context.Context, reg *region.Region) (applyHist, error) {
	h := applyHist{byCluster: map[string]uint64{}}
	for i := 0; ; i++ {
		url := reg.AdminURL("propagator", i)
		if url == "" {
			break
		}
		fams, err := admin.ScrapeFamilies(ctx, url)
		if err != nil {
			return applyHist{}, fmt.Errorf("propagator-%d: %w", i, err)
		}
		f := fams[applyMetric]
		if f == nil {
			continue
		}
		for _, m := range f.Metric {
			hm := m.GetHistogram()
			if hm == nil {
				continue
			}
			if h.bounds == nil {
				for _, b := range hm.Bucket {
					h.bounds = append(h.bounds, b.GetUpperBound())
				}
				h.counts = make([]uint64, len(h.bounds))
			}
			for j, b := range hm.Bucket {
				if j < len(h.counts) {
					h.counts[j] += b.GetCumulativeCount()
				}
			}
			h.total += hm.GetSampleCount()
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					h.byCluster[l.GetValue()] += hm.GetSampleCount()
				}
			}
		}
	}
	return h, nil
}

// since is what h counted after earlier.
func (h applyHist) since(earlier applyHist) applyHist {
	out := applyHist{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total - earlier.total, byCluster: map[string]uint64{}}
	for c, n := range h.byCluster {
		out.byCluster[c] = n - earlier.byCluster[c]
	}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(earlier.counts) {
			out.counts[i] -= earlier.counts[i]
		}
	}
	return out
}

// plus adds o's counts to h's (the same buckets, or h empty).
func (h applyHist) plus(o applyHist) applyHist {
	if h.bounds == nil {
		h = applyHist{bounds: o.bounds, counts: make([]uint64, len(o.counts))}
	}
	out := h.since(applyHist{})
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] += o.counts[i]
		}
	}
	out.total += o.total
	for c, n := range o.byCluster {
		out.byCluster[c] += n
	}
	return out
}

// quantile estimates quantile q by linear interpolation within its
// bucket (the buckets double, so this is coarse: a figure, not a bound);
// 0 with nothing counted, +Inf above the last bound.
func (h applyHist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := q * float64(h.total)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			in := c - below
			if in == 0 {
				return time.Duration(h.bounds[i] * float64(time.Second))
			}
			x := lower + (h.bounds[i]-lower)*(rank-float64(below))/float64(in)
			return time.Duration(x * float64(time.Second))
		}
		lower, below = h.bounds[i], c
	}
	return time.Duration(math.MaxInt64)
}

// spread lists the applies by cluster, in cluster order.
func (h applyHist) spread() string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(h.byCluster)) {
		parts = append(parts, fmt.Sprintf("%s %d", c, h.byCluster[c]))
	}
	return strings.Join(parts, ", ")
}

// clustersDrained waits until no member cluster holds a Deployment,
// ReplicaSet or PodDisruptionBudget in the project's namespace: the
// measured Apps' objects and what their clusters' controllers made of
// them (the fill Apps are stopped and hold none), so the next round does
// not share the clusters with the garbage collector.
func clustersDrained(ctx context.Context, reg *region.Region, project string) error {
	ns := api.Namespace(project)
	for {
		left, err := 0, error(nil)
		for _, c := range reg.Env.Clusters {
			d, e1 := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			rs, e2 := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			pdb, e3 := c.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
			if e1 != nil || e2 != nil || e3 != nil {
				err = fmt.Errorf("cluster %s: %w", c.Name, errors.Join(e1, e2, e3))
				continue
			}
			left += len(d.Items) + len(rs.Items) + len(pdb.Items)
		}
		if left == 0 && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d objects left in the clusters (last error: %w): %w", left, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func TestApplyHistQuantile(t *testing.T) {
	// Buckets 1, 2, 4 s and +Inf; 10 samples: 2 up to 1 s, 6 in (1, 2], 2 in (2, 4].
	h := applyHist{bounds: []float64{1, 2, 4, math.Inf(1)}, counts: []uint64{2, 8, 10, 10}, total: 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.1, 500 * time.Millisecond}, // half-way through the first bucket
		{0.5, 1500 * time.Millisecond},
		{0.9, 3 * time.Second},
		{1, 4 * time.Second},
	} {
		if got := h.quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (applyHist{}).quantile(.5); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
	// Over two scrapes, and pooled.
	later := applyHist{bounds: h.bounds, counts: []uint64{2, 8, 20, 20}, total: 20}
	d := later.since(h)
	if d.total != 10 || d.quantile(.5) != 3*time.Second {
		t.Errorf("since: total %d, median %v; want 10, 3s", d.total, d.quantile(.5))
	}
	p := applyHist{}.plus(h).plus(d)
	if p.total != 20 || p.counts[2] != 20 || p.quantile(.25) != 1500*time.Millisecond {
		t.Errorf("plus: %+v, quantile(.25) %v", p, p.quantile(.25))
	}
}

package region_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

// storedCluster reads a cluster's inventory record; t is a test or the
// *assert.CollectT of a poll.
func storedCluster(t require.TestingT, name string) api.ClusterInfo {
	for _, ci := range mustClusters(t) {
		if ci.Name == name {
			return ci
		}
	}
	t.Errorf("cluster %s not in the inventory", name)
	t.FailNow()
	return api.ClusterInfo{}
}

func mustClusters(t require.TestingT) []api.ClusterInfo {
	cs, err := cl.Clusters(context.Background())
	require.NoError(t, err, "read the cluster inventory")
	return cs
}

// waitPlaced waits for a workload's placement and returns its shards by cluster.
func waitPlaced(t *testing.T, key string) map[string]int32 {
	t.Helper()
	var got map[string]int32
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := cl.Placement(context.Background(), key)
		if err != nil || p == nil || len(p.Shards) == 0 {
			ct.Errorf("no placement yet: %+v %v", p, err)
			return
		}
		got = map[string]int32{}
		for _, s := range p.Shards {
			got[s.Cluster] += s.Replicas
		}
	}, 60*time.Second, 250*time.Millisecond)
	return got
}

// waitRewritten waits until an aggregator started at or after since has
// rewritten the cluster's inventory, and returns the record.
func waitRewritten(t *testing.T, name string, since time.Time) api.ClusterInfo {
	t.Helper()
	var ci api.ClusterInfo
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ci = storedCluster(ct, name)
		if !ci.Updated.After(since) {
			ct.Errorf("inventory of %s last written %v, not after %v", name, ci.Updated, since)
		}
	}, 30*time.Second, 250*time.Millisecond)
	return ci
}

func TestClusterOps(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project = "cluster-ops"
	zb := reg.Env.Cluster("zone-b").Name
	t.Cleanup(func() {
		_ = cl.Delete(ctx, project, api.KindApp, "spread")
		_ = cl.Delete(ctx, project, api.KindApp, "ml")
		if _, err := cl.Cordon(ctx, zb, false); err != nil {
			t.Errorf("cleanup: uncordon %s: %v", zb, err)
		}
		if _, err := cl.SetClusterLabels(ctx, zb, nil, []string{"team"}); err != nil {
			t.Errorf("cleanup: remove label of %s: %v", zb, err)
		}
	})

	// Refusals carry their status and reason.
	var e *busclient.Error
	if _, err := cl.Cordon(ctx, "zone-nowhere", true); !errors.As(err, &e) || e.Status != api.StatusNotFound {
		t.Errorf("cordon of an unknown cluster: %v, want 404", err)
	}
	if _, err := cl.SetClusterLabels(ctx, zb, map[string]string{api.NodeLabelZone: "a"}, nil); !errors.As(err, &e) ||
		e.Status != api.StatusBadRequest || len(e.Body.Fields) != 1 || e.Body.Fields[0].Code != api.CodeForbidden {
		t.Errorf("changing the zone label: %v, want 400 Forbidden", err)
	}

	// A workload placed before the cordon keeps its shard there.
	before := api.Key(project, api.KindApp, "before")
	if _, err := cl.Submit(ctx, appDoc(project, "before", 3, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, before, map[string]int32{"a": 1, "b": 1, "c": 1}, "")

	// Count the inventory writes of zone b from here on.
	kv, err := reg.Bus.KV(ctx, bus.BucketClusters)
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := kv.Watch(ctx, zb, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()

	ci, err := cl.Cordon(ctx, zb, true)
	if err != nil {
		t.Fatal(err)
	}
	if !ci.Cordoned || !ci.Admin.Cordoned {
		t.Fatalf("cordon replied %+v", ci)
	}

	// A 4-replica App with no zone restriction avoids the cordoned cluster.
	spread := api.Key(project, api.KindApp, "spread")
	if _, err := cl.Submit(ctx, appDoc(project, "spread", 4, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	if got := waitPlaced(t, spread); got[zb] != 0 || got[reg.Env.Cluster("zone-a").Name]+got[reg.Env.Cluster("zone-c").Name] != 4 {
		t.Errorf("placement %v: want 4 replicas over zones a and c, none on cordoned %s", got, zb)
	}
	waitZones(t, spread, map[string]int32{"a": 2, "c": 2}, "")
	d, err := reg.Env.Cluster("zone-b").Client.AppsV1().Deployments(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=spread"})
	if err != nil || len(d.Items) != 0 {
		t.Errorf("cordoned %s has deployments %v (%v)", zb, d, err)
	}

	if got := waitPlaced(t, before); got[zb] != 1 {
		t.Errorf("placement of a workload placed before the cordon: %v; its shard on %s must stay", got, zb)
	}

	// The probes rewrite the inventory; every rewrite keeps the cordon.
	writes := 0
	deadline := time.After(45 * time.Second)
	for writes < 3 {
		select {
		case e := <-watcher.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var got api.ClusterInfo
			if err := json.Unmarshal(e.Value(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Updated.Equal(ci.Updated) {
				continue // the cordon's own write
			}
			if !got.Cordoned || !got.Healthy {
				t.Fatalf("inventory rewrite %d of %s: cordoned %v healthy %v, want a cordoned healthy cluster", writes+1, zb, got.Cordoned, got.Healthy)
			}
			writes++
		case <-deadline:
			t.Fatalf("%d inventory rewrites of %s in 45s, want 3", writes, zb)
		}
	}

	// A restarted aggregator keeps the cordon.
	restartAt := time.Now()
	if err := reg.Restart(ctx, "aggregator"); err != nil {
		t.Fatal(err)
	}
	if ci := waitRewritten(t, zb, restartAt); !ci.Cordoned || !ci.Healthy || len(ci.Pools) == 0 {
		t.Errorf("after an aggregator restart %s: cordoned %v healthy %v pools %v", zb, ci.Cordoned, ci.Healthy, ci.Pools)
	}

	// Uncordon, and label zone b team=ml: a workload selecting it lands only there.
	if ci, err := cl.Cordon(ctx, zb, false); err != nil || ci.Cordoned {
		t.Fatalf("uncordon: %+v %v", ci, err)
	}
	ci, err = cl.SetClusterLabels(ctx, zb, map[string]string{"team": "ml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Labels["team"] != "ml" || ci.Admin.Labels["team"] != "ml" {
		t.Fatalf("labels replied %+v", ci)
	}
	// The label survives a restart too.
	restartAt = time.Now()
	if err := reg.Restart(ctx, "aggregator"); err != nil {
		t.Fatal(err)
	}
	if ci := waitRewritten(t, zb, restartAt); ci.Labels["team"] != "ml" || ci.Cordoned {
		t.Errorf("after an aggregator restart %s: labels %v cordoned %v", zb, ci.Labels, ci.Cordoned)
	}
	ml := api.Key(project, api.KindApp, "ml")
	doc := fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"ml"},
"spec":{"replicas":3,"placement":{"clusterSelector":{"team":"ml"}},"template":{"containers":[{"name":"a","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`, project)
	if _, err := cl.Submit(ctx, doc); err != nil {
		t.Fatal(err)
	}
	if got := waitPlaced(t, ml); !maps.Equal(got, map[string]int32{zb: 3}) {
		t.Errorf("placement of a team=ml workload %v, want all 3 on %s", got, zb)
	}
	waitZones(t, ml, map[string]int32{"b": 3}, "")

	// Removing the label leaves the cluster as configured.
	ci, err = cl.SetClusterLabels(ctx, zb, nil, []string{"team"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ci.Labels["team"]; ok || ci.Admin.Labels != nil {
		t.Errorf("after removing team: labels %v, admin labels %v", ci.Labels, ci.Admin.Labels)
	}
	for _, c := range mustClusters(t) {
		if c.Cordoned || len(c.Labels) > 0 {
			t.Errorf("cluster %s left cordoned %v with labels %v", c.Name, c.Cordoned, c.Labels)
		}
	}
}

package region_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

func appDoc(project, name string, replicas int, image string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"template":{"containers":[{"name":"web","image":%q,"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name, replicas, image))
}

// waitZones waits until the workload is Running with the given ready pods per zone.
func waitZones(t *testing.T, key string, want map[string]int32, image string) *api.Status {
	t.Helper()
	var st *api.Status
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		st, err = cl.Status(context.Background(), key)
		if err != nil || st == nil {
			ct.Errorf("no status yet: %v", err)
			return
		}
		got := map[string]int32{}
		for z, zs := range st.Zones {
			if zs.Ready > 0 || zs.Desired > 0 {
				got[z] = zs.Ready
			}
		}
		if st.Phase != api.PhaseRunning || fmt.Sprint(got) != fmt.Sprint(want) {
			ct.Errorf("phase %s, ready per zone %v, want Running %v", st.Phase, got, want)
			return
		}
		if image != "" && !slices.Equal(st.Images, []string{image}) {
			ct.Errorf("images %v, want only %s", st.Images, image)
		}
	}, 90*time.Second, 250*time.Millisecond)
	return st
}

func TestAppLifecycle(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "web-team", "frontend"
	key := api.Key(project, api.KindApp, name)
	sub, err := cl.WatchEvents(project, api.KindApp, name)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	start := time.Now()
	if _, err := cl.Submit(ctx, appDoc(project, name, 9, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, key, map[string]int32{"a": 3, "b": 3, "c": 3}, "nginx:1.27")
	t.Logf("9 replicas Running 3/3/3 %v after submit", time.Since(start).Round(time.Millisecond))

	// Each cluster runs a Deployment of 3 with 3 Running pods.
	for _, c := range reg.Env.Clusters {
		d, err := c.Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if *d.Spec.Replicas != 3 || d.Status.ReadyReplicas != 3 {
			t.Errorf("%s: deployment replicas %d ready %d, want 3", c.Name, *d.Spec.Replicas, d.Status.ReadyReplicas)
		}
		if d.Labels[api.LabelProject] != project || d.Labels[api.LabelShard] != c.Name {
			t.Errorf("%s: labels %v", c.Name, d.Labels)
		}
		// The platform's sidecar runs as a native sidecar.
		ic := d.Spec.Template.Spec.InitContainers
		if len(ic) != 1 || ic[0].RestartPolicy == nil || *ic[0].RestartPolicy != "Always" {
			t.Errorf("%s: managed sidecar missing or not native: %+v", c.Name, ic)
		}
	}

	// Events arrive admitted, scheduled, propagated, running, in that order.
	var order []string
	deadline := time.Now().Add(10 * time.Second)
	for len(order) < 4 && time.Now().Before(deadline) {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		ev := m.Subject[len(fmt.Sprintf("atoll.evt.%s.app.%s.", project, name)):]
		if slices.Contains([]string{"admitted", "scheduled", "propagated", "running"}, ev) && !slices.Contains(order, ev) {
			order = append(order, ev)
		}
	}
	if want := []string{"admitted", "scheduled", "propagated", "running"}; !slices.Equal(order, want) {
		t.Errorf("events %v, want %v", order, want)
	}

	// Scale up and down.
	if _, err := cl.Update(ctx, appDoc(project, name, 12, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, key, map[string]int32{"a": 4, "b": 4, "c": 4}, "nginx:1.27")
	if _, err := cl.Update(ctx, appDoc(project, name, 3, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, key, map[string]int32{"a": 1, "b": 1, "c": 1}, "nginx:1.27")

	// A new image rolls out: new ReplicaSets, old pods replaced.
	if _, err := cl.Update(ctx, appDoc(project, name, 3, "nginx:1.28")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, key, map[string]int32{"a": 1, "b": 1, "c": 1}, "nginx:1.28")
	for _, c := range reg.Env.Clusters {
		rs, err := c.Client.AppsV1().ReplicaSets(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Items) < 2 {
			t.Errorf("%s: %d ReplicaSets after an image change, want a rolling update (2)", c.Name, len(rs.Items))
		}
	}

	// Delete: every object goes from every cluster.
	if err := cl.Delete(ctx, project, api.KindApp, name); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			ns := api.Namespace(project)
			sel := metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name}
			d, _ := c.Client.AppsV1().Deployments(ns).List(ctx, sel)
			rs, _ := c.Client.AppsV1().ReplicaSets(ns).List(ctx, sel)
			p, _ := c.Client.CoreV1().Pods(ns).List(ctx, sel)
			if n := len(d.Items) + len(rs.Items) + len(p.Items); n > 0 {
				ct.Errorf("%s still has %d deployments, %d replicasets, %d pods", c.Name, len(d.Items), len(rs.Items), len(p.Items))
				return
			}
		}
		if st, _ := cl.Status(ctx, key); st != nil {
			ct.Errorf("status still present: %s", st.Phase)
		}
	}, 60*time.Second, 250*time.Millisecond)
}

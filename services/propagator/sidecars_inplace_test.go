package propagator

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/testenv"
)

// TestSidecarImageChangeIsPatchedInPlace changes only the managed
// sidecar's image of a running App: every pod keeps its UID, the
// sidecar's restart count goes up by exactly one, the user container's
// stays, the Deployment keeps its one ReplicaSet; then a change of the
// sidecar's resources replaces the pods.
func TestSidecarImageChangeIsPatchedInPlace(t *testing.T) {
	stages, err := filepath.Abs("testdata/inplace-stages.yaml")
	require.NoError(t, err)
	env := testenv.New(t, testenv.ClusterSpec{Zone: "a", ConfigFiles: []string{stages}})
	c := env.Clusters[0]
	b := openBus(t)
	ctx := context.Background()
	_, err = c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: 2})
	require.NoError(t, err)

	w := app("web", 4)
	w.Spec.PodTemplate().Sidecars = []api.Container{{Name: "log", Image: "log:1"}}
	seed(t, b, []*api.Workload{w}, []string{c.Name}, false)
	startReplica(t, b, "r1", env.Clusters, &writeLog{}, nil)

	ns := api.Namespace("p")
	pods := func() []corev1.Pod {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=web"})
		require.NoError(t, err)
		return l.Items
	}
	running := func(image string) bool {
		ps := pods()
		if len(ps) != 4 {
			return false
		}
		for i := range ps {
			if !podReady(&ps[i]) || !runsImages(&ps[i], true, map[string]string{"log": image}) || ps[i].DeletionTimestamp != nil {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, func() bool { return running("log:1") }, time.Minute, 100*time.Millisecond, "4 pods ready on log:1") {
		for _, p := range pods() {
			t.Logf("pod %s: %+v", p.Name, p.Status)
		}
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		t.Fatalf("deployment: %v %+v", err, d.Status)
	}
	type seen struct {
		uid           string
		main, sidecar int32
	}
	before := map[string]seen{}
	for _, p := range pods() {
		before[p.Name] = seen{string(p.UID), p.Status.ContainerStatuses[0].RestartCount, p.Status.InitContainerStatuses[0].RestartCount}
	}

	var gen int64
	update := func(change func(t *api.PodTemplate)) {
		kv, err := b.KV(ctx, bus.BucketWorkloads)
		require.NoError(t, err)
		_, err = bus.Update(ctx, kv, w.Key(), func(cur []byte, _ bool) ([]byte, error) {
			next, err := api.Decode(cur)
			if err != nil {
				return nil, err
			}
			change(next.Spec.PodTemplate())
			next.Metadata.Generation++
			gen = next.Metadata.Generation
			return json.Marshal(next)
		})
		require.NoError(t, err)
		// The scheduler's placement of the new generation.
		pkv, err := b.KV(ctx, bus.BucketPlacements)
		require.NoError(t, err)
		_, err = bus.Update(ctx, pkv, w.Key(), func(cur []byte, _ bool) ([]byte, error) {
			var p api.PlacementDecision
			if err := json.Unmarshal(cur, &p); err != nil {
				return nil, err
			}
			p.Generation = gen
			return json.Marshal(p)
		})
		require.NoError(t, err)
	}
	update(func(t *api.PodTemplate) { t.Sidecars[0].Image = "log:2" })
	if !assert.Eventually(t, func() bool { return running("log:2") }, time.Minute, 100*time.Millisecond, "4 pods ready on log:2") {
		for _, p := range pods() {
			t.Logf("pod %s: spec %s status %+v ready %t", p.Name, p.Spec.InitContainers[0].Image, p.Status.InitContainerStatuses, podReady(&p))
		}
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		t.Fatalf("deployment: %v paused %t %s", err, d.Spec.Paused, d.Spec.Template.Spec.InitContainers[0].Image)
	}
	require.Eventually(t, func() bool {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && !d.Spec.Paused && d.Spec.Template.Spec.InitContainers[0].Image == "log:2"
	}, 30*time.Second, 100*time.Millisecond, "the Deployment applied, unpaused, with the new image")
	time.Sleep(2 * time.Second) // the Deployment controller's turn
	for _, p := range pods() {
		was, ok := before[p.Name]
		if !assert.True(t, ok, "pod %s is new: the change replaced pods", p.Name) {
			continue
		}
		assert.Equal(t, was.uid, string(p.UID), "pod %s UID", p.Name)
		assert.Equal(t, was.main, p.Status.ContainerStatuses[0].RestartCount, "pod %s: the user container did not restart", p.Name)
		assert.Equal(t, was.sidecar+1, p.Status.InitContainerStatuses[0].RestartCount, "pod %s: the sidecar restarted once", p.Name)
	}
	sets, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=web"})
	require.NoError(t, err)
	assert.Len(t, sets.Items, 1, "the Deployment adopted its ReplicaSet: no new one")

	// A resource change is not in place: the pods are replaced.
	update(func(t *api.PodTemplate) { t.Sidecars[0].Resources.Requests.CPU = "20m" })
	require.Eventually(t, func() bool {
		ps := pods()
		for _, p := range ps {
			if _, old := before[p.Name]; old {
				return false
			}
		}
		return len(ps) == 4
	}, time.Minute, 200*time.Millisecond, "the pods replaced")
}

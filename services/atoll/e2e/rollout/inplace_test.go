package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

const inPlaceName = "inplace"

// inPlaceDoc is an App with InPlaceIfPossible: 2 replicas per zone, two
// containers (app and helper), a 1 s bake; env sets a variable on app.
func inPlaceDoc(appImage, env string) []byte {
	if env != "" {
		env = fmt.Sprintf(`,"env":[{"name":"MODE","value":%q}]`, env)
	}
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":6,"updateStrategy":"InPlaceIfPossible","availability":{"maxUnavailable":"1"},
"rollout":{"bakeSeconds":1,"deadlineSeconds":60,"onFailure":"Pause"},
"template":{"containers":[
 {"name":"app","image":%q,"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}%s},
 {"name":"helper","image":"helper:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		project, inPlaceName, appImage, env)
}

// livePod is what the test follows of one pod: where, which, and each
// container's image (from the status) and restart count.
type livePod struct {
	Zone, UID string
	Env       string
	Images    map[string]string
	Restarts  map[string]int32
}

// inPlacePods reads the App's Running pods in every zone, by name.
func inPlacePods(ctx context.Context) (map[string]livePod, error) {
	out := map[string]livePod{}
	for _, c := range reg.Env.Clusters {
		pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + inPlaceName})
		if err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			lp := livePod{Zone: c.Zone, UID: string(p.UID), Images: map[string]string{}, Restarts: map[string]int32{}}
			for _, e := range p.Spec.Containers[0].Env {
				if e.Name == "MODE" {
					lp.Env = e.Value
				}
			}
			for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
				lp.Images[s.Name], lp.Restarts[s.Name] = s.Image, s.RestartCount
			}
			out[p.Name] = lp
		}
	}
	return out, nil
}

// TestInPlaceImageUpdate: an App with InPlaceIfPossible and two
// containers over zones a, b, c. Changing the app container's image rolls
// zone by zone and keeps every pod (same names and UIDs, none replaced
// afterwards by the Deployment controller); in each pod only app restarts
// (its restart count goes to 1, helper's and the managed sidecar's stay
// 0); the status counts every zone's pods on the new revision. Changing
// an environment variable replaces the pods.
func TestInPlaceImageUpdate(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	key := api.Key(project, api.KindApp, inPlaceName)
	log := &eventLog{}
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(project, api.KindApp, inPlaceName, "*"), log.add)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()

	_, err = cl.Submit(ctx, inPlaceDoc("app:1", ""))
	require.NoError(t, err)
	waitReady(t, key, 6)
	var before map[string]livePod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		before, err = inPlacePods(ctx)
		if !assert.NoError(ct, err) || !assert.Len(ct, before, 6) {
			return
		}
		for n, p := range before {
			assert.Equal(ct, "app:1", p.Images["app"], n)
		}
	}, 60*time.Second, 250*time.Millisecond)
	zones := map[string]int{}
	for _, p := range before {
		zones[p.Zone]++
	}
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, zones)

	// An image-only change: patched into the live pods, zone by zone.
	t0 := time.Now()
	_, err = cl.Update(ctx, inPlaceDoc("app:2", ""))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, names(log.rollout(t0)), "rollout-zone-done:c")
	}, 120*time.Second, 200*time.Millisecond)
	evs := log.rollout(t0)
	assert.Equal(t, []string{"rollout-zone-started:a", "rollout-zone-done:a", "rollout-zone-started:b", "rollout-zone-done:b",
		"rollout-zone-started:c", "rollout-zone-done:c"}, names(evs))
	for _, ev := range evs {
		t.Logf("in place %-22s zone %s at +%v", ev.Event, zoneOf(ev), ev.Time.Sub(t0).Round(time.Millisecond))
	}
	var after map[string]livePod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		after, err = inPlacePods(ctx)
		if !assert.NoError(ct, err) {
			return
		}
		assert.ElementsMatch(ct, slices.Collect(maps.Keys(before)), slices.Collect(maps.Keys(after)), "pods replaced")
		for n, p := range after {
			assert.Equal(ct, before[n].UID, p.UID, "pod %s replaced", n)
			assert.Equal(ct, "app:2", p.Images["app"], "pod %s app image", n)
			assert.Equal(ct, "helper:1", p.Images["helper"], "pod %s helper image", n)
			for c, r := range p.Restarts {
				want := int32(0)
				if c == "app" {
					want = 1
				}
				assert.Equal(ct, want, r, "pod %s container %s restarts", n, c)
			}
		}
	}, 30*time.Second, 250*time.Millisecond)
	t.Logf("app:1 → app:2 in place in %v: %d pods, same UIDs, app restarted once, helper and sidecars never",
		time.Since(t0).Round(time.Millisecond), len(after))

	r, err := readRollout(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, r)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) {
			return
		}
		for _, z := range []string{"a", "b", "c"} {
			assert.Equal(ct, map[string]int32{r.Stable: 2}, st.Zones[z].Templates, "zone %s pods by revision", z)
		}
	}, 30*time.Second, 250*time.Millisecond)
	described := atoll(t, "describe", "app", inPlaceName)
	assert.Contains(t, described, "Update strategy:")
	assert.Contains(t, described, "InPlaceIfPossible")
	for _, z := range []string{"a", "b", "c"} {
		assert.Regexp(t, `(?m)^\s+`+z+`:\s+`+r.Stable+` 2$`, described, "zone %s pods by revision", z)
	}

	// Nothing replaces them afterwards: the Deployments' controllers found
	// their ReplicaSets on the new template.
	time.Sleep(3 * time.Second) // a window for a late rollout to show
	for _, c := range reg.Env.Clusters {
		rs, err := c.Client.AppsV1().ReplicaSets(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + inPlaceName})
		require.NoError(t, err)
		assert.Len(t, rs.Items, 1, "zone %s: a new ReplicaSet", c.Zone)
		d, err := c.Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, inPlaceName, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "app:2", d.Spec.Template.Spec.Containers[0].Image, "zone %s deployment", c.Zone)
		assert.False(t, d.Spec.Paused, "zone %s deployment left paused", c.Zone)
	}
	still, err := inPlacePods(ctx)
	require.NoError(t, err)
	for n, p := range after {
		assert.Equal(t, p.UID, still[n].UID, "pod %s replaced after the update", n)
	}

	// An environment change cannot be made in place: the pods are replaced.
	t1 := time.Now()
	_, err = cl.Update(ctx, inPlaceDoc("app:2", "fast"))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, names(log.rollout(t1)), "rollout-zone-done:c")
	}, 150*time.Second, 200*time.Millisecond)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		replaced, err := inPlacePods(ctx)
		if !assert.NoError(ct, err) || !assert.Len(ct, replaced, 6) {
			return
		}
		for n, p := range replaced {
			_, old := before[n]
			assert.False(ct, old, "pod %s kept through an env change", n)
			assert.Equal(ct, "fast", p.Env, n)
			assert.Equal(ct, int32(0), p.Restarts["app"], n)
		}
	}, 60*time.Second, 250*time.Millisecond)
	t.Logf("env change replaced every pod in %v", time.Since(t1).Round(time.Millisecond))
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, inPlaceName))
}

package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/aggregator"
	"atoll.dev/services/atoll/e2e"
)

const (
	// heldApp is the readiness test's App.
	heldApp = "held"
	// readinessLabel drives zone a's readiness stages: "hold" starts a pod
	// not ready, "release" makes it ready (testdata/zone-a-stages.yaml).
	readinessLabel = "readiness.stage.kwok.x-k8s.io"
	// heldBake is the App's bake per zone: short, so that a rollout that
	// did not wait for readiness would leave zone a within seconds.
	heldBake = time.Second
)

// heldDoc is the readiness test's App: 2 replicas per zone, one
// unavailable per shard, a bake of heldBake and a deadline far beyond the
// test's hold. hold adds the label zone a's stage holds pods not ready on.
func heldDoc(image string, hold bool) []byte {
	labels := ""
	if hold {
		labels = fmt.Sprintf(`,"labels":{%q:"hold"}`, readinessLabel)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":6,"availability":{"maxUnavailable":"1"},
"rollout":{"bakeSeconds":%d,"deadlineSeconds":120,"onFailure":"Pause"},
"template":{"containers":[{"name":"web","image":%q,"ports":[{"name":"http","containerPort":8080}],
 "readinessProbe":{"httpGet":{"path":"/ready","port":"http"},"periodSeconds":1},
 "resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]%s}}}`,
		project, heldApp, int(heldBake/time.Second), image, labels))
}

// zoneCluster is the member cluster of zone.
func zoneCluster(zone string) string { return "zone-" + zone }

// heldPods are the held App's live pods in zone's cluster.
func heldPods(ctx context.Context, zone string) ([]corev1.Pod, error) {
	c := reg.Env.Cluster(zoneCluster(zone))
	l, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + heldApp})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deploymentImage is the image of the held App's Deployment in zone.
func deploymentImage(ctx context.Context, zone string) (string, error) {
	d, err := reg.Env.Cluster(zoneCluster(zone)).Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, heldApp, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return d.Spec.Template.Spec.Containers[0].Image, nil
}

// rolloutState is the rollout's phase and zone states ("Progressing
// a=Updating b=Pending c=Pending").
func rolloutState(r *api.Rollout) string {
	got := []string{r.Phase}
	for _, z := range r.Zones {
		got = append(got, z.Zone+"="+z.State)
	}
	return strings.Join(got, " ")
}

// endpointCounts are the App's endpoints from the API (`atoll endpoints
// app held -o json`) as "zone: ready/all", and the pods listed not ready.
func endpointCounts(t *testing.T, ct assert.TestingT) (map[string]string, []string) {
	var eps computeapi.Endpoints
	assert.NoError(ct, json.Unmarshal([]byte(atoll(t, "endpoints", "app", heldApp, "-o", "json")), &eps))
	ready, all := map[string]int{}, map[string]int{}
	var notReady []string
	for _, e := range eps.Endpoints {
		all[e.Zone]++
		if e.Ready {
			ready[e.Zone]++
		} else {
			notReady = append(notReady, e.Pod)
		}
	}
	out := map[string]string{}
	for z, n := range all {
		out[z] = fmt.Sprintf("%d/%d", ready[z], n)
	}
	slices.Sort(notReady)
	return out, notReady
}

// TestReadinessGatesTheRollout: an App over zones a, b, c rolls out a
// template whose pods zone a's KWOK holds not ready (a readiness probe
// that does not pass). Zone a starts and stays Updating: for longer than
// its bake plus two of the controller's ticks, the rollout neither bakes
// nor starts zone b (its status and events say so), zones b and c keep
// the old template, the App's ready count drops to 5 of 6 (zone a: the
// one old pod its budget keeps), and the endpoints list the held pods as
// not ready. Once the held pods are made ready, the rollout finishes zone
// by zone and every endpoint is ready.
func TestReadinessGatesTheRollout(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	began := time.Now()
	key := api.Key(project, api.KindApp, heldApp)
	log := &eventLog{}
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(project, api.KindApp, heldApp, "*"), log.add)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	t.Cleanup(func() { _ = cl.Delete(context.Background(), project, api.KindApp, heldApp) })

	_, err = cl.Submit(ctx, heldDoc("web:v1", false))
	require.NoError(t, err)
	waitRollout(t, key, "Complete a=Done b=Done c=Done", 60*time.Second)
	waitReady(t, key, 6)
	t.Logf("v1 running, 6 of 6 ready, after %v", time.Since(began).Round(time.Millisecond))

	// v2: zone a starts; its new pods run but are held not ready.
	t0 := time.Now()
	_, err = cl.Update(ctx, heldDoc("web:v2", true))
	require.NoError(t, err)
	var held []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := readRollout(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, r) {
			return
		}
		assert.Equal(ct, "Progressing a=Updating b=Pending c=Pending", rolloutState(r))
		pods, err := heldPods(ctx, "a")
		if !assert.NoError(ct, err) {
			return
		}
		held = held[:0]
		for _, p := range pods {
			if p.Spec.Containers[0].Image == "web:v2" && p.Status.Phase == corev1.PodRunning && !isReady(&p) {
				held = append(held, p.Name)
			}
		}
		assert.Len(ct, held, 2, "zone a's new pods running, not ready")
		st, err := cl.Status(ctx, key)
		if assert.NoError(ct, err) && assert.NotNil(ct, st) {
			assert.Equal(ct, int32(5), st.Ready, "the App's ready count")
			assert.Equal(ct, int32(1), st.Zones["a"].Ready, "zone a's ready count")
		}
		counts, notReady := endpointCounts(t, ct)
		assert.Equal(ct, map[string]string{"a": "1/3", "b": "2/2", "c": "2/2"}, counts, "endpoints per zone, ready/all")
		assert.Equal(ct, slices.Sorted(slices.Values(held)), notReady, "the endpoints not ready")
	}, 60*time.Second, 250*time.Millisecond, "zone a updating with its new pods held not ready")
	heldAt := time.Now()
	t.Logf("zone a's new pods %v held not ready %v after the change; the App 5 of 6 ready, zone a's endpoints 1 of 3 ready",
		held, heldAt.Sub(t0).Round(time.Millisecond))

	// For longer than the bake plus two ticks of the rollout controller,
	// nothing advances: were readiness not the gate, zone a would be done
	// and zone b started by now.
	hold := heldBake + 2*aggregator.DefaultRolloutTick + time.Second
	samples := 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for ; time.Since(heldAt) < hold; <-tick.C {
		r, err := readRollout(ctx, key)
		require.NoError(t, err)
		require.Equal(t, "Progressing a=Updating b=Pending c=Pending", rolloutState(r), "%v into the hold", time.Since(heldAt).Round(time.Millisecond))
		require.True(t, r.Zones[0].AvailableSince.IsZero(), "zone a counted available")
		require.Equal(t, []string{"rollout-zone-started:a"}, names(log.rollout(t0)))
		for _, z := range []string{"b", "c"} {
			img, err := deploymentImage(ctx, z)
			require.NoError(t, err)
			require.Equal(t, "web:v1", img, "zone %s's Deployment", z)
		}
		st, err := cl.Status(ctx, key)
		require.NoError(t, err)
		require.Equal(t, int32(5), st.Ready, "the App's ready count")
		samples++
	}
	t.Logf("held %v (bake %v + 2 ticks of %v + 1s): %d samples, the rollout stayed on zone a", hold, heldBake, aggregator.DefaultRolloutTick, samples)

	// Release: zone a's held pods turn ready (as a readiness probe that
	// starts passing); the rollout goes on through b and c.
	released := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pods, err := heldPods(ctx, "a")
		if !assert.NoError(ct, err) {
			return
		}
		for _, p := range pods {
			if p.Labels[readinessLabel] == "hold" {
				_, err := reg.Env.Cluster(zoneCluster("a")).Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType,
					fmt.Appendf(nil, `{"metadata":{"labels":{%q:"release"}}}`, readinessLabel), metav1.PatchOptions{})
				assert.NoError(ct, err)
			}
		}
		r, err := readRollout(ctx, key)
		if assert.NoError(ct, err) && assert.NotNil(ct, r) {
			assert.Equal(ct, "Complete a=Done b=Done c=Done", rolloutState(r))
		}
	}, 90*time.Second, 250*time.Millisecond, "the rollout finishes once zone a's pods are ready")
	t.Logf("released: the rollout completed %v later", time.Since(released).Round(time.Millisecond))
	// The last zone's done event is published as the rollout completes:
	// it reaches the log a moment after the state can be read.
	want := []string{"rollout-zone-started:a", "rollout-zone-done:a", "rollout-zone-started:b", "rollout-zone-done:b",
		"rollout-zone-started:c", "rollout-zone-done:c"}
	var evs []api.WorkloadEvent
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		evs = log.rollout(t0)
		assert.Equal(ct, want, names(evs))
	}, 10*time.Second, 100*time.Millisecond, "the rollout's events")
	for _, ev := range evs {
		t.Logf("%-22s zone %s at +%v", ev.Event, zoneOf(ev), ev.Time.Sub(t0).Round(time.Millisecond))
	}
	if len(evs) > 1 {
		assert.False(t, evs[1].Time.Before(released), "zone a done before its pods were ready")
	}
	waitReady(t, key, 6)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		counts, notReady := endpointCounts(t, ct)
		assert.Equal(ct, map[string]string{"a": "2/2", "b": "2/2", "c": "2/2"}, counts)
		assert.Empty(ct, notReady)
	}, 30*time.Second, 250*time.Millisecond, "every endpoint ready")
	t.Logf("the readiness test took %v", time.Since(began).Round(time.Millisecond))
}

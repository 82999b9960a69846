package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
)

const (
	project, name = "rollout", "web"
	failLabel     = "pod-container-running-failed.stage.kwok.x-k8s.io"
	bake          = 5 * time.Second
)

// appDoc is the App: 2 replicas per zone, a budget of one unavailable
// replica per shard, a 5 s bake and a 45 s deadline per zone. fail adds
// the label zone b's failure stage acts on to the pod template.
func appDoc(replicas int, image string, fail bool) []byte {
	labels := ""
	if fail {
		labels = fmt.Sprintf(`,"labels":{%q:"true"}`, failLabel)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"availability":{"maxUnavailable":"1"},
"rollout":{"bakeSeconds":%d,"deadlineSeconds":45,"onFailure":"Pause"},
"template":{"containers":[{"name":"web","image":%q,"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]%s}}}`,
		project, name, replicas, int(bake/time.Second), image, labels))
}

// eventLog records the App's events as they arrive.
type eventLog struct {
	mu  sync.Mutex
	evs []api.WorkloadEvent
}

func (l *eventLog) add(m *nats.Msg) {
	var ev api.WorkloadEvent
	if json.Unmarshal(m.Data, &ev) == nil {
		l.mu.Lock()
		l.evs = append(l.evs, ev)
		l.mu.Unlock()
	}
}

// rollout returns the rollout events since from, as "event:zone".
func (l *eventLog) rollout(from time.Time) []api.WorkloadEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.WorkloadEvent
	for _, ev := range l.evs {
		if strings.HasPrefix(ev.Event, "rollout-") && !ev.Time.Before(from) {
			out = append(out, ev)
		}
	}
	return out
}

// zoneOf reads the zone from a rollout event's message ("zone a: ...").
func zoneOf(ev api.WorkloadEvent) string {
	if z, ok := strings.CutPrefix(ev.Message, "zone "); ok {
		return strings.SplitN(z, ":", 2)[0]
	}
	return ""
}

func names(evs []api.WorkloadEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Event+":"+zoneOf(ev))
	}
	return out
}

// budgetSampler reads the App's status every 200 ms and records every
// sample where a zone (one shard each here) had fewer ready replicas than
// the budget allows: one unavailable replica. Replicas a scale adds count
// once the zone was fully ready at the new size (a pod not started yet is
// not a disruption): the floor is min(desired, the last size the zone was
// fully ready at) - 1.
type budgetSampler struct {
	mu         sync.Mutex
	samples    int
	minTotal   int32
	full       map[string]int32 // the last desired count each zone had all ready
	violations []string
}

func (b *budgetSampler) run(ctx context.Context, key string) {
	b.minTotal, b.full = 1<<30, map[string]int32{}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := cl.Status(ctx, key)
		if err != nil || st == nil {
			continue
		}
		b.mu.Lock()
		b.samples++
		b.minTotal = min(b.minTotal, st.Ready)
		for z, zs := range st.Zones {
			if zs.Ready >= zs.Desired {
				b.full[z] = zs.Desired
			}
			if floor := min(zs.Desired, b.full[z]) - 1; zs.Ready < floor {
				b.violations = append(b.violations, fmt.Sprintf("%s zone %s: %d ready of %d (floor %d)", time.Now().Format(time.StampMilli), z, zs.Ready, zs.Desired, floor))
			}
		}
		b.mu.Unlock()
	}
}

func readRollout(ctx context.Context, key string) (*api.Rollout, error) {
	kv, err := reg.Bus.KV(ctx, bus.BucketRollouts)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r api.Rollout
	return &r, json.Unmarshal(e.Value(), &r)
}

// waitRollout waits until the rollout's phase and zone states are want
// ("Paused a=Done b=Failed c=Pending").
func waitRollout(t *testing.T, key, want string, within time.Duration) *api.Rollout {
	t.Helper()
	var r *api.Rollout
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		r, err = readRollout(context.Background(), key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, r, "no rollout yet") {
			return
		}
		got := []string{r.Phase}
		for _, z := range r.Zones {
			got = append(got, z.Zone+"="+z.State)
		}
		assert.Equal(ct, want, strings.Join(got, " "), "message %q", r.Message)
	}, within, 200*time.Millisecond)
	return r
}

// images returns the image of zone's Deployment and those of its Running pods.
func images(zone string) (spec string, running []string, err error) {
	ctx := context.Background()
	for _, c := range reg.Env.Clusters {
		if c.Zone != zone {
			continue
		}
		d, err := c.Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", nil, err
		}
		pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		if err != nil {
			return "", nil, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" && p.DeletionTimestamp == nil {
				running = append(running, p.Spec.Containers[0].Image)
			}
		}
		slices.Sort(running)
		return d.Spec.Template.Spec.Containers[0].Image, running, nil
	}
	return "", nil, fmt.Errorf("no cluster in zone %s", zone)
}

// waitImages waits until zone's Deployment and its Running pods all have image, n of them.
func waitImages(t *testing.T, zone, image string, n int) {
	t.Helper()
	want := slices.Repeat([]string{image}, n)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		spec, running, err := images(zone)
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, image, spec, "zone %s deployment image", zone)
		assert.Equal(ct, want, running, "zone %s running pods' images", zone)
	}, 60*time.Second, 250*time.Millisecond)
}

// waitReady waits until the App is Running with every replica ready.
func waitReady(t *testing.T, key string, n int32) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(context.Background(), key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) {
			return
		}
		assert.Equal(ct, api.PhaseRunning, st.Phase)
		assert.Equal(ct, n, st.Ready)
	}, 60*time.Second, 250*time.Millisecond)
}

// atoll runs the CLI in process against the region's gateway.
func atoll(t *testing.T, args ...string) string {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--config", filepath.Join(t.TempDir(), "config.yaml"),
		"--server", reg.GatewayURL, "--token", reg.AdminToken, "-p", project}, args...))
	require.NoError(t, root.Execute(), "atoll %s: %s", strings.Join(args, " "), errOut.String())
	return out.String()
}

// TestZoneByZoneRollout rolls a template out over zones a, b, c whose
// new pods fail in zone b: zone a updates and bakes, zone b starts only
// after zone a is done, fails and pauses the rollout, zone c is never
// touched; undo brings zones a and b back to the old image. A second
// template then rolls out over all three zones while the App is scaled
// from 6 to 9 replicas, ending balanced 3/3/3. A sampler checks the
// availability budget (one unavailable replica per shard) the whole time.
func TestZoneByZoneRollout(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := api.Key(project, api.KindApp, name)
	log := &eventLog{}
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(project, api.KindApp, name, "*"), log.add)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()

	_, err = cl.Submit(ctx, appDoc(6, "web:v1", false))
	require.NoError(t, err)
	waitRollout(t, key, "Complete a=Done b=Done c=Done", 90*time.Second)
	for _, z := range []string{"a", "b", "c"} {
		waitImages(t, z, "web:v1", 2)
	}
	waitReady(t, key, 6)
	budget := &budgetSampler{}
	sampled := make(chan struct{})
	sctx, stopSampling := context.WithCancel(ctx)
	go func() { defer close(sampled); budget.run(sctx, key) }()

	// v2 carries the label zone b's failure stage fails pods on.
	t0 := time.Now()
	_, err = cl.Update(ctx, appDoc(6, "web:v2", true))
	require.NoError(t, err)
	paused := waitRollout(t, key, "Paused a=Done b=Failed c=Pending", 120*time.Second)
	t.Logf("paused %v after the change: %s", time.Since(t0).Round(time.Millisecond), paused.Message)
	var evs []api.WorkloadEvent
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		evs = log.rollout(t0)
		assert.Equal(ct, []string{"rollout-zone-started:a", "rollout-zone-done:a", "rollout-zone-started:b", "rollout-paused:b"}, names(evs))
	}, 10*time.Second, 100*time.Millisecond)
	for i, ev := range evs {
		t.Logf("%-22s zone %s at +%v", ev.Event, zoneOf(ev), ev.Time.Sub(t0).Round(time.Millisecond))
		if i > 0 {
			assert.False(t, ev.Time.Before(evs[i-1].Time), "%s before %s", ev.Event, evs[i-1].Event)
		}
	}
	assert.GreaterOrEqual(t, evs[1].Time.Sub(evs[0].Time), bake, "zone a done before its bake")
	waitImages(t, "a", "web:v2", 2)
	spec, running, err := images("c")
	require.NoError(t, err)
	assert.Equal(t, "web:v1", spec, "zone c never started")
	assert.Equal(t, []string{"web:v1", "web:v1"}, running)
	assert.Contains(t, atoll(t, "rollout", "status", name), "Paused")

	// undo: every zone back on v1.
	tUndo := time.Now()
	atoll(t, "rollout", "undo", name)
	waitRollout(t, key, "RolledBack a=RolledBack b=RolledBack c=Pending", 30*time.Second)
	waitImages(t, "a", "web:v1", 2)
	waitImages(t, "b", "web:v1", 2)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, []string{"rollout-rolled-back:"}, names(log.rollout(tUndo)))
	}, 10*time.Second, 100*time.Millisecond)
	t.Logf("undo: zones a and b back on web:v1 %v after the request", time.Since(tUndo).Round(time.Millisecond))

	// v3 rolls out everywhere; the App is scaled to 9 once zone a started.
	t3 := time.Now()
	_, err = cl.Update(ctx, appDoc(6, "web:v3", false))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, names(log.rollout(t3)), "rollout-zone-started:a")
	}, 30*time.Second, 100*time.Millisecond)
	nine := int32(9)
	_, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindApp, Name: name, Op: api.OpScale, Replicas: &nine})
	require.NoError(t, err)
	waitRollout(t, key, "Complete a=Done b=Done c=Done", 150*time.Second)
	for _, z := range []string{"a", "b", "c"} {
		waitImages(t, z, "web:v3", 3)
	}
	evs = log.rollout(t3)
	assert.Equal(t, []string{"rollout-zone-started:a", "rollout-zone-done:a", "rollout-zone-started:b", "rollout-zone-done:b",
		"rollout-zone-started:c", "rollout-zone-done:c"}, names(evs))
	for _, ev := range evs {
		t.Logf("v3 %-22s zone %s at +%v", ev.Event, zoneOf(ev), ev.Time.Sub(t3).Round(time.Millisecond))
	}

	stopSampling()
	<-sampled
	budget.mu.Lock()
	defer budget.mu.Unlock()
	t.Logf("budget: %d status samples, fewest ready in total %d", budget.samples, budget.minTotal)
	assert.Greater(t, budget.samples, 50)
	assert.Empty(t, budget.violations, "a zone below its budget (desired - 1 ready)")
}

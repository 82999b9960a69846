package autoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeAdmission answers atoll.req.admission.autoscale as admission does for
// a scale: it writes the App's new replicas (a new generation) to the
// workloads bucket, or refuses above limit with a QuotaExceeded body. It
// stands in for admission and quota, which have their own tests; the
// region test (services/atoll/e2e/autoscale) runs the real ones.
type fakeAdmission struct {
	kv    jetstream.KeyValue
	limit int32 // replicas allowed per App; 0: no limit

	mu       sync.Mutex
	requests map[string]time.Time // App key -> when its last scale request arrived
	count    int
}

func startAdmission(t testing.TB, b *bus.Bus, kv jetstream.KeyValue, limit int32) *fakeAdmission {
	f := &fakeAdmission{kv: kv, limit: limit, requests: map[string]time.Time{}}
	sub, err := b.NC.QueueSubscribe(bus.AdmissionAutoscale.Subject(), "admission", f.serve)
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return f
}

func (f *fakeAdmission) serve(m *nats.Msg) {
	now := time.Now()
	var op api.Operation
	if err := json.Unmarshal(m.Data, &op); err != nil || op.Op != api.OpScale || op.Replicas == nil {
		f.fail(m, 400, api.ErrorBody{Code: "Invalid", Message: "bad operation"})
		return
	}
	key := api.Key(op.Project, op.Kind, op.Name)
	f.mu.Lock()
	f.requests[key] = now
	f.count++
	f.mu.Unlock()
	if f.limit > 0 && *op.Replicas > f.limit {
		f.fail(m, 409, api.ErrorBody{Code: "QuotaExceeded", Message: fmt.Sprintf("project %s: OnDemand pods over quota", op.Project),
			Quota: &api.QuotaRejection{Project: op.Project, Tier: api.TierOnDemand, Resource: "pods", Limit: int64(f.limit), Used: 3, Requested: int64(*op.Replicas)}})
		return
	}
	ctx := context.Background()
	_, err := bus.Update(ctx, f.kv, key, func(cur []byte, exists bool) ([]byte, error) {
		w, err := api.Decode(cur)
		if err != nil {
			return nil, err
		}
		w.Spec.(*api.AppSpec).Replicas = op.Replicas
		w.Metadata.Generation++
		return json.Marshal(w)
	})
	if err != nil {
		f.fail(m, 500, api.ErrorBody{Code: "Unavailable", Message: err.Error()})
		return
	}
	_ = m.Respond([]byte(`{}`))
}

func (f *fakeAdmission) fail(m *nats.Msg, code int, body api.ErrorBody) {
	b, _ := json.Marshal(body)
	r := nats.NewMsg(m.Reply)
	r.Data = b
	r.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(code))
	r.Header.Set(micro.ErrorHeader, body.Message)
	_ = m.RespondMsg(r)
}

func (f *fakeAdmission) requested(key string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.requests[key]
	return at, ok
}

type fixture struct {
	b         *bus.Bus
	workloads jetstream.KeyValue
	adm       *fakeAdmission
	svc       *Service
}

func newFixture(t testing.TB, limit int32, cfg Config) *fixture {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name(), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	f := &fixture{b: b, workloads: kv, adm: startAdmission(t, b, kv, limit)}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = 500 * time.Millisecond
	}
	f.svc = New(b, quiet, &cfg)
	return f
}

func (f *fixture) start(t testing.TB) {
	require.NoError(t, f.svc.Start(context.Background()))
	t.Cleanup(f.svc.Stop)
	require.Eventually(t, f.svc.Leading, 20*time.Second, 50*time.Millisecond)
}

func (f *fixture) put(t testing.TB, w *api.Workload) {
	w.APIVersion = api.APIVersion
	if w.Metadata.Generation == 0 {
		w.Metadata.Generation = 1
	}
	w.Spec.Default()
	require.Empty(t, api.Validate(w))
	b, err := json.Marshal(w)
	require.NoError(t, err)
	_, err = f.workloads.Put(context.Background(), w.Key(), b)
	require.NoError(t, err)
}

func app(project, name string, replicas int32) *api.Workload {
	return &api.Workload{Kind: api.KindApp, Metadata: api.Metadata{Project: project, Name: name},
		Spec: &api.AppSpec{Replicas: &replicas, Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "c", Image: "img",
			Resources: api.Resources{Requests: api.ResourceList{CPU: "100m", Memory: "64Mi"}}}}}}}}
}

func scaler(project, name, target string, lo, hi int32, mut ...func(*api.ScalerSpec)) *api.Workload {
	// Scale-up by up to 10 pods per 15 s: one step from 3 to 9 (the
	// default, max(4 pods, 100%), takes two, 15 s apart).
	s := &api.ScalerSpec{Target: target, MinReplicas: &lo, MaxReplicas: hi,
		Metrics:  []api.ScalerMetric{{Type: api.MetricCPU, TargetUtilization: 50}},
		Behavior: api.ScalerBehavior{ScaleUp: &api.ScalingRules{Policies: []api.RatePolicy{{Type: api.RatePods, Value: 10, PeriodSeconds: 15}}}}}
	for _, m := range mut {
		m(s)
	}
	return &api.Workload{Kind: api.KindScaler, Metadata: api.Metadata{Project: project, Name: name}, Spec: s}
}

func (f *fixture) publish(t testing.TB, project, app, metric string, v float64, pods int32) {
	b, err := json.Marshal(api.MetricSample{Value: v, Pods: pods, At: time.Now()})
	require.NoError(t, err)
	require.NoError(t, f.b.NC.Publish(bus.MetricsSubject(project, app, metric), b))
}

func (f *fixture) replicas(t testing.TB, project, name string) int32 {
	e, err := f.workloads.Get(context.Background(), api.Key(project, api.KindApp, name))
	require.NoError(t, err)
	w, err := api.Decode(e.Value())
	require.NoError(t, err)
	return w.Spec.Pods()
}

func (f *fixture) state(t testing.TB, key string) State {
	kv, err := f.b.KV(context.Background(), bus.BucketScalers)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), key)
	require.NoError(t, err)
	var st State
	require.NoError(t, json.Unmarshal(e.Value(), &st))
	return st
}

// lastEvent returns the last event of a Scaler on the events stream.
func (f *fixture) lastEvent(t testing.TB, project, name, event string) (api.WorkloadEvent, bool) {
	js, err := jetstream.New(f.b.NC)
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), bus.StreamEvents)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), bus.EventSubject(project, api.KindScaler, name, event))
	if err != nil {
		return api.WorkloadEvent{}, false
	}
	var ev api.WorkloadEvent
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	return ev, true
}

// TestScalesThroughAdmission: a sample at 150% of a 50% target scales an
// App of 3 to 9 through the scale operation; the Scaler's scaled event
// and its stored decision carry the reason.
func TestScalesThroughAdmission(t *testing.T) {
	f := newFixture(t, 0, Config{})
	f.put(t, app("p", "web", 3))
	f.put(t, scaler("p", "web", "web", 3, 12))
	f.start(t)
	f.publish(t, "p", "web", "cpu", 150, 3)
	require.Eventually(t, func() bool { return f.replicas(t, "p", "web") == 9 }, 10*time.Second, 20*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev, ok := f.lastEvent(t, "p", "web", api.EventScaled)
		if assert.True(c, ok, "no scaled event") {
			assert.Contains(c, ev.Message, "web 3 -> 9")
			assert.Contains(c, ev.Message, "metric cpu 150 of target 50")
		}
	}, 10*time.Second, 50*time.Millisecond)
	st := f.state(t, api.Key("p", api.KindScaler, "web"))
	var scaled *Record
	for i := range st.Decisions {
		if st.Decisions[i].Outcome == OutcomeScaled {
			scaled = &st.Decisions[i]
		}
	}
	require.NotNil(t, scaled, "decisions %+v", st.Decisions)
	assert.Equal(t, int32(3), scaled.Current)
	assert.Equal(t, int32(9), scaled.Desired)
	require.Len(t, scaled.Proposals, 1)
	assert.Equal(t, 150.0, scaled.Proposals[0].Value)
	assert.Len(t, st.History.Changes, 1)
}

// TestRefusedWithTheQuotaReason: admission's refusal is recorded and
// announced with its reason; the replicas do not change.
func TestRefusedWithTheQuotaReason(t *testing.T) {
	f := newFixture(t, 5, Config{})
	f.put(t, app("p", "web", 3))
	f.put(t, scaler("p", "web", "web", 1, 12))
	f.start(t)
	f.publish(t, "p", "web", "cpu", 150, 3)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev, ok := f.lastEvent(t, "p", "web", api.EventScaleRefused)
		if assert.True(c, ok, "no refusal event") {
			assert.Contains(c, ev.Message, "QuotaExceeded")
			assert.Contains(c, ev.Message, "pods: limit 5")
		}
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, int32(3), f.replicas(t, "p", "web"))
	st := f.state(t, api.Key("p", api.KindScaler, "web"))
	assert.Equal(t, OutcomeRefused, st.Decisions[len(st.Decisions)-1].Outcome)
	assert.Empty(t, st.History.Changes, "a refused scale is not a change")
}

// TestHoldsWithoutMetrics: when the samples stop, the metric fails and
// holds the replicas even though its last value asked for fewer.
func TestHoldsWithoutMetrics(t *testing.T) {
	f := newFixture(t, 0, Config{})
	f.put(t, app("p", "web", 6))
	f.put(t, scaler("p", "web", "web", 1, 12, func(s *api.ScalerSpec) {
		s.Metrics[0].OnFailure = &api.FailurePolicy{Action: api.FailureHold, AfterSeconds: 1}
		s.Behavior.ScaleDown = &api.ScalingRules{StabilizationWindowSeconds: new(int32)}
	}))
	f.start(t)
	// An old sample (2 s ago) at 10%: stale before it arrives.
	b, _ := json.Marshal(api.MetricSample{Value: 10, Pods: 6, At: time.Now().Add(-2 * time.Second)})
	require.NoError(t, f.b.NC.Publish(bus.MetricsSubject("p", "web", "cpu"), b))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		kv, err := f.b.KV(context.Background(), bus.BucketScalers)
		require.NoError(c, err)
		e, err := kv.Get(context.Background(), api.Key("p", api.KindScaler, "web"))
		if !assert.NoError(c, err) {
			return
		}
		var st State
		require.NoError(c, json.Unmarshal(e.Value(), &st))
		last := st.Decisions[len(st.Decisions)-1]
		if assert.Len(c, last.Proposals, 1) {
			assert.Equal(c, "failed-hold", last.Proposals[0].State)
			assert.Equal(c, 10.0, f.svc.Samples("p", "web")["cpu"].Value)
		}
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, int32(6), f.replicas(t, "p", "web"))
}

// TestTakeoverKeepsTheWindow: a new term starts from the stored history,
// so a scale-down still waits for the down window after a takeover.
func TestTakeoverKeepsTheWindow(t *testing.T) {
	f := newFixture(t, 0, Config{})
	f.put(t, app("p", "web", 3))
	f.put(t, scaler("p", "web", "web", 3, 12, func(s *api.ScalerSpec) {
		w := int32(600)
		s.Behavior.ScaleDown = &api.ScalingRules{StabilizationWindowSeconds: &w}
	}))
	f.start(t)
	f.publish(t, "p", "web", "cpu", 150, 3)
	require.Eventually(t, func() bool { return f.replicas(t, "p", "web") == 9 }, 10*time.Second, 20*time.Millisecond)
	f.svc.Stop()

	second := New(f.b, quiet, &Config{SyncPeriod: 200 * time.Millisecond})
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(second.Stop)
	require.Eventually(t, second.Leading, 20*time.Second, 50*time.Millisecond)
	f.publish(t, "p", "web", "cpu", 5, 9)
	require.Eventually(t, func() bool { return second.Evaluations() >= 3 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, int32(9), f.replicas(t, "p", "web"), "scaled down inside the down window after a takeover")
}

func TestRefusalMessage(t *testing.T) {
	body, _ := json.Marshal(api.ErrorBody{Code: "QuotaExceeded", Message: "over", Quota: &api.QuotaRejection{Tier: api.TierOnDemand, Resource: "cpu", Limit: 4000, Used: 3000, Requested: 2000}})
	got := refusalMessage(&bus.RemoteError{Code: 409, Body: body})
	if !strings.Contains(got, "QuotaExceeded: over (OnDemand cpu: limit 4000, used 3000, requested 2000)") {
		t.Errorf("message %q", got)
	}
	if got := refusalMessage(&bus.RemoteError{Code: 404, Description: "gone"}); got != "Not Found: gone" {
		t.Errorf("message %q", got)
	}
}

// TestCombineClusterParts: the parts of an App in several clusters add up
// by usage and requests; a part older than PartWindow drops out; a whole
// sample newer than the parts wins.
func TestCombineClusterParts(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	as := &appSamples{parts: map[string]map[string]api.MetricSample{
		"cpu": {
			"a": {Cluster: "a", Usage: 300, Requests: 200, Pods: 2, At: at},
			"b": {Cluster: "b", Usage: 100, Requests: 100, Pods: 1, At: at.Add(-10 * time.Second)},
			"c": {Cluster: "c", Usage: 900, Requests: 100, Pods: 1, At: at.Add(-time.Minute)},
		},
		"qps": {"": {Value: 42, At: at}},
	}}
	got := as.combine()
	assert.InDelta(t, 100*400.0/300, got["cpu"].Value, 1e-9)
	assert.Equal(t, int32(3), got["cpu"].Pods)
	assert.Equal(t, at, got["cpu"].At)
	assert.Equal(t, 42.0, got["qps"].Value)
}

// TestOneScalerPerApp: a second Scaler of the same App does not act; its
// decisions say which Scaler does.
func TestOneScalerPerApp(t *testing.T) {
	f := newFixture(t, 0, Config{})
	f.put(t, app("p", "web", 3))
	f.put(t, scaler("p", "a-first", "web", 3, 12))
	f.put(t, scaler("p", "b-second", "web", 1, 2))
	f.start(t)
	f.publish(t, "p", "web", "cpu", 150, 3)
	require.Eventually(t, func() bool { return f.replicas(t, "p", "web") == 9 }, 10*time.Second, 20*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		kv, err := f.b.KV(context.Background(), bus.BucketScalers)
		require.NoError(c, err)
		e, err := kv.Get(context.Background(), api.Key("p", api.KindScaler, "b-second"))
		if !assert.NoError(c, err) {
			return
		}
		var st State
		require.NoError(c, json.Unmarshal(e.Value(), &st))
		last := st.Decisions[len(st.Decisions)-1]
		assert.Equal(c, OutcomeSkipped, last.Outcome)
		assert.Contains(c, last.Detail, "p.scaler.a-first")
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, int32(9), f.replicas(t, "p", "web"), "the second Scaler (max 2) did not act")
}

// TestPausedScalerDoesNotAct: a paused Scaler leaves its App alone.
func TestPausedScalerDoesNotAct(t *testing.T) {
	f := newFixture(t, 0, Config{})
	f.put(t, app("p", "web", 3))
	s := scaler("p", "web", "web", 3, 12)
	s.Control.Paused = true
	f.put(t, s)
	f.start(t)
	f.publish(t, "p", "web", "cpu", 150, 3)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		kv, err := f.b.KV(context.Background(), bus.BucketScalers)
		require.NoError(c, err)
		e, err := kv.Get(context.Background(), api.Key("p", api.KindScaler, "web"))
		if !assert.NoError(c, err) {
			return
		}
		var st State
		require.NoError(c, json.Unmarshal(e.Value(), &st))
		assert.Equal(c, OutcomeSkipped, st.Decisions[len(st.Decisions)-1].Outcome)
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, int32(3), f.replicas(t, "p", "web"))
}

// TestNoBounceAfterAScaleDown: right after a scale-down from 9 to 3 the
// status still counts the 9 pods ready and the last sample measured 7 of
// them; pods beyond the replicas are not counted as missing measurements
// (which, at 100% each, would ask to scale back up).
func TestNoBounceAfterAScaleDown(t *testing.T) {
	f := newFixture(t, 0, Config{})
	w := app("p", "web", 3)
	w.Metadata.Generation = 4
	f.put(t, w)
	f.put(t, scaler("p", "web", "web", 3, 12))
	st, _ := json.Marshal(api.Status{Key: w.Key(), Generation: 4, Phase: api.PhaseRunning, Desired: 3, Ready: 9})
	skv, err := f.b.KV(context.Background(), bus.BucketStatus)
	require.NoError(t, err)
	_, err = skv.Put(context.Background(), w.Key(), st)
	require.NoError(t, err)
	f.start(t)
	f.publish(t, "p", "web", "cpu", 1, 7)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		kv, err := f.b.KV(context.Background(), bus.BucketScalers)
		require.NoError(c, err)
		e, err := kv.Get(context.Background(), api.Key("p", api.KindScaler, "web"))
		if !assert.NoError(c, err) {
			return
		}
		var st State
		require.NoError(c, json.Unmarshal(e.Value(), &st))
		last := st.Decisions[len(st.Decisions)-1]
		if assert.Len(c, last.Proposals, 1) {
			assert.Equal(c, 1.0, last.Proposals[0].Value)
			assert.Equal(c, int32(3), last.Ready)
			assert.Equal(c, int32(3), last.Desired)
		}
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, int32(3), f.replicas(t, "p", "web"))
}

// TestMirrorsOnlyTheScalersApps: among 200 Apps the autoscaler holds the
// one a Scaler names (and, once a second Scaler names another, that one
// too; once the first names a third instead, the second and the third;
// once both are deleted, none), reads an App it does not hold from the
// bucket, and scales the App a new Scaler names.
func TestMirrorsOnlyTheScalersApps(t *testing.T) {
	f := newFixture(t, 0, Config{})
	for i := range 200 {
		f.put(t, app("p", fmt.Sprintf("a%d", i), 3))
	}
	f.put(t, scaler("p", "s1", "a1", 3, 12))
	f.start(t)
	held := func() []string {
		keys := f.svc.appM.Keys()
		slices.Sort(keys)
		return keys
	}
	require.Eventually(t, func() bool { return f.svc.appM.Covered(api.Key("p", api.KindApp, "a1")) }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"p.app.a1"}, held())

	ctx := t.Context()
	v, skip, err := f.svc.target(ctx, api.Key("p", api.KindApp, "a7"))
	assert.False(t, f.svc.appM.Covered(api.Key("p", api.KindApp, "a7")))
	assert.NoError(t, err)
	assert.Empty(t, skip, "an App not held is read from the bucket")
	assert.Equal(t, int32(3), v.Pods)
	_, skip, err = f.svc.target(ctx, api.Key("p", api.KindApp, "none"))
	assert.NoError(t, err)
	assert.Contains(t, skip, "does not exist")

	f.put(t, scaler("p", "s2", "a5", 3, 12))
	f.publish(t, "p", "a5", "cpu", 150, 3)
	require.Eventually(t, func() bool { return f.replicas(t, "p", "a5") == 9 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return slices.Equal(held(), []string{"p.app.a1", "p.app.a5"}) }, 10*time.Second, 10*time.Millisecond)

	// A Scaler pointed at another App: the first is dropped, the other held.
	f.put(t, scaler("p", "s1", "a9", 3, 12))
	require.Eventually(t, func() bool { return slices.Equal(held(), []string{"p.app.a5", "p.app.a9"}) }, 10*time.Second, 10*time.Millisecond)

	for _, s := range []string{"s1", "s2"} {
		require.NoError(t, f.workloads.Delete(ctx, api.Key("p", api.KindScaler, s)))
	}
	require.Eventually(t, func() bool { return len(held()) == 0 }, 10*time.Second, 10*time.Millisecond)
}

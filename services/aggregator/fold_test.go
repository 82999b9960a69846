package aggregator

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestUnknownKindDoesNotPanic folds a workload of a kind without a folder.
func TestUnknownKindDoesNotPanic(t *testing.T) {
	three := int32(3)
	w := &api.Workload{Kind: "Widget", Metadata: api.Metadata{Project: "p", Name: "w", Generation: 1},
		Spec: &api.AppSpec{Replicas: &three}}
	st := api.Status{Key: "p.widget.w", Phase: api.PhasePending}
	require.NotPanics(t, func() {
		foldShards(newKinds(), w, []shardView{{cluster: "zone-a", zone: "a", healthy: true, desired: 3}}, &st, discard)
	})
	assert.Equal(t, api.PhasePending, st.Phase)
	require.NotEmpty(t, st.Conditions)
	assert.Equal(t, "UnsupportedKind", st.Conditions[0].Reason)

	// A JobSet whose spec is of another type is reported, not a panic.
	w = &api.Workload{Kind: api.KindJobSet, Metadata: api.Metadata{Project: "p", Name: "j", Generation: 1}, Spec: &api.AppSpec{}}
	st = api.Status{Phase: api.PhasePending}
	require.NotPanics(t, func() { foldShards(newKinds(), w, nil, &st, discard) })
	assert.Equal(t, "InvalidSpec", st.Conditions[0].Reason)
}

func app(replicas int32, paused bool) *api.Workload {
	return &api.Workload{Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web", Generation: 2},
		Spec: &api.AppSpec{Replicas: &replicas}, Control: api.Control{Paused: paused}}
}

func jobSet(completions int32, paused bool) *api.Workload {
	return &api.Workload{Kind: api.KindJobSet, Metadata: api.Metadata{Project: "p", Name: "batch", Generation: 2},
		Spec: &api.JobSetSpec{Completions: completions, Parallelism: completions}, Control: api.Control{Paused: paused}}
}

func pod() *api.Workload {
	return &api.Workload{Kind: api.KindPod, Metadata: api.Metadata{Project: "p", Name: "nb", Generation: 2}, Spec: &api.PodSpec{}}
}

// rolled is a shard whose Deployment of generation 2 has n replicas, all
// available, and n ready pods.
func rolled(cluster string, n int32) shardView {
	return shardView{cluster: cluster, zone: cluster, healthy: true, desired: n, obs: observation{
		Pods: n, Running: n, Ready: n, Images: []string{"nginx:1"},
		Part: &appPart{Deployment: &deploymentObservation{Generation: 2, Observed: true, Replicas: n, Updated: n, Available: n}},
	}}
}

func TestFoldShards(t *testing.T) {
	partial := rolled("b", 2)
	partial.obs.Ready, partOf[appPart](partial.obs).Deployment.Available = 1, 1
	oldGen := rolled("b", 2)
	partOf[appPart](oldGen.obs).Deployment.Generation = 1
	sick := rolled("b", 2)
	sick.healthy = false
	empty := shardView{cluster: "b", zone: "b", healthy: true, desired: 2}
	pausedDone := shardView{cluster: "a", zone: "a", healthy: true, obs: observation{
		Part: &appPart{Deployment: &deploymentObservation{Generation: 2, Observed: true}}}}
	job := func(succeeded, failed, running int32, failedCond, suspended bool) shardView {
		return shardView{cluster: "a", zone: "a", healthy: true, desired: 4, obs: observation{Running: running, Ready: running,
			Part: &jobPart{Job: &jobObservation{Generation: 2, Succeeded: succeeded, Failed: failed, Active: running, FailedCondition: failedCond, Suspended: suspended}}}}
	}
	podShard := func(o observation, healthy bool) shardView {
		return shardView{cluster: "a", zone: "a", healthy: healthy, desired: 1, obs: o}
	}
	tests := []struct {
		name   string
		w      *api.Workload
		shards []shardView
		phase  string
		ready  int32
	}{
		{"app rolled everywhere", app(4, false), []shardView{rolled("a", 2), rolled("b", 2)}, api.PhaseRunning, 4},
		{"app one pod not ready", app(4, false), []shardView{rolled("a", 2), partial}, api.PhaseProgressing, 3},
		{"app shard of an older generation", app(4, false), []shardView{rolled("a", 2), oldGen}, api.PhaseProgressing, 4},
		{"app nothing yet", app(2, false), []shardView{empty}, api.PhaseScheduled, 0},
		{"app on a sick cluster", app(4, false), []shardView{rolled("a", 2), sick}, api.PhaseDegraded, 4},
		{"app paused, pods gone", app(4, true), []shardView{pausedDone}, api.PhasePaused, 0},
		{"app paused, pods left", app(4, true), []shardView{rolled("a", 2)}, api.PhaseProgressing, 2},
		{"jobset running", jobSet(4, false), []shardView{job(1, 0, 2, false, false)}, api.PhaseRunning, 2},
		{"jobset succeeded", jobSet(4, false), []shardView{job(4, 0, 0, false, false)}, api.PhaseSucceeded, 0},
		{"jobset failed", jobSet(4, false), []shardView{job(1, 7, 0, true, false)}, api.PhaseFailed, 0},
		{"jobset not started", jobSet(4, false), []shardView{job(0, 0, 0, false, false)}, api.PhaseScheduled, 0},
		{"jobset paused", jobSet(4, true), []shardView{job(1, 0, 0, false, true)}, api.PhasePaused, 0},
		{"jobset pausing", jobSet(4, true), []shardView{job(1, 0, 2, false, false)}, api.PhaseProgressing, 2},
		{"pod running", pod(), []shardView{podShard(observation{Pods: 1, Running: 1, Ready: 1}, true)}, api.PhaseRunning, 1},
		{"pod succeeded", pod(), []shardView{podShard(observation{Pods: 1, Succeeded: 1}, true)}, api.PhaseSucceeded, 0},
		{"pod failed", pod(), []shardView{podShard(observation{Pods: 1, Failed: 1}, true)}, api.PhaseFailed, 0},
		{"pod pending", pod(), []shardView{podShard(observation{Pods: 1}, true)}, api.PhaseScheduled, 0},
		{"pod on a sick cluster", pod(), []shardView{podShard(observation{Pods: 1}, false)}, api.PhaseDegraded, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := api.Status{Key: tc.w.Key(), Generation: 2, Desired: tc.w.Spec.Pods(), Phase: api.PhasePending}
			foldShards(newKinds(), tc.w, tc.shards, &st, discard)
			assert.Equal(t, tc.phase, st.Phase)
			assert.Equal(t, tc.ready, st.Ready)
			var zoneReady int32
			for _, z := range st.Zones {
				zoneReady += z.Ready
			}
			assert.Equal(t, st.Ready, zoneReady, "zones add up")
		})
	}
}

// TestPodUnscheduledCondition carries the scheduler's reason into the status.
func TestPodUnscheduledCondition(t *testing.T) {
	o := observation{Pods: 1, Unscheduled: []api.Condition{{Type: "PodScheduled", Reason: "Unschedulable", Message: "0/3 nodes are available"}}}
	st := api.Status{Phase: api.PhasePending}
	foldShards(newKinds(), pod(), []shardView{{cluster: "a", zone: "a", healthy: true, desired: 1, obs: o}}, &st, discard)
	require.Len(t, st.Conditions, 1)
	assert.Equal(t, "0/3 nodes are available", st.Conditions[0].Message)
}

// TestAddEventOrderFree keeps the same latest events whatever order they
// arrive in (a new term lists them in another order than the last saw
// them), and an event seen again replaces itself.
func TestAddEventOrderFree(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var in []keyedEvent
	for i := range MaxEvents + 5 {
		in = append(in, keyedEvent{name: fmt.Sprintf("ev-%02d", i), ev: api.Event{Reason: "R", Time: base.Add(time.Duration(i%7) * time.Second)}})
	}
	var forward, backward []keyedEvent
	for i := range in {
		forward = addEvent(forward, in[i])
		backward = addEvent(backward, in[len(in)-1-i])
	}
	require.Len(t, forward, MaxEvents)
	assert.Equal(t, forward, backward)
	again := in[len(in)-1]
	again.ev.Message = "seen again"
	again.ev.Time = base.Add(time.Hour)
	got := addEvent(forward, again)
	require.Len(t, got, MaxEvents)
	assert.Equal(t, "seen again", got[len(got)-1].ev.Message)
	assert.Equal(t, 1, countName(got, again.name))
}

func countName(evs []keyedEvent, name string) int {
	n := 0
	for _, e := range evs {
		if e.name == name {
			n++
		}
	}
	return n
}

// TestStatusDocKeepsPhaseRevision: the stored status is an api.Status to
// its readers, and keeps the revision that entered its phase for the
// folder (lost, a restart would announce the phase again).
func TestStatusDocKeepsPhaseRevision(t *testing.T) {
	b, err := json.Marshal(statusDoc{Status: api.Status{Key: "p.app.web", Phase: api.PhaseRunning, Ready: 3}, PhaseRevision: 42})
	require.NoError(t, err)
	var doc statusDoc
	require.NoError(t, json.Unmarshal(b, &doc))
	assert.Equal(t, uint64(42), doc.PhaseRevision)
	var st api.Status
	require.NoError(t, json.Unmarshal(b, &st))
	assert.Equal(t, api.Status{Key: "p.app.web", Phase: api.PhaseRunning, Ready: 3}, st)
}

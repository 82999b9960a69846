package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
)

func trainingJob(workers int32, gpus int64, gpuType string) *api.Workload {
	s := &api.TrainingJobSpec{Workers: workers, ReadyTimeoutSeconds: 60}
	if gpus > 0 {
		s.Placement = &api.Placement{Hardware: &api.Hardware{GPUs: gpus, GPUType: gpuType}}
	}
	s.Template.Containers = []api.Container{{Name: "t", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindTrainingJob, Metadata: api.Metadata{Project: "p", Name: "t", Generation: 1}, Spec: s}
}

// TestGangLandsWholeInOneCluster: the gang goes to one cluster with room
// for every worker, counting GPUs of the asked type node by node, even
// when a better-scored cluster has room for only part of it.
func TestGangLandsWholeInOneCluster(t *testing.T) {
	tests := []struct {
		name     string
		w        *api.Workload
		clusters func() []*api.ClusterInfo
		want     []api.Shard
	}{
		{"cpu gang in the best cluster", trainingJob(8, 0, ""), threeZones,
			[]api.Shard{{Cluster: "zone-a", Zone: "a", Replicas: 8}}},
		{"gpu gang where 4 fit", trainingJob(4, 1, "a100"), func() []*api.ClusterInfo {
			cs := threeZones()
			ft.WithGPUs(cs[0], 1, 3, "a100") // 3 fit
			ft.WithGPUs(cs[1], 2, 2, "a100") // 4 fit
			ft.WithGPUs(cs[2], 1, 2, "a100") // 2 fit
			return cs
		}, []api.Shard{{Cluster: "zone-b", Zone: "b", Replicas: 4}}},
		{"gpus of another type do not count", trainingJob(2, 2, "h100"), func() []*api.ClusterInfo {
			cs := threeZones()
			ft.WithGPUs(cs[0], 4, 8, "a100")
			ft.WithGPUs(cs[2], 1, 4, "h100") // 2 workers of 2
			return cs
		}, []api.Shard{{Cluster: "zone-c", Zone: "c", Replicas: 2}}},
		{"whole nodes: 3 free GPUs on each of 2 nodes hold two 2-GPU workers", trainingJob(2, 2, ""), func() []*api.ClusterInfo {
			cs := threeZones()
			ft.WithGPUs(cs[1], 2, 3, "a100")
			return cs
		}, []api.Shard{{Cluster: "zone-b", Zone: "b", Replicas: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.w, tt.clusters(), time.Time{})
			if d.Unschedulable {
				t.Fatalf("unschedulable: %+v", d.Reasons)
			}
			if diff := cmp.Diff(tt.want, d.Shards); diff != "" {
				t.Errorf("shards (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGangThatFitsNowhereSaysWhatEachClusterFits: never split; the first
// reason sums up what every cluster fits.
func TestGangThatFitsNowhereSaysWhatEachClusterFits(t *testing.T) {
	cs := threeZones()
	ft.WithGPUs(cs[0], 1, 3, "h100")
	ft.WithGPUs(cs[1], 1, 2, "h100")
	d := Decide(trainingJob(4, 1, "h100"), cs, time.Time{})
	if !d.Unschedulable || len(d.Shards) != 0 {
		t.Fatalf("decision %+v, want unschedulable without shards", d)
	}
	sum := d.Reasons[0].Reason
	for _, want := range []string{"no cluster fits 4 workers of 1 h100 GPU", "zone-a fits 3", "zone-b fits 2", "zone-c: no h100 GPU nodes"} {
		if !strings.Contains(sum, want) {
			t.Errorf("reason %q does not say %q", sum, want)
		}
	}
}

// TestJudgeGang: what a placed gang's attempt calls for.
func TestJudgeGang(t *testing.T) {
	placed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := placed.Add(10 * time.Second)
	ranks := func(phases ...string) *api.Status {
		st := &api.Status{Phase: api.PhaseProgressing, Training: &api.TrainingStatus{Attempt: 1}}
		for i, p := range phases {
			st.Training.Ranks = append(st.Training.Ranks, api.TrainingRank{Rank: int32(i), Phase: p})
		}
		return st
	}
	restart := func() *api.TrainingJobSpec {
		s := trainingJob(2, 0, "").Spec.(*api.TrainingJobSpec)
		s.FailurePolicy.Policy = api.GangRestart
		return s
	}
	tests := []struct {
		name string
		spec *api.TrainingJobSpec
		g    api.GangState
		st   *api.Status
		at   time.Duration // after placement
		want gangVerdict
	}{
		{"no status yet, within the timeout", nil, api.GangState{Attempt: 1, PlacedAt: placed}, nil, 5 * time.Second, gangWait},
		{"no status past the timeout", nil, api.GangState{Attempt: 1, PlacedAt: placed}, nil, 61 * time.Second, gangTimeout},
		{"one pending past the timeout", nil, api.GangState{Attempt: 1, PlacedAt: placed}, ranks("Running", "Pending"), 61 * time.Second, gangTimeout},
		{"all running", nil, api.GangState{Attempt: 1, PlacedAt: placed}, ranks("Running", "Running"), 5 * time.Second, gangReady},
		{"an older attempt's status does not count", nil, api.GangState{Attempt: 2, PlacedAt: placed}, ranks("Running", "Running"), 61 * time.Second, gangTimeout},
		{"ready before: no timeout", nil, api.GangState{Attempt: 1, PlacedAt: placed, ReadyAt: &ready}, ranks("Running", "Pending"), 600 * time.Second, gangSteady},
		{"failed worker, FailGang", nil, api.GangState{Attempt: 1, PlacedAt: placed}, ranks("Running", "Failed"), time.Second, gangSteady},
		{"failed worker, RestartGang", restart(), api.GangState{Attempt: 1, PlacedAt: placed}, ranks("Running", "Failed"), time.Second, gangRestart},
		{"failed worker, restarts used up", restart(), api.GangState{Attempt: 1, PlacedAt: placed, Restarts: 3}, ranks("Running", "Failed"), time.Second, gangSteady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if spec == nil {
				spec = trainingJob(2, 0, "").Spec.(*api.TrainingJobSpec)
			}
			if got := judgeGang(spec, &tt.g, tt.st, placed.Add(tt.at)); got != tt.want {
				t.Errorf("verdict %d, want %d", got, tt.want)
			}
		})
	}
}

// TestCarryGang: a placement is a new attempt, counters carried within a
// generation and reset by a new one.
func TestCarryGang(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := now.Add(-time.Second)
	prev := &api.PlacementDecision{Generation: 1, Gang: &api.GangState{Attempt: 2, Requeues: 1, NextAttempt: &next, QuotaReleased: true}}
	d := &api.PlacementDecision{Generation: 1, Shards: []api.Shard{{Cluster: "zone-b", Replicas: 4}}}
	carryGang(prev, d, now)
	want := &api.GangState{Attempt: 3, Requeues: 1, PlacedAt: now}
	if diff := cmp.Diff(want, d.Gang); diff != "" {
		t.Errorf("gang (-want +got):\n%s", diff)
	}
	if d.Shards[0].Attempt != 3 {
		t.Errorf("shard attempt %d, want 3", d.Shards[0].Attempt)
	}
	d2 := &api.PlacementDecision{Generation: 2, Shards: []api.Shard{{Cluster: "zone-b", Replicas: 4}}}
	carryGang(prev, d2, now)
	if diff := cmp.Diff(&api.GangState{Attempt: 3, PlacedAt: now}, d2.Gang); diff != "" {
		t.Errorf("a new generation resets the counters (-want +got):\n%s", diff)
	}
}

func TestBackoffForRequeues(t *testing.T) {
	s := trainingJob(2, 0, "").Spec.(*api.TrainingJobSpec)
	s.Backoff = &api.GangBackoff{BaseSeconds: 15, MaxSeconds: 60}
	var got []time.Duration
	for n := int32(1); n <= 4; n++ {
		got = append(got, s.BackoffFor(n))
	}
	if diff := cmp.Diff([]time.Duration{15 * time.Second, 30 * time.Second, 60 * time.Second, 60 * time.Second}, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

package scheduler

import (
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// TestCronJobFence: a CronJob's first placement fires from its creation;
// a move out of a lost cluster (or after a decision without a shard)
// fires only from past any lease the old cluster can hold; a new
// generation keeps the cluster and the fence it has.
func TestCronJobFence(t *testing.T) {
	at := time.Date(2026, 11, 23, 2, 30, 12, 500_000_000, time.UTC)
	w := kindWorkload(api.KindCronJob, nil)
	healthy := threeZones()
	first := Decide(w, healthy, at)
	if len(first.Shards) != 1 {
		t.Fatalf("decision %+v, want one shard", first)
	}
	home := first.Shards[0].Cluster
	lostHome := threeZones()
	for _, c := range lostHome {
		if c.Name == home {
			c.Healthy = false
		}
	}
	earlier := at.Add(-time.Hour)
	fenced := func(cluster string, from time.Time) *api.PlacementDecision {
		return &api.PlacementDecision{Key: w.Key(), Generation: 1, Decided: earlier,
			Shards: []api.Shard{{Cluster: cluster, Zone: "z", Replicas: 1, FireFrom: from}}}
	}
	other := "zone-a"
	if home == other {
		other = "zone-b"
	}
	moved := Decide(w, lostHome, at)
	elsewhere := first
	elsewhere.Shards = []api.Shard{{Cluster: other, Zone: "x", Replicas: 1}}
	wantFrom := time.Date(2026, 11, 23, 2, 31, 58, 0, time.UTC) // at + 90 s + 15 s, rounded up
	tests := []struct {
		name        string
		prev        *api.PlacementDecision
		d           api.PlacementDecision
		snap        []*api.ClusterInfo
		wantCluster string
		wantFrom    time.Time
	}{
		{"first placement", nil, first, healthy, home, time.Time{}},
		{"moved off a lost cluster", fenced(home, time.Time{}), moved, lostHome, moved.Shards[0].Cluster, wantFrom},
		{"new generation keeps its healthy cluster and fence", fenced(home, earlier), elsewhere, healthy, home, earlier},
		{"new generation keeps a first placement unfenced", fenced(home, time.Time{}), first, healthy, home, time.Time{}},
		{"after an unschedulable decision", &api.PlacementDecision{Key: w.Key(), Unschedulable: true}, first, healthy, home, wantFrom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fenceCronJob(w, tc.prev, tc.d, tc.snap, framework.Options{}, api.DefaultCronFence)
			if len(got.Shards) != 1 || got.Shards[0].Cluster != tc.wantCluster {
				t.Fatalf("shards %+v, want one in %s", got.Shards, tc.wantCluster)
			}
			if !got.Shards[0].FireFrom.Equal(tc.wantFrom) {
				t.Errorf("fire from %v, want %v", got.Shards[0].FireFrom, tc.wantFrom)
			}
		})
	}
	if moved.Shards[0].Cluster == home {
		t.Fatalf("the CronJob stayed in its lost cluster %s", home)
	}
	if !wantFrom.After(at.Add(api.CronFenceLease)) {
		t.Errorf("fire from %v is not past the old cluster's longest lease %v", wantFrom, at.Add(api.CronFenceLease))
	}
	// The input decision is not changed in place (the caller may hold it).
	if !first.Shards[0].FireFrom.IsZero() {
		t.Errorf("first decision changed: %+v", first.Shards)
	}
}

package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
)

func app(replicas int32, pl *api.Placement) *api.Workload {
	s := &api.AppSpec{Replicas: &replicas}
	s.Placement = pl
	s.Template.Containers = []api.Container{{Name: "a", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "w", Generation: 1}, Spec: s}
}

func threeZones() []*api.ClusterInfo {
	return []*api.ClusterInfo{ft.Cluster("zone-a", "a", 50, 0), ft.Cluster("zone-b", "b", 50, 0), ft.Cluster("zone-c", "c", 50, 0)}
}

func TestDivideReplicas(t *testing.T) {
	small := threeZones()
	small[2] = ft.Cluster("zone-c", "c", 1, 30) // cpu for 2 more pods
	down := threeZones()
	down[1].Healthy = false
	tests := []struct {
		name     string
		replicas int32
		clusters []*api.ClusterInfo
		pl       *api.Placement
		want     map[string]int32
	}{
		{"even", 9, threeZones(), nil, map[string]int32{"zone-a": 3, "zone-b": 3, "zone-c": 3}},
		{"remainder spread", 11, threeZones(), nil, map[string]int32{"zone-a": 4, "zone-b": 4, "zone-c": 3}},
		{"fewer than zones", 2, threeZones(), nil, map[string]int32{"zone-a": 1, "zone-b": 1}},
		{"allowed zones", 6, threeZones(), &api.Placement{Zones: []string{"a", "c"}}, map[string]int32{"zone-a": 3, "zone-c": 3}},
		{"cluster down", 9, down, nil, map[string]int32{"zone-a": 5, "zone-c": 4}},
		{"overflow moves", 12, small, nil, map[string]int32{"zone-a": 5, "zone-b": 5, "zone-c": 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(app(tc.replicas, tc.pl), tc.clusters, time.Time{})
			got := map[string]int32{}
			var total int32
			for _, s := range d.Shards {
				got[s.Cluster] = s.Replicas
				total += s.Replicas
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || total != tc.replicas {
				t.Errorf("shards (-want +got):\n%s total %d", diff, total)
			}
		})
	}
}

func TestDivideIsDeterministic(t *testing.T) {
	first := Decide(app(10, nil), threeZones(), time.Time{})
	for range 20 {
		if d := Decide(app(10, nil), threeZones(), time.Time{}); !cmp.Equal(first.Shards, d.Shards) {
			t.Fatalf("decisions differ: %v vs %v", first.Shards, d.Shards)
		}
	}
}

func TestJobSetIndexRanges(t *testing.T) {
	js := &api.JobSetSpec{Parallelism: 6, Completions: 30}
	js.Template.Containers = []api.Container{{Name: "a", Image: "x"}}
	js.Default()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindJobSet, Metadata: api.Metadata{Project: "p", Name: "j", Generation: 1}, Spec: js}
	d := Decide(w, threeZones(), time.Time{})
	want := []api.Shard{
		{Cluster: "zone-a", Zone: "a", Replicas: 2, IndexStart: 0, IndexEnd: 10},
		{Cluster: "zone-b", Zone: "b", Replicas: 2, IndexStart: 10, IndexEnd: 20},
		{Cluster: "zone-c", Zone: "c", Replicas: 2, IndexStart: 20, IndexEnd: 30},
	}
	if diff := cmp.Diff(want, d.Shards); diff != "" {
		t.Errorf("shards (-want +got):\n%s", diff)
	}
}

func gpuPod() *api.Workload {
	s := &api.PodSpec{}
	s.Placement = &api.Placement{Hardware: &api.Hardware{GPUs: 1}}
	s.Template.Containers = []api.Container{{Name: "a", Image: "x"}}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindPod, Metadata: api.Metadata{Project: "p", Name: "g", Generation: 1}, Spec: s}
}

func TestGPUPodGoesWhereGPUsAre(t *testing.T) {
	cs := threeZones()
	ft.WithGPUs(cs[1], 2, 8, "a100")
	d := Decide(gpuPod(), cs, time.Time{})
	if d.Unschedulable || len(d.Shards) != 1 || d.Shards[0].Cluster != "zone-b" {
		t.Fatalf("decision %+v, want one shard on zone-b", d)
	}
}

func TestUnschedulableSaysWhyPerClusterAndFilter(t *testing.T) {
	cs := threeZones()
	cs[0].Healthy = false
	d := Decide(gpuPod(), cs, time.Time{})
	if !d.Unschedulable || len(d.Shards) != 0 {
		t.Fatalf("decision %+v, want unschedulable", d)
	}
	got := map[string][]string{}
	for _, r := range d.Reasons {
		got[r.Cluster] = append(got[r.Cluster], r.Filter)
	}
	want := map[string][]string{
		"zone-a": {"ClusterHealth", "Hardware"},
		"zone-b": {"Hardware"},
		"zone-c": {"Hardware"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
}

func TestStoppedWorkloadsGetAnEmptyPlacement(t *testing.T) {
	stopped := func(w *api.Workload) *api.Workload { w.Control.Stopped = true; return w }
	paused := app(9, nil)
	paused.Control.Paused = true
	tests := []struct {
		name     string
		w        *api.Workload
		clusters []*api.ClusterInfo
		want     api.PlacementDecision
	}{
		{"stopped app", stopped(app(9, nil)), threeZones(), api.PlacementDecision{Key: "p.app.w", Generation: 1}},
		{"stopped pod that fits nowhere", stopped(gpuPod()), threeZones(), api.PlacementDecision{Key: "p.pod.g", Generation: 1}},
		{"stopped with no clusters known", stopped(app(3, nil)), nil, api.PlacementDecision{Key: "p.app.w", Generation: 1}},
		{"app of 0 replicas", app(0, nil), threeZones(), api.PlacementDecision{Key: "p.app.w", Generation: 1}},
		{"paused keeps its shards", paused, threeZones(), api.PlacementDecision{Key: "p.app.w", Generation: 1, Shards: []api.Shard{
			{Cluster: "zone-a", Zone: "a", Replicas: 3}, {Cluster: "zone-b", Zone: "b", Replicas: 3}, {Cluster: "zone-c", Zone: "c", Replicas: 3},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Decide(tc.w, tc.clusters, time.Time{})); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

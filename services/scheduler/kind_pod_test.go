package scheduler

import (
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
)

func podWorkload(gen int64, pl *api.Placement) *api.Workload {
	s := &api.PodSpec{Common: api.Common{Placement: pl, Template: api.PodTemplate{Containers: []api.Container{
		{Name: "a", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}}}}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindPod, Metadata: api.Metadata{Project: "p", Name: "db", Generation: gen}, Spec: s}
}

func placedIn(cluster string) *api.PlacementDecision {
	return &api.PlacementDecision{Generation: 1, Shards: []api.Shard{{Cluster: cluster, Zone: strings.TrimPrefix(cluster, "zone-"), Replicas: 1}}}
}

// TestPodKeepsItsClusterAcrossGenerations: a new generation of a Pod
// stays in its cluster while that cluster passes every filter but fit
// (even when full or no longer the best), and moves when it is lost,
// excluded by placement, or gone.
func TestPodKeepsItsClusterAcrossGenerations(t *testing.T) {
	full := threeZones()
	full[1] = ft.Cluster("zone-b", "b", 1, 32) // its 32 CPU all requested (the Pod among them)
	lost := threeZones()
	lost[1].Healthy = false
	gone := []*api.ClusterInfo{threeZones()[0], threeZones()[2]}
	tests := []struct {
		name     string
		clusters []*api.ClusterInfo
		pl       *api.Placement
		kind     string
		want     string // the cluster, "" for "not zone-b"
	}{
		{"healthy", threeZones(), nil, api.KindPod, "zone-b"},
		{"full but there", full, nil, api.KindPod, "zone-b"},
		{"lost", lost, nil, api.KindPod, ""},
		{"zone excluded", threeZones(), &api.Placement{Zones: []string{"a", "c"}}, api.KindPod, ""},
		{"gone", gone, nil, api.KindPod, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := podWorkload(2, tc.pl)
			d := Decide(w, tc.clusters, time.Time{})
			got := keepCluster(w, placedIn("zone-b"), d, tc.clusters, framework.Options{})
			if len(got.Shards) != 1 {
				t.Fatalf("shards %+v, want one", got.Shards)
			}
			c := got.Shards[0].Cluster
			if tc.want != "" && c != tc.want || tc.want == "" && c == "zone-b" {
				t.Errorf("placed in %s (decided %s), want %q", c, d.Shards[0].Cluster, tc.want)
			}
		})
	}
	// Other kinds are left to the decision.
	app := app(1, nil)
	d := Decide(app, threeZones(), time.Time{})
	if got := keepCluster(app, placedIn("zone-c"), d, threeZones(), framework.Options{}); got.Shards[0].Cluster != d.Shards[0].Cluster {
		t.Errorf("an App kept its previous cluster %s over the decision's %s", got.Shards[0].Cluster, d.Shards[0].Cluster)
	}
}

// TestFailoverEvent: a Pod moved out of an unhealthy or vanished cluster
// warrants a failed-over event naming both clusters; a move for any other
// reason, a first placement and other kinds do not.
func TestFailoverEvent(t *testing.T) {
	lost := threeZones()
	lost[0].Healthy, lost[0].Message = false, "readyz failing"
	tests := []struct {
		name    string
		w       *api.Workload
		prev    *api.PlacementDecision
		snap    []*api.ClusterInfo
		want    bool
		message string
	}{
		{"lost", podWorkload(1, nil), placedIn("zone-a"), lost, true, "cluster zone-a is lost (readyz failing): moved from zone-a to zone-b"},
		{"gone", podWorkload(1, nil), placedIn("zone-a"), threeZones()[1:], true, "cluster zone-a is gone: moved from zone-a to zone-b"},
		{"healthy source", podWorkload(1, nil), placedIn("zone-a"), threeZones(), false, ""},
		{"first placement", podWorkload(1, nil), nil, lost, false, ""},
		{"same cluster", podWorkload(1, nil), placedIn("zone-b"), lost, false, ""},
		{"not a pod", app(1, nil), placedIn("zone-a"), lost, false, ""},
	}
	d := api.PlacementDecision{Generation: 1, Shards: []api.Shard{{Cluster: "zone-b", Zone: "b", Replicas: 1}}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok := failover(tc.w, tc.prev, &d, tc.snap)
			if ok != tc.want || msg != tc.message {
				t.Errorf("failover = %q, %v; want %q, %v", msg, ok, tc.message, tc.want)
			}
		})
	}
}

// TestFullClusterFailsFit checks the premise of "full but there": the
// decision alone would not pick the full cluster.
func TestFullClusterFailsFit(t *testing.T) {
	full := ft.Cluster("zone-b", "b", 1, 32)
	d := Decide(podWorkload(1, &api.Placement{Zones: []string{"b"}}), []*api.ClusterInfo{full}, time.Time{})
	if !d.Unschedulable {
		t.Errorf("a full cluster took the Pod: %+v", d.Shards)
	}
}

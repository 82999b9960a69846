package scheduler

import (
	"testing"
	"time"

	"atoll.dev/libs/api"
)

func kindWorkload(kind string, pl *api.Placement) *api.Workload {
	var s api.Spec
	tmpl := api.PodTemplate{Containers: []api.Container{{Name: "a", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "100m", Memory: "64Mi"}}}}}
	switch kind {
	case api.KindCronJob:
		s = &api.CronJobSpec{Common: api.Common{Placement: pl, Template: tmpl}, Schedule: "* * * * *"}
	case api.KindDaemon:
		s = &api.DaemonSpec{Common: api.Common{Placement: pl, Template: tmpl}}
	}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: kind, Metadata: api.Metadata{Project: "ops", Name: "w", Generation: 1}, Spec: s}
}

func shardClusters(d api.PlacementDecision) []string {
	var out []string
	for _, s := range d.Shards {
		out = append(out, s.Cluster)
	}
	return out
}

// TestCronJobInOneCluster: a CronJob has one shard, and a sticky placement
// moves only when its cluster is lost.
func TestCronJobInOneCluster(t *testing.T) {
	w := kindWorkload(api.KindCronJob, nil)
	d := Decide(w, threeZones(), time.Time{})
	if len(d.Shards) != 1 || d.Unschedulable {
		t.Fatalf("decision %+v, want one shard", d)
	}
	s := &Service{kinds: kinds()}
	if !s.stillGood(&d, w, threeZones()) {
		t.Error("the placement of a CronJob in a healthy cluster does not stand")
	}
	lost := threeZones()
	for _, c := range lost {
		if c.Name == d.Shards[0].Cluster {
			c.Healthy = false
		}
	}
	if s.stillGood(&d, w, lost) {
		t.Error("the placement in a lost cluster stands")
	}
	moved := Decide(w, lost, time.Time{})
	if len(moved.Shards) != 1 || moved.Shards[0].Cluster == d.Shards[0].Cluster {
		t.Errorf("moved to %v from %v", shardClusters(moved), shardClusters(d))
	}
}

// TestDaemonInEveryMatchingCluster: a Daemon has a shard in every cluster
// that passes its filters, and its placement stops standing when a
// cluster joins or starts to match.
func TestDaemonInEveryMatchingCluster(t *testing.T) {
	labelled := func(cs []*api.ClusterInfo, names ...string) []*api.ClusterInfo {
		for _, c := range cs {
			for _, n := range names {
				if c.Name == n {
					c.Labels = map[string]string{"env": "prod"}
				}
			}
		}
		return cs
	}
	tests := []struct {
		name     string
		clusters []*api.ClusterInfo
		pl       *api.Placement
		want     []string
	}{
		{"all", threeZones(), nil, []string{"zone-a", "zone-b", "zone-c"}},
		{"selector", labelled(threeZones(), "zone-a", "zone-c"), &api.Placement{ClusterSelector: map[string]string{"env": "prod"}}, []string{"zone-a", "zone-c"}},
		{"zones", threeZones(), &api.Placement{Zones: []string{"b"}}, []string{"zone-b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(kindWorkload(api.KindDaemon, tc.pl), tc.clusters, time.Time{})
			if got := shardClusters(d); !equalStrings(got, tc.want) {
				t.Errorf("shards in %v, want %v", got, tc.want)
			}
		})
	}
	w := kindWorkload(api.KindDaemon, nil)
	two := threeZones()[:2]
	d := Decide(w, two, time.Time{})
	s := &Service{kinds: kinds()}
	if !s.stillGood(&d, w, two) {
		t.Error("an unchanged region does not keep the Daemon's placement")
	}
	if s.stillGood(&d, w, threeZones()) {
		t.Error("a cluster that joined does not re-place the Daemon")
	}
	w2 := kindWorkload(api.KindDaemon, &api.Placement{ClusterSelector: map[string]string{"env": "prod"}})
	d2 := Decide(w2, labelled(threeZones(), "zone-a"), time.Time{})
	if s.stillGood(&d2, w2, labelled(threeZones(), "zone-a", "zone-b")) {
		t.Error("a cluster that starts to match does not re-place the Daemon")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

var (
	pod   = api.Quantities{MilliCPU: 1000, MemoryBytes: 1 << 30}
	epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// vic is a victim of pods one-core pods, admitted minute minutes after epoch.
func vic(key string, prio int32, minute int, pods int64) Victim {
	return Victim{Key: key, Priority: prio, Admitted: epoch.Add(time.Duration(minute) * time.Minute), Pods: pods,
		Req: api.Quantities{MilliCPU: 1000 * pods, MemoryBytes: pods << 30}}
}

// full is a cluster with no room left and the given victims.
func full(name string, vs ...Victim) PreemptionCluster {
	return PreemptionCluster{Name: name, FreePods: 100, Victims: vs}
}

func TestPlanPreemption(t *testing.T) {
	roomy := PreemptionCluster{Name: "roomy", Free: api.Quantities{MilliCPU: 2000, MemoryBytes: 2 << 30}, FreePods: 100}
	tests := []struct {
		name     string
		need     int64
		clusters []PreemptionCluster
		want     map[string][]string // victims by cluster
		wantPods int64
	}{
		{"a cluster needing no victims is preferred", 2,
			[]PreemptionCluster{full("busy", vic("p.app.x", 0, 9, 5)), roomy},
			map[string][]string{"roomy": nil}, 2},
		{"lowest priority first, then newest", 1,
			[]PreemptionCluster{full("a", vic("p.app.high", 10, 9, 1), vic("p.app.old", 0, 1, 1), vic("p.app.new", 0, 5, 1))},
			map[string][]string{"a": {"p.app.new"}}, 1},
		{"victims not needed are dropped", 3,
			[]PreemptionCluster{full("a", vic("p.app.small", 0, 9, 1), vic("p.app.big", 1, 1, 3))},
			map[string][]string{"a": {"p.app.big"}}, 3},
		{"lowest highest-victim priority wins", 1,
			[]PreemptionCluster{full("a", vic("p.app.five", 5, 1, 1)), full("b", vic("p.app.three", 3, 1, 1))},
			map[string][]string{"b": {"p.app.three"}}, 1},
		{"then lowest sum of priorities", 2,
			[]PreemptionCluster{full("a", vic("p.app.a2", 2, 1, 1), vic("p.app.a2b", 2, 2, 1)), full("b", vic("p.app.b0", 0, 1, 1), vic("p.app.b2", 2, 1, 1))},
			map[string][]string{"b": {"p.app.b0", "p.app.b2"}}, 2},
		{"then fewest victims", 2,
			[]PreemptionCluster{full("a", vic("p.app.a1", 0, 1, 1), vic("p.app.a2", 0, 2, 1)), full("b", vic("p.app.b", 0, 1, 2))},
			map[string][]string{"b": {"p.app.b"}}, 2},
		{"then the newest victims", 1,
			[]PreemptionCluster{full("a", vic("p.app.old", 0, 1, 1)), full("b", vic("p.app.new", 0, 7, 1))},
			map[string][]string{"b": {"p.app.new"}}, 1},
		{"a gang goes whole and frees every cluster it ran on", 4,
			[]PreemptionCluster{full("a", vic("p.jobset.gang", 0, 1, 2)), full("b", vic("p.jobset.gang", 0, 1, 2))},
			map[string][]string{"a": {"p.jobset.gang"}, "b": nil}, 4},
		{"room split over clusters when none has enough", 3,
			[]PreemptionCluster{full("a", vic("p.app.a", 0, 1, 2)), full("b", vic("p.app.b", 0, 1, 1))},
			map[string][]string{"a": {"p.app.a"}, "b": {"p.app.b"}}, 3},
		{"no victims, no plan", 1, []PreemptionCluster{full("a")}, map[string][]string{}, 0},
		{"as much as the victims can give", 5, []PreemptionCluster{full("a", vic("p.app.a", 0, 1, 2))},
			map[string][]string{"a": {"p.app.a"}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanPreemption(tc.need, pod, tc.clusters)
			got := map[string][]string{}
			for _, s := range plan.Steps {
				var keys []string
				for _, v := range s.Victims {
					keys = append(keys, v.Key)
				}
				got[s.Cluster] = keys
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || plan.Pods != tc.wantPods {
				t.Errorf("victims by cluster (-want +got):\n%s pods %d, want %d", diff, plan.Pods, tc.wantPods)
			}
		})
	}
}

func TestPlanPreemptionNamesAGangOnce(t *testing.T) {
	plan := PlanPreemption(4, pod, []PreemptionCluster{full("a", vic("p.jobset.gang", 0, 1, 2)), full("b", vic("p.jobset.gang", 0, 1, 2))})
	if diff := cmp.Diff([]string{"p.jobset.gang"}, plan.VictimKeys()); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

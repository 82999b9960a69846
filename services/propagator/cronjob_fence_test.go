package propagator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"atoll.dev/libs/api"
)

func cronWorkload() *api.Workload {
	s := &api.CronJobSpec{Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "c", Image: "busybox"}}}}, Schedule: "* * * * *"}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindCronJob, Metadata: api.Metadata{Project: "p", Name: "tick", Generation: 1}, Spec: s}
}

// TestRenderCronJobFence: a CronJob's Job template carries the shard's
// fire-from (none on a first placement) and, outside the spec hash, a
// lease of fire-until = render time + V; a moved shard is a new hash.
func TestRenderCronJobFence(t *testing.T) {
	w := cronWorkload()
	from := time.Date(2026, 11, 23, 2, 31, 58, 0, time.UTC)
	placement := func(sh api.Shard) *desired {
		p := &api.PlacementDecision{Key: w.Key(), Generation: 1, Shards: []api.Shard{sh}}
		return &desired{workload: w, kind: cronJobKind{}, placement: p, hashes: map[string]string{}}
	}
	first := placement(api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1})
	moved := placement(api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1, FireFrom: from})
	tests := []struct {
		name     string
		d        *desired
		wantFrom string
	}{
		{"first placement", first, ""},
		{"moved here", moved, "2026-11-23T02:31:58Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			o, err := tc.d.render("zone-a")
			if err != nil {
				t.Fatal(err)
			}
			a := o.obj.(*batchv1.CronJob).Spec.JobTemplate.Annotations
			if got, ok := a[api.AnnoFireFrom]; got != tc.wantFrom || ok != (tc.wantFrom != "") {
				t.Errorf("fire-from %q (set %v), want %q", got, ok, tc.wantFrom)
			}
			until, err := time.Parse(time.RFC3339, a[api.AnnoFireUntil])
			if err != nil {
				t.Fatalf("fire-until %q: %v", a[api.AnnoFireUntil], err)
			}
			lo, hi := before.Add(api.CronFenceLease).Truncate(time.Second), time.Now().Add(api.CronFenceLease)
			if until.Before(lo) || until.After(hi) {
				t.Errorf("fire-until %v, want render time + %v (%v..%v)", until, api.CronFenceLease, lo, hi)
			}
			// The lease is outside the hash: a render a second later (a
			// new lease) is the same shard.
			later := tc.d.renderShard(tc.d.placement.Shards[0])
			stamp(&later)
			leaseCronJob(&later, api.CronFireUntil(time.Now().Add(time.Second)))
			if later.hash != o.hash {
				t.Errorf("hash %s then %s: the lease changed the spec hash", o.hash, later.hash)
			}
		})
	}
	h1, _ := first.hash("zone-a")
	h2, _ := moved.hash("zone-a")
	if h1 == h2 {
		t.Error("a shard's fire-from is not in its hash: a move would not be applied")
	}
}

// TestFencePolicy: the policy matches only Job creations, fails closed,
// and its two rules name both bounds; the binding denies, in the
// projects' namespaces, for the workloads' Jobs.
func TestFencePolicy(t *testing.T) {
	p := fencePolicy()
	if *p.Spec.FailurePolicy != "Fail" || len(p.Spec.Validations) != 2 {
		t.Fatalf("policy %+v", p.Spec)
	}
	r := p.Spec.MatchConstraints.ResourceRules[0]
	if r.Resources[0] != "jobs" || r.APIGroups[0] != "batch" || len(r.Operations) != 1 || r.Operations[0] != "CREATE" {
		t.Errorf("rule %+v: want the creation of batch jobs only", r)
	}
	for i, want := range []string{api.AnnoFireFrom + "']) ", api.AnnoFireUntil + "'])"} {
		if e := p.Spec.Validations[i].Expression; !strings.Contains(e, batchv1.CronJobScheduledTimestampAnnotation) || !strings.Contains(e+" ", want) {
			t.Errorf("validation %d %q does not compare the schedule time with %s", i, e, want)
		}
	}
	b := fenceBinding()
	if b.Spec.PolicyName != FenceName || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != "Deny" {
		t.Errorf("binding %+v", b.Spec)
	}
	body, _ := json.Marshal(b)
	for _, l := range []string{api.LabelProject, api.LabelWorkload} {
		if !strings.Contains(string(body), l) {
			t.Errorf("binding %s does not select by %s", body, l)
		}
	}
}

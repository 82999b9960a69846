package propagator

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"

	"atoll.dev/libs/api"
)

func TestRenderCronJob(t *testing.T) {
	tmpl := api.PodTemplate{Containers: []api.Container{{Name: "c", Image: "busybox"}}}
	s := &api.CronJobSpec{Common: api.Common{Template: tmpl}, Schedule: "*/2 * * * *", TimeZone: "Europe/Paris", ConcurrencyPolicy: api.ConcurrencyForbid}
	s.Default()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindCronJob, Metadata: api.Metadata{Project: "p", Name: "nightly", Generation: 2}, Spec: s}
	sh := api.Shard{Cluster: "zone-b", Zone: "b", Replicas: 1}
	tests := []struct {
		name        string
		suspend     bool
		paused      bool
		wantSuspend bool
	}{
		{"running", false, false, false},
		{"suspended", true, false, true},
		{"paused", false, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.Suspend = tc.suspend
			w.Control.Paused = tc.paused
			c := renderCronJob(w, sh).obj.(*batchv1.CronJob)
			if c.Spec.Schedule != "*/2 * * * *" || *c.Spec.TimeZone != "Europe/Paris" || c.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
				*c.Spec.StartingDeadlineSeconds != api.DefaultCronStartingDeadlineSeconds || *c.Spec.SuccessfulJobsHistoryLimit != 3 || *c.Spec.FailedJobsHistoryLimit != 1 {
				t.Errorf("spec %+v", c.Spec)
			}
			if *c.Spec.Suspend != tc.wantSuspend {
				t.Errorf("suspend %v, want %v", *c.Spec.Suspend, tc.wantSuspend)
			}
			jl := c.Spec.JobTemplate.Labels
			if jl[api.LabelKind] != "cronjob" || jl[api.LabelWorkload] != "nightly" || jl[api.LabelProject] != "p" || jl[api.LabelShard] != "zone-b" {
				t.Errorf("job labels %v: the aggregator finds the runs by them", jl)
			}
			if c.Spec.JobTemplate.Spec.Template.Labels[api.LabelWorkload] != "nightly" {
				t.Errorf("pod labels %v", c.Spec.JobTemplate.Spec.Template.Labels)
			}
		})
	}
}

func TestRenderDaemon(t *testing.T) {
	pl := &api.Placement{NodeSelector: map[string]string{"role": "edge"}, Tolerations: []api.Toleration{{Key: "kwok.x-k8s.io/node", Operator: "Exists", Effect: "NoSchedule"}}}
	s := &api.DaemonSpec{Common: api.Common{Placement: pl, Template: api.PodTemplate{Containers: []api.Container{{Name: "agent", Image: "agent:1"}}}}}
	s.Default()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindDaemon, Metadata: api.Metadata{Project: "ops", Name: "agent", Generation: 1}, Spec: s}
	o := renderDaemon(w, api.Shard{Cluster: "zone-a", Zone: "a"})
	d := o.obj.(*appsv1.DaemonSet)
	if o.gvr != daemonsets || d.Namespace != "atoll-ops" || d.Name != "agent" {
		t.Errorf("object %v %s/%s", o.gvr, d.Namespace, d.Name)
	}
	ps := d.Spec.Template.Spec
	if ps.NodeSelector["role"] != "edge" || len(ps.Tolerations) != 1 || ps.Tolerations[0].Key != "kwok.x-k8s.io/node" {
		t.Errorf("node selection %v %v", ps.NodeSelector, ps.Tolerations)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %v does not select the template's labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
	}
	if d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("maxUnavailable %v", d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable)
	}
}

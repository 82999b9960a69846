package aggregator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
)

func TestFoldCronJob(t *testing.T) {
	s := &api.CronJobSpec{Schedule: "* * * * *"}
	s.Default()
	w := &api.Workload{Kind: api.KindCronJob, Metadata: api.Metadata{Project: "p", Name: "tick", Generation: 1}, Spec: s}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	job := func(name string, at time.Time, cond batchv1.JobConditionType) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{batchv1.CronJobScheduledTimestampAnnotation: at.Format(time.RFC3339)}}}
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue}}
		}
		return j
	}
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "tick", Annotations: map[string]string{api.AnnoGeneration: "1"}},
		Spec:   batchv1.CronJobSpec{Suspend: new(false)},
		Status: batchv1.CronJobStatus{LastScheduleTime: &metav1.Time{Time: t0.Add(2 * time.Minute)}, LastSuccessfulTime: &metav1.Time{Time: t0.Add(time.Minute)}, Active: []corev1.ObjectReference{{Name: "tick-3"}}}}
	part := &cronJobPart{}
	obs := &observation{Part: part}
	observeCronJob(part, cj, []*batchv1.Job{job("tick-3", t0.Add(2*time.Minute), ""), job("tick-1", t0, batchv1.JobFailed), job("tick-2", t0.Add(time.Minute), batchv1.JobComplete)})

	st := api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldCronJob(w, []shardView{{cluster: "zone-b", zone: "b", healthy: true, desired: 1, obs: *obs}}, &st)
	assert.Equal(t, api.PhaseRunning, st.Phase)
	require.NotNil(t, st.CronJob)
	c := st.CronJob
	assert.Equal(t, "zone-b", c.Cluster)
	assert.Equal(t, t0.Add(2*time.Minute), *c.LastScheduleTime)
	assert.Equal(t, t0.Add(time.Minute), *c.LastSuccessfulTime)
	assert.EqualValues(t, 1, c.Active)
	require.Len(t, c.Runs, 3)
	for i, want := range []string{api.RunFailed, api.RunSucceeded, api.RunActive} {
		assert.Equal(t, want, c.Runs[i].Outcome, "run %d", i)
		assert.Equal(t, t0.Add(time.Duration(i)*time.Minute), *c.Runs[i].ScheduledTime)
	}

	cj.Spec.Suspend = new(true)
	part = &cronJobPart{}
	obs = &observation{Part: part}
	observeCronJob(part, cj, nil)
	st = api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldCronJob(w, []shardView{{cluster: "zone-b", zone: "b", healthy: true, obs: *obs}}, &st)
	assert.Equal(t, api.PhasePaused, st.Phase)

	st = api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldCronJob(w, []shardView{{cluster: "zone-b", zone: "b", healthy: false, obs: *obs}}, &st)
	assert.Equal(t, api.PhaseDegraded, st.Phase, "a CronJob whose cluster is lost is never finished")
}

func TestFoldDaemon(t *testing.T) {
	w := &api.Workload{Kind: api.KindDaemon, Metadata: api.Metadata{Project: "ops", Name: "agent", Generation: 2}, Spec: &api.DaemonSpec{}}
	ds := func(gen string, observed bool, desired, current, ready, updated int32) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: 5, Annotations: map[string]string{api.AnnoGeneration: gen}},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: current, NumberReady: ready, UpdatedNumberScheduled: updated}}
		if observed {
			d.Status.ObservedGeneration = 5
		}
		return d
	}
	view := func(cluster string, d *appsv1.DaemonSet) shardView {
		tc := &clusterTerm{indexers: map[schema.GroupVersionResource]cache.Indexer{daemonsets: indexed("ops.daemon.agent", d)}}
		part, _ := daemonKind{}.observe(tc, "ops.daemon.agent", "agent", nil)
		return shardView{cluster: cluster, zone: cluster[len(cluster)-1:], healthy: true, obs: observation{Part: part}}
	}
	tests := []struct {
		name   string
		shards []shardView
		phase  string
		behind []string
		sum    api.DaemonCounts
	}{
		{"all done", []shardView{view("zone-a", ds("2", true, 2, 2, 2, 2)), view("zone-b", ds("2", true, 3, 3, 3, 3))}, api.PhaseRunning, nil, api.DaemonCounts{Desired: 5, Current: 5, Ready: 5, Updated: 5}},
		{"one not ready", []shardView{view("zone-a", ds("2", true, 2, 2, 2, 2)), view("zone-b", ds("2", true, 3, 3, 1, 3))}, api.PhaseScheduled, []string{"zone-b"}, api.DaemonCounts{Desired: 5, Current: 5, Ready: 3, Updated: 5}},
		{"old generation", []shardView{view("zone-a", ds("1", true, 2, 2, 2, 2))}, api.PhaseScheduled, []string{"zone-a"}, api.DaemonCounts{Desired: 2, Current: 2, Ready: 2, Updated: 2}},
		{"not observed", []shardView{view("zone-c", ds("2", false, 2, 2, 2, 2))}, api.PhaseScheduled, []string{"zone-c"}, api.DaemonCounts{Desired: 2, Current: 2, Ready: 2, Updated: 2}},
		{"missing", []shardView{view("zone-a", ds("2", true, 1, 1, 1, 1)), {cluster: "zone-c", zone: "c", healthy: true}}, api.PhaseScheduled, []string{"zone-c"}, api.DaemonCounts{Desired: 1, Current: 1, Ready: 1, Updated: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
			foldDaemon(w, tc.shards, &st)
			require.NotNil(t, st.Daemon)
			assert.Equal(t, tc.phase, st.Phase)
			assert.Equal(t, tc.behind, st.Daemon.Behind)
			assert.Equal(t, tc.sum, st.Daemon.DaemonCounts)
			assert.Equal(t, tc.sum.Desired, st.Desired)
		})
	}
}

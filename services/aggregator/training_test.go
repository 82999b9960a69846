package aggregator

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
)

func gangPod(name string, rank, attempt int, phase corev1.PodPhase, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			batchv1.JobCompletionIndexAnnotation: itoa(rank), api.AnnoGangAttempt: itoa(attempt)}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{RestartCount: int32(rank)}}},
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestFoldTrainingJob(t *testing.T) {
	s := &api.TrainingJobSpec{Workers: 2}
	s.Default()
	w := &api.Workload{Kind: api.KindTrainingJob, Metadata: api.Metadata{Project: "ml", Name: "bert", Generation: 1}, Spec: s}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "bert", Annotations: map[string]string{api.AnnoGangAttempt: "2"}}}
	fold := func(pods ...*corev1.Pod) api.Status {
		obs := observe(views(pods))
		obs.Part = &trainingPart{Job: observeJob(job), Gang: observeGang(views(pods), job)}
		st := api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
		foldTraining(w, []shardView{{cluster: "zone-b", zone: "b", healthy: true, desired: 2, obs: *obs}}, &st)
		return st
	}

	// A pod of the previous attempt, still terminating, is not a rank.
	st := fold(gangPod("bert-0-a", 0, 2, corev1.PodRunning, "n1"), gangPod("bert-1-a", 1, 2, corev1.PodPending, ""), gangPod("bert-0-old", 0, 1, corev1.PodRunning, "n9"))
	require.NotNil(t, st.Training)
	assert.Equal(t, api.PhaseProgressing, st.Phase)
	assert.Equal(t, []api.TrainingRank{{Rank: 0, Pod: "bert-0-a", Phase: "Running", Node: "n1"}, {Rank: 1, Pod: "bert-1-a", Phase: "Pending", Restarts: 1}}, st.Training.Ranks)
	assert.EqualValues(t, 2, st.Training.Attempt)
	assert.Equal(t, "zone-b", st.Training.Cluster)

	st = fold(gangPod("bert-0-a", 0, 2, corev1.PodRunning, "n1"), gangPod("bert-1-a", 1, 2, corev1.PodRunning, "n2"))
	assert.Equal(t, api.PhaseRunning, st.Phase)

	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
	st = fold(gangPod("bert-0-a", 0, 2, corev1.PodRunning, "n1"), gangPod("bert-1-a", 1, 2, corev1.PodFailed, "n2"))
	assert.Equal(t, api.PhaseFailed, st.Phase, "backoffLimit 0: one failed worker fails the gang")
}

func TestFoldGangRequeued(t *testing.T) {
	s := &api.TrainingJobSpec{Workers: 4}
	s.Default()
	w := &api.Workload{Kind: api.KindTrainingJob, Metadata: api.Metadata{Project: "ml", Name: "bert", Generation: 1}, Spec: s}
	next := time.Date(2026, 1, 1, 10, 0, 15, 0, time.UTC)
	p := &api.PlacementDecision{Generation: 1, Unschedulable: true, Gang: &api.GangState{Attempt: 1, Requeues: 1, NextAttempt: &next, QuotaReleased: true, LastRequeue: "attempt 1 in zone-a: not all 4 workers Running within 5s of its placement"}}
	st := api.Status{Phase: api.PhaseUnscheduled}
	foldGang(w, p, &st)
	assert.Equal(t, api.PhasePending, st.Phase)
	require.NotNil(t, st.Training)
	assert.EqualValues(t, 1, st.Training.Requeues)
	assert.Equal(t, &next, st.Training.NextAttempt)
	require.NotEmpty(t, st.Conditions)
	assert.Equal(t, "Requeued", st.Conditions[len(st.Conditions)-1].Type)
}

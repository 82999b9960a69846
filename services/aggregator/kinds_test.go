package aggregator

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
	"atoll.dev/libs/clusters"
)

// TestKindsTable: every kind the scheduler places has an entry in the
// aggregator's table, and a kind it never places (a Scaler) has none, so
// a kind registered in libs/api fails here until kinds.go handles it.
func TestKindsTable(t *testing.T) {
	s, err := New(nil, discard, nil)
	require.NoError(t, err)
	handled := s.Kinds()
	require.True(t, slices.IsSorted(handled))
	for _, k := range api.KindNames() {
		t.Run(k, func(t *testing.T) {
			assert.Equalf(t, api.Placed(k), slices.Contains(handled, k),
				"kind %s in the aggregator's table: a kind is there if and only if it is placed; see newKinds in kinds.go", k)
		})
	}
	for _, k := range handled {
		assert.Containsf(t, api.KindNames(), k, "kind %s is in the aggregator's table but not registered in libs/api", k)
	}
}

// TestObservationDocument: an observation is stored as one flat document,
// its kind's part beside the counts and before the events, and reads back
// the same with its kind.
func TestObservationDocument(t *testing.T) {
	tests := []struct {
		name string
		kind kind
		obs  observation
		want string
	}{
		{"counts only", nil, observation{Pods: 1, Running: 1}, `{"pods":1,"running":1}`},
		{"nil part", nil, observation{Pods: 1, Part: (*appPart)(nil)}, `{"pods":1}`},
		{"nothing", nil, observation{}, `{}`},
		{"empty part", appKind{}, observation{Pods: 2, Part: &appPart{}, Events: []api.Event{{Reason: "Pulled"}}},
			`{"pods":2,"events":[{"cluster":"","object":"","type":"","reason":"Pulled","message":"","time":"0001-01-01T00:00:00Z"}]}`},
		{"app", appKind{}, observation{Pods: 2, Ready: 2, Part: &appPart{Deployment: &deploymentObservation{Generation: 3, Observed: true, Replicas: 2}}},
			`{"pods":2,"ready":2,"deployment":{"generation":3,"observed":true,"replicas":2,"updated":0,"available":0}}`},
		{"training", trainingKind{}, observation{Part: &trainingPart{Job: &jobObservation{Generation: 1, Active: 2}, Gang: &gangObservation{Attempt: 1}}},
			`{"job":{"generation":1,"active":2},"gang":{"attempt":1}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.obs)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(b))
			assert.Equal(t, tc.want, string(b), "the members' order")
			back, err := decodeObservation(tc.kind, b)
			require.NoError(t, err)
			again, err := json.Marshal(back)
			require.NoError(t, err)
			assert.Equal(t, string(b), string(again))
		})
	}
}

// indexed is an indexer holding objs under the workload key.
func indexed(key string, objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byWorkload: func(any) ([]string, error) { return []string{key}, nil }})
	for _, o := range objs {
		_ = idx.Add(o)
	}
	return idx
}

// TestObservationByKind: a cluster's observation of a workload reads its
// kind's objects from the term's caches, and the cluster holds the
// workload while it holds its pods or one of those objects (a Pod's claim
// alone is not one).
func TestObservationByKind(t *testing.T) {
	gen := map[string]string{api.AnnoGeneration: "1"}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x-1", Namespace: "atoll-p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	tests := []struct {
		name string
		key  string
		pods []any
		objs map[schema.GroupVersionResource][]any
		want string // the stored document; "" for none
	}{
		{"app", "p.app.x", nil, map[schema.GroupVersionResource][]any{deployments: {&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "atoll-p", Annotations: gen}}}},
			`{"deployment":{"generation":1,"observed":true,"replicas":0,"updated":0,"available":0}}`},
		{"app with another's deployment", "p.app.x", nil, map[schema.GroupVersionResource][]any{deployments: {&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "y", Namespace: "atoll-p"}}}}, ""},
		{"jobset", "p.jobset.x", []any{running}, map[schema.GroupVersionResource][]any{jobs: {&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "atoll-p", Annotations: gen}, Status: batchv1.JobStatus{Active: 1}}}},
			`{"pods":1,"running":1,"images":["busybox:1"],"job":{"generation":1,"active":1}}`},
		{"cronjob runs only", "p.cronjob.x", nil, map[schema.GroupVersionResource][]any{jobs: {&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x-29000000", Namespace: "atoll-p"}}}},
			`{"runs":[{"name":"x-29000000","outcome":"Active"}]}`},
		{"daemon", "p.daemon.x", nil, map[schema.GroupVersionResource][]any{daemonsets: {&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "atoll-p", Annotations: gen}}}},
			`{"daemonSet":{"generation":1,"observed":true,"desired":0,"current":0,"ready":0,"updated":0}}`},
		{"pod claim alone", "p.pod.x", nil, map[schema.GroupVersionResource][]any{claims: {&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: api.PodClaimName("x", "zone-a"), Namespace: "atoll-p"}}}}, ""},
		{"training", "p.trainingjob.x", nil, map[schema.GroupVersionResource][]any{jobs: {&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "atoll-p", Annotations: map[string]string{api.AnnoGeneration: "1", api.AnnoGangAttempt: "2"}}}}},
			`{"job":{"generation":1},"gang":{"attempt":2}}`},
		{"unknown kind counts its pods", "p.widget.x", []any{running}, nil, `{"pods":1,"running":1,"images":["busybox:1"]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			term := &clusterTerm{
				c:        &cluster{s: &Service{kinds: newKinds()}, member: clusters.Member{Name: "zone-a"}},
				pods:     indexed(tc.key, viewsOf(tc.pods)...),
				indexers: map[schema.GroupVersionResource]cache.Indexer{}, events: map[string][]keyedEvent{},
			}
			for r, objs := range tc.objs {
				term.indexers[r] = indexed(tc.key, objs...)
			}
			obs := term.observation(tc.key)
			if tc.want == "" {
				assert.Nil(t, obs)
				return
			}
			require.NotNil(t, obs)
			b, err := json.Marshal(obs)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(b))
		})
	}
}

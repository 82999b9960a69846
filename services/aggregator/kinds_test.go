package aggregator

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
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

package propagator

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
)

// resyncPass runs one resync pass of r's term in cluster at once (the
// service spreads a pass over its period) and waits until every key was
// checked and the work it made was done.
func resyncPass(tb testing.TB, r *replica, cluster string, full bool) {
	tb.Helper()
	tg := r.s.targets[cluster]
	tt := tg.term.Load()
	require.NotNil(tb, tt, "a term of %s", cluster)
	keys := r.s.placements.Keys()
	tt.markResync(keys, full)
	for _, k := range keys {
		tt.replay.Add(k)
	}
	require.Eventually(tb, func() bool {
		tt.mu.Lock()
		marked := len(tt.verify) + len(tt.force)
		tt.mu.Unlock()
		return marked == 0 && tt.replay.Len() == 0 && tt.work.Len() == 0
	}, time.Minute, 10*time.Millisecond, "the pass checks and applies every key")
	time.Sleep(500 * time.Millisecond) // the last keys' writes finish
}

// deploymentWrites returns the writes to Deployments in ws, by name.
func deploymentWrites(ws []write) map[string]int {
	out := map[string]int{}
	for _, w := range ws {
		if name, ok := w.deployment(); ok && name != "" {
			out[name]++
		}
	}
	return out
}

// TestResyncAppliesOnlyWhatDrifted checks the resync's cost and its
// repair, against a real member cluster: a pass over shards nobody else
// touched makes no API call; a Deployment whose spec another writer
// changed is applied again, and only it; a full pass applies every shard,
// after which a pass is free again.
func TestResyncAppliesOnlyWhatDrifted(t *testing.T) {
	const n = 20
	env := testenv.New(t, testenv.Zones("a")...)
	c := env.Clusters[0]
	pauseControllers(t, c)
	b := openBus(t)
	writes := &writeLog{}
	r := startReplica(t, b, "r1", []*testenv.Cluster{c}, writes, func(s *Service) { s.resync = time.Hour })
	ws := apps(0, n, 1)
	seed(t, b, ws, []string{c.Name}, false)
	require.Eventually(t, func() bool {
		ev, err := propagatedEvents(b)
		return err == nil && len(ev) == n
	}, time.Minute, 50*time.Millisecond, "every App propagated")

	before := len(writes.of(c.Name))
	resyncPass(t, r, c.Name, false)
	assert.Empty(t, writes.of(c.Name)[before:], "writes of a pass over unchanged shards")

	// Another writer changes one Deployment's spec (its generation moves;
	// its labels and the propagator's hash annotation do not).
	ctx := context.Background()
	drifted := ws[3].Metadata.Name
	deployments := c.Client.AppsV1().Deployments(api.Namespace("p"))
	_, err := deployments.Patch(ctx, drifted, types.MergePatchType, []byte(`{"spec":{"replicas":7}}`),
		metav1.PatchOptions{FieldManager: "kubectl-edit"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		obj, ok := r.s.targets[c.Name].liveObject(api.KindApp, api.Namespace("p"), drifted)
		m, isMeta := obj.(metav1.Object)
		return ok && isMeta && m.GetGeneration() > 1
	}, 30*time.Second, 10*time.Millisecond, "the informer sees the change")
	before = len(writes.of(c.Name))
	resyncPass(t, r, c.Name, false)
	got := deploymentWrites(writes.of(c.Name)[before:])
	assert.Equal(t, []string{drifted}, slices.Sorted(maps.Keys(got)), "Deployments a pass applied after one drifted")
	d, err := deployments.Get(ctx, drifted, metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, *d.Spec.Replicas, "the drifted Deployment's replicas after the pass")

	// A full pass applies every shard; the generations it leaves make the
	// next pass free.
	before = len(writes.of(c.Name))
	resyncPass(t, r, c.Name, true)
	got = deploymentWrites(writes.of(c.Name)[before:])
	assert.Len(t, got, n, "Deployments a full pass applied")
	for _, w := range writes.of(c.Name)[before:] {
		assert.NotEqual(t, http.MethodPost, w.method, "a full pass creates nothing: %v", w)
	}
	before = len(writes.of(c.Name))
	resyncPass(t, r, c.Name, false)
	assert.Empty(t, writes.of(c.Name)[before:], "writes of a pass after a full one")

	// A new term (the replica stops; another takes the cluster) has
	// written none of the shards: it takes the generations it finds on
	// objects that carry its hash, so its first pass is free too. A spec
	// changed while no term held the cluster is applied again by the
	// next full pass.
	r.s.Stop()
	_, err = deployments.Patch(ctx, drifted, types.MergePatchType, []byte(`{"spec":{"replicas":5}}`),
		metav1.PatchOptions{FieldManager: "kubectl-edit"})
	require.NoError(t, err)
	r2 := startReplica(t, b, "r2", []*testenv.Cluster{c}, writes, func(s *Service) { s.resync = time.Hour })
	require.Eventually(t, func() bool {
		tt := r2.s.targets[c.Name].term.Load()
		return tt != nil && tt.replayLeft.Load() == 0
	}, time.Minute, 10*time.Millisecond, "the new term's replay")
	before = len(writes.of(c.Name))
	resyncPass(t, r2, c.Name, false)
	assert.Empty(t, deploymentWrites(writes.of(c.Name)[before:]), "Deployments the new term's first pass applied")
	resyncPass(t, r2, c.Name, true)
	d, err = deployments.Get(ctx, drifted, metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, *d.Spec.Replicas, "the Deployment changed between terms, after the new term's full pass")
}

package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/events"
)

// testLog is quiet unless ATOLL_TEST_DEBUG is set.
func testLog() *slog.Logger {
	if os.Getenv("ATOLL_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return discard
}

func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	if testing.Short() {
		t.Skip("embedded NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name(), Logger: testLog()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func putJSON(t *testing.T, b *bus.Bus, bucket, key string, v any) uint64 {
	t.Helper()
	kv, err := b.KV(context.Background(), bucket)
	require.NoError(t, err)
	body, err := json.Marshal(v)
	require.NoError(t, err)
	rev, err := kv.Put(context.Background(), key, body)
	require.NoError(t, err)
	return rev
}

// storedStatusDoc returns the stored status of key and its revision (0
// when there is none).
func storedStatusDoc(t *testing.T, b *bus.Bus, key string) (statusDoc, uint64) {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketStatus)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return statusDoc{}, 0
	}
	require.NoError(t, err)
	var doc statusDoc
	require.NoError(t, json.Unmarshal(e.Value(), &doc))
	return doc, e.Revision()
}

// eventCount counts the events stored for w on event, and returns the
// idempotency key of the last one.
func eventCount(t *testing.T, b *bus.Bus, w *api.Workload, event string) (uint64, string) {
	t.Helper()
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, bus.StreamEvents)
	require.NoError(t, err)
	subj := bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, event)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	require.NoError(t, err)
	n := info.State.Subjects[subj]
	if n == 0 {
		return 0, ""
	}
	m, err := s.GetLastMsgForSubject(ctx, subj)
	require.NoError(t, err)
	return n, m.Header.Get(jetstream.MsgIDHeader)
}

// folding runs terms of the status lease for a replica that observes no
// cluster itself (the test writes the observations).
type folding struct {
	t      *testing.T
	s      *Service
	cancel context.CancelFunc
	done   chan struct{}
}

func newFoldingReplica(t *testing.T, b *bus.Bus, names ...string) *Service {
	t.Helper()
	var ms clusters.Members
	for _, n := range names {
		ms = append(ms, clusters.Member{Name: n, Zone: n, Kubeconfig: deadKubeconfig(t)})
	}
	s, err := New(b, testLog(), ms)
	require.NoError(t, err)
	s.eventOpts = events.Options{MaxWait: 200 * time.Millisecond}
	require.NoError(t, s.open(context.Background()))
	t.Cleanup(s.foldMirrors.stop) // kept across terms: Stop's, which these tests do not call
	return s
}

// start begins a term and waits until it folds.
func (f *folding) start() {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() { defer close(f.done); f.s.leadFolding(ctx) }()
	require.Eventually(f.t, func() bool { return f.s.folding() != nil }, 10*time.Second, 10*time.Millisecond, "folding term started")
}

// stop ends the term and waits for it.
func (f *folding) stop() {
	f.cancel()
	<-f.done
}

// TestFolderSyncAndEvents drives the status lease holder with hand-written
// observations: a status is folded only from clusters whose terms have
// synced, each phase is announced once, and an event lost to a crash
// between the status write and its publish is published by the next term,
// once, under the idempotency key of the write.
func TestFolderSyncAndEvents(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := newFoldingReplica(t, b, "zone-a", "zone-b")
	three := int32(3)
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web", Generation: 1},
		Spec: &api.AppSpec{Replicas: &three}}
	key := w.Key()
	for _, c := range []string{"zone-a", "zone-b"} {
		putJSON(t, b, bus.BucketClusters, c, api.ClusterInfo{Name: c, Zone: c, Healthy: true})
		putJSON(t, b, bus.BucketObservations, c, marker{Holder: "h1", Term: "h1/1", Synced: true})
	}
	putJSON(t, b, bus.BucketWorkloads, key, w)
	putJSON(t, b, bus.BucketPlacements, key, api.PlacementDecision{Key: key, Generation: 1, Shards: []api.Shard{
		{Cluster: "zone-a", Zone: "zone-a", Replicas: 2}, {Cluster: "zone-b", Zone: "zone-b", Replicas: 1}}})
	shard := func(ready int32, n int32) observation {
		return observation{Pods: n, Running: ready, Ready: ready,
			Part: &appPart{Deployment: &deploymentObservation{Generation: 1, Observed: true, Replicas: n, Updated: n, Available: ready}}}
	}
	putJSON(t, b, bus.BucketObservations, observationKey("zone-a", key), shard(2, 2))
	putJSON(t, b, bus.BucketObservations, observationKey("zone-b", key), shard(1, 1))
	require.NoError(t, s.pub.Publish(ctx, w, api.EventPropagated, "", 1))

	f := &folding{t: t, s: s}
	f.start()
	phase := func(want string) func() bool {
		return func() bool { doc, _ := storedStatusDoc(t, b, key); return doc.Phase == want }
	}
	require.Eventually(t, phase(api.PhaseRunning), 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { n, _ := eventCount(t, b, w, api.EventRunning); return n == 1 }, 5*time.Second, 10*time.Millisecond)
	_, runningRev := storedStatusDoc(t, b, key)

	// zone-b gets a new observer whose caches are filling: nothing it
	// might say moves the status until its term has synced.
	putJSON(t, b, bus.BucketObservations, "zone-b", marker{Holder: "h2", Term: "h2/1"})
	putJSON(t, b, bus.BucketObservations, observationKey("zone-b", key), shard(0, 1))
	require.Eventually(t, func() bool {
		term := s.folding()
		term.mu.Lock()
		defer term.mu.Unlock()
		return term.blocked["zone-b"][key]
	}, 5*time.Second, 10*time.Millisecond, "the fold waits for zone-b")
	doc, rev := storedStatusDoc(t, b, key)
	assert.Equal(t, api.PhaseRunning, doc.Phase)
	assert.Equal(t, runningRev, rev, "no status written while zone-b syncs")
	n, _ := eventCount(t, b, w, api.EventProgressing)
	assert.Zero(t, n, "no progressing event while zone-b syncs")

	// Synced, its observation stands: a pod is not ready.
	putJSON(t, b, bus.BucketObservations, "zone-b", marker{Holder: "h2", Term: "h2/1", Synced: true})
	require.Eventually(t, phase(api.PhaseProgressing), 5*time.Second, 10*time.Millisecond)
	_, progressingRev := storedStatusDoc(t, b, key)
	require.Eventually(t, func() bool { n, _ := eventCount(t, b, w, api.EventProgressing); return n == 1 }, 5*time.Second, 10*time.Millisecond)
	_, id := eventCount(t, b, w, api.EventProgressing)
	assert.Equal(t, events.MsgID(key, api.EventProgressing, progressingRev), id)

	// The pod is ready again; the replica dies between the status write
	// and the event.
	f.stop()
	s.afterStatusWrite = func(string) error {
		f.cancel()
		return errors.New("killed after the status write")
	}
	f.start()
	putJSON(t, b, bus.BucketObservations, observationKey("zone-b", key), shard(1, 1))
	<-f.done
	s.afterStatusWrite = nil
	doc, rev = storedStatusDoc(t, b, key)
	require.Equal(t, api.PhaseRunning, doc.Phase, "the status was written")
	n, _ = eventCount(t, b, w, api.EventRunning)
	require.Equal(t, uint64(1), n, "its event was not")

	// The next term publishes it under the write's key, once; and the
	// term after that has nothing to add.
	f.start()
	require.Eventually(t, func() bool { n, _ := eventCount(t, b, w, api.EventRunning); return n == 2 }, 5*time.Second, 10*time.Millisecond)
	_, id = eventCount(t, b, w, api.EventRunning)
	assert.Equal(t, events.MsgID(key, api.EventRunning, rev), id)
	f.stop()
	f.start()
	require.Eventually(t, func() bool { return s.folding().folds.Load() >= 1 }, 5*time.Second, 10*time.Millisecond)
	f.stop()
	n, _ = eventCount(t, b, w, api.EventRunning)
	assert.Equal(t, uint64(2), n, "a restart republishes nothing already published")
	_, after := storedStatusDoc(t, b, key)
	assert.Equal(t, rev, after, "nor rewrites an unchanged status")
}

// A replica's next status term (the lease lost in a NATS restart and taken
// back) folds from the mirrors its first term loaded, not from new ones
// loading every key again; between terms they queue to no one.
func TestNextTermKeepsTheMirrors(t *testing.T) {
	b := openBus(t)
	s := newFoldingReplica(t, b, "zone-a")
	f := &folding{t: t, s: s}
	f.start()
	first := s.folding().workloads
	f.stop()
	assert.Nil(t, s.foldLive.Load(), "the ended term still gets the mirrors' changes")
	f.start()
	assert.Same(t, first, s.folding().workloads, "the next term loaded its own mirror")
	f.stop()
}

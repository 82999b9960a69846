package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// The bus side of the tests: an embedded NATS server, and workloads,
// placements and events written as admission and the scheduler write them.

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
}

// logLevel is Error, or Debug with ATOLL_TEST_LOG set.
func logLevel() slog.Level {
	if os.Getenv("ATOLL_TEST_LOG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelError
}

func openBus(tb testing.TB) *bus.Bus {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: tb.TempDir(), Name: tb.Name(), Logger: quietLog()})
	require.NoError(tb, err)
	tb.Cleanup(b.Close)
	return b
}

// app returns the App name of the test project with replicas pods.
func app(name string, replicas int32) *api.Workload {
	spec := &api.AppSpec{Replicas: &replicas}
	spec.Template.Containers = []api.Container{{Name: "web", Image: "nginx"}}
	spec.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: name, Generation: 1}, Spec: spec}
}

// apps returns the Apps app-<from> .. app-<to-1>.
func apps(from, to int, replicas int32) []*api.Workload {
	ws := make([]*api.Workload, 0, to-from)
	for i := from; i < to; i++ {
		ws = append(ws, app(fmt.Sprintf("app-%05d", i), replicas))
	}
	return ws
}

// seeded is a workload written with its placement.
type seeded struct {
	w    *api.Workload
	p    api.PlacementDecision
	prev uint64 // placement revision
}

// seed writes workloads and their placements (one shard per cluster
// named, the pods divided evenly), with their admitted and scheduled
// events; with propagated set, their propagated events too, as a
// propagator that ran before would have. It writes in parallel: a test
// may seed thousands.
func seed(tb testing.TB, b *bus.Bus, ws []*api.Workload, clusterNames []string, propagated bool) []seeded {
	tb.Helper()
	ctx := context.Background()
	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(tb, err)
	pkv, err := b.KV(ctx, bus.BucketPlacements)
	require.NoError(tb, err)
	out := make([]seeded, len(ws))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := seedOne(ctx, b, wkv, pkv, ws[i], clusterNames, propagated, &out[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range ws {
		next <- i
	}
	close(next)
	wg.Wait()
	require.NoError(tb, errors.Join(errs...))
	return out
}

func seedOne(ctx context.Context, b *bus.Bus, wkv, pkv jetstream.KeyValue, w *api.Workload, clusterNames []string, propagated bool, out *seeded) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	wrev, err := wkv.Put(ctx, w.Key(), body)
	if err != nil {
		return fmt.Errorf("seed %s: %w", w.Key(), err)
	}
	p := api.PlacementDecision{Key: w.Key(), Generation: w.Metadata.Generation, Decided: time.Now().UTC()}
	per := w.Spec.Pods() / int32(len(clusterNames))
	for _, c := range clusterNames {
		p.Shards = append(p.Shards, api.Shard{Cluster: c, Zone: c, Replicas: per})
	}
	pb, err := json.Marshal(&p)
	if err != nil {
		return err
	}
	if err := announce(ctx, b, w, api.EventAdmitted, wrev); err != nil {
		return err
	}
	prev, err := pkv.Put(ctx, w.Key(), pb)
	if err != nil {
		return fmt.Errorf("seed placement %s: %w", w.Key(), err)
	}
	if err := announce(ctx, b, w, api.EventScheduled, prev); err != nil {
		return err
	}
	if propagated {
		if err := announce(ctx, b, w, api.EventPropagated, prev); err != nil {
			return err
		}
	}
	*out = seeded{w: w, p: p, prev: prev}
	return nil
}

// announce publishes an event as its service does, without waiting for
// its predecessor.
func announce(ctx context.Context, b *bus.Bus, w *api.Workload, event string, rev uint64) error {
	body, err := json.Marshal(api.WorkloadEvent{Project: w.Metadata.Project, Kind: w.Kind, Name: w.Metadata.Name, Event: event, Generation: w.Metadata.Generation, Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := b.Publish(ctx, bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, event), events.MsgID(w.Key(), event, rev), body, nil); err != nil {
		return fmt.Errorf("announce %s %s: %w", w.Key(), event, err)
	}
	return nil
}

// rendered is the object the propagator renders for a seeded workload's
// shard in cluster, stamped with its spec hash.
func rendered(sw seeded, cluster string) (object, error) {
	d := &desired{workload: sw.w, kind: newKinds()[sw.w.Kind], placement: &sw.p, hashes: map[string]string{}}
	return d.render(cluster)
}

// propagatedEvents counts the propagated events in the stream per
// workload key.
func propagatedEvents(b *bus.Bus) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"atoll.evt.*.*.*." + api.EventPropagated}})
	if err != nil {
		return nil, fmt.Errorf("read propagated events: %w", err)
	}
	out := map[string]int{}
	for {
		batch, err := c.FetchNoWait(1000)
		if err != nil {
			return nil, fmt.Errorf("read propagated events: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev api.WorkloadEvent
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return nil, fmt.Errorf("propagated event %s: %w", m.Subject(), err)
			}
			out[api.Key(ev.Project, ev.Kind, ev.Name)]++
		}
		if n == 0 {
			return out, nil
		}
	}
}

// waitEvent waits for the next message on sub and returns when it came.
func waitEvent(tb testing.TB, sub *nats.Subscription, within time.Duration) time.Time {
	tb.Helper()
	_, err := sub.NextMsg(within)
	require.NoError(tb, err, "no event within %v", within)
	return time.Now()
}

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// fakeCluster is a member cluster in memory: one store of object metadata
// (what the informers list and watch) behind typed and dynamic clients
// whose writes land in it. Each replica gets clients of its own, so every
// write is recorded with the replica that made it.
type fakeCluster struct {
	name string
	meta *metadatafake.FakeMetadataClient

	mu     sync.Mutex
	writes []write // mu must be held
}

// write is one create, apply or delete of a shard's object.
type write struct {
	replica string
	verb    string
	key     string // namespace/name
	at      time.Time
}

func newFakeCluster(name string, objs ...runtime.Object) *fakeCluster {
	scheme := metadatafake.NewTestScheme()
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: "batch", Version: "v1", Kind: "Job"}, {Version: "v1", Kind: "Pod"},
	} {
		scheme.AddKnownTypeWithName(gvk, &metav1.PartialObjectMetadata{})
		scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &metav1.PartialObjectMetadataList{})
	}
	return &fakeCluster{name: name, meta: metadatafake.NewSimpleMetadataClient(scheme, objs...)}
}

func (c *fakeCluster) record(replica, verb, ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, write{replica: replica, verb: verb, key: ns + "/" + name, at: time.Now()})
}

// Writes returns the writes so far, in order.
func (c *fakeCluster) Writes() []write {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]write(nil), c.writes...)
}

// put stores an object's metadata as the API server would keep it.
func (c *fakeCluster) put(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, m metav1.Object, create bool) error {
	pom := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), Labels: m.GetLabels(), Annotations: m.GetAnnotations(),
		},
	}
	tr := c.meta.Tracker()
	if create {
		return tr.Create(gvr, pom, pom.Namespace)
	}
	if _, err := tr.Get(gvr, pom.Namespace, pom.Name); apierrors.IsNotFound(err) {
		return tr.Create(gvr, pom, pom.Namespace)
	}
	return tr.Update(gvr, pom, pom.Namespace)
}

// clientsFor returns the clients one replica uses.
func (c *fakeCluster) clientsFor(replica string) clients {
	cs := k8sfake.NewClientset()
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateAction)
		obj := ca.GetObject()
		m := obj.(metav1.Object)
		c.record(replica, "create", ca.GetNamespace(), m.GetName())
		gvk := obj.GetObjectKind().GroupVersionKind()
		if err := c.put(ca.GetResource(), gvk, m, true); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(pa.GetPatch(), &u.Object); err != nil {
			return true, nil, err
		}
		if pa.GetResource().Resource == "namespaces" {
			return true, u, nil
		}
		c.record(replica, "apply", pa.GetNamespace(), pa.GetName())
		if err := c.put(pa.GetResource(), u.GroupVersionKind(), u, false); err != nil {
			return true, nil, err
		}
		return true, u, nil
	})
	dyn.PrependReactor("delete", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		da := a.(k8stesting.DeleteAction)
		c.record(replica, "delete", da.GetNamespace(), da.GetName())
		return true, nil, c.meta.Tracker().Delete(da.GetResource(), da.GetNamespace(), da.GetName())
	})
	return clients{dyn: dyn, cs: cs, meta: c.meta}
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
}

func openBus(t testing.TB) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// app returns App i of the test project with replicas pods.
func app(i int, replicas int32) *api.Workload {
	spec := &api.AppSpec{Replicas: &replicas}
	spec.Template.Containers = []api.Container{{Name: "web", Image: "nginx"}}
	spec.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: fmt.Sprintf("app-%05d", i), Generation: 1}, Spec: spec}
}

// seeded is a workload written with its placement.
type seeded struct {
	w    *api.Workload
	p    api.PlacementDecision
	prev uint64 // placement revision
}

// seed writes workloads and their placements (one shard per cluster
// named), with their admitted and scheduled events; with propagated
// set, their propagated events too, as a propagator that ran before would
// have. It writes in parallel: a test may seed thousands.
func seed(t testing.TB, b *bus.Bus, ws []*api.Workload, clusterNames []string, propagated bool) []seeded {
	t.Helper()
	ctx := context.Background()
	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	pkv, err := b.KV(ctx, bus.BucketPlacements)
	require.NoError(t, err)
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
	require.NoError(t, errors.Join(errs...))
	return out
}

func seedOne(ctx context.Context, b *bus.Bus, wkv, pkv jetstream.KeyValue, w *api.Workload, clusterNames []string, propagated bool, out *seeded) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	wrev, err := wkv.Put(ctx, w.Key(), body)
	if err != nil {
		return err
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
		return err
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
	_, err = b.Publish(ctx, bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, event), events.MsgID(w.Key(), event, rev), body, nil)
	return err
}

// liveObject is the metadata of the Deployment a propagator would have
// made for a seeded workload's shard in cluster.
func liveObject(sw seeded, cluster string) *metav1.PartialObjectMetadata {
	d := &desired{workload: sw.w, placement: &sw.p, hashes: map[string]string{}}
	o, err := d.render(cluster)
	if err != nil {
		panic(err)
	}
	m := o.obj.(metav1.Object)
	gvk := o.obj.(runtime.Object).GetObjectKind().GroupVersionKind()
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), Labels: m.GetLabels(), Annotations: m.GetAnnotations()},
	}
}

// propagatedEvents counts the propagated events per workload key.
func propagatedEvents(t testing.TB, b *bus.Bus) map[string]int {
	t.Helper()
	ctx := context.Background()
	c, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"atoll.evt.*.*.*." + api.EventPropagated}})
	require.NoError(t, err)
	out := map[string]int{}
	for {
		batch, err := c.FetchNoWait(1000)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var ev api.WorkloadEvent
			require.NoError(t, json.Unmarshal(m.Data(), &ev))
			out[api.Key(ev.Project, ev.Kind, ev.Name)]++
		}
		if n == 0 {
			return out
		}
	}
}

// waitEvent waits for the next message on subject and returns when it came.
func waitEvent(t testing.TB, sub *nats.Subscription, within time.Duration) time.Time {
	t.Helper()
	_, err := sub.NextMsg(within)
	require.NoError(t, err, "no event within %v", within)
	return time.Now()
}

// logLevel is Error, or Debug with ATOLL_TEST_LOG set.
func logLevel() slog.Level {
	if os.Getenv("ATOLL_TEST_LOG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelError
}

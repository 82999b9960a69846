package propagator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// clients reach one member cluster, on one transport of their own.
type clients struct {
	dyn  dynamic.Interface
	cs   kubernetes.Interface // protobuf on the wire
	meta metadata.Interface
	conn *clusters.Conn // their transport and connections
}

func clientsFor(m clusters.Member) (clients, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return clients{}, err
	}
	return newClients(m.Name, cfg)
}

// newClients builds the clients of cluster name on cfg (tests wrap its
// transport to see which replica writes what).
func newClients(name string, cfg *rest.Config) (clients, error) {
	cfg = rest.CopyConfig(cfg)
	// A frozen cluster must fail fast: its breaker opens after a few of these.
	cfg.Timeout = 5 * time.Second
	conn, err := clusters.Connect(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, conn.HTTP)
	if err != nil {
		return clients{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	// Informers' watches must not time out: the same transport, no timeout.
	mcfg := rest.CopyConfig(cfg)
	mcfg.Timeout = 0
	meta, err := metadata.NewForConfigAndClient(mcfg, &http.Client{Transport: conn.HTTP.Transport})
	if err != nil {
		return clients{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfigAndClient(pcfg, conn.HTTP)
	if err != nil {
		return clients{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	return clients{dyn: dyn, cs: cs, meta: meta, conn: conn}, nil
}

// close closes the clients' connections once their requests and watches
// have ended.
func (c clients) close() { c.conn.Close() }

// target applies shards to one member cluster.
type target struct {
	s    *Service
	name string
	clients
	log *slog.Logger
	// informers hold the platform's objects here, by kind: every replica
	// runs them, so a term starts with them warm.
	informers map[string]cache.SharedIndexInformer

	// term is the current term while this replica holds the cluster's lease.
	term atomic.Pointer[term]

	// endpointsKick wakes the term's endpoint loop (endpoints.go).
	endpointsKick chan struct{}

	mu         sync.Mutex
	namespaces map[string]bool // mu must be held: namespaces known to exist
	// configAccess are the namespaces where the config role is bound (configsync.go).
	configAccess map[string]bool // mu must be held
}

// term is one tenure of a cluster's lease.
type term struct {
	work, replay *bus.Queue
	// replayLeft counts the keys of the first replay not checked yet.
	replayLeft atomic.Int64
	// fenced says the CronJob fence was applied to the cluster in this
	// term (kind_cronjob.go); a new term applies it again.
	fenced atomic.Bool

	mu sync.Mutex
	// done records what this term did to a key's object: the hash it
	// applied, or removed. It is newer than the informer, which may lag.
	done  map[string]string // mu must be held
	force map[string]bool   // mu must be held: apply even if it looks current (resync)
	// verify marks the keys a resync pass checks: applied again unless
	// their main object still has the generation in gens.
	verify map[string]bool // mu must be held
	// gens is the main object's generation after this term's last write
	// of each key (0: unknown, or a kind without generations).
	gens map[string]int64 // mu must be held
	// configs records the version of each Config's or Secret's copy
	// this term wrote, by "namespace/Kind/name" (configsync.go).
	configs map[string]string // mu must be held
}

// removed marks a key whose object this term deleted.
const removed = "\x00removed"

// newTerm returns a term of cluster's lease whose queues retry a failing
// key after at most retryMax (0: bus.RetryMax).
func newTerm(m *bus.Metrics, cluster string, retryMax time.Duration) *term {
	tt := &term{
		work:   bus.NewQueue(bus.Instrumented(m, "work/"+cluster), bus.RetryUpTo(retryMax)),
		replay: bus.NewQueue(bus.Instrumented(m, "replay/"+cluster), bus.RetryUpTo(retryMax)),
		done:   map[string]string{}, force: map[string]bool{}, configs: map[string]string{},
		verify: map[string]bool{}, gens: map[string]int64{},
	}
	tt.replayLeft.Store(-1) // until the replay is known
	return tt
}

// record notes that this term wrote key's object with hash, leaving its
// main object at generation gen (0: unknown).
func (tt *term) record(key, hash string, gen int64) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.done[key] = hash
	if gen > 0 {
		tt.gens[key] = gen
	} else {
		delete(tt.gens, key)
	}
}

func (tt *term) forgetDone(key string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	delete(tt.done, key)
	delete(tt.gens, key)
}

// adoptGen takes gen as key's baseline when this term has none (see
// target.adopt).
func (tt *term) adoptGen(key string, gen int64) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if _, ok := tt.gens[key]; !ok && gen > 0 {
		tt.gens[key] = gen
	}
}

// generation returns the generation this term's last write of key left.
func (tt *term) generation(key string) (int64, bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	g, ok := tt.gens[key]
	return g, ok
}

// markResync marks keys for a resync pass: every one forced when full,
// else every one to verify.
func (tt *term) markResync(keys []string, full bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	m := tt.verify
	if full {
		m = tt.force
	}
	for _, k := range keys {
		m[k] = true
	}
}

// takeVerify reports and clears whether a resync pass marked key to verify.
func (tt *term) takeVerify(key string) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	v := tt.verify[key]
	delete(tt.verify, key)
	return v
}

func (tt *term) lookup(key string) (string, bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	h, ok := tt.done[key]
	return h, ok
}

// forced reports, and with take clears, whether key must be applied anyway.
func (tt *term) forced(key string, take bool) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	f := tt.force[key]
	if take {
		delete(tt.force, key)
	}
	return f
}

func (tt *term) forceAll(keys []string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for _, k := range keys {
		tt.force[k] = true
	}
}

func newTarget(s *Service, name string, c clients) *target {
	t := &target{
		s: s, name: name, clients: c, log: s.log.With("cluster", name),
		informers: map[string]cache.SharedIndexInformer{}, namespaces: map[string]bool{}, configAccess: map[string]bool{},
		endpointsKick: make(chan struct{}, 1),
	}
	for name, k := range s.kinds {
		t.watch(name, name, k.resource(), c)
		if mf, ok := k.(multiForm); ok {
			for _, gvr := range mf.forms() {
				t.watch(name, formKey(name, gvr), gvr, c)
			}
		}
	}
	return t
}

// multiForm is a kind whose main object may be of other resources than
// its resource() (a stateful App is a StatefulSet): each is watched too.
type multiForm interface {
	forms() []schema.GroupVersionResource
}

// formKey is the informers' key of a kind's other form gvr.
func formKey(kindName string, gvr schema.GroupVersionResource) string {
	return kindName + "/" + gvr.Resource
}

// informerOf returns the informer of kind kindName's main objects of
// resource gvr, nil when none watches it.
func (t *target) informerOf(kindName string, gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	if k, ok := t.s.kinds[kindName]; ok && k.resource() == gvr {
		return t.informers[kindName]
	}
	return t.informers[formKey(kindName, gvr)]
}

// liveObject returns kindName's main object ns/name as the informers
// hold it, in any of its forms.
func (t *target) liveObject(kindName, ns, name string) (any, bool) {
	k, ok := t.s.kinds[kindName]
	if !ok {
		return nil, false
	}
	gvrs := []schema.GroupVersionResource{k.resource()}
	if mf, ok := k.(multiForm); ok {
		gvrs = append(gvrs, mf.forms()...)
	}
	for _, gvr := range gvrs {
		inf := t.informerOf(kindName, gvr)
		if inf == nil {
			continue
		}
		if obj, ok, err := inf.GetIndexer().GetByKey(ns + "/" + name); err == nil && ok {
			return obj, true
		}
	}
	return nil, false
}

// liveIn reports whether kindName's main object ns/name of resource gvr
// is in the informers.
func (t *target) liveIn(kindName string, gvr schema.GroupVersionResource, ns, name string) bool {
	inf := t.informerOf(kindName, gvr)
	if inf == nil {
		return false
	}
	_, ok, err := inf.GetIndexer().GetByKey(ns + "/" + name)
	return err == nil && ok
}

// watch starts an informer, under key, of kindName's managed objects of
// resource gvr.
func (t *target) watch(kindName, key string, gvr schema.GroupVersionResource, c clients) {
	{
		selector := api.LabelManaged + "=true," + api.LabelKind + "=" + api.KindLabel(kindName)
		inf := metadatainformer.NewFilteredMetadataInformer(c.meta, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
		_ = inf.SetTransform(clusters.DropManagedFields) // the informers need labels and annotations only
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(obj any, initial bool) {
				if !initial {
					t.observe(obj, false)
				}
			},
			UpdateFunc: func(old, obj any) {
				if hashOf(old) != hashOf(obj) {
					t.observe(obj, false)
				}
			},
			DeleteFunc: func(obj any) { t.observe(obj, true) },
		})
		t.informers[key] = inf
	}
}

func (t *target) startInformers(ctx context.Context) {
	for _, inf := range t.informers {
		t.s.wg.Go(func() { inf.RunWithContext(ctx) })
	}
}

// informersSynced waits until every informer has listed the cluster;
// false when ctx ended first.
func (t *target) informersSynced(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, 0, len(t.informers))
	all := true
	for _, inf := range t.informers {
		synced = append(synced, inf.HasSynced)
		all = all && inf.HasSynced()
	}
	// WaitForCacheSync polls every 100ms, even when all are synced.
	return all || cache.WaitForCacheSync(ctx.Done(), synced...)
}

// hashOf returns an informer object's spec hash; "" for one going away.
func hashOf(obj any) string {
	m, ok := obj.(metav1.Object)
	if !ok || m.GetDeletionTimestamp() != nil {
		return ""
	}
	return m.GetAnnotations()[AnnoSpecHash]
}

// keyOf returns the workload key of an informer object.
func keyOf(obj any) (string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", false
	}
	l := m.GetLabels()
	if l[api.LabelProject] == "" || l[api.LabelKind] == "" || l[api.LabelWorkload] == "" {
		return "", false
	}
	// Keys spell kinds as labels do: in lower case.
	return api.Key(l[api.LabelProject], l[api.LabelKind], l[api.LabelWorkload]), true
}

// observe reacts to a change the informer saw: an object that went is put
// back if its shard is still wanted, and the workload's announcer looks
// again.
func (t *target) observe(obj any, deleted bool) {
	key, ok := keyOf(obj)
	if !ok {
		return
	}
	if deleted {
		if tt := t.term.Load(); tt != nil {
			tt.forgetDone(key)
			tt.work.Add(key)
		}
	}
	t.s.seen(key)
}

// live returns the hash of key's object in this cluster's informer, and
// whether there is one (terminating objects have the hash "").
func (t *target) live(key string) (string, bool) {
	project, kindName, name, err := api.ParseKey(key)
	if err != nil {
		return "", false
	}
	obj, ok := t.liveObject(kindName, api.Namespace(project), name)
	if !ok {
		return "", false
	}
	return hashOf(obj), true
}

// observed returns the hash key's object has here as this replica knows
// it (what its term did, else the informer), and whether one exists.
func (t *target) observed(key string) (string, bool) {
	if tt := t.term.Load(); tt != nil {
		if h, ok := tt.lookup(key); ok {
			if h == removed {
				return "", false
			}
			return h, true
		}
	}
	return t.live(key)
}

func (t *target) holds(key string) bool {
	_, ok := t.observed(key)
	return ok
}

// liveKeys lists the keys with objects here, per the informers.
func (t *target) liveKeys() []string {
	var out []string
	for _, inf := range t.informers {
		for _, obj := range inf.GetStore().List() {
			if k, ok := keyOf(obj); ok {
				out = append(out, k)
			}
		}
	}
	return out
}

// isClusterFailure says which errors count against a cluster's breaker:
// not the answers of a working API server about one object.
func isClusterFailure(err error) bool {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsNotFound(err), apierrors.IsConflict(err),
		apierrors.IsAlreadyExists(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err),
		apierrors.IsUnauthorized(err), apierrors.IsGone(err):
		return false
	}
	return true
}

func (t *target) call(fn func() error) error {
	_, err := t.s.breakers.Execute(t.name, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// lead runs one term of the cluster's lease; it returns when ctx ends
// (the lease is lost or the service stops).
func (t *target) lead(ctx context.Context) {
	start := time.Now()
	if !t.s.mirrorsReady(ctx) {
		return
	}
	tt := newTerm(t.s.metrics, t.name, t.s.retryMax)
	t.term.Store(tt)
	defer t.term.CompareAndSwap(tt, nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		tt.work.Run(ctx, WorkersPerCluster, t.log, func(ctx context.Context, key string) error { return t.reconcile(ctx, tt, key) })
	})
	if t.informersSynced(ctx) {
		// New first: a key with a shard here and no object yet is work;
		// every other key is replayed (checked, and sent to work only if
		// its object is not what the placement wants).
		fresh, replay := t.classify()
		for _, k := range fresh {
			tt.work.Add(k)
		}
		for _, k := range replay {
			tt.replay.Add(k)
		}
		for _, p := range t.s.configProjects() {
			tt.work.Add(configsKey(p)) // configsync.go
		}
		tt.replayLeft.Store(int64(len(replay)))
		t.log.Info("term started", "holder", t.s.holder, "new", len(fresh), "replay", len(replay), "elapsed", time.Since(start).Round(time.Millisecond))
		wg.Go(func() { t.resync(ctx, tt) })
		for _, k := range t.s.kinds {
			wg.Go(func() { k.lead(ctx, t, tt) })
		}
		tt.replay.Run(ctx, ReplayWorkersPerCluster, t.log, func(ctx context.Context, key string) error {
			err := t.check(ctx, tt, key)
			if err == nil && tt.replayLeft.Add(-1) == 0 {
				t.log.Info("replay done", "keys", len(replay), "elapsed", time.Since(start).Round(time.Millisecond))
			}
			return err
		})
	}
	wg.Wait()
}

// resync queues every key into the term's replay queue once a period
// (Resync), spread over it. Every FullResyncEvery-th pass forces each
// key's apply; the others apply a key only when its main object's
// generation is not the one this term's last write left, or the one it
// found when it began (check, adopt).
func (t *target) resync(ctx context.Context, tt *term) {
	period, every := cmp.Or(t.s.resync, Resync), cmp.Or(t.s.fullResyncEvery, FullResyncEvery)
	pass := 0
	t.s.placements.Resync(ctx, period, tt.replay, func() {
		pass++
		tt.markResync(t.s.placements.Keys(), pass%every == 0)
	})
}

// unchanged reports whether key's main object in the informers has the
// generation this term's last write of it left: no one else changed its
// spec since.
func (t *target) unchanged(tt *term, key string) bool {
	g, ok := tt.generation(key)
	if !ok {
		return false
	}
	live, ok := t.liveGeneration(key)
	return ok && live == g
}

// adopt takes, for a key this term has not written whose object here
// carries the hash this term would apply, the main object's generation as
// observed as the baseline of its resync checks: a term then does not
// apply every shard again in its first pass (at 100,000 workloads, 10 a
// second per cluster for about 2.8 hours after every restart or
// failover). A spec changed by another writer while no term held the
// cluster, its hash annotation left as it was, is applied again by the
// next full pass (FullResyncEvery) rather than the first.
func (t *target) adopt(tt *term, key string) {
	if _, ok := tt.generation(key); ok {
		return
	}
	if g, ok := t.liveGeneration(key); ok {
		tt.adoptGen(key, g)
	}
}

// liveGeneration is the generation of key's main object in the informers.
func (t *target) liveGeneration(key string) (int64, bool) {
	project, kindName, name, err := api.ParseKey(key)
	if err != nil {
		return 0, false
	}
	obj, ok := t.liveObject(kindName, api.Namespace(project), name)
	if !ok {
		return 0, false
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return 0, false
	}
	return m.GetGeneration(), true
}

// classify splits the keys a term starts with: those whose placement has
// a shard here without an object here are new; the others (with an
// object here, or none wanted) are replayed. It decodes placements only.
func (t *target) classify() (fresh, replay []string) {
	seen := map[string]bool{}
	for _, k := range t.s.placements.Keys() {
		seen[k] = true
		e, ok := t.s.placements.Get(k)
		if !ok {
			continue
		}
		var p struct {
			Shards []struct {
				Cluster string `json:"cluster"`
			} `json:"shards"`
		}
		if json.Unmarshal(e.Value, &p) != nil {
			replay = append(replay, k)
			continue
		}
		wanted := slices.ContainsFunc(p.Shards, func(s struct {
			Cluster string `json:"cluster"`
		}) bool {
			return s.Cluster == t.name
		})
		_, exists := t.live(k)
		switch {
		case wanted && !exists:
			fresh = append(fresh, k)
		case wanted || exists:
			replay = append(replay, k)
		}
	}
	for _, k := range t.liveKeys() {
		if !seen[k] {
			replay = append(replay, k) // no placement: removed if held
		}
	}
	return fresh, replay
}

// desired returns the desired state of key, or nil when there is none to
// act on yet: the workload mirror lags the placement (the key comes back
// to the work queue shortly) or the state cannot be decoded (logged).
func (t *target) desired(tt *term, key string) *desired {
	d, err := t.s.desiredFor(key)
	switch {
	case errors.Is(err, errWait):
		tt.work.AddAfter(key, 100*time.Millisecond)
		return nil
	case err != nil:
		t.log.Error("cannot propagate", "key", key, "err", err)
		return nil
	}
	return d
}

// check is the replay queue's reconcile: a key whose object here is what
// its placement wants only gets its announcement ensured; any other goes
// to the work queue.
func (t *target) check(ctx context.Context, tt *term, key string) error {
	if _, ok := configsProject(key); ok {
		tt.work.Add(key)
		return nil
	}
	verify := tt.takeVerify(key)
	d := t.desired(tt, key)
	if d == nil {
		return nil
	}
	if d.shard(t.name) == nil {
		if t.holds(key) {
			tt.work.Add(key)
		}
		return nil
	}
	want, err := d.hash(t.name)
	if err != nil {
		t.log.Error("cannot propagate", "key", key, "err", err)
		return nil
	}
	got, _ := t.observed(key)
	if got == want {
		t.adopt(tt, key)
	}
	if verify && !t.unchanged(tt, key) {
		t.s.apply.drifted(t.name)
		tt.forceAll([]string{key})
	}
	if got != want || tt.forced(key, false) {
		tt.work.Add(key)
		return nil
	}
	if d.announcer() == t.name {
		return t.s.announce(ctx, key, d)
	}
	return nil
}

// reconcile makes this cluster's part of key match the desired state.
func (t *target) reconcile(ctx context.Context, tt *term, key string) error {
	if project, ok := configsProject(key); ok {
		return t.syncConfigs(ctx, tt, project) // configsync.go
	}
	d := t.desired(tt, key)
	if d == nil {
		return nil
	}
	if d.shard(t.name) == nil {
		if !t.holds(key) {
			return nil
		}
		return t.remove(ctx, tt, key)
	}
	o, err := d.render(t.name)
	if err != nil {
		// A kind this build cannot render: nothing to retry until it can.
		t.log.Error("cannot propagate", "key", key, "err", err)
		return nil
	}
	forced := tt.forced(key, true)
	if got, _ := t.observed(key); forced || got != o.hash {
		w := d.workload
		ns := api.Namespace(w.Metadata.Project)
		start := time.Now()
		sh := *d.shard(t.name)
		err := t.ensureNamespace(ctx, w.Metadata.Project)
		if err == nil {
			err = t.ensureConfigs(ctx, tt, d, sh) // configsync.go
		}
		if err == nil {
			err = d.kind.before(ctx, t, w, sh, ns)
		}
		var gen int64
		if err == nil {
			gen, err = t.createOrApply(ctx, tt, key, d.kind, o, ns)
		}
		if err == nil {
			err = d.kind.beside(ctx, t, w, sh, ns)
		}
		if ctx.Err() == nil {
			t.s.apply.applied(t.name, start, err)
		}
		if err != nil {
			if forced {
				tt.forceAll([]string{key}) // the retry applies too
			}
			return err
		}
		tt.record(key, o.hash, gen)
		t.log.Debug("applied", "key", key, "hash", o.hash, "forced", forced)
		if t.usesConfigs(ns) {
			tt.work.Add(configsKey(w.Metadata.Project)) // a reference it dropped may be unused here now
		}
	}
	if d.announcer() == t.name {
		return t.s.announce(ctx, key, d)
	}
	return nil
}

// createOrApply creates a shard this cluster does not hold yet (one write,
// cheaper for the API server than a first server-side apply) and applies
// it with server-side apply otherwise, or when it turns out to exist. It
// returns the main object's generation after the write (0: unknown).
func (t *target) createOrApply(ctx context.Context, tt *term, key string, k kind, o object, ns string) (int64, error) {
	if t.holds(key) {
		return t.applyGen(ctx, k, o, ns)
	}
	err := t.call(func() error {
		return k.create(ctx, tt, t.cs, ns, o.obj, metav1.CreateOptions{FieldManager: FieldManager})
	})
	if apierrors.IsAlreadyExists(err) {
		return t.applyGen(ctx, k, o, ns)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	return 1, nil // a new object's generation
}

func (t *target) apply(ctx context.Context, k kind, o object, ns string) error {
	_, err := t.applyGen(ctx, k, o, ns)
	return err
}

// applyGen applies o with server-side apply and returns the main object's
// generation after it (0: unknown, as after a replacement).
func (t *target) applyGen(ctx context.Context, k kind, o object, ns string) (int64, error) {
	if err := k.prepare(ctx, t, o, ns); err != nil {
		return 0, err
	}
	body, err := json.Marshal(o.obj)
	if err != nil {
		return 0, err
	}
	ssa := func() (*unstructured.Unstructured, error) {
		var out *unstructured.Unstructured
		err := t.call(func() error {
			var err error
			out, err = t.dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.name, types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
			return err
		})
		return out, err
	}
	out, err := ssa()
	if apierrors.IsInvalid(err) {
		return 0, k.invalid(ctx, t, o, ns, err) // an immutable field changed: replaced, or not
	}
	if err != nil {
		return 0, fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	// An object this service created (an Update operation) still has fields
	// owned by that operation, which an apply would never remove. Hand them
	// to the apply manager once, then apply again so removals take effect.
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(out, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return out.GetGeneration(), err
	}
	if err := t.call(func() error {
		_, err := t.dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		return 0, fmt.Errorf("upgrade managed fields of %s/%s: %w", ns, o.name, err)
	}
	if out, err = ssa(); err != nil {
		return 0, fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	return out.GetGeneration(), nil
}

func (t *target) remove(ctx context.Context, tt *term, key string) error {
	project, kindName, name, err := api.ParseKey(key)
	if err != nil {
		return nil
	}
	k, ok := t.s.kinds[kindName]
	if !ok {
		return nil // never held: the informers watch the known kinds
	}
	for _, o := range k.owned(t.name, name) {
		if err := t.delete(ctx, o.gvr, api.Namespace(project), o.name); err != nil {
			return err
		}
	}
	tt.record(key, removed, 0)
	tt.work.Add(configsKey(project)) // what it named may be unused here now
	return nil
}

func (t *target) delete(ctx context.Context, r schema.GroupVersionResource, ns, name string) error {
	err := t.call(func() error {
		err := t.dyn.Resource(r).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s %s/%s: %w", r.Resource, ns, name, err)
	}
	return nil
}

// ensureNamespace applies project's namespace once per process, labelled
// with the project's Pod Security level for enforce, audit and warn
// (restricted unless granted baseline): the member cluster's PodSecurity
// admission then refuses any pod that is not hardened.
func (t *target) ensureNamespace(ctx context.Context, project string) error {
	ns := api.Namespace(project)
	t.mu.Lock()
	known := t.namespaces[ns]
	t.mu.Unlock()
	if known {
		return nil
	}
	nsLabels := map[string]string{api.LabelManaged: "true", api.LabelProject: project}
	level := t.s.podSecurityLevel(project)
	for _, mode := range podSecurityModes {
		nsLabels[mode] = level
	}
	body, _ := json.Marshal(&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: nsLabels},
	})
	err := t.call(func() error {
		_, err := t.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Patch(ctx, ns, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	if err := t.ensureDebugAccess(ctx, ns); err != nil {
		return err
	}
	t.mu.Lock()
	t.namespaces[ns] = true
	t.mu.Unlock()
	return nil
}

package aggregator

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// cluster is one member cluster as every replica knows it: its
// configuration and client. What a lease term builds (informers, health,
// observations) is its clusterTerm.
type cluster struct {
	s      *Service
	member clusters.Member
	cfg    *rest.Config
	conn   *clusters.Conn // cs's transport and connections, closed on Stop
	cs     kubernetes.Interface
	// watchCS is cs without its timeout, for the informers (nil: cs).
	watchCS kubernetes.Interface
	log     *slog.Logger

	mu   sync.Mutex
	term *clusterTerm // mu must be held: the synced term this replica leads, nil otherwise
}

func newCluster(s *Service, m clusters.Member) (*cluster, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, err
	}
	conn, err := clusters.Connect(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, conn.HTTP)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	// Informers' watches must not time out (cfg.Timeout is the client's
	// whole-request timeout: a watch cut every 15 s is opened again, and
	// the first list of a large cluster's pods may take longer): the same
	// transport, no timeout.
	wcfg := rest.CopyConfig(cfg)
	wcfg.Timeout = 0
	watchCS, err := kubernetes.NewForConfigAndClient(wcfg, &http.Client{Transport: conn.HTTP.Transport})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	return &cluster{s: s, member: m, cfg: cfg, conn: conn, cs: cs, watchCS: watchCS, log: s.log.With("cluster", m.Name)}, nil
}

// synced returns the cluster's current term when this replica leads it
// and its caches have synced, else nil.
func (c *cluster) synced() *clusterTerm {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

func (c *cluster) setTerm(t *clusterTerm) {
	c.mu.Lock()
	c.term = t
	c.mu.Unlock()
}

// marker is the value of a cluster's key in the observations bucket: which
// term of which replica observes the cluster, and whether its caches have
// synced and every observation has been rewritten from them.
type marker struct {
	Holder string    `json:"holder"`
	Term   string    `json:"term"`
	Synced bool      `json:"synced"`
	Time   time.Time `json:"time"`
}

// observationKey is the key of what cluster holds of the workload key.
func observationKey(cluster, key string) string { return cluster + "." + key }

// clusterTerm is one lease term of a cluster: its informers, its health as
// probed, and the observations it wrote.
type clusterTerm struct {
	c   *cluster
	id  string
	log *slog.Logger

	factory informers.SharedInformerFactory // every pod, node and Kubernetes event of the cluster
	managed informers.SharedInformerFactory // only the platform's objects (managedSelector)
	pods    cache.Indexer                   // with the byWorkload index
	usage   *nodeUsage                      // what the cached pods request per node
	// indexers hold the objects the kinds watch (kind.watches), by
	// resource, with the byWorkload index.
	indexers map[schema.GroupVersionResource]cache.Indexer
	// eventSources are the indexers whose objects' Kubernetes events are
	// the workloads', by Kubernetes kind ("Pod", "Deployment").
	eventSources map[string]cache.Indexer
	nodes        corelisters.NodeLister
	hasSynced    []cache.InformerSynced
	queue        *bus.Queue // workload keys to observe

	mu      sync.Mutex
	events  map[string][]keyedEvent      // mu must be held: latest Kubernetes events per workload key
	written map[string][sha256.Size]byte // mu must be held: digest of each observation as stored
	lastOK  time.Time                    // mu must be held
	healthy bool                         // mu must be held
}

// lead runs one term of the cluster's lease: it returns when ctx ends (the
// lease is lost or the replica stops), having stopped everything it
// started.
func (c *cluster) lead(ctx context.Context) {
	t, err := c.newTerm()
	if err != nil {
		c.log.Error("cannot observe member cluster", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		c.setTerm(nil)
		t.factory.Shutdown()
		t.managed.Shutdown()
		// A term that ends before its queue runs still ends the queue's
		// delaying goroutine.
		t.queue.Close()
	}()
	if !t.mark(ctx, false) {
		return
	}
	t.initHealth(ctx)
	wg.Go(func() { t.probeLoop(ctx) })
	t.factory.Start(ctx.Done())
	t.managed.Start(ctx.Done())
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), t.hasSynced...) || !t.watchEvents(ctx) {
		return
	}
	for delay := time.Second; !t.observeAll(ctx); delay = min(2*delay, 30*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(bus.Jitter(delay, 0.2)):
		}
	}
	if !t.mark(ctx, true) {
		return
	}
	c.setTerm(t)
	t.log.Info("member cluster caches synced; observing", "after", time.Since(start).Round(time.Millisecond))
	wg.Go(func() { t.podMetricsLoop(ctx) }) // podmetrics.go: samples for the autoscaler
	t.queue.Run(ctx, ObserveWorkers, t.log, t.observe)
}

func (c *cluster) newTerm() (*clusterTerm, error) {
	f := informers.NewSharedInformerFactory(c.informerClient(), 0)
	mf := informers.NewSharedInformerFactoryWithOptions(c.informerClient(), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managedSelector }))
	t := &clusterTerm{
		c: c, id: fmt.Sprintf("%s/%d", c.s.holder, time.Now().UnixNano()), factory: f, managed: mf,
		nodes:  f.Core().V1().Nodes().Lister(),
		queue:  bus.NewQueue(bus.Instrumented(c.s.metrics, "observe/"+c.member.Name)),
		events: map[string][]keyedEvent{}, written: map[string][sha256.Size]byte{},
		indexers: map[schema.GroupVersionResource]cache.Indexer{}, eventSources: map[string]cache.Indexer{},
		usage: newNodeUsage(),
	}
	t.log = c.log.With("term", t.id)
	onChange := cache.ResourceEventHandlerFuncs{
		AddFunc:    t.enqueueObject,
		UpdateFunc: func(_, o any) { t.enqueueObject(o) },
		DeleteFunc: t.enqueueObject,
	}
	// Every workload's pods, then what each kind's shards become.
	watches := []watch{{corev1.SchemeGroupVersion.WithResource("pods"), "Pod"}}
	for _, name := range slices.Sorted(maps.Keys(c.s.kinds)) {
		watches = append(watches, c.s.kinds[name].watches()...)
	}
	for _, w := range watches {
		if t.indexers[w.gvr] == nil {
			// Pods: every one of the cluster (the inventory counts what
			// each node runs); the kinds' objects: only the platform's,
			// without what the aggregator never reads of them.
			from, transform := mf, cache.TransformFunc(clusters.DropManagedFields)
			if w.gvr.Resource == "pods" {
				from, transform = f, slimPod
			}
			gi, err := from.ForResource(w.gvr)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: watch %s: %w", c.member.Name, w.gvr.Resource, err)
			}
			inf := gi.Informer()
			if err := inf.SetTransform(transform); err != nil {
				return nil, fmt.Errorf("cluster %s: %s transform: %w", c.member.Name, w.gvr.Resource, err)
			}
			if w.gvr.Resource == "pods" {
				// The cache holds every pod of the cluster: only what is
				// read of each (podview.go, slimPod).
				// The inventory's requests per node, kept per event
				// rather than summed over every pod each probe.
				if _, err := inf.AddEventHandler(t.usage.handler()); err != nil {
					return nil, fmt.Errorf("cluster %s: %w", c.member.Name, err)
				}
			}
			// An observation looks a workload's objects up by key: a
			// label-selector list would match every object of the namespace.
			if err := inf.AddIndexers(cache.Indexers{byWorkload: indexByWorkload}); err != nil {
				return nil, fmt.Errorf("cluster %s: index: %w", c.member.Name, err)
			}
			if _, err := inf.AddEventHandler(onChange); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", c.member.Name, err)
			}
			t.indexers[w.gvr] = inf.GetIndexer()
			t.hasSynced = append(t.hasSynced, inf.HasSynced)
		}
		if w.events != "" {
			t.eventSources[w.events] = t.indexers[w.gvr]
		}
	}
	t.pods = t.indexers[corev1.SchemeGroupVersion.WithResource("pods")]
	nodes := f.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(clusters.SlimNode); err != nil {
		return nil, fmt.Errorf("cluster %s: node transform: %w", c.member.Name, err)
	}
	t.hasSynced = append(t.hasSynced, nodes.HasSynced)
	return t, nil
}

// watchEvents starts following the cluster's Kubernetes events, once the
// objects they are attributed to are in the caches, and returns when its
// handler has seen every event that existed.
func (t *clusterTerm) watchEvents(ctx context.Context) bool {
	inf := t.factory.Core().V1().Events().Informer()
	if err := inf.SetTransform(slimEvent); err != nil {
		t.log.Error("watch Kubernetes events", "err", err)
		return false
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.onEvent,
		UpdateFunc: func(_, o any) { t.onEvent(o) },
	})
	if err != nil {
		t.log.Error("watch Kubernetes events", "err", err)
		return false
	}
	t.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), reg.HasSynced)
}

// mark writes the term's marker, retrying until it is written or ctx ends.
func (t *clusterTerm) mark(ctx context.Context, synced bool) bool {
	b, _ := json.Marshal(marker{Holder: t.c.s.holder, Term: t.id, Synced: synced, Time: time.Now().UTC()})
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		_, err := t.c.s.observations.Put(ctx, t.c.member.Name, b)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		t.log.Warn("write term marker", "synced", synced, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(bus.Jitter(delay, 0.2)):
		}
	}
}

// initHealth starts the term from the health the inventory records, so a
// takeover neither forgets that a cluster is sick nor announces a change.
func (t *clusterTerm) initHealth(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.healthy, t.lastOK = true, time.Now()
	e, err := t.c.s.clusterKV.Get(ctx, t.c.member.Name)
	if err != nil {
		return
	}
	var ci api.ClusterInfo
	if json.Unmarshal(e.Value(), &ci) == nil && !ci.Healthy {
		t.healthy, t.lastOK = false, ci.LastSeen
	}
}

// observeAll rewrites every observation of the cluster from the synced
// caches: the workloads the caches hold and those stored from an earlier
// term (deleted when the cluster holds nothing of them any more).
func (t *clusterTerm) observeAll(ctx context.Context) bool {
	stored, err := t.stored(ctx)
	if err != nil {
		t.log.Warn("read stored observations", "err", err)
		return false
	}
	keys := map[string]bool{}
	prefix := t.c.member.Name + "."
	t.mu.Lock()
	for k, v := range stored {
		t.written[k] = sha256.Sum256(v)
		keys[strings.TrimPrefix(k, prefix)] = true
	}
	t.mu.Unlock()
	for _, idx := range t.indexers {
		for _, k := range idx.ListIndexFuncValues(byWorkload) {
			keys[k] = true
		}
	}
	work := make(chan string)
	var (
		wg       sync.WaitGroup
		failures sync.Map
	)
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if err := t.observe(ctx, k); err != nil {
					failures.Store(k, err)
				}
			}
		})
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	failed := 0
	failures.Range(func(k, v any) bool {
		if failed == 0 {
			t.log.Warn("write observation", "key", k, "err", v)
		}
		failed++
		return true
	})
	return failed == 0 && ctx.Err() == nil
}

// stored reads the observations of the cluster the bucket holds (a
// replay of its keys, in the connection's one replay slot: bus.LoadSlot).
func (t *clusterTerm) stored(ctx context.Context) (map[string][]byte, error) {
	release, err := t.c.s.bus.LoadSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	w, err := t.c.s.observations.Watch(ctx, t.c.member.Name+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	out := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch of stored observations ended")
			}
			if e == nil {
				return out, nil
			}
			out[e.Key()] = e.Value()
		}
	}
}

// observe writes what the cluster holds of the workload key, if it
// changed, or deletes it when the cluster holds nothing of it.
func (t *clusterTerm) observe(ctx context.Context, key string) error {
	okey := observationKey(t.c.member.Name, key)
	obs := t.observation(key)
	t.mu.Lock()
	prev, had := t.written[okey]
	t.mu.Unlock()
	if obs == nil {
		if !had {
			return nil
		}
		if err := t.c.s.observations.Delete(ctx, okey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete observation %s: %w", okey, err)
		}
		t.mu.Lock()
		delete(t.written, okey)
		delete(t.events, key)
		t.mu.Unlock()
		return nil
	}
	body, err := json.Marshal(obs)
	if err != nil {
		return fmt.Errorf("encode observation %s: %w", okey, err)
	}
	sum := sha256.Sum256(body)
	if had && sum == prev {
		return nil
	}
	if _, err := t.c.s.observations.Put(ctx, okey, body); err != nil {
		return fmt.Errorf("write observation %s: %w", okey, err)
	}
	t.mu.Lock()
	t.written[okey] = sum
	t.mu.Unlock()
	return nil
}

// workloadKey returns the workload key of a platform object's labels.
func workloadKey(l map[string]string) (string, bool) {
	if l[api.LabelManaged] != "true" {
		return "", false
	}
	p, k, n := l[api.LabelProject], l[api.LabelKind], l[api.LabelWorkload]
	if p == "" || k == "" || n == "" {
		return "", false
	}
	return p + "." + k + "." + n, true
}

// managedSelector selects the objects workloadKey finds a key in: the
// server sends no other (another team's Deployments, Jobs and claims in
// the same cluster are never held).
var managedSelector = labels.SelectorFromSet(labels.Set{api.LabelManaged: "true"}).String() +
	"," + api.LabelProject + "," + api.LabelKind + "," + api.LabelWorkload

// byWorkload indexes the platform's objects by workload key.
const byWorkload = "atoll-workload"

func indexByWorkload(o any) ([]string, error) {
	if key, ok := workloadKeyOf(o); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// workloadKeyOf returns the workload key of a cached object (a pod's
// view or an API object) of the platform's.
func workloadKeyOf(o any) (string, bool) {
	if p, ok := o.(*podView); ok {
		return p.Key.String(), p.Key != istr{}
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return "", false
	}
	return workloadKey(m.GetLabels())
}

func (t *clusterTerm) enqueueObject(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if key, ok := workloadKeyOf(o); ok {
		t.queue.Add(key)
	}
}

// slimEvent is the event informer's transform: it keeps what onEvent
// reads, and of an event outside the platform's namespaces, which onEvent
// ignores, only its name. Every event of the cluster is cached: in a
// cluster of tens of thousands of pods most are other tenants', each
// 1-2 KiB as the API returns it.
func slimEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	out := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, UID: e.UID, ResourceVersion: e.ResourceVersion}}
	if !strings.HasPrefix(e.Namespace, "atoll-") {
		return out, nil
	}
	out.CreationTimestamp = e.CreationTimestamp
	out.InvolvedObject = corev1.ObjectReference{Kind: e.InvolvedObject.Kind, Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}
	out.Type, out.Reason, out.Message = e.Type, e.Reason, e.Message
	out.LastTimestamp, out.EventTime = e.LastTimestamp, e.EventTime
	return out, nil
}

// onEvent attributes a Kubernetes event to the workload its object belongs to.
func (t *clusterTerm) onEvent(o any) {
	e, ok := o.(*corev1.Event)
	if !ok || !strings.HasPrefix(e.Namespace, "atoll-") {
		return
	}
	ref := e.InvolvedObject
	idx := t.eventSources[ref.Kind]
	if idx == nil {
		return
	}
	obj, exists, err := idx.GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !exists {
		return
	}
	key, ok := workloadKeyOf(obj)
	if !ok {
		return
	}
	at := e.LastTimestamp.Time
	if at.IsZero() {
		at = e.EventTime.Time
	}
	if at.IsZero() {
		at = e.CreationTimestamp.Time
	}
	ke := keyedEvent{name: e.Namespace + "/" + e.Name, ev: api.Event{
		Cluster: t.c.member.Name, Object: strings.ToLower(ref.Kind) + "/" + ref.Name,
		Type: e.Type, Reason: e.Reason, Message: e.Message, Time: at.UTC(),
	}}
	t.mu.Lock()
	t.events[key] = addEvent(t.events[key], ke)
	t.mu.Unlock()
	t.queue.Add(key)
}

// keyedEvent is a Kubernetes event by its object's name: an event updated
// (seen again) replaces itself.
type keyedEvent struct {
	name string
	ev   api.Event
}

// addEvent keeps the latest MaxEvents events by time, then name, so that
// a new term, which lists the events in another order than the previous
// term saw them arrive, observes the same.
func addEvent(evs []keyedEvent, ke keyedEvent) []keyedEvent {
	if i := slices.IndexFunc(evs, func(x keyedEvent) bool { return x.name == ke.name }); i >= 0 {
		evs[i] = ke
	} else {
		evs = append(evs, ke)
	}
	slices.SortFunc(evs, func(a, b keyedEvent) int {
		if c := a.ev.Time.Compare(b.ev.Time); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	if len(evs) > MaxEvents {
		evs = slices.Clone(evs[len(evs)-MaxEvents:])
	}
	return evs
}

func (t *clusterTerm) latestEvents(key string) []api.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []api.Event
	for _, ke := range t.events[key] {
		out = append(out, ke.ev)
	}
	return out
}

// isHealthy reports the cluster's health as last probed.
func (t *clusterTerm) isHealthy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.healthy
}

// informerClient is the client the informers list and watch with.
func (c *cluster) informerClient() kubernetes.Interface {
	if c.watchCS != nil {
		return c.watchCS
	}
	return c.cs
}

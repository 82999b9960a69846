package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

// replica is one aggregator replica on its own bus connection.
type replica struct {
	name string
	conn *bus.Bus
	s    *Service
}

func startReplica(t *testing.T, b *bus.Bus, members clusters.Members, name string, only ...string) *replica {
	t.Helper()
	conn, err := b.Connect(name)
	require.NoError(t, err)
	s, err := New(conn, testLog().With("replica", name), members)
	require.NoError(t, err)
	s.campaignFor = only
	require.NoError(t, s.Start(context.Background()))
	r := &replica{name: name, conn: conn, s: s}
	t.Cleanup(r.kill)
	return r
}

// kill ends the replica as a crash would: its connection goes first, so
// it releases nothing and writes nothing more; then its goroutines end.
func (r *replica) kill() {
	r.conn.Close()
	r.s.Stop()
}

func (r *replica) holds(leases ...string) bool {
	held := r.s.HeldLeases()
	for _, l := range leases {
		if !slices.Contains(held, l) {
			return false
		}
	}
	return true
}

// observing says whether the replica's term of the cluster has synced.
func (r *replica) observing(t *testing.T, b *bus.Bus, cluster string) bool {
	kv, err := b.KV(context.Background(), bus.BucketObservations)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), cluster)
	if err != nil {
		return false
	}
	var m marker
	return json.Unmarshal(e.Value(), &m) == nil && m.Holder == r.s.Holder() && m.Synced
}

// deployment is what the propagator renders for an App's shard, reduced
// to what the aggregator reads.
func deployment(w *api.Workload, replicas int32) *appsv1.Deployment {
	sel := map[string]string{api.LabelKind: api.KindLabel(w.Kind), api.LabelWorkload: w.Metadata.Name}
	podLabels := map[string]string{api.LabelManaged: "true", api.LabelProject: w.Metadata.Project}
	for k, v := range sel {
		podLabels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.Metadata.Name, Namespace: api.Namespace(w.Metadata.Project), Labels: podLabels,
			Annotations: map[string]string{api.AnnoGeneration: strconv.FormatInt(w.Metadata.Generation, 10)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "nginx:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
					}},
				}}},
			},
		},
	}
}

// recorder keeps every status written and every event published from
// the moment it starts.
type recorder struct {
	mu       sync.Mutex
	statuses []api.Status
	events   []string // subjects
}

func record(t *testing.T, b *bus.Bus) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &recorder{}
	kv, err := b.KV(ctx, bus.BucketStatus)
	require.NoError(t, err)
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	require.NoError(t, err)
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st api.Status
			if json.Unmarshal(e.Value(), &st) == nil {
				r.mu.Lock()
				r.statuses = append(r.statuses, st)
				r.mu.Unlock()
			}
		}
	}()
	sub, err := b.NC.Subscribe(bus.EventRoot+".>", func(m *nats.Msg) {
		r.mu.Lock()
		r.events = append(r.events, m.Subject)
		r.mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.NC.Flush())
	return r
}

// TestTakeoverKeepsPhase runs Apps on two member clusters observed by two
// replicas, kills the one that holds the status lease and one cluster's,
// and checks that the other takes both over in time without storing or
// announcing any App as anything but Running, and without announcing any
// of them twice.
func TestTakeoverKeepsPhase(t *testing.T) {
	env := testenv.New(t, testenv.Zones("a", "b")...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var members clusters.Members
	for _, c := range env.Clusters {
		_, err := c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: 2, CPU: "16", Memory: "64Gi"})
		require.NoError(t, err)
		members = append(members, clusters.Member{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig})
	}
	b := openBus(t)
	za, zb := ClusterLease("zone-a"), ClusterLease("zone-b")

	// A folds statuses and observes zone-a; B observes zone-b and stands
	// by for the rest.
	ra := startReplica(t, b, members, "a", LeaseStatus, za)
	require.Eventually(t, func() bool { return ra.holds(LeaseStatus, za) }, 10*time.Second, 20*time.Millisecond)
	rb := startReplica(t, b, members, "b")
	require.Eventually(t, func() bool { return rb.holds(zb) }, 10*time.Second, 20*time.Millisecond)

	// Apps of 3 replicas: 2 in zone-a, 1 in zone-b, placed and propagated.
	const project, apps = "takeover", 8
	var ws []*api.Workload
	for _, c := range env.Clusters {
		cs, _, err := clusters.Member{Name: c.Name, Kubeconfig: c.Kubeconfig}.Client()
		require.NoError(t, err)
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.Namespace(project)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for i := range apps {
			three := int32(3)
			w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
				Metadata: api.Metadata{Project: project, Name: fmt.Sprintf("web-%d", i), Generation: 1},
				Spec:     &api.AppSpec{Replicas: &three}}
			n := int32(1)
			if c.Zone == "a" {
				n = 2
				ws = append(ws, w)
			}
			_, err := cs.AppsV1().Deployments(api.Namespace(project)).Create(ctx, deployment(w, n), metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	for _, w := range ws {
		putJSON(t, b, bus.BucketWorkloads, w.Key(), w)
		putJSON(t, b, bus.BucketPlacements, w.Key(), api.PlacementDecision{Key: w.Key(), Generation: 1, Shards: []api.Shard{
			{Cluster: "zone-a", Zone: "a", Replicas: 2}, {Cluster: "zone-b", Zone: "b", Replicas: 1}}})
		require.NoError(t, ra.s.pub.Publish(ctx, w, api.EventPropagated, "", 1))
	}
	running := func() error {
		for _, w := range ws {
			doc, _ := storedStatusDoc(t, b, w.Key())
			if doc.Phase != api.PhaseRunning {
				return fmt.Errorf("%s is %q (%d/%d ready)", w.Key(), doc.Phase, doc.Ready, doc.Desired)
			}
			if n, _ := eventCount(t, b, w, api.EventRunning); n != 1 {
				return fmt.Errorf("%s: %d running events", w.Key(), n)
			}
		}
		return nil
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, running()) }, 3*time.Minute, 250*time.Millisecond)
	t.Logf("%d Apps Running; leases: a %v, b %v", apps, ra.s.HeldLeases(), rb.s.HeldLeases())

	// Every replica serves logs and exec for every cluster: from its
	// caches when it observes the cluster, else from its API server.
	for _, r := range []*replica{ra, rb} {
		db, err := newDebugBackend(r.s)
		require.NoError(t, err)
		pods, err := db.pods(ctx, project, api.KindApp, ws[0].Metadata.Name)
		require.NoError(t, err)
		per := map[string]int{}
		for _, p := range pods {
			per[p.cluster.name]++
		}
		assert.Equalf(t, map[string]int{"zone-a": 2, "zone-b": 1}, per, "pods of %s as replica %s (holding %v) finds them", ws[0].Key(), r.name, r.s.HeldLeases())
	}

	rec := record(t, b)
	start := time.Now()
	ra.kill()
	require.Eventually(t, func() bool { return rb.holds(LeaseStatus, za, zb) }, 15*time.Second, 20*time.Millisecond, "B takes the leases of A")
	leased := time.Since(start)
	require.Eventually(t, func() bool {
		f := rb.s.folding()
		return rb.observing(t, b, "zone-a") && f != nil && f.folds.Load() >= apps
	}, 30*time.Second, 20*time.Millisecond, "B observes zone-a and has folded every App")
	t.Logf("takeover: leases after %v, zone-a observed and every App folded after %v",
		leased.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	assert.Less(t, leased, 10*time.Second, "a standby takes over within 10s")

	// Cluster operations are served by the survivors.
	got, eb, _ := request(t, b, `{"cluster":"zone-a","op":"labels","setLabels":{"team":"ml"},"principal":"alice"}`)
	require.Nil(t, eb)
	assert.Equal(t, "ml", got.Labels["team"])

	// Quiesce: a status written by the new term is Running and recorded.
	require.NoError(t, running())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, st := range rec.statuses {
		assert.Equalf(t, api.PhaseRunning, st.Phase, "%s stored as %s (%d/%d ready) during the takeover", st.Key, st.Phase, st.Ready, st.Desired)
	}
	for _, subj := range rec.events {
		assert.Falsef(t, strings.HasPrefix(subj, bus.EventRoot+"."+project+"."), "event %s published during the takeover", subj)
	}
}

// TestReadyWhileTheFolderFills: a replica that takes the status lease is
// ready while its folder's mirrors fill (its connection's replay slot is
// held, so they cannot), and folds once they have.
func TestReadyWhileTheFolderFills(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := b.Connect("r1")
	require.NoError(t, err)
	release, err := conn.LoadSlot(ctx)
	require.NoError(t, err)
	s, err := New(conn, testLog(), clusters.Members{})
	require.NoError(t, err)
	s.campaignFor = []string{LeaseStatus}
	require.NoError(t, s.Start(ctx))
	r := &replica{name: "r1", conn: conn, s: s}
	t.Cleanup(r.kill)
	require.Eventually(t, func() bool { return r.holds(LeaseStatus) }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.Ready(ctx), "ready while the folder fills")
	require.Nil(t, s.folding(), "folding before its mirrors filled")
	release()
	require.Eventually(t, func() bool { return s.folding() != nil }, 10*time.Second, 10*time.Millisecond)
}

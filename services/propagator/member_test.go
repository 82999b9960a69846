package propagator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

// The member-cluster side of the tests: real member clusters from
// libs/testenv (etcd, kube-apiserver, controller-manager, scheduler, KWOK).
// Each replica reaches them with the clients the service builds, on a
// transport that records every write request it sends (method, path, the
// API server's answer, when it was sent and answered), so that a test can
// tell which replica wrote what, and when. Reads and watches pass through
// untouched.

// write is one write request a replica sent to a member cluster.
type write struct {
	replica, cluster string
	method, path     string
	status           int // the API server's answer; 0 when none came
	start, end       time.Time
}

func (w write) String() string {
	return fmt.Sprintf("%s %s %s %s -> %d", w.replica, w.cluster, w.method, w.path, w.status)
}

// deployment returns the name of the Deployment w writes ("" for a
// create, whose name is in the body) and whether w writes Deployments.
func (w write) deployment() (string, bool) {
	_, rest, ok := strings.Cut(w.path, "/deployments")
	return strings.TrimPrefix(rest, "/"), ok
}

// created says w created a Deployment.
func (w write) created() bool {
	_, ok := w.deployment()
	return ok && w.method == http.MethodPost && w.status == http.StatusCreated
}

// writeLog records the writes of every replica to every cluster.
type writeLog struct {
	mu     sync.Mutex
	writes []write // mu must be held
}

// wrap returns a transport wrapper recording replica's writes to cluster.
func (l *writeLog) wrap(replica, cluster string) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet || req.Method == http.MethodHead {
				return rt.RoundTrip(req)
			}
			w := write{replica: replica, cluster: cluster, method: req.Method, path: req.URL.Path, start: time.Now()}
			resp, err := rt.RoundTrip(req)
			w.end = time.Now()
			if resp != nil {
				w.status = resp.StatusCode
			}
			l.mu.Lock()
			l.writes = append(l.writes, w)
			l.mu.Unlock()
			return resp, err
		})
	}
}

// of returns the writes to cluster, in the order they were sent.
func (l *writeLog) of(cluster string) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []write
	for _, w := range l.writes {
		if w.cluster == cluster {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b write) int { return a.start.Compare(b.start) })
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// memberClients returns the propagator's clients for c, their transport
// wrapped by wrap when it is set.
func memberClients(tb testing.TB, c *testenv.Cluster, wrap transport.WrapperFunc) clients {
	tb.Helper()
	m := clusters.Member{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig}
	cfg, err := m.RESTConfig()
	require.NoError(tb, err)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	cl, err := newClients(m.Name, cfg)
	require.NoError(tb, err)
	return cl
}

// replica is one propagator replica on a bus connection of its own.
type replica struct {
	name string
	s    *Service
	conn *bus.Bus
}

// startReplica starts a propagator replica in front of cs, its writes
// recorded in l; configure, when set, tunes the service before it starts.
// It is stopped when the test ends (if it was not before).
func startReplica(tb testing.TB, b *bus.Bus, name string, cs []*testenv.Cluster, l *writeLog, configure func(*Service)) *replica {
	tb.Helper()
	conn, err := b.Connect("propagator-" + name)
	require.NoError(tb, err)
	tb.Cleanup(conn.Close)
	cl := map[string]clients{}
	for _, c := range cs {
		cl[c.Name] = memberClients(tb, c, l.wrap(name, c.Name))
	}
	s := newService(conn, quietLog(), cl)
	if configure != nil {
		configure(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(tb, s.Start(ctx))
	tb.Cleanup(s.Stop)
	return &replica{name: name, s: s, conn: conn}
}

// pauseControllers freezes c's kube-controller-manager until the test
// ends, so that Deployments make no ReplicaSets or Pods: a test that
// fills a cluster with thousands of them measures the propagator, not the
// controllers catching up on one small machine.
func pauseControllers(tb testing.TB, c *testenv.Cluster) {
	tb.Helper()
	p, err := c.PauseComponent(testenv.KubeControllerManager)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		if err := p.Resume(); err != nil {
			tb.Errorf("resume the controller-manager of %s: %v", c.Name, err)
		}
	})
}

// prefill puts the objects of seeded workloads' shards into cluster c as
// the propagator leaves them: its namespace with the propagator's labels,
// and each shard's object as render makes it (labels, annotations, the
// spec hash) created with the propagator's own create function and field
// manager. It writes in parallel.
func prefill(tb testing.TB, c *testenv.Cluster, sws []seeded) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cl := memberClients(tb, c, nil)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.Namespace("p"), Labels: map[string]string{api.LabelManaged: "true", api.LabelProject: "p"}}}
	if _, err := cl.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(tb, err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan seeded)
	for range 16 {
		wg.Go(func() {
			for sw := range next {
				o, err := rendered(sw, c.Name)
				if err == nil {
					err = newKinds()[sw.w.Kind].create(ctx, &term{}, cl.cs, api.Namespace("p"), o.obj, metav1.CreateOptions{FieldManager: FieldManager})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("prefill %s: %w", sw.w.Key(), err))
					mu.Unlock()
				}
			}
		})
	}
	for _, sw := range sws {
		next <- sw
	}
	close(next)
	wg.Wait()
	require.NoError(tb, errors.Join(errs...))
}

// listDeployments returns the Deployments of the test project in c, by name.
func listDeployments(ctx context.Context, c *testenv.Cluster) (map[string]appsv1.Deployment, error) {
	out := map[string]appsv1.Deployment{}
	opts := metav1.ListOptions{Limit: 1000}
	for {
		l, err := c.Client.AppsV1().Deployments(api.Namespace("p")).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list deployments of %s: %w", c.Name, err)
		}
		for _, d := range l.Items {
			out[d.Name] = d
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

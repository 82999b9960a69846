package disruption_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"atoll.dev/libs/testenv"
)

// The tests that act on Kubernetes (drain, node replacement) share one real
// member cluster (zone a, started by libs/testenv), started by the first of
// them that runs and stopped by TestMain once all tests have run; the ledger
// tests need none, so `-run TestLedger` starts nothing. Each test works on a
// node pool and a namespace of its own.
var shared struct {
	once sync.Once
	env  *testenv.Env
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared.env != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := shared.env.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "stop member cluster:", err)
			code = 1
		}
		cancel()
	}
	os.Exit(code)
}

// member returns the package's member cluster, starting it on first use.
func member(t *testing.T) *testenv.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("member clusters are not started under -short")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.env, shared.err = testenv.Start(ctx, testenv.Options{}, testenv.ClusterSpec{Zone: "a"})
	})
	if shared.err != nil {
		t.Fatalf("start member cluster: %v", shared.err)
	}
	return shared.env.Clusters[0]
}

var seq atomic.Int64

// unique suffixes name so that a test run again on the shared cluster
// (-count=N) works on a pool and a namespace of its own.
func unique(name string) string { return name + "-" + strconv.FormatInt(seq.Add(1), 10) }

// namespace creates ns and waits for its default ServiceAccount, without
// which the API server refuses the namespace's pods.
func namespace(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, time.Minute, 100*time.Millisecond, "default ServiceAccount of %s", ns)
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

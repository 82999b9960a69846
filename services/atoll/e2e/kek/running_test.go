package kek_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

// TestRotateKEKUnderARunningApp: an App reads a Secret in zone a; the KEK
// is rotated (rotate-kek retrying until admission seals for the new one)
// and the old private key removed while the App runs: its pods stay the
// same, the cluster's Secret keeps its value, and a new value written
// afterwards (sealed under the new KEK, opened with it alone) arrives.
func TestRotateKEKUnderARunningApp(t *testing.T) {
	e := e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const project, secret = "vault-app", "app-creds"
	ns := api.Namespace(project)
	cluster := e.Region.Env.Cluster("zone-a")
	_, err := e.Client.Submit(ctx, secretDocIn(project, secret, map[string]string{"PASSWORD": "p1"}))
	require.NoError(t, err)
	_, err = e.Client.Submit(ctx, fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"web"},
"spec":{"replicas":2,"template":{"containers":[{"name":"web","image":"web:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}},
 "env":[{"name":"PASSWORD","valueFrom":{"kind":"Secret","name":%q,"key":"PASSWORD"}}]}]}}}`, project, secret))
	require.NoError(t, err)

	// running is the names of the App's running pods; value the
	// cluster's copy of the Secret.
	running := func(ct assert.TestingT) []string {
		l, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=web"})
		if !assert.NoError(ct, err) {
			return nil
		}
		var names []string
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				names = append(names, p.Name)
			}
		}
		slices.Sort(names)
		return names
	}
	value := func(ct assert.TestingT) string {
		s, err := cluster.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if !assert.NoError(ct, err) {
			return ""
		}
		return string(s.Data["PASSWORD"])
	}
	var pods []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "p1", value(ct))
		pods = running(ct)
		assert.Len(ct, pods, 2)
	}, 2*time.Minute, 500*time.Millisecond, "the App runs 2 pods and zone a holds its Secret")

	old, _ := sealedIn(ctx, t, e, project, secret)
	const next = "k-app"
	require.NoError(t, e.Region.AddKEK(next))
	out, err := rotate(ctx, e, "--to", next)
	t.Logf("rotate-kek --to %s:\n%s", next, out)
	require.NoError(t, err)
	require.Contains(t, out, "no Secret references any kek but "+next)
	require.NoError(t, e.Region.RemoveKEK(old.KeyID))

	// The App went on: the same pods, the same value.
	assert.Equal(t, pods, running(t), "the App's pods changed during the rotation")
	assert.Equal(t, "p1", value(t))

	// A value written now is sealed under the new KEK and arrives.
	_, err = e.Client.Update(ctx, secretDocIn(project, secret, map[string]string{"PASSWORD": "p2"}))
	require.NoError(t, err)
	if d, _ := sealedIn(ctx, t, e, project, secret); d.KeyID != next {
		t.Fatalf("the new value is sealed under %q, want %s", d.KeyID, next)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "p2", value(ct))
	}, time.Minute, 500*time.Millisecond, "zone a's Secret holds the value written after the old key was removed")
	if strings.Contains(out, "still referenced") {
		t.Error("rotate-kek left Secrets under an older key")
	}
}

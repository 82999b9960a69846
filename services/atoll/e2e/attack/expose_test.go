package attack

// Exposure (spec.expose): a tenant cannot take another project's host,
// nor slip past the host check by spelling; the member credentials let
// the propagator write Ingresses only in project namespaces and never
// their status, and the aggregator only read them.

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/services/atoll/e2e"
)

// exposeApp is a small App with port http, exposed on host.
func exposeApp(name, host string) []byte {
	return fmt.Appendf(nil, `{"kind":"App","metadata":{"name":%q},"spec":{"replicas":1,"expose":{"host":%q,"port":"http"},"template":{"containers":[{"name":"web","image":"nginx:1.27","ports":[{"name":"http","containerPort":8080}],"resources":{"requests":{"cpu":"10m","memory":"8Mi"}}}]}}}`,
		name, host)
}

// hostsRevision is the hosts bucket's last revision.
func hostsRevision(t testing.TB) uint64 {
	t.Helper()
	ctx := context.Background()
	kv, err := reg.Bus.KV(ctx, bus.BucketHosts)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	require.True(t, ok, "bucket status %T", st)
	return bs.StreamInfo().State.LastSeq
}

// TestExposeEscapesAreRefused: another project's host, however spelt,
// is 422 naming the field and writes nothing (no revision in the
// workloads or hosts bucket, no object in any member cluster); the
// services' member credentials hold exactly what exposure needs.
func TestExposeEscapesAreRefused(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	const (
		victim, attacker = "attack-expose-victim", "attack-expose"
		host             = "shop.victim.example.com"
	)
	victimDev, dev := podsProject(t, victim), podsProject(t, attacker)
	status, b := podsRequest(t, http.MethodPost, "/v1/projects/"+victim+"/workloads", victimDev, exposeApp("shop", host))
	require.Equal(t, http.StatusCreated, status, "%s", b)
	t.Cleanup(func() { _ = cl.Delete(context.WithoutCancel(ctx), victim, api.KindApp, "shop") })

	for _, tc := range []struct{ name, host, reason string }{
		{"the victim's host", host, "exposed by App " + victim + "/shop"},
		{"upper case", "SHOP.victim.example.com", "not a DNS name"},
		{"a trailing dot", host + ".", "not a DNS name"},
		{"a wildcard over it", "*.victim.example.com", "wildcard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, keys := workloadsRevision(t)
			hrev := hostsRevision(t)
			status, b := podsRequest(t, http.MethodPost, "/v1/projects/"+attacker+"/workloads", dev, exposeApp("steal", tc.host))
			require.Equal(t, http.StatusUnprocessableEntity, status, "%s", b)
			e := errorBody(t, b)
			if assert.Len(t, e.Fields, 1, "%s", b) {
				assert.Equal(t, "spec.expose.host", e.Fields[0].Field)
				assert.Contains(t, e.Fields[0].Reason, tc.reason)
			}
			rev2, keys2 := workloadsRevision(t)
			assert.Equal(t, rev, rev2, "the workloads bucket's revision moved")
			assert.ElementsMatch(t, keys, keys2, "the workloads bucket's keys")
			assert.Equal(t, hrev, hostsRevision(t), "the hosts bucket's revision moved")
			nothingInClusters(t, attacker, "steal")
		})
	}

	// The victim's Ingress, once it is there, for the credentials to try.
	c := reg.Env.Clusters[0]
	ns := api.Namespace(victim)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, cc := range reg.Env.Clusters {
			if _, err := cc.Client.NetworkingV1().Ingresses(ns).Get(ctx, "shop", metav1.GetOptions{}); err == nil {
				c = cc
				return
			}
		}
		ct.Errorf("no Ingress of %s/shop yet", victim)
	}, 60*time.Second, 200*time.Millisecond)
	ing, err := c.Client.NetworkingV1().Ingresses(ns).Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)

	dry := []string{metav1.DryRunAll}
	evil := func(namespace string) *networkingv1.Ingress {
		e := ing.DeepCopy()
		e.ObjectMeta = metav1.ObjectMeta{Name: "evil", Namespace: namespace}
		return e
	}
	prop := memberClient(t, c, clusters.Propagator, false)
	if _, err := prop.NetworkingV1().Ingresses(ns).Create(ctx, evil(ns), metav1.CreateOptions{DryRun: dry}); err != nil {
		t.Errorf("propagator creates an Ingress in %s: %v", ns, err)
	}
	propNo := memberClient(t, c, clusters.Propagator, true)
	aggNo := memberClient(t, c, clusters.Aggregator, true)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"propagator creates an Ingress in kube-system", func() error {
			_, err := propNo.NetworkingV1().Ingresses("kube-system").Create(ctx, evil("kube-system"), metav1.CreateOptions{DryRun: dry})
			return err
		}},
		{"propagator writes an Ingress's status", func() error {
			s := ing.DeepCopy()
			s.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.66"}}
			_, err := propNo.NetworkingV1().Ingresses(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{DryRun: dry})
			return err
		}},
		{"propagator creates an IngressClass", func() error {
			_, err := propNo.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}, metav1.CreateOptions{DryRun: dry})
			return err
		}},
		{"aggregator creates an Ingress", func() error {
			_, err := aggNo.NetworkingV1().Ingresses(ns).Create(ctx, evil(ns), metav1.CreateOptions{DryRun: dry})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want 403 Forbidden", err)
			}
		})
	}
}

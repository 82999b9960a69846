package apps

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/propagator"
)

// exposeDoc is a small App with a named port, exposed as expose says
// (a JSON object; "" for none).
func exposeDoc(name string, replicas int, expose string) []byte {
	if expose != "" {
		expose = `,"expose":` + expose
	}
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d%s,"template":{"containers":[{"name":"web","image":"nginx:1.27",
 "ports":[{"name":"http","containerPort":8080},{"name":"dns","containerPort":53,"protocol":"UDP"}],
 "resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, project, name, replicas, expose)
}

// ingressesByCluster lists the App's Ingresses in every member cluster.
func ingressesByCluster(ctx context.Context, name string) (map[string][]networkingv1.Ingress, error) {
	out := map[string][]networkingv1.Ingress{}
	for _, c := range reg.Env.Clusters {
		l, err := c.Client.NetworkingV1().Ingresses(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name + "," + api.LabelKind + "=app"})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		out[c.Name] = l.Items
	}
	return out, nil
}

// assertIngressPerShard checks that exactly the clusters of the App's
// placement hold one Ingress each, routing host and path to the App's
// Service on port http with the propagator's default class; it returns
// those clusters.
func assertIngressPerShard(ctx context.Context, ct *assert.CollectT, name, host, path string) []string {
	p, err := cl.Placement(ctx, api.Key(project, api.KindApp, name))
	if !assert.NoError(ct, err) || !assert.NotNil(ct, p) {
		return nil
	}
	var running []string
	for _, sh := range p.Shards {
		running = append(running, sh.Cluster)
	}
	all, err := ingressesByCluster(ctx, name)
	if !assert.NoError(ct, err) {
		return nil
	}
	for cluster, ings := range all {
		if !slices.Contains(running, cluster) {
			assert.Empty(ct, ings, "Ingresses in %s, which does not run the App", cluster)
			continue
		}
		if !assert.Len(ct, ings, 1, "Ingresses in %s", cluster) {
			continue
		}
		ing := ings[0]
		assert.Equal(ct, propagator.DefaultIngressClass, deref(ing.Spec.IngressClassName), cluster)
		if !assert.Len(ct, ing.Spec.Rules, 1, cluster) || !assert.NotNil(ct, ing.Spec.Rules[0].HTTP, cluster) || !assert.Len(ct, ing.Spec.Rules[0].HTTP.Paths, 1, cluster) {
			continue
		}
		r := ing.Spec.Rules[0]
		assert.Equal(ct, host, r.Host, cluster)
		hp := r.HTTP.Paths[0]
		assert.Equal(ct, path, hp.Path, cluster)
		assert.Equal(ct, networkingv1.PathTypePrefix, deref(hp.PathType), cluster)
		if assert.NotNil(ct, hp.Backend.Service, cluster) {
			assert.Equal(ct, networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Name: "http"}}, *hp.Backend.Service, cluster)
		}
	}
	slices.Sort(running)
	return running
}

// assertNoIngress checks that no cluster holds an Ingress of the App.
func assertNoIngress(ctx context.Context, ct *assert.CollectT, name string) {
	all, err := ingressesByCluster(ctx, name)
	if assert.NoError(ct, err) {
		for cluster, ings := range all {
			assert.Empty(ct, ings, "Ingresses of %s left in %s", name, cluster)
		}
	}
}

// TestExpose: an exposed App is one Ingress in each cluster that runs it
// (none elsewhere); the addresses an ingress controller fills in (here
// the clusters' admins, as KWOK has none) show in the App's status and in
// `atoll get` and `describe`; a second App asking for the host gets 422
// naming the owner, until the owner is deleted (its Ingresses with it);
// removing the exposure removes the Ingresses; every mistake in expose
// gets 422 naming the field and nothing is written. One region, two
// small Apps.
func TestExpose(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	start := time.Now()
	const (
		front, back = "front", "back"
		host        = "front.shop.example.com"
	)
	frontKey, backKey := api.Key(project, api.KindApp, front), api.Key(project, api.KindApp, back)
	t.Cleanup(func() {
		for _, n := range []string{front, back} {
			_ = cl.Delete(context.WithoutCancel(ctx), project, api.KindApp, n)
		}
	})
	_, err := cl.Submit(ctx, exposeDoc(front, 2, `{"host":"`+host+`","path":"/shop","port":"http"}`))
	require.NoError(t, err)

	var running []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		running = assertIngressPerShard(ctx, ct, front, host, "/shop")
		assert.NotEmpty(ct, running)
	}, 60*time.Second, 200*time.Millisecond, "one Ingress per cluster running the App")
	t.Logf("Ingresses in %v after %s", running, time.Since(start).Round(time.Millisecond))

	// An ingress controller fills the load balancer's address.
	want := map[string]string{}
	for i, c := range reg.Env.Clusters {
		if !slices.Contains(running, c.Name) {
			continue
		}
		ings := c.Client.NetworkingV1().Ingresses(api.Namespace(project))
		ing, err := ings.Get(ctx, front, metav1.GetOptions{})
		require.NoError(t, err)
		ip := fmt.Sprintf("192.0.2.%d", i+1)
		ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: ip}}
		_, err = ings.UpdateStatus(ctx, ing, metav1.UpdateOptions{})
		require.NoError(t, err, c.Name)
		want[c.Name] = ip
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, frontKey)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) || !assert.NotNil(ct, st.Expose) {
			return
		}
		assert.Equal(ct, host, st.Expose.Host)
		assert.Equal(ct, "/shop", st.Expose.Path)
		assert.Equal(ct, len(running), st.Expose.Ingresses)
		got := map[string]string{}
		for _, a := range st.Expose.Addresses {
			got[a.Cluster] = a.IP
		}
		assert.Equal(ct, want, got)
	}, 30*time.Second, 200*time.Millisecond, "the addresses in the App's status")

	// The CLI shows the ports, the address, the endpoints per zone and the exposure.
	spaces := regexp.MustCompile(`[ \t]+`)
	for _, verb := range []string{"get", "describe"} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			out := spaces.ReplaceAllString(atoll(t, verb, "app", front), " ")
			for _, s := range []string{
				"Address: " + front + "." + api.Namespace(project) + ".svc.cluster.local",
				"Ports: http 8080/TCP, dns 53/UDP",
				"Expose: " + host + "/shop (" + fmt.Sprint(len(running)) + " Ingresses)",
			} {
				assert.Contains(ct, out, s, verb)
			}
			assert.Regexp(ct, `Endpoints: ([a-c] [0-9]/[0-9] ready(, )?)+`, out, verb)
			for cluster, ip := range want {
				assert.Contains(ct, out, ip+" ("+cluster+")", verb)
			}
		}, 30*time.Second, 250*time.Millisecond, "atoll %s app %s", verb, front)
	}

	// A second App asking for the host: 422 naming the owner, nothing written.
	refused := func(t *testing.T, doc []byte, field, reason string) {
		t.Helper()
		_, err := cl.Submit(ctx, doc)
		var re *busclient.Error
		require.True(t, errors.As(err, &re), "refused: %v", err)
		assert.Equal(t, 422, re.Status)
		var fields []string
		for _, f := range re.Body.Fields {
			fields = append(fields, f.Field)
			if f.Field == field {
				assert.Contains(t, f.Reason, reason)
			}
		}
		assert.Equal(t, []string{field}, fields)
		got, err := cl.Workload(ctx, backKey)
		assert.NoError(t, err)
		assert.Nil(t, got, "nothing is written")
	}
	backDoc := exposeDoc(back, 1, `{"host":"`+host+`","port":"http"}`)
	refused(t, backDoc, "spec.expose.host", "exposed by App "+project+"/"+front)

	// Each mistake names its field.
	for _, tc := range []struct{ name, expose, field, reason string }{
		{"bad host", `{"host":"Front_Shop","port":"http"}`, "spec.expose.host", "not a DNS name"},
		{"wildcard host", `{"host":"*.shop.example.com","port":"http"}`, "spec.expose.host", "wildcard"},
		{"relative path", `{"host":"b.example.com","path":"shop","port":"http"}`, "spec.expose.path", "does not start with /"},
		{"port naming no container port", `{"host":"b.example.com","port":"grpc"}`, "spec.expose.port", "names no port"},
		{"UDP port", `{"host":"b.example.com","port":"dns"}`, "spec.expose.port", "UDP"},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, exposeDoc(back, 1, tc.expose), tc.field, tc.reason) })
	}

	// Deleting the owner removes its Ingresses and frees the host.
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, front))
	_, err = cl.Submit(ctx, backDoc)
	require.NoError(t, err, "the host is claimable once its owner is deleted")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assertNoIngress(ctx, ct, front)
		assert.NotEmpty(ct, assertIngressPerShard(ctx, ct, back, host, "/"))
	}, 60*time.Second, 200*time.Millisecond, "the owner's Ingresses gone, the new owner's there")

	// Removing the exposure removes the Ingresses.
	_, err = cl.Update(ctx, exposeDoc(back, 1, ""))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assertNoIngress(ctx, ct, back)
		st, err := cl.Status(ctx, backKey)
		if assert.NoError(ct, err) && assert.NotNil(ct, st) {
			assert.Nil(ct, st.Expose, "an App no longer exposed has no expose status")
		}
	}, 30*time.Second, 200*time.Millisecond, "the Ingresses of an App no longer exposed")
	t.Logf("TestExpose took %s", time.Since(start).Round(time.Millisecond))
}

package apps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

const project = "shop"

// webDoc is an App with a named port, probes, a preStop hook and its own
// grace period.
func webDoc(name string, replicas int) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"template":{"terminationGracePeriodSeconds":40,"containers":[{"name":"web","image":"nginx:1.27","workingDir":"/srv",
 "env":[{"name":"GREETING","value":"hello from $(ATOLL_ZONE)"}],
 "ports":[{"name":"http","containerPort":8080,"appProtocol":"http"}],
 "readinessProbe":{"httpGet":{"path":"/ready","port":"http"},"periodSeconds":2},
 "livenessProbe":{"tcpSocket":{"port":"http"}},
 "lifecycle":{"preStop":{"sleep":{"seconds":5}}},
 "resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, project, name, replicas))
}

// livePods are the App's pods in c that are not terminating.
func livePods(ctx context.Context, c *testenv.Cluster, name string) ([]corev1.Pod, error) {
	l, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name + "," + api.LabelKind + "=app"})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}

// runningIn returns the clusters holding live pods of the App, the ones
// whose Service, and so whose managed slices, it has. (A member cluster
// that stops answering for a while under load loses its shard to the
// others, and with it the App's Service and slices there.) It asserts
// that there are two at least, so that every check on their slices is
// one of endpoints from another cluster.
func runningIn(ctx context.Context, ct *assert.CollectT, name string) []*testenv.Cluster {
	var out []*testenv.Cluster
	for _, c := range reg.Env.Clusters {
		pods, err := livePods(ctx, c, name)
		if assert.NoError(ct, err) && len(pods) > 0 {
			out = append(out, c)
		}
	}
	assert.GreaterOrEqual(ct, len(out), 2, "clusters running %s", name)
	return out
}

// readyAddresses are the ready pods' IPs of the App in every cluster,
// with their zone.
func readyAddresses(ctx context.Context, name string) (map[string]string, error) {
	out := map[string]string{}
	for _, c := range reg.Env.Clusters {
		pods, err := livePods(ctx, c, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		for _, p := range pods {
			if p.Status.PodIP != "" && podReady(&p) {
				out[p.Status.PodIP] = c.Zone
			}
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sliceAddresses are the ready addresses of every EndpointSlice of the
// App's Service in c (the cluster's own and Atoll's managed ones), with
// the zone each endpoint says.
func sliceAddresses(ctx context.Context, c *testenv.Cluster, name string) (map[string]string, error) {
	l, err := c.Client.DiscoveryV1().EndpointSlices(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range l.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			zone := ""
			if e.Zone != nil {
				zone = *e.Zone
			}
			for _, a := range e.Addresses {
				out[a] = zone
			}
		}
	}
	return out, nil
}

// TestAppServesRegionWide: an App of 6 replicas with a named port over
// zones a, b, c has a Service in every cluster; its pods carry the
// probes, the hook, the grace period and the platform's identity; every
// cluster's slices list all 6 ready pods with their zones; a scale to 3
// and the loss of zone c show in every other cluster's slices; deleting
// the App removes its Services and slices.
func TestAppServesRegionWide(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	const name = "web"
	key := api.Key(project, api.KindApp, name)
	_, err := cl.Submit(ctx, webDoc(name, 6))
	require.NoError(t, err)

	// Two replicas per zone, each cluster with the Service.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := cl.Placement(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, p) {
			return
		}
		assert.Len(ct, p.Shards, 3)
		for _, c := range reg.Env.Clusters {
			svc, err := c.Client.CoreV1().Services(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
			if !assert.NoError(ct, err, "the Service in %s", c.Name) {
				continue
			}
			assert.Equal(ct, map[string]string{api.LabelKind: "app", api.LabelWorkload: name}, svc.Spec.Selector, c.Name)
			if assert.Len(ct, svc.Spec.Ports, 1, c.Name) {
				sp := svc.Spec.Ports[0]
				assert.Equal(ct, "http", sp.Name)
				assert.Equal(ct, int32(8080), sp.Port)
				assert.Equal(ct, intstr.FromString("http"), sp.TargetPort)
				assert.Equal(ct, "http", deref(sp.AppProtocol))
			}
			assert.Equal(ct, corev1.ServiceTrafficDistributionPreferClose, deref(svc.Spec.TrafficDistribution), c.Name)
		}
	}, 60*time.Second, 250*time.Millisecond, "the App's Services")

	// The live pods carry the container model and the identity.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			pods, err := livePods(ctx, c, name)
			if !assert.NoError(ct, err) || !assert.Len(ct, pods, 2, "pods in %s", c.Name) {
				continue
			}
			for _, p := range pods {
				assertServingPod(ct, c, &p)
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "the live pods")

	// Every cluster's slices list all 6 ready pods with their zones.
	var want map[string]string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		want, err = readyAddresses(ctx, name)
		if !assert.NoError(ct, err) || !assert.Len(ct, want, 6, "ready pods with distinct IPs") {
			return
		}
		for _, c := range reg.Env.Clusters {
			got, err := sliceAddresses(ctx, c, name)
			if assert.NoError(ct, err) {
				assert.Equal(ct, want, got, "the slices of %s", c.Name)
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "every cluster's slices list every ready pod")
	t.Logf("every cluster's slices list the 6 ready pods: %v", sortedKeys(want))
	for _, c := range reg.Env.Clusters {
		l, err := c.Client.DiscoveryV1().EndpointSlices(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelEndpointSliceManagedBy + "=" + api.ManagedByAtoll})
		require.NoError(t, err)
		var sources []string
		for _, s := range l.Items {
			sources = append(sources, s.Labels[api.LabelSourceCluster])
		}
		sort.Strings(sources)
		assert.Equal(t, othersThan(c.Name), sources, "one managed slice per other cluster in %s", c.Name)
	}

	// The API and the CLI list the same endpoints per zone and cluster.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var eps computeapi.Endpoints
		if !assert.NoError(ct, json.Unmarshal([]byte(atoll(t, "endpoints", "app", name, "-o", "json")), &eps)) {
			return
		}
		assert.Equal(ct, name+"."+api.Namespace(project)+".svc.cluster.local", eps.Address)
		got := map[string]string{}
		for _, e := range eps.Endpoints {
			if e.Ready {
				got[e.Ip] = e.Zone
			}
			assert.Equal(ct, "zone-"+e.Zone, e.Cluster)
		}
		assert.Equal(ct, want, got)
	}, 30*time.Second, 250*time.Millisecond, "atoll endpoints app web")
	table := atoll(t, "endpoints", "app", name)
	t.Logf("atoll endpoints app %s:\n%s", name, table)
	assert.Contains(t, table, "Address:  "+name+"."+api.Namespace(project)+".svc.cluster.local")
	assert.Contains(t, table, "http 8080/TCP (http)")
	for ip := range want {
		assert.Contains(t, table, ip)
	}

	// Scale to 3: the removed pods leave every cluster's slices.
	three := int32(3)
	scaled := time.Now()
	_, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindApp, Name: name, Op: api.OpScale, Replicas: &three})
	require.NoError(t, err)
	var gone, converged time.Time
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live, err := readyAddresses(ctx, name)
		if !assert.NoError(ct, err) || !assert.Len(ct, live, 3) {
			return
		}
		if gone.IsZero() {
			gone = time.Now()
		}
		for _, c := range reg.Env.Clusters {
			got, err := sliceAddresses(ctx, c, name)
			if assert.NoError(ct, err) {
				assert.Equal(ct, live, got, "the slices of %s", c.Name)
			}
		}
	}, 60*time.Second, 100*time.Millisecond, "the slices after the scale to 3")
	converged = time.Now()
	t.Logf("scale to 3: pods gone %v after the request, every cluster's slices %v after that", gone.Sub(scaled).Round(time.Millisecond), converged.Sub(gone).Round(time.Millisecond))
	assert.LessOrEqual(t, converged.Sub(gone), 5*time.Second, "the slices follow the scale within 5 s")

	// Zone c is lost: its endpoints leave the slices of a and b.
	zc := reg.Env.Cluster("zone-c")
	before, err := readyAddresses(ctx, name)
	require.NoError(t, err)
	cAddrs := map[string]bool{}
	for ip, z := range before {
		if z == zc.Zone {
			cAddrs[ip] = true
		}
	}
	paused, err := zc.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()
	frozen := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			if c == zc {
				continue
			}
			got, err := sliceAddresses(ctx, c, name)
			if !assert.NoError(ct, err) {
				continue
			}
			for ip, z := range got {
				assert.NotEqual(ct, zc.Zone, z, "%s still lists %s of zone c", c.Name, ip)
				assert.False(ct, cAddrs[ip], "%s still lists %s of zone c", c.Name, ip)
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "zone c's endpoints leave a and b within 60 s")
	t.Logf("zone c frozen: its endpoints left a and b %v later", time.Since(frozen).Round(time.Millisecond))
	require.NoError(t, paused.Resume())
	resumed = true

	// Zone c is back: every cluster that runs the App lists every ready
	// pod again (the scheduler may have moved zone c's replicas while it
	// was lost; a cluster the App left has no Service and no slice).
	var running []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live, err := readyAddresses(ctx, name)
		if !assert.NoError(ct, err) || !assert.Len(ct, live, 3) {
			return
		}
		p, err := cl.Placement(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, p) {
			return
		}
		running = running[:0]
		for _, sh := range p.Shards {
			running = append(running, sh.Cluster)
			got, err := sliceAddresses(ctx, reg.Env.Cluster(sh.Cluster), name)
			if assert.NoError(ct, err) {
				assert.Equal(ct, live, got, "the slices of %s", sh.Cluster)
			}
		}
		for _, c := range reg.Env.Clusters {
			if slices.Contains(running, c.Name) {
				continue
			}
			got, err := sliceAddresses(ctx, c, name)
			if assert.NoError(ct, err) {
				assert.Empty(ct, got, "the slices of %s, which runs none of the App", c.Name)
			}
		}
	}, 120*time.Second, 250*time.Millisecond, "every cluster's slices after zone c's return")
	t.Logf("zone c back: the App runs in %v, whose slices list its %d ready pods", running, 3)

	// Deleted: no Service, no slice left anywhere.
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, name))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			_, err := c.Client.CoreV1().Services(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
			assert.Error(ct, err, "the Service in %s", c.Name)
			l, err := c.Client.DiscoveryV1().EndpointSlices(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelEndpointSliceManagedBy + "=" + api.ManagedByAtoll})
			if assert.NoError(ct, err) {
				assert.Empty(ct, l.Items, "managed slices in %s", c.Name)
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "the App's Services and slices are removed with it")
}

// assertServingPod checks one live pod's container model and identity.
func assertServingPod(ct *assert.CollectT, c *testenv.Cluster, p *corev1.Pod) {
	if !assert.Len(ct, p.Spec.Containers, 1) {
		return
	}
	k := p.Spec.Containers[0]
	assert.Equal(ct, "/srv", k.WorkingDir)
	if assert.NotNil(ct, k.ReadinessProbe) && assert.NotNil(ct, k.ReadinessProbe.HTTPGet) {
		assert.Equal(ct, "/ready", k.ReadinessProbe.HTTPGet.Path)
		assert.Equal(ct, intstr.FromString("http"), k.ReadinessProbe.HTTPGet.Port)
		assert.Equal(ct, int32(2), k.ReadinessProbe.PeriodSeconds)
	}
	if assert.NotNil(ct, k.LivenessProbe) {
		assert.NotNil(ct, k.LivenessProbe.TCPSocket)
	}
	if assert.NotNil(ct, k.Lifecycle) && assert.NotNil(ct, k.Lifecycle.PreStop) && assert.NotNil(ct, k.Lifecycle.PreStop.Sleep) {
		assert.Equal(ct, int64(5), k.Lifecycle.PreStop.Sleep.Seconds)
	}
	if assert.NotNil(ct, p.Spec.TerminationGracePeriodSeconds) {
		assert.Equal(ct, int64(40), *p.Spec.TerminationGracePeriodSeconds)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range k.Env {
		env[e.Name] = e
	}
	for n, v := range map[string]string{
		api.EnvRegion: region.Name, api.EnvZone: c.Zone, api.EnvCluster: c.Name,
		api.EnvProject: project, api.EnvKind: api.KindApp, api.EnvWorkload: p.Labels[api.LabelWorkload],
		"GREETING": "hello from $(ATOLL_ZONE)",
	} {
		assert.Equal(ct, v, env[n].Value, "%s in %s/%s", n, c.Name, p.Name)
	}
	for n, path := range map[string]string{api.EnvPodName: "metadata.name", api.EnvPodNamespace: "metadata.namespace", api.EnvPodIP: "status.podIP", api.EnvNodeName: "spec.nodeName"} {
		if assert.NotNil(ct, env[n].ValueFrom, n) && assert.NotNil(ct, env[n].ValueFrom.FieldRef, n) {
			assert.Equal(ct, path, env[n].ValueFrom.FieldRef.FieldPath, n)
		}
	}
	for l, v := range map[string]string{api.LabelProject: project, api.LabelKind: "app", api.LabelZone: c.Zone} {
		assert.Equal(ct, v, p.Labels[l], "label %s of %s/%s", l, c.Name, p.Name)
	}
}

// TestServingMistakesRefused: each mistake of the container model and a
// user variable of the platform's identity get 422 naming the field, and
// nothing is written.
func TestServingMistakesRefused(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	for _, tc := range apitest.BadSpecs {
		if !slices.Contains(servingMistakes, tc.Name) {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			_, err := cl.Submit(ctx, []byte(tc.Doc))
			var re *busclient.Error
			require.True(t, errors.As(err, &re), "refused: %v", err)
			assert.Equal(t, 422, re.Status)
			var fields []string
			for _, f := range re.Body.Fields {
				fields = append(fields, f.Field+" "+f.Code)
			}
			assert.Contains(t, fields, tc.Field+" "+tc.Code)
			w, err := api.Decode([]byte(tc.Doc))
			if err == nil {
				got, err := cl.Workload(ctx, w.Key())
				assert.NoError(t, err)
				assert.Nil(t, got, "nothing is written")
			}
		})
	}

	// The maximum grace period is the platform's (admission's
	// -max-termination-grace-period-seconds, 300 here): the refusal names
	// the field and the maximum; at the maximum the App is admitted.
	t.Run("grace period names the platform's maximum", func(t *testing.T) {
		doc := func(grace int) []byte {
			return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"grace"},
"spec":{"replicas":0,"template":{"terminationGracePeriodSeconds":%d,"containers":[{"name":"a","image":"x"}]}}}`, project, grace))
		}
		_, err := cl.Submit(ctx, doc(api.DefaultMaxTerminationGracePeriodSeconds+1))
		var re *busclient.Error
		require.True(t, errors.As(err, &re), "refused: %v", err)
		assert.Equal(t, 422, re.Status)
		assert.Equal(t, api.FieldErrors{{Field: "spec.template.terminationGracePeriodSeconds", Code: api.CodeTooLarge,
			Reason: "301 exceeds the platform's maximum of 300 seconds"}}, re.Body.Fields)
		got, err := cl.Workload(ctx, api.Key(project, api.KindApp, "grace"))
		require.NoError(t, err)
		assert.Nil(t, got, "nothing is written")
		_, err = cl.Submit(ctx, doc(api.DefaultMaxTerminationGracePeriodSeconds))
		require.NoError(t, err, "at the maximum")
		require.NoError(t, cl.Delete(ctx, project, api.KindApp, "grace"))
	})
}

// servingMistakes are the apitest.BadSpecs of this suite's scope.
var servingMistakes = []string{
	"probe without a handler", "probe with two handlers", "probe on an unknown port name", "startup probe success threshold",
	"hook without a handler", "probe on an init container", "port name too long", "duplicate port name",
	"grace period over the maximum", "relative working dir", "identity variable", "downward identity variable",
}

func othersThan(cluster string) []string {
	var out []string
	for _, c := range reg.Env.Clusters {
		if c.Name != cluster {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// atoll runs the CLI in process against the region's gateway.
func atoll(t *testing.T, args ...string) string {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--config", filepath.Join(t.TempDir(), "config.yaml"),
		"--server", reg.GatewayURL, "--token", reg.AdminToken, "-p", project}, args...))
	require.NoError(t, root.Execute(), "atoll %s: %s", strings.Join(args, " "), errOut.String())
	return out.String()
}

// TestReadinessDecidesEndpoints: a pod that turns not ready (KWOK's
// pod-unready stage, as a failing readiness probe) leaves every cluster's
// slices and the API's ready endpoints, and lowers the App's ready count.
func TestReadinessDecidesEndpoints(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	const name = "ready"
	key := api.Key(project, api.KindApp, name)
	_, err := cl.Submit(ctx, webDoc(name, 3))
	require.NoError(t, err)
	var all map[string]string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		all, err = readyAddresses(ctx, name)
		if !assert.NoError(ct, err) || !assert.Len(ct, all, 3) {
			return
		}
		for _, c := range runningIn(ctx, ct, name) {
			got, err := sliceAddresses(ctx, c, name)
			if assert.NoError(ct, err) {
				assert.Equal(ct, all, got, "the slices of %s", c.Name)
			}
		}
		st, err := cl.Status(ctx, key)
		if assert.NoError(ct, err) && assert.NotNil(ct, st) {
			assert.Equal(ct, int32(3), st.Ready)
		}
	}, 60*time.Second, 250*time.Millisecond, "three ready endpoints everywhere")

	// One pod of zone b turns not ready.
	zb := reg.Env.Cluster("zone-b")
	pods, err := livePods(ctx, zb, name)
	require.NoError(t, err)
	require.Len(t, pods, 1)
	sick := pods[0]
	_, err = zb.Client.CoreV1().Pods(sick.Namespace).Patch(ctx, sick.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"unready.stage.kwok.x-k8s.io":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := zb.Client.CoreV1().Pods(sick.Namespace).Get(ctx, sick.Name, metav1.GetOptions{})
		if !assert.NoError(ct, err) || !assert.False(ct, podReady(p), "the pod is still ready") {
			return
		}
		for _, c := range runningIn(ctx, ct, name) {
			got, err := sliceAddresses(ctx, c, name)
			if assert.NoError(ct, err) {
				assert.NotContains(ct, got, sick.Status.PodIP, "the slices of %s", c.Name)
				assert.Len(ct, got, 2, "the slices of %s", c.Name)
			}
		}
		st, err := cl.Status(ctx, key)
		if assert.NoError(ct, err) && assert.NotNil(ct, st) {
			assert.Equal(ct, int32(2), st.Ready, "the App's ready count")
		}
		var eps computeapi.Endpoints
		if assert.NoError(ct, json.Unmarshal([]byte(atoll(t, "endpoints", "app", name, "-o", "json")), &eps)) {
			for _, e := range eps.Endpoints {
				if e.Pod == sick.Name {
					assert.False(ct, e.Ready, "the API lists %s as ready", e.Pod)
				}
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "the not-ready pod leaves the endpoints")
	t.Logf("a pod turned not ready: it left every cluster's slices and the App's ready count within %v", time.Since(start).Round(time.Millisecond))
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, name))
}

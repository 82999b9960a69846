package attack

// Hardened tenant pods and confined debug paths: as a developer of a
// project, through the gateway's HTTP API, each escape out of the pod
// boundary is refused with its documented status, names the field, and
// writes nothing; what is admitted is rendered hardened, in a namespace
// whose Pod Security admission enforces restricted.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// podsRequest sends one request to the gateway as token and returns the
// status and body: every request of this file goes through it.
func podsRequest(t testing.TB, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, reg.GatewayURL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// podsSDK is the SDK on the same client, for exec's WebSocket.
func podsSDK(t testing.TB, token string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(token), sdk.WithHTTPClient(httpc))
	require.NoError(t, err)
	return c
}

// podsApp is an App document with tiny requests; extra is spliced into
// its spec, template what its template adds beside the container.
func podsApp(name string, replicas int, spec, template string) []byte {
	return []byte(fmt.Sprintf(`{"kind":"App","metadata":{"name":%q},"spec":{%s"replicas":%d,"template":{%s"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"8Mi"}}}]}}}`,
		name, spec, replicas, template))
}

// workloadsRevision is the workloads bucket's last revision and keys.
func workloadsRevision(t testing.TB) (uint64, []string) {
	t.Helper()
	ctx := context.Background()
	kv, err := reg.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	require.True(t, ok, "bucket status %T", st)
	var keys []string
	l, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return bs.StreamInfo().State.LastSeq, keys
}

// nothingInClusters checks that no member cluster holds an object of
// the workload name in project's namespace.
func nothingInClusters(t testing.TB, project, name string) {
	t.Helper()
	ctx := context.Background()
	ns := api.Namespace(project)
	for _, c := range reg.Env.Clusters {
		_, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: Deployment %s/%s: %v", c.Name, ns, name, err)
		_, err = c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: Pod %s/%s: %v", c.Name, ns, name, err)
		_, err = c.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: Job %s/%s: %v", c.Name, ns, name, err)
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		if assert.NoError(t, err) {
			assert.Empty(t, pods.Items, "%s: pods of %s", c.Name, name)
		}
	}
}

// errorBody decodes the gateway's error document.
func errorBody(t testing.TB, b []byte) computeapi.Error {
	t.Helper()
	var e computeapi.Error
	require.NoError(t, json.Unmarshal(b, &e), "error body %s", b)
	return e
}

// podsProject gets a project with room for the suite's Apps.
func podsProject(t *testing.T, project string) string {
	t.Helper()
	require.NoError(t, cl.SetQuota(context.Background(), project, api.TierOnDemand,
		api.Limit{MilliCPU: ptr.To[int64](100_000), MemoryBytes: ptr.To[int64](1 << 40), Pods: ptr.To[int64](1000)}))
	return reg.Token("attacker@"+project, false, map[string]string{project: "developer"})
}

// TestPodEscapesAreRefused: each way out of the pod boundary is refused
// with its documented status, naming the field, and writes nothing: no
// revision in the workloads bucket, no object in any member cluster.
func TestPodEscapesAreRefused(t *testing.T) {
	e2e.Need(t)
	const project = "attack-pods"
	dev := podsProject(t, project)
	tests := []struct {
		name   string
		doc    []byte
		status int
		field  string
	}{
		{"privileged", []byte(`{"kind":"App","metadata":{"name":"priv"},"spec":{"template":{"containers":[{"name":"web","image":"nginx","privileged":true}]}}}`),
			http.StatusForbidden, "spec.template.containers[0].privileged"},
		{"host path", []byte(`{"kind":"App","metadata":{"name":"hostpath"},"spec":{"template":{"volumes":[{"name":"root","hostPath":"/"}],"containers":[{"name":"web","image":"nginx","volumeMounts":[{"name":"root","mountPath":"/host"}]}]}}}`),
			http.StatusForbidden, "spec.template.volumes[0].hostPath"},
		{"host network", podsApp("hostnet", 1, "", `"hostNetwork":true,`),
			http.StatusForbidden, "spec.template.hostNetwork"},
		{"toleration Exists without key", podsApp("tolerall", 1, `"placement":{"tolerations":[{"operator":"Exists"}]},`, ""),
			http.StatusUnprocessableEntity, "spec.placement.tolerations[0].key"},
		{"nodeSelector on the Reserved pool", podsApp("reserved", 1, `"placement":{"nodeSelector":{"atoll.dev/tier":"Reserved"}},`, ""),
			http.StatusUnprocessableEntity, "spec.placement.nodeSelector.atoll.dev/tier"},
		{"the Reserved taint tolerated", podsApp("reservedtol", 1, `"placement":{"tolerations":[{"key":"atoll.dev/tier","operator":"Equal","value":"Reserved","effect":"NoSchedule"}]},`, ""),
			http.StatusUnprocessableEntity, "spec.placement.tolerations[0].key"},
		{"node affinity (no such field: the gateway refuses it as unknown)", podsApp("affinity", 1, `"placement":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"atoll.dev/tier","operator":"In","values":["Reserved"]}]}]}}}},`, ""),
			http.StatusBadRequest, "affinity"},
		{"a chosen ServiceAccount", podsApp("sa", 1, "", `"serviceAccount":"admin",`),
			http.StatusUnprocessableEntity, "spec.template.serviceAccount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var doc struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal(tc.doc, &doc))
			rev, keys := workloadsRevision(t)
			status, b := podsRequest(t, http.MethodPost, "/v1/projects/"+project+"/workloads", dev, tc.doc)
			require.Equal(t, tc.status, status, "%s", b)
			e := errorBody(t, b)
			named := false
			for _, f := range e.Fields {
				named = named || strings.HasSuffix(f.Field, tc.field)
			}
			assert.True(t, named, "no field %s in %s", tc.field, b)
			rev2, keys2 := workloadsRevision(t)
			assert.Equal(t, rev, rev2, "the workloads bucket's revision moved")
			assert.ElementsMatch(t, keys, keys2, "the workloads bucket's keys")
			nothingInClusters(t, project, doc.Metadata.Name)
		})
	}
}

// TestDebugEscapesAreRefused: a developer cannot exec into the platform's
// sidecar nor an init container (403), and cannot open a log session over
// every container of a 200-replica App (422 saying how to narrow it);
// neither writes anything. Narrowed, the session is served.
func TestDebugEscapesAreRefused(t *testing.T) {
	e2e.Need(t)
	const project = "attack-debug"
	dev := podsProject(t, project)
	base := "/v1/projects/" + project + "/workloads"

	// Exec: an App with an init container of its own, beside the
	// platform's sidecar (admission's log shipper).
	status, b := podsRequest(t, http.MethodPost, base, dev, podsApp("shell", 1, "",
		`"initContainers":[{"name":"setup","image":"busybox","command":["true"]}],`))
	require.Equal(t, http.StatusCreated, status, "%s", b)
	many := podsApp("many", 200, "", "")
	status, b = podsRequest(t, http.MethodPost, base, dev, many)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	t.Cleanup(func() {
		podsRequest(t, http.MethodDelete, base+"/app/shell", dev, nil)
		podsRequest(t, http.MethodDelete, base+"/app/many", dev, nil)
	})
	waitReady := func(name string, ready int32) {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, b := podsRequest(t, http.MethodGet, base+"/app/"+name, dev, nil)
			var w computeapi.Workload
			require.NoError(ct, json.Unmarshal(b, &w), "%s", b)
			assert.Equal(ct, ready, w.Status.Ready, "ready replicas of %s", name)
		}, 3*time.Minute, time.Second)
	}
	waitReady("shell", 1)

	c := podsSDK(t, dev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := c.Exec(ctx, project, "app", "shell", computeapi.ExecShellParams{Command: []string{"true"}, Container: "web"}, nil, nil, nil, nil)
	require.NoError(t, err, "exec into the workload's own container")
	require.Equal(t, 0, code)
	for _, container := range []string{"atoll-log-shipper", "setup"} {
		t.Run("exec into "+container, func(t *testing.T) {
			rev, keys := workloadsRevision(t)
			_, err := c.Exec(ctx, project, "app", "shell", computeapi.ExecShellParams{Command: []string{"true"}, Container: container}, nil, nil, nil, nil)
			assert.True(t, sdk.IsForbidden(err), "exec into %s: %v, want 403", container, err)
			rev2, keys2 := workloadsRevision(t)
			assert.Equal(t, rev, rev2, "the workloads bucket's revision moved")
			assert.ElementsMatch(t, keys, keys2)
		})
	}

	// Logs: every container of 200 replicas is too many for one session.
	waitReady("many", 200)
	t.Run("log session over 200 replicas", func(t *testing.T) {
		rev, keys := workloadsRevision(t)
		for _, q := range []string{"", "?container=web"} {
			status, b := podsRequest(t, http.MethodGet, base+"/app/many/logs"+q, dev, nil)
			require.Equal(t, http.StatusUnprocessableEntity, status, "logs%s: %s", q, b)
			e := errorBody(t, b)
			for _, want := range []string{"container", "zone", "pod", "50"} {
				assert.Contains(t, e.Message, want, "logs%s: the refusal says how to narrow", q)
			}
		}
		rev2, keys2 := workloadsRevision(t)
		assert.Equal(t, rev, rev2, "the workloads bucket's revision moved")
		assert.ElementsMatch(t, keys, keys2)
	})
	t.Run("log session narrowed to one pod", func(t *testing.T) {
		pod := ""
		for _, c := range reg.Env.Clusters {
			pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(context.Background(),
				metav1.ListOptions{LabelSelector: api.LabelWorkload + "=many"})
			require.NoError(t, err)
			if len(pods.Items) > 0 {
				pod = pods.Items[0].Name
				break
			}
		}
		require.NotEmpty(t, pod, "no pod of many in any cluster")
		status, b := podsRequest(t, http.MethodGet, base+"/app/many/logs?tail=1&pod="+pod, dev, nil)
		require.Equal(t, http.StatusOK, status, "%s", b)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l computeapi.LogLine
			require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
			assert.Equal(t, pod, l.Pod)
		}
	})
}

// TestRenderedPodsAreHardened: an admitted App's pods carry no
// ServiceAccount token and the restricted securityContext on every
// container (the platform's sidecar included), their scratch directory a
// size limit; the namespace enforces Pod Security restricted, which the
// member cluster applies for real: a privileged pod is refused there.
func TestRenderedPodsAreHardened(t *testing.T) {
	e2e.Need(t)
	const project = "attack-hardened"
	dev := podsProject(t, project)
	base := "/v1/projects/" + project + "/workloads"
	doc := []byte(`{"kind":"App","metadata":{"name":"web"},"spec":{"replicas":3,"template":{"volumes":[{"name":"scratch","emptyDir":true}],
"containers":[{"name":"web","image":"nginx:1.27","volumeMounts":[{"name":"scratch","mountPath":"/tmp"}],"resources":{"requests":{"cpu":"10m","memory":"8Mi"}}}]}}}`)
	status, b := podsRequest(t, http.MethodPost, base, dev, doc)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	t.Cleanup(func() { podsRequest(t, http.MethodDelete, base+"/app/web", dev, nil) })

	ns := api.Namespace(project)
	ctx := context.Background()
	var pod corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var all []corev1.Pod
		for _, c := range reg.Env.Clusters {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=web"})
			require.NoError(ct, err)
			all = append(all, pods.Items...)
		}
		require.NotEmpty(ct, all, "pods of web in any cluster")
		pod = all[0]
	}, 2*time.Minute, time.Second)

	spec := pod.Spec
	assert.Equal(t, ptr.To(false), spec.AutomountServiceAccountToken, "automountServiceAccountToken")
	assert.Contains(t, []string{"", "default"}, spec.ServiceAccountName, "the namespace's default ServiceAccount")
	require.NotNil(t, spec.SecurityContext)
	assert.Equal(t, ptr.To(true), spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, spec.SecurityContext.SeccompProfile)
	var names []string
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		names = append(names, c.Name)
		if assert.NotNil(t, c.SecurityContext, c.Name) {
			assert.Equal(t, ptr.To(false), c.SecurityContext.AllowPrivilegeEscalation, c.Name)
			assert.Equal(t, ptr.To(true), c.SecurityContext.RunAsNonRoot, c.Name)
			assert.Equal(t, &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, c.SecurityContext.Capabilities, c.Name)
		}
	}
	assert.Contains(t, names, "atoll-log-shipper", "the platform's sidecar is hardened too")
	found := false
	for _, v := range spec.Volumes {
		if v.Name == "scratch" {
			found = true
			if assert.NotNil(t, v.EmptyDir) && assert.NotNil(t, v.EmptyDir.SizeLimit) {
				assert.True(t, v.EmptyDir.SizeLimit.Equal(resource.MustParse(api.DefaultScratchSize)), "sizeLimit %v", v.EmptyDir.SizeLimit)
			}
		}
	}
	assert.True(t, found, "scratch volume in %v", spec.Volumes)

	namespaces := 0
	for _, c := range reg.Env.Clusters {
		n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // no shard there
		}
		if !assert.NoError(t, err, c.Name) {
			continue
		}
		namespaces++
		for _, mode := range []string{"enforce", "audit", "warn"} {
			assert.Equal(t, "restricted", n.Labels["pod-security.kubernetes.io/"+mode], "%s: %s", c.Name, mode)
		}
	}
	assert.Positive(t, namespaces, "the namespace %s in no cluster", ns)

	// The member cluster enforces it: even its admin cannot put a
	// privileged pod in the tenant namespace.
	host := reg.Env.Clusters[0]
	for _, c := range reg.Env.Clusters {
		if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			host = c
		}
	}
	_, err := host.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "escape"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "busybox",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
	}, metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err) && strings.Contains(err.Error(), "restricted"), "privileged pod in %s: %v", ns, err)
}
